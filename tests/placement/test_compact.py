"""Tests of log compaction: real files of a real LogWriter, faults injected."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import placement.compact as compact_module
import placement.logwriter as logwriter_module
from logs_analysis.readers import read_table
from placement.cli import placement_group
from placement.compact import CompactError, compact
from placement.compacted import COMPACTED_SUFFIX, compacted_parts
from placement.logwriter import LogWriter, log_files, read_logs
from placement.model_cli import _read as train_read
from placement.schema import SCHEMA, SCHEMA_VERSION, SCHEMA_VERSION_KEY
from tests.placement.test_logwriter import row


def _write(directory: Path, files: int, rows: int, *, prefix: str = "w", start: int = 0) -> int:
    """``files`` flushes of ``rows`` rows by one real writer; returns the next row number."""
    writer = LogWriter(directory, prefix=prefix, max_rows=10**6, max_interval_s=3600)
    i = start
    for _ in range(files):
        for _ in range(rows):
            writer.add(row(i, run_id=f"r{i % 3}"))
            i += 1
        writer.flush()
    writer.close()
    return i


def _ids(table: pa.Table) -> list[str]:
    return sorted(table["file_id"].to_pylist())


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("file_id", "ascending")]).replace_schema_metadata(None)


def test_compaction_keeps_every_row_and_the_schema(tmp_path: Path) -> None:
    _write(tmp_path, 40, 5)
    before = read_logs(tmp_path).table
    result = compact(tmp_path, target_rows=60)
    after = read_logs(tmp_path)
    assert _sorted(after.table).equals(_sorted(before))
    assert after.bad_files == []
    files = log_files(tmp_path)
    assert result.files_before == 40 and result.files_after == len(files) == 4
    assert result.rows == 200 and sum(len(m.sources) for m in result.merges) == 40
    assert all(f.name.endswith(COMPACTED_SUFFIX) for f in files)
    for f in files:
        schema = pq.read_schema(f)
        assert schema.equals(SCHEMA, check_metadata=False)
        assert schema.metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode()
    # rows keep the order of the files' names
    first = pq.read_table(files[0])["file_id"].to_pylist()
    assert first == [f"f{i}" for i in range(60)]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    # merged files below the target are merged again, and list what they hold
    again = compact(tmp_path, target_rows=1000)
    assert again.files_after == 1
    (merged,) = log_files(tmp_path)
    parts = compacted_parts(merged)
    assert len(parts) == 4 + 40  # the four merged files and the flushes they held
    assert _sorted(read_logs(tmp_path).table).equals(_sorted(before))


def _fail_removes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash right after the rename: no merged part can be deleted."""

    def refuse(path: Any, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EACCES, "injected", str(path))

    monkeypatch.setattr(compact_module.os, "remove", refuse)


def test_a_crash_between_rename_and_deletes_counts_no_row_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, 12, 4)
    before = read_logs(tmp_path).table
    with monkeypatch.context() as m:
        _fail_removes(m)
        with pytest.raises(CompactError, match="readers skip it"):
            compact(tmp_path, target_rows=1000)
    names = os.listdir(tmp_path)
    assert sum(n.endswith(COMPACTED_SUFFIX) for n in names) == 1
    assert sum(n.endswith(".parquet") for n in names) == 13  # the merged file and its parts
    # the scheduler's history read
    logs = read_logs(tmp_path)
    assert _ids(logs.table) == _ids(before) and logs.bad_files == []
    # the train / evaluate / simulate reader
    df, report, _ = train_read([str(tmp_path)], progress=False)
    assert sorted(df["file_id"]) == _ids(before) and report["rows_repeated"] == 0
    # dataplane report's reader: no row twice, and no duplicate counted as an issue
    table, issues = read_table([tmp_path])
    assert _ids(table) == _ids(before) and not issues
    # a second run deletes the leftovers
    result = compact(tmp_path)
    assert len(result.leftovers_removed) == 12 and result.merges == []
    assert len(log_files(tmp_path)) == 1 and len(os.listdir(tmp_path)) == 2  # and the lock
    assert _ids(read_logs(tmp_path).table) == _ids(before)


def test_a_full_disk_during_the_merge_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, 10, 3)
    names = sorted(os.listdir(tmp_path))
    before = read_logs(tmp_path).table
    real_write = pq.write_table

    def disk_full(table: pa.Table, where: Any, **kwargs: Any) -> None:
        real_write(table.slice(0, 1), where)  # part of it was written
        raise OSError(errno.ENOSPC, "No space left on device", str(where))

    with monkeypatch.context() as m:
        m.setattr(pq, "write_table", disk_full)
        with pytest.raises(CompactError, match="disk .* is full.*nothing was lost"):
            compact(tmp_path, target_rows=1000)
    assert sorted(n for n in os.listdir(tmp_path) if n != compact_module.LOCK_NAME) == names
    assert _sorted(read_logs(tmp_path).table).equals(_sorted(before))


