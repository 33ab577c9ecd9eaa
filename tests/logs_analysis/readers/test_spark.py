"""Spark event logs -> placement rows, on the real logs of ``../shared``."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from logs_analysis.errors import FormatError, InputError
from logs_analysis.formats import Container, LogFormat, discover, sniff
from logs_analysis.readers import read_table
from logs_analysis.readers.compression import LZ4_BLOCK_MAGIC, LZ4_BLOCK_SEED, SNAPPY_JAVA_MAGIC
from logs_analysis.readers.spark import operator_of, read_spark_events
from placement.schema import SCHEMA
from tests.logs_analysis.conftest import SPARK_LOGS


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_spark14_shuffle_map_outputs(spark_dir: Path) -> None:
    path = spark_dir / "local-1430917381534"
    result = read_spark_events(path)
    t = result.table.to_pandas()
    events = _events(path)
    map_tasks = [e for e in events if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] == 0]
    reduce_tasks = [
        e for e in events if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] == 1
    ]
    stage1_done = [
        e
        for e in events
        if e["Event"] == "SparkListenerStageCompleted" and e["Stage Info"]["Stage ID"] == 1
    ]
    assert result.table.schema.equals(SCHEMA, check_metadata=False)
    assert len(t) == len(map_tasks) == 100 and not result.issues
    assert (t["file_kind"] == "shuffle").all() and t["file_id"].is_unique
    written = {
        e["Task Info"]["Task ID"]: e["Task Metrics"]["Shuffle Write Metrics"][
            "Shuffle Bytes Written"
        ]
        for e in map_tasks
    }
    by_id = t.set_index(t["file_id"].str.rsplit("_", n=1).str[-1].astype(int))
    assert by_id["size_bytes"].to_dict() == written
    # Spark 1.4 logs no "Parent IDs": the reduce stage of the same job is found by its fetches
    blocks = sum(
        e["Task Metrics"]["Shuffle Read Metrics"]["Local Blocks Fetched"]
        + e["Task Metrics"]["Shuffle Read Metrics"]["Remote Blocks Fetched"]
        for e in reduce_tasks
    )
    assert t["read_ops"].sum() == pytest.approx(blocks, abs=len(t))
    assert (t["n_partitions_out"] == len(reduce_tasks)).all() and (
        t["n_partitions_in"] == 100
    ).all()
    assert (t["write_ops"] == 10).all()  # one segment per reduce partition
    completed = stage1_done[0]["Stage Info"]["Completion Time"] / 1000
    assert np.allclose(t["deleted_at"], completed)
    launch = {e["Task Info"]["Task ID"]: e["Task Info"]["Launch Time"] / 1000 for e in map_tasks}
    assert np.allclose(by_id["created_at"].sort_index(), [launch[k] for k in sorted(launch)])
    assert set(t["stage"]) == {"map at <console>:26"} and set(t["operator"]) == {"map"}
    assert set(t["run_id"]) == {"local-1430917381534"} and set(t["pipeline"]) == {"Spark shell"}


def test_spark24_parent_ids_and_executors(spark_dir: Path) -> None:
    result = read_spark_events(spark_dir / "application_1506645932520_24630151")
    t = result.table.to_pandas()
    assert len(t) == 8 and set(t["stage"]) == {"cache at <console>:41"}
    # stage 2 ("show", parents [0, 1]) completes at 1524182153104 ms: both map stages live until
    # then
    assert np.allclose(t["deleted_at"], 1524182153.104)
    assert (t["n_partitions_out"] == 1).all() and (t["operator"] == "cache").all()
    assert t["n_workers"].min() >= 4  # four executors were added before the map tasks launched
    events = _events(spark_dir / "application_1506645932520_24630151")
    hosts = {
        e["Task Info"]["Task ID"]: e["Task Info"]["Host"]
        for e in events
        if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in (0, 1)
    }
    assert (
        dict(zip(t["file_id"].str.rsplit("_", n=1).str[-1].astype(int), t["host"], strict=True))
        == hosts
    )
    assert t["read_bytes"].sum() > 0 and (t["read_bytes"] <= t["size_bytes"]).all()


def _task_ends(path: Path) -> dict[int, dict]:
    """The log's task-end events by task id."""
    return {
        e["Task Info"]["Task ID"]: e for e in _events(path) if e["Event"] == "SparkListenerTaskEnd"
    }


