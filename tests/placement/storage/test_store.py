"""Unit tests of the tiered temporary-file store (no cluster)."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import placement.storage.store as store_module
from placement.schema import SCHEMA, conform
from placement.storage import (
    ByKindTier,
    FileKind,
    FileRequest,
    FixedTier,
    StorageConfigError,
    StorageError,
    TieredFileStore,
    TierIOError,
    UnsafePathError,
)
from placement.storage.context import RequestBuilder, RunContext
from placement.storage.paths import MAX_COMPONENT_BYTES, check_name, name_for_key
from placement.tier import Tier
from tests.placement.conftest import unwritable_dir
from tests.placement.storage.conftest import ListSink


def request(kind: FileKind = FileKind.SPILL, **kw: object) -> FileRequest:
    return FileRequest(
        file_kind=kind, created_at=time.time(), pipeline="p", run_id="r", stage="s", **kw
    )


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.endswith(".lock"))


# ---------------------------------------------------------------------- requests, choosers
def test_request_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="file_kind='tmp' is not one of"):
        FileRequest(file_kind="tmp", created_at=1.0)
    with pytest.raises(ValueError, match="n_partitions_out=-1"):
        FileRequest(file_kind="spill", created_at=1.0, n_partitions_out=-1)
    with pytest.raises(ValueError, match="created_at"):
        FileRequest(file_kind="spill", created_at=float("nan"))
    with pytest.raises(ValueError, match="stage=''"):
        FileRequest(file_kind="spill", created_at=1.0, stage="")
    with pytest.raises(ValueError, match="reuse_distance=1.5"):
        FileRequest(file_kind="spill", created_at=1.0, reuse_distance=1.5)
    with pytest.raises(ValueError, match="n_dependents=-2"):
        FileRequest(file_kind="spill", created_at=1.0, n_dependents=-2)
    assert FileRequest(file_kind="shuffle", created_at=1.0).file_kind is FileKind.SHUFFLE
    assert FileRequest(file_kind="spill", created_at=1.0, reuse_distance=-3).reuse_distance == -3


def test_numpy_counts_are_facts_like_any_other(store: TieredFileStore, sink: ListSink) -> None:
    import numpy as np

    from placement.storage import set_run_context

    req = request(
        input_bytes=np.int64(10**12),
        n_partitions_in=np.int64(2**40),  # an int32 column: clipped to fit
        priority=np.int32(-5),
        reuse_distance=np.int64(-(2**40)),
    )
    assert (req.input_bytes, req.n_partitions_in) == (10**12, 2**31 - 1)
    assert (req.priority, req.reuse_distance) == (-5, -(2**31 - 1))
    assert all(type(v) is int for v in (req.input_bytes, req.n_partitions_in, req.priority))
    store.delete(store.create("k", req))
    conform(pa.Table.from_pylist(sink.rows, schema=SCHEMA))  # the row fits the log schema
    with pytest.raises(ValueError, match="input_bytes=1.5 must be a non-negative int"):
        FileRequest(file_kind="spill", created_at=1.0, input_bytes=1.5)
    with pytest.raises(ValueError, match="priority='1' must be an int"):
        FileRequest(file_kind="spill", created_at=1.0, priority="1")
    # the driver's run context: numpy counts are kept as ints, floats refused there
    ctx = RunContext(
        pipeline="p",
        run_id="r",
        input_bytes=np.int64(10**9),
        stage_tasks={"x": np.int64(8)},
        shuffle_inputs={"s": np.int32(4)},
    )
    assert ctx.input_bytes == 10**9 and type(ctx.input_bytes) is int
    assert ctx.stage_tasks == {"x": 8} and type(ctx.stage_tasks["x"]) is int
    with pytest.raises(ValueError, match=r"RunContext.input_bytes=1000000000.0 must be"):
        RunContext(pipeline="p", run_id="r", input_bytes=1e9)
    with pytest.raises(ValueError, match=r"RunContext.stage_tasks\['x'\]=-1 must be"):
        RunContext(pipeline="p", run_id="r", stage_tasks={"x": -1})
    # a spill under such a context gets its facts (the request used to fail the task)
    set_run_context(ctx)
    try:
        assert RequestBuilder().spill("x-1", 100).input_bytes == 10**9
    finally:
        set_run_context(None)


def test_choosers_validate_and_choose() -> None:
    with pytest.raises(ValueError, match="tier='nvme'"):
        FixedTier("nvme")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="FileKind -> Tier"):
        ByKindTier({"blob": Tier.SSD})
    chooser = ByKindTier({FileKind.SHUFFLE: Tier.SSD})
    assert chooser.choose(request(FileKind.SHUFFLE)) is Tier.SSD
    assert chooser.choose(request(FileKind.SPILL)) is Tier.HDD


def test_kinds_a_rule_does_not_list_go_to_its_default_tier() -> None:
    chooser = ByKindTier({FileKind.SHUFFLE: Tier.HDD}, default=Tier.SSD)
    assert chooser.choose(request(FileKind.SPILL)) is Tier.SSD
    assert chooser.choose(request(FileKind.SHUFFLE)) is Tier.HDD


def test_fixed_choosers_are_equal_only_for_the_same_tier() -> None:
    assert FixedTier(Tier.SSD) == FixedTier("ssd")  # type: ignore[arg-type]
    assert hash(FixedTier(Tier.SSD)) == hash(FixedTier("ssd"))  # type: ignore[arg-type]
    assert FixedTier(Tier.SSD) != FixedTier(Tier.HDD)


def test_store_rejects_bad_configuration(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="same directory"):
        TieredFileStore(ssd_dir=tmp_path / "x", hdd_dir=tmp_path / "x")
    with pytest.raises(TypeError, match="no choose"):
        TieredFileStore(ssd_dir=tmp_path / "a", hdd_dir=tmp_path / "b", chooser=object())  # type: ignore[arg-type]
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StorageError, match="cannot create the ssd directory"):
        TieredFileStore(ssd_dir=tmp_path / "file" / "ssd", hdd_dir=tmp_path / "b")


def test_a_store_that_fails_to_start_leaves_nothing_in_either_tier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store_module._take_lock
    calls = []

    def second_fails(directory: Path, dirname: str, **kw: Any) -> int:
        calls.append(directory)
        if len(calls) == 2:
            raise StorageError(f"could not lock {directory}")
        return real(directory, dirname, **kw)

    monkeypatch.setattr(store_module, "_take_lock", second_fails)
    with pytest.raises(StorageError, match="could not lock"):
        TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd")
    assert len(calls) == 2
    assert files_under(tmp_path) == [] and list((tmp_path / "ssd").iterdir()) == [], (
        "the first tier's lock file and directory are removed"
    )
    monkeypatch.undo()
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as store:
        assert store.cleanup_orphans() == 0


# ---------------------------------------------------------------------- counting and rows
def test_write_read_delete_counts_and_emits_one_schema_row(
    store: TieredFileStore, sink: ListSink
) -> None:
    handle = store.create("k1", request(expected_size_bytes=11, n_partitions_out=4))
    assert store.write(handle, [b"hello ", bytearray(b"world")]) == 11
    assert bytes(store.read(handle)) == b"hello world"
    assert bytes(store.read(handle)) == b"hello world"
    assert store.usage() == {Tier.SSD: 0, Tier.HDD: 11}
    row = store.delete(handle)
    assert store.delete(handle) is None  # a second delete is a no-op
    assert sink.rows == [row]
    assert row["write_ops"] == 1 and row["write_bytes"] == 11
    assert row["read_ops"] == 2 and row["read_bytes"] == 22
    assert row["size_bytes"] == 11 and row["tier"] == "hdd"
    assert row["deleted_at"] >= row["created_at"]
    assert row["n_partitions_out"] == 4 and row["file_kind"] == "spill"
    assert row["host"] and row["file_id"].startswith(store.label)
    table = conform(pa.Table.from_pylist(sink.rows, schema=SCHEMA))
    assert table.num_rows == 1
    assert files_under(store.roots[Tier.HDD]) == []


def test_read_range_reads_past_a_short_pread(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Linux returns at most ~2 GiB per pread; here every call returns at most 7 bytes
    handle = store.create("big", request())
    payload = bytes(range(256)) * 4
    store.write(handle, payload)
    real_preadv, real_pread = os.preadv, os.pread

    def short_preadv(fd: int, buffers: list, offset: int) -> int:
        return real_preadv(fd, [memoryview(buffers[0])[:7]], offset)

    def short_pread(fd: int, n: int, offset: int) -> bytes:
        return real_pread(fd, min(n, 7), offset)

    monkeypatch.setattr(store_module.os, "preadv", short_preadv)
    monkeypatch.setattr(store_module.os, "pread", short_pread)
    data = store.read_range(handle, 3, 1000)
    assert bytes(data) == payload[3:1003]
    assert handle.stats.read_ops == 1 and handle.stats.read_bytes == 1000


def test_gathered_writes_go_on_after_short_writes(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a file system may take fewer bytes than asked (Linux: ~2 GiB per call); here every
    # gathered write takes at most 5 bytes, and frames of other formats than bytes (a
    # memoryview of doubles) count by their bytes
    doubles = memoryview(bytearray(range(16))).cast("d")
    frames = [b"head", b"", doubles, bytearray(b"0123456789")] + [b"%03d" % i for i in range(9)]
    expected = b"".join(bytes(f) for f in frames)
    real_writev = os.writev
    calls = []

    def short_writev(fd: int, buffers: list) -> int:
        calls.append(len(buffers))
        head, budget = [], 5
        for b in buffers:
            view = memoryview(b).cast("B")[:budget]
            head.append(view)
            budget -= len(view)
        return real_writev(fd, head)

    monkeypatch.setattr(store_module.os, "writev", short_writev)
    handle = store.create("k", request())
    assert store.write(handle, frames) == len(expected)
    shard = store.create("shuffle-2/0", request(FileKind.SHUFFLE))
    store.append(shard, frames)
    store.append(shard, [b"tail"])
    monkeypatch.undo()
    assert bytes(store.read(handle)) == expected
    assert bytes(store.read(shard)) == expected + b"tail"
    assert calls[0] == len(frames) and len(calls) == 2 * -(-len(expected) // 5) + 1


@pytest.mark.parametrize("limit", ["_IOV_MAX", "_GATHER_MAX_BYTES"])
def test_large_writes_go_frame_by_frame(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    frames = [b"%03d" % i for i in range(20)]
    monkeypatch.setattr(store_module, limit, 19)  # 20 frames, 60 bytes: past either limit
    gathered = []
    monkeypatch.setattr(store_module.os, "writev", lambda fd, b: gathered.append(b) or 0)
    handle = store.create("k", request())
    assert store.write(handle, frames) == 60
    monkeypatch.undo()
    assert gathered == [] and bytes(store.read(handle)) == b"".join(frames)


def test_a_write_that_makes_no_progress_fails_instead_of_spinning(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module.os, "writev", lambda fd, buffers: 0)
    handle = store.create("k", request())
    with pytest.raises(TierIOError, match="made no progress") as info:
        store.write(handle, [b"", b"data"])
    assert info.value.errno == errno.EIO
    assert not handle.partial_path.exists() and not handle.path.exists()


def test_rewrite_keeps_the_largest_size(store: TieredFileStore) -> None:
    handle = store.create("k", request())
    store.write(handle, b"x" * 100)
    store.write(handle, b"y" * 10)
    assert bytes(store.read(handle)) == b"y" * 10
    row = store.delete(handle)
    assert row["size_bytes"] == 100 and row["write_ops"] == 2 and row["write_bytes"] == 110


def test_appends_stay_partial_until_sealed(store: TieredFileStore) -> None:
    handle = store.create("shuffle-1/0", request(FileKind.SHUFFLE))
    for chunk in (b"aa", b"bbb", b"c"):
        store.append(handle, chunk)
    assert not handle.path.exists(), "an unsealed file must not be readable under its name"
    assert handle.partial_path.read_bytes() == b"aabbbc"
    assert bytes(store.read(handle)) == b"aabbbc"
    assert handle.path.exists() and not handle.partial_path.exists()
    with pytest.raises(StorageError, match="sealed"):
        store.append(handle, b"more")
    row = store.delete(handle)
    assert (
        row["write_ops"],
        row["write_bytes"],
        row["read_ops"],
        row["read_bytes"],
        row["size_bytes"],
    ) == (
        3,
        6,
        1,
        6,
        6,
    )


def test_chooser_decides_the_directory(tmp_path: Path, sink: ListSink) -> None:
    chooser = ByKindTier({FileKind.SHUFFLE: Tier.SSD})
    with TieredFileStore(
        ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", chooser=chooser, sink=sink
    ) as s:
        fast = s.create("a", request(FileKind.SHUFFLE))
        slow = s.create("b", request(FileKind.SPILL))
        s.write(fast, b"1")
        s.write(slow, b"2")
        assert fast.path.parent == s.roots[Tier.SSD] and fast.path.read_bytes() == b"1"
        assert slow.path.parent == s.roots[Tier.HDD] and slow.path.read_bytes() == b"2"
    assert sorted(r["tier"] for r in sink.rows) == ["hdd", "ssd"]  # close() deleted and logged both


def test_failing_chooser_falls_back_to_hdd(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def choose(self, request: FileRequest) -> Tier:
            raise RuntimeError("model unavailable")

    with TieredFileStore(ssd_dir=tmp_path / "s", hdd_dir=tmp_path / "h", chooser=Broken()) as s:
        with caplog.at_level(logging.ERROR):
            handle = s.create("x", request())
        assert handle.tier is Tier.HDD
        assert "model unavailable" in caplog.text


def test_a_chooser_may_name_its_tier_and_one_naming_no_tier_sends_files_to_hdd(
    tmp_path: Path,
) -> None:
    class ByName:
        def choose(self, request: FileRequest) -> str:
            return "ssd" if request.file_kind is FileKind.SHUFFLE else "nvme"

    with TieredFileStore(ssd_dir=tmp_path / "s", hdd_dir=tmp_path / "h", chooser=ByName()) as s:
        named = s.create("a", request(FileKind.SHUFFLE))
        unknown = s.create("b", request())
        assert named.tier is Tier.SSD and named.path.parent == s.roots[Tier.SSD]
        assert unknown.tier is Tier.HDD


def test_failing_sink_still_deletes(tmp_path: Path) -> None:
    class Refusing:
        def add(self, row: dict) -> None:
            raise OSError("log disk gone")

    with TieredFileStore(ssd_dir=tmp_path / "s", hdd_dir=tmp_path / "h", sink=Refusing()) as s:
        handle = s.create("x", request())
        s.write(handle, b"data")
        s.delete(handle)
        assert not handle.path.exists() and s.rows_dropped == 1


def test_a_file_needs_a_file_request(store: TieredFileStore) -> None:
    with pytest.raises(TypeError, match="request must be a FileRequest, got dict"):
        store.create("k", {"file_kind": "spill"})  # type: ignore[arg-type]
    assert store.live_files() == []


def test_a_file_never_written_reads_as_empty(store: TieredFileStore) -> None:
    handle = store.create("shuffle-6/0", request(FileKind.SHUFFLE))
    assert store.seal(handle).read_bytes() == b""
    assert bytes(store.read(handle)) == b""
    row = store.delete(handle)
    assert (row["write_ops"], row["size_bytes"], row["read_ops"]) == (0, 0, 1)


def test_a_deleted_file_takes_no_more_appends_or_reads(store: TieredFileStore) -> None:
    handle = store.create("shuffle-6/1", request(FileKind.SHUFFLE))
    store.append(handle, b"a")
    store.delete(handle)
    with pytest.raises(StorageError, match="already deleted"):
        store.append(handle, b"late")
    with pytest.raises(StorageError, match="already deleted"):
        store.read(handle)
    assert files_under(store.roots[Tier.HDD]) == []


def test_duplicate_and_deleted_files_are_errors(store: TieredFileStore) -> None:
    handle = store.create("x", request())
    with pytest.raises(StorageError, match="already exists"):
        store.create("x", request())
    store.delete(handle)
    with pytest.raises(StorageError, match="already deleted"):
        store.write(handle, b"late")


def held_paths() -> list[str]:
    """Targets of this process's open file descriptors."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # closed since it was listed
    return held


