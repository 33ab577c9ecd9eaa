"""A spill- and shuffle-heavy Dask dataframe pipeline, and where its temporary files went.

Used by ``dataplane serve --demo``, the service's end-to-end tests and
``benchmarks/dask_service.py``. :func:`run_pipeline` generates a dataframe on the
workers, shuffles it by key with P2P (shuffle files), persists the result under tight
memory (spill files), aggregates it by key and, when asked, checks the answer against
pandas. :func:`tier_split` sums a run's log rows by tier and file kind.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from placement.errors import PlacementError
from placement.graph_facts import graph_facts
from placement.service.errors import ServiceConfigError
from placement.workloads import FramePart, make_frame, worker_addresses

AGGREGATES = {"v": "sum", "w": "max", "t": "count"}


@dataclass(frozen=True, kw_only=True)
class PipelineSpec:
    """Size of one pipeline run (validated at construction).

    Parameters
    ----------
    partitions : int
        Input partitions (and shuffle output partitions).
    rows : int
        Rows per partition (32 bytes each).
    n_keys : int
        Distinct shuffle keys.
    seed : int
        Seed of the generated data.
    """

    partitions: int = 12
    rows: int = 100_000
    n_keys: int = 20_000
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("partitions", "rows", "n_keys"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ServiceConfigError(f"PipelineSpec {name}={value!r} must be a positive int")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ServiceConfigError(f"PipelineSpec seed={self.seed!r} must be an int >= 0")

    @property
    def parts(self) -> list[FramePart]:
        return [
            FramePart(self.seed, i, self.rows, self.n_keys, skewed=False)
            for i in range(self.partitions)
        ]

    @property
    def input_bytes(self) -> int:
        """Bytes of the generated frame (4 eight-byte columns)."""
        return 32 * self.rows * self.partitions


@dataclass
class PipelineResult:
    """One run: its id, wall time (seconds), rows shuffled, and whether it matched pandas."""

    run_id: str
    wall_s: float
    rows: int
    verified: bool | None


def expected_result(spec: PipelineSpec) -> pd.DataFrame:
    """The pipeline's answer computed by pandas alone."""
    frame = pd.concat([make_frame(p) for p in spec.parts], ignore_index=True)
    return frame.groupby("k").agg(AGGREGATES)


def run_pipeline(
    client: Any,
    spec: PipelineSpec | None = None,
    *,
    pipeline: str = "service-demo",
    run_id: str | None = None,
    tell_workers: bool = True,
    verify: bool = True,
) -> PipelineResult:
    """Run the pipeline on ``client``'s cluster.

    Parameters
    ----------
    tell_workers : bool
        Set the run context on the workers first (pipeline, run id, stage task counts,
        shuffle names) so each file's creation-time facts are known; requires the
        workers to import :mod:`placement.storage`.
    verify : bool
        Compare the answer with pandas.

    Raises
    ------
    PlacementError
        If ``verify`` and the answer differs from pandas' (data was lost or corrupted).
    """
    import dask.dataframe as dd
    from distributed import wait

    spec = spec or PipelineSpec()
    run_id = run_id or f"{pipeline}-{uuid.uuid4().hex[:8]}"
    parts = spec.parts
    meta = make_frame(FramePart(0, 0, 1, 1, False)).iloc[:0]
    frame = dd.from_map(make_frame, parts, meta=meta, enforce_metadata=False, label="input")
    shuffled = frame.shuffle("k", shuffle_method="p2p")
    if tell_workers:
        from placement.storage import RunContext, set_run_context

        facts = graph_facts([shuffled], "shuffle")
        client.run(
            set_run_context,
            RunContext(
                pipeline=pipeline,
                run_id=run_id,
                job_id=run_id,
                operator="shuffle",
                input_bytes=spec.input_bytes,
                n_partitions_in=spec.partitions,
                n_workers=len(worker_addresses(client)),
                stage_tasks=facts.stage_tasks,
                shuffle_stages=facts.shuffle_stages,
                shuffle_inputs=facts.shuffle_inputs,
            ),
        )
    start = time.perf_counter()
    try:
        persisted = client.persist(shuffled)
        wait(persisted)
        result = persisted.groupby("k").agg(AGGREGATES).compute()
        rows = len(persisted)
        del persisted
    finally:
        wall = time.perf_counter() - start
        if tell_workers:
            from placement.storage import set_run_context

            client.run(set_run_context, None)
    verified: bool | None = None
    if verify:
        expected = expected_result(spec)
        try:
            pd.testing.assert_frame_equal(
                result.sort_index(), expected.sort_index(), check_exact=False, rtol=1e-9
            )
        except AssertionError as exc:
            raise PlacementError(f"pipeline {run_id} does not match pandas: {exc}") from exc
        if rows != spec.rows * spec.partitions:
            raise PlacementError(
                f"pipeline {run_id} shuffled {rows} rows, expected {spec.rows * spec.partitions}"
            )
        verified = True
    return PipelineResult(run_id, wall, rows, verified)


def settle(client: Any, timeout_s: float = 60.0) -> dict[str, dict[str, int]]:
    """Wait until the workers' temporary files are deleted, flush their logs; return their state.

    Raises
    ------
    PlacementError
        If files are still alive after ``timeout_s`` seconds.
    """
    from placement.storage import flush_worker_logs, worker_storage_state

    deadline = time.monotonic() + timeout_s
    while True:
        states = client.run(worker_storage_state)
        if all(s["live_files"] == 0 for s in states.values()):
            break
        if time.monotonic() > deadline:
            raise PlacementError(f"temporary files still alive after {timeout_s} s: {states}")
        time.sleep(0.05)
    return client.run(flush_worker_logs)


def tier_split(rows: pd.DataFrame, by: Sequence[str] = ("tier", "file_kind")) -> pd.DataFrame:
    """Files, bytes and I/O of log ``rows`` summed by tier (and file kind).

    Columns: ``files``, ``size_bytes`` (largest size, summed), ``write_bytes``,
    ``read_bytes``, ``write_ops``, ``read_ops`` and ``io_share`` (the share of all
    bytes written and read).
    """
    cols = ["size_bytes", "write_bytes", "read_bytes", "write_ops", "read_ops"]
    if rows.empty:
        return pd.DataFrame(columns=["files", *cols, "io_share"])
    out = rows.groupby(list(by), observed=True)[cols].sum()
    out.insert(0, "files", rows.groupby(list(by), observed=True).size())
    io = out["write_bytes"] + out["read_bytes"]
    total = float(io.sum())
    out["io_share"] = np.where(total > 0, io / total if total else 0.0, 0.0)
    return out
