"""``dataplane report`` end to end, on real inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner

from logs_analysis.cli import parse_budgets, report_command
from logs_analysis.report import ReportConfig
from tests.logs_analysis.conftest import BAD_JSONL_LINES

POLICIES = {"all-hdd", "first-fit", "small-files-first", "stage-history", "lightgbm", "oracle"}


def test_writes_html_and_json(
    native_report_files: tuple[Path, Path, str],
    pipeline_rows: pa.Table,
    darshan_rows: pa.Table,
) -> None:
    html_path, json_path, output = native_report_files
    assert html_path.is_file() and json_path.is_file()
    assert str(html_path) in output and "skipped" in output
    data = json.loads(json_path.read_text())  # strict JSON: no NaN
    assert data["title"] == "Native logs"
    # every row but the damaged JSON lines
    usable = pipeline_rows.num_rows + darshan_rows.num_rows - len(BAD_JSONL_LINES)
    assert data["rows"]["usable"] == data["totals"]["files"] == usable
    assert data["totals"]["pipelines"] == 3
    by_format: dict[str, int] = {}
    for source in data["inputs"]["sources"]:
        by_format[source["format"]] = by_format.get(source["format"], 0) + source["rows"]
    assert by_format == {
        "darshan": darshan_rows.num_rows,
        "native": pipeline_rows.num_rows - len(BAD_JSONL_LINES),
    }
    assert data["savings"]["budgets"] == [0.02, 0.05, 0.2]
    assert set(data["savings"]["savings"]) == POLICIES
    assert "unavailable" not in data["predictability"]


def test_writes_html_and_json_of_spark_logs(spark_report_files: tuple[Path, Path, str]) -> None:
    html_path, json_path, output = spark_report_files
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
    assert set(data["savings"]["savings"]) == POLICIES


def test_issues_are_counted_and_shown(native_report_files: tuple[Path, Path, str]) -> None:
    html_path, json_path, _ = native_report_files
    issues = json.loads(json_path.read_text())["issues"]
    assert issues["counts"] == {"invalid JSON": 2, "unrecognised format (skipped)": 1}
    assert issues["malformed"] == 2 and issues["skipped_inputs"] == 1
    located = {(Path(e["source"]).name, e["location"]) for e in issues["examples"]}
    assert located >= {("pipe1.jsonl", f"line {i + 1}") for i in BAD_JSONL_LINES}
    html = html_path.read_text()
    assert "pipe1.jsonl" in html and f"line {BAD_JSONL_LINES[0] + 1}" in html
    assert "README.md" in html


def test_issues_of_spark_logs_are_counted_and_shown(
    spark_report_files: tuple[Path, Path, str],
) -> None:
    html_path, json_path, _ = spark_report_files
    issues = json.loads(json_path.read_text())["issues"]
    assert issues["counts"] == {"invalid JSON": 2, "unrecognised format (skipped)": 1}
    assert issues["malformed"] == 2 and issues["skipped_inputs"] == 1
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


def _log_density(rows: pd.DataFrame) -> np.ndarray:
    """log10 of I/O operations per byte per second, as the placement schema defines it
    (size and life floored, files without I/O at the floor)."""
    from placement.schema import LOG_DENSITY_FLOOR, MIN_LIFETIME_S, MIN_SIZE_BYTES

    ops = rows["read_ops"].to_numpy(np.float64) + rows["write_ops"].to_numpy(np.float64)
    size = np.maximum(rows["size_bytes"].to_numpy(np.float64), MIN_SIZE_BYTES)
    life = rows["deleted_at"].to_numpy(np.float64) - rows["created_at"].to_numpy(np.float64)
    with np.errstate(divide="ignore"):
        return np.maximum(
            np.log10(ops / (size * np.maximum(life, MIN_LIFETIME_S))), LOG_DENSITY_FLOOR
        )


def _rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    if np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:  # a constant ranks nothing
        return float("nan")
    return float(spearmanr(a[ok], b[ok]).statistic)


def test_predictability_section(
    native_report_files: tuple[Path, Path, str], native_inputs: list[Path]
) -> None:
    from logs_analysis.analyses.predictability import predictability
    from logs_analysis.readers import read_table

    p = json.loads(native_report_files[1].read_text())["predictability"]
    rows = read_table(native_inputs)[0].to_pandas()
    # every row read is in the sample; each fold holds out one of the three pipelines
    assert p["split"] == "pipeline" and p["rows"] == len(rows) and p["folds"] == 3
    assert sum(p["feature_importances"].values()) == pytest.approx(1.0)
    true = _log_density(rows)
    # the placement logs declare expected sizes (the Darshan log does not): small-files-first
    # ranks the files that have one by -log10 of it
    expected_size = rows["expected_size_bytes"].to_numpy(np.float64)
    assert np.isfinite(expected_size).any() and np.isnan(expected_size).any()
    expected = _rank_correlation(-np.log10(expected_size), true)
    assert p["spearman"]["small-files-first"] == pytest.approx(expected, abs=1e-9)
    assert abs(expected) > 0.05  # a sign flip would show
    result = predictability(rows)
    truth = _log_density(result.table)
    learned = _rank_correlation(result.predictions, truth)
    assert learned > 0.2  # well above chance, though the held-out Darshan run is unlike the rest
    assert result.spearman["lightgbm"] == pytest.approx(learned, abs=1e-9)
    assert p["spearman"]["lightgbm"] == pytest.approx(learned, abs=1e-6)
    assert set(p["spearman_by_pipeline"]) == {"dxt", "pipe0", "pipe1"}
    for name, value in p["spearman_by_pipeline"].items():
        mine = (result.table["pipeline"] == name).to_numpy()
        want = _rank_correlation(result.predictions[mine], truth[mine])
        # undefined (None in the JSON) where the predictions of a pipeline do not vary
        assert value == (None if np.isnan(want) else pytest.approx(want, abs=1e-6)), name
    assert p["spearman_by_pipeline"]["pipe0"] is not None


def test_predictability_section_of_spark_logs(
    spark_report_files: tuple[Path, Path, str], mixed_inputs: list[Path]
) -> None:
    from logs_analysis.analyses.predictability import predictability
    from logs_analysis.readers import read_table

    p = json.loads(spark_report_files[1].read_text())["predictability"]
    assert p["split"] == "pipeline" and p["rows"] == 330
    assert sum(p["feature_importances"].values()) == pytest.approx(1.0)

    # the report's sample is every row read (330 of 330): rank them here
    rows = read_table(mixed_inputs)[0].to_pandas()
    assert len(rows) == p["rows"]
    true = _log_density(rows)
    # the logs declare no expected sizes: small-files-first ranks by -log10 of the final size
    smaller_first = -np.log10(np.maximum(rows["size_bytes"].to_numpy(np.float64), 1.0))
    expected = _rank_correlation(smaller_first, true)
    assert p["spearman"]["small-files-first"] == pytest.approx(expected, abs=1e-9)
    assert abs(expected) > 0.05  # a sign flip would show

    # LightGBM's figure is the rank correlation of its out-of-fold predictions with the
    # true densities (the same seeded cross-validation as the report's)
    result = predictability(rows)
    assert result.rows == p["rows"]
    truth = _log_density(result.table)
    np.testing.assert_allclose(result.true_log_density, truth)
    learned = _rank_correlation(result.predictions, truth)
    assert abs(learned) > 0.05
    assert result.spearman["lightgbm"] == pytest.approx(learned, abs=1e-9)
    assert p["spearman"]["lightgbm"] == pytest.approx(learned, abs=1e-6)
    spark = (result.table["pipeline"] == "Spark shell").to_numpy()
    assert p["spearman_by_pipeline"]["Spark shell"] == pytest.approx(
        _rank_correlation(result.predictions[spark], truth[spark]), abs=1e-6
    )


def test_learned_placement_ranks_densities_of_unseen_pipelines(
    darshan_examples: Path, tmp_path: Path
) -> None:
    """On the Darshan example logs (2267 files of two pipelines, each held out in turn)
    the model's predictions rank files by density as well as the baselines do, well above
    chance."""
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        report_command, [str(darshan_examples), "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    p = json.loads(out.with_suffix(".json").read_text())["predictability"]
    assert p["split"] == "pipeline" and p["rows"] == 2267
    assert p["spearman"]["lightgbm"] > 0.2
    assert p["spearman"]["small-files-first"] > 0.2


def test_empty_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    result = CliRunner().invoke(
        report_command, [str(tmp_path / "logs"), "--out", str(tmp_path / "r.html"), "--no-progress"]
    )
    assert result.exit_code == 1
    assert "no log files found" in result.output
    assert not (tmp_path / "r.html").exists()


def test_no_usable_rows_is_a_clear_error(spark_dir: Path, tmp_path: Path) -> None:
    """A Spark application without shuffle writes or spills has no temporary files."""
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


def test_bad_options(tmp_path: Path, native_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(report_command, [str(native_dir), "--budgets", "5,abc"])
    assert result.exit_code == 2 and "give percents like 1,2,5,10,20" in result.output
    assert "Invalid value for '--budgets': 'abc' is not a number" in result.output
    result = runner.invoke(report_command, [str(native_dir), "--budgets", "0"])
    assert result.exit_code == 2
    assert "Invalid value for '--budgets': 0% is not in (0, 100]" in result.output
    result = runner.invoke(report_command, [str(native_dir), "--format", "csv"])
    assert result.exit_code == 2
    assert parse_budgets("1, 2%,5") == (0.01, 0.02, 0.05)
    with pytest.raises(ValueError, match="budgets"):
        ReportConfig(budgets=(0.0,))
    with pytest.raises(ValueError, match="format"):
        ReportConfig(format="csv")


def test_prices_reach_the_savings_and_are_shown_beside_the_defaults(
    native_inputs: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "dear.html"
    result = CliRunner().invoke(
        report_command,
        [*map(str, native_inputs), "--out", str(out), "--budgets", "5", "--no-progress",
         "--price", "ssd_usd_per_gb_month=1e9"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    savings = json.loads(out.with_suffix(".json").read_text())["savings"]
    assert savings["cost_model"]["ssd_usd_per_gb_month"] == 1e9
    # at a billion dollars per GB-month no file is worth an SSD, not even to the oracle
    assert savings["savings"]["oracle"] == [0.0] and savings["upper_bound"] == [0.0]
    html = " ".join(out.read_text().split())
    assert "<td>1,000,000,000 (default 0.08)</td>" in html
    assert "(default 0.045)" not in html  # only changed prices name their default
    result = CliRunner().invoke(report_command, [str(tmp_path), "--price", "ssd=1"])
    assert result.exit_code == 2 and "is not a cost-model field" in result.output


def test_unwritable_output_is_a_clear_error(native_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(
        report_command,
        [
            str(min(native_dir.glob("*.parquet"))),
            "--out",
            str(blocker / "r.html"),
            "--no-progress",
            "--sample-rows",
            "100",
        ],
    )
    assert result.exit_code == 1 and "cannot write the report" in result.output


def test_tiny_input_says_why_sections_are_missing(real_rows: pa.Table, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    log = tmp_path / "tiny.parquet"
    pq.write_table(real_rows.slice(0, 8), log)  # 8 files of one run
    out = tmp_path / "r.html"
    result = CliRunner().invoke(report_command, [str(log), "--out", str(out), "--no-progress"])
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


def test_spark_logs_alone_leave_learned_placement_unavailable(
    spark_dir: Path, tmp_path: Path
) -> None:
    """Two runs: the fold holding out the large one has 8 rows to train on, so 100 of the
    108 files get no out-of-fold prediction; learned placement is not judged on the rest."""
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        report_command, [str(spark_dir), "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["rows"]["usable"] == 108
    reason = data["predictability"]["unavailable"]
    assert "only 8 of 108 rows got an out-of-fold prediction" in reason
    assert "the other 100 rows" in reason
    assert "out-of-fold prediction" in data["savings"]["unavailable"]
    html = out.read_text()
    assert "TCO saved by learned placement" not in html
    assert 'alt="predicted vs true density"' not in html and 'alt="savings curve"' not in html
    assert "cross-validated over" not in html


def test_bad_scheduler_is_a_usage_error(native_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        report_command,
        [
            str(native_dir),
            "--scheduler",
            "thread",
            "--out",
            str(tmp_path / "r.html"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "'thread' is not one of threads|processes|sync|tcp://host:port" in result.output
    assert not (tmp_path / "r.html").exists()


def _no_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the logs were read before the output was checked")

    monkeypatch.setattr("logs_analysis.report.aggregate", fail)


def test_unwritable_output_is_refused_before_reading(
    native_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_analysis(monkeypatch)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    log = str(native_dir)
    for out, why in (
        (blocker / "r.html", "is not a directory"),
        # no process, root included, may create files in /proc
        (Path("/proc") / "dataplane-report" / "r.html", "cannot write the report to /proc"),
    ):
        result = CliRunner().invoke(report_command, [log, "--out", str(out), "--no-progress"])
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, SystemExit), result.exception  # no traceback
        assert "cannot write the report" in result.output and why in result.output
        assert "choose another --out" in result.output


def test_read_only_output_folder_is_refused_before_reading(
    native_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes into folders whatever their mode")
    _no_analysis(monkeypatch)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        result = CliRunner().invoke(
            report_command,
            [str(native_dir), "--out", str(ro / "r.html"), "--no-progress"],
        )
    finally:
        ro.chmod(0o755)
    assert result.exit_code == 1 and "Permission denied" in result.output


def test_json_counts_are_integers(report_files: tuple[Path, Path, str]) -> None:
    data = json.loads(report_files[1].read_text())
    totals = data["totals"]
    for key in (
        "files",
        "runs",
        "bytes",
        "read_bytes",
        "write_bytes",
        "read_ops",
        "write_ops",
        "files_without_io",
    ):
        assert isinstance(totals[key], int), key
    for row in data["density"]["pipeline"]:
        assert isinstance(row["bytes"], int) and isinstance(row["ops"], int)
    assert all(isinstance(row["bytes"], int) for row in data["size"]["overall"])


def test_cost_model_and_best_heuristic_are_shown(report_files: tuple[Path, Path, str]) -> None:
    html_path, json_path, _ = report_files
    s = json.loads(json_path.read_text())["savings"]
    html = html_path.read_text()
    # the cost model is a table with units, not a dump of Python values
    assert "hdd_bytes_per_s=None" not in html and "=18000000000000.0" not in html
    assert "US dollars per GB-month" in html and "<td>not priced</td>" in html
    assert "<td>18,000,000,000,000</td>" in html
    # the headline puts the best heuristic beside learned placement
    heuristics = ("first-fit", "small-files-first", "stage-history")
    assert len(s["best_heuristic"]) == len(s["budgets"])
    i = s["focus_budget_index"]
    best = s["best_heuristic"][i]
    assert best["policy"] in heuristics
    assert best["savings"] == max(s["savings"][h][i] for h in heuristics)
    text = " ".join(html.split())
    assert (
        f"(best heuristic, {best['policy']}: {100 * best['savings']:.1f}%, "
        f"so {best['lightgbm_ratio']:.2f}x it; oracle" in text
    )


def test_help_says_what_is_read_and_replayed() -> None:
    result = CliRunner().invoke(report_command, ["--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "JSON-lines logs" not in text  # the service writes Parquet only
    assert "the Parquet files the placement service writes, or JSON lines" in text
    assert "at most N, as whole runs while they fit" in text  # or N rows drawn, cutting runs
    assert "threads|processes|sync|tcp://host:port" in text


def test_report_json_keys_are_described(report_files: tuple[Path, Path, str]) -> None:
    import logs_analysis.report as module

    data = json.loads(report_files[1].read_text())
    doc = module.__doc__ or ""
    for key in data:
        assert f"``{key}``" in doc, key
    assert "fractions" in doc and "report_version" in doc


def test_no_numpy_warning_for_files_without_io(darshan_log: Path) -> None:
    """Darshan logs have files without I/O: log10 of their density 0 is -inf, on purpose."""
    import warnings

    from logs_analysis.report import build_report

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = build_report([darshan_log], ReportConfig(progress=False))
    assert report.data["totals"]["files_without_io"] > 0
    assert "unavailable" not in report.data["savings"]  # the replay ran
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [
        str(w.message) for w in caught
    ]


def test_no_progress_bar_off_a_terminal(
    real_rows: pa.Table, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """stderr is no terminal here (pytest captures it): the bar is left out."""
    import pyarrow.parquet as pq

    from logs_analysis.report import build_report

    log = tmp_path / "log.parquet"
    pq.write_table(real_rows.slice(0, 30), log)
    report = build_report([log], ReportConfig(progress=True))
    assert report.data["rows"]["usable"] == 30
    err = capfd.readouterr().err
    assert "report:" not in err and "stage/s" not in err


def test_bad_options_raise_analysis_errors() -> None:
    from logs_analysis import AnalysisConfigError, AnalysisError
    from logs_analysis.analyses.predictability import PredictabilityConfig

    with pytest.raises(AnalysisError, match="budgets") as info:
        ReportConfig(budgets=(0.0,))
    assert isinstance(info.value, AnalysisConfigError) and isinstance(info.value, ValueError)
    with pytest.raises(AnalysisError, match="format='csv' must be one of"):
        ReportConfig(format="csv")
    with pytest.raises(AnalysisError, match="folds=1 must be an int >= 2"):
        PredictabilityConfig(folds=1)
