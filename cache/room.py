"""Room in a cache: the bytes its records take in LMDB's pages, and whether one more fits.

``max_bytes`` bounds the pages holding records and metadata, plus
:data:`BOOKKEEPING_PAGES` pages for LMDB's own trees (:func:`data_limit` is what
records and metadata may fill). The cache is full when the pages one more record may
add (:func:`next_record_bytes`: its overflow pages plus a split at every level of the
records' tree) would go beyond it: :func:`has_room`, the one definition of a full
cache, used by the writes of :class:`~cache.store.CacheStore` and by
:attr:`~cache.info.CacheInfo.full` alike.

Every count here is of whole pages (``psize`` bytes, the page size of the cache's
environment) read from LMDB's statistics in O(1), except :func:`record_bytes`, the
bytes one record occupies, computed from LMDB's node layout.
"""

from __future__ import annotations

import lmdb

from cache.env import SharedEnv
from cache.record import KEY_SIZE

#: Pages of ``max_bytes`` kept for LMDB's bookkeeping (its meta pages, the main and
#: free-page trees and the copies a transaction makes): data stops this far short.
BOOKKEEPING_PAGES = 16


def has_room(used_bytes: int, next_record_bytes: int, limit_bytes: int) -> bool:
    """Whether one more record fits: the one definition of a full cache.

    Used by the writes of :class:`~cache.store.CacheStore` (which stop admitting once
    it is False) and by :attr:`~cache.info.CacheInfo.full` (``dataplane cache info``),
    so that both call the same cache full.

    Parameters
    ----------
    used_bytes : int
        Bytes of the pages holding records and metadata, in bytes.
    next_record_bytes : int
        The most bytes one more record may add, in bytes
        (:attr:`~cache.info.CacheInfo.next_record_bytes`).
    limit_bytes : int
        What records and metadata may fill: ``max_bytes`` less the bookkeeping
        pages, in bytes.
    """
    return used_bytes + next_record_bytes <= limit_bytes


def data_limit(max_bytes: int, psize: int) -> int:
    """What records and metadata may fill: ``max_bytes`` less :data:`BOOKKEEPING_PAGES`
    pages of ``psize`` bytes, in bytes."""
    return max_bytes - BOOKKEEPING_PAGES * psize


def _node_max(psize: int) -> int:
    """Largest node (8-byte header, key and value) LMDB keeps in a leaf page of ``psize``
    bytes; a larger value goes to overflow pages."""
    return (((psize - 16) // 2) & ~1) - 2


def used_bytes(txn: lmdb.Transaction, shared: SharedEnv) -> int:
    """Bytes of the pages holding records and metadata as ``txn`` sees them (O(1))."""
    pages = 3  # LMDB's two meta pages and the main database's root
    for db in (shared.records, shared.meta):
        stat = txn.stat(db)
        pages += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
    return pages * shared.psize


def next_record_bytes(txn: lmdb.Transaction, shared: SharedEnv, record_size: int) -> int:
    """The most bytes one more record may add to :func:`used_bytes` (see
    :attr:`~cache.info.CacheInfo.next_record_bytes`): its overflow pages (none when it
    fits in a leaf page), and a split at every level of the records' tree plus a new root.

    Parameters
    ----------
    txn : lmdb.Transaction
        A transaction of the cache's environment.
    shared : SharedEnv
        The cache's environment.
    record_size : int
        Bytes of one stored value (payload, header and checksum), in bytes.
    """
    psize = shared.psize
    own = 0 if 8 + KEY_SIZE + record_size <= _node_max(psize) else -(-(record_size + 16) // psize)
    depth = int(txn.stat(shared.records)["depth"])
    return (own + depth + 1) * psize


def record_bytes(record_size: int, psize: int) -> int:
    """Bytes one record of ``record_size`` value bytes occupies in LMDB with pages of
    ``psize`` bytes (:attr:`~cache.info.CacheInfo.record_bytes`).

    LMDB stores a node (8-byte header + key + value) in the leaf page when it fits in
    half a page, else the value in overflow pages (16-byte header) and a node with a
    page number in the leaf; plus a 2-byte slot pointer.
    """
    if 8 + KEY_SIZE + record_size <= _node_max(psize):
        return 8 + KEY_SIZE + record_size + 2
    return -(-(record_size + 16) // psize) * psize + 8 + KEY_SIZE + 8 + 2
