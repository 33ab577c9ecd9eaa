"""Held-out evaluation and the train / evaluate / simulate commands."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path

import click
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from placement.cli import placement_group
from placement.evaluate import (
    EvaluationConfig,
    EvaluationError,
    Split,
    _goals,
    _spearman,
    evaluate,
    savings_ratio,
    split_masks,
    stage_history_lifetime,
    stage_history_prediction,
)
from placement.features import HistoryStore, build_features, clean_table, log_density
from placement.model import MIN_PIPELINE_ROWS, Combine, DensityModel, ModelParams
from placement.schema import UNLABELLED
from placement.simulator import overlap_runs
from tests.placement.logtables import make_log

FAST = ModelParams(n_estimators=40, num_threads=1)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("logs")
    table = make_log(seed=4)
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), d / "a.parquet")
    pq.write_table(table.slice(half), d / "b.parquet")
    return d


def test_pipeline_split_holds_out_whole_pipelines() -> None:
    df = make_log(seed=5).to_pandas()
    folds = split_masks(df, EvaluationConfig(split=Split.PIPELINE, folds=2))
    assert len(folds) == 2
    covered = np.zeros(len(df), dtype=bool)
    for train, test in folds:
        assert not set(df.loc[train, "pipeline"]) & set(df.loc[test, "pipeline"])
        covered |= test
    assert covered.all()


def test_time_split_holds_out_each_pipelines_latest_runs() -> None:
    df = make_log(seed=5).to_pandas()
    [(train, test)] = split_masks(df, EvaluationConfig(split="time", test_fraction=0.25))
    assert set(df.loc[test, "run_id"]) == {f"pipe{p}-run3" for p in range(4)}
    assert df.loc[train, "created_at"].max() < df.loc[test, "created_at"].max()


def test_config_is_validated() -> None:
    with pytest.raises(EvaluationError, match="split"):
        EvaluationConfig(split="random")
    with pytest.raises(EvaluationError, match="budgets"):
        EvaluationConfig(budgets=(0.0, 0.5))
    with pytest.raises(ValueError, match="exponent"):
        EvaluationConfig(policy_options={"exponent": -1})
    with pytest.raises(EvaluationError, match="combine='best' must be one of"):
        EvaluationConfig(combine="best")
    for bad in (0, -2.0, True, "4", math.nan):
        with pytest.raises(EvaluationError, match="overlap k=.* positive number of runs"):
            EvaluationConfig(overlap=bad)
    for bad in (0, True, 2.5):
        with pytest.raises(EvaluationError, match=r"min_rows=.* must be an int >= 1"):
            EvaluationConfig(min_rows=bad)
    with pytest.raises(EvaluationError, match="2 pipelines"):
        split_masks(
            make_log(pipelines=1, runs=2, files_per_stage=3).to_pandas(), EvaluationConfig()
        )


def test_a_split_that_cannot_work_names_the_one_that_can() -> None:
    one_pipeline = make_log(pipelines=1, runs=3, files_per_stage=3).to_pandas()
    with pytest.raises(EvaluationError, match="2 pipelines.*use --split time"):
        split_masks(one_pipeline, EvaluationConfig(split=Split.PIPELINE))
    one_run_each = make_log(pipelines=2, runs=1, files_per_stage=3).to_pandas()
    with pytest.raises(EvaluationError, match="no runs to hold out.*use --split pipeline"):
        split_masks(one_run_each, EvaluationConfig(split=Split.TIME))


def test_an_unlabelled_log_is_told_to_label_its_runs_not_sent_to_the_other_split() -> None:
    # What a cluster whose client sets no run context logs: one pipeline, one run, unknown.
    df = make_log(pipelines=1, runs=1, files_per_stage=3).to_pandas()
    df["pipeline"] = df["run_id"] = UNLABELLED
    for split in Split:
        with pytest.raises(EvaluationError) as info:
            split_masks(df, EvaluationConfig(split=split))
        assert "set_run_context" in str(info.value) and "--split" not in str(info.value)
    one_run = make_log(pipelines=1, runs=1, files_per_stage=3).to_pandas()
    for split in Split:  # labelled, but a single run: neither split can work either
        with pytest.raises(EvaluationError, match="log runs of another pipeline") as info:
            split_masks(one_run, EvaluationConfig(split=split))
        assert "--split" not in str(info.value)


def test_budgets_that_share_a_label_are_refused() -> None:
    for budgets in ((0.05, 0.05), (0.01, 0.05, 0.050000001)):
        with pytest.raises(EvaluationError, match=r"budgets=.* give 5% more than once.*--budgets"):
            EvaluationConfig(budgets=budgets)
    assert EvaluationConfig(budgets=(0.05, 0.051)).budgets == (0.05, 0.051)


def test_ratios_of_nothing_saved_meet_no_goal() -> None:
    assert savings_ratio(0.2, 0.1) == pytest.approx(2.0)
    assert savings_ratio(0.1, 0.0) == math.inf and savings_ratio(0.1, -0.1) == math.inf
    assert math.isnan(savings_ratio(0.0, 0.0)) and math.isnan(savings_ratio(-0.1, 0.0))
    policies = ("lightgbm", "oracle", "first-fit", "small-files-first", "stage-history")
    nothing = _goals({name: {"5%": 0.0} for name in policies}, (0.05,), {"5%": 0.0})
    assert math.isnan(nothing["5%"]["oracle_capture"])
    assert math.isnan(nothing["5%"]["ratio_to_best_heuristic"])
    assert math.isnan(nothing["5%"]["upper_bound_ratio_to_best_heuristic"])
    assert nothing["goal_1_5x_best_heuristic_at_5pct"] is False
    assert nothing["goal_oracle_capture_85pct_at_5pct"] is False
    only_learned = _goals(
        {name: {"5%": 0.1 if name in ("lightgbm", "oracle") else 0.0} for name in policies},
        (0.05,),
    )
    assert only_learned["5%"]["ratio_to_best_heuristic"] == math.inf
    assert only_learned["goal_1_5x_best_heuristic_at_5pct"] is True


@pytest.mark.parametrize("split", ["pipeline", "time"])
def test_evaluate_reports_every_policy_and_budget(tmp_path: Path, split: str) -> None:
    result = evaluate(
        make_log(seed=6), EvaluationConfig(split=split, params=FAST, budgets=(0.05, 0.2))
    )
    assert {
        "all-hdd",
        "first-fit",
        "small-files-first",
        "stage-history",
        "lightgbm",
        "oracle",
    } <= set(result.savings)
    for per in result.savings.values():
        assert set(per) == {"5%", "20%"}
        assert all(v <= 1.0 for v in per.values())
    assert all(v == 0.0 for v in result.savings["all-hdd"].values())
    assert result.spearman["lightgbm"] > 0.5
    goal = result.goals["5%"]
    assert goal["oracle_capture"] == pytest.approx(goal["lightgbm"] / goal["oracle"])
    # no policy, the oracle included, saves more than the bound
    assert set(result.upper_bound) == {"5%", "20%"}
    for label, bound in result.upper_bound.items():
        assert max(per[label] for per in result.savings.values()) <= bound + 1e-9
    assert goal["upper_bound_ratio_to_best_heuristic"] >= goal["oracle_ratio_to_best_heuristic"]
    # where the savings come from: per file kind of the test rows, summing to each saving
    kinds = set(make_log(seed=6).column("file_kind").to_pylist())
    assert set(result.savings_by_kind) == set(result.savings)
    for name, per in result.savings.items():
        for label, total in per.items():
            parts = result.savings_by_kind[name][label]
            assert set(parts) <= kinds and len(parts) >= 2
            assert sum(parts.values()) == pytest.approx(total, abs=1e-9)
    assert all(v == 0.0 for v in result.savings_by_kind["all-hdd"]["5%"].values())
    text = result.kind_table("20%").splitlines()
    assert text[0].split()[:3] == ["policy", "(20%", "SSD)"] and text[0].split()[-1] == "total"
    oracle_row = next(line.split() for line in text if line.startswith("oracle"))
    assert float(oracle_row[-1]) == pytest.approx(100 * result.savings["oracle"]["20%"], abs=0.05)
    assert not any(line.startswith("all-hdd") for line in text)
    assert result.kind_table() == result.kind_table("5%")
    # without 5% the default is the middle budget, as the report's by-kind view picks it
    no_five = dataclasses.replace(
        result,
        config={**result.config, "budgets": [0.02, 0.2, 0.5]},
        savings={n: {"2%": 0.0, "20%": v["20%"], "50%": 0.0} for n, v in result.savings.items()},
        savings_by_kind={n: {"20%": v["20%"]} for n, v in result.savings_by_kind.items()},
    )
    assert no_five.kind_table() == result.kind_table("20%")
    with pytest.raises(ValueError, match="budget='3%' was not replayed"):
        result.kind_table("3%")
    paths = result.write(tmp_path)
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(paths["json"].read_text())
    # strict JSON: no NaN or Infinity, whatever the ratios came to
    json.loads(paths["json"].read_text(), parse_constant=lambda name: pytest.fail(name))
    assert data["config"]["split"] == split and "5%" in data["goals"]
    assert "lightgbm" in paths["table"].read_text() and "upper-bound" in paths["table"].read_text()
    assert data["upper_bound"] == result.upper_bound
    assert data["savings_by_kind"] == result.savings_by_kind


@pytest.mark.parametrize("split", ["pipeline", "time"])
def test_the_models_of_each_fold_train_on_its_training_rows_only(
    monkeypatch: pytest.MonkeyPatch, split: str
) -> None:
    """No held-out row (features or outcome) reaches a model that then predicts it."""
    table = make_log(seed=6)
    config = EvaluationConfig(split=split, params=FAST, budgets=(0.05,), upper_bound=False)
    df, _ = clean_table(table)
    folds = split_masks(df, config)
    target = log_density(df)
    seen: list[tuple[list[int], np.ndarray]] = []
    fit = DensityModel.fit_features

    def observed(self, features, target, weight=None):  # type: ignore[no-untyped-def]
        seen.append((list(features.index), np.asarray(target, np.float64).copy()))
        return fit(self, features, target, weight)

    monkeypatch.setattr(DensityModel, "fit_features", observed)
    evaluate(table, config)
    rows = np.arange(len(df))
    if split == "pipeline":  # one model per fold
        assert len(seen) == len(folds) == 4
        calls = list(zip(seen, folds, strict=True))
        global_models = calls
    else:  # one fold: its global model first, then the per-workload models beside it
        assert len(folds) == 1 and len(seen) > 1
        calls = [(call, folds[0]) for call in seen]
        global_models = calls[:1]
    for (index, y), (train, _held) in global_models:
        assert index == rows[train].tolist()
        np.testing.assert_array_equal(y, target[train])
    for (index, _y), (train, held) in calls:
        assert held.any() and set(index) <= set(rows[train])
        assert not set(index) & set(rows[held])


def test_measure_decisions_reports_latency_size_memory() -> None:
    result = evaluate(
        make_log(seed=7),
        EvaluationConfig(params=FAST, budgets=(0.05,), upper_bound=False),
        measure=True,
    )
    assert result.upper_bound == {} and "upper_bound" not in result.goals["5%"]
    d = result.decisions
    assert d["single_us_p50"] > 0 and d["batched_per_s"] > 0 and d["model_file_bytes"] > 0
    assert d["trees"] == 40


def test_cli_train_reports_bad_inputs_and_saves(tmp_path: Path, log_dir: Path) -> None:
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    runner = CliRunner()
    out = tmp_path / "model"
    res = runner.invoke(
        placement_group,
        [
            "train",
            str(log_dir),
            str(tmp_path / "junk.parquet"),  # (a path that does not exist is refused)
            "--out",
            str(out),
            "--per-workload",
            "--min-rows",
            "50",
            "--trees",
            "20",
            "--json",
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert payload["input"]["bad_files"] == 1 and payload["input"]["files_read"] == 2
    assert len(payload["per_pipeline_models"]) == 4 and payload["combine"] == "mean"
    index = json.loads((out / "models.json").read_text())
    assert index["combine"] == "mean" and (out / index["global"] / "model.txt").is_file()

    res = runner.invoke(
        placement_group,
        [
            "simulate",
            str(log_dir),
            "--model",
            str(out),
            "--budget",
            "5%",
            "--json",
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    results = {r["policy"]: r for r in json.loads(res.output)["results"]}
    assert set(results) == {
        "lightgbm",
        "stage-history",
        "small-files-first",
        "first-fit",
        "oracle",
        "all-hdd",
    }
    assert results["all-hdd"]["savings_usd"] == 0.0
    bound = json.loads(res.output)["upper_bound"]
    assert max(r["savings_usd"] for r in results.values()) <= bound["savings_usd"] * (1 + 1e-9)


def test_cli_missing_or_broken_model_is_a_clear_error(tmp_path: Path, log_dir: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(
        placement_group,
        ["simulate", str(log_dir), "--model", str(tmp_path / "none"), "--no-progress"],
    )
    assert res.exit_code == 1
    assert "no model directory" in res.output and "placement train" in res.output
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.json").write_text("{}")
    (broken / "model.txt").write_text("garbage")
    res = runner.invoke(
        placement_group, ["simulate", str(log_dir), "--model", str(broken), "--no-progress"]
    )
    assert res.exit_code == 1 and "not a placement density model" in res.output


def test_cli_no_usable_rows_and_bad_budget(tmp_path: Path, log_dir: Path) -> None:
    (tmp_path / "junk.parquet").write_bytes(b"junk")
    runner = CliRunner()
    res = runner.invoke(
        placement_group, ["train", str(tmp_path / "junk.parquet"), "--out", str(tmp_path / "m")]
    )
    assert res.exit_code == 1 and "no usable log rows" in res.output
    res = runner.invoke(
        placement_group, ["simulate", str(log_dir), "--policy", "first-fit", "--budget", "lots"]
    )
    assert res.exit_code == 2 and "--budget" in res.output


def test_cli_simulate_without_the_bound(log_dir: Path) -> None:
    res = CliRunner().invoke(
        placement_group,
        [
            "simulate",
            str(log_dir),
            "--policy",
            "first-fit",
            "--no-bound",
            "--json",
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert "upper_bound" not in payload and payload["results"][0]["policy"] == "first-fit"


def test_overlap_replays_the_runs_at_once_before_the_split() -> None:
    log = make_log(seed=6)
    config = dict(split="time", params=FAST, budgets=(0.05,), upper_bound=False)
    alone = evaluate(log, EvaluationConfig(**config))
    shared = evaluate(log, EvaluationConfig(**config, overlap=4))
    assert alone.config["overlap"] is None and shared.config["overlap"] == 4
    assert alone.config["combine"] == "mean"
    # the same test files, but more of them live at once: a larger peak, so a larger SSD
    assert shared.rows["test"] == alone.rows["test"]
    assert shared.peak_live_bytes > alone.peak_live_bytes
    # and the same result as overlapping the runs by hand first
    by_hand = evaluate(overlap_runs(log.to_pandas(), 4), EvaluationConfig(**config))
    assert by_hand.savings == shared.savings


def test_cli_overlap_option(tmp_path: Path, log_dir: Path) -> None:
    runner = CliRunner()
    args = ["simulate", str(log_dir), "--policy", "first-fit", "--no-bound", "--json"]
    alone = json.loads(runner.invoke(placement_group, [*args, "--no-progress"]).output)
    res = runner.invoke(placement_group, [*args, "--overlap", "4", "--no-progress"])
    assert res.exit_code == 0, res.output
    shared = json.loads(res.output)
    assert alone["overlap"] is None and shared["overlap"] == 4
    assert shared["peak_live_bytes"] > alone["peak_live_bytes"]
    for bad in ("0", "nan", "-1"):
        res = runner.invoke(placement_group, [*args, "--overlap", bad])
        assert res.exit_code == 2 and "--overlap" in res.output and "positive" in res.output
    res = runner.invoke(
        placement_group,
        ["evaluate", str(log_dir), "--out", str(tmp_path / "ev"), "--split", "time"]
        + ["--budgets", "5", "--no-measure", "--no-bound", "--no-progress", "--overlap", "4"],
    )
    assert res.exit_code == 0, res.output
    assert "runs replayed 4 at a time" in res.output
    saved = json.loads((tmp_path / "ev" / "placement-eval.json").read_text())
    assert saved["config"]["overlap"] == 4


def test_cli_evaluate_writes_table_png_json(tmp_path: Path, log_dir: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(
        placement_group,
        [
            "evaluate",
            str(log_dir),
            "--out",
            str(tmp_path / "ev"),
            "--split",
            "time",
            "--budgets",
            "5,20",
            "--no-measure",
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "oracle" in res.output and "captures" in res.output
    assert "no placement saves more than" in res.output
    assert {p.name for p in (tmp_path / "ev").iterdir()} == {
        "placement-eval.json",
        "placement-eval.txt",
        "placement-eval.png",
    }
    # the by-kind table is printed and written beside the savings table
    assert "where the savings come from" in res.output
    saved = (tmp_path / "ev" / "placement-eval.txt").read_text()
    assert "where the savings come from" in saved and "policy (5% SSD)" in saved


def test_break_even_options_are_validated() -> None:
    with pytest.raises(EvaluationError, match="break_even"):
        EvaluationConfig(break_even="yes")  # type: ignore[arg-type]
    with pytest.raises(EvaluationError, match="upper_bound"):
        EvaluationConfig(upper_bound=1)  # type: ignore[arg-type]
    with pytest.raises(EvaluationError, match="cost_model"):
        EvaluationConfig(policy_options={"cost_model": None})


def test_expected_lifetime_of_the_break_even_test_uses_earlier_runs_only(
    rng: np.random.Generator,
) -> None:
    """Scrambling a run's outcomes leaves its files' expected lifetimes (and earlier
    runs') as they were; only later runs see them."""

    log = make_log(seed=1).to_pandas()
    runs = log.groupby("run_id")["created_at"].min().sort_values().index.tolist()
    target = runs[len(runs) // 2]
    upto = log["run_id"].isin(runs[: runs.index(target) + 1]).to_numpy()
    before = stage_history_lifetime(build_features(log))
    changed = log.copy()
    in_run = (changed["run_id"] == target).to_numpy()
    life = (changed["deleted_at"] - changed["created_at"]).to_numpy()
    changed.loc[in_run, "deleted_at"] = changed.loc[in_run, "created_at"].to_numpy() + (
        rng.permutation(life[in_run]) * 10
    )
    changed.loc[in_run, "size_bytes"] = changed.loc[in_run, "size_bytes"] * 3
    after = stage_history_lifetime(build_features(changed))
    np.testing.assert_array_equal(before[upto], after[upto])
    assert np.isfinite(before[upto]).any() and not np.array_equal(before[~upto], after[~upto])


def test_per_workload_models_follow_min_rows_as_train_does(tmp_path: Path, log_dir: Path) -> None:
    log = make_log(seed=6)  # 4 pipelines; the time split trains on 180 rows of each
    config = EvaluationConfig(split="time", params=FAST, budgets=(0.05,), upper_bound=False)
    own = evaluate(log, config)
    none = evaluate(log, dataclasses.replace(config, min_rows=181))
    # no pipeline has 181 training rows: the per-workload policy is the global model's
    assert none.savings["lightgbm-per-workload"] == none.savings["lightgbm"]
    assert none.spearman["lightgbm-per-workload"] == none.spearman["lightgbm"]
    assert own.spearman["lightgbm-per-workload"] != own.spearman["lightgbm"]
    assert own.savings["lightgbm"] == none.savings["lightgbm"]
    assert (own.config["min_rows"], none.config["min_rows"]) == (MIN_PIPELINE_ROWS, 181)
    # train and evaluate share their defaults, written out in the CLI for a light --help
    ctx = click.Context(placement_group)
    for name in ("train", "evaluate"):
        command = placement_group.get_command(ctx, name)
        assert command is not None
        options = {p.name: p for p in command.params}
        assert options["min_rows"].default == config.min_rows == MIN_PIPELINE_ROWS
        assert options["combine"].default == config.combine.value
        assert list(options["combine"].type.choices) == [c.value for c in Combine]
    res = CliRunner().invoke(
        placement_group,
        ["evaluate", str(log_dir), "--out", str(tmp_path), "--split", "time", "--budgets", "5"]
        + ["--min-rows", "150", "--combine", "own", "--no-measure", "--no-bound", "--no-progress"],
    )
    assert res.exit_code == 0, res.output
    saved = json.loads((tmp_path / "placement-eval.json").read_text())
    assert (saved["config"]["min_rows"], saved["config"]["combine"]) == (150, "own")
    assert "4 of 4 test pipelines have their own model (>= 150 training rows)" in res.output
    assert saved["rows"]["per_pipeline_models"] == ["pipe0", "pipe1", "pipe2", "pipe3"]
    assert own.rows["per_pipeline_models"] == ["pipe0", "pipe1", "pipe2", "pipe3"]
    assert none.rows["per_pipeline_models"] == []


def test_every_line_of_the_plot_has_a_colour_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PNG's lines, read from the figure as it is saved: one colour per policy (the
    learned policy and the threshold fed the true density were both red), each the
    policy's colour in the shared style mapping."""
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    save = Figure.savefig

    def keep(fig: Figure, *args: object, **kwargs: object) -> None:
        saved.append(fig)
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    result = evaluate(
        make_log(seed=6), EvaluationConfig(split="time", params=FAST, budgets=(0.05, 0.2))
    )
    assert {"lightgbm", "lightgbm-per-workload", "threshold+true-density"} <= set(result.savings)
    result.write(tmp_path)
    (fig,) = saved
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == (set(result.savings) - {"all-hdd"}) | {"upper-bound (LP)"}
    colours = {name: to_hex(line.get_color()) for name, line in lines.items()}
    assert len(set(colours.values())) == len(colours), colours

    from placement.style import POLICY_STYLES

    for name, line in lines.items():
        style = POLICY_STYLES[name]
        assert colours[name] == style.color
        assert (line.get_linestyle(), line.get_marker()) == (
            style.linestyle,
            style.marker or "None",
        )


def test_the_result_names_its_version_time_and_inputs(tmp_path: Path) -> None:
    """The JSON says which format it is, when it was made and from which logs, before the
    keys it always had; the text file opens with what was evaluated."""
    import datetime

    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    config = EvaluationConfig(split="time", params=FAST, budgets=(0.05,), overlap=4)
    result = evaluate(make_log(seed=6), config, inputs=["logs/a", Path("logs/b.parquet")])
    paths = result.write(tmp_path, input_summary="input: 2 file(s)")
    data = json.loads(paths["json"].read_text())
    assert list(data)[:3] == ["evaluation_version", "generated_at", "inputs"]
    assert isinstance(data["evaluation_version"], int) and data["evaluation_version"] >= 1
    made = datetime.datetime.fromisoformat(data["generated_at"])
    assert made.utcoffset() == datetime.timedelta(0)
    assert before <= made <= datetime.datetime.now(datetime.timezone.utc)
    assert data["inputs"] == ["logs/a", "logs/b.parquet"]
    assert {"config", "rows", "savings", "goals", "spearman", "upper_bound"} <= set(data)
    text = paths["table"].read_text().splitlines()
    assert text[:2] == ["logs: logs/a, logs/b.parquet", "input: 2 file(s)"]
    assert text[2] == (
        f"TCO savings vs all-HDD (time split, {result.rows['test']} test files, "
        "runs replayed 4 at a time):"
    )
    assert any(line.startswith("Spearman (predicted vs true density): ") for line in text)
    assert any(line.startswith("at 5%: lightgbm captures ") for line in text)
    assert any(line.startswith("at 5%: no placement saves more than ") for line in text)
    as_logged = evaluate(make_log(seed=6), dataclasses.replace(config, overlap=None))
    assert ", runs as logged):" in as_logged.text().splitlines()[0]


def test_the_pipeline_split_has_no_more_folds_than_pipelines() -> None:
    df = make_log(pipelines=2, runs=2, files_per_stage=3).to_pandas()
    folds = split_masks(df, EvaluationConfig(split=Split.PIPELINE, folds=4))
    assert len(folds) == 2
    assert all(test.any() and train.any() for train, test in folds)


def test_time_split_holds_out_the_run_that_started_last() -> None:
    """By start time, not by name or last file; one of two runs is held out; a pipeline
    with a single run is only trained on."""
    df = pd.DataFrame(
        {
            "pipeline": ["a"] * 4 + ["b"] * 2,
            # a-2 starts first but writes its last file after a-1 began and ended
            "run_id": ["a-2", "a-2", "a-1", "a-1", "b-1", "b-1"],
            "created_at": [0.0, 100.0, 10.0, 20.0, 5.0, 6.0],
        }
    )
    [(train, test)] = split_masks(df, EvaluationConfig(split="time", test_fraction=1 / 3))
    assert df.loc[test, "run_id"].tolist() == ["a-1", "a-1"]
    assert (train == ~test).all()


def test_a_test_fraction_of_one_or_a_single_fold_is_refused() -> None:
    with pytest.raises(EvaluationError, match=r"test_fraction=1\.0 must be in \(0, 1\)"):
        EvaluationConfig(split="time", test_fraction=1.0)
    with pytest.raises(EvaluationError, match="folds=1 must be an int >= 2"):
        EvaluationConfig(folds=1)


def _goals_of(lightgbm: float) -> dict[str, object]:
    savings = {
        "lightgbm": lightgbm,
        "oracle": 1.0,
        "first-fit": 0.25,
        "small-files-first": 0.5,
        "stage-history": 0.125,
        "lightgbm-per-workload": 0.5,
    }
    return _goals({name: {"5%": v} for name, v in savings.items()}, (0.05,))


def test_goals_compare_with_the_best_heuristic_and_meet_their_bounds() -> None:
    goals = _goals_of(0.75)
    five = goals["5%"]
    assert isinstance(five, dict)
    assert five["best_heuristic"] == "small-files-first"
    assert five["best_heuristic_savings"] == 0.5
    assert five["oracle_capture"] == 0.75
    assert five["ratio_to_best_heuristic"] == 1.5  # 0.75 / 0.5
    assert five["oracle_ratio_to_best_heuristic"] == 2.0  # 1.0 / 0.5
    assert five["per_workload"] == 0.5 and five["per_workload_oracle_capture"] == 0.5
    assert goals["goal_1_5x_best_heuristic_at_5pct"] is True
    assert goals["goal_oracle_capture_85pct_at_5pct"] is False
    assert _goals_of(0.85)["goal_oracle_capture_85pct_at_5pct"] is True  # 0.85 / 1.0
    assert _goals_of(0.625)["goal_1_5x_best_heuristic_at_5pct"] is False  # 1.25x


def test_a_rank_correlation_of_too_few_or_constant_values_is_undefined() -> None:
    up = np.array([1.0, 2.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _spearman(up, up) == pytest.approx(1.0)
        assert math.isnan(_spearman(up[:2], up[:2]))
        assert math.isnan(_spearman(up, np.array([5.0, 5.0, 5.0])))
        assert math.isnan(_spearman(np.array([2.0, 2.0, 2.0]), up))


def test_stage_history_falls_back_from_pipeline_stage_to_stage_kind_then_pipeline() -> None:
    nan = math.nan
    features = pd.DataFrame(
        {
            "h_ps_ld": [1.0, nan, nan, nan],
            "h_s_ld": [2.0, 2.0, nan, nan],
            "h_ko_ld": [3.0, 3.0, 3.0, nan],
            "h_p_ld": [4.0, 4.0, 4.0, 4.0],
        }
    )
    np.testing.assert_array_equal(stage_history_prediction(features), [1.0, 2.0, 3.0, 4.0])


def test_expected_lifetimes_are_seconds_within_those_of_the_pipeline_stage() -> None:
    """A geometric mean of earlier lifetimes lies between the least and the most of them."""
    log = make_log(seed=1).to_pandas()
    expected = stage_history_lifetime(build_features(log))
    life = log["deleted_at"] - log["created_at"]
    groups = life.groupby([log["pipeline"], log["stage"]])
    least = groups.transform("min").to_numpy()
    most = groups.transform("max").to_numpy()
    known = np.isfinite(expected)
    assert known.any()
    assert (least[known] <= expected[known] * (1 + 1e-9)).all()
    assert (expected[known] <= most[known] * (1 + 1e-9)).all()


def test_the_time_split_trains_own_models_only_for_the_pipelines_it_tests() -> None:
    log = make_log(seed=6).to_pandas()
    # pipe3 keeps one run (60 rows): all of it trains, none of it is tested
    only_run0 = (log["pipeline"] == "pipe3") & ~log["run_id"].str.endswith("run0")
    config = EvaluationConfig(
        split="time", params=FAST, budgets=(0.05,), upper_bound=False, min_rows=20
    )
    result = evaluate(log.loc[~only_run0].reset_index(drop=True), config)
    assert result.rows["test_pipelines"] == ["pipe0", "pipe1", "pipe2"]
    assert result.rows["per_pipeline_models"] == result.rows["test_pipelines"]


def test_small_files_first_ranks_the_smaller_files_as_denser() -> None:
    """Density is operations per byte: on this log the smaller files are the denser ones."""
    config = EvaluationConfig(split="time", params=FAST, budgets=(0.05,), upper_bound=False)
    assert evaluate(make_log(seed=6), config).spearman["small-files-first"] > 0.3


def test_feature_importances_are_the_mean_over_the_folds() -> None:
    table = make_log(seed=6)
    config = EvaluationConfig(params=FAST, budgets=(0.05,), upper_bound=False)
    df, _ = clean_table(table)
    features = build_features(df, HistoryStore.from_table(df))
    target = log_density(df)
    folds = split_masks(df, config)
    assert len(folds) == 4
    totals = [
        sum(
            DensityModel(FAST)
            .fit_features(features.loc[train], target[train])
            .feature_importances("gain")
            .values()
        )
        for train, _ in folds
    ]
    result = evaluate(table, config)
    assert sum(result.feature_importances.values()) == pytest.approx(np.mean(totals))


def test_the_pipeline_split_replays_every_row() -> None:
    config = EvaluationConfig(params=FAST, budgets=(0.05,), upper_bound=False)
    result = evaluate(make_log(seed=6), config)
    assert result.config["folds"] == 4
    assert result.rows["test"] == result.rows["usable"]
    assert result.rows["test_pipelines"] == result.rows["pipelines"]


def test_one_pipeline_of_two_runs_is_sent_to_the_time_split() -> None:
    df = make_log(pipelines=1, runs=2, files_per_stage=3).to_pandas()
    with pytest.raises(EvaluationError, match="2 pipelines.*use --split time"):
        split_masks(df, EvaluationConfig(split=Split.PIPELINE))
