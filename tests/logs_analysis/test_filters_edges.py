"""Row filters at their edges: how times and names are read, what the options say back, and
the messages of a filter that matches nothing, on small placement logs written as Parquet.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from logs_analysis.cli import report_command
from logs_analysis.errors import AnalysisConfigError
from logs_analysis.filters import (
    PIPELINE,
    TIME_RANGE,
    FilterStats,
    RowFilter,
    empty_selection_message,
    parse_time,
    unknown_pipelines_message,
)
from tests.placement.logtables import make_log

UTC = dt.timezone.utc
#: Where ``make_log`` starts its first run (seconds since the Unix epoch): 2023-11-14.
START = 1_700_000_000.0


def _report(args: list[str]) -> Result:
    return CliRunner().invoke(report_command, [*args, "--no-progress"])


def _message(result: Result) -> str:
    """The error of a report that ended with one, on one line."""
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    return " ".join(result.output.split())


def _write_log(directory: Path, table: pa.Table, name: str = "w0-000001.parquet") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, directory / name)
    return directory


class _NoOffset(dt.tzinfo):
    """A time zone that knows no UTC offset (``utcoffset`` returns None, as Python allows)."""

    def utcoffset(self, when: dt.datetime | None) -> dt.timedelta | None:
        return None

    def dst(self, when: dt.datetime | None) -> dt.timedelta | None:
        return None

    def tzname(self, when: dt.datetime | None) -> str | None:
        return None


# ----------------------------------------------------------------------------- times


def test_a_time_may_have_blanks_around_it() -> None:
    """A time pasted with spaces or a newline around it reads as the time itself."""
    assert parse_time("  2026-11-24T05:20:00+01:00\n", "since") == dt.datetime(
        2026, 11, 24, 4, 20, tzinfo=UTC
    )
    row_filter = RowFilter(until=" 2026-11-24 ")
    assert row_filter.until == dt.datetime(2026, 11, 24, tzinfo=UTC)


def test_a_time_that_does_not_parse_names_its_own_option() -> None:
    """A bad --until is reported as --until (and a bad --since as --since), with its value."""
    with pytest.raises(AnalysisConfigError, match=r"until='tomorrow' \(--until\) is not an ISO"):
        RowFilter(until="tomorrow")
    with pytest.raises(AnalysisConfigError, match=r"since='tomorrow' \(--since\) is not an ISO"):
        RowFilter(since="tomorrow")


@pytest.mark.parametrize("key", ["since", "until"])
def test_an_empty_time_is_refused_not_left_open(key: str) -> None:
    """An empty --since or --until is an error naming it, not a range left open."""
    with pytest.raises(AnalysisConfigError, match=rf"{key}='' \(--{key}\) is not an ISO 8601"):
        RowFilter(**{key: ""})


def test_a_time_zone_without_an_offset_is_taken_as_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """A datetime whose time zone gives no UTC offset is read as UTC, like a naive one, not as
    local time."""
    monkeypatch.setenv("TZ", "JST-9")  # nine hours ahead of UTC, no daylight saving
    time.tzset()
    try:
        assert time.timezone == -9 * 3600
        when = dt.datetime(2026, 11, 24, 4, 20, tzinfo=_NoOffset())
        assert parse_time(when, "since") == dt.datetime(2026, 11, 24, 4, 20, tzinfo=UTC)
    finally:
        monkeypatch.undo()
        time.tzset()


# ----------------------------------------------------------------------------- names


def test_pipeline_names_must_be_a_sequence_of_strings() -> None:
    """None, a set or a name that is not a string is refused with the option named."""
    for pipelines in (None, {"merge"}, 7):
        with pytest.raises(AnalysisConfigError, match="must be a sequence of pipeline names"):
            RowFilter(pipelines=pipelines)  # type: ignore[arg-type]
    with pytest.raises(AnalysisConfigError, match=r"pipeline name 7 \(--pipeline\) must be a"):
        RowFilter(pipelines=("merge", 7))  # type: ignore[arg-type]


def test_pipeline_names_keep_the_order_given() -> None:
    """Names are kept in the order given (a repeat dropped), and said back in that order."""
    row_filter = RowFilter(pipelines=("sort", "merge", "sort", "dxt"))
    assert row_filter.pipelines == ("sort", "merge", "dxt")
    assert row_filter.to_dict()["pipelines"] == ["sort", "merge", "dxt"]
    assert row_filter.describe() == "--pipeline sort --pipeline merge --pipeline dxt"
    assert row_filter.unknown_pipelines(FilterStats(pipelines={"merge": 4})) == ["sort", "dxt"]


# ----------------------------------------------------------------------------- options


def test_describe_gives_the_filters_as_options() -> None:
    """Every filter as its option, pipelines first then --since then --until; ``which``
    limits it to the pipelines or to the time range."""
    row_filter = RowFilter(
        pipelines=("merge", "sort"), since="2026-11-24T04:20", until="2026-11-24T06:20+01:00"
    )
    names = "--pipeline merge --pipeline sort"
    times = "--since 2026-11-24T04:20:00+00:00 --until 2026-11-24T05:20:00+00:00"
    assert row_filter.describe() == f"{names} {times}"
    assert row_filter.describe(PIPELINE) == names
    assert row_filter.describe(TIME_RANGE) == times
    assert RowFilter(until="2026-11-24").describe() == "--until 2026-11-24T00:00:00+00:00"
    assert RowFilter().describe() == ""


# ----------------------------------------------------------------------------- the pass


def test_an_until_after_a_pipeline_filter_that_kept_nothing_removes_zero_rows() -> None:
    """--until alone, like --since, counts the rows it removed (none) when the pipeline filter
    left it no row."""
    table = pa.table({"pipeline": ["a", "b", "a"], "created_at": [1.0, 2.0, 3.0]})
    kept, stats = RowFilter(pipelines=("c",), until="1970-01-01T00:00:02").apply(table)
    assert kept.num_rows == 0
    assert stats.removed == {PIPELINE: 3, TIME_RANGE: 0}
    assert stats.total_removed == 3


# ----------------------------------------------------------------------------- messages


def test_pipelines_with_as_many_files_are_listed_by_name() -> None:
    """Pipelines are listed most files first, and by name among those with as many files,
    with the counts grouped by thousands."""
    stats = FilterStats(pipelines={"sort": 7, "merge": 7, "terasort": 1204, "dxt": 9})
    message = unknown_pipelines_message(RowFilter(pipelines=("zzz",)), stats)
    assert message.endswith(
        "the pipelines in these logs are: terasort (1,204 files), dxt (9 files), "
        "merge (7 files), sort (7 files)"
    )


def test_logs_without_pipelines_are_said_to_hold_none() -> None:
    """With no usable row, the list of pipelines reads "none"."""
    message = unknown_pipelines_message(RowFilter(pipelines=("merge",)), FilterStats())
    assert message == (
        "--pipeline 'merge' matches no usable row; the pipelines in these logs are: none"
    )


def test_a_name_like_none_of_the_pipelines_gets_no_suggestion() -> None:
    """A name close to no pipeline (teragen and terasort share half their letters) is told
    with the pipelines there are and nothing else."""
    stats = FilterStats(pipelines={"terasort": 3})
    message = unknown_pipelines_message(RowFilter(pipelines=("teragen",)), stats)
    assert message == (
        "--pipeline 'teragen' matches no usable row; the pipelines in these logs are: "
        "terasort (3 files)"
    )


def test_only_the_names_that_match_nothing_are_told_and_suggested() -> None:
    """Of the names given, only those that match nothing are named, in the order given, with
    "match" for several; a close pipeline name (tpch for tpcds) is suggested for them."""
    stats = FilterStats(pipelines={"tpcds": 1204, "merge": 3})
    row_filter = RowFilter(pipelines=("tpch", "merge", "zzz"))
    assert unknown_pipelines_message(row_filter, stats) == (
        "--pipeline 'tpch', 'zzz' match no usable row (did you mean 'tpcds' for 'tpch'?); "
        "the pipelines in these logs are: tpcds (1,204 files), merge (3 files)"
    )


def test_a_name_in_other_letter_case_is_suggested_before_a_longer_name() -> None:
    """A pipeline that is the name in other letter case is suggested rather than a longer one
    holding it; a longer one is found whatever the letter case of either."""
    stats = FilterStats(pipelines={"nightly-etl-job": 5, "etl": 3})
    message = unknown_pipelines_message(RowFilter(pipelines=("ETL",)), stats)
    assert "(did you mean 'etl' for 'ETL'?)" in message
    stats = FilterStats(pipelines={"Nightly-ETL-Job": 5})
    message = unknown_pipelines_message(RowFilter(pipelines=("etl",)), stats)
    assert "(did you mean 'Nightly-ETL-Job' for 'etl'?)" in message


def test_a_range_that_keeps_nothing_without_known_times_says_so() -> None:
    """When no creation time was seen, the message says the times are unknown."""
    message = empty_selection_message(
        RowFilter(since="2026-11-24"), FilterStats(removed={TIME_RANGE: 5}), 5
    )
    assert message == (
        "the filters leave none of the 5 usable rows to analyse: --since "
        "2026-11-24T00:00:00+00:00 keeps none of them; their creation times are unknown; "
        "widen the range or leave it out"
    )


# ----------------------------------------------------------------------------- the report


def test_a_range_that_keeps_none_of_the_pipelines_rows_names_the_range_and_them(
    tmp_path: Path,
) -> None:
    """The error names the time options alone, the rows of the pipelines given (several, by
    name) and when those rows were created."""
    rows = make_log(pipelines=3, runs=1, files_per_stage=4)
    logs = _write_log(tmp_path / "logs", rows)
    chosen = rows.filter(pc.is_in(rows["pipeline"], pa.array(["pipe0", "pipe2"])))
    assert 0 < chosen.num_rows < rows.num_rows
    low, high = (
        dt.datetime.fromtimestamp(v, UTC).isoformat(timespec="seconds")
        for v in (pc.min(chosen["created_at"]).as_py(), pc.max(chosen["created_at"]).as_py())
    )
    assert low != high
    res = _report(
        [
            str(logs),
            *("--pipeline", "pipe0", "--pipeline", "pipe2"),
            *("--since", "2030-01-01", "--until", "2031-01-01"),
            *("-o", str(tmp_path / "r.html")),
        ]
    )
    assert _message(res) == (
        f"Error: the filters leave none of the {rows.num_rows} usable rows to analyse: "
        "--since 2030-01-01T00:00:00+00:00 --until 2031-01-01T00:00:00+00:00 keeps none of "
        f"the {chosen.num_rows} rows of pipeline pipe0, pipe2; they were created from {low} "
        f"to {high} (UTC); widen the range or leave it out"
    )


def test_creation_times_past_the_calendar_are_named_in_seconds(tmp_path: Path) -> None:
    """Creation times written in milliseconds (past the year 9999 when read as seconds) are
    named in seconds in the error of a range that keeps none of them."""
    rows = make_log(pipelines=1, runs=1, files_per_stage=4)
    for name in ("created_at", "deleted_at"):
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, name, pc.multiply(rows[name], 1000.0))
    logs = _write_log(tmp_path / "logs", rows)
    low, high = pc.min(rows["created_at"]).as_py(), pc.max(rows["created_at"]).as_py()
    res = _report([str(logs), "--until", "2020-01-01", "-o", str(tmp_path / "r.html")])
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    assert _message(res).endswith(
        "--until 2020-01-01T00:00:00+00:00 keeps none of them; they were created from "
        f"{low:g} s since the Unix epoch to {high:g} s since the Unix epoch (UTC); widen the "
        "range or leave it out"
    )