def _metric(event: dict, group: str, name: str) -> int:
    return int(event["Task Metrics"].get(group, {}).get(name, 0))


def _shuffle_read(event: dict) -> int:
    """Bytes a task fetched from map outputs: local + remote."""
    return _metric(event, "Shuffle Read Metrics", "Local Bytes Read") + _metric(
        event, "Shuffle Read Metrics", "Remote Bytes Read"
    )


@pytest.mark.parametrize("name", SPARK_LOGS[:2])
def test_map_outputs_carry_the_bytes_their_reduce_tasks_read(spark_dir: Path, name: str) -> None:
    path = spark_dir / name
    t = read_spark_events(path).table.to_pandas()
    ends = _task_ends(path)
    # every shuffle read of these applications fetches the map outputs that are rows here
    fetched = sum(_shuffle_read(e) for e in ends.values())
    written = sum(
        _metric(e, "Shuffle Write Metrics", "Shuffle Bytes Written") for e in ends.values()
    )
    assert fetched > 0 and written == t["size_bytes"].sum()
    assert t["read_bytes"].sum() == pytest.approx(fetched, abs=len(t))  # rounding per row
    # shared among the map outputs in proportion to the bytes each wrote
    share = t["size_bytes"] * fetched / written
    assert np.allclose(t["read_bytes"], share, rtol=0, atol=1)


@pytest.mark.parametrize("name", SPARK_LOGS[:2])
def test_input_bytes_are_the_tasks_own_input_and_shuffle_reads(spark_dir: Path, name: str) -> None:
    path = spark_dir / name
    t = read_spark_events(path).table.to_pandas()
    ends = _task_ends(path)
    task_ids = t["file_id"].str.rsplit("_", n=1).str[-1].astype(int)
    expected = [
        _metric(ends[k], "Input Metrics", "Bytes Read") + _shuffle_read(ends[k]) for k in task_ids
    ]
    assert t["input_bytes"].tolist() == expected
    # the map tasks read their input from storage: the log's "Bytes Read" differ by task
    assert len(set(expected)) > 1 and all(
        "Input Metrics" in ends[k]["Task Metrics"] for k in task_ids
    )


def test_application_without_shuffle_yields_no_rows(spark_dir: Path) -> None:
    result = read_spark_events(spark_dir / "app-20200706201101-0003")
    assert result.table.num_rows == 0 and not result.issues
    with pytest.raises(InputError, match="no usable log rows"):
        read_table([spark_dir / "app-20200706201101-0003"])


def test_directory_detects_logs_and_skips_readme(spark_dir: Path) -> None:
    sources, issues = discover([spark_dir])
    assert {s.path.name for s in sources} == set(SPARK_LOGS)
    assert all(s.format is LogFormat.SPARK and s.container is Container.EVENTLOG for s in sources)
    assert issues.counts == {"unrecognised format (skipped)": 1}
    assert issues.examples[0].source.endswith("README.md")
    table, issues = read_table([spark_dir])
    assert table.num_rows == 108


def test_malformed_lines_counted_with_line_numbers(spark_copy: Path) -> None:
    lines = spark_copy.read_text().splitlines()
    task_ends = [i for i, line in enumerate(lines) if '"SparkListenerTaskEnd"' in line]
    broken = {
        task_ends[3]: lines[task_ends[3]][:57],
        task_ends[10]: "not json at all",
        task_ends[20]: "[1, 2, 3]",
    }
    for i, text in broken.items():
        lines[i] = text
    missing_info = json.loads(lines[task_ends[30]])
    del missing_info["Task Info"]
    lines[task_ends[30]] = json.dumps(missing_info)
    spark_copy.write_text("\n".join(lines) + "\n")
    result = read_spark_events(spark_copy)
    assert result.issues.counts == {
        "invalid JSON": 2,
        "not a Spark listener event": 1,
        "task end without Task Info or Stage ID": 1,
    }
    found = sorted(e.line for e in result.issues.examples)
    assert found == sorted(i + 1 for i in [*broken, task_ends[30]])
    assert all(e.source == str(spark_copy) for e in result.issues.examples)
    assert result.table.num_rows == 100 - 4  # every other map task is still a record


