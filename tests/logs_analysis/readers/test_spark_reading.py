"""Spark event logs read field by field: each test writes a small log in Spark's JSON-lines
format (or splits a real one from ``../shared``) and checks the rows and issues it yields."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from logs_analysis.readers.base import ChunkResult
from logs_analysis.readers.spark import (
    NO_EVENTS,
    SparkChunk,
    operator_of,
    plan_spark,
    read_spark_events,
)

T0 = 1_600_000_000_000  # milliseconds, as Spark writes times


def _start(**fields: Any) -> dict[str, Any]:
    event = {
        "Event": "SparkListenerApplicationStart",
        "App Name": "etl",
        "App ID": "app-7",
        "Timestamp": T0,
        "User": "u",
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


def _info(sid: int, name: str, n_tasks: int, parents: list[int] | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "Stage ID": sid,
        "Stage Attempt ID": 0,
        "Stage Name": name,
        "Number of Tasks": n_tasks,
    }
    if parents is not None:  # Spark 1.x writes no "Parent IDs"
        info["Parent IDs"] = parents
    return info


def _job(job: int, infos: list[dict[str, Any]], at: int = T0 + 10) -> dict[str, Any]:
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job,
        "Submission Time": at,
        "Stage Infos": infos,
        "Stage IDs": [info["Stage ID"] for info in infos],
    }


def _submitted(info: dict[str, Any], at: int = T0 + 20) -> dict[str, Any]:
    return {"Event": "SparkListenerStageSubmitted", "Stage Info": {**info, "Submission Time": at}}


def _completed(info: dict[str, Any], at: int) -> dict[str, Any]:
    return {
        "Event": "SparkListenerStageCompleted",
        "Stage Info": {**info, "Submission Time": T0 + 20, "Completion Time": at},
    }


def _task(
    stage: int,
    task_id: int,
    launch: int,
    finish: int,
    *,
    written: int = 0,
    records: int | None = 0,
    local_blocks: int = 0,
    remote_blocks: int = 0,
    local_bytes: int = 0,
    remote_bytes: int = 0,
    spilled: int = 0,
) -> dict[str, Any]:
    """A task end as Spark 2.x writes it (times in ms after ``T0``)."""
    write: dict[str, Any] = {"Shuffle Bytes Written": written, "Shuffle Write Time": 1000}
    if records is not None:  # Spark 1.x before 1.3 wrote no record count
        write["Shuffle Records Written"] = records
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Stage Attempt ID": 0,
        "Task Type": "ShuffleMapTask",
        "Task End Reason": {"Reason": "Success"},
        "Task Info": {
            "Task ID": task_id,
            "Index": task_id,
            "Attempt": 0,
            "Launch Time": T0 + launch,
            "Executor ID": "1",
            "Host": "node-1",
            "Finish Time": T0 + finish,
            "Failed": False,
            "Killed": False,
        },
        "Task Metrics": {
            "Executor Run Time": finish - launch,
            "Memory Bytes Spilled": 0,
            "Disk Bytes Spilled": spilled,
            "Shuffle Read Metrics": {
                "Remote Blocks Fetched": remote_blocks,
                "Local Blocks Fetched": local_blocks,
                "Fetch Wait Time": 0,
                "Remote Bytes Read": remote_bytes,
                "Local Bytes Read": local_bytes,
            },
            "Shuffle Write Metrics": write,
        },
    }


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _log(path: Path, events: list[dict[str, Any]]) -> Path:
    """``events`` between an application start and end (at ``T0`` + 99 s)."""
    end = {"Event": "SparkListenerApplicationEnd", "Timestamp": T0 + 99_000}
    return _write(path, [_start(), *events, end])


def _rows(result: ChunkResult) -> dict[str, dict[str, Any]]:
    """The rows of ``result`` by file id."""
    return {row["file_id"]: row for row in result.table.to_pylist()}


MAP = _info(0, "reduceByKey at etl.scala:10", 1, [])


# ----------------------------------------------------------------------------- names


def test_a_qualified_call_name_maps_to_the_operator_of_its_last_part() -> None:
    assert operator_of("org.apache.spark.rdd.PairRDDFunctions.reduceByKey at x.scala:3") == (
        "groupby"
    )
    # Scala marks compiler-made names with '$'; they are trimmed before the lookup
    assert operator_of("sortByKey$ at Main.scala:9") == "sort"
    assert operator_of("$join at Main.scala:9") == "merge"


def test_a_log_without_an_application_start_is_named_after_its_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "app-lost-start", [_task(0, 5, 100, 200, written=10, records=1)])
    (row,) = read_spark_events(path).table.to_pylist()
    assert row["run_id"] == row["pipeline"] == "app-lost-start"
    assert row["file_id"] == "app-lost-start/shuffle_0.0_5"


def test_an_application_without_a_name_is_its_own_pipeline(tmp_path: Path) -> None:
    events = [_start(**{"App Name": None}), _task(0, 5, 100, 200, written=10, records=1)]
    (row,) = read_spark_events(_write(tmp_path / "log", events)).table.to_pylist()
    assert row["pipeline"] == row["run_id"] == "app-7"


# ----------------------------------------------------------------------------- stages


def test_a_stage_event_without_a_name_keeps_the_name_read_before(tmp_path: Path) -> None:
    unnamed = {k: v for k, v in MAP.items() if k != "Stage Name"}
    events = [
        _job(0, [MAP]),
        _task(0, 5, 100, 200, written=10, records=1),
        _completed(unnamed, T0 + 300),
    ]
    (row,) = read_spark_events(_log(tmp_path / "log", events)).table.to_pylist()
    assert row["stage"] == "reduceByKey at etl.scala:10" and row["operator"] == "groupby"


def test_a_reader_stage_known_only_from_its_job_start_sets_the_map_outputs_segments(
    tmp_path: Path,
) -> None:
    """A job that failed in its map stage never submits its reduce stage: the job start's
    stage list still says how many partitions the map output was cut into."""
    reducer = _info(1, "count at etl.scala:11", 4, [0])
    events = [
        _job(0, [MAP, reducer]),
        _submitted(MAP),
        _task(0, 5, 100, 200, written=100, records=50),
        _completed(MAP, T0 + 300),
        {"Event": "SparkListenerJobEnd", "Job ID": 0, "Completion Time": T0 + 3000},
    ]
    (row,) = read_spark_events(_log(tmp_path / "log", events)).table.to_pylist()
    assert row["n_partitions_out"] == 4 and row["write_ops"] == 4
    assert row["deleted_at"] == (T0 + 3000) / 1000  # no reader completed: the job's end


def test_a_stage_named_only_by_its_submission_is_read_from_it(tmp_path: Path) -> None:
    """Spark 1.0 and 1.1 list only stage ids in a job start; a log cut before the stage
    completes has its name and task count in the submission alone."""
    info = _info(0, "groupByKey at etl.py:4", 3)
    events = [
        _start(),
        {"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0]},
        _submitted(info),
        _task(0, 5, 100, 200, written=10, records=1),
    ]
    (row,) = read_spark_events(_write(tmp_path / "log", events)).table.to_pylist()
    assert row["stage"] == "groupByKey at etl.py:4" and row["operator"] == "groupby"
    assert row["n_partitions_in"] == 3 and row["job_id"] == "0"


def test_a_stage_of_more_tasks_than_its_column_holds_is_a_malformed_event(
    tmp_path: Path,
) -> None:
    huge = _info(1, "count at etl.scala:11", 2**31, [0])
    events = [
        _job(0, [MAP]),
        _task(0, 5, 100, 200, written=10, records=1),
        _completed(MAP, T0 + 300),
        _submitted(huge),
    ]
    path = _log(tmp_path / "log", events)
    result = read_spark_events(path)
    assert result.issues.counts == {"malformed Spark event": 1}
    (example,) = result.issues.examples
    assert example.line == 5 and "Number of Tasks=2147483648 is out of range" in example.detail
    assert result.table.num_rows == 1


def test_boolean_ids_are_not_ids(tmp_path: Path) -> None:
    """JSON ``true`` is not stage 1 or task 1."""
    stage1 = _info(1, "reduceByKey at etl.scala:10", 1, [])
    task = _task(1, 6, 100, 200, written=10, records=1)
    task["Task Info"]["Task ID"] = True
    renamed = {**_info(1, "sortByKey at etl.scala:99", 1, []), "Stage ID": True}
    events = [
        _job(0, [stage1]),
        _task(1, 5, 100, 200, written=10, records=1),
        task,
        _completed(renamed, T0 + 300),
    ]
    result = read_spark_events(_log(tmp_path / "log", events))
    assert result.issues.counts == {"malformed Spark event": 1}
    assert "Task ID=True is not an integer" in result.issues.examples[0].detail
    (row,) = result.table.to_pylist()
    assert row["stage"] == "reduceByKey at etl.scala:10" and row["operator"] == "groupby"


# ----------------------------------------------------------------------------- task ends


def test_a_task_end_without_a_stage_id_is_counted_and_yields_no_row(tmp_path: Path) -> None:
    lost = _task(0, 6, 100, 200, written=10, records=1)
    del lost["Stage ID"]
    events = [_task(0, 5, 100, 200, written=10, records=1), lost]
    result = read_spark_events(_log(tmp_path / "log", events))
    assert result.issues.counts == {"task end without Task Info or Stage ID": 1}
    assert result.issues.examples[0].line == 3
    assert list(_rows(result)) == ["app-7/shuffle_0.0_5"]


def test_a_task_end_without_a_finish_time_is_counted_as_such(tmp_path: Path) -> None:
    unfinished = _task(0, 6, 100, 200, written=10, records=1)
    del unfinished["Task Info"]["Finish Time"]
    events = [_task(0, 5, 100, 200, written=10, records=1), unfinished]
    result = read_spark_events(_log(tmp_path / "log", events))
    assert result.issues.counts == {"task end without Launch/Finish Time": 1}
    (example,) = result.issues.examples
    assert example.line == 3 and example.detail == "task 6"
    assert list(_rows(result)) == ["app-7/shuffle_0.0_5"]


def _reader_events(map_task: dict[str, Any]) -> list[dict[str, Any]]:
    """``map_task`` of stage 0, then stage 1 reading it, completed at ``T0`` + 8 s."""
    reducer = _info(1, "count at etl.scala:11", 1, [0])
    return [
        _job(0, [MAP, reducer]),
        map_task,
        _completed(MAP, T0 + 2500),
        _task(1, 9, 3000, 4000, local_blocks=1, local_bytes=100),
        _completed(reducer, T0 + 8000),
    ]


def test_a_task_marked_failed_without_an_end_reason_discards_its_output_at_its_finish(
    tmp_path: Path,
) -> None:
    failed = _task(0, 5, 1000, 2500, written=100, records=5)
    failed["Task Info"]["Failed"] = True
    del failed["Task End Reason"]
    (row,) = read_spark_events(_log(tmp_path / "log", _reader_events(failed))).table.to_pylist()
    assert row["deleted_at"] == (T0 + 2500) / 1000


def test_an_end_reason_that_names_no_reason_is_not_a_failure(tmp_path: Path) -> None:
    task = _task(0, 5, 1000, 2500, written=100, records=5)
    task["Task End Reason"] = {}
    (row,) = read_spark_events(_log(tmp_path / "log", _reader_events(task))).table.to_pylist()
    assert row["deleted_at"] == (T0 + 8000) / 1000  # its reader's completion


def test_a_task_info_without_a_host_takes_the_metrics_host_name(tmp_path: Path) -> None:
    """Spark 1.x also writes the host in the task metrics ("Host Name")."""
    task = _task(0, 5, 100, 200, written=10, records=1)
    del task["Task Info"]["Host"]
    task["Task Metrics"]["Host Name"] = "node-3"
    (row,) = read_spark_events(_log(tmp_path / "log", [task])).table.to_pylist()
    assert row["host"] == "node-3" and row["worker"] == "1"


# ----------------------------------------------------------------------------- timing


def test_a_log_without_an_application_end_lasts_until_its_latest_time(tmp_path: Path) -> None:
    """An in-progress log: a map output nobody read, of a job that has not ended, lives until
    the latest time in the log, which need not be on its last line (listener events are
    posted as they come, a few milliseconds out of order)."""
    events = [
        _start(),
        _job(0, [MAP]),
        _task(0, 5, 100, 200, written=10, records=1),
        _completed(MAP, T0 + 300),
        _job(1, [_info(1, "count at etl.scala:20", 2, [])], at=T0 + 9010),
        {"Event": "SparkListenerExecutorAdded", "Timestamp": T0 + 9005, "Executor ID": "2"},
    ]
    (row,) = read_spark_events(_write(tmp_path / "log", events)).table.to_pylist()
    assert row["deleted_at"] == (T0 + 9010) / 1000


def test_executors_removed_before_a_task_launch_are_not_its_workers(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = [
        {"Event": "SparkListenerExecutorAdded", "Timestamp": T0 + 50, "Executor ID": str(i)}
        for i in (1, 2, 3)
    ]
    events += [
        {"Event": "SparkListenerExecutorRemoved", "Timestamp": T0 + 80, "Executor ID": "3"},
        _task(0, 5, 100, 200, written=10, records=1),
        {"Event": "SparkListenerExecutorRemoved", "Timestamp": T0 + 150, "Executor ID": "2"},
        _task(0, 6, 160, 200, written=10, records=1),
    ]
    rows = _rows(read_spark_events(_log(tmp_path / "log", events)))
    assert rows["app-7/shuffle_0.0_5"]["n_workers"] == 2
    assert rows["app-7/shuffle_0.0_6"]["n_workers"] == 1


# ----------------------------------------------------------------------------- map outputs


def test_read_ops_count_local_and_remote_blocks_fetched(tmp_path: Path) -> None:
    reducer = _info(1, "count at etl.scala:11", 1, [0])
    events = [
        _job(0, [MAP, reducer]),
        _task(0, 5, 100, 200, written=100, records=5),
        _completed(MAP, T0 + 300),
        _task(1, 9, 300, 400, local_blocks=2, remote_blocks=3, local_bytes=40, remote_bytes=60),
        _completed(reducer, T0 + 500),
    ]
    (row,) = _rows(read_spark_events(_log(tmp_path / "log", events))).values()
    assert row["read_ops"] == 5 and row["read_bytes"] == 100


def test_read_bytes_are_rounded_to_the_nearest_byte(tmp_path: Path) -> None:
    map2 = _info(0, "reduceByKey at etl.scala:10", 2, [])
    reducer = _info(1, "count at etl.scala:11", 1, [0])
    events = [
        _job(0, [map2, reducer]),
        _task(0, 5, 100, 200, written=1, records=1),
        _task(0, 6, 100, 200, written=2, records=1),
        _completed(map2, T0 + 300),
        _task(1, 9, 300, 400, local_blocks=2, local_bytes=10),
        _completed(reducer, T0 + 500),
    ]
    rows = _rows(read_spark_events(_log(tmp_path / "log", events)))
    # 10 bytes fetched, shared 1:2 -> 3.33 and 6.67
    assert rows["app-7/shuffle_0.0_5"]["read_bytes"] == 3
    assert rows["app-7/shuffle_0.0_6"]["read_bytes"] == 7


def test_a_map_output_without_a_record_count_is_cut_into_its_readers_partitions(
    tmp_path: Path,
) -> None:
    """Spark before 1.3 wrote bytes but no "Shuffle Records Written"."""
    reducer = _info(1, "count at etl.scala:11", 4, [0])
    events = [
        _job(0, [MAP, reducer]),
        _task(0, 5, 100, 200, written=100, records=None),
        _completed(MAP, T0 + 300),
        _completed(reducer, T0 + 500),
    ]
    (row,) = read_spark_events(_log(tmp_path / "log", events)).table.to_pylist()
    assert row["n_partitions_out"] == 4 and row["write_ops"] == 4


def test_spark1_readers_are_later_stages_of_the_same_job_that_fetched(tmp_path: Path) -> None:
    """Without "Parent IDs", a map stage's readers are the later stages of its job that
    fetched shuffle blocks: not a later stage that fetched nothing, nor another job's."""
    job0 = [
        _info(0, "map at etl.scala:1", 1),
        _info(1, "reduceByKey at etl.scala:2", 2),
        _info(2, "count at etl.scala:3", 5),
    ]
    job1 = [_info(3, "map at etl.scala:4", 1), _info(4, "reduceByKey at etl.scala:5", 3)]
    events = [
        _job(0, job0),
        _task(0, 1, 100, 200, written=100, records=10),
        _completed(job0[0], T0 + 300),
        _task(1, 2, 400, 500, local_blocks=2, local_bytes=100),
        _completed(job0[1], T0 + 3000),
        _task(2, 3, 3100, 3200),
        _completed(job0[2], T0 + 6000),
        _job(1, job1, at=T0 + 6100),
        _task(3, 4, 6200, 6300, written=100, records=10),
        _completed(job1[0], T0 + 6400),
        _task(4, 5, 6500, 6600, local_blocks=7, local_bytes=100),
        _completed(job1[1], T0 + 8000),
    ]
    rows = _rows(read_spark_events(_log(tmp_path / "log", events)))
    first = rows["app-7/shuffle_0.0_1"]
    assert first["n_partitions_out"] == 2 and first["read_ops"] == 2
    assert first["deleted_at"] == (T0 + 3000) / 1000
    second = rows["app-7/shuffle_3.0_4"]
    assert second["n_partitions_out"] == 3 and second["read_ops"] == 7


