"""Tests of the Parquet log writer and reader."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Worker

import placement.logwriter as logwriter_module
from placement.logwriter import FlushMode, LogWriteError, LogWriter, log_files, read_logs
from placement.schema import SCHEMA, SCHEMA_VERSION, SCHEMA_VERSION_KEY
from placement.storage import FileRequest, TieredFileStore
from placement.storage.worker import StorageOptions, WorkerStorage
from tests.placement.inprocess import started_worker
from tests.placement.logtables import merge_by_hand
from tests.placement.waiting import wait_until


def row(i: int, **kw: object) -> dict:
    now = time.time()
    base = {
        "file_id": f"f{i}",
        "pipeline": "p",
        "run_id": "r",
        "stage": "s",
        "created_at": now,
        "file_kind": "spill",
        "deleted_at": now + 1,
        "size_bytes": 100 * i,
        "read_ops": 1,
        "write_ops": 1,
        "read_bytes": 100 * i,
        "write_bytes": 100 * i,
        "tier": "hdd",
    }
    base.update(kw)
    return base


def test_flushes_on_size_and_close_with_schema_metadata(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path, max_rows=3, max_interval_s=3600)
    for i in range(4):
        writer.add(row(i))
    assert len(writer.files) == 1 and writer.pending == 1  # the 3rd row triggered a flush
    writer.close()
    assert len(writer.files) == 2 and writer.rows_written == 4
    first = pq.read_table(writer.files[0])
    assert first.schema.equals(SCHEMA, check_metadata=False)
    assert first.schema.metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode()
    logs = read_logs(tmp_path)
    assert logs.table.num_rows == 4 and logs.bad_files == []
    assert sorted(logs.table["file_id"].to_pylist()) == ["f0", "f1", "f2", "f3"]
    assert not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(LogWriteError, match="closed"):
        writer.add(row(9))


def test_flushes_on_time(tmp_path: Path) -> None:
    now = [0.0]
    writer = LogWriter(tmp_path, max_rows=1000, max_interval_s=10, clock=lambda: now[0])
    writer.add(row(1))
    assert writer.maybe_flush() is None
    now[0] = 11.0
    assert writer.maybe_flush() is not None and writer.pending == 0
    now[0] = 30.0
    writer.add(row(2))  # a row arriving late flushes at once
    assert writer.pending == 0 and writer.rows_written == 2


def test_a_workers_periodic_flush_writes_every_buffered_row(tmp_path: Path) -> None:
    """The worker's flush callback writes whatever is buffered at each of its calls, every
    ``flush_interval_s`` seconds, not only when the writer's own 30 s have passed: a
    worker killed by SIGKILL loses the rows of one flush period at most."""
    options = StorageOptions(log_dir=str(tmp_path / "logs"), route_p2p=False)

    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, options)
            try:
                assert storage.writer is not None and storage.writer.max_interval_s == 30
                flush_callback = worker.periodic_callbacks["placement-log-flush"]
                assert flush_callback.callback_time == 5000, "every 5 s by default"
                store = storage.store
                request = FileRequest(file_kind="spill", created_at=time.time())
                store.delete(store.create("a", request))
                assert storage.state()["rows_pending"] == 1
                await flush_callback.callback()
                assert storage.state()["rows_pending"] == 0 and len(storage.writer.files) == 1
                await flush_callback.callback()
                assert len(storage.writer.files) == 1, "no file without rows"
            finally:
                storage.close()

    asyncio.run(main())
    assert read_logs(tmp_path / "logs").table.num_rows == 1


def test_a_workers_periodic_flush_leaves_the_event_loop_free_while_the_disk_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush fsyncs its file; on a busy disk that can outlast a lease renewal's deadline,
    so the worker's flush callback runs it in a thread: the event loop (lease renewals,
    heartbeats) keeps running while the sync waits."""
    options = StorageOptions(log_dir=str(tmp_path / "logs"), route_p2p=False)
    disk_free = threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:  # the disk is busy until the loop has ticked
        assert disk_free.wait(30), "the event loop did not run while the file synced"
        real_fsync(fd)

    async def main() -> None:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            storage = WorkerStorage.attach(worker, options)
            try:
                # the flushes that rows make due are off the loop too (tested with a spill
                # buffer below)
                assert storage.writer is not None
                assert storage.writer.flush_mode is FlushMode.BACKGROUND
                store = storage.store
                request = FileRequest(file_kind="spill", created_at=time.time())
                store.delete(store.create("a", request))
                monkeypatch.setattr(logwriter_module.os, "fsync", slow_fsync)
                callback = worker.periodic_callbacks["placement-log-flush"].callback
                flush = asyncio.ensure_future(callback())
                for _ in range(3):  # the loop runs on while the flush waits for the disk
                    await asyncio.sleep(0)
                assert not flush.done()
                disk_free.set()
                await asyncio.wait_for(flush, 30)
                monkeypatch.undo()
                assert storage.state()["rows_pending"] == 0 and len(storage.writer.files) == 1
            finally:
                storage.close()

    asyncio.run(main())
    assert read_logs(tmp_path / "logs").table.num_rows == 1


