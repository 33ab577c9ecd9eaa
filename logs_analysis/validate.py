"""Row checks shared by every reader: bad rows are dropped and counted, never fatal.

A row is dropped (first failing check wins) when

* a required column (:data:`placement.schema.REQUIRED_COLUMNS`) is null,
* ``created_at`` or ``deleted_at`` is not finite,
* it was deleted before it was created,
* ``size_bytes``, an operation count or a byte count is negative.

These are the checks of :func:`placement.features.clean_table`, applied per chunk with
the row's location (file and line, row or record) kept for the report.

Duplicates across inputs (a log copied under another name, a Spark log given both plain
and compressed) are found by key: a usable row whose ``(run_id, file_id)`` was already
read, earlier in the same chunk or in an earlier chunk (inputs in the order they are
found), is dropped and counted as "duplicate row (run_id and file_id read before;
dropped)". Keys are compared by a 64-bit hash (:func:`key_hashes`); two different keys
share one with a chance of about ``n**2 / 2**65`` among ``n`` rows (3e-6 for 10 million).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from logs_analysis.issues import MAX_EXAMPLES, ReadIssues
from logs_analysis.readers.base import ChunkResult
from placement.schema import REQUIRED_COLUMNS

__all__ = [
    "COUNT_COLUMNS",
    "DUPLICATE_ROW",
    "DuplicateRows",
    "drop_duplicates",
    "duplicate_rows",
    "key_hashes",
    "usable_rows",
    "validate_rows",
]

COUNT_COLUMNS = ("size_bytes", "read_ops", "write_ops", "read_bytes", "write_bytes")
#: Reason of a row dropped because its (run_id, file_id) was read before.
DUPLICATE_ROW = "duplicate row (run_id and file_id read before; dropped)"


def validate_rows(result: ChunkResult) -> tuple[pa.Table, ReadIssues]:
    """The usable rows of ``result.table`` and the issues of the dropped ones.

    The returned issues hold only the row checks; ``result.issues`` is left as it is.
    """
    table, issues, _ = usable_rows(result)
    return table, issues


def usable_rows(result: ChunkResult) -> tuple[pa.Table, ReadIssues, np.ndarray]:
    """:func:`validate_rows`, and the index in ``result.table`` of each usable row."""
    table = result.table
    issues = ReadIssues()
    n = table.num_rows
    if n == 0:
        return table, issues, np.arange(0, dtype=np.int64)
    keep = np.ones(n, dtype=bool)

    def drop(reason: str, bad: np.ndarray, detail: str) -> None:
        bad = bad & keep
        count = int(bad.sum())
        if not count:
            return
        for i in np.flatnonzero(bad)[:5]:
            location, line = result.locate(int(i))
            issues.add(
                reason, result.source, location, detail, line=line, block_start=result.block_start
            )
        # the examples above counted up to 5; add the rest without examples
        issues.counts[reason] += count - min(count, 5)
        keep[bad] = False

    for name in REQUIRED_COLUMNS:
        column = table[name]
        if column.null_count:
            drop(f"null {name}", np.asarray(column.is_null()), f"{name} is missing")
    created = table["created_at"].to_numpy(zero_copy_only=False).astype(np.float64)
    deleted = table["deleted_at"].to_numpy(zero_copy_only=False).astype(np.float64)
    drop(
        "non-finite time",
        ~(np.isfinite(created) & np.isfinite(deleted)),
        "created_at or deleted_at is NaN or infinite",
    )
    with np.errstate(invalid="ignore"):
        drop("deleted before created", deleted < created, "deleted_at < created_at")
    for name in COUNT_COLUMNS:
        values = table[name].to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            drop(f"negative {name}", np.asarray(values < 0, dtype=bool), f"{name} < 0")
    if keep.all():
        return table, issues, np.arange(n, dtype=np.int64)
    return table.filter(pa.array(keep)), issues, np.flatnonzero(keep)


def _hash_strings(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A 64-bit hash of each string (dictionary-encoded or not: the same value, the same hash)."""
    import pandas as pd

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        values = pd.util.hash_array(
            np.asarray(column.dictionary.to_numpy(zero_copy_only=False), dtype=object),
            categorize=False,
        )
        indices = np.asarray(column.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        return np.asarray(values, dtype=np.uint64)[indices]
    objects = np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)
    # categorize=False: ids are mostly distinct, and factorizing them first costs 5x more
    return np.asarray(pd.util.hash_array(objects, categorize=False), dtype=np.uint64)


