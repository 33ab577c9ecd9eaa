"""Tests of the tiered spill buffer (Dask's SpillBuffer over a TieredFileStore), no cluster."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
from pathlib import Path

import numpy as np
import pytest

import placement.storage.store as store_module
from placement.logwriter import LogWriter, read_logs
from placement.storage import (
    ByKindTier,
    FileKind,
    RunContext,
    StorageOptions,
    TieredFileStore,
    TieredSpillBuffer,
    WorkerStorage,
    set_run_context,
    tiered_spill_buffer,
)
from placement.storage.context import RequestBuilder
from placement.storage.errors import StorageConfigError
from placement.storage.spill import SpillFiles, check_spill_compatible
from placement.tier import Tier
from tests.placement.inprocess import started_worker
from tests.placement.storage.conftest import ListSink

KEY = "block-0f9e2b7c1d8a4e3f9b6c5a4d3e2f1a0b"


@pytest.fixture
def buffer(tmp_path: Path) -> TieredSpillBuffer:
    buf = tiered_spill_buffer(
        str(tmp_path / "local"),
        ssd_dir=tmp_path / "ssd",
        hdd_dir=tmp_path / "hdd",
        log_dir=tmp_path / "logs",
        target=400_000,
        memory_limit="1MiB",
    )
    yield buf
    buf.close()


def test_the_hook_matches_the_installed_distributed() -> None:
    check_spill_compatible()


def test_values_over_target_spill_through_the_store_and_come_back(
    buffer: TieredSpillBuffer, rng: np.random.Generator
) -> None:
    set_run_context(
        RunContext(pipeline="unit", run_id="run-1", operator="test", stage_tasks={"block": 4})
    )
    try:
        expected = {(KEY, i): rng.random(20_000) for i in range(4)}  # 160 kB each
        for key, value in expected.items():
            # a copy, so no reference outside the buffer keeps Dask's weak cache warm
            buffer[key] = value.copy()
        # the LRU keeps at most 400 kB in memory: the two oldest blocks are on disk now
        assert set(buffer.disk) == {(KEY, 0), (KEY, 1)}
        live = buffer.store.live_files()
        assert len(live) == 2 and all(f.path.exists() for f in live)
        assert all(f.path.parent == buffer.store.roots[Tier.HDD] for f in live)
        np.testing.assert_array_equal(
            buffer[(KEY, 0)], expected[(KEY, 0)]
        )  # read back from its file
        for key in list(buffer):
            del buffer[key]
    finally:
        set_run_context(None)
    buffer.log_writer.flush()
    table = read_logs(buffer.log_writer.directory).table.to_pandas()
    assert len(table) >= 2 and set(table["file_kind"]) == {"spill"}
    assert set(table["stage"]) == {"block"} and set(table["pipeline"]) == {"unit"}
    assert (table["n_partitions_out"] == 4).all() and (table["operator"] == "test").all()
    assert (table["write_ops"] == 1).all()
    assert (table["write_bytes"] == table["size_bytes"]).all() and (
        table["size_bytes"] > 160_000
    ).all()
    assert (table["expected_size_bytes"] == table["size_bytes"]).all()
    read_back = table[table["read_ops"] > 0]
    assert len(read_back) >= 1 and (read_back["read_bytes"] == read_back["size_bytes"]).all()
    assert table["memory_pressure"].between(0, 1).all()
    assert buffer.store.live_files() == []


def test_manual_evict_still_works(buffer: TieredSpillBuffer) -> None:
    """The worker memory manager evicts at the 'spill' threshold through evict()."""
    buffer["small"] = np.arange(1000)
    assert buffer.evict() > 0
    assert "small" in buffer.disk and len(buffer.store.live_files()) == 1
    np.testing.assert_array_equal(buffer["small"], np.arange(1000))


def test_disk_full_on_both_tiers_keeps_the_value_in_memory(
    buffer: TieredSpillBuffer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def full(fd: int, frames: list) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store_module, "_write_frames", full)
    buffer["x"] = np.arange(1000)
    assert buffer.evict() == -1  # Dask's contract: failure reported, value kept in memory
    assert "x" in buffer.fast and "x" not in buffer.disk
    assert buffer.store.live_files() == []
    assert "Spill to disk failed" in caplog.text


def test_ssd_chooser_with_full_ssd_lands_on_hdd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store_module._write_frames

    def ssd_full(fd: int, frames: list) -> None:
        if "/ssd/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, frames)

    monkeypatch.setattr(store_module, "_write_frames", ssd_full)
    writer = LogWriter(tmp_path / "logs")
    store = TieredFileStore(
        ssd_dir=tmp_path / "ssd",
        hdd_dir=tmp_path / "hdd",
        chooser=ByKindTier({FileKind.SPILL: Tier.SSD}),
        sink=writer,
    )
    buf = TieredSpillBuffer(store, target=1, log_writer=writer)
    buf["y"] = np.arange(10_000)
    assert "y" in buf.disk
    np.testing.assert_array_equal(buf["y"], np.arange(10_000))
    buf.close()
    rows = read_logs(tmp_path / "logs").table.to_pylist()
    assert [r["tier"] for r in rows] == ["hdd"] and store.fallbacks == 1


def test_spilling_a_key_again_replaces_its_file_and_logs_the_old_one(tmp_path: Path) -> None:
    sink = ListSink()
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=sink) as store:
        files = SpillFiles(store, RequestBuilder())
        files["k"] = [b"old"]
        old = files.handle("k")
        files["k"] = [b"new", b"er"]
        assert len(files) == 1 and bytes(files["k"]) == b"newer"
        assert store.live_files() == [files.handle("k")] and not old.path.exists()
        assert [r["file_id"] for r in sink.rows] == [old.file_id]


def test_keys_that_make_the_same_file_name_get_their_own_files(tmp_path: Path) -> None:
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as store:
        files = SpillFiles(store, RequestBuilder())
        files["a/b"] = [b"1"]
        files["a?b"] = [b"2"]  # both keys read as "a_b" in a file name
        assert bytes(files["a/b"]) == b"1" and bytes(files["a?b"]) == b"2"
        assert len(store.live_files()) == 2


def test_a_key_spilled_as_one_buffer_comes_back_whole(tmp_path: Path) -> None:
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as store:
        files = SpillFiles(store, RequestBuilder())
        files["k"] = b"raw bytes"
        assert bytes(files["k"]) == b"raw bytes" and files.handle("k").stats.size_bytes == 9


def test_a_spill_that_fails_on_both_tiers_logs_no_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, frames: list) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    sink = ListSink()
    store = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=sink)
    buf = TieredSpillBuffer(store, target=10**9)
    monkeypatch.setattr(store_module, "_write_frames", full)
    buf["x"] = np.arange(1000)
    assert buf.evict() == -1 and "x" in buf.fast
    buf.close()
    assert sink.rows == [], "a file that never held the value has no row"


def test_the_spill_target_defaults_to_the_memory_limit_times_dasks_target(
    tmp_path: Path,
) -> None:
    import dask

    with dask.config.set({"placement.log-dir": None, "distributed.worker.memory.target": 0.25}):
        buf = tiered_spill_buffer(
            str(tmp_path), ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", memory_limit="1MiB"
        )
    try:
        assert buf.n == 2**20 // 4 and not buf.explicit_target  # 1 MiB * 0.25
        assert buf.memory_limit == 2**20
    finally:
        buf.close()


def test_a_zero_target_spills_every_value(tmp_path: Path) -> None:
    store = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd")
    buf = TieredSpillBuffer(store, target=0)
    buf["x"] = np.arange(10)
    assert "x" in buf.disk
    buf.close()


@pytest.mark.parametrize("given", ["argument", "config"])
def test_max_spill_caps_the_bytes_on_disk(tmp_path: Path, given: str) -> None:
    import dask

    by_argument = given == "argument"
    kwargs = {"max_spill": "1kB"} if by_argument else {}
    config = {} if by_argument else {"distributed.worker.memory.max-spill": "1kB"}
    with dask.config.set(config):
        buf = tiered_spill_buffer(
            str(tmp_path), ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", **kwargs
        )
    try:
        buf["small"] = np.arange(10)  # 80 bytes
        buf["large"] = np.arange(1000)  # 8 kB: past the cap, so it stays in memory
        assert buf.evict() > 0 and "small" in buf.disk
        assert buf.evict() == -1 and "large" in buf.fast and "large" not in buf.disk
    finally:
        buf.close()


def test_spills_without_a_memory_limit_record_no_memory_pressure(tmp_path: Path) -> None:
    sink = ListSink()
    store = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=sink)
    buf = TieredSpillBuffer(store, target=0)
    buf["x"] = np.arange(10)
    buf.close()
    assert [r["memory_pressure"] for r in sink.rows] == [None]


def test_factory_reads_tier_directories_from_dask_config(tmp_path: Path) -> None:
    import dask

    with dask.config.set(
        {"placement.ssd-dir": str(tmp_path / "cs"), "placement.hdd-dir": str(tmp_path / "ch")}
    ):
        buf = tiered_spill_buffer(str(tmp_path / "local"))
    try:
        assert buf.store.tier_dirs[Tier.SSD] == tmp_path / "cs"
        assert buf.store.tier_dirs[Tier.HDD] == tmp_path / "ch"
        assert buf.log_writer is None
    finally:
        buf.close()


@pytest.mark.parametrize(("target", "expected"), [("64kB", 64_000), (None, int(8 * 2**30 * 0.25))])
def test_worker_plugin_keeps_an_explicit_target_and_sets_a_default_one(
    tmp_path: Path, target: str | None, expected: int
) -> None:
    import dask

    async def main() -> tuple[int, int | None]:
        with dask.config.set(
            {"placement.log-dir": None, "distributed.worker.memory.target": 0.25}
        ):
            buf = tiered_spill_buffer(
                str(tmp_path), ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", target=target
            )
            try:
                async with started_worker(
                    data=buf, memory_limit=8 * 2**30, local_directory=str(tmp_path)
                ) as worker:
                    assert worker.data is buf
                    WorkerStorage.attach(worker, StorageOptions(route_p2p=False)).close()
                    return buf.n, buf.memory_limit
            finally:
                buf.close()

    n, limit = asyncio.run(main())
    assert n == expected, "the spill target, in bytes"
    assert limit == 8 * 2**30, "the worker's limit is adopted either way"


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_refused_spill_buffer_is_collected_without_an_error_and_leaves_the_store_open(
    tmp_path: Path,
) -> None:
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as store:
        with pytest.raises(StorageConfigError, match="target=-1"):
            TieredSpillBuffer(store, target=-1)
        gc.collect()
        assert not store.closed


def test_a_spill_buffer_refused_for_a_negative_target_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    with pytest.raises(StorageConfigError, match="target=-5"):
        tiered_spill_buffer(
            str(tmp_path), ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", target=-5
        )
    assert [*(tmp_path / "ssd").iterdir(), *(tmp_path / "hdd").iterdir()] == []