def _fsync_held_until(released: threading.Event, timeouts: list[int] | None = None) -> object:
    """An ``os.fsync`` that waits (at most 5 s) for ``released``: a busy disk. A wait that
    times out (the thread that was to release it was the one waiting) is noted in
    ``timeouts`` and fails the sync."""
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        if not released.wait(5):
            if timeouts is not None:
                timeouts.append(fd)
            raise OSError(5, "the disk was released only after the sync timed out")
        real_fsync(fd)

    return slow_fsync


def test_a_background_writers_due_flush_is_written_by_its_own_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flush_mode="background"``: the row that makes a flush due is only buffered; the
    writer's thread writes the file while the adding thread goes on, and close() waits for
    it and writes the rest."""
    writer = LogWriter(tmp_path, max_rows=3, max_interval_s=3600, flush_mode="background")
    disk_free = threading.Event()
    writing: list[str] = []
    real_write = logwriter_module.pq.write_table

    def write_table(table: pa.Table, where: object, **kw: object) -> None:
        writing.append(threading.current_thread().name)
        real_write(table, where, **kw)

    monkeypatch.setattr(logwriter_module.pq, "write_table", write_table)
    monkeypatch.setattr(logwriter_module.os, "fsync", _fsync_held_until(disk_free))
    for i in range(3):
        writer.add(row(i))  # the third makes a flush due: it must not wait for the sync
    wait_until(lambda: writing)
    assert writing == [f"placement-log-flush-{writer.prefix}"]
    assert writer.files == [], "the flush is still waiting for the disk"
    writer.add(row(3))  # taken while the flush waits
    disk_free.set()
    wait_until(lambda: writer.rows_written == 3)
    monkeypatch.undo()
    writer.close()
    assert writer.rows_written == 4 and len(writer.files) == 2
    assert sorted(read_logs(tmp_path).table["file_id"].to_pylist()) == ["f0", "f1", "f2", "f3"]
    flusher = f"placement-log-flush-{writer.prefix}"
    assert not any(t.name == flusher for t in threading.enumerate()), "its thread ended"


def test_closing_a_background_writer_waits_for_the_flush_it_is_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = LogWriter(tmp_path, max_rows=2, max_interval_s=3600, flush_mode="background")
    disk_free = threading.Event()
    monkeypatch.setattr(logwriter_module.os, "fsync", _fsync_held_until(disk_free))
    writer.add(row(0))
    writer.add(row(1))  # due: the flusher thread takes both rows and waits for the disk
    wait_until(lambda: writer.pending == 0)
    writer.add(row(2))
    closing = threading.Thread(target=writer.close)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive(), "close waits for the flush being written"
    disk_free.set()
    closing.join(30)
    assert not closing.is_alive()
    monkeypatch.undo()
    ids = read_logs(tmp_path).table["file_id"].to_pylist()
    assert sorted(ids) == ["f0", "f1", "f2"], "each row once"
    with pytest.raises(LogWriteError, match="closed"):
        writer.add(row(3))


def test_a_background_flush_that_fails_keeps_its_rows_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    writer = LogWriter(tmp_path, max_rows=2, max_interval_s=3600, flush_mode="background")

    def full(table: object, where: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(logwriter_module.pq, "write_table", full)
    with caplog.at_level(logging.ERROR, logger="placement.logwriter"):
        writer.add(row(0))
        writer.add(row(1))  # due: written by the thread, which fails and logs it
        wait_until(lambda: "No space left" in caplog.text)
    wait_until(lambda: writer.pending == 2)
    assert writer.files == []
    monkeypatch.undo()
    writer.close()  # the disk has room again
    assert sorted(read_logs(tmp_path).table["file_id"].to_pylist()) == ["f0", "f1"]


def test_a_spill_buffers_log_flush_leaves_the_event_loop_free_while_the_disk_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker deletes spilled keys on its event loop, which renews leases and sends
    heartbeats: the log flush the deletion's row makes due must not hold the loop while
    the disk syncs."""
    import numpy as np

    from placement.storage.spill import tiered_spill_buffer

    buf = tiered_spill_buffer(
        str(tmp_path / "local"), log_dir=tmp_path / "logs", target=1, log_max_rows=1
    )
    disk_free = threading.Event()
    timeouts: list[int] = []

    async def main() -> None:
        buf["x"] = np.arange(1000)  # over the target: spilled to a file of the store
        assert "x" in buf.disk
        monkeypatch.setattr(logwriter_module.os, "fsync", _fsync_held_until(disk_free, timeouts))
        del buf["x"]  # its file goes, its row makes a flush due
        assert not timeouts, "deleting the key waited for the disk on the event loop"
        for _ in range(3):  # the loop runs on while the flush waits for the disk
            await asyncio.sleep(0)
        disk_free.set()

    try:
        asyncio.run(main())
        assert buf.log_writer is not None
        wait_until(lambda: buf.log_writer.rows_written == 1)  # type: ignore[union-attr]
        monkeypatch.undo()
    finally:
        buf.close()
    assert read_logs(tmp_path / "logs").table["file_kind"].to_pylist() == ["spill"]