@pytest.fixture
def stuck_unlink(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files whose name starts with ``stuck`` cannot be removed (EIO)."""
    real = store_module._unlink

    def unlink(path: Path) -> None:
        if path.name.startswith("stuck"):
            raise OSError(errno.EIO, "Input/output error", str(path))
        real(path)

    monkeypatch.setattr(store_module, "_unlink", unlink)


def test_deleting_a_sealed_file_looks_for_no_partial_unless_a_rewrite_left_one(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_unlink, real_write = store_module._unlink, store_module._write_frames
    removed: list[str] = []

    def unlink(path: Path) -> None:
        removed.append(path.name)
        if path.name == "torn.partial" and len(removed) == 1:  # the rewrite's own cleanup
            raise OSError(errno.EIO, "Input/output error", str(path))
        real_unlink(path)

    written = store.create("whole", request())
    store.write(written, b"data")
    appended = store.create("shuffle-3/0", request(FileKind.SHUFFLE))
    store.append(appended, b"part")
    sealed = store.create("shuffle-3/1", request(FileKind.SHUFFLE))
    store.append(sealed, b"part")
    store.read(sealed)
    torn = store.create("torn", request())
    store.write(torn, b"old bytes")  # sealed; its rewrite fails and leaves a .partial

    def failing(fd: int, frames: list) -> None:
        os.write(fd, b"ne")
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store_module, "_write_frames", failing)
    monkeypatch.setattr(store_module, "_unlink", unlink)
    with pytest.raises(OSError):
        store.write(torn, b"new bytes")
    monkeypatch.setattr(store_module, "_write_frames", real_write)
    assert torn.partial_path.exists() and bytes(store.read(torn)) == b"old bytes"
    for handle in (written, appended, sealed, torn):
        store.delete(handle)
    assert removed == [
        "torn.partial",  # the failed rewrite's cleanup
        "whole",
        "0.partial",
        "0",
        "1",
        "torn.partial",
        "torn",
    ]
    assert files_under(store.roots[Tier.HDD]) == []


@pytest.mark.usefixtures("stuck_unlink")
def test_a_file_that_cannot_be_removed_still_emits_its_row(
    store: TieredFileStore, sink: ListSink, caplog: pytest.LogCaptureFixture
) -> None:
    handle = store.create("stuck-1", request())
    store.write(handle, b"data")
    with caplog.at_level(logging.ERROR):
        row = store.delete(handle)
    assert row is not None and sink.rows == [row] and row["write_bytes"] == 4
    assert "could not remove the temporary file" in caplog.text and "stuck-1" in caplog.text
    assert store.live_files() == [] and store.delete(handle) is None


@pytest.mark.usefixtures("stuck_unlink")
def test_close_deletes_everything_it_can_and_releases_the_store(
    tmp_path: Path, sink: ListSink
) -> None:
    store = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=sink)
    handles = [store.create(name, request()) for name in ("stuck-a", "good", "stuck-b")]
    for handle in handles:
        store.write(handle, b"payload")
    partial = store.create("stuck-appended", request(), tier=Tier.SSD)
    store.append(partial, b"half")
    locks = [
        str(d / (root.name + ".lock"))
        for d, root in zip(store.tier_dirs.values(), store.roots.values(), strict=True)
    ]
    assert any(p.startswith(tuple(locks)) for p in held_paths())

    store.close()

    assert sorted(r["file_id"] for r in sink.rows) == sorted(
        h.file_id for h in [*handles, partial]
    ), "every live file's row is emitted"
    assert store.closed and store.live_files() == []
    assert [*(tmp_path / "ssd").iterdir(), *(tmp_path / "hdd").iterdir()] == [], (
        "the store's directories (with the files that could not be unlinked) and lock "
        "files are removed"
    )
    assert not any(p.startswith(tuple(locks)) for p in held_paths()), "the locks are released"
    store.close()  # still idempotent
    assert len(sink.rows) == 4


def test_shuffle_buffer_close_deletes_every_file_even_if_one_fails(
    store: TieredFileStore, sink: ListSink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from distributed.shuffle._limiter import ResourceLimiter

    from placement.storage.shuffle import TieredDiskShardsBuffer

    real_delete = store.delete

    def delete(handle: store_module.TempFile, *, log: bool = True) -> dict | None:
        if handle.name.endswith("/0"):
            raise RuntimeError("injected failure")
        return real_delete(handle, log=log)

    monkeypatch.setattr(store, "delete", delete)

    async def run() -> dict[str, str]:
        buf = TieredDiskShardsBuffer(
            tmp_path / "shuffle-1-1",
            lambda path: (None, 0),
            ResourceLimiter(None),
            store=store,
            builder=RequestBuilder(),
        )
        for part in "012":
            buf._write_frames([b"shard"], part)
        file_ids = {h.name: h.file_id for h in buf.files}
        await buf.close()
        assert buf.files == []
        return file_ids

    file_ids = asyncio.run(run())
    assert sorted(r["file_id"] for r in sink.rows) == sorted(
        [file_ids["shuffle-1-1/1"], file_ids["shuffle-1-1/2"]]
    ), "the files after the one that failed are still deleted and logged"
    assert [h.name for h in store.live_files()] == ["shuffle-1-1/0"]
    assert (store.roots[Tier.HDD] / "shuffle-1-1").is_dir(), "the folder of a file left stays"


def test_a_folder_goes_on_both_tiers_once_no_live_file_lies_in_it(
    store: TieredFileStore, sink: ListSink
) -> None:
    ssd_file = store.create("run-1/a", request(), tier=Tier.SSD)
    hdd_file = store.create("run-1/b", request(), tier=Tier.HDD)
    store.write(ssd_file, b"a")
    store.append(hdd_file, b"b")
    folders = [store.roots[Tier.SSD] / "run-1", store.roots[Tier.HDD] / "run-1"]
    assert store.remove_folder("run-1") == 0 and all(f.is_dir() for f in folders)
    store.delete(ssd_file)
    store.delete(hdd_file)
    # a file created in the folder but not yet written (its folder not made yet, or empty)
    # keeps the folder: its write must not find the folder gone beneath it
    late = store.create("run-1/c", request(), tier=Tier.SSD)
    assert store.remove_folder("run-1") == 0 and all(f.is_dir() for f in folders)
    store.delete(late)
    assert store.remove_folder("run-1") == 2
    assert not any(f.exists() for f in folders) and files_under(store.roots[Tier.SSD]) == []
    again = store.create("run-1/d", request(), tier=Tier.HDD)  # a later file makes it again
    store.write(again, b"d")
    assert bytes(store.read(again)) == b"d"
    store.delete(again)
    assert store.remove_folder("run-1") == 1, "only the HDD folder was there"
    assert store.remove_folder("never-made") == 0
    with pytest.raises(UnsafePathError):
        store.remove_folder("../elsewhere")
    assert len(sink.rows) == 4


def test_shuffle_buffer_close_removes_the_runs_folder_on_both_tiers(
    tmp_path: Path, sink: ListSink
) -> None:
    import asyncio

    from distributed.shuffle._limiter import ResourceLimiter

    from placement.storage.shuffle import TieredDiskShardsBuffer

    class Alternate:
        """SSD, HDD, SSD, ...: the run's files on both tiers."""

        def __init__(self) -> None:
            self.n = 0

        def choose(self, request: FileRequest) -> Tier:
            self.n += 1
            return Tier.SSD if self.n % 2 else Tier.HDD

    store = TieredFileStore(
        ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=sink, chooser=Alternate()
    )

    async def run() -> None:
        buf = TieredDiskShardsBuffer(
            tmp_path / "dask" / "shuffle-1-1",
            lambda path: (None, 0),
            ResourceLimiter(None),
            store=store,
            builder=RequestBuilder(),
        )
        for part in "0123":
            buf._write_frames([b"shard"], part)
        assert {h.tier for h in buf.files} == {Tier.SSD, Tier.HDD}
        await buf.close()

    (tmp_path / "dask").mkdir()
    try:
        asyncio.run(run())
        assert len(sink.rows) == 4 and store.live_files() == []
        left = [p for root in store.roots.values() for p in root.iterdir()]
        assert left == [], "no empty shuffle folder waits for the store to close"
    finally:
        store.close()


def test_usage_counts_the_bytes_live_files_hold_now(store: TieredFileStore) -> None:
    rewritten = store.create("rewritten", request(), tier=Tier.HDD)
    store.write(rewritten, b"x" * 100)
    store.write(rewritten, b"y" * 10)  # its largest size was 100; it holds 10 now
    appended = store.create("shuffle-4/0", request(FileKind.SHUFFLE), tier=Tier.SSD)
    store.append(appended, b"abc")
    store.append(appended, b"defg")
    assert store.usage() == {Tier.SSD: 3 + 4, Tier.HDD: 10}
    store.delete(rewritten)
    assert store.usage() == {Tier.SSD: 7, Tier.HDD: 0}


@pytest.mark.parametrize("limit", ["_IOV_MAX", "_GATHER_MAX_BYTES"])
def test_writes_right_at_the_limits_are_still_gathered(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    frames = [b"%03d" % i for i in range(20)]
    monkeypatch.setattr(store_module, limit, 20 if limit == "_IOV_MAX" else 60)  # 20 frames, 60 B
    real_writev = os.writev
    gathered: list[int] = []

    def writev(fd: int, buffers: list) -> int:
        gathered.append(len(buffers))
        return real_writev(fd, buffers)

    monkeypatch.setattr(store_module.os, "writev", writev)
    handle = store.create("k", request())
    assert store.write(handle, frames) == 60
    monkeypatch.undo()
    assert gathered == [20] and bytes(store.read(handle)) == b"".join(frames)


def test_a_file_shorter_than_its_size_reads_as_an_error_not_as_zeros(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create("k", request())
    store.write(handle, b"data")
    real_fstat = os.fstat

    def fstat(fd: int) -> os.stat_result:  # the file shrinks between its size and its read
        st = real_fstat(fd)
        return os.stat_result((*st[:6], st.st_size + 3, *st[7:10]))

    monkeypatch.setattr(store_module.os, "fstat", fstat)
    with pytest.raises(TierIOError, match="short read") as info:
        store.read(handle)
    monkeypatch.undo()
    assert info.value.errno == errno.EIO and handle.stats.read_ops == 0


def test_read_range_reads_up_to_the_end_and_refuses_ranges_past_it(
    store: TieredFileStore,
) -> None:
    handle = store.create("k", request())
    store.write(handle, b"0123456789")
    assert bytes(store.read_range(handle, 7, 3)) == b"789"
    assert bytes(store.read_range(handle, 10, 0)) == b""
    for offset, nbytes in [(8, 3), (11, 0), (-1, 2), (0, -1)]:
        with pytest.raises(StorageConfigError, match=r"runs past the end|must be >= 0"):
            store.read_range(handle, offset, nbytes)
    assert handle.stats.read_ops == 2 and handle.stats.read_bytes == 3


def test_reads_reported_by_the_caller_count_their_operations(
    store: TieredFileStore, sink: ListSink
) -> None:
    handle = store.create("k", request())
    store.write(handle, b"0123456789")
    assert store.read_path(handle).read_bytes() == b"0123456789"
    store.record_read(handle, 10, ops=3)  # e.g. three batches of a memory-mapped file
    store.record_read(handle, 4)
    row = store.delete(handle)
    assert sink.rows == [row] and (row["read_ops"], row["read_bytes"]) == (3 + 1, 10 + 4)


def test_a_file_abandoned_without_a_row_is_removed_and_not_logged(
    store: TieredFileStore, sink: ListSink
) -> None:
    handle = store.create("k", request())
    store.write(handle, b"data")
    store.delete(handle, log=False)
    assert sink.rows == [] and store.live_files() == [] and not handle.path.exists()


def test_a_closed_store_creates_no_files(tmp_path: Path) -> None:
    store = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd")
    store.close()
    with pytest.raises(StorageError, match="is closed"):
        store.create("late", request())
    assert store.live_files() == [] and store.remove_folder("late") == 0


def test_a_live_file_keeps_only_its_own_folder(store: TieredFileStore) -> None:
    done = store.create("run-1/a", request())
    store.write(done, b"a")
    other = store.create("run-10/a", request())  # "run-10/..." does not lie in "run-1"
    store.write(other, b"b")
    store.delete(done)
    assert store.remove_folder("run-1") == 1
    assert not (store.roots[Tier.HDD] / "run-1").exists()
    assert bytes(store.read(other)) == b"b"


@pytest.mark.usefixtures("stuck_unlink")
def test_a_folder_still_holding_a_file_on_disk_is_left(store: TieredFileStore) -> None:
    handle = store.create("run-2/stuck-0", request())
    store.write(handle, b"data")
    store.delete(handle)  # its file could not be removed
    assert store.remove_folder("run-2") == 0
    assert handle.path.read_bytes() == b"data"


def test_a_folder_that_cannot_be_removed_is_an_error(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create("run-3/a", request())
    store.write(handle, b"a")
    store.delete(handle)

    def rmdir(path: str | os.PathLike[str]) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))

    monkeypatch.setattr(store_module.os, "rmdir", rmdir)
    with pytest.raises(TierIOError, match="removing the folder") as info:
        store.remove_folder("run-3")
    monkeypatch.undo()
    assert info.value.errno == errno.EACCES


# ---------------------------------------------------------------------- unsafe names
@pytest.mark.parametrize(
    "name",
    [
        "..",
        "../escape",
        "a/../../b",
        "/etc/passwd",
        "",
        "a//b",
        "./a",
        "a\\b",
        "a\x00b",
        "x.partial",
        "a" * 300,
    ],
)
def test_unsafe_names_are_refused(store: TieredFileStore, tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafePathError):
        store.create(name, request())
    assert store.live_files() == []


def test_symlinks_inside_the_tier_are_refused(store: TieredFileStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.roots[Tier.HDD] / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        store.create("link/stolen", request())
    (store.roots[Tier.HDD] / "filelink").symlink_to(outside / "target")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        store.create("filelink", request())
    assert list(outside.iterdir()) == []


def test_name_components_leave_room_for_the_partial_suffix(store: TieredFileStore) -> None:
    assert MAX_COMPONENT_BYTES == 255 - len(".partial")
    longest = "s" * MAX_COMPONENT_BYTES
    handle = store.create(f"dir/{longest}", request())
    store.append(handle, b"in progress")  # written as <name>.partial: 255 bytes
    assert bytes(store.read(handle)) == b"in progress"
    store.delete(handle)
    too_long = "é" * ((MAX_COMPONENT_BYTES + 2) // 2)  # 248 bytes in UTF-8
    with pytest.raises(UnsafePathError, match=f"longer than {MAX_COMPONENT_BYTES} bytes"):
        store.create(f"dir/{too_long}", request())
    with pytest.raises(UnsafePathError, match="partial"):
        check_name("t" * (MAX_COMPONENT_BYTES + 1))
    assert store.live_files() == []


def test_names_made_from_keys_are_safe() -> None:
    for key in ["../../etc/passwd", ("x-1", "/abs", 3), ".hidden", "a/b/../c", "\x00"]:
        name = name_for_key(key, 7)
        assert check_name(name) == (name,)
        assert "/" not in name and not name.startswith(".")


# ---------------------------------------------------------------------- SSD full
@pytest.fixture
def ssd_full(monkeypatch: pytest.MonkeyPatch, store: TieredFileStore) -> dict[str, int]:
    """Inject ENOSPC into writes landing on the SSD directory, after writing a torn half frame."""
    real = store_module._write_frames
    calls = {"failed": 0, "allowed_ssd_writes": 0}

    def write(fd: int, frames: list) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(str(store.roots[Tier.SSD])):
            if calls["allowed_ssd_writes"] > 0:
                calls["allowed_ssd_writes"] -= 1
                return real(fd, frames)
            calls["failed"] += 1
            first = bytes(frames[0])
            os.write(
                fd, first[: max(1, len(first) // 2)]
            )  # a torn tail, as a real full disk leaves
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, frames)

    monkeypatch.setattr(store_module, "_write_frames", write)
    return calls


def test_ssd_full_on_write_goes_to_hdd(
    store: TieredFileStore, sink: ListSink, ssd_full: dict[str, int]
) -> None:
    handle = store.create("k", request(), tier=Tier.SSD)
    store.write(handle, [b"0123456789", b"abc"])
    assert ssd_full["failed"] == 1 and store.fallbacks == 1
    assert handle.tier is Tier.HDD and handle.path.parent == store.roots[Tier.HDD]
    assert bytes(store.read(handle)) == b"0123456789abc"
    assert files_under(store.roots[Tier.SSD]) == []
    row = store.delete(handle)
    assert row["tier"] == "hdd" and row["write_ops"] == 1 and row["size_bytes"] == 13


def test_ssd_full_mid_append_moves_the_bytes_to_hdd(
    store: TieredFileStore, ssd_full: dict[str, int]
) -> None:
    ssd_full["allowed_ssd_writes"] = 2
    handle = store.create("shuffle-9/3", request(FileKind.SHUFFLE), tier=Tier.SSD)
    store.append(handle, b"first-")
    store.append(handle, b"second-")
    store.append(handle, b"third")  # SSD fills here, after a torn half write
    assert handle.tier is Tier.HDD and store.fallbacks == 1
    assert bytes(store.read(handle)) == b"first-second-third"
    assert files_under(store.roots[Tier.SSD]) == []
    row = store.delete(handle)
    assert row["write_ops"] == 3 and row["write_bytes"] == row["size_bytes"] == 18


def test_a_move_to_a_full_hdd_leaves_no_half_copy(
    store: TieredFileStore, ssd_full: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    ssd_full["allowed_ssd_writes"] = 1
    handle = store.create("shuffle-9/4", request(FileKind.SHUFFLE), tier=Tier.SSD)
    store.append(handle, b"first-")

    def half_copy(src: Path, dst: Path, *, follow_symlinks: bool = True) -> None:
        Path(dst).write_bytes(Path(src).read_bytes()[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module.shutil, "copyfile", half_copy)
    with pytest.raises(TierIOError, match="moving 'shuffle-9/4' from SSD to HDD failed"):
        store.append(handle, b"second")  # SSD full, then HDD full halfway through the move
    assert handle.tier is Tier.SSD and files_under(store.roots[Tier.HDD]) == []
    monkeypatch.undo()
    assert bytes(store.read(handle)) == b"first-"  # what was stored is intact
    store.delete(handle)
    assert files_under(store.roots[Tier.SSD]) == files_under(store.roots[Tier.HDD]) == []


def test_both_tiers_failing_raises_an_oserror(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, frames: list) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "_write_frames", full)
    handle = store.create("k", request(), tier=Tier.SSD)
    with pytest.raises(TierIOError) as info:
        store.write(handle, b"data")
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert not handle.path.exists() and not handle.partial_path.exists()


def tear_writes(
    monkeypatch: pytest.MonkeyPatch, store: TieredFileStore, errnos: dict[Tier, int]
) -> None:
    """Writes landing on a tier of ``errnos`` write half their first frame, then fail with
    that tier's errno; writes on other tiers go through."""
    real = store_module._write_frames

    def write(fd: int, frames: list) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        for tier, code in errnos.items():
            if path.startswith(str(store.roots[tier])):
                first = bytes(frames[0])
                os.write(fd, first[: max(1, len(first) // 2)])
                raise OSError(code, os.strerror(code))
        real(fd, frames)

    monkeypatch.setattr(store_module, "_write_frames", write)


def test_a_quota_exceeded_on_ssd_sends_the_file_to_hdd(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tear_writes(monkeypatch, store, {Tier.SSD: errno.EDQUOT})
    handle = store.create("k", request(), tier=Tier.SSD)
    assert store.write(handle, b"data") == 4
    assert handle.tier is Tier.HDD and handle.fell_back and store.fallbacks == 1
    assert bytes(store.read(handle)) == b"data"
    assert files_under(store.roots[Tier.SSD]) == []


def test_a_full_hdd_fails_a_rewrite_and_keeps_the_bytes_already_stored(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a full SSD sends a file to the other tier: a full HDD fails the write."""
    handle = store.create("k", request(), tier=Tier.HDD)
    store.write(handle, b"old bytes")
    tear_writes(monkeypatch, store, {Tier.HDD: errno.ENOSPC})
    with pytest.raises(TierIOError, match="writing") as info:
        store.write(handle, b"new bytes")
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert handle.tier is Tier.HDD and not handle.fell_back and store.fallbacks == 0
    assert bytes(store.read(handle)) == b"old bytes"


def test_a_rewrite_failing_on_both_tiers_keeps_the_bytes_already_stored(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create("k", request(), tier=Tier.SSD)
    store.write(handle, b"old bytes")
    tear_writes(monkeypatch, store, {Tier.SSD: errno.ENOSPC, Tier.HDD: errno.EIO})
    with pytest.raises(TierIOError) as info:
        store.write(handle, b"new bytes")
    monkeypatch.undo()
    assert info.value.errno == errno.EIO and handle.tier is Tier.HDD
    assert bytes(store.read(handle)) == b"old bytes"


def test_a_failed_append_leaves_the_file_as_it_was(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create("shuffle-5/0", request(FileKind.SHUFFLE), tier=Tier.HDD)
    store.append(handle, b"first-")
    tear_writes(monkeypatch, store, {Tier.HDD: errno.EIO})
    with pytest.raises(TierIOError) as info:
        store.append(handle, b"second-")
    monkeypatch.undo()
    assert info.value.errno == errno.EIO and store.fallbacks == 0
    store.append(handle, b"third")
    assert bytes(store.read(handle)) == b"first-third"
    row = store.delete(handle)
    assert row["write_ops"] == 2 and row["write_bytes"] == row["size_bytes"] == 6 + 5


def test_an_append_failing_on_both_tiers_leaves_the_moved_bytes_whole(
    store: TieredFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create("shuffle-5/1", request(FileKind.SHUFFLE), tier=Tier.SSD)
    store.append(handle, b"first-")
    tear_writes(monkeypatch, store, {Tier.SSD: errno.ENOSPC, Tier.HDD: errno.EIO})
    with pytest.raises(TierIOError) as info:
        store.append(handle, b"second-")
    monkeypatch.undo()
    assert info.value.errno == errno.EIO
    assert handle.tier is Tier.HDD, "its bytes moved to HDD before the HDD failed too"
    store.append(handle, b"third")
    assert bytes(store.read(handle)) == b"first-third"


# ---------------------------------------------------------------------- crashes and orphans
CRASHING_WRITER = textwrap.dedent(
    """
    import os, sys, time
    import placement.storage.store as store_module
    from placement.storage import TieredFileStore, FileRequest
    from placement.tier import Tier

    def slow_write(fd, frames):  # writes the first frame, then stalls until killed
        os.write(fd, frames[0])
        print("writing", flush=True)
        time.sleep(60)

    store_module._write_frames = slow_write
    store = TieredFileStore(ssd_dir=sys.argv[1], hdd_dir=sys.argv[2])
    handle = store.create(
        "big", FileRequest(file_kind="spill", created_at=time.time()), tier=Tier.SSD
    )
    print(handle.path, flush=True)
    store.write(handle, [b"x" * 65536, b"y" * 65536])
    """
)


def test_process_killed_mid_write_leaves_no_readable_file_and_orphans_are_removed(
    tmp_path: Path,
) -> None:
    ssd, hdd = tmp_path / "ssd", tmp_path / "hdd"
    with TieredFileStore(ssd_dir=ssd, hdd_dir=hdd) as survivor:
        kept = survivor.create("kept", request())
        survivor.write(kept, b"still here")
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHING_WRITER, str(ssd), str(hdd)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            final = Path(proc.stdout.readline().strip())
            assert proc.stdout.readline().strip() == "writing"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        partial = final.with_name(final.name + ".partial")
        assert partial.stat().st_size == 65536, "the killed write was really under way"
        assert not final.exists(), "a killed writer must never leave a file under its final name"
        dead_dir = final.parent

        with TieredFileStore(ssd_dir=ssd, hdd_dir=hdd) as restarted:
            assert restarted.orphans_removed == 1
            assert not dead_dir.exists()
            assert not Path(str(dead_dir) + ".lock").exists()
            assert bytes(survivor.read(kept)) == b"still here", (
                "a live store's files must be left alone"
            )


def test_cleanup_removes_files_of_dead_stores(tmp_path: Path) -> None:
    ssd, hdd = tmp_path / "ssd", tmp_path / "hdd"
    script = textwrap.dedent(
        """
        import os, sys, time
        from placement.storage import TieredFileStore, FileRequest
        s = TieredFileStore(ssd_dir=sys.argv[1], hdd_dir=sys.argv[2])
        for i in range(3):
            h = s.create(f"f{i}", FileRequest(file_kind="spill", created_at=time.time()))
            s.write(h, b"payload")
        os._exit(0)  # exits without closing the store, as a crash would
        """
    )
    subprocess.run([sys.executable, "-c", script, str(ssd), str(hdd)], check=True, timeout=60)
    assert len(files_under(hdd)) == 3
    with TieredFileStore(ssd_dir=ssd, hdd_dir=hdd) as s:
        assert s.orphans_removed == 3
        assert files_under(hdd) == []


KILLED_STORE = textwrap.dedent(
    """
    import os, signal, sys, time
    from placement.logwriter import LogWriter
    from placement.storage import TieredFileStore, FileRequest
    from placement.tier import Tier

    writer = LogWriter(sys.argv[3], max_interval_s=3600)
    s = TieredFileStore(ssd_dir=sys.argv[1], hdd_dir=sys.argv[2], sink=writer)
    new = lambda: FileRequest(file_kind="spill", created_at=time.time())
    done = s.create("done", new(), tier=Tier.SSD)
    s.write(done, b"logged")
    s.delete(done)
    writer.flush()  # the row of a deleted file is in the log
    s.write(s.create("whole", new(), tier=Tier.SSD), b"x" * 1000)
    s.append(s.create("part/a", new(), tier=Tier.HDD), b"y" * 300)  # still a .partial
    sealed = s.create("sealed", new(), tier=Tier.HDD)
    s.append(sealed, b"z" * 20)
    s.seal(sealed)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_files_of_a_store_killed_by_sigkill_are_counted_and_recorded_beside_the_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGKILL leaves a store's live files without a row: the next store removes them,
    counts them, warns, and records the count (per dead store and tier) in the log
    directory, where readers of the logs find it."""
    from placement.logwriter import LogWriter, log_files, read_logs

    ssd, hdd, logs = tmp_path / "ssd", tmp_path / "hdd", tmp_path / "logs"
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_STORE, str(ssd), str(hdd), str(logs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    (dead,) = [p.name for p in hdd.iterdir() if p.is_dir()]
    with (
        caplog.at_level(logging.WARNING, logger="placement.storage.store"),
        LogWriter(logs) as writer,
        TieredFileStore(ssd_dir=ssd, hdd_dir=hdd, sink=writer) as store,
    ):
        assert store.orphans_unlogged == 3
        assert files_under(ssd) == files_under(hdd) == []
    assert f"3 temporary file(s) (1320 bytes) of 1 dead store(s) ({dead})" in caplog.text
    found = read_logs(logs)
    assert found.table.num_rows == 1, "the row flushed before the kill"
    assert found.unlogged_files == 3 and found.bad_files == []
    (record,) = found.unlogged
    assert record["files"] == 3 and record["bytes"] == 1320 and record["recorded_by"] == store.label
    per_tier = {
        (d["store"], d["tier"]): (d["files"], d["bytes"], d["names"]) for d in record["stores"]
    }
    assert per_tier == {
        (dead, "ssd"): (1, 1000, ["whole"]),
        (dead, "hdd"): (2, 320, ["part/a", "sealed"]),
    }
    assert len(log_files(logs)) == 1, "the record is no log file"
    with TieredFileStore(ssd_dir=ssd, hdd_dir=hdd, sink=writer) as again:
        assert again.orphans_unlogged == 0, "nothing is counted twice"


def test_stores_started_together_on_shared_directories_all_start(tmp_path: Path) -> None:
    """Workers start at once on shared tier directories: a cleaner racing a store that is
    taking its lock must never make that store fail to start."""
    script = textwrap.dedent(
        """
        import sys
        from placement.storage import TieredFileStore
        for _ in range(int(sys.argv[3])):
            TieredFileStore(ssd_dir=sys.argv[1], hdd_dir=sys.argv[2]).close()
        """
    )
    args = [sys.executable, "-c", script, str(tmp_path / "ssd"), str(tmp_path / "hdd"), "150"]
    procs = [subprocess.Popen(args, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    assert list((tmp_path / "ssd").iterdir()) == [] and list((tmp_path / "hdd").iterdir()) == []


def make_dead_store(directory: Path, name: str, n_files: int) -> Path:
    """The directory and unlocked lock file a killed store leaves behind."""
    store_dir = directory / name
    store_dir.mkdir(parents=True)
    for i in range(n_files):
        (store_dir / f"f{i}").write_bytes(b"orphan")
    (directory / f"{name}.lock").touch()
    return store_dir


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create another user's files")
def test_cleanup_leaves_other_users_stores_alone(tmp_path: Path) -> None:
    other_uid = 4321
    theirs = make_dead_store(tmp_path / "hdd", "store-otherhost-1-0000aaaa", 1)
    for path in (theirs, theirs / "f0", tmp_path / "hdd" / f"{theirs.name}.lock"):
        os.chown(path, other_uid, other_uid)
    ours = make_dead_store(tmp_path / "hdd", "store-thishost-2-0000bbbb", 2)
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as s:
        assert s.orphans_removed == 2 and not ours.exists()
        assert (theirs / "f0").exists() and (tmp_path / "hdd" / f"{theirs.name}.lock").exists()


def test_cleanup_leaves_stores_whose_lock_cannot_be_opened_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = make_dead_store(tmp_path / "hdd", "store-otherhost-1-0000aaaa", 1)
    refused = str(tmp_path / "hdd" / f"{theirs.name}.lock")
    real_open = os.open

    def open_(path: str | os.PathLike[str], flags: int, *args: Any, **kw: Any) -> int:
        if os.fspath(path) == refused:
            raise PermissionError(errno.EACCES, "Permission denied", refused)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(store_module.os, "open", open_)
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as s:
        assert s.orphans_removed == 0
        assert (theirs / "f0").exists()


def test_cleanup_counts_only_the_files_it_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = make_dead_store(tmp_path / "hdd", "store-deadhost-1-0000cccc", 3)

    def rmtree_failing_midway(path: Path, ignore_errors: bool = False) -> None:
        # removes one file, then one cannot be removed: rmtree gives up
        (Path(path) / "f0").unlink(missing_ok=True)

    monkeypatch.setattr(store_module.shutil, "rmtree", rmtree_failing_midway)
    store = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd")
    assert store.orphans_removed == 1
    assert sorted(p.name for p in dead.iterdir()) == ["f1", "f2"]
    monkeypatch.undo()
    store.close()


class RecordingSink(ListSink):
    def __init__(self) -> None:
        super().__init__()
        self.unlogged: list[dict] = []

    def record_unlogged(self, record: dict) -> None:
        self.unlogged.append(record)


def test_cleanup_records_every_lost_file_but_names_only_a_sample(tmp_path: Path) -> None:
    """A dead store that held no file records nothing; one that held more files than the
    sample has them all counted and the sample's worth named."""
    sample = store_module.UNLOGGED_SAMPLE
    make_dead_store(tmp_path / "ssd", "store-deadhost-1-0000aaaa", 0)
    many = make_dead_store(tmp_path / "hdd", "store-deadhost-2-0000bbbb", sample + 1)
    sink = RecordingSink()
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=sink) as s:
        assert s.orphans_removed == s.orphans_unlogged == sample + 1
    (record,) = sink.unlogged
    assert record["files"] == sample + 1
    (dead,) = record["stores"]
    assert (dead["store"], dead["tier"], dead["files"]) == (many.name, "hdd", sample + 1)
    assert len(dead["names"]) == sample


def test_cleanup_removes_what_a_store_killed_while_taking_its_lock_left(tmp_path: Path) -> None:
    hdd = tmp_path / "hdd"
    unlocked = make_dead_store(hdd, "store-deadhost-3-0000cccc", 2)
    (hdd / f"{unlocked.name}.lock").unlink()  # killed before its lock file was in place
    stray = hdd / ".store-deadhost-4-0000dddd.lock.tmp"  # killed before locking it
    stray.touch()
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=hdd) as s:
        assert s.orphans_removed == 2
        assert not unlocked.exists() and not stray.exists()


def test_a_store_made_without_cleanup_leaves_dead_stores_alone(tmp_path: Path) -> None:
    dead = make_dead_store(tmp_path / "hdd", "store-deadhost-5-0000eeee", 1)
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", cleanup=False) as s:
        assert s.orphans_removed == 0 and (dead / "f0").exists()
        assert s.cleanup_orphans() == 1 and not dead.exists()


def test_rows_and_records_of_lost_files_are_stamped_by_the_store_clock(tmp_path: Path) -> None:
    make_dead_store(tmp_path / "hdd", "store-deadhost-6-0000ffff", 1)
    sink = RecordingSink()
    with TieredFileStore(
        ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=sink, clock=lambda: 1234.5
    ) as s:
        row = s.delete(s.create("k", request()))
    assert row["deleted_at"] == 1234.5 and sink.rows == [row]
    assert [r["recorded_at"] for r in sink.unlogged] == [1234.5]


def test_lost_files_are_counted_even_when_the_sink_refuses_their_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Refusing(ListSink):
        def record_unlogged(self, record: dict) -> None:
            raise OSError("log disk gone")

    make_dead_store(tmp_path / "hdd", "store-deadhost-7-00001111", 2)
    with caplog.at_level(logging.WARNING, logger="placement.storage.store"):
        store = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=Refusing())
    with store:
        assert store.orphans_unlogged == 2
        make_dead_store(tmp_path / "ssd", "store-deadhost-8-00002222", 1)
        assert store.cleanup_orphans() == 1 and store.orphans_unlogged == 2 + 1
    assert "log disk gone" in caplog.text


# ---------------------------------------------------------------------- configured directories
def test_storage_dirs_are_checked_and_errors_name_the_key(tmp_path: Path) -> None:
    from placement.storage.config import check_storage_dirs

    (tmp_path / "afile").write_text("not a directory")
    cases = [
        (
            (tmp_path / "same", tmp_path / "same", None),
            r"placement.ssd-dir and placement.hdd-dir are the same directory .*"
            r"DASK_PLACEMENT__SSD_DIR=",
        ),
        (
            (tmp_path / "afile" / "ssd", tmp_path / "hdd", None),
            r"placement.ssd-dir=.*afile/ssd: cannot create the directory \(Not a directory\); "
            r"set placement.ssd-dir \(DASK_PLACEMENT__SSD_DIR\)",
        ),
        (
            (tmp_path / "ssd", tmp_path / "hdd", tmp_path / "afile" / "logs"),
            r"placement.log-dir=.*: cannot create the directory .*DASK_PLACEMENT__LOG_DIR",
        ),
    ]
    for (ssd, hdd, logs), match in cases:
        with pytest.raises(StorageConfigError, match=match):
            check_storage_dirs(str(ssd), str(hdd), None if logs is None else str(logs))
    with unwritable_dir(tmp_path / "ro") as ro:
        with pytest.raises(StorageConfigError, match=r"placement.hdd-dir=.*/ro is not writable"):
            check_storage_dirs(str(tmp_path / "ssd"), str(ro))
        assert list(ro.iterdir()) == []
    check_storage_dirs(str(tmp_path / "ssd"), str(tmp_path / "hdd"), str(tmp_path / "logs"))
    assert (tmp_path / "logs").is_dir() and list((tmp_path / "logs").iterdir()) == []


def test_a_spill_buffer_refused_for_an_unwritable_tier_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    """An SSD directory that works and an HDD directory that does not: the refusal names
    the HDD key and leaves no store directory or lock on the SSD directory."""
    from placement.storage import StorageConfigError, tiered_spill_buffer

    with unwritable_dir(tmp_path / "ro") as ro:
        with pytest.raises(StorageConfigError, match="placement.hdd-dir="):
            tiered_spill_buffer(str(tmp_path / "local"), ssd_dir=tmp_path / "ssd", hdd_dir=ro)
    assert not (tmp_path / "ssd").exists() or list((tmp_path / "ssd").iterdir()) == []


class _BareWorker:
    """What the storage helpers read of a worker that runs no placement storage."""

    address = "tcp://w:1"
    plugins: dict[str, Any] = {}
    data: dict[str, Any] = {}

    def __init__(self, local_directory: Path) -> None:
        self.local_directory = str(local_directory)


def test_storage_helpers_name_both_ways_to_start_placement_storage(tmp_path: Path) -> None:
    from placement.storage import flush_worker_logs

    with pytest.raises(
        StorageError,
        match=r"tcp://w:1 has no placement storage.*--preload placement.dask.*"
        r"PlacementWorkerPlugin on the client",
    ):
        flush_worker_logs(_BareWorker(tmp_path))


def test_storage_attached_from_the_client_checks_its_directories_first(tmp_path: Path) -> None:
    from placement.storage import StorageConfigError
    from placement.storage.worker import StorageOptions, WorkerStorage

    same = tmp_path / "tier"
    options = StorageOptions(ssd_dir=str(same), hdd_dir=str(same) + "/")
    with pytest.raises(StorageConfigError, match="placement.ssd-dir and placement.hdd-dir"):
        WorkerStorage.attach(_BareWorker(tmp_path), options)
    with unwritable_dir(tmp_path / "ro") as ro:
        options = StorageOptions(ssd_dir=str(tmp_path / "ssd"), hdd_dir=str(ro))
        with pytest.raises(StorageConfigError, match=r"placement.hdd-dir=.* is not writable"):
            WorkerStorage.attach(_BareWorker(tmp_path), options)
    assert not (tmp_path / "ssd").exists() or not any((tmp_path / "ssd").iterdir())


def test_bad_storage_arguments_raise_storage_errors(tmp_path: Path) -> None:
    from placement.errors import PlacementError, PlacementTypeError
    from placement.storage import StorageConfigError

    with pytest.raises(StorageError, match="created_at") as info:
        FileRequest(file_kind=FileKind.SPILL, created_at=float("nan"))
    assert isinstance(info.value, StorageConfigError) and isinstance(info.value, ValueError)
    assert isinstance(info.value, PlacementError)
    with pytest.raises(StorageError, match="ssd_dir and hdd_dir are the same directory"):
        TieredFileStore(ssd_dir=tmp_path, hdd_dir=tmp_path)
    with pytest.raises(StorageError, match="tier='tape' is not one of"):
        FixedTier("tape")  # type: ignore[arg-type]
    with pytest.raises(PlacementTypeError, match="has no choose"):
        TieredFileStore(ssd_dir=tmp_path / "s", hdd_dir=tmp_path / "h", chooser=object())  # type: ignore[arg-type]
