"""Row filters of the report (``--pipeline``, ``--since``, ``--until``), on real logs.

The rows (``real_rows``, written as Parquet in ``native_dir``) are placement log rows of
pipelines "pipe0" and "pipe1" (three runs each, one after another in November 2023) and the
214 Darshan records of pipeline "dxt" (created on 2020-04-21 from 07:45:33 to 08:10:00 UTC).
The Spark logs (shared folder) are filtered by their own test.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from logs_analysis.aggregate import AggregateConfig, aggregate
from logs_analysis.cli import report_command
from logs_analysis.errors import AnalysisConfigError
from logs_analysis.filters import (
    PIPELINE,
    TIME_RANGE,
    FilterStats,
    RowFilter,
    parse_time,
    unknown_pipelines_message,
)
from logs_analysis.formats import discover
from logs_analysis.readers import plan, read_table
from logs_analysis.report import CSV_COLUMNS, ReportConfig
from placement.logwriter import LogWriter

UTC = dt.timezone.utc


def _report(args: list[str]) -> Any:
    return CliRunner().invoke(report_command, [*args, "--no-progress"])


def _aggregate(paths: list[Path], **options: Any) -> Any:
    sources, issues = discover(paths)
    chunks, more = plan(sources)
    issues.merge(more)
    return aggregate(
        chunks, AggregateConfig(scheduler="sync", **options), issues=issues, paths=paths
    )


def _created_at_least(rows: pa.Table, when: dt.datetime) -> pa.Table:
    return rows.filter(pc.greater_equal(rows["created_at"], when.timestamp()))


def _of_pipeline(rows: pa.Table, name: str) -> pa.Table:
    return rows.filter(pc.equal(rows["pipeline"], name))


def _listed(rows: pa.Table) -> str:
    """``a (12 files), b (3 files)``: the pipelines of ``rows``, most files first."""
    counts = rows["pipeline"].value_counts().to_pylist()
    ordered = sorted(((c["values"], c["counts"]) for c in counts), key=lambda v: (-v[1], v[0]))
    return ", ".join(f"{name} ({n:,} files)" for name, n in ordered)


# ----------------------------------------------------------------------------- configuration


def test_config_checks_the_filters_when_made() -> None:
    config = ReportConfig(
        pipelines=("dxt", "merge", "dxt"),
        since="2020-04-21T09:45:33+02:00",
        until="2020-04-22",
    )
    assert config.pipelines == ("dxt", "merge")  # a name given twice counts once
    assert config.since == dt.datetime(2020, 4, 21, 7, 45, 33, tzinfo=UTC)
    assert config.until == dt.datetime(2020, 4, 22, tzinfo=UTC)  # no offset: UTC
    assert config.row_filter.active and not ReportConfig().row_filter.active
    with pytest.raises(
        AnalysisConfigError,
        match=r"--since 2020-04-22T00:00:00\+00:00 is not before --until "
        r"2020-04-21T00:00:00\+00:00",
    ):
        ReportConfig(since="2020-04-22", until="2020-04-21")
    with pytest.raises(AnalysisConfigError, match="is not before --until"):
        ReportConfig(since="2020-04-22T02:00+02:00", until="2020-04-22")  # the same instant
    with pytest.raises(AnalysisConfigError, match=r"since='yesterday' \(--since\) is not an ISO"):
        ReportConfig(since="yesterday")
    with pytest.raises(AnalysisConfigError, match=r"until=1587455133 \(--until\) must be"):
        ReportConfig(until=1587455133)
    with pytest.raises(AnalysisConfigError, match="must be a sequence of pipeline names"):
        ReportConfig(pipelines="dxt")
    with pytest.raises(AnalysisConfigError, match="must be a non-empty string"):
        ReportConfig(pipelines=("",))


def test_cli_refuses_a_range_that_holds_no_time(tmp_path: Path) -> None:
    res = _report(
        [str(tmp_path), "--since", "2020-04-22", "--until", "2020-04-21T12:00", "-o", "r.html"]
    )
    assert res.exit_code == 2, res.output  # a usage error, before any input is read
    assert "--since 2020-04-22T00:00:00+00:00 is not before --until" in res.output
    assert "2020-04-21T12:00:00+00:00" in res.output


# ----------------------------------------------------------------------------- the pass


def test_filters_select_the_rows_of_every_summary(
    native_dir: Path, real_rows: pa.Table, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(native_dir, logs)
    first = min(logs.glob("*.parquet"))
    shutil.copyfile(first, logs / "copy.parquet")  # its rows again: duplicates
    pipe1 = _of_pipeline(real_rows, "pipe1")
    # a whole second, midway through the pipeline's runs
    middle = float(np.median(pipe1["created_at"].to_numpy()))
    since = dt.datetime.fromtimestamp(middle, UTC).replace(microsecond=0)
    everything = _aggregate([logs])
    agg = _aggregate([logs], row_filter=RowFilter(pipelines=("pipe1",), since=since.isoformat()))
    expected = _created_at_least(pipe1, since)
    assert 0 < expected.num_rows < pipe1.num_rows  # its later runs only
    assert 1 < len(set(expected["run_id"].to_pylist())) < len(set(pipe1["run_id"].to_pylist()))
    assert agg.rows == expected.num_rows
    assert agg.usable_rows == everything.rows == real_rows.num_rows
    assert agg.filtered.removed == {
        "pipeline": real_rows.num_rows - pipe1.num_rows,
        "created_at": pipe1.num_rows - expected.num_rows,
    }
    # issues do not depend on the filters: the duplicates are counted either way
    assert agg.issues.counts == everything.issues.counts
    assert sum(agg.issues.counts.values()) > 0
    # every summary holds only the rows selected
    assert agg.totals["bytes"] == pc.sum(expected["size_bytes"]).as_py()
    assert agg.totals["created_min"] >= since.timestamp()
    assert set(agg.runs["pipeline"]) == {"pipe1"}
    assert set(agg.runs["run_id"]) == set(expected["run_id"].to_pylist())
    assert agg.histogram("density", "pipeline").keys() == ["pipe1"]
    assert set(agg.sample["pipeline"]) == {"pipe1"}
    assert (agg.sample["created_at"] >= since.timestamp()).all()
    assert sum(agg.sources.values()) == expected.num_rows


def test_a_filter_that_keeps_few_rows_still_fills_the_sample(
    native_dir: Path, real_rows: pa.Table
) -> None:
    """The sampling rate is set for all rows (100 of 538); when the filter keeps 162 of them,
    the sample is drawn again at the rate of those, not left at a third of its size."""

    kept = _of_pipeline(real_rows, "pipe0").num_rows
    assert kept < 0.4 * real_rows.num_rows
    agg = _aggregate([native_dir], sample_rows=100, row_filter=RowFilter(pipelines=("pipe0",)))
    assert agg.rows == kept
    assert set(agg.sample["pipeline"]) == {"pipe0"}
    # about 100; at the first rate about 100 * kept / rows, i.e. 30
    assert len(agg.sample) >= 75, len(agg.sample)


# ----------------------------------------------------------------------------- the report


def test_report_says_which_filters_removed_which_rows(
    native_dir: Path, real_rows: pa.Table, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out" / "r.html"
    until = "2020-04-21T08:00:00"
    with caplog.at_level(logging.WARNING, logger="logs_analysis.report"):
        res = _report(
            [
                str(native_dir),
                "--pipeline",
                "dxt",
                "--pipeline",
                "pipe_1",  # a typo: no such pipeline
                "--until",
                until,
                "--csv",
                "-o",
                str(out),
            ]
        )
    assert res.exit_code == 0, res.output
    dxt = _of_pipeline(real_rows, "dxt")
    later = _created_at_least(dxt, dt.datetime.fromisoformat(until).replace(tzinfo=UTC))
    kept_rows = dxt.num_rows - later.num_rows
    assert 0 < kept_rows < dxt.num_rows
    removed = real_rows.num_rows - kept_rows
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["filters"] == {
        "applied": True,
        "pipelines": ["dxt", "pipe_1"],
        "since": None,
        "until": "2020-04-21T08:00:00+00:00",
        "removed": {
            "pipeline": real_rows.num_rows - dxt.num_rows,
            "created_at": dxt.num_rows - kept_rows,
        },
        "unknown_pipelines": ["pipe_1"],
    }
    assert data["rows"]["usable"] == real_rows.num_rows
    assert data["rows"]["removed_by_filters"] == removed
    assert data["rows"]["selected"] == data["totals"]["files"] == kept_rows
    assert data["totals"]["pipelines"] == 1
    assert [d["key"] for d in data["density"]["pipeline"]] == [["dxt"]]
    assert sum(s["rows"] for s in data["inputs"]["sources"]) == kept_rows
    usable = real_rows.num_rows
    assert f"{kept_rows:,} files (the filters removed {removed:,} of {usable:,})" in res.output
    # the name that matched nothing: a warning naming the pipelines there are
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "--pipeline 'pipe_1' matches no usable row" in warned
    assert "did you mean 'pipe1'" in warned
    assert _listed(real_rows) in warned
    assert _listed(real_rows).startswith("dxt (214 files), pipe0 (")
    # the HTML says it too
    html = out.read_text()
    assert "Filters applied: pipeline dxt or pipe_1; created before " in html
    assert f"They removed {removed:,} of {usable:,} usable rows" in html
    assert "<code>pipe_1</code>" in html
    # --csv: the per-group table beside the HTML, named in the JSON
    csv_path = out.with_name("r.groups.csv")
    assert data["outputs"] == {"csv": ["r.groups.csv"]}
    assert str(csv_path) in res.output and "r.groups.csv" in html
    lines = csv_path.read_text().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    groups = [d for v in ("density", "lifetime", "size") for g in data[v].values() for d in g]
    assert len(lines) == 1 + len(groups)
    row = next(line.split(",") for line in lines if line.startswith("density,"))
    assert row[2:5] == ["overall", "all", str(kept_rows)]
    assert float(row[CSV_COLUMNS.index("p50")]) == pytest.approx(
        data["density"]["overall"][0]["quantiles"]["p50"]
    )


def test_filters_that_keep_nothing_end_with_a_clear_message(
    native_dir: Path, real_rows: pa.Table, tmp_path: Path
) -> None:
    out = str(tmp_path / "r.html")
    res = _report([str(native_dir), "--pipeline", "nope", "-o", out])
    assert res.exit_code == 1 and "Traceback" not in res.output
    message = " ".join(res.output.split())
    assert message.startswith(
        f"Error: the filters leave none of the {real_rows.num_rows:,} usable rows to analyse"
    )
    assert "--pipeline 'nope' matches no usable row" in message
    assert f"the pipelines in these logs are: {_listed(real_rows)}" in message
    res = _report([str(native_dir), "--pipeline", "dxt", "--since", "2030-01-01", "-o", out])
    assert res.exit_code == 1 and "Traceback" not in res.output
    message = " ".join(res.output.split())
    assert "--since 2030-01-01T00:00:00+00:00 keeps none of the 214 rows of pipeline dxt" in message
    assert "created from 2020-04-21T07:45:33+00:00 to 2020-04-21T08:10:00+00:00 (UTC)" in message
    assert not (tmp_path / "r.html").exists()


def test_spark_and_darshan_logs_are_filtered_by_creation_time(
    spark_dir: Path, darshan_log: Path, tmp_path: Path
) -> None:
    """Spark records are created at their task's launch, Darshan records at their first open:
    2016-2019 keeps only the 2018 Spark application."""

    real_rows, _ = read_table([spark_dir, darshan_log])
    out = tmp_path / "r.html"
    res = _report(
        [str(spark_dir), str(darshan_log), "--since", "2016", "--until", "2019", "-o", str(out)]
    )
    assert res.exit_code == 2 and "not an ISO 8601" in res.output  # a year alone is not a date
    res = _report(
        [
            str(spark_dir),
            str(darshan_log),
            *("--since", "2016-01-01", "--until", "2019-01-01T00:00:00Z", "-o", str(out)),
        ]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.with_suffix(".json").read_text())
    in_2018 = _created_at_least(real_rows, dt.datetime(2016, 1, 1, tzinfo=UTC))
    in_2018 = in_2018.filter(
        pc.less(in_2018["created_at"], dt.datetime(2019, 1, 1, tzinfo=UTC).timestamp())
    )
    assert set(in_2018["run_id"].to_pylist()) == {"application_1506645932520_24630151"}
    assert data["totals"]["files"] == in_2018.num_rows and data["totals"]["runs"] == 1
    assert data["filters"]["removed"] == {"created_at": real_rows.num_rows - in_2018.num_rows}
    by_source = {Path(s["path"]).name: s["rows"] for s in data["inputs"]["sources"]}
    assert by_source["application_1506645932520_24630151"] == in_2018.num_rows
    assert by_source["local-1430917381534"] == 0 and by_source["dxt.darshan"] == 0


@pytest.mark.parametrize("when", ["2026-11-24T04:20:00", "2026-11-24T04:20:00.250"])
def test_since_is_inclusive_and_until_exclusive(when: str) -> None:
    t = dt.datetime.fromisoformat(when).replace(tzinfo=UTC).timestamp()
    table = pa.table({"created_at": pa.array([t - 1, t, t + 1], pa.float64())})
    kept, stats = RowFilter(since=when).apply(table)
    assert kept["created_at"].to_pylist() == [t, t + 1]
    assert stats.removed == {TIME_RANGE: 1}
    kept, stats = RowFilter(until=when).apply(table)
    assert kept["created_at"].to_pylist() == [t - 1]
    assert stats.removed == {TIME_RANGE: 2}
    kept, stats = RowFilter(since=when, until=dt.datetime.fromtimestamp(t + 1, UTC)).apply(table)
    assert kept["created_at"].to_pylist() == [t]
    assert stats.removed == {TIME_RANGE: 2}
    # a file created a fraction of a second before either end
    near = pa.table({"created_at": pa.array([t - 0.125, t], pa.float64())})
    assert RowFilter(since=when).apply(near)[0]["created_at"].to_pylist() == [t]
    assert RowFilter(until=when).apply(near)[0]["created_at"].to_pylist() == [t - 0.125]


def test_a_range_that_keeps_nothing_names_the_creation_times_of_every_file(
    real_rows: pa.Table, tmp_path: Path
) -> None:
    # the earliest and the latest creation times in files of their own, neither the
    # first file nor the last
    ordered = real_rows.sort_by("created_at").to_pylist()
    q = len(ordered) // 4
    rows = ordered[q : 2 * q] + ordered[:q] + ordered[3 * q :] + ordered[2 * q : 3 * q]
    logs = tmp_path / "logs"
    with LogWriter(logs, max_rows=100, prefix="w0") as writer:
        for row in rows:
            writer.add(row)
    created = real_rows["created_at"].to_numpy()
    spans = [_created_span(f) for f in sorted(logs.glob("*.parquet"))]
    holds_min = [i for i, (lo, _) in enumerate(spans) if lo == created.min()]
    holds_max = [i for i, (_, hi) in enumerate(spans) if hi == created.max()]
    assert len(spans) > 3 and holds_min and holds_max
    assert not set(holds_min + holds_max) & {0, len(spans) - 1, *(set(holds_min) & set(holds_max))}
    out = str(tmp_path / "r.html")
    res = _report([str(logs), "--since", "2090-01-01", "-o", out])
    assert res.exit_code == 1 and "Traceback" not in res.output
    message = " ".join(res.output.split())
    low, high = (
        dt.datetime.fromtimestamp(float(v), UTC).isoformat(timespec="seconds")
        for v in (created.min(), created.max())
    )
    assert (
        f"--since 2090-01-01T00:00:00+00:00 keeps none of them; they were created from {low} "
        f"to {high} (UTC)"
    ) in message


def _created_span(path: Path) -> tuple[float, float]:
    created = pq.read_table(path, columns=["created_at"])["created_at"].to_numpy()
    return float(created.min()), float(created.max())


# ----------------------------------------------------------------------------- times and names


def test_a_time_without_an_offset_is_utc_whatever_the_local_time_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "JST-9")  # nine hours ahead of UTC, no daylight saving
    time.tzset()
    try:
        assert time.timezone == -9 * 3600
        row_filter = RowFilter(since="2026-11-24T04:20", until=dt.datetime(2026, 11, 24, 5))
        assert row_filter.since == dt.datetime(2026, 11, 24, 4, 20, tzinfo=UTC)
        assert row_filter.until == dt.datetime(2026, 11, 24, 5, tzinfo=UTC)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_date_is_midnight_utc_of_that_day() -> None:
    assert parse_time(dt.date(2020, 4, 21), "since") == dt.datetime(2020, 4, 21, tzinfo=UTC)
    assert parse_time("2020-04-21", "until") == dt.datetime(2020, 4, 21, tzinfo=UTC)


def test_a_time_range_after_a_pipeline_filter_that_kept_nothing_removes_zero_rows() -> None:
    table = pa.table({"pipeline": ["a", "b", "a"], "created_at": [1.0, 2.0, 3.0]})
    kept, stats = RowFilter(pipelines=("c",), since="1970-01-01T00:00:02").apply(table)
    assert kept.num_rows == 0
    assert stats.removed == {PIPELINE: 3, TIME_RANGE: 0}
    assert stats.pipelines == {"a": 2, "b": 1}


@pytest.mark.parametrize("count", [30, 32])
def test_the_pipelines_named_are_the_thirty_largest_then_a_count_of_the_rest(count: int) -> None:
    stats = FilterStats(pipelines={f"p{i:02d}": 100 - i for i in range(count)})
    message = unknown_pipelines_message(RowFilter(pipelines=("zzz",)), stats)
    listed = message.split("the pipelines in these logs are: ")[1]
    names = [f"p{i:02d} ({100 - i} files)" for i in range(30)]
    assert listed == ", ".join(names) + ("" if count == 30 else " and 2 more")


def test_a_pipeline_name_found_inside_a_longer_one_is_suggested() -> None:
    stats = FilterStats(pipelines={"nightly-etl-job": 5, "merge": 3})
    message = unknown_pipelines_message(RowFilter(pipelines=("ETL",)), stats)
    assert "--pipeline 'ETL' matches no usable row (did you mean 'nightly-etl-job' for 'ETL'?)" in (
        message
    )