def test_a_writers_flush_mode_is_validated(tmp_path: Path) -> None:
    from placement.errors import PlacementConfigError

    with pytest.raises(PlacementConfigError, match="flush_mode='later' is not one of"):
        LogWriter(tmp_path, flush_mode="later")


def test_a_worker_without_tier_or_log_directories_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bare = StorageOptions(route_p2p=False, save_on_signal=False)
    given = StorageOptions(
        ssd_dir=str(tmp_path / "ssd"),
        hdd_dir=str(tmp_path / "hdd"),
        log_dir=str(tmp_path / "logs"),
        route_p2p=False,
        save_on_signal=False,
    )

    def said(options: StorageOptions, worker: Worker) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="placement.storage.worker"):
            WorkerStorage.attach(worker, options).close()
        return [r.getMessage() for r in caplog.records if r.name == "placement.storage.worker"]

    async def main() -> tuple[str, list[str], str]:
        async with started_worker(local_directory=str(tmp_path / "local")) as worker:
            return "\n".join(said(bare, worker)), said(given, worker), worker.local_directory

    text, quiet, local_directory = asyncio.run(main())
    assert "placement.ssd-dir and placement.hdd-dir not set" in text
    assert str(Path(local_directory) / "placement-ssd") in text
    assert "DASK_PLACEMENT__SSD_DIR" in text
    assert "placement.log-dir not set: this worker writes no I/O log" in text
    assert quiet == [], "nothing to say when all three are given"


