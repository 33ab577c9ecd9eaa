"""A time whose UTC offset moves it past the first or the last day a datetime can hold is a
bad --since or --until, refused like any time that does not parse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from logs_analysis.cli import report_command
from logs_analysis.errors import AnalysisConfigError
from logs_analysis.filters import RowFilter, parse_time


@pytest.mark.parametrize(
    ("key", "value"),
    [("since", "0001-01-01T00:00:00+01:00"), ("until", "9999-12-31T23:30:00-05:00")],
)
def test_a_time_out_of_range_in_utc_is_a_config_error(key: str, value: str) -> None:
    """The error is an AnalysisConfigError naming the option and the time, not an
    OverflowError."""
    expected = re.escape(f"{key}={value!r} (--{key}) is out of range")
    with pytest.raises(AnalysisConfigError, match=expected):
        RowFilter(**{key: value})


def test_the_last_and_first_times_in_range_still_parse() -> None:
    """Times at the very ends of the range whose UTC value exists are accepted."""
    assert parse_time("0001-01-01T01:00:00+01:00", "since").year == 1
    assert parse_time("9999-12-31T18:59:59-05:00", "until").year == 9999


def test_the_cli_refuses_such_a_time_as_a_usage_error(tmp_path: Path) -> None:
    """``--since`` out of range ends the command with a usage error (exit 2), no traceback."""
    res = CliRunner().invoke(
        report_command,
        [
            str(tmp_path),
            *("--since", "0001-01-01T00:00:00+01:00", "-o", str(tmp_path / "r.html")),
            "--no-progress",
        ],
    )
    assert res.exit_code == 2, repr(res.exception)
    assert "since='0001-01-01T00:00:00+01:00' (--since) is out of range" in res.output