def test_spill_records(spark_copy: Path) -> None:
    lines = spark_copy.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if '"SparkListenerTaskEnd"' in line)
    ev = json.loads(lines[i])
    ev["Task Metrics"]["Disk Bytes Spilled"] = 123_456
    ev["Task Metrics"]["Memory Bytes Spilled"] = 999_999
    lines[i] = json.dumps(ev)
    spark_copy.write_text("\n".join(lines) + "\n")
    t = read_spark_events(spark_copy).table.to_pandas()
    spill = t[t["file_kind"] == "spill"]
    assert len(spill) == 1 and len(t) == 101
    row = spill.iloc[0]
    assert row["size_bytes"] == row["write_bytes"] == row["read_bytes"] == 123_456
    assert row["created_at"] == ev["Task Info"]["Launch Time"] / 1000
    assert row["deleted_at"] == ev["Task Info"]["Finish Time"] / 1000


def test_malformed_task_end_leaves_stage_counts_unchanged(
    spark_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from logs_analysis.readers import spark

    lines = spark_copy.read_text().splitlines()
    i = next(
        i
        for i, line in enumerate(lines)
        if '"SparkListenerTaskEnd"' in line and json.loads(line)["Stage ID"] == 1
    )
    ev = json.loads(lines[i])
    fetched = ev["Task Metrics"]["Shuffle Read Metrics"]
    assert fetched["Local Blocks Fetched"] + fetched["Remote Blocks Fetched"] > 0
    fetched["Remote Bytes Read"] = 1e30  # beyond int64: the event is malformed
    without = tmp_path / "without"
    without.write_text("\n".join(lines[:i] + lines[i + 1 :]) + "\n")
    lines[i] = json.dumps(ev)
    spark_copy.write_text("\n".join(lines) + "\n")

    # _task_end reads the shuffle bytes too; hide them from it so that the bad value is met
    # only where the reduce stage's fetched blocks and bytes are summed
    task_end = spark._task_end

    def without_shuffle_reads(ev: dict, *args: object) -> object:
        metrics = {k: v for k, v in ev["Task Metrics"].items() if k != "Shuffle Read Metrics"}
        return task_end({**ev, "Task Metrics": metrics}, *args)

    monkeypatch.setattr(spark, "_task_end", without_shuffle_reads)
    result = read_spark_events(spark_copy)
    assert result.issues.counts == {"malformed Spark event": 1}
    assert result.issues.examples[0].line == i + 1
    got = result.table.to_pandas().set_index("file_id")
    expected = read_spark_events(without).table.to_pandas().set_index("file_id")
    assert len(got) == 100 and (got["read_ops"] > 0).all()
    # the map outputs' reads come from the other reduce tasks only, as if the event were absent
    for column in ("read_ops", "read_bytes"):
        assert got[column].to_dict() == expected[column].to_dict()


def _lz4_block_stream(data: bytes, block: int = 4096) -> bytes:
    out = bytearray()
    for start in range(0, len(data), block):
        raw = data[start : start + block]
        comp = pa.compress(raw, codec="lz4_raw", asbytes=True)
        check = xxhash.xxh32_intdigest(raw, seed=LZ4_BLOCK_SEED) & 0x0FFFFFFF
        out += LZ4_BLOCK_MAGIC + struct.pack("<BiiI", 0x20 | 4, len(comp), len(raw), check) + comp
    out += LZ4_BLOCK_MAGIC + struct.pack("<BiiI", 0x10, 0, 0, 0)
    return bytes(out)


def _snappy_java_stream(data: bytes, block: int = 8192) -> bytes:
    out = bytearray(SNAPPY_JAVA_MAGIC + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block):
        comp = pa.compress(data[start : start + block], codec="snappy", asbytes=True)
        out += struct.pack(">i", len(comp)) + comp
    return bytes(out)


@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy", "gz"])
def test_compressed_event_logs(spark_dir: Path, tmp_path: Path, codec: str) -> None:
    src = spark_dir / "local-1430917381534"
    data = src.read_bytes()
    dst = tmp_path / f"local-1430917381534.{codec}"
    if codec == "zstd":
        with pa.output_stream(str(dst), compression="zstd") as f:
            f.write(data)
    elif codec == "lz4":
        dst.write_bytes(_lz4_block_stream(data))
    elif codec == "snappy":
        dst.write_bytes(_snappy_java_stream(data))
    else:
        dst.write_bytes(gzip.compress(data))
    assert sniff(dst) == (LogFormat.SPARK, Container.EVENTLOG)
    plain = read_spark_events(src).table
    assert read_spark_events(dst).table.equals(plain)


def test_corrupt_lz4_block_is_a_clear_issue(spark_dir: Path, tmp_path: Path) -> None:
    stream = bytearray(_lz4_block_stream((spark_dir / "local-1430917381534").read_bytes()))
    stream[40] ^= 0xFF  # inside the first block's data
    dst = tmp_path / "app.lz4"
    dst.write_bytes(bytes(stream))
    with pytest.raises(FormatError, match=r"app\.lz4"):
        read_spark_events(dst)


def test_lzf_is_refused_with_the_fix(tmp_path: Path) -> None:
    dst = tmp_path / "app-1.lzf"
    dst.write_bytes(b"ZV\x00\x00\x10" + b"x" * 64)
    with pytest.raises(FormatError, match="LZF.*not supported.*compression.codec"):
        discover([dst])


def test_extension_without_its_header(tmp_path: Path) -> None:
    dst = tmp_path / "app-1.zstd"
    dst.write_bytes(b'{"Event": "SparkListenerLogStart"}\n')
    with pytest.raises(FormatError, match="does not start with the zstd header"):
        discover([dst])


def test_rolling_event_log_directory(spark_dir: Path, tmp_path: Path) -> None:
    src = spark_dir / "local-1430917381534"
    lines = src.read_bytes().splitlines(keepends=True)
    roll = tmp_path / "eventlog_v2_local-1430917381534"
    roll.mkdir()
    cut = len(lines) // 2
    # the second file is compressed, as Spark would if the codec is set
    (roll / "events_1_local-1430917381534").write_bytes(b"".join(lines[:cut]))
    with pa.output_stream(str(roll / "events_2_local-1430917381534.zstd"), compression="zstd") as f:
        f.write(b"".join(lines[cut:]))
    (roll / "appstatus_local-1430917381534").write_bytes(b"")
    sources, _ = discover([tmp_path])
    assert [(s.path.name, s.container) for s in sources] == [(roll.name, Container.EVENTLOG_DIR)]
    table, issues = read_table([tmp_path])
    assert table.equals(read_spark_events(src).table) and not issues


def test_operator_names() -> None:
    assert operator_of("reduceByKey at Foo.scala:12") == "groupby"
    assert operator_of("join at <console>:3") == "merge"
    assert operator_of("sortByKey at x.py:1") == "sort"
    assert operator_of("map at <console>:26") == "map"
    assert operator_of("") == "other"


def test_forced_format_reads_any_file_as_spark(spark_dir: Path, tmp_path: Path) -> None:
    odd = tmp_path / "log.txt"
    shutil.copyfile(spark_dir / "local-1430917381534", odd)
    # auto detection still works on the odd name (content sniffing)...
    assert sniff(odd) == (LogFormat.SPARK, Container.EVENTLOG)
    # ...and a forced format reads a README as Spark: every line is malformed, nothing usable
    with pytest.raises(InputError, match="invalid JSON"):
        read_table([spark_dir / "README.md"], LogFormat.SPARK)


def _task_end_event(
    stage: int,
    task_id: int,
    launch_ms: int,
    finish_ms: int,
    *,
    written: int = 0,
    records: int = 0,
    fetched: int = 0,
    reason: str = "Success",
) -> dict:
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Stage Attempt ID": 0,
        "Task End Reason": {"Reason": reason},
        "Task Info": {
            "Task ID": task_id,
            "Executor ID": "1",
            "Host": "h1",
            "Launch Time": launch_ms,
            "Finish Time": finish_ms,
            "Failed": False,
            "Killed": False,
        },
        "Task Metrics": {
            "Shuffle Write Metrics": {
                "Shuffle Bytes Written": written,
                "Shuffle Records Written": records,
            },
            "Shuffle Read Metrics": {
                "Local Blocks Fetched": fetched,
                "Remote Blocks Fetched": 0,
                "Local Bytes Read": 10 * fetched,
                "Remote Bytes Read": 0,
            },
        },
    }


