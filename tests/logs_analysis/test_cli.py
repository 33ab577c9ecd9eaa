"""``dataplane report --json``: one JSON document on stdout, the report still written."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner, Result

from tests.logs_analysis.conftest import BAD_JSONL_LINES

SUMMARY_KEYS = {
    "html",
    "json",
    "csv",
    "report_version",
    "title",
    "generated_at",
    "rows",
    "filters",
    "issues",
    "timings_s",
}


def _report(args: list[str]) -> Result:
    from logs_analysis.cli import report_command

    return CliRunner().invoke(report_command, [*args, "--no-progress", "--json"])


def _summary(result: Result) -> dict[str, Any]:
    """stdout as one JSON document (anything else there fails to parse)."""
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert isinstance(summary, dict) and set(summary) == SUMMARY_KEYS
    return summary


def _agrees_with_the_file(summary: dict[str, Any], data: dict[str, Any]) -> None:
    """The summary's figures are the written JSON's, under the same keys."""
    for key in ("report_version", "title", "generated_at", "rows", "filters", "timings_s"):
        assert summary[key] == data[key], key
    assert summary["issues"] == {k: v for k, v in data["issues"].items() if k != "examples"}


def test_json_prints_the_summary_and_writes_the_report(
    native_inputs: list[Path], pipeline_rows: pa.Table, darshan_rows: pa.Table, tmp_path: Path
) -> None:
    out = tmp_path / "sub" / "report.html"
    summary = _summary(_report([*map(str, native_inputs), "--out", str(out)]))
    json_path = out.with_suffix(".json")
    assert summary["html"] == str(out) and summary["json"] == str(json_path)
    assert summary["csv"] is None
    assert out.is_file() and json_path.is_file()
    assert not out.with_name("report.groups.csv").exists()
    data = json.loads(json_path.read_text())
    _agrees_with_the_file(summary, data)
    # every row but the damaged JSON lines; the README is an input not read
    usable = pipeline_rows.num_rows + darshan_rows.num_rows - len(BAD_JSONL_LINES)
    assert summary["rows"]["selected"] == summary["rows"]["usable"] == usable
    assert summary["rows"]["removed_by_filters"] == 0
    assert summary["filters"]["applied"] is False
    assert summary["issues"]["malformed"] == len(BAD_JSONL_LINES)
    assert summary["issues"]["skipped_inputs"] == 1
    assert summary["timings_s"]["total"] > 0


def test_json_counts_the_rows_the_filters_removed(
    native_dir: Path, real_rows: pa.Table, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "r.html"
    with caplog.at_level(logging.WARNING, logger="logs_analysis.report"):
        result = _report(
            [
                str(native_dir),
                "--pipeline",
                "dxt",
                "--pipeline",
                "pipe_1",  # a typo: a warning, which must stay off stdout
                "--csv",
                "-o",
                str(out),
            ]
        )
    summary = _summary(result)
    assert "--pipeline 'pipe_1' matches no usable row" in caplog.text
    assert "matches no usable row" not in result.stdout
    csv_path = out.with_name("r.groups.csv")
    assert summary["csv"] == str(csv_path) and csv_path.is_file() and out.is_file()
    data = json.loads(out.with_suffix(".json").read_text())
    _agrees_with_the_file(summary, data)
    dxt = real_rows.filter(pc.equal(real_rows["pipeline"], "dxt")).num_rows
    assert summary["rows"]["selected"] == data["rows"]["selected"] == dxt
    assert summary["rows"]["removed_by_filters"] == real_rows.num_rows - dxt
    assert summary["filters"]["applied"] is True
    assert summary["filters"]["removed"] == {"pipeline": real_rows.num_rows - dxt}
    assert summary["filters"]["unknown_pipelines"] == ["pipe_1"]


def test_json_errors_keep_their_exit_status_and_message(native_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = _report([str(native_dir), "--pipeline", "nope", "-o", str(out)])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: the filters leave none of the ")
    assert not out.exists()
    result = _report([str(native_dir), "--budgets", "0", "-o", str(out)])
    assert result.exit_code == 2 and result.stdout == ""
    assert "--budgets" in result.stderr


def test_text_summary_says_what_the_filters_removed_of_the_usable_rows(
    native_dir: Path,
    real_rows: pa.Table,
    native_report_files: tuple[Path, Path, str],
    tmp_path: Path,
) -> None:
    from logs_analysis.cli import report_command

    logs = tmp_path / "logs"
    shutil.copytree(native_dir, logs)
    # rows read but not usable (a negative operation count)
    bad = real_rows.filter(pc.equal(real_rows["pipeline"], "pipe0")).slice(0, 3).to_pylist()
    (logs / "bad.jsonl").write_text(
        "".join(
            json.dumps({**row, "file_id": f"bad{i}", "read_ops": -1}) + "\n"
            for i, row in enumerate(bad)
        )
    )
    out = tmp_path / "r.html"
    args = [str(logs), "--pipeline", "pipe0", "-o", str(out), "--no-progress"]
    result = CliRunner().invoke(report_command, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    usable, removed = rows["usable"], rows["removed_by_filters"]
    assert usable == real_rows.num_rows and rows["read"] == usable + 3
    assert 0 < removed < usable
    (line,) = [x for x in result.output.splitlines() if x.startswith("wrote ")]
    assert f"{rows['selected']:,} files (the filters removed {removed:,} of {usable:,})," in line
    # without filters the line says nothing of them
    assert "wrote " in native_report_files[2]
    assert "the filters removed" not in native_report_files[2]