def test_files_of_another_schema_or_unreadable_are_left_alone(tmp_path: Path) -> None:
    _write(tmp_path, 4, 2)
    one = pq.read_table(log_files(tmp_path)[0])
    old = one.replace_schema_metadata({SCHEMA_VERSION_KEY: b"1"})
    pq.write_table(old, tmp_path / "w-old.parquet")
    newer = one.replace_schema_metadata({SCHEMA_VERSION_KEY: str(SCHEMA_VERSION + 1).encode()})
    pq.write_table(newer, tmp_path / "w-newer.parquet")
    (tmp_path / "w-broken.parquet").write_bytes(b"not parquet")
    result = compact(tmp_path, target_rows=1000)
    skipped = {p.name: why for p, why in result.skipped}
    assert set(skipped) == {"w-old.parquet", "w-newer.parquet", "w-broken.parquet"}
    assert "version 1" in skipped["w-old.parquet"] and "unreadable" in skipped["w-broken.parquet"]
    for name in skipped:
        assert (tmp_path / name).exists()
    assert sum(len(m.sources) for m in result.merges) == 4
    assert "left alone" in result.text()


def test_flushes_during_compaction_are_neither_lost_nor_doubled(tmp_path: Path) -> None:
    next_row = _write(tmp_path, 200, 2)
    stop = threading.Event()
    written: list[int] = []

    def keep_writing() -> None:
        writer = LogWriter(tmp_path, prefix="live", max_rows=10**6, max_interval_s=3600)
        i = 100_000
        while not stop.is_set():
            writer.add(row(i))
            i += 1
            if i % 3 == 0:
                writer.flush()
            time.sleep(0.0005)
        writer.close()
        written.append(i - 100_000)

    thread = threading.Thread(target=keep_writing)
    thread.start()
    try:
        for _ in range(3):
            compact(tmp_path, target_rows=150)
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join()
    compact(tmp_path, target_rows=150)
    ids = read_logs(tmp_path).table["file_id"].to_pylist()
    assert len(ids) == len(set(ids)) == next_row + written[0]
    assert set(ids) == {f"f{i}" for i in range(next_row)} | {
        f"f{i}" for i in range(100_000, 100_000 + written[0])
    }


def test_a_file_merged_after_listing_is_read_from_the_merged_file(tmp_path: Path) -> None:
    _write(tmp_path, 8, 3)
    before = read_logs(tmp_path).table
    listed = log_files(tmp_path)
    compact(tmp_path, target_rows=1000)
    assert not any(f.exists() for f in listed)
    # a reader that listed before the compaction reads each listed file after it
    logs = read_logs(listed)
    assert _ids(logs.table) == _ids(before) and logs.bad_files == []
    one = [read_logs([f]).table.num_rows for f in listed]
    assert one == [3] * 8


