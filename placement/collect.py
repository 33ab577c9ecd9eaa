"""Collection: running the workload suite on a Dask cluster and writing its I/O log.

:func:`collect` runs the pipelines of :mod:`placement.workloads` at several sizes and
seeds on a multi-process ``LocalCluster`` whose workers have little managed memory, so
they spill, and use P2P shuffle and rechunk, so they write shuffle files. Every temporary
file goes through the worker-side storage (:mod:`placement.storage`), which counts its
I/O and writes one log row per file when it is deleted. Nothing about the files is drawn
from a chosen distribution: sizes, operation counts and lifetimes are what the runs did.

Before each run the driver computes the optimized task graph
(:func:`placement.graph_facts.graph_facts`) and tells the workers
(:class:`~placement.storage.RunContext`) the pipeline, run id, input bytes, input
partitions, number of tasks of each stage and the stage of each P2P shuffle, so each
file's creation-time facts are filled in. :func:`run_workload` runs one workload,
:class:`CollectOptions` holds the settings and :func:`summarize` sums a log up per
pipeline and file kind.

Output of :func:`collect`: ``<out_dir>/io_log.parquet`` (every row of the runs that
finished whole, log schema; a failed run, or one during which a worker left, is partial
and left out) and ``<out_dir>/summary.json`` (rows, bytes, operations and density spread
per pipeline, and the rows left out per run).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from placement.errors import PlacementError
from placement.graph_facts import GraphFacts, StageKeys, graph_facts
from placement.local_cluster import local_cluster
from placement.logwriter import PARTS_PREFIX, read_logs
from placement.signals import sigterm_raises
from placement.storage.config import spill_heavy_settings
from placement.tier import Tier
from placement.workloads import (
    NO_WORKERS_TIMEOUT_S,
    SIZES,
    WORKLOADS,
    Workload,
    WorkloadError,
    WorkloadSpec,
    worker_addresses,
)

logger = logging.getLogger(__name__)
#: Where the warning naming a stopped collection's kept ``.parts-*`` directory goes (the same
#: text is a note on the exception): a caller that prints the note itself, as ``dataplane
#: placement collect`` does, silences this logger so that the user reads it once.
KEPT_PARTS_LOGGER = f"{__name__}.kept"

LOG_FILE = "io_log.parquet"
SUMMARY_FILE = "summary.json"


@dataclass
class RunResult:
    """Outcome of one run of one workload.

    ``ok`` is true when the pipeline finished and no worker left the cluster during the
    run (its rows are whole); otherwise ``error`` says what went wrong.
    """

    pipeline: str
    size: str
    seed: int
    run_id: str
    wall_s: float
    ok: bool
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class CollectOptions:
    """Settings of :func:`collect` (validated at construction).

    Parameters
    ----------
    pipelines : sequence of str
        Workload names (default: all of :data:`WORKLOADS`).
    sizes : sequence of str
        Size names (default ``small``, ``medium``).
    seeds : sequence of int
        Seeds (default 0 to 5: each configuration of a pipeline runs twice, seeds
        ``s`` and ``s + 3`` sharing key cardinality and skew; more runs give the history
        features and the time split more earlier runs).
    n_workers : int
        Worker processes (one thread each).
    memory_limit : str
        Memory limit of each worker (bytes, such as ``"1GiB"``; more than 0).
    target_fraction : float
        ``distributed.worker.memory.target``: managed memory fraction above which
        workers spill (small, so the runs spill): a worker spills once it holds more
        than ``memory_limit * target_fraction`` bytes.
    tier : Tier
        Tier every file is placed on while collecting (the all-HDD baseline by default).
    scratch_dir : str, optional
        Parent of the tier directories (default: a fresh temporary directory, removed after).
    settle_timeout_s : float
        Seconds (0 or more) to wait after a run for its files to be deleted.
    """

    pipelines: Sequence[str] = tuple(WORKLOADS)
    sizes: Sequence[str] = ("small", "medium")
    seeds: Sequence[int] = (0, 1, 2, 3, 4, 5)
    n_workers: int = 2
    memory_limit: str = "1GiB"
    target_fraction: float = 0.025
    tier: Tier = Tier.HDD
    scratch_dir: str | None = None
    settle_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("pipelines", "sizes", "seeds"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise WorkloadError(
                    f"{name}={value!r} must be a list of values, such as {name}=[{value!r}]"
                )
        unknown = [p for p in self.pipelines if p not in WORKLOADS]
        if unknown or not self.pipelines:
            raise WorkloadError(
                f"unknown pipeline(s) {unknown or '(none given)'}; choose from {sorted(WORKLOADS)}"
            )
        bad_sizes = [s for s in self.sizes if s not in SIZES]
        if bad_sizes or not self.sizes:
            raise WorkloadError(
                f"unknown size(s) {bad_sizes or '(none given)'}; choose from {sorted(SIZES)}"
            )
        if not self.seeds or any(not _is_int(s) or s < 0 for s in self.seeds):
            raise WorkloadError(
                f"seeds={list(self.seeds)!r} must be non-negative ints (not bools), such as [0, 1]"
            )
        if not _is_int(self.n_workers) or self.n_workers < 1:
            raise WorkloadError(
                f"n_workers={self.n_workers!r} must be a positive int (not a bool), such as 2"
            )
        if not _is_real(self.target_fraction) or not 0 < self.target_fraction < 1:
            raise WorkloadError(
                f"target_fraction={self.target_fraction!r} must be a number between 0 and 1, "
                "such as 0.025"
            )
        if (
            not _is_real(self.settle_timeout_s)
            or not math.isfinite(self.settle_timeout_s)
            or self.settle_timeout_s < 0
        ):
            raise WorkloadError(
                f"settle_timeout_s={self.settle_timeout_s!r} must be a number of seconds, 0 or "
                "more, such as 30.0"
            )
        try:
            Tier(self.tier)
        except ValueError:
            raise WorkloadError(
                f"tier={self.tier!r} must be one of {[t.value for t in Tier]}"
            ) from None
        from dask.utils import parse_bytes

        try:
            limit = parse_bytes(self.memory_limit)
        except (ValueError, TypeError):
            raise WorkloadError(
                f"memory_limit={self.memory_limit!r} is not a size such as '1GiB'"
            ) from None
        if limit <= 0:
            raise WorkloadError(
                f"memory_limit={self.memory_limit!r} gives no limit, so nothing would spill; "
                "give a size above 0, such as '1GiB'"
            )

    @property
    def spill_threshold_bytes(self) -> int:
        """Bytes a worker holds before it spills: ``memory_limit * target_fraction``."""
        from dask.utils import parse_bytes

        return int(parse_bytes(self.memory_limit) * self.target_fraction)

    def runs(self) -> list[tuple[str, str, int]]:
        """Every (pipeline, size, seed) in run order."""
        return [(p, s, seed) for s in self.sizes for seed in self.seeds for p in self.pipelines]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def dask_settings(target_fraction: float) -> dict[str, Any]:
    """Dask config of the suite: P2P shuffles and rechunks, tight managed memory."""
    return {
        **spill_heavy_settings(target_fraction),
        "distributed.admin.low-level-log-length": 100,
        # a task pinned to a worker that has left fails instead of waiting forever
        "distributed.scheduler.no-workers-timeout": f"{NO_WORKERS_TIMEOUT_S}s",
    }


def run_workload(
    client: Any, workload: Workload, spec: WorkloadSpec, *, settle_timeout_s: float = 30.0
) -> RunResult:
    """Run one workload on ``client``'s cluster with its context set on every worker.

    Waits (up to ``settle_timeout_s`` seconds) until every temporary file of the run is
    deleted, so its rows are logged, then has every worker write its buffered rows.
    Returns a :class:`RunResult`; a failing pipeline is reported (``ok=False``), not
    raised. So is a run during which a worker left the cluster (killed, or restarted by
    its nanny): the rows that worker had not yet written, and the rows of its live
    files, are lost, so the run's rows are incomplete.
    """
    from placement.storage import flush_worker_logs, set_run_context, worker_storage_state

    run_id = f"{workload.name}-{spec.size.name}-s{spec.seed}-{uuid.uuid4().hex[:6]}"
    start = time.perf_counter()
    workers = worker_addresses(client)
    ok, error = True, None
    try:
        _execute(client, workload, spec, run_id)
    except Exception as exc:  # noqa: BLE001 - a failing pipeline is recorded, the suite goes on
        ok, error = False, f"{type(exc).__name__}: {exc}"
        logger.warning("workload %s failed: %s", run_id, error)
    deadline = time.monotonic() + settle_timeout_s
    while time.monotonic() < deadline:
        # a worker leaving during the call answers with its error: it is reported below
        states = client.run(worker_storage_state, on_error="return")
        if all(isinstance(s, dict) and s["live_files"] == 0 for s in states.values()):
            break
        time.sleep(0.1)
    else:
        logger.warning("run %s: temporary files still alive after %.0f s", run_id, settle_timeout_s)
    client.run(set_run_context, None)
    client.run(flush_worker_logs)
    left = sorted(workers - worker_addresses(client))
    if left:
        lost = (
            f"worker(s) {', '.join(left)} left the cluster during the run; the log rows they "
            "held and those of their live files are lost, so the run's rows are incomplete"
        )
        ok, error = False, lost if error is None else f"{lost}; {error}"
        logger.warning("run %s: %s", run_id, lost)
    return RunResult(
        workload.name, spec.size.name, spec.seed, run_id, time.perf_counter() - start, ok, error
    )


def _execute(client: Any, workload: Workload, spec: WorkloadSpec, run_id: str) -> None:
    """Run the plan; every collection and future is released when this returns."""
    from distributed import wait

    from placement.storage import RunContext, set_run_context

    plan = workload.plan(spec)
    known: dict[str, str] = {}
    inputs: dict[str, int] = {}
    stage_keys = StageKeys()  # every phase's task keys: counts add up, not replace

    def tell_workers(collections: Sequence[Any]) -> None:
        if collections:
            facts = graph_facts(collections, workload.operator, first=len(known), seen=stage_keys)
        else:
            facts = GraphFacts(dict(plan.stage_tasks), {}, {})
        known.update(facts.shuffle_stages)
        inputs.update(facts.shuffle_inputs)
        context = RunContext(
            pipeline=workload.name,
            run_id=run_id,
            job_id=run_id,
            operator=workload.operator,
            input_bytes=plan.input_bytes,
            n_partitions_in=plan.n_partitions_in,
            n_workers=spec.n_workers,
            stage_tasks=facts.stage_tasks,
            shuffle_stages=dict(known),
            shuffle_inputs=dict(inputs),
        )
        client.run(set_run_context, context)

    if plan.drive is not None:
        tell_workers([])
        plan.drive(client)
        return
    assert plan.queries is not None
    persisted = None
    if plan.persist is not None:
        tell_workers([plan.persist])
        persisted = client.persist(plan.persist)
        wait(persisted)
    queries = list(plan.queries(persisted))
    tell_workers(queries)
    for query in queries:
        client.compute(query).result()


def collect(
    out_dir: str | os.PathLike[str],
    options: CollectOptions | None = None,
    *,
    progress: bool = True,
    on_run: Callable[[RunResult], None] | None = None,
) -> dict[str, Any]:
    """Run the suite and write ``io_log.parquet`` and ``summary.json`` to ``out_dir``.

    Existing files in ``out_dir`` other than those two are left alone; the two are
    replaced only once the new ones are complete. ``io_log.parquet`` holds the rows of
    the runs that finished whole (``ok``): the rows of failed runs and of runs during
    which a worker left are partial, so they are dropped, with a warning, and counted
    per run id in the summary's ``dropped_rows``.

    While the suite runs, each finished run's log rows are flushed to a hidden
    ``.parts-*`` directory of ``out_dir``, which readers of ``out_dir`` skip
    (:func:`placement.logwriter.log_files`). If the collection is interrupted (Ctrl-C,
    or SIGTERM, which raises :class:`SystemExit` while this runs in the main thread) or
    fails, that directory is kept and the exception gets a note naming it: its logs
    hold the rows of the runs that finished whole, readable by every placement command.
    The rows of the run that was stopped and of failed runs are moved to its hidden
    ``.incomplete`` subdirectory, which readers of the directory skip as well.

    Returns
    -------
    dict
        The summary also written to ``summary.json``.

    Raises
    ------
    PlacementError
        If no run that finished whole left a log row (the error says why).
    """
    options = options or CollectOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts_dir = out / f"{PARTS_PREFIX}{uuid.uuid4().hex[:8]}"
    results: list[RunResult] = []
    with sigterm_raises(functools.partial(SystemExit, 128 + signal.SIGTERM)):
        scratch = Path(tempfile.mkdtemp(prefix="placement-collect-", dir=options.scratch_dir))
        try:
            return _collect(out, options, parts_dir, scratch, results, progress, on_run)
        except BaseException as exc:
            _note_kept_parts(exc, parts_dir, results)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _collect(
    out: Path,
    options: CollectOptions,
    parts_dir: Path,
    scratch: Path,
    results: list[RunResult],
    progress: bool,
    on_run: Callable[[RunResult], None] | None,
) -> dict[str, Any]:
    """The body of :func:`collect`; appends each finished run to ``results``."""
    import dask
    import pyarrow.parquet as pq
    from distributed import Client
    from tqdm.auto import tqdm

    from placement.storage import (
        FixedTier,
        PlacementWorkerPlugin,
        tiered_spill_buffer,
    )

    started = time.perf_counter()
    spill_kwargs = {
        "ssd_dir": str(scratch / "ssd"),
        "hdd_dir": str(scratch / "hdd"),
        "log_dir": str(parts_dir),
        "chooser": FixedTier(Tier(options.tier)),
        "memory_limit": options.memory_limit,
        "log_max_interval_s": 3600.0,
        "log_max_rows": 50_000,
    }
    with (
        dask.config.set(dask_settings(options.target_fraction)),
        local_cluster(
            n_workers=options.n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=options.memory_limit,
            dashboard_address=None,
            local_directory=str(scratch / "dask"),
            data=(tiered_spill_buffer, spill_kwargs),
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(PlacementWorkerPlugin(flush_interval_s=3600.0))
        runs = options.runs()
        bar = tqdm(runs, desc="placement collect", unit="run", disable=None if progress else True)
        for name, size, seed in bar:
            bar.set_postfix_str(f"{name}/{size}/s{seed}")
            spec = WorkloadSpec(SIZES[size], seed, options.n_workers)
            result = run_workload(
                client, WORKLOADS[name], spec, settle_timeout_s=options.settle_timeout_s
            )
            results.append(result)
            if on_run is not None:
                on_run(result)
    logs = read_logs(parts_dir) if parts_dir.exists() else None
    table = logs.table if logs is not None else None
    dropped: Counter[str] = Counter()
    if table is not None:
        keep = _whole_run_rows(table, {r.run_id for r in results if r.ok})
        dropped = _rows_per_run(table.filter(pc.invert(keep)))
        table = table.filter(keep)
    if dropped:
        logger.warning(
            "dropped %d log row(s) of runs that failed or lost a worker (rows per run: %s); "
            "io_log.parquet holds whole runs only",
            sum(dropped.values()),
            dict(dropped),
        )
    if table is None or table.num_rows == 0:
        raise PlacementError(_no_rows_message(options, parts_dir, results, dropped))

    tmp = out / f".{LOG_FILE}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, out / LOG_FILE)
    summary = summarize(table.to_pandas(), results)
    summary["dropped_rows"] = dict(dropped)
    summary["settings"] = {
        **{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(options).items()},
        "tier": Tier(options.tier).value,
    }
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    summary["bad_log_files"] = [str(p) for p, _ in logs.bad_files] if logs else []
    tmp_json = out / f".{SUMMARY_FILE}.tmp"
    tmp_json.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp_json, out / SUMMARY_FILE)
    shutil.rmtree(parts_dir, ignore_errors=True)
    return summary


def _no_rows_message(
    options: CollectOptions, parts_dir: Path, results: Sequence[RunResult], dropped: Counter[str]
) -> str:
    """Why a collection left no log row, and what to change."""
    if results and all(r.ok for r in results):
        return (
            f"the suite produced no log rows in {parts_dir}: every run finished, but no "
            "worker wrote a temporary file. The pipelines run "
            f"({', '.join(dict.fromkeys(options.pipelines))}) wrote no shuffle, rechunk or "
            "cache-shard file, and no worker reached its spill threshold of "
            f"{options.spill_threshold_bytes} bytes (memory_limit {options.memory_limit!r} x "
            f"target_fraction {options.target_fraction}). Lower --target-fraction or "
            "--memory-limit, or add larger --sizes"
        )
    lost = f"; {sum(dropped.values())} row(s) of failed runs were dropped" if dropped else ""
    return (
        f"the suite produced no log rows of a run that finished whole in {parts_dir}{lost}; "
        "check the workers' logs (runs: "
        + ", ".join(f"{r.run_id}: {r.error or 'ok'}" for r in results)
        + ")"
    )


def _whole_run_rows(table: Any, run_ids: Collection[str]) -> Any:
    """Boolean mask of the rows of ``table`` whose ``run_id`` is one of ``run_ids``."""
    import pyarrow as pa

    inside = pc.is_in(table["run_id"], value_set=pa.array(sorted(run_ids), pa.string()))
    return pc.fill_null(inside, False)


def _rows_per_run(table: Any) -> Counter[str]:
    """Rows of ``table`` per run id (``"(no run)"`` for rows without one)."""
    return Counter("(no run)" if r is None else str(r) for r in table["run_id"].to_pylist())


#: Subdirectory of a kept ``.parts-*`` directory holding the rows of unfinished runs.
INCOMPLETE_DIR = ".incomplete"


def _set_apart_unfinished(parts_dir: Path, run_ids: Collection[str]) -> Counter[str]:
    """Move the rows of ``parts_dir``'s log files that are not of ``run_ids`` to
    ``parts_dir/.incomplete`` (which readers of ``parts_dir`` skip); return the rows
    moved per run id. Each file is rewritten atomically; unreadable files are left."""
    import pyarrow.parquet as pq

    from placement.logwriter import log_files

    moved: Counter[str] = Counter()
    for path in log_files(parts_dir):
        try:
            table = pq.read_table(path)
            keep = _whole_run_rows(table, run_ids)
            n_keep = pc.sum(keep).as_py() or 0
            if n_keep == table.num_rows:
                continue
            rest = table.filter(pc.invert(keep))
            aside = parts_dir / INCOMPLETE_DIR / path.relative_to(parts_dir)
            aside.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rest, aside.with_name(f".{aside.name}.tmp"))
            os.replace(aside.with_name(f".{aside.name}.tmp"), aside)
            if n_keep:
                tmp = path.with_name(f".{path.name}.tmp")
                pq.write_table(table.filter(keep), tmp)
                os.replace(tmp, path)
            else:
                path.unlink()
            moved.update(_rows_per_run(rest))
        except Exception as exc:  # noqa: BLE001 - the collection's own error is the one raised
            logger.warning("could not set apart the unfinished runs' rows of %s: %s", path, exc)
    return moved


def _note_kept_parts(exc: BaseException, parts_dir: Path, results: Sequence[RunResult]) -> None:
    """Keep only whole runs' rows in ``parts_dir`` (the rest go to its ``.incomplete``) and
    tell (in a note on ``exc`` and in the log) where they are."""
    if not parts_dir.is_dir() or not any(parts_dir.rglob("*.parquet")):
        return
    whole = [r for r in results if r.ok]
    moved = _set_apart_unfinished(parts_dir, {r.run_id for r in whole})
    note = (
        f"the logs of the {len(whole)} run(s) finished before this are kept in {parts_dir}; "
        f"every placement command reads that directory (dataplane placement train {parts_dir} "
        "--out model/), and readers of its parent skip it"
    )
    if moved:
        note += (
            f". The {sum(moved.values())} row(s) of runs stopped part way or failed (rows per "
            f"run: {dict(moved)}) are set apart in {parts_dir / INCOMPLETE_DIR}, which those "
            "readers skip too"
        )
    add_note = getattr(exc, "add_note", None)  # Python >= 3.11
    if add_note is not None:
        add_note(note)
    else:  # what add_note does; Python 3.10 does not print it, callers that look do
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]
    logging.getLogger(KEPT_PARTS_LOGGER).warning("collection stopped: %s", note)


def _spread(values: np.ndarray) -> dict[str, float | None]:
    values = values[np.isfinite(values) & (values > 0)]
    if values.size == 0:
        return {"min": None, "median": None, "max": None, "orders_of_magnitude": None}
    lo, hi = float(values.min()), float(values.max())
    return {
        "min": lo,
        "median": float(np.median(values)),
        "max": hi,
        "p05": float(np.quantile(values, 0.05)),
        "p95": float(np.quantile(values, 0.95)),
        "orders_of_magnitude": round(math.log10(hi / lo), 2),
    }


def summarize(frame: pd.DataFrame, results: Sequence[RunResult] = ()) -> dict[str, Any]:
    """Rows, runs, bytes, operations and I/O-density spread per pipeline and file kind."""
    from placement.schema import io_density

    life = frame["deleted_at"].to_numpy(float) - frame["created_at"].to_numpy(float)
    frame = frame.assign(
        io_density=io_density(frame["read_ops"], frame["write_ops"], frame["size_bytes"], life)
    )

    def block(df: pd.DataFrame) -> dict[str, Any]:
        return {
            "rows": len(df),
            "runs": int(df["run_id"].nunique()),
            "by_kind": {str(k): int(v) for k, v in df["file_kind"].value_counts().items()},
            "write_bytes": int(df["write_bytes"].sum()),
            "read_bytes": int(df["read_bytes"].sum()),
            "write_ops": int(df["write_ops"].sum()),
            "read_ops": int(df["read_ops"].sum()),
            "stages": int(df["stage"].nunique()),
            "io_density": _spread(df["io_density"].to_numpy(float)),
        }

    summary: dict[str, Any] = {"total": block(frame)}
    summary["pipelines"] = {str(p): block(df) for p, df in frame.groupby("pipeline", sort=True)}
    summary["file_kinds"] = {str(k): block(df) for k, df in frame.groupby("file_kind", sort=True)}
    summary["runs"] = [asdict(r) for r in results]
    summary["failed_runs"] = [asdict(r) for r in results if not r.ok]
    return summary


__all__ = [
    "CollectOptions",
    "RunResult",
    "collect",
    "dask_settings",
    "run_workload",
    "summarize",
]