def test_an_unreadable_record_of_unlogged_files_is_reported_not_fatal(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as writer:
        writer.add(row(1))
        good = writer.record_unlogged({"files": 2, "bytes": 10})
    (tmp_path / ".unlogged-torn.json").write_text('{"files": ')
    logs = read_logs(tmp_path)
    assert logs.table.num_rows == 1 and logs.unlogged_files == 2
    assert [r["path"] for r in logs.unlogged] == [str(good)]
    assert [p.name for p, _ in logs.bad_files] == [".unlogged-torn.json"]


def test_writers_never_share_a_file(tmp_path: Path) -> None:
    a, b = LogWriter(tmp_path), LogWriter(tmp_path)
    a.add(row(1))
    b.add(row(2))
    a.close()
    b.close()
    assert len({*a.files, *b.files}) == 2
    assert read_logs(tmp_path).table.num_rows == 2


def test_a_row_that_does_not_fit_the_schema_is_dropped_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = LogWriter(tmp_path)
    writer.add(row(1))
    writer.add(row(2, size_bytes="large"))
    writer.add(row(3))
    writer.add(row(4, file_id=None))  # converts (as a null), but the column is required
    writer.add(row(5, priority=2**31))  # out of the int32 column's range
    with caplog.at_level(logging.WARNING, logger="placement.logwriter"):
        assert writer.flush() is not None
    assert writer.rows_dropped == 3 and writer.rows_written == 2 and writer.pending == 0
    assert "dropped 3 of 5" in caplog.text and "'f2'" in caplog.text, "names the first bad row"
    assert sorted(read_logs(tmp_path).table["file_id"].to_pylist()) == ["f1", "f3"]
    writer.add(row(6, size_bytes="large"))
    assert writer.flush() is None and writer.rows_dropped == 4, "a batch of only bad rows"
    writer.close()


def test_maybe_flush_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    writer = LogWriter(tmp_path, max_interval_s=10, clock=lambda: now[0])
    writer.add(row(1))
    writer.add({"not": "a log row"})
    now[0] = 11.0
    assert writer.maybe_flush() is not None
    assert writer.rows_written == 1 and writer.rows_dropped == 1

    def failing_write(table: object, where: object, **kw: object) -> None:
        raise RuntimeError("unexpected failure")

    monkeypatch.setattr(logwriter_module.pq, "write_table", failing_write)
    writer.add(row(2))
    now[0] = 30.0
    assert writer.maybe_flush() is None
    assert writer.pending == 1, "the row waits for the next flush"
    monkeypatch.undo()
    writer.close()
    assert writer.rows_written == 2


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (OSError(28, "No space left on device"), "No space left"),
        (pa.ArrowInvalid("cannot encode the page"), "cannot encode the page"),
    ],
)
def test_failed_flush_keeps_rows_and_leaves_no_torn_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, message: str
) -> None:
    writer = LogWriter(tmp_path, max_rows=1000)
    writer.add(row(1))
    writer.add(row(2))

    def torn_write(table: object, where: object, **kw: object) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise error

    monkeypatch.setattr(logwriter_module.pq, "write_table", torn_write)
    with pytest.raises(LogWriteError, match=message):
        writer.flush()
    assert writer.pending == 2 and writer.rows_dropped == 0
    assert list(tmp_path.iterdir()) == [], "neither a torn .parquet nor its temporary file is left"
    monkeypatch.undo()
    writer.close()
    assert read_logs(tmp_path).table.num_rows == 2