def test_a_listing_torn_by_a_compaction_reads_every_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing made while a merged file was renamed in and its parts deleted saw neither
    (a directory read in several calls): the merged file is listed again, not lost."""
    _write(tmp_path, 4, 2)
    before = read_logs(tmp_path).table
    names = set(os.listdir(tmp_path))
    compact(tmp_path, target_rows=6)
    now = set(os.listdir(tmp_path))
    (merged,) = [n for n in now if n.endswith(COMPACTED_SUFFIX)]
    assert len(names - now) == 3  # its parts are gone
    real_walk = os.walk

    def torn_walk(top: Any, *args: Any, **kwargs: Any) -> Any:
        for root, dirs, files in real_walk(top, *args, **kwargs):
            if Path(root) == tmp_path:
                files = [n for n in files if n in names]  # what was there before and after
            yield root, dirs, files

    monkeypatch.setattr(logwriter_module.os, "walk", torn_walk)
    assert [f.name for f in log_files(tmp_path)] == [merged, "w-000004.parquet"]
    logs = read_logs(tmp_path)
    assert _ids(logs.table) == _ids(before) and len(_ids(logs.table)) == 8
    assert logs.bad_files == []


def test_unlogged_records_are_kept(tmp_path: Path) -> None:
    _write(tmp_path, 3, 2)
    writer = LogWriter(tmp_path, prefix="w2")
    writer.record_unlogged({"files": 3, "bytes": 10})
    compact(tmp_path, target_rows=1000)
    assert read_logs(tmp_path).unlogged_files == 3


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(placement_group, ["compact", *args])


def test_cli_dry_run_changes_nothing_and_json_says_what_it_would_do(tmp_path: Path) -> None:
    _write(tmp_path, 6, 2)
    names = sorted(os.listdir(tmp_path))
    result = _invoke(str(tmp_path), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["dry_run"] is True and payload["files_before"] == 6
    assert payload["files_after"] == 1 and payload["rows"] == 12
    assert sorted(os.listdir(tmp_path)) == names
    text = _invoke(str(tmp_path), "--dry-run")
    assert text.exit_code == 0 and "would merge 6 files" in text.output
    done = _invoke(str(tmp_path), "--no-progress")
    assert done.exit_code == 0 and "6 log files before, 1 after" in done.output
    assert len(log_files(tmp_path)) == 1


def test_cli_errors_name_the_directory_and_the_fix(tmp_path: Path) -> None:
    missing = _invoke(str(tmp_path / "nope"))
    assert missing.exit_code == 1 and "does not exist; check the path" in missing.output
    (tmp_path / "f").write_text("x")
    not_dir = _invoke(str(tmp_path / "f"))
    assert not_dir.exit_code == 1 and "not a directory" in not_dir.output
    bad = _invoke(str(tmp_path), "--target-rows", "1")
    assert bad.exit_code == 2 and "target_rows" in bad.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to any directory")
def test_cli_refuses_an_unwritable_directory(tmp_path: Path) -> None:
    _write(tmp_path, 2, 1)
    tmp_path.chmod(0o500)
    try:
        result = _invoke(str(tmp_path))
    finally:
        tmp_path.chmod(0o700)
    assert result.exit_code == 1 and "not writable" in result.output
    assert len(log_files(tmp_path)) == 2


def test_a_second_compaction_at_once_is_refused(tmp_path: Path) -> None:
    import fcntl

    _write(tmp_path, 2, 1)
    fd = os.open(tmp_path / compact_module.LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(CompactError, match="another compaction"):
            compact(tmp_path)
    finally:
        os.close(fd)
    assert compact(tmp_path).files_after == 1


def _interrupted(directory: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A compaction of every file of ``directory`` stopped after its rename: the merged file
    and all of its parts are there. Returns the merged file's name."""
    with monkeypatch.context() as m:
        _fail_removes(m)
        with pytest.raises(CompactError, match="readers skip it"):
            compact(directory, target_rows=1000)
    (merged,) = [n for n in os.listdir(directory) if n.endswith(COMPACTED_SUFFIX)]
    return merged


def _listing(directory: Path) -> dict[str, int]:
    return {n: (directory / n).stat().st_size for n in os.listdir(directory)}


def test_a_file_of_a_merged_name_but_another_size_is_not_a_leftover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part of an interrupted compaction written again since (same name, other content) is
    not the part the merged file holds: the next compaction keeps it."""
    _write(tmp_path, 4, 2)
    merged = _interrupted(tmp_path, monkeypatch)
    rewritten = tmp_path / "w-000001.parquet"
    size_before = rewritten.stat().st_size
    one = pq.read_table(rewritten).slice(0, 1)
    pq.write_table(one.set_column(0, "file_id", pa.array(["f100"])), rewritten)
    assert rewritten.stat().st_size != size_before
    result = compact(tmp_path, target_rows=8)  # the merged file is full: nothing to merge
    assert sorted(p.name for p in result.leftovers_removed) == [
        "w-000002.parquet",
        "w-000003.parquet",
        "w-000004.parquet",
    ]
    assert rewritten.exists()
    assert sorted(os.listdir(tmp_path)) == sorted(
        [compact_module.LOCK_NAME, merged, "w-000001.parquet"]
    )
    ids = read_logs(tmp_path).table["file_id"].to_pylist()
    assert sorted(ids) == sorted([f"f{i}" for i in range(8)] + ["f100"])


def test_a_merge_is_durable_before_its_parts_are_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power loss at any point of a merge loses no row: the merged file's content is
    synced under its temporary name, then renamed, then the rename synced, and only then
    are its parts deleted (and the deletes synced)."""
    _write(tmp_path, 3, 2)
    events: list[tuple[str, ...]] = []
    real_fsync, real_replace, real_remove = os.fsync, os.replace, os.remove

    def observed_fsync(fd: int) -> None:
        st = os.fstat(fd)
        what = "directory" if stat.S_ISDIR(st.st_mode) else "file"
        events.append(("fsync", what, str(st.st_ino)))
        real_fsync(fd)

    def observed_replace(src: Any, dst: Any) -> None:
        events.append(("rename", Path(src).name, Path(dst).name))
        real_replace(src, dst)

    def observed_remove(path: Any, *args: Any, **kwargs: Any) -> None:
        events.append(("remove", Path(path).name))
        real_remove(path, *args, **kwargs)

    monkeypatch.setattr(compact_module.os, "fsync", observed_fsync)
    monkeypatch.setattr(compact_module.os, "replace", observed_replace)
    monkeypatch.setattr(compact_module.os, "remove", observed_remove)
    result = compact(tmp_path, target_rows=1000)
    monkeypatch.undo()
    (merge,) = result.merges
    merged = merge.path.name
    file_ino, dir_ino = str(merge.path.stat().st_ino), str(tmp_path.stat().st_ino)
    assert events == [
        ("fsync", "file", file_ino),  # the content, under the temporary name
        ("rename", f".{merged}.tmp", merged),
        ("fsync", "directory", dir_ino),  # the new name, before any part goes
        ("remove", "w-000001.parquet"),
        ("remove", "w-000002.parquet"),
        ("remove", "w-000003.parquet"),
        ("fsync", "directory", dir_ino),  # the deletes
    ], events


