"""What a :class:`~cache.store.CacheStore` reports: its state, its counters, its counts
and sizes, and a change of its number of variants.

Plain values, made by the store and read by its callers (the loader, the ``dataplane
cache`` commands): :class:`StoreState` (whether a store admits records),
:class:`StoreStats` (one store's counters), :class:`CacheInfo` (what
:meth:`~cache.store.CacheStore.info` reports) and :class:`VariantsChange` (a store
opened a cache with another number of variants than its metadata had).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from cache.meta import CacheMeta
from cache.room import has_room


class StoreState(str, enum.Enum):
    """Whether a store admits new records (it always serves what it holds)."""

    ADMITTING = "admitting"
    FULL = "full"
    FAILED = "failed"
    READ_ONLY = "read-only"
    #: Another process rebuilt the cache: this store neither serves nor admits.
    STALE = "stale"


@dataclasses.dataclass
class StoreStats:
    """Counters of one store object in one process.

    Attributes
    ----------
    hits, misses : int
        Samples found / not found by :meth:`~cache.store.CacheStore.get_batch`.
    corrupt : int
        Records that failed their check when read (reported as misses).
    written : int
        Records written by this store.
    dropped : int
        Corrupt records deleted by this store.
    """

    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    written: int = 0
    dropped: int = 0


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What :meth:`~cache.store.CacheStore.info` reports.

    Attributes
    ----------
    path : str
        Cache directory.
    meta : CacheMeta
        The stored metadata.
    state : StoreState
        This store's state.
    counts : dict of int to int
        Complete records per variant in use (``0 .. variants - 1``).
    records : int
        Records of the variants in use (what ``expected_records`` counts).
    file_bytes : int
        Size of ``data.mdb`` on disk, in bytes.
    used_bytes : int
        Bytes of the pages holding records and metadata (what ``max_bytes``
        bounds); ``data.mdb`` also holds free pages, reused by the next fill.
    max_bytes : int
        The size bound in force, in bytes (see :mod:`cache.room` and
        :attr:`~cache.store.CacheStore.max_bytes`).
    record_bytes : int
        Bytes one record occupies in LMDB (payload, header, checksum, page
        overhead).
    map_bytes : int
        LMDB's map size in this process: the hard bound of ``data.mdb``, in bytes
        (``max_bytes`` plus :func:`~cache.env.map_headroom`, or what another process set).
    bookkeeping_bytes : int
        The part of ``max_bytes`` kept for LMDB's bookkeeping
        (:data:`~cache.room.BOOKKEEPING_PAGES` pages), in bytes: records and metadata fill
        at most ``max_bytes - bookkeeping_bytes``.
    next_record_bytes : int
        The most bytes one more record may add to ``used_bytes``: its overflow
        pages and one new page per level of the records' tree plus a new root (a
        split at every level), in bytes. The cache is full when they do not fit
        (:func:`~cache.room.has_room`).
    unused : dict of int to int
        Records outside the metadata per variant (variants ``>= variants`` left
        from a configuration with more variants): kept, never served, counted in
        ``used_bytes``; ``dataplane cache verify --repair`` deletes them.
    """

    path: str
    meta: CacheMeta
    state: StoreState
    counts: dict[int, int]
    records: int
    file_bytes: int
    used_bytes: int
    max_bytes: int
    record_bytes: int
    map_bytes: int = 0
    bookkeeping_bytes: int = 0
    unused: dict[int, int] = dataclasses.field(default_factory=dict)
    next_record_bytes: int = 0

    @property
    def unused_records(self) -> int:
        """Records outside the metadata (see ``unused``)."""
        return sum(self.unused.values())

    @property
    def bytes_per_sample(self) -> float:
        """Used bytes per record stored, unused ones included (0 when empty)."""
        stored = self.records + self.unused_records
        return self.used_bytes / stored if stored else 0.0

    @property
    def full(self) -> bool:
        """True when one more record would not fit in ``max_bytes``
        (:func:`~cache.room.has_room`, as the writers decide), or the store stopped
        admitting for lack of room."""
        return self.state is StoreState.FULL or not has_room(
            self.used_bytes, self.next_record_bytes, self.max_bytes - self.bookkeeping_bytes
        )

    @property
    def expected_records(self) -> int:
        """Records of a complete cache: samples times variants."""
        return self.meta.identity.num_samples * self.meta.variants

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for JSON)."""
        ident = self.meta.identity
        return {
            "path": self.path,
            "schema_version": self.meta.schema_version,
            "recipe_fingerprint": ident.recipe_fingerprint,
            "dataset_fingerprint": ident.dataset_fingerprint,
            "recipe_description": (
                ident.recipe_description.to_doc() if ident.recipe_description is not None else None
            ),
            "dataset_description": (
                ident.dataset_description.to_doc()
                if ident.dataset_description is not None
                else None
            ),
            "sample_shape": list(ident.sample_shape),
            "dtype": self.meta.dtype,
            "layout": self.meta.layout,
            "num_samples": ident.num_samples,
            "variants": self.meta.variants,
            "created": self.meta.created,
            "state": self.state.value,
            "counts": {str(k): v for k, v in sorted(self.counts.items())},
            "records": self.records,
            "expected_records": self.expected_records,
            "unused_counts": {str(k): v for k, v in sorted(self.unused.items())},
            "unused_records": self.unused_records,
            "file_bytes": self.file_bytes,
            "used_bytes": self.used_bytes,
            "max_bytes": self.max_bytes,
            "record_bytes": self.record_bytes,
            "map_bytes": self.map_bytes,
            "bookkeeping_bytes": self.bookkeeping_bytes,
            "next_record_bytes": self.next_record_bytes,
            "bytes_per_sample": self.bytes_per_sample,
            "full": self.full,
        }


def _variant_span(first: int, last: int) -> str:
    return f"variant {first}" if first == last else f"variants {first}..{last}"


@dataclasses.dataclass(frozen=True)
class VariantsChange:
    """A store opened a cache with another number of variants than its metadata had,
    and rewrote the metadata (see :attr:`~cache.store.CacheStore.variants_change`).

    Attributes
    ----------
    path : str
        The cache directory.
    old : int
        Variants in the metadata before.
    new : int
        Variants now (this store's ``CacheConfig.variants``).
    unused : int
        Records of variants ``new .. old - 1``, kept but never served at ``new``
        variants (0 when the count grew).
    """

    path: str
    old: int
    new: int
    unused: int

    @property
    def message(self) -> str:
        """What changed and, when records are left unused, how to use or delete them."""
        if self.new > self.old:
            return (
                f"the cache at {self.path} now keeps variants={self.new} instead of "
                f"{self.old}: {_variant_span(self.old, self.new - 1)} are served from the "
                "records it holds and filled where missing"
            )
        head = (
            f"the cache at {self.path} was built with variants={self.old} and now keeps "
            f"variants={self.new}"
        )
        if not self.unused:
            return f"{head}; it holds no records of {_variant_span(self.new, self.old - 1)}"
        return (
            f"{head}: its {self.unused} records of {_variant_span(self.new, self.old - 1)} are "
            f"kept but unused (never served, still counted against max_bytes) until "
            f"`dataplane cache verify --repair {self.path}` deletes them; variants={self.old} "
            "would serve them again"
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for JSON)."""
        return {"from": self.old, "to": self.new, "unused_records": self.unused}