def test_a_log_file_is_synced_before_its_name_appears_and_its_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power loss right after a flush leaves the file whole or absent, never empty or torn:
    the content is synced under the temporary name, then renamed, then the rename synced."""
    events: list[tuple[str, ...]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def observed_fsync(fd: int) -> None:
        st = os.fstat(fd)
        what = "directory" if stat.S_ISDIR(st.st_mode) else "file"
        visible = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
        events.append(("fsync", what, str(st.st_ino), ",".join(visible)))
        real_fsync(fd)

    def observed_replace(src: Path, dst: Path) -> None:
        events.append(("rename", Path(src).name, Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(logwriter_module.os, "fsync", observed_fsync)
    monkeypatch.setattr(logwriter_module.os, "replace", observed_replace)
    writer = LogWriter(tmp_path, prefix="w")
    writer.add(row(1))
    final = writer.flush()
    assert final is not None
    file_ino, dir_ino = str(final.stat().st_ino), str(tmp_path.stat().st_ino)
    assert events == [
        ("fsync", "file", file_ino, ""),  # the content, while no .parquet name shows it yet
        ("rename", ".w-000001.parquet.tmp", "w-000001.parquet"),
        ("fsync", "directory", dir_ino, "w-000001.parquet"),  # then the new name itself
    ], events
    events.clear()
    record = writer.record_unlogged({"files": 1, "bytes": 10})
    assert [e[:2] for e in events] == [
        ("fsync", "file"),
        ("rename", record.name + ".tmp"),
        ("fsync", "directory"),
    ], events
    assert events[0][2] == str(record.stat().st_ino), "the record is synced as log files are"
    writer.close()


def test_a_failed_fsync_keeps_rows_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = LogWriter(tmp_path)
    writer.add(row(1))
    writer.add(row(2))

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(logwriter_module.os, "fsync", failing_fsync)
    with pytest.raises(LogWriteError, match="Input/output error"):
        writer.flush()
    assert writer.pending == 2 and writer.files == []
    assert list(tmp_path.iterdir()) == [], "neither the file nor its temporary name is left"
    monkeypatch.undo()
    writer.close()
    assert read_logs(tmp_path).table.num_rows == 2


def test_a_directory_that_cannot_be_synced_is_reported_once_and_its_rows_not_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The file is whole and visible when its directory's sync fails: its rows are written,
    not buffered again (which would write them twice); the failure is a warning, once."""
    real_fsync = os.fsync

    def no_directory_sync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")
        real_fsync(fd)

    monkeypatch.setattr(logwriter_module.os, "fsync", no_directory_sync)
    writer = LogWriter(tmp_path)
    with caplog.at_level(logging.WARNING, logger="placement.logwriter"):
        for i in range(2):
            writer.add(row(i))
            assert writer.flush() is not None
    assert writer.pending == 0 and writer.rows_written == 2
    [warning] = caplog.records
    assert (
        "could not be synced (" in warning.getMessage()
        and "Invalid argument" in warning.getMessage()
    )
    writer.close()
    assert read_logs(tmp_path).table.num_rows == 2


def test_while_the_log_disk_is_full_rows_wait_for_the_interval_in_a_bounded_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    writer = LogWriter(
        tmp_path, max_rows=4, max_interval_s=10, max_buffered_rows=20, clock=lambda: now[0]
    )
    attempts = []

    def full(table: object, where: object, **kw: object) -> None:
        attempts.append(len(table))  # type: ignore[arg-type]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(logwriter_module.pq, "write_table", full)
    with caplog.at_level(logging.WARNING, logger="placement.logwriter"):
        for i in range(50):  # one row per deleted file, the disk full throughout
            writer.add(row(i))
    # one attempt when the buffer filled, none per later row (no table rebuilt per row)
    assert attempts == [4], attempts
    assert [r.exc_info is not None for r in caplog.records] == [True], "one traceback"
    # memory stays bounded: the oldest rows go first, counted
    assert writer.pending == 20 and writer.rows_lost == 30
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="placement.logwriter"):
        now[0] = 11.0  # the interval has passed: the next row retries, and fails again
        writer.add(row(50))
        assert attempts[-1] == 20 and writer.pending == 20 and writer.rows_lost == 31
        assert caplog.records == [], "a later failure within a minute is not logged again"
        now[0] = 80.0
        assert writer.maybe_flush(min_age_s=0) is None
        assert "still cannot be written" in caplog.text and "31 lost" in caplog.text
        now[0] = 85.0  # a periodic flush right after a failure waits for the interval
        assert writer.maybe_flush(min_age_s=0) is None and writer.pending == 20
        assert attempts[-1] == 20 and len(attempts) == 3
    monkeypatch.undo()  # the disk has room again
    caplog.clear()
    now[0] = 91.0
    with caplog.at_level(logging.WARNING, logger="placement.logwriter"):
        assert writer.maybe_flush(min_age_s=0) is not None
    assert "written again (31 lost" in caplog.text
    kept = read_logs(tmp_path).table["file_id"].to_pylist()
    assert kept == [f"f{i}" for i in range(31, 51)], "the newest rows, in order"
    for i in range(4):  # and a full buffer flushes at once again
        writer.add(row(100 + i))
    assert writer.pending == 0
    writer.close()