# ----------------------------------------------------------------------------- spill, labels


def test_a_task_that_spills_and_writes_has_a_spill_row_and_a_shuffle_row(tmp_path: Path) -> None:
    task = _task(0, 5, 100, 200, written=10, records=1, spilled=4096)
    rows = _rows(read_spark_events(_log(tmp_path / "log", [task])))
    assert set(rows) == {"app-7/shuffle_0.0_5", "app-7/spill_0.0_5"}
    assert rows["app-7/spill_0.0_5"]["file_kind"] == "spill"
    assert rows["app-7/spill_0.0_5"]["size_bytes"] == 4096
    assert rows["app-7/shuffle_0.0_5"]["size_bytes"] == 10


def test_each_row_is_labelled_with_the_line_of_its_task_end(tmp_path: Path) -> None:
    events = [
        _task(0, 5, 100, 200, written=10, records=1),
        _task(0, 6, 100, 200, written=10, records=1, spilled=7),
    ]
    result = read_spark_events(_log(tmp_path / "log", events))
    assert result.labels == [
        "line 2 (stage 0 task 5 shuffle)",
        "line 3 (stage 0 task 6 shuffle)",
        "line 3 (stage 0 task 6 spill)",
    ]


# ----------------------------------------------------------------------------- not events


def test_a_file_of_blank_lines_is_not_an_event_log_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "blank"
    path.write_text("\n   \n\t\n")
    result = read_spark_events(path)
    assert result.issues.counts == {NO_EVENTS: 1}
    assert result.issues.examples[0].detail == "it holds only blank lines"


