"""Creation-time facts a worker gathers for each new temporary file.

Two sources feed a :class:`~placement.storage.request.FileRequest`:

* the **run context** (:class:`RunContext`): what the driver of a pipeline knows about
  the run - pipeline name, run id, input bytes, how many tasks each stage has, which
  stage each P2P shuffle belongs to. It is set in each worker process with
  :func:`set_run_context` (e.g. ``client.run(set_run_context, ctx)``), because Dask
  dataframe graphs drop task annotations under query planning;
* the **worker** (:class:`RequestBuilder`): worker address, the producing task's
  priority, memory pressure, the file's own expected size and, for a spilled key, how
  far ahead in the graph order its next reader is (:meth:`RequestBuilder.reuse_of`).

One method per file kind builds the request: :meth:`RequestBuilder.spill`,
:meth:`RequestBuilder.p2p` (shuffle and rechunk outputs) and
:meth:`RequestBuilder.shard` (cache shards, :mod:`placement.storage.shards`).
"""

from __future__ import annotations

import socket
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dask.utils import key_split

from placement.errors import PlacementTypeError
from placement.schema import UNLABELLED
from placement.storage.errors import StorageConfigError
from placement.storage.request import INT32_MAX, FileKind, FileRequest, as_count

#: Worker task states of a dependent that will not read its dependency again.
_DONE_STATES = frozenset({"memory", "released", "forgotten", "error", "cancelled"})


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What the driver knows about the pipeline run whose files are being created.

    Parameters
    ----------
    pipeline, run_id : str
        Workload name and the id of this execution.
    job_id : str, optional
        Graph id within the run.
    operator : str, optional
        Operator kind of the run's main step (``merge``, ``rechunk``...).
    input_bytes : int, optional
        Bytes of the pipeline's input.
    n_partitions_in : int, optional
        Partitions of the pipeline's input.
    n_workers : int, optional
        Workers in the cluster.
    stage_tasks : mapping of str to int
        Number of tasks of each stage (task prefix, :func:`dask.utils.key_split`).
    stage_operators : mapping of str to str
        Operator kind of particular stages, overriding ``operator``.
    shuffle_stages : mapping of str to str
        Stage name of each P2P shuffle / rechunk id.
    shuffle_inputs : mapping of str to int
        Input partitions (transfer tasks) of each P2P shuffle / rechunk id.
    """

    pipeline: str
    run_id: str
    job_id: str | None = None
    operator: str | None = None
    input_bytes: int | None = None
    n_partitions_in: int | None = None
    n_workers: int | None = None
    stage_tasks: Mapping[str, int] = field(default_factory=dict)
    stage_operators: Mapping[str, str] = field(default_factory=dict)
    shuffle_stages: Mapping[str, str] = field(default_factory=dict)
    shuffle_inputs: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("pipeline", "run_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise StorageConfigError(f"RunContext.{name}={value!r} must be a non-empty string")
        # counts computed with numpy (``df.memory_usage().sum()``) are fine; floats are not,
        # and are refused here, on the driver, rather than in every file a worker creates
        for name in ("input_bytes", "n_partitions_in", "n_workers"):
            object.__setattr__(self, name, as_count(f"RunContext.{name}", getattr(self, name)))
        for name in ("stage_tasks", "shuffle_inputs"):
            counts = {
                str(k): as_count(f"RunContext.{name}[{k!r}]", v)
                for k, v in dict(getattr(self, name)).items()
            }
            object.__setattr__(self, name, counts)


_context_lock = threading.Lock()
_current: RunContext | None = None


def set_run_context(context: RunContext | None) -> None:
    """Make ``context`` the run context of this process (``None`` clears it).

    Files created afterwards carry its facts. Meant for ``client.run``.
    """
    global _current
    if context is not None and not isinstance(context, RunContext):
        raise PlacementTypeError(
            f"context must be a RunContext or None, got {type(context).__name__}"
        )
    with _context_lock:
        _current = context


def get_run_context() -> RunContext | None:
    """The run context of this process, if one is set."""
    with _context_lock:
        return _current


def dask_order_position(priority: Any) -> int | None:
    """The ``dask.order`` position inside a Dask task priority tuple, clipped to int32.

    Dask's scheduler sets priorities to ``(-user_priority, generation, order_position)``.
    """
    if not isinstance(priority, tuple) or not priority:
        return None
    value = priority[2] if len(priority) >= 3 else priority[-1]
    try:
        return max(-INT32_MAX, min(INT32_MAX, int(value)))
    except (TypeError, ValueError):
        return None


def _operator_of(ctx: RunContext | None, stage: str) -> str | None:
    """The operator kind of ``stage``: the run's override for the stage, else the run's."""
    if ctx is None:
        return None
    return ctx.stage_operators.get(stage, ctx.operator)


class RequestBuilder:
    """Builds :class:`FileRequest` objects from the run context and the worker's state.

    Parameters
    ----------
    clock : callable, optional
        Wall clock in seconds since the epoch.
    memory_pressure : callable, optional
        Returns managed memory / memory limit now (or ``None``).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        memory_pressure: Callable[[], float | None] | None = None,
    ) -> None:
        self.clock = clock
        self.memory_pressure: Callable[[], float | None] = memory_pressure or (lambda: None)
        self.host = socket.gethostname()
        self.worker_name: str | None = None
        self._worker: weakref.ReferenceType[Any] | None = None
        self._p2p_priority: dict[str, int | None] = {}

    def bind_worker(self, worker: Any) -> None:
        """Take the worker's address and task priorities from now on."""
        self.worker_name = str(worker.address)
        self._worker = weakref.ref(worker)

    def _tasks(self) -> Mapping[Hashable, Any]:
        worker = self._worker() if self._worker is not None else None
        state = getattr(worker, "state", None)
        return getattr(state, "tasks", None) or {}

    def priority_of(self, key: Hashable) -> int | None:
        """Graph-order position of task ``key`` on the bound worker, if known."""
        ts = self._tasks().get(key)
        return dask_order_position(getattr(ts, "priority", None))

    def reuse_of(self, key: Hashable) -> tuple[int | None, int | None]:
        """``(reuse_distance, n_dependents)`` of task ``key``'s result on the bound worker.

        ``n_dependents`` counts the key's dependents this worker still has to run;
        ``reuse_distance`` is the graph-order position of the first of them minus that
        of the task running now (the smallest executing one; 0 when none runs), both
        from ``dask.order`` priorities. ``(None, None)`` without a worker or task
        state. Read without locks from a live worker, so a set that changes while it
        is read gives ``(None, None)`` rather than failing the spill.
        """
        worker = self._worker() if self._worker is not None else None
        state = getattr(worker, "state", None)
        ts = self._tasks().get(key)
        if state is None or ts is None:
            return None, None
        try:
            waiting = [
                dask_order_position(d.priority)
                for d in list(ts.dependents)
                if d.state not in _DONE_STATES
            ]
            running = [
                dask_order_position(t.priority) for t in list(getattr(state, "executing", ()))
            ]
        except (RuntimeError, AttributeError):  # set changed size during iteration
            return None, None
        waiting_pos = [p for p in waiting if p is not None]
        now = min((p for p in running if p is not None), default=0)
        # FileRequest clips it to the int32 log column
        distance = min(waiting_pos) - now if waiting_pos else None
        return distance, len(waiting)

    def _pressure(self) -> float | None:
        try:
            value = self.memory_pressure()
        except Exception:  # noqa: BLE001 - facts are best effort; never fail a file creation
            return None
        return None if value is None else max(0.0, float(value))

    def _base(self, ctx: RunContext | None) -> dict[str, Any]:
        return {
            "created_at": self.clock(),
            "pipeline": ctx.pipeline if ctx else UNLABELLED,
            "run_id": ctx.run_id if ctx else UNLABELLED,
            "job_id": ctx.job_id if ctx else None,
            "worker": self.worker_name,
            "host": self.host,
            "input_bytes": ctx.input_bytes if ctx else None,
            "n_workers": ctx.n_workers if ctx else None,
            "memory_pressure": self._pressure(),
        }

    def spill(self, key: Hashable, expected_size_bytes: int | None) -> FileRequest:
        """Facts of the spill file of task ``key`` (``expected_size_bytes``: its pickled size)."""
        ctx = get_run_context()
        stage = key_split(key) or "unknown"
        reuse_distance, n_dependents = self.reuse_of(key)
        return FileRequest(
            file_kind=FileKind.SPILL,
            stage=stage,
            operator=_operator_of(ctx, stage),
            expected_size_bytes=expected_size_bytes,
            n_partitions_in=ctx.n_partitions_in if ctx else None,
            n_partitions_out=ctx.stage_tasks.get(stage) if ctx else None,
            priority=self.priority_of(key),
            reuse_distance=reuse_distance,
            n_dependents=n_dependents,
            **self._base(ctx),
        )

    def shard(
        self,
        stage: str,
        expected_size_bytes: int,
        *,
        n_shards: int | None = None,
        key: Hashable | None = None,
    ) -> FileRequest:
        """Facts of a cache shard written by task ``key`` of ``stage``.

        ``expected_size_bytes`` is the shard's size (its records are in hand when it is
        created) and ``n_shards`` the shards the cache will hold (``n_partitions_out``).
        """
        ctx = get_run_context()
        return FileRequest(
            file_kind=FileKind.CACHE_SHARD,
            stage=stage,
            operator=_operator_of(ctx, stage) or "cache",
            expected_size_bytes=expected_size_bytes,
            n_partitions_in=ctx.n_partitions_in if ctx else None,
            n_partitions_out=n_shards,
            priority=self.priority_of(key) if key is not None else None,
            **self._base(ctx),
        )

    def p2p(self, kind: FileKind, shuffle_id: str, n_partitions_out: int | None) -> FileRequest:
        """Facts of one output file of P2P shuffle / rechunk ``shuffle_id`` on this worker."""
        ctx = get_run_context()
        kind = FileKind(kind)
        default_stage = "p2p-rechunk" if kind is FileKind.RECHUNK else "p2p-shuffle"
        stage = ctx.shuffle_stages.get(shuffle_id, default_stage) if ctx else default_stage
        n_in = ctx.shuffle_inputs.get(shuffle_id) if ctx else None
        expected = None
        if ctx is not None and ctx.input_bytes and n_partitions_out:
            expected = ctx.input_bytes // n_partitions_out
        return FileRequest(
            file_kind=kind,
            stage=stage,
            operator=_operator_of(ctx, stage)
            or ("rechunk" if kind is FileKind.RECHUNK else "shuffle"),
            expected_size_bytes=expected,
            n_partitions_in=n_in,
            n_partitions_out=n_partitions_out,
            priority=self._shuffle_priority(shuffle_id),
            **self._base(ctx),
        )

    def _shuffle_priority(self, shuffle_id: str) -> int | None:
        """Smallest graph position of the shuffle's tasks on this worker (cached per shuffle)."""
        if shuffle_id in self._p2p_priority:
            return self._p2p_priority[shuffle_id]
        best: int | None = None
        if shuffle_id:
            for key, ts in list(self._tasks().items()):
                name = key[0] if isinstance(key, tuple) and key else key
                if isinstance(name, str) and name.endswith(shuffle_id):
                    pos = dask_order_position(getattr(ts, "priority", None))
                    if pos is not None and (best is None or pos < best):
                        best = pos
        if len(self._p2p_priority) > 1024:
            self._p2p_priority.clear()
        self._p2p_priority[shuffle_id] = best
        return best
