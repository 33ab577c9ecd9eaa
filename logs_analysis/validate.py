"""Row checks shared by every reader: bad rows are dropped and counted, never fatal.

A row is dropped (first failing check wins) when

* a required column (:data:`placement.schema.REQUIRED_COLUMNS`) is null,
* ``created_at`` or ``deleted_at`` is not finite,
* it was deleted before it was created,
* ``size_bytes``, an operation count or a byte count is negative.

These are the checks of :func:`placement.features.clean_table`, applied per chunk with
the row's location (file and line, row or record) kept for the report.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from logs_analysis.issues import ReadIssues
from logs_analysis.readers.base import ChunkResult
from placement.schema import REQUIRED_COLUMNS

__all__ = ["COUNT_COLUMNS", "validate_rows"]

COUNT_COLUMNS = ("size_bytes", "read_ops", "write_ops", "read_bytes", "write_bytes")


def validate_rows(result: ChunkResult) -> tuple[pa.Table, ReadIssues]:
    """The usable rows of ``result.table`` and the issues of the dropped ones.

    The returned issues hold only the row checks; ``result.issues`` is left as it is.
    """
    table = result.table
    issues = ReadIssues()
    n = table.num_rows
    if n == 0:
        return table, issues
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
        return table, issues
    return table.filter(pa.array(keep)), issues
