"""How placement storage attaches to a real in-process ``distributed.Worker`` and what closing
it undoes: its options, the store it makes or shares, the periodic log flush, P2P routing,
the stop-signal handlers and the ``client.run`` helpers."""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import dask
import pyarrow.parquet as pq
import pytest
from distributed import Worker
from distributed.shuffle import _core as p2p_core
from distributed.shuffle._disk import DiskShardsBuffer

import placement.logwriter as logwriter_module
from placement.errors import PlacementTypeError
from placement.logwriter import read_logs
from placement.storage import (
    FileRequest,
    FixedTier,
    PlacementWorkerPlugin,
    StorageConfigError,
    StorageOptions,
    TieredSpillBuffer,
    WorkerStorage,
    flush_worker_logs,
    tiered_spill_buffer,
    worker_storage,
    worker_storage_state,
)
from placement.tier import Tier
from tests.placement.inprocess import started_worker
from tests.placement.storage.conftest import Calls
from tests.placement.waiting import until

_names = itertools.count()


def spill_request() -> FileRequest:
    return FileRequest(file_kind="spill", created_at=time.time())


def buffer_a_row(storage: WorkerStorage) -> None:
    """Create and delete a file of ``storage``'s store: its row waits in the log writer."""
    store = storage.store
    store.delete(store.create(f"gone-{next(_names)}", spill_request()))


def dirs(tmp_path: Path, **options: Any) -> StorageOptions:
    """Options with all three directories below ``tmp_path``, no P2P routing, no signal
    handlers and no periodic flush within a test; ``options`` override."""
    given: dict[str, Any] = {
        "ssd_dir": str(tmp_path / "ssd"),
        "hdd_dir": str(tmp_path / "hdd"),
        "log_dir": str(tmp_path / "logs"),
        "route_p2p": False,
        "save_on_signal": False,
        "flush_interval_s": 3600,
    }
    return StorageOptions(**{**given, **options})


#: Options for a worker whose spill buffer holds the store and log writer.
ON_A_SPILL_BUFFER = StorageOptions(route_p2p=False, save_on_signal=False, flush_interval_s=3600)


def logged_rows(log_dir: Path) -> int:
    return read_logs(log_dir).table.num_rows


def store_dirs(*tiers: Path) -> list[Path]:
    return [p for tier in tiers if tier.exists() for p in tier.glob("store-*")]


# ---------------------------------------------------------------------- options


@pytest.mark.parametrize("interval", [0, "5", None])
def test_options_refuse_a_flush_interval_that_is_not_a_positive_number(interval: Any) -> None:
    with pytest.raises(StorageConfigError, match=f"flush_interval_s={interval!r} must be > 0"):
        StorageOptions(flush_interval_s=interval)


@pytest.mark.parametrize("flag", ["yes", 1, None])
def test_options_refuse_a_save_on_signal_that_is_not_true_or_false(flag: Any) -> None:
    with pytest.raises(PlacementTypeError, match=f"save_on_signal={flag!r} must be True or"):
        StorageOptions(save_on_signal=flag)


def test_a_chooser_without_a_choose_method_is_refused_where_the_options_are_made() -> None:
    """On the client, before the plugin travels to any worker."""
    with pytest.raises(PlacementTypeError, match="has no choose"):
        StorageOptions(chooser=object())  # type: ignore[arg-type]
    with pytest.raises(PlacementTypeError, match="has no choose"):
        PlacementWorkerPlugin(chooser=object())  # type: ignore[arg-type]


def test_a_worker_whose_directories_are_all_configured_warns_of_no_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = {
        "placement.ssd-dir": str(tmp_path / "ssd"),
        "placement.hdd-dir": str(tmp_path / "hdd"),
        "placement.log-dir": str(tmp_path / "logs"),
    }
    options = StorageOptions(route_p2p=False, save_on_signal=False)

    async def main() -> Path | None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            with caplog.at_level(logging.WARNING, logger="placement.storage.worker"):
                storage = WorkerStorage.attach(worker, options)
            storage.close()
            return storage.writer.directory if storage.writer else None

    with dask.config.set(config):
        directory = asyncio.run(main())
    assert directory == tmp_path / "logs"
    assert [r for r in caplog.records if r.name == "placement.storage.worker"] == []


