"""train, evaluate and simulate: options reach the work, out-of-range options and unusable
model directories are refused with the option or file named, and the JSON says what was
trained, read and replayed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import click
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from placement.cli import placement_group
from tests.placement.logtables import make_log


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(placement_group, list(args))


def _json(res: Result) -> Any:
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("log") / "io_log.parquet"
    pq.write_table(make_log(pipelines=2, runs=3, files_per_stage=2, seed=11), path)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, log: Path) -> tuple[Path, dict[str, Any]]:
    """A model set with one model per pipeline, combined ``own``, of 3 trees."""
    out = tmp_path_factory.mktemp("model") / "new" / "m"  # its parent made too
    res = _invoke(
        "train", str(log), "--out", str(out), "--per-workload", "--min-rows", "1",
        "--combine", "own", "--trees", "3", "--no-progress", "--json",
    )  # fmt: skip
    return out, _json(res)


def test_train_json_names_the_model_and_what_trained_it(
    trained: tuple[Path, dict[str, Any]], log: Path
) -> None:
    from placement.model import ModelSet

    out, payload = trained
    rows = pq.read_table(log).num_rows
    assert payload["model_dir"] == str(out)
    assert payload["input"]["rows_usable"] == rows and payload["input"]["files_read"] == 1
    assert payload["trained_rows"] == rows
    assert payload["per_pipeline_models"] == ["pipe0", "pipe1"]
    assert payload["combine"] == "own"
    assert len(payload["feature_importances_gain_top10"]) == 10
    models = ModelSet.load(out)
    assert models.global_model.metadata["params"]["n_estimators"] == 3
    assert sorted(models.per_pipeline) == ["pipe0", "pipe1"] and models.combine.value == "own"


def test_train_without_per_workload_or_with_too_few_rows_trains_the_global_model_only(
    tmp_path: Path, log: Path
) -> None:
    base = ["train", str(log), "--trees", "2", "--no-progress", "--json"]
    plain = _json(_invoke(*base, "--out", str(tmp_path / "a")))
    assert plain["per_pipeline_models"] == [] and plain["combine"] == "mean"
    rows = pq.read_table(log).num_rows
    few = _json(
        _invoke(*base, "--out", str(tmp_path / "b"), "--per-workload", "--min-rows", str(rows))
    )
    assert few["per_pipeline_models"] == []
    res = _invoke(*base[:-1], "--out", str(tmp_path / "c"), "--per-workload", "--min-rows", "1")
    assert res.exit_code == 0, res.output
    assert "and 2 per-pipeline model(s) to " in res.output


def test_train_defaults_are_the_model_defaults() -> None:
    from placement.model import ModelParams

    command = placement_group.get_command(click.Context(placement_group), "train")
    assert command is not None
    options = {p.name: p for p in command.params}
    assert options["trees"].default == ModelParams().n_estimators
    assert options["per_workload"].default is False


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["train", "--trees", "0"], "'--trees': 0 is not in the range x>=1"),
        (["train", "--min-rows", "0"], "'--min-rows': 0 is not in the range x>=1"),
        (["evaluate", "--folds", "1"], "'--folds': 1 is not in the range x>=2"),
        (["evaluate", "--overlap", "0"], "'--overlap': overlap k=0.0 must be a positive"),
        (["simulate", "--overlap", "-1"], "'--overlap': overlap k=-1.0 must be a positive"),
    ],
)
def test_an_option_out_of_range_is_a_usage_error_naming_it(
    tmp_path: Path, log: Path, args: list[str], option: str
) -> None:
    command, *rest = args
    out = [] if command == "simulate" else ["--out", str(tmp_path / "out")]
    res = _invoke(command, str(log), *out, *rest)
    assert res.exit_code == 2, res.output
    assert f"Invalid value for {option}" in res.output
    assert not (tmp_path / "out").exists()


def test_an_unusable_model_directory_is_an_error_naming_it(tmp_path: Path, log: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "models.json").write_text("{not json")
    for model, message in (
        (tmp_path / "none", f"no model directory at {tmp_path / 'none'}"),
        (empty, f"{empty} holds neither models.json nor model.json"),
        (broken, f"model index {broken / 'models.json'} is unreadable or not JSON"),
        (log, f"{log} is a file; give the model directory that holds it"),
    ):
        res = _invoke("simulate", str(log), "--model", str(model), "--no-progress")
        assert res.exit_code == 1, res.output
        assert isinstance(res.exception, SystemExit)
        assert f"Error: {message}" in res.output


def test_a_budget_size_keeps_its_unit() -> None:
    from placement.model_cli import parse_budget

    sizes = {
        "3B": 3, "2k": 2000, "2kb": 2000, "2KiB": 2048, "2m": 2 * 10**6, "2MiB": 2 * 2**20,
        "2g": 2 * 10**9, "2GB": 2 * 10**9, "2gib": 2 * 2**30, "2t": 2 * 10**12,
        "2TB": 2 * 10**12, "2TiB": 2 * 2**40, " 1.5 GiB ": 3 * 2**29,
    }  # fmt: skip
    for text, size in sizes.items():
        assert parse_budget(text, peak_bytes=10**6) == size, text
    assert parse_budget("50%", peak_bytes=999) == 499
    for bad, message in (
        ("2ki", "neither a percent"),
        ("0.1B", "is not a positive size (it is 0 bytes)"),
        ("101", "101% is not in (0, 100]"),
        ("1e-300", "'1e-300' of peak live bytes 1,000,000 is 0 bytes"),
        ("0.00001%", "is 0 bytes; give a larger percent"),
    ):
        with pytest.raises(click.BadParameter, match=re.escape(message)):
            parse_budget(bad, peak_bytes=10**6)
    with pytest.raises(click.BadParameter, match=r"peak live bytes 0 is 0 bytes; give a size"):
        parse_budget("5%", peak_bytes=0)
    assert parse_budget("1MB", peak_bytes=0) == 10**6


def test_simulate_replays_each_policy_named_once_in_the_order_given(log: Path) -> None:
    res = _invoke(
        "simulate", str(log), "--policy", "oracle", "--policy", "first-fit", "--policy",
        "oracle", "--no-bound", "--no-progress", "--json",
    )  # fmt: skip
    payload = _json(res)
    assert [r["policy"] for r in payload["results"]] == ["oracle", "first-fit"]
    assert "notes" not in payload and "upper_bound" not in payload and "model" not in payload


def test_simulate_json_names_the_prices_overlap_and_model(
    trained: tuple[Path, dict[str, Any]], log: Path
) -> None:
    from placement.cost import CostModel

    model, _ = trained
    args = ["simulate", str(log), "--no-bound", "--no-progress"]
    payload = _json(_invoke(*args, "--policy", "first-fit", "--json"))
    assert payload["cost_model"] == CostModel().to_dict()
    assert payload["overlap"] is None and payload["budget"] == "5%"
    assert payload["inputs"] == [str(log)] and payload["peak_live_bytes"] > 0
    args += ["--policy", "lightgbm", "--model", str(model), "--overlap", "2"]
    payload = _json(_invoke(*args, "--json"))
    assert payload["overlap"] == 2.0
    facts = payload["model"]
    assert facts["per_pipeline_models"] == ["pipe0", "pipe1"] and facts["combine"] == "own"
    assert isinstance(facts["trained_at"], float)
    assert facts["runs_trained_on_here"] == 6
    assert [r["policy"] for r in payload["results"]] == ["lightgbm"]
    res = _invoke(*args)
    assert "runs replayed 2 at a time" in res.output


def test_only_the_first_bad_files_are_named_and_all_are_counted(tmp_path: Path, log: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "good.parquet").write_bytes(log.read_bytes())
    for i in range(7):
        (logs / f"bad{i}.parquet").write_text("not parquet")
    args = ["simulate", str(logs), "--policy", "first-fit", "--no-bound", "--no-progress"]
    report = _json(_invoke(*args, "--json"))["input"]
    assert report["files_read"] == 1 and report["bad_files"] == 7
    assert len(report["bad_files_first"]) == 5
    text = _invoke(*args).output
    assert "7 bad file(s) skipped" in text and text.count("\n  skipped ") == 5


def test_a_dangling_link_among_the_logs_is_skipped_and_named(tmp_path: Path, log: Path) -> None:
    link = tmp_path / "gone.parquet"
    os.symlink(tmp_path / "nothing-here.parquet", link)
    args = ["simulate", str(link), str(log), "--policy", "first-fit", "--no-bound"]
    report = _json(_invoke(*args, "--no-progress", "--json"))["input"]
    assert report["files_read"] == 1 and report["bad_files"] == 1
    assert report["bad_files_first"][0]["path"] == str(link)
    assert "FileNotFoundError" in report["bad_files_first"][0]["reason"]


def test_evaluate_options_reach_its_config_and_json_names_its_files(
    tmp_path: Path, log: Path
) -> None:
    out = tmp_path / "ev"
    args = [
        "evaluate", str(log), "--out", str(out), "--split", "pipeline", "--folds", "2",
        "--budgets", "5,10", "--combine", "own", "--min-rows", "7", "--overlap", "2",
        "--no-bound", "--no-measure", "--no-progress", "--json",
    ]  # fmt: skip
    payload = _json(_invoke(*args))
    config = payload["config"]
    assert (config["split"], config["folds"], config["budgets"]) == ("pipeline", 2, [0.05, 0.1])
    assert (config["combine"], config["min_rows"], config["overlap"]) == ("own", 7, 2.0)
    assert config["upper_bound"] is False
    names = {
        "json": "placement-eval.json",
        "table": "placement-eval.txt",
        "png": "placement-eval.png",
    }
    assert payload["files"] == {k: str(out / name) for k, name in names.items()}
    assert payload["files_replaced"] == [] and "simulations" not in payload
    again = _json(_invoke(*args))
    assert sorted(again["files_replaced"]) == sorted(payload["files"].values())


def test_simulate_overlap_replays_the_runs_together(log: Path) -> None:
    args = ["simulate", str(log), "--policy", "first-fit", "--no-bound", "--no-progress", "--json"]
    logged = _json(_invoke(*args))
    together = _json(_invoke(*args, "--overlap", "inf"))
    assert together["overlap"] == "inf" and logged["overlap"] is None
    assert together["peak_live_bytes"] > logged["peak_live_bytes"]
