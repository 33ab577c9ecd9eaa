"""P2P shuffle and rechunk files of in-process workers through their tiered stores: the row
each output partition leaves, which worker's runs a store receives, the check of what the
installed distributed offers, and what closing a run's buffer deletes when part of it fails."""

from __future__ import annotations

import asyncio
import logging
import types
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dask.array as da
import dask.dataframe as dd
import distributed
import numpy as np
import pandas as pd
import pytest
from distributed import Client, Scheduler, Worker
from distributed.shuffle import _core as p2p_core
from distributed.shuffle import _disk as p2p_disk
from distributed.shuffle._disk import DiskShardsBuffer
from distributed.shuffle._exceptions import DataUnavailable
from distributed.shuffle._limiter import ResourceLimiter

import placement.storage.shuffle as shuffle_module
from placement.graph_facts import graph_facts
from placement.logwriter import read_logs
from placement.storage import (
    RequestBuilder,
    RunContext,
    StorageError,
    StorageOptions,
    TieredFileStore,
    WorkerStorage,
    set_run_context,
)
from placement.storage.shuffle import ShuffleFileRouter, TieredDiskShardsBuffer
from tests.placement.inprocess import started_worker
from tests.placement.storage.conftest import ListSink
from tests.placement.waiting import until

N_PARTITIONS = 8


def routed(log_dir: Path, tiers: Path) -> StorageOptions:
    """Options routing P2P files into tiers below ``tiers``, rows to ``log_dir``; no signal
    handlers and no periodic flush within a test."""
    return StorageOptions(
        ssd_dir=str(tiers / "ssd"),
        hdd_dir=str(tiers / "hdd"),
        log_dir=str(log_dir),
        route_p2p=True,
        save_on_signal=False,
        flush_interval_s=3600,
    )


def frame(seed: int) -> pd.DataFrame:
    """4000 distinct keys: every output partition of a shuffle on ``k`` receives rows."""
    keys = np.random.default_rng(seed).permutation(4000)
    return pd.DataFrame({"k": keys, "v": keys * 2 + seed})


def rows(log_dir: Path) -> pd.DataFrame:
    logs = read_logs(log_dir)
    assert logs.bad_files == []
    return logs.table.to_pandas()


async def shuffled(client: Client, pdf: pd.DataFrame, context: RunContext | None = None) -> None:
    """Shuffle ``pdf`` on ``k`` with P2P across the client's workers, with ``context`` as the
    run context of this process; the result must hold every row once."""
    collection = dd.from_pandas(pdf, npartitions=N_PARTITIONS).shuffle("k", shuffle_method="p2p")
    set_run_context(context)
    try:
        result = await client.compute(collection)
    finally:
        set_run_context(None)
    pd.testing.assert_frame_equal(
        result.sort_values("k").reset_index(drop=True), pdf.sort_values("k").reset_index(drop=True)
    )


@asynccontextmanager
async def two_workers(tmp_path: Path) -> AsyncIterator[tuple[Worker, Worker, Client]]:
    """Two started one-thread workers of one scheduler, and a client, all in this process."""
    async with (
        Scheduler(port=0, dashboard=False, dashboard_address=None) as scheduler,
        Worker(scheduler.address, nthreads=1, local_directory=str(tmp_path / "a")) as a,
        Worker(scheduler.address, nthreads=1, local_directory=str(tmp_path / "b")) as b,
        Client(scheduler.address, asynchronous=True) as client,
    ):
        yield a, b, client


# ---------------------------------------------------------------------- whole runs


def test_each_output_partition_of_a_shuffle_is_one_file_written_and_read_once(
    tmp_path: Path,
) -> None:
    """Every output partition is appended to one tiered file, read back whole by its output
    task (the result holds every row) and deleted; its row names the shuffle's stage, its
    input and output partitions and its graph position."""
    pdf = frame(0)
    facts = graph_facts(
        [dd.from_pandas(pdf, npartitions=N_PARTITIONS).shuffle("k", shuffle_method="p2p")],
        "shuffle",
    )
    context = RunContext(
        pipeline="p",
        run_id="r",
        shuffle_stages=facts.shuffle_stages,
        shuffle_inputs=facts.shuffle_inputs,
    )

    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, routed(tmp_path / "logs", tmp_path))
            try:
                async with Client(worker.scheduler.address, asynchronous=True) as client:
                    await shuffled(client, pdf, context)
                await until(lambda: not storage.store.live_files(), "the run's files to go")
            finally:
                storage.close()

    asyncio.run(main())
    logged = rows(tmp_path / "logs")
    assert list(facts.shuffle_stages.values()) == ["shuffle-p2p0"]
    assert len(logged) == N_PARTITIONS
    assert (logged["file_kind"] == "shuffle").all() and (logged["stage"] == "shuffle-p2p0").all()
    assert (logged["n_partitions_out"] == N_PARTITIONS).all()
    assert (logged["n_partitions_in"] == N_PARTITIONS).all()
    assert logged["priority"].notna().all(), "the graph position of the run's tasks"
    assert (logged["write_ops"] >= 1).all() and (logged["size_bytes"] > 0).all()
    assert (logged["write_bytes"] == logged["size_bytes"]).all()
    assert (logged["read_ops"] == 1).all()
    assert (logged["read_bytes"] == logged["size_bytes"]).all()


