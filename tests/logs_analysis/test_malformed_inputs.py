"""Malformed and awkward inputs: each is counted and reported, never fatal.

Every input is built in ``tmp_path``: placement-log rows, a synthetic Spark event log
(the event fields the reader uses, as Spark writes them), cut-short compressed streams,
special files, duplicate paths and outputs that would overwrite an input.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from logs_analysis.errors import FormatError, InputError, OutputError
from logs_analysis.formats import Container, LogFormat, discover, sniff
from logs_analysis.readers import read_table
from logs_analysis.readers.spark import read_spark_events
from placement.schema import REQUIRED_COLUMNS
from tests.logs_analysis.damage import damage_row_group

# ----------------------------------------------------------------------------- inputs


def _native_row(i: int, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "file_id": f"f{i}",
        "pipeline": "p",
        "run_id": "r",
        "stage": "s",
        "created_at": 100.0 + i,
        "deleted_at": 110.0 + i,
        "file_kind": "spill",
        "size_bytes": 1000 + i,
        "read_ops": 1,
        "write_ops": 1,
        "read_bytes": 1000,
        "write_bytes": 1000,
    }
    row.update(over)
    return row


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _spark_events(n_tasks: int) -> list[dict[str, Any]]:
    """A Spark 2.x-style application: stage 0 (``n_tasks`` map tasks writing shuffle data)
    read by stage 1 of job 0."""
    t0 = 1_600_000_000_000
    stage0 = {
        "Stage ID": 0,
        "Stage Attempt ID": 0,
        "Stage Name": "map at x.scala:1",
        "Number of Tasks": n_tasks,
        "Parent IDs": [],
    }
    stage1 = {
        "Stage ID": 1,
        "Stage Attempt ID": 0,
        "Stage Name": "reduceByKey at x.scala:2",
        "Number of Tasks": 4,
        "Parent IDs": [0],
    }
    events: list[dict[str, Any]] = [
        {"Event": "SparkListenerLogStart", "Spark Version": "2.4.0"},
        {
            "Event": "SparkListenerApplicationStart",
            "App Name": "synthetic",
            "App ID": "app-1",
            "Timestamp": t0,
            "User": "u",
        },
        {
            "Event": "SparkListenerJobStart",
            "Job ID": 0,
            "Submission Time": t0 + 10,
            "Stage Infos": [stage0, stage1],
            "Stage IDs": [0, 1],
        },
        {"Event": "SparkListenerStageSubmitted", "Stage Info": {**stage0, "Submission Time": t0}},
    ]
    for task in range(n_tasks):
        events.append(
            {
                "Event": "SparkListenerTaskEnd",
                "Stage ID": 0,
                "Stage Attempt ID": 0,
                "Task Type": "ShuffleMapTask",
                "Task End Reason": {"Reason": "Success"},
                "Task Info": {
                    "Task ID": task,
                    "Index": task,
                    "Attempt": 0,
                    "Launch Time": t0 + 100 + task,
                    "Executor ID": str(task % 4),
                    "Host": f"host-{task % 4}",
                    "Finish Time": t0 + 200 + task,
                    "Failed": False,
                    "Killed": False,
                },
                "Task Metrics": {
                    "Executor Run Time": 90 + task % 7,
                    "Shuffle Write Metrics": {
                        "Shuffle Bytes Written": 10_000 + 37 * task,
                        "Shuffle Write Time": 1000 + task,
                        "Shuffle Records Written": 100 + task % 13,
                    },
                    "Input Metrics": {"Bytes Read": 50_000 + task, "Records Read": 500},
                },
            }
        )
    events += [
        {
            "Event": "SparkListenerStageCompleted",
            "Stage Info": {**stage0, "Submission Time": t0, "Completion Time": t0 + 5000},
        },
        {
            "Event": "SparkListenerStageCompleted",
            "Stage Info": {**stage1, "Submission Time": t0 + 5000, "Completion Time": t0 + 9000},
        },
        {
            "Event": "SparkListenerJobEnd",
            "Job ID": 0,
            "Completion Time": t0 + 9000,
            "Job Result": {"Result": "JobSucceeded"},
        },
        {"Event": "SparkListenerApplicationEnd", "Timestamp": t0 + 10_000},
    ]
    return events


def _spark_bytes(events: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in events).encode()


# ----------------------------------------------------------------------------- native


def test_parquet_without_optional_dictionary_columns(tmp_path: Path) -> None:
    """Optional string columns read dictionary-encoded may be absent: they become nulls."""
    rows = [_native_row(i) for i in range(10)]
    table = pa.table({c: [r[c] for r in rows] for c in REQUIRED_COLUMNS})
    assert "job_id" not in table.column_names and "worker" not in table.column_names
    path = tmp_path / "required-only.parquet"
    pq.write_table(table, path)
    got, issues = read_table([path])
    assert got.num_rows == 10 and not issues
    assert got["job_id"].null_count == 10
    # a file with some of the dictionary columns is read too
    pq.write_table(table.append_column("worker", pa.array(["w"] * 10)), tmp_path / "w.parquet")
    got, issues = read_table([tmp_path / "w.parquet"])
    assert got.num_rows == 10 and not issues
    assert got["worker"].to_pylist() == ["w"] * 10


def test_no_usable_rows_error_shows_the_first_issue_of_each_reason(tmp_path: Path) -> None:
    """With nothing usable there is no report to look in: the error itself names the column."""
    rows = [_native_row(i) for i in range(10)]
    table = pa.table({c: [r[c] for r in rows] for c in REQUIRED_COLUMNS})
    typed = table.set_column(
        table.schema.get_field_index("size_bytes"),
        "size_bytes",
        pa.array(["abc"] + [str(r["size_bytes"]) for r in rows[1:]]),
    )
    pq.write_table(typed, tmp_path / "typed.parquet")
    pq.write_table(table.drop(["stage"]), tmp_path / "no-stage.parquet")
    res = _report([str(tmp_path / "typed.parquet"), "--out", str(tmp_path / "a.html")])
    assert res.exit_code == 1, res.output
    message = " ".join(res.output.split())
    assert "log column 'size_bytes' has type string" in message
    assert f"{tmp_path / 'typed.parquet'} rows 0-9" in message
    res = _report([str(tmp_path / "no-stage.parquet"), "--out", str(tmp_path / "b.html")])
    assert res.exit_code == 1 and "lacks ['stage']" in res.output


def test_damaged_parquet_counts_one_file_however_it_is_chunked(
    real_rows: pa.Table, tmp_path: Path
) -> None:
    """A Parquet log with damaged row groups is one damaged file whether it is read in one
    chunk or in several (in parallel): the row groups that decode are kept, the same rows
    either way, and a bad row after the damage keeps its place in the file."""
    from logs_analysis.aggregate import AggregateConfig, aggregate
    from logs_analysis.readers.native import DAMAGED_FILE, plan_parquet

    rows = real_rows.slice(0, 320)
    read_ops = rows["read_ops"].to_pylist()
    read_ops[250] = -1  # a bad row in a row group that still decodes
    rows = rows.set_column(rows.schema.get_field_index("read_ops"), "read_ops", pa.array(read_ops))
    path = tmp_path / "damaged.parquet"
    pq.write_table(rows, path, row_group_size=40, compression="snappy")
    assert pq.ParquetFile(path).metadata.num_row_groups == 8
    for row_group in (1, 2, 5):  # rows 40-119 and 200-239
        damage_row_group(path, row_group)
    kept_rows = 320 - 3 * 40 - 1
    results = {}
    for chunk_rows in (None, 40, 80, 160):  # one chunk; 8, 4 and 2 chunks
        chunks, planned = plan_parquet(path, chunk_rows=chunk_rows)
        assert not planned
        agg = aggregate(chunks, AggregateConfig(scheduler="sync"), paths=[path])
        results[chunk_rows] = agg
        assert agg.rows == kept_rows, chunk_rows
        assert agg.issues.counts == {DAMAGED_FILE: 1, "negative read_ops": 1}, chunk_rows
        assert agg.issues.malformed == 2 and agg.issues.skipped_inputs == 0
        bad_row = [e for e in agg.issues.examples if e.reason == "negative read_ops"]
        assert [e.location for e in bad_row] == ["row 250"], chunk_rows
        # the examples name the damaged rows (one per damaged part a chunk met)
        damaged: set[int] = set()
        for e in agg.issues.examples:
            if e.reason == DAMAGED_FILE:
                first, last = map(int, e.location.removeprefix("rows ").split("-"))
                damaged.update(range(first, last + 1))
        assert damaged == {*range(40, 120), *range(200, 240)}, chunk_rows
    # the same rows whatever the chunks: same bytes and operations
    totals = {k: (a.totals["bytes"], a.totals["ops"]) for k, a in results.items()}
    assert len(set(totals.values())) == 1, totals
    # read in memory too
    table, issues = read_table([path])
    assert table.num_rows == kept_rows and issues.counts[DAMAGED_FILE] == 1
    # every row group damaged: one file, its rows in the detail, no usable row
    for row_group in (0, 3, 4, 6, 7):
        damage_row_group(path, row_group)
    with pytest.raises(InputError) as exc:
        read_table([path])
    message = str(exc.value)
    assert f"(1 x {DAMAGED_FILE})" in message
    assert f"{path} rows 0-319: the whole file (320 rows): " in message


def test_jsonl_integer_out_of_its_column_range_is_counted(tmp_path: Path) -> None:
    rows = [_native_row(i) for i in range(5)]
    rows.append(_native_row(5, size_bytes=10**20))  # beyond int64
    rows.append(_native_row(6, n_partitions_in=2**40))  # an int32 column
    rows.append(_native_row(7, read_ops=-(2**70)))
    rows.append(_native_row(8, size_bytes=1e30))  # an integral float, beyond int64
    path = _write_jsonl(tmp_path / "log.jsonl", rows)
    table, issues = read_table([path])
    assert table.num_rows == 5
    assert issues.counts == {"value out of range": 4}
    located = {e.location: e.detail for e in issues.examples}
    assert set(located) == {"line 6", "line 7", "line 8", "line 9"}
    assert "size_bytes" in located["line 6"] and "int64" in located["line 6"]
    assert "n_partitions_in" in located["line 7"] and "int32" in located["line 7"]


# ----------------------------------------------------------------------------- spark


def test_wrong_typed_spark_fields_are_malformed_events(tmp_path: Path) -> None:
    events = _spark_events(20)
    plain = tmp_path / "app-plain"
    plain.write_bytes(_spark_bytes(events))
    assert read_spark_events(plain).table.num_rows == 20
    first_task = next(i for i, e in enumerate(events) if e["Event"] == "SparkListenerTaskEnd")
    events[first_task]["Task Info"]["Task ID"] = "abc"
    events[first_task + 1]["Stage Attempt ID"] = [0]
    events[first_task + 2]["Task Metrics"]["Shuffle Write Metrics"]["Shuffle Bytes Written"] = 1e300
    job_start = next(i for i, e in enumerate(events) if e["Event"] == "SparkListenerJobStart")
    events[job_start]["Stage IDs"] = 5
    bad = tmp_path / "app-bad"
    bad.write_bytes(_spark_bytes(events))
    result = read_spark_events(bad)
    assert result.table.num_rows == 17
    assert result.issues.counts == {"malformed Spark event": 4}
    lines = sorted(e.line for e in result.issues.examples if e.line is not None)
    assert lines == [job_start + 1, first_task + 1, first_task + 2, first_task + 3]
    details = " ".join(e.detail for e in result.issues.examples)
    assert "Task ID='abc'" in details and "Stage IDs=5" in details


def _zstd(data: bytes) -> bytes:
    return pa.compress(data, codec="zstd", asbytes=True)


def _lz4(data: bytes) -> bytes:
    from tests.logs_analysis.readers.test_spark import _lz4_block_stream

    return _lz4_block_stream(data)


@pytest.mark.parametrize("codec, compress", [("gz", gzip.compress), ("zstd", _zstd), ("lz4", _lz4)])
def test_truncated_compressed_log_keeps_the_lines_before_the_cut(
    tmp_path: Path, codec: str, compress: Any
) -> None:
    data = _spark_bytes(_spark_events(3000))  # ~1.6 MB: several zstd blocks and lz4 blocks
    whole = tmp_path / f"app-whole.{codec}"
    whole.write_bytes(compress(data))
    full = read_spark_events(whole)
    assert full.table.num_rows == 3000 and not full.issues
    stream = whole.read_bytes()
    cut = tmp_path / f"app-cut.{codec}"
    cut.write_bytes(stream[: len(stream) * 2 // 3])
    assert sniff(cut) == (LogFormat.SPARK, Container.EVENTLOG)
    table, issues = read_table([cut])
    assert 0 < table.num_rows < 3000
    assert table["file_id"].to_pylist() == full.table["file_id"].to_pylist()[: table.num_rows]
    assert issues.counts == {"truncated compressed stream": 1}
    (example,) = issues.examples
    assert example.source == str(cut) and str(cut) in example.detail


@pytest.mark.parametrize("codec, compress", [("gz", gzip.compress), ("zstd", _zstd)])
def test_small_truncated_compressed_log_named_explicitly_is_not_fatal(
    tmp_path: Path, codec: str, compress: Any
) -> None:
    stream = compress(_spark_bytes(_spark_events(40)))
    cut = tmp_path / f"app-small.{codec}"
    cut.write_bytes(stream[: len(stream) * 2 // 3])
    sources, _ = discover([cut])
    assert [(s.format, s.container) for s in sources] == [(LogFormat.SPARK, Container.EVENTLOG)]
    try:
        table, issues = read_table([cut])
    except InputError as exc:  # nothing decodable before the cut (one zstd block)
        assert "truncated compressed stream" in str(exc)
    else:
        assert table.num_rows > 0
        assert issues.counts.get("truncated compressed stream") == 1


def _zstd_frames(data: bytes, size: int) -> tuple[bytes, list[tuple[int, int]]]:
    """``data`` as zstd frames of ``size`` decoded bytes each (cut mid-line), and the
    ``(compressed, decoded)`` offsets where each frame ends."""
    stream, marks = b"", []
    for start in range(0, len(data), size):
        stream += _zstd(data[start : start + size])
        marks.append((len(stream), min(start + size, len(data))))
    return stream, marks


def _zstd_flushed(data: bytes) -> tuple[bytes, list[tuple[int, int]]]:
    """``data`` as one zstd frame flushed after every line (as Spark's writer flushes each
    event), and the ``(compressed, decoded)`` offsets of each flush."""
    sink = io.BytesIO()
    marks, decoded = [], 0
    with pa.output_stream(sink, compression="zstd") as f:
        for line in data.splitlines(keepends=True):
            f.write(line)
            f.flush()
            decoded += len(line)
            marks.append((sink.getbuffer().nbytes, decoded))
        stream = sink.getvalue()
    return stream, marks


@pytest.mark.parametrize("layout", ["frames", "flushed"])
@pytest.mark.parametrize("decodable", [30_000, 100_000])
def test_cut_zstd_log_keeps_every_line_decoded_before_the_cut(
    tmp_path: Path, layout: str, decodable: int
) -> None:
    """A read meeting the cut lost what it had decoded (up to 64 KiB: all of a small log)."""
    data = _spark_bytes(_spark_events(400))
    stream, marks = _zstd_frames(data, 4999) if layout == "frames" else _zstd_flushed(data)
    end, decoded = next(m for m in marks if m[1] >= decodable)
    cut = tmp_path / "app-cut.zstd"
    cut.write_bytes(stream[: end + 7])  # into the next frame's header or the next block
    prefix = tmp_path / "app-prefix"  # what `zstd -dc` recovers from the cut file
    prefix.write_bytes(data[:decoded])
    n_lines = data[:decoded].count(b"\n")
    result, expected = read_spark_events(cut), read_spark_events(prefix)
    assert 0 < expected.table.num_rows == result.table.num_rows
    assert result.table["file_id"].to_pylist() == expected.table["file_id"].to_pylist()
    assert result.issues.counts == {"truncated compressed stream": 1}
    (example,) = result.issues.examples
    assert example.location == f"after line {n_lines}"
    assert f"the {n_lines} line(s) decoded before the cut were read" in example.detail
    assert sniff(cut) == (LogFormat.SPARK, Container.EVENTLOG)


def test_lz4_frame_file_in_a_directory_says_what_it_is(tmp_path: Path) -> None:
    """The lz4 tool's frame format inside a directory was an "unreadable file" (read like a
    permissions problem); it is the same specific reason as when named."""
    logs = tmp_path / "logs"
    logs.mkdir()
    frame = logs / "app-1.lz4"
    frame.write_bytes(pa.compress(_spark_bytes(_spark_events(20)), codec="lz4", asbytes=True))
    with pytest.raises(FormatError, match=r"app-1\.lz4: an LZ4 frame file.*LZ4Block"):
        discover([frame])
    with pytest.raises(InputError) as exc:
        discover([logs])
    message = str(exc.value)
    assert "unsupported or damaged file (skipped)" in message and "unreadable" not in message
    assert f"{frame}: an LZ4 frame file" in message and "lz4-java LZ4Block" in message
    _write_jsonl(logs / "log.jsonl", [_native_row(i) for i in range(3)])
    sources, issues = discover([logs])
    assert [s.path.name for s in sources] == ["log.jsonl"]
    assert issues.counts == {"unsupported or damaged file (skipped)": 1}
    assert issues.skipped_inputs == 1 and issues.malformed == 0
    (example,) = issues.examples
    assert example.source == str(frame) and "LZ4Block" in example.detail


# ----------------------------------------------------------------------------- discovery


def test_same_file_reached_twice_is_read_once(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    path = _write_jsonl(logs / "log.jsonl", [_native_row(i) for i in range(7)])
    (tmp_path / "link.jsonl").symlink_to(path)
    for args in (
        [logs, path],
        [path, logs],
        [logs, tmp_path / "logs" / ".." / "logs"],
        [path, tmp_path / "link.jsonl"],
    ):
        sources, issues = discover(args)
        assert len(sources) == 1, args
        assert issues.counts == {"duplicate path (read once)": 1}, args
        assert issues.skipped_inputs == 1 and issues.malformed == 0, args
        table, _ = read_table(args)
        assert table.num_rows == 7, args


def test_a_directory_named_twice_is_one_duplicate_however_many_files_it_holds(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _write_jsonl(logs / "a.jsonl", [_native_row(i) for i in range(3)])
    _write_jsonl(logs / "b.jsonl", [_native_row(i) for i in range(3, 5)])
    args = [logs, tmp_path / "logs" / ".." / "logs"]
    sources, issues = discover(args)
    assert [s.path.name for s in sources] == ["a.jsonl", "b.jsonl"]
    assert issues.counts == {"duplicate path (read once)": 1}
    table, _ = read_table(args)
    assert table.num_rows == 5


def test_a_file_that_cannot_be_read_in_a_directory_is_an_input_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error on one file of a directory (injected: root reads whatever the mode) skips
    that file, counted as an input not read rather than as malformed data; the others are
    read."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _write_jsonl(logs / "a.jsonl", [_native_row(i) for i in range(3)])
    _write_jsonl(logs / "b.jsonl", [_native_row(i) for i in range(3, 5)])

    def failing_sniff(path: Path) -> Any:
        if path.name == "b.jsonl":
            raise InputError(f"cannot read {path}: Input/output error")
        return sniff(path)

    monkeypatch.setattr("logs_analysis.formats.sniff", failing_sniff)
    sources, issues = discover([logs])
    assert [s.path.name for s in sources] == ["a.jsonl"]
    assert issues.counts == {"unreadable file": 1}
    assert issues.skipped_inputs == 1 and issues.malformed == 0
    assert "Input/output error" in issues.examples[0].detail


def test_special_files_in_a_directory_are_counted(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _write_jsonl(logs / "log.jsonl", [_native_row(i) for i in range(3)])
    (logs / "dangling").symlink_to(tmp_path / "missing")
    os.mkfifo(logs / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(logs / "sock"))
        sources, issues = discover([logs])
    finally:
        sock.close()
    assert [s.path.name for s in sources] == ["log.jsonl"]
    assert issues.counts == {"not a regular file (skipped)": 3}
    assert issues.skipped_inputs == 3 and issues.malformed == 0
    details = {Path(e.source).name: e.detail for e in issues.examples}
    assert "missing" in details["dangling"]
    assert details["pipe"] == "a FIFO" and details["sock"] == "a socket"


# ----------------------------------------------------------------------------- report output


def _report(args: list[str]) -> Any:
    from logs_analysis.cli import report_command

    return CliRunner().invoke(report_command, [*args, "--no-progress"])


def test_output_that_would_overwrite_an_input_is_refused(tmp_path: Path) -> None:
    events = _write_jsonl(tmp_path / "events.json", [_native_row(i) for i in range(30)])
    app = _write_jsonl(tmp_path / "app.log", [_native_row(i) for i in range(30, 60)])
    before = {p: p.read_bytes() for p in (events, app)}
    cases = {
        "events.html": "events.json",  # the JSON beside the HTML is the input
        "app.log": "app.log",  # the HTML is the input
    }
    for out, victim in cases.items():
        result = _report([str(events), str(app), "-o", str(tmp_path / out)])
        assert result.exit_code != 0, out
        assert isinstance(result.exception, SystemExit), result.exception  # no traceback
        assert victim in result.output and "choose another --out" in result.output
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.log", "events.json"]


def test_output_inside_an_input_directory_or_json_named_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _write_jsonl(logs / "log.jsonl", [_native_row(i) for i in range(30)])
    result = _report([str(logs), "-o", str(logs / "sub" / "r.html")])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit)
    assert "inside the input directory" in result.output
    assert "choose another --out" in result.output
    result = _report([str(logs), "-o", str(tmp_path / "out" / "r.json")])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit)
    assert "r.json" in result.output and "choose another --out" in result.output
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "logs",
        "logs/log.jsonl",
    ]


def test_report_write_checks_its_inputs(tmp_path: Path) -> None:
    from logs_analysis.report import Report

    log = _write_jsonl(tmp_path / "log.json", [_native_row(0)])
    report = Report(
        data={"inputs": {"paths": [str(log)], "sources": [{"path": str(log)}]}}, figures={}
    )
    with pytest.raises(OutputError, match=r"log\.json.*choose another --out"):
        report.write(tmp_path / "log.html")  # its JSON would replace the input
    assert log.read_text().count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.json"]


def test_check_output_paths(tmp_path: Path) -> None:
    from logs_analysis.report import check_output_paths

    (tmp_path / "in").mkdir()
    log = tmp_path / "in" / "a.jsonl"
    log.write_text("{}\n")
    assert check_output_paths(tmp_path / "r.html", [tmp_path / "in"], [log]) == (
        tmp_path / "r.html",
        tmp_path / "r.json",
    )
    with pytest.raises(OutputError, match="both be"):
        check_output_paths(tmp_path / "r.json")
    with pytest.raises(OutputError, match="inside the input directory"):
        check_output_paths(tmp_path / "in" / "r.html", [tmp_path / "in"], [log])
    with pytest.raises(OutputError, match="overwrite the input log"):
        check_output_paths(tmp_path / "in" / "a.jsonl", [log], [log])


# ----------------------------------------------------------------------------- figures


NASTY = ["etl_${ENV}_$(date +%F)", "price $\\foo$ job", "map at $\\bar{$:1", "Main$$anon$1"]


def test_figures_draw_names_with_dollars(tmp_path: Path) -> None:
    from logs_analysis import plots

    lo = np.linspace(-3, 2, 50)
    counts = np.ones(50)
    series = [(name, lo, counts) for name in NASTY]
    q = {"p5": 1e-3, "p25": 1e-2, "p50": 1e-1, "p75": 1.0, "p95": 10.0}
    uris = [
        plots.density_by_group(series, "t", "x"),
        plots.quantile_ranges([(name, q) for name in NASTY], "t", "x"),
        plots.shape_histograms([("a", "x", series), ("b", "y", series)]),
        plots.skew_curve([(name, [1e-3, 0.1, 1.0], [0.5, 0.9, 1.0]) for name in NASTY]),
        plots.savings_by_kind({"lightgbm": {name: 0.1 for name in NASTY}}, 0.05),
    ]
    assert all(u.startswith("data:image/png;base64,") for u in uris)


def test_labels_are_shown_literally() -> None:
    from matplotlib.text import Text

    from logs_analysis.plots import _short

    for name in NASTY:
        text = Text(text=_short(name, 100))
        shown, math = text._preprocess_math(text.get_text())
        assert not math and shown == name


# ----------------------------------------------------------------------------- histograms


def test_sizes_above_a_terabyte_keep_their_quantiles() -> None:
    from logs_analysis.histogram import bin_of, quantiles_from_counts

    values = np.array([2.2e12, 2.2e12, 5e15, 9.2e18])
    bins = np.unique(bin_of(values), return_counts=True)
    p50, p99 = quantiles_from_counts(bins[0], bins[1], [0.5, 0.99])
    assert 2.2e12 / 1.05 < 10**p50 < 2.2e12 * 1.05
    assert 9.2e18 / 1.05 < 10**p99 < 9.2e18 * 1.05


def test_outside_range_counts_values_beyond_the_bins() -> None:
    from logs_analysis.histogram import outside_range

    assert outside_range(np.array([2.2e12, 9.2e18, 1e-29])) == 0
    assert outside_range(np.array([0.0, 1.0, 1e-31, 1e20, np.inf])) == 3


def test_values_outside_the_histogram_range_are_reported(tmp_path: Path) -> None:
    from logs_analysis.aggregate import aggregate
    from logs_analysis.formats import discover as find
    from logs_analysis.readers import plan

    rows = [_native_row(i) for i in range(5)]
    rows.append(_native_row(5, deleted_at=1e25))  # a lifetime of 1e25 s: beyond 1e19
    path = _write_jsonl(tmp_path / "log.jsonl", rows)
    chunks, _ = plan(find([path])[0])
    agg = aggregate(chunks)
    assert agg.totals["outside_range_lifetime"] == 1
    assert agg.totals["outside_range_size"] == 0


# ----------------------------------------------------------------------------- darshan


def test_truncated_darshan_log_says_so_quietly(
    darshan_log: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from logs_analysis.readers.darshan import read_darshan

    torn = tmp_path / "torn.darshan"
    torn.write_bytes(darshan_log.read_bytes()[:3000])
    result = read_darshan(torn)
    assert result.table.num_rows == 0
    (example,) = result.issues.examples
    assert example.detail.startswith("damaged or truncated Darshan log")
    assert "Error:" in example.detail  # the parser's own message, quoted
    err = capfd.readouterr().err
    assert "Error:" not in err and "Unlinking" not in err and "double free" not in err


# ----------------------------------------------------------------------------- unreadable folders


def _deny_listing(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make listing any directory called ``name`` fail as an unreadable one does (an injected
    fault: root lists directories whatever their mode)."""
    real = Path.iterdir

    def iterdir(self: Path) -> Any:
        if self.name == name:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)