def test_a_file_without_events_counts_each_kind_of_line(tmp_path: Path) -> None:
    path = tmp_path / "notes"
    path.write_text('no json\n[1, 2]\n{"Event": 5}\nalso not json\n')
    result = read_spark_events(path)
    assert result.issues.counts == {NO_EVENTS: 1}
    detail = result.issues.examples[0].detail
    assert "none of its 4 non-blank line(s) is a Spark listener event" in detail
    assert '(2 invalid JSON, 2 JSON but not an object with an "Event" name)' in detail


def test_an_event_name_that_is_not_a_string_is_not_a_listener_event(tmp_path: Path) -> None:
    events = [_task(0, 5, 100, 200, written=10, records=1), {"Event": 5}]
    result = read_spark_events(_log(tmp_path / "log", events))
    assert result.issues.counts == {"not a Spark listener event": 1}
    assert result.issues.examples[0].line == 3 and result.table.num_rows == 1


# ----------------------------------------------------------------------------- files, plans


def test_a_rolling_log_of_more_than_nine_files_is_read_in_index_order(
    spark_dir: Path, tmp_path: Path
) -> None:
    src = spark_dir / "local-1430917381534"
    lines = src.read_bytes().splitlines(keepends=True)
    roll = tmp_path / "eventlog_v2_local-1430917381534"
    roll.mkdir()
    per_file = math.ceil(len(lines) / 12)
    for index in range(12):
        part = b"".join(lines[index * per_file : (index + 1) * per_file])
        (roll / f"events_{index + 1}_local-1430917381534").write_bytes(part)
    whole = read_spark_events(src)
    rolled = read_spark_events(roll)
    assert rolled.table.num_rows == 100 and not rolled.issues
    assert rolled.table.equals(whole.table)


