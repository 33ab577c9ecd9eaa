"""Bigger logs from real ones: whole runs drawn with replacement, under fresh ids.

Used to build large inputs for benchmarks and tests from real logs (e.g. the workload
suite's). Each drawn run keeps its rows as they were (sizes, operations, lifetimes,
stages) and gets a fresh ``run_id`` and fresh ``file_id`` s (``<id>~<copy>``); its times
are shifted so that copies follow one another ``spacing_s`` seconds apart, the way
repeated runs of a pipeline would.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logs_analysis.errors import AnalysisConfigError

__all__ = ["resample_runs"]


def resample_runs(
    table: pa.Table,
    n_rows: int,
    *,
    seed: int = 0,
    spacing_s: float = 10.0,
    batch_rows: int = 250_000,
) -> Iterator[pa.Table]:
    """Yield batches of about ``batch_rows`` rows until at least ``n_rows`` rows were made.

    Parameters
    ----------
    table : pyarrow.Table
        Log rows (placement schema) with ``run_id``, ``file_id``, ``created_at``, ``deleted_at``.
    n_rows : int
        Rows to make (the last batch may overshoot by less than one run).
    seed : int
        Seed of the draw.
    spacing_s : float
        Seconds between the starts of consecutive copies.
    batch_rows : int
        Rows per yielded batch (whole runs).

    Raises
    ------
    AnalysisConfigError
        (A :class:`ValueError`.) If ``table`` is empty or ``n_rows`` is not positive.
    """
    if table.num_rows == 0:
        raise AnalysisConfigError("cannot resample an empty table; give log rows")
    if n_rows <= 0:
        raise AnalysisConfigError(f"n_rows={n_rows!r} must be positive")
    rng = np.random.default_rng(seed)
    runs = np.asarray(table["run_id"].to_numpy(zero_copy_only=False)).astype(str)
    names, inverse = np.unique(runs, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    first_created = np.asarray(pc.min_max(table["created_at"])["min"].as_py(), dtype=np.float64)
    run_start = np.full(len(names), np.inf)
    np.minimum.at(run_start, inverse, table["created_at"].to_numpy())
    made = 0
    copy = 0
    mean_rows = max(float(counts.mean()), 1.0)
    while made < n_rows:
        want = min(batch_rows, n_rows - made)
        k = max(1, int(np.ceil(want / mean_rows)))
        chosen = rng.integers(0, len(names), size=k)
        idx = np.concatenate([order[starts[c] : starts[c] + counts[c]] for c in chosen])
        copies = np.repeat(np.arange(copy, copy + k), counts[chosen])
        batch = table.take(pa.array(idx))
        suffix = pa.array(np.char.add("~", copies.astype(str)))
        shift = copies * spacing_s - (run_start[chosen] - first_created).repeat(counts[chosen])
        for name in ("run_id", "file_id"):
            i = batch.schema.get_field_index(name)
            batch = batch.set_column(
                i, batch.schema.field(name), pc.binary_join_element_wise(batch[name], suffix, "")
            )
        for name in ("created_at", "deleted_at"):
            i = batch.schema.get_field_index(name)
            batch = batch.set_column(
                i, batch.schema.field(name), pc.add(batch[name], pa.array(shift))
            )
        yield batch
        made += batch.num_rows
        copy += k