def test_a_dry_run_with_leftovers_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, 4, 2)
    _interrupted(tmp_path, monkeypatch)
    before = _listing(tmp_path)
    result = compact(tmp_path, target_rows=1000, dry_run=True)
    assert sorted(p.name for p in result.leftovers_removed) == [
        f"w-00000{i}.parquet" for i in range(1, 5)
    ]
    assert "would remove 4 file(s)" in result.text()
    assert _listing(tmp_path) == before


def test_a_merged_file_short_of_rows_is_not_kept_and_its_parts_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, 3, 2)
    before = _listing(tmp_path)
    real_write = compact_module._write_table

    def short_write(table: pa.Table, path: Path) -> None:
        real_write(table.slice(0, 5), path)  # a row lost on the way

    monkeypatch.setattr(compact_module, "_write_table", short_write)
    with pytest.raises(CompactError, match="holds 5 rows, not the 6 of its parts"):
        compact(tmp_path, target_rows=1000)
    after = _listing(tmp_path)
    assert after.pop(compact_module.LOCK_NAME) == 0
    assert after == before


def test_a_damaged_merged_file_is_reported_and_the_others_read(tmp_path: Path) -> None:
    _write(tmp_path, 2, 3)
    (tmp_path / "x.abcd1234.compacted.parquet").write_bytes(b"not parquet at all")
    logs = read_logs(tmp_path)
    assert _ids(logs.table) == sorted(f"f{i}" for i in range(6))
    assert [p.name for p, _ in logs.bad_files] == ["x.abcd1234.compacted.parquet"]


def test_a_file_of_this_version_with_other_columns_is_left_alone(tmp_path: Path) -> None:
    _write(tmp_path, 3, 2)
    one = pq.read_table(log_files(tmp_path)[0])
    wider = one.append_column("extra", pa.array([1, 2]))
    assert wider.schema.metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode()
    pq.write_table(wider, tmp_path / "w-wider.parquet")
    result = compact(tmp_path, target_rows=1000)
    assert [p.name for p, _ in result.skipped] == ["w-wider.parquet"]
    assert "columns" in result.skipped[0][1]
    (merge,) = result.merges
    assert [p.name for p in merge.sources] == [f"w-00000{i}.parquet" for i in range(1, 4)]
    assert (tmp_path / "w-wider.parquet").exists()


def test_a_merged_file_holds_consecutive_files_only(tmp_path: Path) -> None:
    """A file left alone (full already, or of another schema) ends a run: no merged file
    spans it, so the directory's rows keep their files' name order."""
    nxt = _write(tmp_path, 2, 2, prefix="a")
    nxt = _write(tmp_path, 1, 10, prefix="b", start=nxt)  # full at target_rows=10
    _write(tmp_path, 2, 2, prefix="c", start=nxt)
    result = compact(tmp_path, target_rows=10)
    assert [[s.name for s in m.sources] for m in result.merges] == [
        ["a-000001.parquet", "a-000002.parquet"],
        ["c-000001.parquet", "c-000002.parquet"],
    ]
    ids = read_logs(tmp_path).table["file_id"].to_pylist()
    assert ids == [f"f{i}" for i in range(18)], "name order, each row once"