@pytest.mark.parametrize("given", ["ssd", "hdd"])
def test_a_worker_with_one_tier_given_is_warned_of_the_other_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, given: str
) -> None:
    defaulted = {"ssd": "hdd", "hdd": "ssd"}[given]
    options = StorageOptions(
        log_dir=str(tmp_path / "logs"),
        route_p2p=False,
        save_on_signal=False,
        **{f"{given}_dir": str(tmp_path / f"given-{given}")},
    )

    async def main() -> tuple[list[str], str]:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            with caplog.at_level(logging.WARNING, logger="placement.storage.worker"):
                WorkerStorage.attach(worker, options).close()
            return [
                r.getMessage() for r in caplog.records if r.name == "placement.storage.worker"
            ], worker.local_directory

    [message], local = asyncio.run(main())
    assert message.startswith(f"placement.{defaulted}-dir not set: the {defaulted.upper()} tier")
    assert str(Path(local) / f"placement-{defaulted}") in message
    assert f"DASK_PLACEMENT__{defaulted.upper()}_DIR" in message
    assert f"given-{given}" not in message, "the tier that was given is not said to default"


def test_the_log_directory_option_wins_over_the_configured_one_which_serves_without_it(
    tmp_path: Path,
) -> None:
    given = StorageOptions(log_dir=str(tmp_path / "given"), route_p2p=False, save_on_signal=False)
    bare = StorageOptions(route_p2p=False, save_on_signal=False)

    async def main() -> list[Path | None]:
        directories = []
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            for options in (given, bare):
                storage = WorkerStorage.attach(worker, options)
                storage.close()
                directories.append(storage.writer.directory if storage.writer else None)
        return directories

    with dask.config.set({"placement.log-dir": str(tmp_path / "configured")}):
        assert asyncio.run(main()) == [tmp_path / "given", tmp_path / "configured"]


def test_the_chooser_of_the_options_places_the_files_of_the_store_made_for_the_worker(
    tmp_path: Path,
) -> None:
    options = dirs(tmp_path, chooser=FixedTier(Tier.SSD))  # the default chooser picks HDD

    async def main() -> Tier:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, options)
            try:
                handle = storage.store.create("a", spill_request())
                assert handle.path.parent == storage.store.roots[Tier.SSD]
                return handle.tier
            finally:
                storage.close()

    assert asyncio.run(main()) is Tier.SSD


# ---------------------------------------------------------------------- a spill buffer's store


def test_a_spill_buffer_with_a_memory_limit_of_its_own_keeps_it_on_a_worker_with_another(
    tmp_path: Path,
) -> None:
    buf = tiered_spill_buffer(
        str(tmp_path / "local"),
        ssd_dir=tmp_path / "ssd",
        hdd_dir=tmp_path / "hdd",
        memory_limit="1MiB",
        target="64kB",
    )

    async def main() -> None:
        async with started_worker(
            data=buf, memory_limit=8 * 2**30, local_directory=str(tmp_path / "local")
        ) as worker:
            WorkerStorage.attach(worker, ON_A_SPILL_BUFFER).close()

    try:
        asyncio.run(main())
        assert (buf.memory_limit, buf.n) == (2**20, 64_000)
    finally:
        buf.close()


def test_a_spill_buffer_on_a_worker_without_a_memory_limit_is_left_without_one(
    tmp_path: Path,
) -> None:
    buf = tiered_spill_buffer(
        str(tmp_path / "local"), ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", target="64kB"
    )

    async def main() -> WorkerStorage:
        async with started_worker(
            data=buf, memory_limit=0, local_directory=str(tmp_path / "local")
        ) as worker:
            assert worker.memory_manager.memory_limit is None
            storage = WorkerStorage.attach(worker, ON_A_SPILL_BUFFER)
            storage.close()
            return storage

    try:
        storage = asyncio.run(main())
        assert storage.store is buf.store
        assert (buf.memory_limit, buf.n) == (None, 64_000)
    finally:
        buf.close()


