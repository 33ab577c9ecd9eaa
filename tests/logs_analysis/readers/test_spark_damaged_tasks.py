"""Damaged Spark task ends the reader must count as malformed events, not crash on or read
as data: counts that each fit their column but overflow it when summed, and task metrics
that are not an object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from logs_analysis.readers.spark import read_spark_events

T0 = 1_600_000_000_000


def _task(stage: int, task_id: int, metrics: Any) -> dict[str, Any]:
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Stage Attempt ID": 0,
        "Task End Reason": {"Reason": "Success"},
        "Task Info": {
            "Task ID": task_id,
            "Executor ID": "1",
            "Host": "node-1",
            "Launch Time": T0 + 100,
            "Finish Time": T0 + 200,
            "Failed": False,
            "Killed": False,
        },
        "Task Metrics": metrics,
    }


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    head = {"Event": "SparkListenerApplicationStart", "App Name": "etl", "App ID": "app-7"}
    tail = {"Event": "SparkListenerApplicationEnd", "Timestamp": T0 + 99_000}
    path.write_text("".join(json.dumps(e) + "\n" for e in [head, *events, tail]))
    return path


WRITES = {"Shuffle Write Metrics": {"Shuffle Bytes Written": 100, "Shuffle Records Written": 5}}


def test_input_and_shuffle_bytes_that_overflow_together_are_a_malformed_event(
    tmp_path: Path,
) -> None:
    heavy = {
        **WRITES,
        "Input Metrics": {"Bytes Read": 2**62},
        "Shuffle Read Metrics": {"Local Bytes Read": 2**62},  # each fits int64, not the sum
    }
    events = [_task(0, 5, heavy), _task(0, 6, WRITES)]
    result = read_spark_events(_write(tmp_path / "log", events))
    assert result.issues.counts == {"malformed Spark event": 1}
    (example,) = result.issues.examples
    assert example.line == 2 and "input_bytes=9223372036854775808 is out of range" in example.detail
    assert result.table["file_id"].to_pylist() == ["app-7/shuffle_0.0_6"]


def test_bytes_fetched_from_one_map_output_that_overflow_together_are_a_malformed_event(
    tmp_path: Path,
) -> None:
    def stage(sid: int, parents: list[int]) -> dict[str, Any]:
        info = {"Stage ID": sid, "Stage Name": f"s{sid} at x:1", "Number of Tasks": 2}
        return {
            "Event": "SparkListenerStageCompleted",
            "Stage Info": {**info, "Parent IDs": parents},
        }

    fetch = {"Shuffle Read Metrics": {"Remote Bytes Read": 2**62, "Remote Blocks Fetched": 1}}
    events = [
        _task(0, 5, WRITES),
        stage(0, []),
        _task(1, 8, fetch),
        _task(1, 9, fetch),  # two reads of 2**62 bytes: 2**63 in all, beyond int64
        stage(1, [0]),
    ]
    result = read_spark_events(_write(tmp_path / "log", events))
    assert result.issues.counts == {"malformed Spark event": 1}
    assert "read_bytes=9223372036854775808 is out of range" in result.issues.examples[0].detail
    assert result.table.num_rows == 0


def test_task_metrics_that_are_not_an_object_are_a_malformed_event(tmp_path: Path) -> None:
    """As "Input Metrics" given as a string is; absent (null) metrics are a task that wrote
    nothing, as old Spark versions log failed tasks."""
    events = [_task(0, 5, WRITES), _task(0, 6, "lots"), _task(0, 7, None)]
    result = read_spark_events(_write(tmp_path / "log", events))
    assert result.issues.counts == {"malformed Spark event": 1}
    (example,) = result.issues.examples
    assert example.line == 3 and "Task Metrics='lots' is not an object" in example.detail
    assert result.table["file_id"].to_pylist() == ["app-7/shuffle_0.0_5"]
