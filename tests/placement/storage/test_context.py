"""The facts a worker gathers for each new temporary file: the driver's run context, and
what the request builder reads of a live Dask worker (task priorities, the readers still
to run, memory pressure) for spill, cache-shard and P2P files."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from dask import delayed
from distributed import Client, Scheduler, Worker
from distributed.worker_state_machine import TaskState

from placement.errors import PlacementTypeError
from placement.schema import UNLABELLED
from placement.storage import FileKind, RunContext, StorageConfigError, set_run_context
from placement.storage.context import RequestBuilder, dask_order_position, get_run_context
from placement.storage.request import INT32_MAX
from tests.placement.inprocess import on_a_worker


@contextmanager
def run_context(context: RunContext) -> Iterator[RunContext]:
    """``context`` set in this process for the block, cleared after it."""
    set_run_context(context)
    try:
        yield context
    finally:
        set_run_context(None)


def add_task(worker: Worker, key: Any, position: int | None, state: str = "waiting") -> TaskState:
    """A task of ``worker`` at graph position ``position``, with a worker's priority
    tuple: the scheduler's ``(-user priority, generation, position)`` and the worker's own
    generation (``None``: a task without a priority yet)."""
    ts = TaskState(key)
    ts.state = state
    ts.priority = None if position is None else (0, 1, position, -len(worker.state.tasks))
    worker.state.tasks[key] = ts
    return ts


def reuse_on(worker: Worker, key: Any) -> tuple[int | None, int | None]:
    """``(reuse_distance, n_dependents)`` of ``key`` as a builder bound to ``worker`` sees it."""
    builder = RequestBuilder()
    builder.bind_worker(worker)
    return builder.reuse_of(key)


# ---------------------------------------------------------------------- run context
def test_the_run_context_names_its_run() -> None:
    with pytest.raises(StorageConfigError, match=r"RunContext.run_id='' must be a non-empty"):
        RunContext(pipeline="p", run_id="")
    with pytest.raises(StorageConfigError, match=r"RunContext.pipeline=None must be a non-empty"):
        RunContext(pipeline=None, run_id="r")  # type: ignore[arg-type]


def test_the_run_context_takes_counts_and_refuses_fractions() -> None:
    ctx = RunContext(
        pipeline="p",
        run_id="r",
        n_workers=np.int64(3),
        stage_tasks={1: np.int64(2)},
        shuffle_inputs={"s": np.int32(4)},
    )
    assert ctx.n_workers == 3 and type(ctx.n_workers) is int
    assert ctx.stage_tasks == {"1": 2}, "stage names are strings"
    assert ctx.shuffle_inputs == {"s": 4} and type(ctx.shuffle_inputs["s"]) is int
    with pytest.raises(StorageConfigError, match=r"RunContext.n_workers=1.5 must be"):
        RunContext(pipeline="p", run_id="r", n_workers=1.5)  # type: ignore[arg-type]
    with pytest.raises(StorageConfigError, match=r"RunContext.shuffle_inputs\['s'\]=-1 must be"):
        RunContext(pipeline="p", run_id="r", shuffle_inputs={"s": -1})


def test_only_a_run_context_or_none_can_be_set() -> None:
    try:
        with pytest.raises(
            PlacementTypeError, match="context must be a RunContext or None, got dict"
        ):
            set_run_context({"pipeline": "p", "run_id": "r"})  # type: ignore[arg-type]
        assert get_run_context() is None
    finally:
        set_run_context(None)


# ---------------------------------------------------------------------- graph positions
def test_the_graph_position_is_the_third_field_of_a_priority() -> None:
    assert dask_order_position((0, 1, 5)) == 5
    assert dask_order_position((0, 1, 5, -3)) == 5, "a worker appends its own generation"
    assert dask_order_position((1, 7)) == 7 and dask_order_position((9,)) == 9
    assert dask_order_position((0, 2, np.int64(6))) == 6


@pytest.mark.parametrize("priority", [None, (), [0, 1, 5], (0, 1, "x"), (0, 1, None)])
def test_a_priority_without_a_position_gives_none(priority: object) -> None:
    assert dask_order_position(priority) is None


def test_a_graph_position_is_clipped_to_the_int32_column() -> None:
    assert dask_order_position((0, 0, 2**40)) == INT32_MAX
    assert dask_order_position((0, 0, -(2**40))) == -INT32_MAX


def test_a_task_priority_is_the_position_dask_order_gave_it_on_the_scheduler() -> None:
    def inc(x: int) -> int:
        return x + 1

    def total(*xs: int) -> int:
        return sum(xs)

    async def main() -> tuple[dict[str, int | None], dict[str, int]]:
        async with (
            Scheduler(port=0, dashboard=False, dashboard_address=None) as scheduler,
            Worker(scheduler.address, nthreads=1) as worker,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            parts = [delayed(inc)(i, dask_key_name=f"inc-{i}") for i in range(6)]
            futures = client.compute([*parts, delayed(total)(*parts, dask_key_name="total")])
            await client.gather(futures)
            builder = RequestBuilder()
            builder.bind_worker(worker)
            got = {f.key: builder.priority_of(f.key) for f in futures}
            ordered = {f.key: scheduler.tasks[f.key].priority[2] for f in futures}
            assert builder.worker_name == worker.address
            return got, ordered

    got, ordered = asyncio.run(main())
    assert got == ordered and sorted(ordered.values()) == list(range(7))
    assert RequestBuilder().priority_of("inc-0") is None  # no worker bound


# ---------------------------------------------------------------------- spill facts
def test_dependents_that_have_run_or_left_are_no_readers() -> None:
    def check(worker: Worker) -> list[tuple[int | None, int | None]]:
        key = add_task(worker, "x-1", 5, "memory")
        out = []
        for state in ("memory", "released", "forgotten", "error", "cancelled"):
            key.dependents = {add_task(worker, f"y-{state}", 9, state)}
            out.append(reuse_on(worker, "x-1"))
        key.dependents = {add_task(worker, "y-ready", 9, "ready")}
        out.append(reuse_on(worker, "x-1"))
        return out

    *done, ready = on_a_worker(check)
    assert done == [(None, 0)] * 5
    assert ready == (9, 1)


def test_the_reuse_distance_counts_from_the_earliest_running_task() -> None:
    def check(worker: Worker) -> tuple[int | None, int | None]:
        key = add_task(worker, "x-1", 5, "memory")
        key.dependents = {add_task(worker, "y-1", 30, "waiting")}
        for position in (20, 10, 25):
            worker.state.executing.add(add_task(worker, f"z-{position}", position, "executing"))
        return reuse_on(worker, "x-1")

    assert on_a_worker(check) == (30 - 10, 1)


def test_with_nothing_running_the_distance_counts_from_the_start_of_the_graph() -> None:
    def check(worker: Worker) -> tuple[int | None, int | None]:
        key = add_task(worker, "x-1", 5, "memory")
        key.dependents = {add_task(worker, "y-1", 12, "ready")}
        return reuse_on(worker, "x-1")

    assert on_a_worker(check) == (12, 1)


def test_a_key_the_worker_does_not_hold_or_no_worker_bound_gives_no_reuse_facts() -> None:
    assert RequestBuilder().reuse_of("x-1") == (None, None)
    assert on_a_worker(lambda worker: reuse_on(worker, "unknown-key")) == (None, None)


def test_a_spill_request_carries_the_keys_position_stage_and_next_reader() -> None:
    def check(worker: Worker) -> list[dict[str, Any]]:
        key = add_task(worker, "x-1", 5, "memory")
        key.dependents = {add_task(worker, "y-0", 7, "memory"), add_task(worker, "y-2", 12)}
        worker.state.executing.add(add_task(worker, "z-0", 10, "executing"))
        builder = RequestBuilder()
        builder.bind_worker(worker)
        read_soon = builder.spill("x-1", 1000).to_row()
        key.dependents = set()
        return [read_soon, builder.spill("x-1", 1000).to_row()]

    read_soon, unread = on_a_worker(check)
    assert (read_soon["priority"], read_soon["stage"]) == (5, "x")
    assert (read_soon["reuse_distance"], read_soon["n_dependents"]) == (12 - 10, 1)
    assert read_soon["expected_size_bytes"] == 1000
    assert (unread["reuse_distance"], unread["n_dependents"]) == (None, 0)


def test_a_reader_not_yet_ordered_counts_but_gives_no_distance() -> None:
    def check(worker: Worker) -> list[tuple[int | None, int | None]]:
        key = add_task(worker, "x-1", 5, "memory")
        key.dependents = {add_task(worker, "y-1", None, "waiting")}
        alone = reuse_on(worker, "x-1")
        key.dependents.add(add_task(worker, "y-2", 8, "waiting"))
        return [alone, reuse_on(worker, "x-1")]

    assert on_a_worker(check) == [(None, 1), (8, 2)]


def test_memory_pressure_is_never_negative() -> None:
    assert RequestBuilder(memory_pressure=lambda: -0.25).spill("x-1", 10).memory_pressure == 0.0
    assert RequestBuilder(memory_pressure=lambda: 0.75).spill("x-1", 10).memory_pressure == 0.75
    assert RequestBuilder().spill("x-1", 10).memory_pressure is None


def test_a_failing_memory_probe_leaves_the_pressure_unknown_and_the_file_created() -> None:
    def probe() -> float:  # a probe whose source is gone: the fault this guards against
        raise OSError("worker memory monitor closed")

    req = RequestBuilder(memory_pressure=probe).spill("x-1", 10)
    assert req.memory_pressure is None and req.expected_size_bytes == 10


def test_a_spill_carries_the_run_and_the_host() -> None:
    context = RunContext(
        pipeline="etl",
        run_id="etl-7",
        job_id="job-2",
        operator="groupby",
        n_workers=4,
        stage_operators={"merge": "merge"},
        stage_tasks={"merge": 12},
    )
    with run_context(context):
        joined = RequestBuilder().spill(("merge-ab12", 3), 100)
        other = RequestBuilder().spill("agg-1", 100)
    assert (joined.pipeline, joined.run_id, joined.job_id) == ("etl", "etl-7", "job-2")
    assert (joined.stage, joined.operator, joined.n_partitions_out) == ("merge", "merge", 12)
    assert (other.stage, other.operator, other.n_partitions_out) == ("agg", "groupby", None)
    assert joined.n_workers == 4 and joined.host == socket.gethostname()
    bare = RequestBuilder().spill("agg-1", 100)
    assert (bare.pipeline, bare.run_id, bare.job_id, bare.n_workers) == (
        UNLABELLED,
        UNLABELLED,
        None,
        None,
    )


# ---------------------------------------------------------------------- cache shards
def test_a_shard_written_by_a_task_takes_its_graph_position() -> None:
    def check(worker: Worker) -> list[int | None]:
        add_task(worker, ("augment-ab", 2), 17, "executing")
        builder = RequestBuilder()
        builder.bind_worker(worker)
        with_key = builder.shard("augment", 1000, n_shards=4, key=("augment-ab", 2))
        without = builder.shard("augment", 1000, n_shards=4)
        assert with_key.worker == worker.address and with_key.operator == "cache"
        return [with_key.priority, without.priority]

    assert on_a_worker(check) == [17, None]


# ---------------------------------------------------------------------- P2P files
def test_p2p_files_without_a_context_are_named_after_their_kind() -> None:
    builder = RequestBuilder()
    rechunk = builder.p2p(FileKind.RECHUNK, "abc", 8)
    shuffle = builder.p2p("shuffle", "def", 8)
    assert (rechunk.stage, rechunk.operator) == ("p2p-rechunk", "rechunk")
    assert (shuffle.stage, shuffle.operator) == ("p2p-shuffle", "shuffle")
    assert rechunk.file_kind is FileKind.RECHUNK and rechunk.expected_size_bytes is None


def test_a_p2p_file_expects_its_share_of_the_run_input() -> None:
    context = RunContext(
        pipeline="p",
        run_id="r",
        input_bytes=1000,
        shuffle_stages={"abc": "shuffle-p2p0"},
        shuffle_inputs={"abc": 6},
    )
    with run_context(context):
        builder = RequestBuilder()
        named = builder.p2p(FileKind.SHUFFLE, "abc", 8)
        unknown_out = [builder.p2p(FileKind.SHUFFLE, "abc", n) for n in (None, 0)]
        other = builder.p2p(FileKind.SHUFFLE, "zzz", 3)
    assert (named.expected_size_bytes, named.n_partitions_in, named.n_partitions_out) == (125, 6, 8)
    assert named.stage == "shuffle-p2p0"
    assert [r.expected_size_bytes for r in unknown_out] == [None, None]
    assert (other.stage, other.expected_size_bytes, other.n_partitions_in) == (
        "p2p-shuffle",
        333,
        None,
    )


def test_a_shuffle_takes_the_earliest_position_of_its_tasks_on_the_worker() -> None:
    def check(worker: Worker) -> list[int | None]:
        add_task(worker, ("shuffle-transfer-abc", 0), 40)
        add_task(worker, ("shuffle-transfer-abc", 1), 12)
        add_task(worker, ("shuffle_p2p-abc", 0), 30)
        add_task(worker, "barrier-abc", 25)
        add_task(worker, ("abc-unrelated", 0), 1)  # starts with the id: another stage
        add_task(worker, ("shuffle-transfer-xabc0", 0), 2)
        builder = RequestBuilder()
        builder.bind_worker(worker)
        return [
            builder.p2p(FileKind.SHUFFLE, "abc", 4).priority,
            builder.p2p(FileKind.SHUFFLE, "", 4).priority,
            builder.p2p(FileKind.SHUFFLE, "nothing", 4).priority,
        ]

    assert on_a_worker(check) == [12, None, None]


def test_a_shuffles_position_is_kept_once_found() -> None:
    def check(worker: Worker) -> list[int | None]:
        add_task(worker, ("shuffle-transfer-abc", 0), 12)
        builder = RequestBuilder()
        builder.bind_worker(worker)
        first = builder.p2p(FileKind.SHUFFLE, "abc", 4).priority
        del worker.state.tasks[("shuffle-transfer-abc", 0)]  # its transfer tasks are done
        return [first, builder.p2p(FileKind.SHUFFLE, "abc", 4).priority]

    assert on_a_worker(check) == [12, 12]


def test_the_remembered_shuffle_positions_are_bounded() -> None:
    def check(worker: Worker) -> list[int | None]:
        add_task(worker, ("shuffle-transfer-abc", 0), 12)
        builder = RequestBuilder()
        builder.bind_worker(worker)
        first = builder.p2p(FileKind.SHUFFLE, "abc", 4).priority
        del worker.state.tasks[("shuffle-transfer-abc", 0)]
        for i in range(1100):  # a long-lived worker's later shuffles
            builder.p2p(FileKind.SHUFFLE, f"later{i}", 4)
        return [first, builder.p2p(FileKind.SHUFFLE, "abc", 4).priority]

    assert on_a_worker(check) == [12, None], "an old shuffle's position was forgotten"