def test_each_output_chunk_of_a_rechunk_is_a_rechunk_file(tmp_path: Path) -> None:
    """An array rechunk's output chunks are ``rechunk`` files, read back whole: the
    rechunked array equals the original."""
    x = np.arange(64 * 64, dtype=np.int64).reshape(64, 64)

    async def main() -> np.ndarray:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, routed(tmp_path / "logs", tmp_path))
            try:
                async with Client(worker.scheduler.address, asynchronous=True) as client:
                    array = da.from_array(x, chunks=(8, 64)).rechunk((64, 8), method="p2p")
                    result = await client.compute(array)
                await until(lambda: not storage.store.live_files(), "the run's files to go")
                return result
            finally:
                storage.close()

    np.testing.assert_array_equal(asyncio.run(main()), x)
    logged = rows(tmp_path / "logs")
    assert len(logged) == 8  # one file per output chunk
    assert (logged["file_kind"] == "rechunk").all() and (logged["stage"] == "p2p-rechunk").all()
    assert (logged["n_partitions_out"] == 8).all()
    assert (logged["read_ops"] == 1).all()
    assert (logged["read_bytes"] == logged["size_bytes"]).all() and (logged["size_bytes"] > 0).all()


def test_each_workers_runs_go_to_its_own_store_until_its_storage_closes(tmp_path: Path) -> None:
    """Two routed workers in one process: each store receives its own worker's output
    partitions only; once one worker's storage closes, its runs use Dask's own buffer while
    the other worker's runs stay routed, and Dask's buffer is back when both have closed."""

    async def main() -> None:
        async with two_workers(tmp_path) as (a, b, client):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # the second router is no unsupported distributed
                storage_a = WorkerStorage.attach(a, routed(tmp_path / "logs-a", tmp_path / "a"))
                storage_b = WorkerStorage.attach(b, routed(tmp_path / "logs-b", tmp_path / "b"))
            try:
                router_a = storage_a.router
                assert router_a is not None and router_a.installed
                assert storage_b.router is not None and storage_b.router.installed
                await shuffled(client, frame(1), RunContext(pipeline="p", run_id="both"))
                await until(
                    lambda: not storage_a.store.live_files() and not storage_b.store.live_files(),
                    "the first run's files to go",
                )
                storage_a.close()
                assert not router_a.installed
                assert p2p_core.DiskShardsBuffer is not DiskShardsBuffer, "b is still routed"
                await shuffled(client, frame(2), RunContext(pipeline="p", run_id="b-only"))
                await until(lambda: not storage_b.store.live_files(), "the second run's files")
            finally:
                storage_a.close()
                storage_b.close()
            assert p2p_core.DiskShardsBuffer is DiskShardsBuffer
            addresses[:] = [a.address, b.address]

    addresses: list[str] = []
    asyncio.run(main())
    a_address, b_address = addresses
    logged_a, logged_b = rows(tmp_path / "logs-a"), rows(tmp_path / "logs-b")
    assert set(logged_a["run_id"]) == {"both"} and (logged_a["worker"] == a_address).all()
    assert set(logged_b["run_id"]) == {"both", "b-only"} and (logged_b["worker"] == b_address).all()
    first_a = (logged_a["run_id"] == "both").sum()
    first_b = (logged_b["run_id"] == "both").sum()
    assert first_a > 0 and first_b > 0 and first_a + first_b == N_PARTITIONS
    assert (logged_b["run_id"] == "b-only").sum() == first_b, "b's own partitions only"


# ---------------------------------------------------------------------- what distributed offers


def init_taking_limiter(self: Any, directory: Any, read: Any, limiter: Any) -> None:
    """A disk buffer constructor whose last parameter has another name."""


class BufferWithoutClose:
    """A disk buffer of another distributed: the right constructor but no ``close``."""

    def __init__(self, directory: Any, read: Any, memory_limiter: Any) -> None:
        pass

    def _write_frames(self, frames: Any, id: str) -> None:
        pass

    def read(self, id: str) -> Any:
        return None


