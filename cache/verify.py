"""Verify a cache: checksums, structure and counts; optionally drop corrupt records.

Serving checks every record it reads (:meth:`cache.store.CacheStore.get_batch`);
verification checks all of them at once: each record's key, size, header and
xxh3 checksum, and whether its index and variant are within the cache's
metadata. Corrupt records are reported as ``(index, variant)``; with
``repair=True`` they are deleted so that serving produces and refills them.

Records outside the metadata (variants beyond ``variants`` after the cache was
reopened with fewer, for example 4 -> 2) are never served but still count
against ``max_bytes``; they are reported as unused, and ``repair=True``
deletes them too. Opening a cache with fewer variants keeps them (another
process may still use the larger setting) and says so
(:attr:`cache.store.CacheStore.variants_change`: a ``CacheWarning`` from the
loader, a line of ``dataplane cache build``; ``dataplane cache info`` counts them
apart): ``dataplane cache verify --repair`` is how they are dropped.

A damaged file (a page LMDB cannot read, or a key in the records that is not a record
key: :class:`~cache.errors.DamagedCacheError`) stops the check: the report says so
(:attr:`VerifyReport.damaged`, with the fix) and is not clean, and nothing is repaired,
as dropping records cannot mend it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from cache.env import damaged
from cache.errors import CorruptRecordError, DamagedCacheError
from cache.record import check_record, malformed_key, unpack_key
from cache.store import CacheStore


@dataclasses.dataclass
class VerifyReport:
    """Outcome of :func:`verify`.

    Attributes
    ----------
    path : str
        The cache.
    checked : int
        Records read.
    ok : int
        Records that passed every check.
    corrupt : list of (int, int)
        ``(index, variant)`` of records that failed, in key order.
    out_of_range : list of (int, int)
        Valid records whose index or variant lies outside the metadata (never
        served; deleted by ``repair=True``).
    counts : dict of int to int
        Valid records per variant.
    expected : int
        Records of a complete cache (samples x variants).
    repaired : int
        Corrupt records deleted (``repair=True``).
    dropped_unused : int
        Records outside the metadata deleted (``repair=True``).
    damaged : str or None
        Why the check stopped: the cache's file is damaged (the message of the
        :class:`~cache.errors.DamagedCacheError`, with the fix); None when every record
        was read. Records are then counted up to the damage, and nothing is repaired.
    """

    path: str
    checked: int = 0
    ok: int = 0
    corrupt: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    out_of_range: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    counts: dict[int, int] = dataclasses.field(default_factory=dict)
    expected: int = 0
    repaired: int = 0
    dropped_unused: int = 0
    damaged: str | None = None

    @property
    def clean(self) -> bool:
        """True when no corrupt record was found and the file is not damaged."""
        return not self.corrupt and self.damaged is None

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for JSON)."""
        return {
            "path": self.path,
            "checked": self.checked,
            "ok": self.ok,
            "corrupt": [list(p) for p in self.corrupt],
            "out_of_range": [list(p) for p in self.out_of_range],
            "counts": {str(k): v for k, v in sorted(self.counts.items())},
            "expected": self.expected,
            "repaired": self.repaired,
            "dropped_unused": self.dropped_unused,
            "damaged": self.damaged,
            "clean": self.clean,
        }


def verify(
    store: CacheStore,
    *,
    repair: bool = False,
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Check every record of ``store``.

    Parameters
    ----------
    store : CacheStore
        An open cache.
    repair : bool
        Delete corrupt records (they are refilled when next needed) and records
        outside the metadata (:attr:`VerifyReport.out_of_range`). Not done when the
        file is damaged (:attr:`VerifyReport.damaged`): dropping records cannot mend it.
    progress : callable, optional
        Called with the number of records checked since the last call.

    Returns
    -------
    VerifyReport

    Raises
    ------
    CacheError
        If the cache cannot be read (other than a damaged file, which the report
        holds), or ``repair`` and it cannot be written.
    """
    meta = store.meta
    ident = meta.identity
    size = meta.payload_size
    report = VerifyReport(
        path=str(store.path),
        counts=dict.fromkeys(range(meta.variants), 0),
        expected=ident.num_samples * meta.variants,
    )
    pending = 0

    def check(key: bytes, value: memoryview) -> None:
        nonlocal pending
        report.checked += 1
        pending += 1
        why = malformed_key([key])
        if why is not None:  # not a key this package writes: the file is damaged
            raise damaged(store.path, why)
        index, variant = unpack_key(key)
        try:
            check_record(value, index, variant, size)
        except CorruptRecordError:
            report.corrupt.append((index, variant))
            return
        if index >= ident.num_samples or variant >= meta.variants:
            report.out_of_range.append((index, variant))
            return
        report.ok += 1
        report.counts[variant] = report.counts.get(variant, 0) + 1
        if progress is not None and pending >= 256:
            progress(pending)
            pending = 0

    try:
        store.visit(check)
    except DamagedCacheError as exc:
        report.damaged = str(exc)
    if progress is not None and pending:
        progress(pending)
    if report.damaged is not None:
        return report
    if repair and report.out_of_range:
        report.dropped_unused = store.drop(report.out_of_range)
    if repair and report.corrupt:
        report.repaired = store.drop(report.corrupt)
    return report