def logging_spill_buffer(tmp_path: Path) -> TieredSpillBuffer:
    """A spill buffer on tiers under ``tmp_path`` whose files' rows go to ``tmp_path/logs``."""
    return tiered_spill_buffer(
        str(tmp_path / "local"),
        ssd_dir=tmp_path / "ssd",
        hdd_dir=tmp_path / "hdd",
        log_dir=tmp_path / "logs",
    )


def test_dropping_the_storage_of_a_spill_buffer_writes_its_rows_and_keeps_its_store(
    tmp_path: Path,
) -> None:
    """A worker that only loses the plugin may still hold spilled keys."""
    buf = logging_spill_buffer(tmp_path)

    async def main() -> None:
        async with started_worker(data=buf, local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, ON_A_SPILL_BUFFER)
            buffer_a_row(storage)
            storage.close()
            assert storage.state()["rows_pending"] == 0
            assert logged_rows(tmp_path / "logs") == 1
            assert not buf.store.closed
            buf["x"] = list(range(10))  # the buffer still takes keys
            assert buf["x"] == list(range(10))

    try:
        asyncio.run(main())
    finally:
        buf.close()


def test_the_storage_of_a_spill_buffer_closes_its_store_when_the_worker_closes(
    tmp_path: Path,
) -> None:
    buf = logging_spill_buffer(tmp_path)

    async def main() -> Path:
        async with started_worker(data=buf, local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, ON_A_SPILL_BUFFER)
            live = storage.store.create("live", spill_request())
            storage.store.write(live, b"payload")
            assert live.path.exists()
            storage.close(worker_closing=True)
            return live.path

    try:
        live_path = asyncio.run(main())
        assert buf.store.closed
        assert not live_path.exists()
        assert logged_rows(tmp_path / "logs") == 1, "the live file's row"
    finally:
        buf.close()


def test_a_log_flush_that_fails_when_the_plugin_goes_is_logged_and_its_rows_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    buf = logging_spill_buffer(tmp_path)

    def full(table: object, where: object, **kw: object) -> None:  # injected fault: disk full
        raise OSError(errno.ENOSPC, "No space left on device")

    async def main() -> None:
        async with started_worker(data=buf, local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, ON_A_SPILL_BUFFER)
            buffer_a_row(storage)
            monkeypatch.setattr(logwriter_module.pq, "write_table", full)
            with caplog.at_level(logging.ERROR, logger="placement.storage.worker"):
                storage.close()
            monkeypatch.undo()
            assert storage.state()["rows_pending"] == 1, "kept for the next flush"

    try:
        asyncio.run(main())
        assert "flushing placement log rows at worker shutdown failed" in caplog.text
    finally:
        buf.close()
    assert logged_rows(tmp_path / "logs") == 1


# ---------------------------------------------------------------------- a store made here


def test_closing_a_store_made_for_the_worker_deletes_its_live_files_and_logs_them(
    tmp_path: Path,
) -> None:
    async def main() -> WorkerStorage:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path))
            storage.store.write(storage.store.create("live", spill_request()), b"payload")
            buffer_a_row(storage)
            storage.close()
            return storage

    storage = asyncio.run(main())
    assert storage.store.closed
    assert store_dirs(tmp_path / "ssd", tmp_path / "hdd") == []
    assert logged_rows(tmp_path / "logs") == 2, "the deleted file's row and the live one's"


def test_state_counts_live_files_and_the_orphans_removed_apart_from_fallbacks(
    tmp_path: Path,
) -> None:
    dead = tmp_path / "hdd" / "store-deadhost-1-0000cccc"  # left by a killed store
    dead.mkdir(parents=True)
    for name in ("f0", "f1"):
        (dead / name).write_bytes(b"orphan")
    (tmp_path / "hdd" / f"{dead.name}.lock").touch()

    async def main() -> dict[str, int]:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path))
            try:
                storage.store.create("live", spill_request())
                buffer_a_row(storage)
                return storage.state()
            finally:
                storage.close()

    assert asyncio.run(main()) == {
        "live_files": 1,
        "rows_written": 0,
        "rows_pending": 1,
        "fallbacks": 0,
        "orphans_removed": 2,
    }
    assert not dead.exists()