@pytest.mark.parametrize(
    ("buffer", "problems"),
    [
        (
            type("RenamedLimiter", (DiskShardsBuffer,), {"__init__": init_taking_limiter}),
            ["DiskShardsBuffer.__init__ takes ['self', 'directory', 'read', 'limiter']"],
        ),
        (BufferWithoutClose, ["DiskShardsBuffer has no close()"]),
        (
            type("Both", (BufferWithoutClose,), {"__init__": init_taking_limiter}),
            [
                "DiskShardsBuffer.__init__ takes ['self', 'directory', 'read', 'limiter']",
                "DiskShardsBuffer has no close()",
            ],
        ),
    ],
    ids=["renamed-parameter", "no-close", "both"],
)
def test_a_disk_buffer_without_the_hook_points_is_refused_naming_each_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, buffer: type, problems: list[str]
) -> None:
    """Installing the router on a distributed whose disk buffer differs raises
    ``StorageError`` naming every difference, and leaves Dask's buffer in place."""
    # injected fault: a distributed whose disk buffer class is ``buffer``
    monkeypatch.setattr(shuffle_module, "_ORIGINAL_BUFFER", buffer)
    monkeypatch.setattr(p2p_core, "DiskShardsBuffer", buffer)
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as store:
        router = ShuffleFileRouter(store, RequestBuilder(), "tcp://127.0.0.1:1")
        with pytest.raises(StorageError) as raised:
            router.install()
    message = str(raised.value)
    assert message.startswith(f"distributed {distributed.__version__} does not offer the P2P")
    assert f"({'; '.join(problems)}); P2P files are not routed" in message
    assert not router.installed and p2p_core.DiskShardsBuffer is buffer


# ---------------------------------------------------------------------- one run's buffer


def read_whole(path: Path) -> tuple[bytes, int]:
    """What a run's ``read`` does: the whole file and its size."""
    data = path.read_bytes()
    return data, len(data)


def run_buffer(tmp_path: Path, store: TieredFileStore) -> TieredDiskShardsBuffer:
    """The buffer of run ``shuffle-1-1`` (built inside a running event loop, as Dask does)."""
    (tmp_path / "dask").mkdir(exist_ok=True)
    return TieredDiskShardsBuffer(
        tmp_path / "dask" / "shuffle-1-1",
        read_whole,
        ResourceLimiter(None),
        store=store,
        builder=RequestBuilder(),
    )


def test_the_writes_of_one_partition_append_to_one_file_read_back_whole(
    tmp_path: Path, store: TieredFileStore, sink: ListSink
) -> None:
    """Every frame of every write lands in the partition's one file; reading it returns
    all of them and counts one read of the whole file, in the row and in Dask's own
    figures of the run; a partition never written is unavailable, as in Dask's own buffer;
    closing removes Dask's own run directory too."""

    async def main() -> tuple[Any, list[str], int]:
        buf = run_buffer(tmp_path, store)
        buf._write_frames([b"ab"], "0")
        buf._write_frames([b"cd", b"ef"], "0")
        names = [h.name for h in buf.files]
        await buf.flush()
        data = buf.read("0")
        with pytest.raises(DataUnavailable):
            buf.read("1")
        read_bytes = buf.heartbeat()["read"]
        await buf.close()
        return data, names, read_bytes

    data, names, read_bytes = asyncio.run(main())
    assert data == b"abcdef" and names == ["shuffle-1-1/0"] and read_bytes == 6
    [row] = sink.rows
    assert (row["write_ops"], row["write_bytes"], row["size_bytes"]) == (2, 6, 6)
    assert (row["read_ops"], row["read_bytes"]) == (1, 6)
    assert not (tmp_path / "dask" / "shuffle-1-1").exists(), "Dask's directory is removed"
    assert store.live_files() == []


def test_a_run_folder_that_cannot_be_removed_is_logged_and_its_files_still_go(
    tmp_path: Path,
    store: TieredFileStore,
    sink: ListSink,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Removing the run's folder is best effort: its failure is logged, naming the folder,
    and closing the run succeeds with every file deleted and logged."""

    def refuse(name: str) -> int:
        raise OSError(5, "Input/output error")

    async def main() -> None:
        buf = run_buffer(tmp_path, store)
        for part in "01":
            buf._write_frames([b"shard"], part)
        # injected fault: the disk refuses to remove the run's folder
        monkeypatch.setattr(store, "remove_folder", refuse)
        with caplog.at_level(logging.ERROR, logger="placement.storage.shuffle"):
            await buf.close()

    asyncio.run(main())
    assert len(sink.rows) == 2 and store.live_files() == []
    [record] = caplog.records
    assert record.getMessage() == "removing the shuffle folder 'shuffle-1-1' failed"


def test_a_run_whose_dask_cleanup_fails_still_deletes_its_files(
    tmp_path: Path, store: TieredFileStore, sink: ListSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When Dask's own close of the run fails, its error is raised, but only after the
    run's tiered files are deleted (one row each) and their folder removed."""

    def fail(path: Any) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    async def main() -> None:
        buf = run_buffer(tmp_path, store)
        for part in "012":
            buf._write_frames([b"shard"], part)
        # injected fault: Dask cannot remove its own run directory
        monkeypatch.setattr(p2p_disk, "shutil", types.SimpleNamespace(rmtree=fail))
        with pytest.raises(PermissionError):
            await buf.close()

    asyncio.run(main())
    assert len(sink.rows) == 3 and store.live_files() == []
    left = [p for root in store.roots.values() for p in root.iterdir()]
    assert left == [], "the run's folder is removed as well"
