"""One pass over every chunk, in parallel with Dask: histograms, totals, runs and a sample.

Each chunk (:mod:`logs_analysis.readers`) is loaded, its rows checked
(:mod:`logs_analysis.validate`) and reduced on the worker to a small :class:`Partial`:

* log-scale histograms (:mod:`logs_analysis.histogram`) of I/O density weighted by
  rows, bytes, operations, byte-seconds and bytes moved, for each grouping of
  :data:`DENSITY_GROUPINGS`; of lifetime and size for :data:`SHAPE_GROUPINGS`;
* totals, rows per source file, and per run its rows, pipeline and time span;
* a **sample** of rows for the analyses that need rows (predictability, savings):
  whole runs, chosen by a hash of ``run_id`` at rate ``sample_rows / estimated rows``,
  so every chunk agrees on the runs without talking to the others; and beside it a
  uniform row sample at the same rate, used instead when the run sample holds fewer
  than :data:`MIN_SAMPLE_RUNS` runs (a log of a few huge runs);
* the malformed lines and rows met (:class:`~logs_analysis.issues.ReadIssues`);
* what the row filters removed (:class:`~logs_analysis.filters.FilterStats`): the usable
  rows are filtered (:attr:`AggregateConfig.row_filter`) on the worker, after the row and
  duplicate checks and before anything above is reduced, so every summary and the sample
  hold only the rows selected;
* a 64-bit hash of each usable row's ``(run_id, file_id)``
  (:func:`logs_analysis.validate.key_hashes`, 8 bytes a row). When two rows share a key
  (a log copied under another name), the pass is run again, each chunk dropping the
  rows whose key came earlier (:func:`logs_analysis.validate.duplicate_rows`), counted
  as "duplicate row ..." issues: inputs without duplicates are read once.

The sampling rate is set before the pass from the rows the chunks are expected to hold.
When filters keep few of them, the sample would be smaller than asked: if it falls below
half of ``sample_rows`` while more rows were selected, the pass is run again (with the
duplicates pass, if there is one) at the rate of the rows selected.

Partials are merged pairwise in a tree (``dask.bag.Bag.fold``), so the driver never
holds more than a few partials and one chunk per worker thread is in memory at a time:
peak memory is about ``workers x chunk`` rows plus the sample, whatever the input size.

Scheduler: ``threads`` (default, in this process), ``processes``, ``sync``, or the
address of a running ``distributed`` scheduler (``tcp://host:8786``), whose workers
must be able to import this package and read the input paths; anything else is refused
before any input is read (:func:`check_scheduler`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from logs_analysis.errors import AnalysisConfigError, AnalysisError, EmptySelectionError, InputError
from logs_analysis.filters import FilterStats, RowFilter, empty_selection_message
from logs_analysis.histogram import Histogram, _bins_and_outside, add_frames
from logs_analysis.issues import ReadIssues
from logs_analysis.readers.base import Chunk
from logs_analysis.validate import (
    DuplicateRows,
    drop_duplicates,
    duplicate_rows,
    key_hashes,
    usable_rows,
)
from placement.schema import MIN_LIFETIME_S, MIN_SIZE_BYTES

__all__ = [
    "DENSITY_GROUPINGS",
    "LOCAL_SCHEDULERS",
    "MIN_SAMPLE_RUNS",
    "SCHEDULER_CHOICES",
    "SHAPE_GROUPINGS",
    "Aggregate",
    "AggregateConfig",
    "Partial",
    "aggregate",
    "check_scheduler",
    "merge_partials",
    "process_chunk",
]

#: Groupings of the density histograms (name -> key columns).
DENSITY_GROUPINGS: dict[str, tuple[str, ...]] = {
    "overall": (),
    "pipeline": ("pipeline",),
    "stage": ("pipeline", "stage"),
    "operator": ("operator",),
    "file_kind": ("file_kind",),
}
#: Groupings of the lifetime and size histograms.
SHAPE_GROUPINGS: dict[str, tuple[str, ...]] = {
    "overall": (),
    "pipeline": ("pipeline",),
    "file_kind": ("file_kind",),
}
#: Fewest runs a run sample needs; below it the row sample is used.
MIN_SAMPLE_RUNS = 10
#: Dask's local schedulers (``sync`` and its aliases run in the calling thread).
LOCAL_SCHEDULERS = ("threads", "processes", "sync", "synchronous", "single-threaded")
#: What ``--scheduler`` accepts, in words.
SCHEDULER_CHOICES = "threads|processes|sync|tcp://host:port"
# address schemes of dask.distributed's comms
_ADDRESS_RE = re.compile(r"^(tcp|tls|ucx|inproc|ws|wss)://\S+$")
_DENSITY_WEIGHTS = ("bytes", "ops", "byte_s", "io_bytes")
_SHAPE_WEIGHTS = ("bytes",)
_NONE = "(none)"


def check_scheduler(scheduler: object) -> str:
    """``scheduler`` if it names a Dask scheduler: one of :data:`LOCAL_SCHEDULERS` or the
    address of a ``distributed`` scheduler (``tcp://host:8786``; also ``tls://``,
    ``ucx://``, ``inproc://``, ``ws://``, ``wss://``).

    Raises
    ------
    AnalysisConfigError
        (A :class:`ValueError`.) Naming the value and what is accepted (e.g. for ``"thread"``).
    """
    if isinstance(scheduler, str) and (
        scheduler in LOCAL_SCHEDULERS or _ADDRESS_RE.match(scheduler)
    ):
        return scheduler
    raise AnalysisConfigError(
        f"scheduler {scheduler!r} is not one of {SCHEDULER_CHOICES}: give threads, processes, "
        "sync, or the address of a running Dask scheduler such as tcp://127.0.0.1:8786"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class AggregateConfig:
    """Settings of :func:`aggregate`.

    Parameters
    ----------
    sample_rows : int
        Rows to keep as a sample for the row-level analyses (>= 100).
    seed : int
        Seed of the sample.
    scheduler : str
        ``threads``, ``processes``, ``sync`` or a ``distributed`` scheduler address
        (:func:`check_scheduler`).
    workers : int or None
        Threads or processes for the local schedulers (default: the usable cores).
    row_filter : RowFilter
        Which usable rows to keep (pipelines, creation times); the default keeps all.
    """

    sample_rows: int = 50_000
    seed: int = 0
    scheduler: str = "threads"
    workers: int | None = None
    row_filter: RowFilter = dataclasses.field(default_factory=RowFilter)

    def __post_init__(self) -> None:
        if (
            isinstance(self.sample_rows, bool)
            or not isinstance(self.sample_rows, int)
            or self.sample_rows < 100
        ):
            raise AnalysisConfigError(f"sample_rows={self.sample_rows!r} must be an int >= 100")
        check_scheduler(self.scheduler)
        if self.workers is not None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise AnalysisConfigError(f"workers={self.workers!r} must be a positive int or None")
        if not isinstance(self.row_filter, RowFilter):
            raise AnalysisConfigError(
                f"row_filter={self.row_filter!r} must be a logs_analysis.filters.RowFilter"
            )


@dataclasses.dataclass
class Partial:
    """What one or more chunks reduce to (see the module docstring)."""

    hists: dict[tuple[str, str], list[pd.DataFrame]]
    totals: dict[str, float]
    runs: list[pd.DataFrame]
    sources: dict[str, int]
    run_sample: list[pd.DataFrame]
    row_sample: list[pd.DataFrame]
    issues: ReadIssues
    block_lines: dict[tuple[str, int], int]
    rows_read: int
    chunks: int
    keys: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    filtered: FilterStats = dataclasses.field(default_factory=FilterStats)


def _codes(table: pa.Table, name: str) -> tuple[np.ndarray, list[str]]:
    """Integer code of each row's value of a string column, and the values (nulls -> "(none)")."""
    column = table[name].combine_chunks()
    enc = column if pa.types.is_dictionary(column.type) else column.dictionary_encode()
    values = [str(v) for v in enc.dictionary.to_pylist()]
    idx = enc.indices
    if idx.null_count:
        idx = pc.fill_null(idx, len(values))
        values.append(_NONE)
    return np.asarray(idx.to_numpy(zero_copy_only=False), dtype=np.int64), values


def _group_hist(
    keys: tuple[str, ...],
    coded: dict[str, tuple[np.ndarray, list[str]]],
    bins: np.ndarray,
    weights: dict[str, np.ndarray],
) -> pd.DataFrame:
    n = len(bins)
    if keys:
        code = np.zeros(n, dtype=np.int64)
        for k in keys:
            c, values = coded[k]
            code = code * len(values) + c
        inv, group_codes = pd.factorize(code, sort=False)
    else:
        group_codes, inv = np.zeros(1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    # dense per-group bin counts over only the bins present (lowest .. highest)
    low = int(bins.min()) if n else 0
    offset = bins - low
    width = int(offset.max()) + 1 if n else 1
    g = inv.astype(np.int64) * width + offset
    size = len(group_codes) * width
    counts = np.bincount(g, minlength=size)
    nz = np.flatnonzero(counts)
    # decode the group keys
    labels = []
    for gc in group_codes.tolist():
        parts = []
        for k in reversed(keys):
            values = coded[k][1]
            gc, r = divmod(gc, len(values))
            parts.append(values[r])
        labels.append(Histogram.KEY_SEP.join(reversed(parts)))
    frame = {
        "key": np.asarray(labels, dtype=object)[nz // width],
        "bin": (nz % width) + low,
        "n": counts[nz],
    }
    for name, w in weights.items():
        frame[name] = np.bincount(g, weights=w, minlength=size)[nz]
    return pd.DataFrame(frame)


def _hash_unit(values: list[str], seed: int) -> np.ndarray:
    """A value in [0, 1) for each string, the same on every worker."""
    h = pd.util.hash_pandas_object(
        pd.Series(values, dtype=object), index=False, hash_key=f"{seed:016d}"[:16]
    )
    return h.to_numpy(np.uint64).astype(np.float64) / 2.0**64


def process_chunk(
    item: tuple[int, Chunk] | tuple[int, Chunk, DuplicateRows | None],
    *,
    rate: float,
    seed: int = 0,
    with_keys: bool = True,
    row_filter: RowFilter | None = None,
) -> Partial:
    """Load one chunk, check its rows and reduce them to a :class:`Partial`.

    Parameters
    ----------
    item : (int, Chunk) or (int, Chunk, DuplicateRows or None)
        The chunk's index (seeds its row sample), the chunk, and optionally its rows to
        drop as duplicates (:func:`logs_analysis.validate.duplicate_rows`).
    rate : float
        Sampling rate in (0, 1]; 1 keeps every row in the sample.
    with_keys : bool
        Keep the key hash of each usable row (``Partial.keys``) to find duplicates.
    row_filter : RowFilter, optional
        Keep only the usable rows it selects (after the duplicate check, so a filter
        changes no issue count); what it removed goes in ``Partial.filtered``.
    """
    index, chunk = item[0], item[1]
    duplicates = item[2] if len(item) > 2 else None
    result = chunk.load()
    issues = ReadIssues().merge(result.issues)
    table, bad, kept = usable_rows(result)
    issues.merge(bad)
    hashes = {index: key_hashes(table)} if with_keys else {}
    table, repeated = drop_duplicates(table, result, kept, duplicates)
    issues.merge(repeated)
    filtered = FilterStats()
    if row_filter is not None:
        table, filtered = row_filter.apply(table)
    block_lines = (
        {(result.source, result.block_start): result.lines}
        if result.block_start is not None
        else {}
    )
    rows_read = result.table.num_rows
    n = table.num_rows
    empty = Partial({}, {}, [], {}, [], [], issues, block_lines, rows_read, 1, hashes, filtered)
    if n == 0:
        return empty

    def num(name: str) -> np.ndarray:
        return np.asarray(table[name].to_numpy(zero_copy_only=False), dtype=np.float64)

    created, deleted = num("created_at"), num("deleted_at")
    size = num("size_bytes")
    ops = num("read_ops") + num("write_ops")
    io_bytes = num("read_bytes") + num("write_bytes")
    life = np.maximum(deleted - created, MIN_LIFETIME_S)
    size_f = np.maximum(size, MIN_SIZE_BYTES)
    byte_s = size_f * life
    density = ops / byte_s

    coded = {
        name: _codes(table, name)
        for name in ("pipeline", "stage", "operator", "file_kind", "run_id")
    }
    hists: dict[tuple[str, str], list[pd.DataFrame]] = {}
    n_outside: dict[str, int] = {}  # positive values beyond the histogram range, per variable
    dens_bins, n_outside["density"] = _bins_and_outside(density)
    dens_w = {"bytes": size, "ops": ops, "byte_s": byte_s, "io_bytes": io_bytes}
    for gname, keys in DENSITY_GROUPINGS.items():
        hists[("density", gname)] = [_group_hist(keys, coded, dens_bins, dens_w)]
    for variable, values in (("lifetime", life), ("size", size)):
        vb, n_outside[variable] = _bins_and_outside(values)
        for gname, keys in SHAPE_GROUPINGS.items():
            hists[(variable, gname)] = [_group_hist(keys, coded, vb, {"bytes": size})]

    run_codes, run_values = coded["run_id"]
    n_runs = len(run_values)
    pipe_codes, pipe_values = coded["pipeline"]
    first = np.full(n_runs, -1, dtype=np.int64)
    seen_codes, first_index = np.unique(run_codes, return_index=True)
    first[seen_codes] = first_index
    present = first >= 0
    runs = [
        pd.DataFrame(
            {
                "run_id": np.asarray(run_values, dtype=object)[present],
                "pipeline": np.asarray(pipe_values, dtype=object)[pipe_codes[first[present]]],
                "rows": np.bincount(run_codes, minlength=n_runs)[present],
                "created_min": _group_min(run_codes, created, n_runs)[present],
                "deleted_max": -_group_min(run_codes, -deleted, n_runs)[present],
            }
        )
    ]
    totals = {
        "rows": float(n),
        "bytes": float(size.sum()),
        "ops": float(ops.sum()),
        "read_ops": float(num("read_ops").sum()),
        "write_ops": float(num("write_ops").sum()),
        "read_bytes": float(num("read_bytes").sum()),
        "write_bytes": float(num("write_bytes").sum()),
        "byte_s": float(byte_s.sum()),
        "created_min": float(created.min()),
        "deleted_max": float(deleted.max()),
        "zero_ops_rows": float((ops == 0).sum()),
        # values beyond the histogram range, counted in its end bins
        "outside_range_density": float(n_outside["density"]),
        "outside_range_lifetime": float(n_outside["lifetime"]),
        "outside_range_size": float(n_outside["size"]),
    }
    run_sample: list[pd.DataFrame] = []
    row_sample: list[pd.DataFrame] = []
    if rate >= 1.0:
        run_sample = [_to_pandas(table)]
    else:
        run_unit = _hash_unit(run_values, seed)
        in_runs = run_unit[run_codes] < rate
        cap = int(4 * rate * n) + 1000
        if in_runs.sum() > cap:  # a huge run was drawn: keep a share of it
            picked = np.flatnonzero(in_runs)
            rng = np.random.default_rng([seed, index, 1])
            in_runs = np.zeros(n, dtype=bool)
            in_runs[rng.choice(picked, cap, replace=False)] = True
        rng = np.random.default_rng([seed, index])
        in_rows = rng.random(n) < rate
        if in_runs.any():
            run_sample = [_to_pandas(table.filter(pa.array(in_runs)))]
        if in_rows.any():
            row_sample = [_to_pandas(table.filter(pa.array(in_rows)))]
    return Partial(
        hists=hists,
        totals=totals,
        runs=runs,
        sources={result.source: n},
        run_sample=run_sample,
        row_sample=row_sample,
        issues=issues,
        block_lines=block_lines,
        rows_read=rows_read,
        chunks=1,
        keys=hashes,
        filtered=filtered,
    )


def _group_min(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, np.inf)
    np.minimum.at(out, codes, values)
    return out


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """Rows as pandas with plain string columns (dictionary columns decoded)."""
    columns = [
        c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns
    ]
    return pa.Table.from_arrays(columns, names=table.column_names).to_pandas()


#: Rows a list of partial frames may reach before it is compacted.
COMPACT_ROWS = 400_000


def _compact_hist(frames: list[pd.DataFrame], force: bool = False) -> list[pd.DataFrame]:
    if len(frames) > 1 and (force or sum(len(f) for f in frames) > COMPACT_ROWS):
        return [add_frames(frames)]
    return frames


def _compact_runs(frames: list[pd.DataFrame], force: bool = False) -> list[pd.DataFrame]:
    if len(frames) > 1 and (force or sum(len(f) for f in frames) > COMPACT_ROWS):
        cat = pd.concat(frames, ignore_index=True)
        if cat["run_id"].duplicated().any():
            cat = (
                cat.groupby("run_id", sort=False)
                .agg(
                    pipeline=("pipeline", "first"),
                    rows=("rows", "sum"),
                    created_min=("created_min", "min"),
                    deleted_max=("deleted_max", "max"),
                )
                .reset_index()
            )
        return [cat]
    return frames


def merge_partials(a: Partial, b: Partial) -> Partial:
    """The :class:`Partial` of both inputs' chunks.

    Frames are concatenated lazily and summed only when they grow past
    :data:`COMPACT_ROWS` rows, so merging many chunks costs few group-bys.
    """
    hists = {
        k: _compact_hist(a.hists.get(k, []) + b.hists.get(k, []))
        for k in set(a.hists) | set(b.hists)
    }
    totals = dict(a.totals)
    for k, v in b.totals.items():
        if k not in totals:
            totals[k] = v
        elif k == "created_min":
            totals[k] = min(totals[k], v)
        elif k == "deleted_max":
            totals[k] = max(totals[k], v)
        else:
            totals[k] += v
    sources = dict(a.sources)
    for k, v in b.sources.items():
        sources[k] = sources.get(k, 0) + v
    return Partial(
        hists=hists,
        totals=totals,
        runs=_compact_runs(a.runs + b.runs),
        sources=sources,
        run_sample=a.run_sample + b.run_sample,
        row_sample=a.row_sample + b.row_sample,
        issues=ReadIssues().merge(a.issues).merge(b.issues),
        block_lines={**a.block_lines, **b.block_lines},
        rows_read=a.rows_read + b.rows_read,
        chunks=a.chunks + b.chunks,
        keys={**a.keys, **b.keys},
        filtered=FilterStats().merge(a.filtered).merge(b.filtered),
    )


def _frame(frames: list[pd.DataFrame]) -> pd.DataFrame | None:
    frames = [f for f in frames if len(f)]
    if not frames:
        return None
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


@dataclasses.dataclass
class Aggregate:
    """The whole input, summarised (see the module docstring).

    Attributes
    ----------
    histograms : dict
        ``(variable, grouping name) -> Histogram``.
    totals : dict
        Rows, bytes, operations, byte-seconds, time span of the rows selected (the usable
        rows the filters kept), and
        ``outside_range_<variable>``: values beyond the histogram range (see
        :func:`logs_analysis.histogram.outside_range`).
    runs : pandas.DataFrame
        One row per run: ``run_id, pipeline, rows, created_min, deleted_max``.
    sources : dict
        Rows selected per input file.
    sample : pandas.DataFrame
        Sampled rows (all schema columns) for row-level analyses.
    sample_method : str
        ``all rows``, ``whole runs`` or ``rows``.
    issues : ReadIssues
        Every file, line and row skipped.
    rows_read : int
        Rows read before the row checks.
    chunks : int
        Chunks processed.
    wall_s : float
        Seconds the pass took.
    filtered : FilterStats
        What the row filters removed (empty without filters).
    """

    histograms: dict[tuple[str, str], Histogram]
    totals: dict[str, float]
    runs: pd.DataFrame
    sources: dict[str, int]
    sample: pd.DataFrame
    sample_method: str
    issues: ReadIssues
    rows_read: int
    chunks: int
    wall_s: float
    filtered: FilterStats = dataclasses.field(default_factory=FilterStats)

    @property
    def rows(self) -> int:
        """Rows selected: the usable rows the filters kept (all of them without filters)."""
        return int(self.totals.get("rows", 0))

    @property
    def usable_rows(self) -> int:
        """Usable rows (row checks passed, duplicates dropped), before the filters."""
        return self.rows + self.filtered.total_removed

    def histogram(self, variable: str, grouping: str) -> Histogram:
        return self.histograms[(variable, grouping)]


def _compute(bag: Any, config: AggregateConfig) -> Partial:
    import dask

    workers = config.workers or len(os.sched_getaffinity(0))
    if config.scheduler in ("threads", "processes", "sync", "synchronous", "single-threaded"):
        kwargs: dict[str, Any] = {"scheduler": config.scheduler}
        if config.scheduler in ("threads", "processes"):
            kwargs["num_workers"] = workers
        with dask.config.set(**kwargs):
            return bag.compute()
    try:
        from distributed import Client
    except ImportError as exc:  # pragma: no cover - distributed is a core dependency
        raise AnalysisError(
            "--scheduler ADDRESS needs dask.distributed: pip install 'dask[distributed]'"
        ) from exc
    try:
        client = Client(config.scheduler, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise AnalysisError(
            f"cannot reach the Dask scheduler at {config.scheduler!r} ({exc}); start one "
            "(dask scheduler / LocalCluster) or use --scheduler threads"
        ) from exc
    with client:
        return client.compute(bag).result()


def aggregate(
    chunks: Sequence[Chunk],
    config: AggregateConfig | None = None,
    *,
    issues: ReadIssues | None = None,
    paths: Sequence[Any] = (),
    on_progress: Callable[[str], None] | None = None,
) -> Aggregate:
    """Run the pass over ``chunks`` (see the module docstring).

    Parameters
    ----------
    chunks : sequence of Chunk
        From :func:`logs_analysis.readers.plan`.
    config : AggregateConfig, optional
        Sample size, seed and scheduler.
    issues : ReadIssues, optional
        Issues met before the pass (discovery, planning), merged into the result.
    paths : sequence
        The user's paths, for error messages.

    Raises
    ------
    InputError
        If no chunk yields a usable row.
    EmptySelectionError
        (An :class:`InputError`.) If there are usable rows but the filters keep none;
        the message names the filter.
    """
    import dask.bag as db

    from logs_analysis.readers import no_rows_message

    config = config or AggregateConfig()
    start = time.perf_counter()
    all_issues = ReadIssues().merge(issues or ReadIssues())
    if not chunks:
        raise InputError(no_rows_message(paths, all_issues))
    estimated = sum(max(int(c.estimated_rows), 1) for c in chunks)
    rate = min(1.0, config.sample_rows / estimated)

    row_filter = config.row_filter if config.row_filter.active else None

    def run(items: list[Any], with_keys: bool, rate: float) -> Partial:
        bag = db.from_sequence(items, npartitions=len(items))
        folded = bag.map(
            process_chunk,
            rate=rate,
            seed=config.seed,
            with_keys=with_keys,
            row_filter=row_filter,
        ).fold(merge_partials, split_every=4)
        return _compute(folded, config)

    partial = run(list(enumerate(chunks)), True, rate)
    keys = [partial.keys.pop(i, np.zeros(0, np.uint64)) for i in range(len(chunks))]
    duplicates = duplicate_rows(keys, [c.source for c in chunks])
    del keys  # 8 bytes a row: freed before any second pass
    selected = partial.totals.get("rows", 0.0)
    filtered_rate = rate
    if row_filter is not None and rate < 1.0 and 0 < selected * rate < config.sample_rows / 2:
        # the filters kept few of the rows the rate was set for: sample the rest at the
        # rate of the rows they kept
        filtered_rate = min(1.0, config.sample_rows / selected)
    if duplicates or filtered_rate != rate:
        # read again, each chunk dropping its rows read before and sampling at the new rate
        del partial
        rate = filtered_rate
        partial = run([(i, c, duplicates.get(i)) for i, c in enumerate(chunks)], False, rate)
    all_issues.merge(partial.issues)
    # block-relative line numbers -> file line numbers
    before: dict[tuple[str, int], int] = {}
    by_source: dict[str, list[tuple[int, int]]] = {}
    for (source, block), lines in partial.block_lines.items():
        by_source.setdefault(source, []).append((block, lines))
    for source, blocks in by_source.items():
        seen = 0
        for block, lines in sorted(blocks):
            before[(source, block)] = seen
            seen += lines
    all_issues.resolve_lines(before)
    if not partial.totals.get("rows"):
        if partial.filtered.total_removed and row_filter is not None:
            raise EmptySelectionError(
                empty_selection_message(
                    row_filter, partial.filtered, partial.filtered.total_removed
                )
            )
        raise InputError(no_rows_message(paths, all_issues))
    sample, method = _choose_sample(partial, rate, config)
    hists = {
        k: Histogram(
            k[0], (DENSITY_GROUPINGS | SHAPE_GROUPINGS)[k[1]], _compact_hist(f, force=True)[0]
        )
        for k, f in partial.hists.items()
    }
    runs = _compact_runs(partial.runs, force=True)
    return Aggregate(
        histograms=hists,
        totals=partial.totals,
        runs=runs[0] if runs else pd.DataFrame(),
        sources=partial.sources,
        sample=sample,
        sample_method=method,
        issues=all_issues,
        rows_read=partial.rows_read,
        chunks=partial.chunks,
        wall_s=time.perf_counter() - start,
        filtered=partial.filtered,
    )


def _choose_sample(
    partial: Partial, rate: float, config: AggregateConfig
) -> tuple[pd.DataFrame, str]:
    run_sample, row_sample = _frame(partial.run_sample), _frame(partial.row_sample)
    if rate >= 1.0:
        sample = run_sample if run_sample is not None else pd.DataFrame()
        if len(sample) <= 1.5 * config.sample_rows:
            return sample.reset_index(drop=True), "all rows"
        # the row estimate was low (JSON lines, event logs): thin by whole runs
        return _thin_runs(sample, config), "whole runs"
    runs = run_sample
    if runs is not None and runs["run_id"].nunique() >= MIN_SAMPLE_RUNS:
        if len(runs) > 1.5 * config.sample_rows:
            return _thin_runs(runs, config), "whole runs"
        return runs.reset_index(drop=True), "whole runs"
    rows = row_sample if row_sample is not None else pd.DataFrame()
    if len(rows) > 1.5 * config.sample_rows:
        rows = rows.sample(config.sample_rows, random_state=config.seed)
    return rows.reset_index(drop=True), "rows"


def _thin_runs(df: pd.DataFrame, config: AggregateConfig) -> pd.DataFrame:
    runs = df["run_id"].astype(str)
    unique = runs.unique().tolist()
    if len(unique) < MIN_SAMPLE_RUNS:
        return df.sample(min(len(df), config.sample_rows), random_state=config.seed).reset_index(
            drop=True
        )
    order = np.argsort(_hash_unit(unique, config.seed + 1))
    counts = runs.value_counts()
    keep, total = [], 0
    for i in order:
        keep.append(unique[i])
        total += int(counts[unique[i]])
        if total >= config.sample_rows:
            break
    return df[runs.isin(keep).to_numpy()].reset_index(drop=True)


def estimated_rate(chunks: Sequence[Chunk], sample_rows: int) -> float:
    """The sampling rate :func:`aggregate` uses for ``chunks``."""
    estimated = sum(max(int(c.estimated_rows), 1) for c in chunks)
    return min(1.0, sample_rows / max(estimated, 1)) if estimated else 1.0