def test_rows_added_while_a_flush_fails_queue_behind_its_rows_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = LogWriter(tmp_path, max_rows=4, max_interval_s=3600, max_buffered_rows=5)
    for i in range(3):
        writer.add(row(i))

    def full_while_rows_arrive(table: object, where: object, **kw: object) -> None:
        for i in range(10, 13):  # deleted files' rows arriving during the write
            writer.add(row(i))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(logwriter_module.pq, "write_table", full_while_rows_arrive)
    with pytest.raises(LogWriteError, match="No space left"):
        writer.flush()
    assert writer.pending == 5 and writer.rows_lost == 1, "6 rows, 5 kept: the oldest goes"
    monkeypatch.undo()
    writer.close()
    kept = read_logs(tmp_path).table["file_id"].to_pylist()
    assert kept == ["f1", "f2", "f10", "f11", "f12"], "the failed rows first, then the new ones"


def test_a_background_writer_fed_faster_than_its_disk_keeps_the_newest_rows_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``flush_mode="background"`` with the log disk full throughout: ``add`` never writes
    nor raises, the buffer stops at ``max_buffered_rows`` keeping the newest rows, the rows
    it discards are counted, and the failure is logged once, by the flusher thread."""
    writer = LogWriter(
        tmp_path,
        max_rows=4,
        max_interval_s=3600,
        max_buffered_rows=20,
        flush_mode="background",
        clock=lambda: 0.0,
    )
    writing: list[str] = []

    def full(table: object, where: object, **kw: object) -> None:
        writing.append(threading.current_thread().name)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(logwriter_module.pq, "write_table", full)
    with caplog.at_level(logging.WARNING, logger="placement.logwriter"):
        for i in range(50):
            writer.add(row(i))  # the flusher fails meanwhile, as often as it is woken

        def errors() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.levelno >= logging.ERROR]

        # a failing flush takes the rows out, puts them back, then logs: wait for that
        wait_until(lambda: errors() and writer.pending == 20, "a failed flush")
    assert writer.rows_lost == 30, "50 rows, the 20 newest kept"
    flusher = f"placement-log-flush-{writer.prefix}"
    assert writing and set(writing) == {flusher}, "only the writer's thread wrote"
    assert len(errors()) == 1 and errors()[0].threadName == flusher, "one traceback, its thread's"
    monkeypatch.undo()  # the disk has room again
    writer.close()
    assert writer.rows_written == 20 and writer.rows_lost == 30
    kept = read_logs(tmp_path).table["file_id"].to_pylist()
    assert kept == [f"f{i}" for i in range(30, 50)], "the newest rows, in order"


def test_rows_arriving_while_close_flushes_are_refused_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = LogWriter(tmp_path / "logs")
    store = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=writer)
    early, late = (
        store.create(name, FileRequest(file_kind="spill", created_at=time.time()))
        for name in ("early", "late")
    )
    store.delete(early)
    real_write = logwriter_module.pq.write_table

    def write_while_a_row_arrives(table: pa.Table, where: object, **kw: object) -> None:
        store.delete(late)  # a file deleted while the writer is closing
        real_write(table, where, **kw)

    monkeypatch.setattr(logwriter_module.pq, "write_table", write_while_a_row_arrives)
    writer.close()
    assert store.rows_dropped == 1, "the late row is refused, and counted by the store"
    assert writer.pending == 0 and writer.rows_written == 1
    assert read_logs(tmp_path / "logs").table["file_id"].to_pylist() == [early.file_id]
    with pytest.raises(LogWriteError, match="closed"):
        writer.add(row(9))
    store.close()


def test_a_failed_final_flush_is_retried_by_the_next_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = LogWriter(tmp_path)
    writer.add(row(1))

    def full(table: object, where: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(logwriter_module.pq, "write_table", full)
    with pytest.raises(LogWriteError, match="No space left"):
        writer.close()
    with pytest.raises(LogWriteError, match="closed"):
        writer.add(row(2))
    monkeypatch.undo()
    writer.close()
    assert writer.pending == 0 and read_logs(tmp_path).table.num_rows == 1


def test_reader_skips_and_reports_bad_files(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        w.add(row(1))
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    pq.write_table(pq.read_table(w.files[0]).drop_columns(["file_id"]), tmp_path / "old.parquet")
    logs = read_logs(tmp_path)
    assert logs.table.num_rows == 1
    assert sorted(p.name for p, _ in logs.bad_files) == ["broken.parquet", "old.parquet"]
    assert any("file_id" in reason for _, reason in logs.bad_files)
    with pytest.raises(FileNotFoundError, match="no log file"):
        read_logs(tmp_path / "missing")


def test_a_directory_that_cannot_be_listed_is_reported_not_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root lists any directory whatever its mode, so the refusal is injected: ``os.walk``
    reports what ``os.scandir`` raises for the locked directory."""
    import os

    from click.testing import CliRunner

    from placement.cli import placement_group

    for name in ("a", "locked"):
        with LogWriter(tmp_path / name) as w:
            w.add(row(1, run_id=name))
    scandir = os.scandir

    def refusing(path: object = ".") -> object:
        if Path(os.fsdecode(path)).name == "locked":  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", os.fsdecode(path))  # type: ignore
        return scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", refusing)
    logs = read_logs(tmp_path)
    assert logs.table.num_rows == 1  # the readable directory's row
    [(where, reason)] = logs.bad_files
    assert where.name == "locked" and "unreadable directory (Permission denied)" in reason
    with pytest.raises(PermissionError):  # no list to report it in: not passed over either
        logwriter_module.log_files(tmp_path)
    result = CliRunner().invoke(placement_group, ["simulate", str(tmp_path), "--budget", "5"])
    assert "1 bad file(s) skipped" in result.output, result.output
    assert "locked: unreadable directory" in result.output, result.output


