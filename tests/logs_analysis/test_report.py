"""``dataplane report`` end to end, on real inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from logs_analysis.cli import parse_budgets, report_command
from logs_analysis.report import ReportConfig


def test_writes_html_and_json(report_files: tuple[Path, Path, str]) -> None:
    html_path, json_path, output = report_files
    assert html_path.is_file() and json_path.is_file()
    assert str(html_path) in output and "skipped" in output
    data = json.loads(json_path.read_text())  # strict JSON: no NaN
    assert data["title"] == "Mixed logs"
    assert (
        data["rows"]["usable"] == 108 + 214 + 8 - 0
    )  # the corrupted copy keeps its 8 shuffle files
    formats = sorted({s["format"] for s in data["inputs"]["sources"]})
    assert formats == ["darshan", "spark"]
    assert data["savings"]["budgets"] == [0.02, 0.05, 0.2]
    assert set(data["savings"]["savings"]) == {
        "all-hdd",
        "first-fit",
        "small-files-first",
        "stage-history",
        "lightgbm",
        "oracle",
    }


def test_issues_are_counted_and_shown(report_files: tuple[Path, Path, str]) -> None:
    html_path, json_path, _ = report_files
    issues = json.loads(json_path.read_text())["issues"]
    assert issues["counts"] == {"invalid JSON": 2, "unrecognised format (skipped)": 1}
    located = {(Path(e["source"]).name, e["location"]) for e in issues["examples"]}
    assert ("app-corrupted", "line 6") in located and ("app-corrupted", "line 10") in located
    html = html_path.read_text()
    assert "app-corrupted" in html and "line 6" in html and "README.md" in html


def test_html_is_self_contained(report_files: tuple[Path, Path, str]) -> None:
    html = report_files[0].read_text()
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) >= 7 and all(src.startswith("data:image/png;base64,") for src in images)
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing fetched from outside
    assert "<script" not in html


def test_json_and_html_show_the_same_numbers(report_files: tuple[Path, Path, str]) -> None:
    html_path, json_path, _ = report_files
    data = json.loads(json_path.read_text())
    html = html_path.read_text()
    assert f"{data['rows']['usable']:,}" in html
    p50 = data["density"]["overall"][0]["quantiles"]["p50"]
    assert f"{p50:.2e}" in html
    for name, values in data["savings"]["savings"].items():
        assert f"{100 * values[1]:.1f}%" in html, name
    assert f"{100 * data['savings']['upper_bound'][1]:.1f}%" in html
    assert "Where the savings come from, at 5% SSD" in html
    assert 'alt="savings by file kind"' in html
    oracle_parts = data["savings"]["savings_by_kind"]["oracle"][1]
    for kind, share in oracle_parts.items():
        assert f"<th>{kind}</th>" in html and f"{100 * share:.1f}%" in html, kind


def test_savings_are_coherent(report_files: tuple[Path, Path, str]) -> None:
    s = json.loads(report_files[1].read_text())["savings"]
    assert all(v == 0 for v in s["savings"]["all-hdd"])
    for i in range(len(s["budgets"])):
        for name, values in s["savings"].items():
            assert values[i] <= s["savings"]["oracle"][i] + 1e-9, name
    oracle = s["savings"]["oracle"]
    assert oracle == sorted(oracle) and oracle[-1] > 0
    # no policy, the oracle included, saves more than the bound at any budget
    assert len(s["upper_bound"]) == len(s["budgets"])
    for i, bound in enumerate(s["upper_bound"]):
        assert max(values[i] for values in s["savings"].values()) <= bound + 1e-9
    # where the savings come from: the file kinds' parts add up to each saving
    assert set(s["savings_by_kind"]) == set(s["savings"])
    for name, per_budget in s["savings_by_kind"].items():
        assert len(per_budget) == len(s["budgets"])
        for i, parts in enumerate(per_budget):
            assert sum(parts.values()) == pytest.approx(s["savings"][name][i], abs=1e-9), name
    assert s["budgets"][s["focus_budget_index"]] == 0.05


def test_predictability_section(report_files: tuple[Path, Path, str]) -> None:
    p = json.loads(report_files[1].read_text())["predictability"]
    assert p["split"] == "pipeline" and p["rows"] == 330
    assert sum(p["feature_importances"].values()) == pytest.approx(1.0)
    assert -1 <= p["spearman"]["small-files-first"] <= 1


def test_empty_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    result = CliRunner().invoke(
        report_command, [str(tmp_path / "logs"), "--out", str(tmp_path / "r.html"), "--no-progress"]
    )
    assert result.exit_code == 1
    assert "no log files found" in result.output
    assert not (tmp_path / "r.html").exists()


def test_no_usable_rows_is_a_clear_error(spark_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        report_command,
        [
            str(spark_dir / "app-20200706201101-0003"),
            "--out",
            str(tmp_path / "r.html"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 1 and "no usable log rows" in result.output


def test_bad_options(tmp_path: Path, spark_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(report_command, [str(spark_dir), "--budgets", "5,abc"])
    assert result.exit_code == 2 and "give percents like 1,2,5,10,20" in result.output
    result = runner.invoke(report_command, [str(spark_dir), "--budgets", "0"])
    assert result.exit_code == 2
    result = runner.invoke(report_command, [str(spark_dir), "--format", "csv"])
    assert result.exit_code == 2
    assert parse_budgets("1, 2%,5") == (0.01, 0.02, 0.05)
    with pytest.raises(ValueError, match="budgets"):
        ReportConfig(budgets=(0.0,))
    with pytest.raises(ValueError, match="format"):
        ReportConfig(format="csv")


def test_unwritable_output_is_a_clear_error(spark_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(
        report_command,
        [
            str(spark_dir / "local-1430917381534"),
            "--out",
            str(blocker / "r.html"),
            "--no-progress",
            "--sample-rows",
            "100",
        ],
    )
    assert result.exit_code == 1 and "cannot write the report" in result.output


def test_tiny_input_says_why_sections_are_missing(spark_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        report_command,
        [str(spark_dir / "application_1506645932520_24630151"), "--out", str(out), "--no-progress"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.with_suffix(".json").read_text())
    assert "at least 40" in data["predictability"]["unavailable"]
    assert "unavailable" in data["savings"]
    assert "Not measured" in out.read_text()


def test_default_budgets_are_placements_without_loading_lightgbm() -> None:
    import subprocess
    import sys

    from logs_analysis.analyses import savings
    from placement import cost

    assert savings.DEFAULT_BUDGETS is cost.DEFAULT_BUDGETS
    assert cost.DEFAULT_BUDGETS == (0.01, 0.02, 0.05, 0.10, 0.20)
    code = "import sys, logs_analysis.analyses.savings; print('lightgbm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
