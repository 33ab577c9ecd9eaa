"""Clearing a cache whole: every record (and the metadata), or its damaged files.

:func:`drop_all` deletes every record in one transaction (what
:meth:`~cache.store.CacheStore.clear` and :func:`reset_cache` do). :func:`reset_cache`
and :func:`remove_damaged` work on a cache that :class:`~cache.store.CacheStore`
refuses to open (unreadable metadata, a damaged ``data.mdb``): ``dataplane cache
clear`` falls back to them.

On failure: clearing a read-only cache, or a clearing transaction that fails, raises
:class:`~cache.errors.CacheError` naming the cache and deletes nothing (the transaction
is aborted; a damaged page is a :class:`~cache.errors.DamagedCacheError`).
"""

from __future__ import annotations

import os
from pathlib import Path

import lmdb

from cache.env import SharedEnv, acquire, lmdb_failure, release, remove_files, settle, write_txn
from cache.errors import CacheError
from cache.meta import META_KEY


def reset_cache(path: str | os.PathLike[str]) -> int:
    """Delete every record and the metadata of the cache at ``path``.

    For a cache whose metadata is unreadable (:class:`~cache.errors.UnreadableMetaError`),
    which :meth:`~cache.store.CacheStore.open_existing` refuses: ``dataplane cache clear``
    falls back to it. The next :class:`~cache.store.CacheStore` opened there writes new
    metadata.

    Parameters
    ----------
    path : str or os.PathLike
        The cache directory.

    Returns
    -------
    int
        Records deleted.

    Raises
    ------
    CacheError
        If there is no cache at ``path`` or it cannot be written.
    """
    where = Path(path)
    if where.exists() and not where.is_dir():
        raise CacheError(f"cache path {where} exists and is not a directory; check the path")
    shared = acquire(where, None, create=False)
    try:
        return drop_all(shared, where, metadata=True)
    finally:
        release(where, shared)


def remove_damaged(path: str | os.PathLike[str]) -> list[str]:
    """:func:`cache.env.remove_files` for a cache directory given as any path: delete the
    ``data.mdb`` and ``lock.mdb`` of the damaged cache at ``path``, nothing else.

    For a cache that raised :class:`~cache.errors.DamagedCacheError` and whose records
    cannot be cleared: ``dataplane cache clear`` falls back to it, and the next
    :class:`~cache.store.CacheStore` opened there creates the cache anew. Returns the
    names of the files deleted; raises :class:`CacheError` if ``path`` is not a
    directory, or as :func:`~cache.env.remove_files` does.
    """
    where = Path(path)
    if not where.is_dir():
        raise CacheError(f"cache path {where} is not a directory; check the path")
    return remove_files(where)


def drop_all(shared: SharedEnv, where: Path, *, metadata: bool) -> int:
    """Delete every record (and with ``metadata``, the metadata) in one transaction, then
    :func:`~cache.env.settle` so the next fill reuses the pages; returns the records deleted.

    Parameters
    ----------
    shared : SharedEnv
        The cache's environment in this process.
    where : Path
        The cache directory (for messages).
    metadata : bool
        Also delete the metadata document.

    Raises
    ------
    CacheError
        If the cache is read-only or the transaction fails (a
        :class:`~cache.errors.DamagedCacheError` for a damaged page); nothing is deleted.
    """
    if shared.readonly:
        raise CacheError(f"cannot clear: the cache at {where} is read-only")
    try:
        with write_txn(shared) as txn:
            count = int(txn.stat(shared.records)["entries"])
            txn.drop(shared.records, delete=False)
            if metadata:
                txn.delete(META_KEY, db=shared.meta)
    except lmdb.Error as exc:
        raise lmdb_failure(where, exc, "clearing") from exc
    settle(shared)
    return count