def test_version_1_logs_read_with_the_spill_facts_they_lack_as_nulls(tmp_path: Path) -> None:
    with LogWriter(tmp_path / "new") as w:
        w.add(row(1, reuse_distance=-4, n_dependents=2))
    old = pq.read_table(w.files[0]).drop_columns(["reuse_distance", "n_dependents"])
    pq.write_table(old.replace_schema_metadata({SCHEMA_VERSION_KEY: b"1"}), tmp_path / "v1.parquet")
    logs = read_logs([tmp_path / "v1.parquet", *w.files])
    assert logs.bad_files == [] and logs.table.num_rows == 2
    assert logs.table["reuse_distance"].to_pylist() == [None, -4]
    assert logs.table["n_dependents"].to_pylist() == [None, 2]
    newer = old.replace_schema_metadata({SCHEMA_VERSION_KEY: str(SCHEMA_VERSION + 1).encode()})
    pq.write_table(newer, tmp_path / "v9.parquet")
    bad = read_logs(tmp_path / "v9.parquet").bad_files
    assert len(bad) == 1 and "newer than this dataplane reads" in bad[0][1]


def test_a_malformed_schema_version_is_a_schema_error_and_other_files_still_read(
    tmp_path: Path,
) -> None:
    from placement.errors import SchemaError
    from placement.schema import conform

    with LogWriter(tmp_path) as w:
        w.add(row(1))
    table = pq.read_table(w.files[0])
    garbage = table.replace_schema_metadata({SCHEMA_VERSION_KEY: b"v2"})
    with pytest.raises(SchemaError, match=r"'dataplane.placement.schema_version' is b'v2'"):
        conform(garbage)
    pq.write_table(garbage, tmp_path / "garbage.parquet")
    logs = read_logs(tmp_path)
    assert logs.table.num_rows == 1
    ((bad, reason),) = logs.bad_files
    assert bad.name == "garbage.parquet" and "not a schema version number" in reason