def _stage(sid: int, name: str, n_tasks: int, parents: list[int] | None, done_ms: int) -> dict:
    info = {"Stage ID": sid, "Stage Name": name, "Number of Tasks": n_tasks}
    if parents is not None:
        info["Parent IDs"] = parents
    return {
        "Event": "SparkListenerStageCompleted",
        "Stage Info": {**info, "Submission Time": 1000, "Completion Time": done_ms},
    }


def _write_log(path: Path, events: list[dict]) -> Path:
    head = [{"Event": "SparkListenerApplicationStart", "App Name": "a", "App ID": "app-1"}]
    job = {"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0, 1, 2]}
    tail = [{"Event": "SparkListenerApplicationEnd", "Timestamp": 99_000}]
    path.write_text("".join(json.dumps(e) + "\n" for e in [*head, job, *events, *tail]))
    return path


def _shuffle_rows(path: Path) -> Any:
    result = read_spark_events(path)
    assert not result.issues, result.issues.counts
    t = result.table.to_pandas()
    return t[t["file_kind"] == "shuffle"].set_index(t["file_id"].str.rsplit("_", n=1).str[-1])


def test_a_map_output_lives_until_the_last_of_its_readers_completes(tmp_path: Path) -> None:
    events = [
        _task_end_event(0, 1, 1000, 2000, written=100, records=50),
        _stage(0, "reduceByKey at x:1", 1, [], 2000),
        _task_end_event(1, 2, 2000, 3000, fetched=1),
        _stage(1, "count at x:2", 2, [0], 9000),
        _task_end_event(2, 3, 2000, 3000, fetched=1),
        _stage(2, "count at x:3", 3, [0], 6000),
    ]
    row = _shuffle_rows(_write_log(tmp_path / "log", events)).loc["1"]
    assert row["deleted_at"] == 9.0  # the later of the two readers' completion times
    # one segment per reduce partition (2 + 3 of them), capped by the 50 records written
    assert row["n_partitions_out"] == 5 and row["write_ops"] == 5


def test_write_ops_are_capped_by_the_records_written(tmp_path: Path) -> None:
    events = [
        _task_end_event(0, 1, 1000, 2000, written=100, records=2),
        _stage(0, "reduceByKey at x:1", 1, [], 2000),
        _stage(1, "count at x:2", 4, [0], 5000),
    ]
    assert _shuffle_rows(_write_log(tmp_path / "log", events)).loc["1", "write_ops"] == 2


def test_a_map_output_outlives_a_reader_that_completed_before_it_finished(
    tmp_path: Path,
) -> None:
    events = [
        _task_end_event(0, 1, 1000, 7000, written=100, records=5),
        _stage(0, "reduceByKey at x:1", 1, [], 7000),
        _stage(1, "count at x:2", 1, [0], 4000),
    ]
    assert _shuffle_rows(_write_log(tmp_path / "log", events)).loc["1", "deleted_at"] == 7.0


def test_a_failed_map_task_output_is_deleted_when_the_task_finishes(tmp_path: Path) -> None:
    """A task end whose reason is not Success discards its output, even without "Failed"."""
    events = [
        _task_end_event(0, 1, 1000, 2500, written=100, records=5, reason="ExceptionFailure"),
        _task_end_event(0, 2, 1000, 3000, written=100, records=5),
        _stage(0, "reduceByKey at x:1", 2, [], 3000),
        _task_end_event(1, 3, 3000, 4000, fetched=2),
        _stage(1, "count at x:2", 1, [0], 8000),
    ]
    rows = _shuffle_rows(_write_log(tmp_path / "log", events))
    assert rows.loc["1", "deleted_at"] == 2.5
    assert rows.loc["2", "deleted_at"] == 8.0


def test_executors_added_at_a_task_launch_count_as_its_workers(tmp_path: Path) -> None:
    added = [
        {"Event": "SparkListenerExecutorAdded", "Timestamp": 1000, "Executor ID": str(i)}
        for i in (1, 2)
    ]
    events = [
        *added,
        _task_end_event(0, 1, 1000, 2000, written=100, records=5),
        _stage(0, "reduceByKey at x:1", 1, [], 2000),
    ]
    assert _shuffle_rows(_write_log(tmp_path / "log", events)).loc["1", "n_workers"] == 2
    # a log without executor events still has the one worker that ran the task
    without = _write_log(tmp_path / "without", events[len(added) :])
    assert _shuffle_rows(without).loc["1", "n_workers"] == 1


def test_spark1_map_outputs_of_a_stage_are_not_read_by_itself(tmp_path: Path) -> None:
    """Without "Parent IDs", a stage that fetches and writes is a child of earlier stages only."""
    events = [
        _task_end_event(0, 1, 1000, 2000, written=100, records=5),
        _stage(0, "reduceByKey at x:1", 1, None, 2000),
        _task_end_event(1, 2, 2000, 3000, written=100, records=5, fetched=4),
        _stage(1, "reduceByKey at x:2", 1, None, 3000),
    ]
    rows = _shuffle_rows(_write_log(tmp_path / "log", events))
    assert rows.loc["1", "read_ops"] == 4 and rows.loc["1", "deleted_at"] == 3.0
    # nothing reads stage 1's output: it lives until the application ends
    assert rows.loc["2", "read_ops"] == 0 and rows.loc["2", "deleted_at"] == 99.0


def test_a_negative_task_id_is_a_malformed_event(tmp_path: Path) -> None:
    events = [
        _task_end_event(0, -1, 1000, 2000, written=100, records=5),
        _task_end_event(0, 2, 1000, 2000, written=100, records=5),
    ]
    result = read_spark_events(_write_log(tmp_path / "log", events))
    assert result.issues.counts == {"malformed Spark event": 1}
    assert "Task ID=-1" in result.issues.examples[0].detail
    assert result.table.num_rows == 1


def test_a_killed_map_task_output_is_deleted_when_the_task_finishes(tmp_path: Path) -> None:
    killed = _task_end_event(0, 1, 1000, 2500, written=100, records=5)
    killed["Task Info"]["Killed"] = True
    del killed["Task End Reason"]
    events = [killed, _stage(0, "sortByKey at x:1", 1, [], 2500), _stage(1, "c", 1, [0], 8000)]
    assert _shuffle_rows(_write_log(tmp_path / "log", events)).loc["1", "deleted_at"] == 2.5


def test_a_map_output_without_readers_lives_until_its_job_ends(tmp_path: Path) -> None:
    events = [
        _task_end_event(0, 1, 1000, 2000, written=100, records=5),
        _stage(0, "reduceByKey at x:1", 1, [], 2000),
        {"Event": "SparkListenerJobEnd", "Job ID": 0, "Completion Time": 4000},
    ]
    assert _shuffle_rows(_write_log(tmp_path / "log", events)).loc["1", "deleted_at"] == 4.0


def test_map_outputs_of_records_but_no_bytes_share_the_blocks_fetched(tmp_path: Path) -> None:
    events = [
        _task_end_event(0, 1, 1000, 2000, written=0, records=5),
        _task_end_event(0, 2, 1000, 2000, written=100, records=5),
        _stage(0, "reduceByKey at x:1", 2, [], 2000),
        _task_end_event(1, 3, 2000, 3000, fetched=4),
        _stage(1, "count at x:2", 1, [0], 5000),
    ]
    rows = _shuffle_rows(_write_log(tmp_path / "log", events))
    # 4 blocks fetched, shared evenly by the 2 map outputs; bytes by bytes written (0 and 100)
    assert rows["read_ops"].to_dict() == {"1": 2, "2": 2}
    assert rows["read_bytes"].to_dict() == {"1": 0, "2": 40}


def test_the_run_id_names_the_application_attempt(tmp_path: Path) -> None:
    path = _write_log(tmp_path / "log", [_task_end_event(0, 1, 1000, 2000, written=1, records=1)])
    lines = path.read_text().splitlines()
    start = json.loads(lines[0])
    lines[0] = json.dumps({**start, "App Attempt ID": "2"})
    path.write_text("\n".join(lines) + "\n")
    t = read_spark_events(path).table.to_pandas()
    assert t["run_id"].tolist() == ["app-1/2"] and t["file_id"][0].startswith("app-1/2/shuffle_")