# ---------------------------------------------------------------------- periodic flush


def test_the_flush_interval_option_sets_the_period_of_the_workers_flush(tmp_path: Path) -> None:
    async def main() -> float:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path, flush_interval_s=0.25))
            try:
                return worker.periodic_callbacks["placement-log-flush"].callback_time
            finally:
                storage.close()

    assert asyncio.run(main()) == 250


def test_a_workers_buffered_rows_reach_the_log_without_being_asked(tmp_path: Path) -> None:
    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path, flush_interval_s=0.05))
            try:
                assert worker.periodic_callbacks["placement-log-flush"].is_running()
                buffer_a_row(storage)
                await until(lambda: storage.state()["rows_written"] == 1, "the periodic flush")
            finally:
                storage.close()

    asyncio.run(main())
    assert logged_rows(tmp_path / "logs") == 1


def test_closing_the_storage_stops_the_workers_flush_and_takes_it_off_the_worker(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path))
            flush = worker.periodic_callbacks["placement-log-flush"]
            storage.close()
            assert not flush.is_running()
            assert "placement-log-flush" not in worker.periodic_callbacks

    asyncio.run(main())


# ---------------------------------------------------------------------- P2P routing


def test_default_options_route_p2p_files_until_the_storage_closes(tmp_path: Path) -> None:
    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker)
            try:
                assert storage.router is not None and storage.router.installed
                assert p2p_core.DiskShardsBuffer is not DiskShardsBuffer
            finally:
                storage.close()
            assert p2p_core.DiskShardsBuffer is DiskShardsBuffer, "Dask's own buffer again"

    asyncio.run(main())


def test_p2p_routing_this_distributed_cannot_offer_is_warned_of_and_the_worker_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class OtherBuffer(DiskShardsBuffer):
        pass

    # injected fault: a distributed whose P2P disk buffer is not the class the hook replaces
    monkeypatch.setattr(p2p_core, "DiskShardsBuffer", OtherBuffer)

    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            with pytest.warns(RuntimeWarning, match="P2P files are not routed"):
                storage = WorkerStorage.attach(worker, dirs(tmp_path, route_p2p=True))
            try:
                assert storage.router is None
                assert p2p_core.DiskShardsBuffer is OtherBuffer
                buffer_a_row(storage)  # the store works all the same
                assert storage.flush()["rows_written"] == 1
            finally:
                storage.close()

    asyncio.run(main())


# ---------------------------------------------------------------------- stop signals


def test_sigterm_writes_the_buffered_rows_then_goes_to_the_handler_before(
    tmp_path: Path, calls: Calls
) -> None:
    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path, save_on_signal=True))
            try:
                buffer_a_row(storage)
                signal.raise_signal(signal.SIGTERM)  # injected signal
                await until(lambda: storage.state()["rows_written"] == 1, "the saved rows")
                assert calls.calls == ["previous SIGTERM"]
                assert not storage.store.closed, "the process may go on"
            finally:
                storage.close()

    asyncio.run(main())


def test_without_save_on_signal_the_signal_handlers_are_left_alone(
    tmp_path: Path, calls: Calls
) -> None:
    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path, save_on_signal=False))
            try:
                assert signal.getsignal(signal.SIGTERM) == calls.previous
                assert signal.getsignal(signal.SIGINT) == calls.previous
                buffer_a_row(storage)
                signal.raise_signal(signal.SIGTERM)  # injected signal
                assert calls.calls == ["previous SIGTERM"]
                assert storage.state()["rows_pending"] == 1
            finally:
                storage.close()

    asyncio.run(main())