def test_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_rows"):
        LogWriter(tmp_path, max_rows=0)
    with pytest.raises(ValueError, match="max_interval_s"):
        LogWriter(tmp_path, max_interval_s=-1)
    with pytest.raises(ValueError, match="max_buffered_rows"):
        LogWriter(tmp_path, max_rows=10, max_buffered_rows=5)
    with pytest.raises(ValueError, match="prefix"):
        LogWriter(tmp_path, prefix="../x")


def test_bad_options_raise_placement_errors(tmp_path: Path) -> None:
    from placement.errors import PlacementConfigError, PlacementError

    with pytest.raises(PlacementError, match="max_rows=0 must be a positive int") as info:
        LogWriter(tmp_path, max_rows=0)
    assert isinstance(info.value, PlacementConfigError) and isinstance(info.value, ValueError)
    with pytest.raises(PlacementError, match="prefix"):
        LogWriter(tmp_path, prefix="../x")


def test_files_a_merged_file_holds_are_read_once(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path, prefix="w", max_rows=3)
    for i in range(12):
        writer.add(row(i))
    writer.close()
    sources = sorted(tmp_path.glob("w-*.parquet"))
    assert len(sources) == 4
    merge_by_hand(tmp_path, sources[:3], "w-000001.abcd1234.compacted.parquet")
    logs = read_logs(tmp_path)
    ids = logs.table["file_id"].to_pylist()
    assert sorted(ids) == sorted(f"f{i}" for i in range(12))  # each once
    assert [p.name for p in logs.files] == [
        "w-000001.abcd1234.compacted.parquet",
        "w-000004.parquet",
    ]
    # a file of a listed name but another size is another file (a name used again): read
    sources[0].write_bytes(pq.read_table(sources[3]).to_pandas().to_parquet())
    assert read_logs(tmp_path).table.num_rows == 15


def test_a_listed_file_merged_and_deleted_before_its_read_is_read_from_the_merged_file(
    tmp_path: Path,
) -> None:
    with LogWriter(tmp_path, prefix="w", max_rows=2) as writer:
        for i in range(6):
            writer.add(row(i))
    sources = sorted(tmp_path.glob("w-*.parquet"))
    merge_by_hand(tmp_path, sources, "w-000001.abcd1234.compacted.parquet")
    for source in sources:
        source.unlink()
    logs = read_logs(sources)  # listed before the merge, read after it
    assert sorted(logs.table["file_id"].to_pylist()) == [f"f{i}" for i in range(6)]
    assert logs.bad_files == []


def test_closing_a_background_writer_ends_its_flusher_thread(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path, max_rows=2, max_interval_s=3600, flush_mode="background")
    real_flush = writer._flush_logged

    def slow_flush() -> Path | None:  # the thread is still busy after its flush is written
        written = real_flush()
        time.sleep(0.3)
        return written

    writer._flush_logged = slow_flush  # type: ignore[method-assign]
    writer.add(row(0))
    writer.add(row(1))  # due: the flusher thread takes both rows
    wait_until(lambda: writer.rows_written == 2)
    writer.close()
    name = f"placement-log-flush-{writer.prefix}"
    assert not [t for t in threading.enumerate() if t.name == name and t.is_alive()]
    assert sorted(read_logs(tmp_path).table["file_id"].to_pylist()) == ["f0", "f1"]


def test_a_row_arriving_exactly_at_the_interval_flushes(tmp_path: Path) -> None:
    now = [0.0]
    writer = LogWriter(tmp_path, max_rows=1000, max_interval_s=10, clock=lambda: now[0])
    writer.add(row(1))
    assert writer.pending == 1
    now[0] = 10.0
    writer.add(row(2))
    assert writer.pending == 0 and writer.rows_written == 2
    writer.close()


def test_hidden_log_files_are_not_listed(tmp_path: Path) -> None:
    with LogWriter(tmp_path, prefix="w") as w:
        w.add(row(1))
    (tmp_path / ".hidden.parquet").write_bytes(w.files[0].read_bytes())
    assert [p.name for p in log_files(tmp_path)] == ["w-000001.parquet"]
    assert read_logs(tmp_path).table.num_rows == 1