def key_hashes(table: pa.Table) -> np.ndarray:
    """A 64-bit hash of each row's ``(run_id, file_id)`` (uint64, one per row)."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.uint64)
    run = _hash_strings(table["run_id"])
    file = _hash_strings(table["file_id"])
    with np.errstate(over="ignore"):
        return file ^ (run * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019))


@dataclasses.dataclass(frozen=True)
class DuplicateRows:
    """The rows of one chunk to drop as duplicates.

    Attributes
    ----------
    positions : numpy.ndarray
        Index of each such row among the chunk's usable rows (:func:`usable_rows`).
    first_sources : tuple of str
        Where the first few of them (up to :data:`~logs_analysis.issues.MAX_EXAMPLES`) were
        read before, for the issue's detail.
    """

    positions: np.ndarray
    first_sources: tuple[str, ...] = ()


def duplicate_rows(
    hashes: Sequence[np.ndarray], sources: Sequence[str]
) -> dict[int, DuplicateRows]:
    """The duplicates of each chunk, given the key hashes of the chunks' usable rows.

    Parameters
    ----------
    hashes : sequence of numpy.ndarray
        :func:`key_hashes` of each chunk's usable rows, chunks in input order.
    sources : sequence of str
        The file of each chunk.

    Returns
    -------
    dict of int to DuplicateRows
        Chunk index -> its rows whose key came earlier (in that chunk or an earlier one);
        chunks without duplicates are left out.
    """
    sizes = [len(h) for h in hashes]
    if sum(sizes) == 0:
        return {}
    flat = np.concatenate([np.asarray(h, dtype=np.uint64) for h in hashes])
    _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    duplicate = np.ones(len(flat), dtype=bool)
    duplicate[first] = False
    if not duplicate.any():
        return {}
    owner = np.repeat(np.arange(len(hashes)), sizes)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    first_owner = owner[first[np.asarray(inverse).reshape(-1)]]
    out: dict[int, DuplicateRows] = {}
    for chunk in np.unique(owner[duplicate]).tolist():
        rows = np.flatnonzero(duplicate & (owner == chunk))
        firsts = tuple(sources[k] for k in first_owner[rows[:MAX_EXAMPLES]].tolist())
        out[int(chunk)] = DuplicateRows(rows - start[chunk], firsts)
    return out


def drop_duplicates(
    table: pa.Table, result: ChunkResult, kept: np.ndarray, duplicates: DuplicateRows | None
) -> tuple[pa.Table, ReadIssues]:
    """``table`` (the usable rows of ``result``, at ``kept`` in it) without ``duplicates``,
    and the issue counting them, with the first few located."""
    issues = ReadIssues()
    if duplicates is None or not len(duplicates.positions):
        return table, issues
    positions = np.asarray(duplicates.positions, dtype=np.int64)
    runs = table["run_id"].take(pa.array(positions[:MAX_EXAMPLES])).to_pylist()
    files = table["file_id"].take(pa.array(positions[:MAX_EXAMPLES])).to_pylist()
    for k, i in enumerate(positions[:MAX_EXAMPLES].tolist()):
        location, line = result.locate(int(kept[i]))
        first = duplicates.first_sources[k] if k < len(duplicates.first_sources) else ""
        detail = f"run_id={runs[k]!r} file_id={files[k]!r}"
        issues.add(
            DUPLICATE_ROW,
            result.source,
            location,
            detail + (f", already read from {first}" if first else ""),
            line=line,
            block_start=result.block_start,
        )
    issues.counts[DUPLICATE_ROW] += len(positions) - min(len(positions), MAX_EXAMPLES)
    keep = np.ones(table.num_rows, dtype=bool)
    keep[positions] = False
    return table.filter(pa.array(keep)), issues