def test_unreadable_subdirectory_is_counted_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    (logs / "locked").mkdir(parents=True)
    _write_jsonl(logs / "a.jsonl", [_native_row(i) for i in range(4)])
    _write_jsonl(logs / "locked" / "b.jsonl", [_native_row(i, run_id="r2") for i in range(4)])
    _deny_listing(monkeypatch, "locked")
    sources, issues = discover([logs])
    assert [s.path.name for s in sources] == ["a.jsonl"]
    assert issues.counts == {"unreadable directory (skipped)": 1}
    assert issues.skipped_inputs == 1 and issues.malformed == 0
    (example,) = issues.examples
    assert example.source == str(logs / "locked")
    assert "Permission denied" in example.detail and "permissions" in example.detail
    table, _ = read_table([logs])
    assert table.num_rows == 4
    # named explicitly, it is a clear error, not a traceback
    with pytest.raises(InputError, match=r"cannot list the directory .*locked.*Permission denied"):
        discover([logs / "locked"])
    # and the report goes on, saying so
    out = tmp_path / "out" / "r.html"
    result = _report([str(logs), "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["issues"]["counts"] == {"unreadable directory (skipped)": 1}
    assert data["rows"]["usable"] == 4


def test_unreadable_subdirectory_by_its_mode(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root lists directories whatever their mode")
    logs = tmp_path / "logs"
    (logs / "locked").mkdir(parents=True)
    _write_jsonl(logs / "a.jsonl", [_native_row(i) for i in range(4)])
    _write_jsonl(logs / "locked" / "b.jsonl", [_native_row(i) for i in range(4)])
    (logs / "locked").chmod(0)
    try:
        sources, issues = discover([logs])
    finally:
        (logs / "locked").chmod(0o755)
    assert [s.path.name for s in sources] == ["a.jsonl"]
    assert issues.counts == {"unreadable directory (skipped)": 1}


def test_unlistable_rolling_event_log_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    rolling = logs / "eventlog_v2_app-1"
    rolling.mkdir(parents=True)
    (rolling / "events_1_app-1").write_bytes(_spark_bytes(_spark_events(5)))
    _write_jsonl(logs / "a.jsonl", [_native_row(i) for i in range(4)])
    _deny_listing(monkeypatch, rolling.name)
    table, issues = read_table([logs])
    assert table.num_rows == 4
    assert issues.counts == {"unreadable event log (skipped)": 1}
    assert "Permission denied" in issues.examples[0].detail


# ----------------------------------------------------------------------------- companion files


def test_collector_summary_json_is_not_a_malformed_log(tmp_path: Path) -> None:
    from placement.collect import SUMMARY_FILE

    logs = tmp_path / "logs"
    logs.mkdir()
    pq.write_table(pa.Table.from_pylist([_native_row(i) for i in range(5)]), logs / "io.parquet")
    summary = {"total": {"rows": 5}, "pipelines": {}, "runs": [], "failed_runs": []}
    (logs / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    (logs / "notes.txt").write_text("not a log\n")
    sources, issues = discover([logs])
    assert [s.path.name for s in sources] == ["io.parquet"]
    # the summary is left out without a word; another non-log file is still counted
    assert issues.counts == {"unrecognised format (skipped)": 1}
    assert issues.examples[0].source.endswith("notes.txt")
    # a real log of that name is read
    (logs / SUMMARY_FILE).write_text(json.dumps(_native_row(9)) + "\n")
    sources, _ = discover([logs])
    assert sorted(s.path.name for s in sources) == ["io.parquet", SUMMARY_FILE]
    from logs_analysis.formats import COMPANION_FILES

    assert SUMMARY_FILE in COMPANION_FILES


def test_skipped_inputs_are_told_apart_from_malformed_data(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    rows = [_native_row(i) for i in range(6)] + [_native_row(6, size_bytes=-1)]
    _write_jsonl(logs / "a.jsonl", rows)
    (logs / "README.md").write_text("# logs\n")
    (logs / "empty.jsonl").write_text("")
    out = tmp_path / "r.html"
    result = _report([str(logs), "-o", str(out)])
    assert result.exit_code == 0, result.output
    issues = json.loads(out.with_suffix(".json").read_text())["issues"]
    assert issues["total"] == 3
    assert issues["malformed"] == 1 and issues["skipped_inputs"] == 2
    assert "1 malformed or duplicate" in result.output and "2 input(s) not read" in result.output
    html = out.read_text()
    assert "2 input file(s) or folder(s) were not read" in html
    assert "1 malformed or duplicate line(s), record(s) or row(s)" in html


# ----------------------------------------------------------------------------- duplicates


DUPLICATE_ROW = "duplicate row (run_id and file_id read before; dropped)"


def test_rows_read_twice_are_dropped_and_counted(tmp_path: Path) -> None:
    from logs_analysis.aggregate import aggregate
    from logs_analysis.readers import plan

    logs = tmp_path / "logs"
    logs.mkdir()
    rows = [_native_row(i, run_id=f"r{i % 3}") for i in range(30)]
    original = _write_jsonl(logs / "a.jsonl", rows)
    (logs / "b-copy.jsonl").write_bytes(original.read_bytes())  # the same log, another name
    table, issues = read_table([logs])
    assert table.num_rows == 30 and issues.counts == {DUPLICATE_ROW: 30}
    # the same rows in Parquet (a file dictionary-encodes run_id), 5 new ones at its end
    more = rows[:10] + [_native_row(i, run_id="r9") for i in range(100, 105)]
    pq.write_table(pa.Table.from_pylist(more), logs / "c.parquet")
    table, issues = read_table([logs])
    assert table.num_rows == 35
    assert issues.counts == {DUPLICATE_ROW: 30 + 10}
    first = issues.examples[0]
    assert first.source == str(logs / "b-copy.jsonl") and first.location == "line 1"
    assert "file_id='f0'" in first.detail and f"already read from {original}" in first.detail
    # the aggregate pass (the report's) drops the same rows
    sources, found = discover([logs])
    chunks, _ = plan(sources)
    agg = aggregate(chunks, issues=found)
    assert agg.rows == 35 and agg.issues.counts == {DUPLICATE_ROW: 40}
    assert int(agg.histogram("density", "overall").frame["n"].sum()) == 35
    assert agg.sources == {str(original): 30, str(logs / "c.parquet"): 5}
    # a key repeated inside one file is a duplicate too; without any, nothing is dropped
    single = _write_jsonl(tmp_path / "one.jsonl", [_native_row(0), _native_row(1), _native_row(0)])
    table, issues = read_table([single])
    assert table.num_rows == 2 and issues.counts == {DUPLICATE_ROW: 1}
    table, issues = read_table([original])
    assert table.num_rows == 30 and not issues
    from logs_analysis import validate

    assert validate.DUPLICATE_ROW == DUPLICATE_ROW


# ----------------------------------------------------------------------------- spark metrics


def test_non_numeric_spark_metrics_are_malformed_events(tmp_path: Path) -> None:
    events = _spark_events(20)
    first_task = next(i for i, e in enumerate(events) if e["Event"] == "SparkListenerTaskEnd")
    written = events[first_task]["Task Metrics"]["Shuffle Write Metrics"]
    written["Shuffle Bytes Written"] = str(written["Shuffle Bytes Written"])  # "10000"
    events[first_task + 1]["Task Metrics"]["Input Metrics"] = "lots"
    events[first_task + 2]["Task Metrics"]["Disk Bytes Spilled"] = True
    del events[first_task + 3]["Task Metrics"]["Input Metrics"]  # absent: 0, not malformed
    path = tmp_path / "app-strings"
    path.write_bytes(_spark_bytes(events))
    result = read_spark_events(path)
    assert result.table.num_rows == 17
    assert result.issues.counts == {"malformed Spark event": 3}
    details = " | ".join(e.detail for e in result.issues.examples)
    assert "Shuffle Write Metrics/Shuffle Bytes Written='10000' is not a number" in details
    assert "Input Metrics='lots' is not an object" in details
    assert "Disk Bytes Spilled=True is not a number" in details
    assert sorted(e.line for e in result.issues.examples) == [
        first_task + 1,
        first_task + 2,
        first_task + 3,
    ]


def test_event_log_without_listener_events_is_an_input_not_read(
    spark_dir: Path, tmp_path: Path
) -> None:
    """A rolling event-log directory whose events file holds no listener event (here the
    README of the real logs) is one input not read, beside the real logs, and says what it
    holds; its lines are not counted as malformed events."""
    from logs_analysis.issues import SKIPPED_INPUT_REASONS
    from logs_analysis.readers.spark import NO_EVENTS

    assert NO_EVENTS in SKIPPED_INPUT_REASONS
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "local-1430917381534").write_bytes((spark_dir / "local-1430917381534").read_bytes())
    rolling = logs / "eventlog_v2_app-0001"
    rolling.mkdir()
    readme = (spark_dir / "README.md").read_text()
    (rolling / "events_1_app-0001").write_text(readme)
    n_lines = sum(1 for line in readme.splitlines() if line.strip())
    table, issues = read_table([logs])
    assert table.num_rows > 0  # the real log is read
    assert issues.counts == {NO_EVENTS: 1}
    assert issues.skipped_inputs == 1 and issues.malformed == 0
    (example,) = issues.examples
    assert example.source == str(rolling)
    assert f"none of its {n_lines} non-blank line(s) is a Spark listener event" in example.detail
    assert "events_1_app-0001 line 1" in example.detail
    # a file forced as Spark that holds JSON objects of another kind says so
    jsonl = _write_jsonl(tmp_path / "rows.jsonl", [_native_row(i) for i in range(3)])
    with pytest.raises(InputError, match='3 JSON but not an object with an "Event" name'):
        read_table([jsonl], LogFormat.SPARK)
    # and the report counts it as an input not read
    res = _report([str(logs), "--out", str(tmp_path / "out" / "r.html")])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "out" / "r.json").read_text())
    assert report["issues"]["skipped_inputs"] == 1 and report["issues"]["malformed"] == 0
    assert report["report_version"] == 3


def test_compressed_log_cut_before_its_first_line_is_counted_once(tmp_path: Path) -> None:
    stream = _zstd(_spark_bytes(_spark_events(40)))
    cut = tmp_path / "app-cut.zstd"
    cut.write_bytes(stream[: len(stream) // 2])
    result = read_spark_events(cut)
    assert result.table.num_rows == 0  # one zstd block: nothing decodes before the cut
    assert result.issues.counts == {"truncated compressed stream": 1}


def test_csv_output_is_checked_with_the_others(tmp_path: Path) -> None:
    from logs_analysis.report import check_output_paths, csv_path_for

    html = tmp_path / "report.html"
    assert csv_path_for(html) == tmp_path / "report.groups.csv"
    log = tmp_path / "report.groups.csv"
    check_output_paths(html, [log])  # without --csv the CSV is not written
    with pytest.raises(OutputError, match="the CSV beside --out .* would overwrite the input"):
        check_output_paths(html, [log], csv=True)