def test_a_rolling_directory_without_event_files_is_an_unreadable_log(tmp_path: Path) -> None:
    roll = tmp_path / "eventlog_v2_app-7"
    roll.mkdir()
    (roll / "appstatus_app-7.inprogress").write_bytes(b"")
    chunks, issues = plan_spark(roll)
    assert chunks == [] and issues.counts == {"unreadable event log (skipped)": 1}
    assert "without events_<n>_<app> files" in issues.examples[0].detail


def test_a_missing_log_is_planned_as_unreadable_with_the_systems_reason(tmp_path: Path) -> None:
    chunks, issues = plan_spark(tmp_path / "app-gone")
    assert chunks == [] and issues.counts == {"unreadable event log (skipped)": 1}
    (example,) = issues.examples
    assert example.source == str(tmp_path / "app-gone")
    assert example.detail == "No such file or directory"


def test_a_log_is_planned_as_one_chunk_of_a_row_per_2_kib(spark_dir: Path) -> None:
    for name in ("local-1430917381534", "application_1506645932520_24630151"):
        path = spark_dir / name
        chunks, issues = plan_spark(path)
        assert not issues and [c.source for c in chunks] == [str(path)]
        assert chunks[0].estimated_rows == math.ceil(path.stat().st_size / 2048)


def test_a_corrupt_compressed_log_read_as_a_chunk_is_counted_not_raised(
    spark_dir: Path, tmp_path: Path
) -> None:
    stream = bytearray(gzip.compress((spark_dir / "local-1430917381534").read_bytes()))
    stream[200:216] = bytes(b ^ 0xFF for b in stream[200:216])  # inside the deflate data
    path = tmp_path / "local-1430917381534.gz"
    path.write_bytes(bytes(stream))
    result = SparkChunk(str(path), 1).load()
    assert result.table.num_rows == 0
    assert result.issues.counts == {"unreadable event log (skipped)": 1}
    assert "corrupt gzip data" in result.issues.examples[0].detail