def test_sigint_in_a_process_no_nanny_started_saves_the_rows_and_keeps_the_store(
    tmp_path: Path, calls: Calls
) -> None:
    """SIGINT does not end such a process by itself (its handler before decides): the
    live files stay, only the buffered rows are written."""
    assert multiprocessing.parent_process() is None

    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path, save_on_signal=True))
            try:
                live = storage.store.create("live", spill_request())
                storage.store.write(live, b"payload")
                assert live.path.exists()
                buffer_a_row(storage)
                signal.raise_signal(signal.SIGINT)  # injected signal
                await until(lambda: storage.state()["rows_pending"] == 0, "the saved rows")
                assert calls.calls == ["previous SIGINT"]
                assert storage.state()["rows_written"] == 1
                assert not storage.store.closed and live.path.exists()
            finally:
                storage.close()

    asyncio.run(main())


def test_closing_the_storage_gives_the_signals_their_handlers_back(
    tmp_path: Path, calls: Calls
) -> None:
    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(tmp_path, save_on_signal=True))
            assert signal.getsignal(signal.SIGTERM) != calls.previous
            storage.close()
            assert signal.getsignal(signal.SIGTERM) == calls.previous
            assert signal.getsignal(signal.SIGINT) == calls.previous

    asyncio.run(main())


EXIT_BY_SIGINT = 7


def interrupted_nanny_worker(root: str) -> None:
    """A worker process started by a nanny (this process has a parent), whose first log
    write fails, interrupted by SIGINT: what the storage saved is what it saved before
    the process ended."""
    # the handler before the storage's ends the process at once, as the cancellation of
    # the main task ends a nanny's worker process
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(EXIT_BY_SIGINT))
    base = Path(root)
    real_write = pq.write_table
    failed: list[object] = []

    def fails_once(table: object, where: object, **kw: object) -> None:
        # injected fault: the disk is full for the first log write, then has room again
        if not failed:
            failed.append(where)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(table, where, **kw)

    async def main() -> None:
        async with started_worker(local_directory=str(base / "local")) as worker:
            storage = WorkerStorage.attach(worker, dirs(base, save_on_signal=True))
            storage.store.write(storage.store.create("live", spill_request()), b"payload")
            buffer_a_row(storage)
            pq.write_table = fails_once
            signal.raise_signal(signal.SIGINT)

    asyncio.run(main())


def test_sigint_ends_a_nanny_started_worker_after_its_store_and_log_are_closed(
    tmp_path: Path,
) -> None:
    """The first step (writing the buffered rows) fails; the store is still closed and the
    log closed, which writes the rows of both files."""
    child = multiprocessing.get_context("spawn").Process(
        target=interrupted_nanny_worker, args=(str(tmp_path),)
    )
    child.start()
    try:
        child.join(120)
    finally:
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == EXIT_BY_SIGINT
    assert store_dirs(tmp_path / "ssd", tmp_path / "hdd") == [], "the live file is gone"
    assert logged_rows(tmp_path / "logs") == 2, "the buffered row and the live file's"


# ---------------------------------------------------------------------- client.run helpers


def test_the_state_helper_only_counts_and_the_flush_helper_writes_the_rows(
    tmp_path: Path,
) -> None:
    plugin = PlacementWorkerPlugin(
        ssd_dir=str(tmp_path / "ssd"),
        hdd_dir=str(tmp_path / "hdd"),
        log_dir=str(tmp_path / "logs"),
        route_p2p=False,
        save_on_signal=False,
    )

    async def main() -> None:
        worker: Worker
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            await worker.plugin_add(plugin, catch_errors=False)
            storage = worker_storage(worker)
            assert storage is plugin.storage
            buffer_a_row(storage)
            counted = worker_storage_state(worker)
            assert (counted["rows_pending"], counted["rows_written"]) == (1, 0)
            assert worker_storage_state(worker)["rows_pending"] == 1, "counting writes nothing"
            flushed = flush_worker_logs(worker)
            assert (flushed["rows_pending"], flushed["rows_written"]) == (0, 1)

    asyncio.run(main())
    assert logged_rows(tmp_path / "logs") == 1
