"""A time range that keeps none of the rows of the pipelines given names only the pipelines
that have rows, and tells the names that matched nothing (the run ends before the warning
that would say so)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from logs_analysis.cli import report_command
from logs_analysis.filters import (
    PIPELINE,
    TIME_RANGE,
    FilterStats,
    RowFilter,
    empty_selection_message,
)
from tests.placement.logtables import make_log


def test_the_message_names_the_pipeline_with_rows_and_the_name_that_matched_none() -> None:
    """Of --pipeline pipe0 and pipe_7, only pipe0 has rows: the rows are said to be pipe0's,
    and pipe_7 is told as matching no row, with the pipeline it is close to."""
    stats = FilterStats(
        removed={PIPELINE: 12, TIME_RANGE: 12},
        pipelines={"pipe0": 12, "pipe1": 12},
        created_min=1_700_000_000.0,
        created_max=1_700_000_005.0,
    )
    row_filter = RowFilter(pipelines=("pipe0", "pipe_7"), since="2030-01-01")
    message = empty_selection_message(row_filter, stats, 24)
    assert "keeps none of the 12 rows of pipeline pipe0;" in message
    assert "pipe0, pipe_7" not in message
    assert "--pipeline 'pipe_7' matches no usable row (did you mean 'pipe1' for 'pipe_7'?)" in (
        message
    )


def test_the_report_error_tells_the_name_that_matched_nothing(tmp_path: Path) -> None:
    """The same through the command line, on a Parquet log of pipelines pipe0 and pipe1."""
    logs = tmp_path / "logs"
    logs.mkdir()
    pq.write_table(make_log(pipelines=2, runs=1, files_per_stage=4), logs / "w0.parquet")
    res = CliRunner().invoke(
        report_command,
        [
            str(logs),
            *("--pipeline", "pipe0", "--pipeline", "pipe_7", "--since", "2030-01-01"),
            *("-o", str(tmp_path / "r.html"), "--no-progress"),
        ],
    )
    assert res.exit_code == 1, repr(res.exception)
    message = " ".join(res.output.split())
    assert "keeps none of the 12 rows of pipeline pipe0;" in message
    assert "--pipeline 'pipe_7' matches no usable row" in message
