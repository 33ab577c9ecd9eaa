"""The evaluate and simulate commands on small logs: strict JSON, undefined ratios, bad
options refused before any work, the input counted once and consistently."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from placement.cli import placement_group
from tests.placement.logtables import make_log

#: evaluate's options that keep a run short
QUICK = ["--split", "time", "--budgets", "5", "--no-measure", "--no-progress"]


def _strict(text: str) -> Any:
    """``text`` parsed as JSON, refusing NaN and Infinity as a strict reader does."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _with_column(table: pa.Table, name: str, values: list[Any]) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


@pytest.fixture(scope="module")
def zero_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log in which SSD saves nothing: every file the same size, one operation per MB."""
    table = make_log(pipelines=2, runs=3, files_per_stage=1)
    for col in ("size_bytes", "expected_size_bytes", "read_bytes", "write_bytes"):
        table = _with_column(table, col, [1_000_000] * table.num_rows)
    path = tmp_path_factory.mktemp("zero") / "io_log.parquet"
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def bad_rows_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small log whose first 5 rows were deleted before they were created."""
    table = make_log(pipelines=2, runs=3, files_per_stage=2, seed=3)
    created = table.column("created_at").to_pylist()
    deleted = table.column("deleted_at").to_pylist()
    deleted[:5] = [c - 10 for c in created[:5]]
    d = tmp_path_factory.mktemp("badrows")
    pq.write_table(_with_column(table, "deleted_at", deleted), d / "io_log.parquet")
    return d


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(placement_group, list(args))


def test_nothing_saved_meets_no_goal_and_prints_n_a(tmp_path: Path, zero_log: Path) -> None:
    res = _invoke("evaluate", str(zero_log), "--out", str(tmp_path), *QUICK, "--json")
    assert res.exit_code == 0, res.output
    payload = _strict(res.output)
    goals = payload["goals"]
    assert goals["5%"]["oracle"] == 0.0 and goals["5%"]["best_heuristic_savings"] == 0.0
    assert goals["5%"]["oracle_capture"] is None
    assert goals["5%"]["ratio_to_best_heuristic"] is None
    assert goals["goal_1_5x_best_heuristic_at_5pct"] is False
    assert goals["goal_oracle_capture_85pct_at_5pct"] is False
    saved = _strict((tmp_path / "placement-eval.json").read_text())
    assert saved["goals"] == goals
    res = _invoke("evaluate", str(zero_log), "--out", str(tmp_path), *QUICK)
    assert res.exit_code == 0, res.output
    assert "captures n/a of the oracle's savings; n/a the best heuristic" in res.output
    assert "inf" not in res.output and "nan" not in res.output


def test_json_output_is_strict(tmp_path: Path, zero_log: Path) -> None:
    from placement.jsonout import dumps, json_safe

    assert json_safe({"a": [math.nan, math.inf, 1.5], "b": (-math.inf,)}) == {
        "a": [None, None, 1.5],
        "b": [None],
    }
    assert _strict(dumps({"x": math.nan})) == {"x": None}
    # --overlap inf: every run at once, written as "inf" (null would read as "as logged")
    res = _invoke(
        "evaluate", str(zero_log), "--out", str(tmp_path), *QUICK, "--overlap", "inf", "--json"
    )
    assert res.exit_code == 0, res.output
    payload = _strict(res.output)
    assert payload["config"]["overlap"] == "inf"
    assert payload["spearman"]["small-files-first"] is None  # every file the same size
    saved = _strict((tmp_path / "placement-eval.json").read_text())
    assert saved["config"]["overlap"] == "inf"
    res = _invoke("simulate", str(zero_log), "--overlap", "inf", "--json", "--no-progress")
    assert res.exit_code == 0, res.output
    assert _strict(res.output)["overlap"] == "inf"


def test_budgets_with_one_label_are_refused_before_any_work(
    tmp_path: Path, zero_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import placement.model_cli

    def no_reading(*_args: Any) -> None:
        raise AssertionError("the logs were read")

    monkeypatch.setattr(placement.model_cli, "_read", no_reading)
    out = tmp_path / "ev"
    for budgets in ("5,5", "1,5,5.0000001"):
        res = _invoke("evaluate", str(zero_log), "--out", str(out), "--budgets", budgets)
        assert res.exit_code == 2, res.output
        assert "Invalid value for --budgets: 5% given more than once" in res.output
        assert "Traceback" not in res.output
    assert not out.exists()


def test_out_that_cannot_be_created_is_refused_before_any_work(
    tmp_path: Path, zero_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import placement.evaluate

    def no_evaluation(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the evaluation ran")

    monkeypatch.setattr(placement.evaluate, "evaluate", no_evaluation)
    (tmp_path / "file").write_text("a regular file")
    out = tmp_path / "file" / "ev"
    res = _invoke("evaluate", str(zero_log), "--out", str(out), *QUICK)
    assert res.exit_code == 1, res.output
    assert f"cannot write to {out}:" in res.output and "--out" in res.output
    assert isinstance(res.exception, SystemExit)


def test_rows_of_the_json_agree_with_the_input(tmp_path: Path, bad_rows_log: Path) -> None:
    res = _invoke("evaluate", str(bad_rows_log), "--out", str(tmp_path), *QUICK, "--json")
    assert res.exit_code == 0, res.output
    rows = _strict(res.output)["rows"]
    n = pq.read_table(bad_rows_log / "io_log.parquet").num_rows
    assert rows["input"]["rows_read"] == n and rows["input"]["rows_dropped"] == 5
    assert rows["total"] == n and rows["usable"] == n - 5
    assert rows["dropped"] == {
        "total_rows": n,
        "dropped_rows": 5,
        "by_reason": {"deleted before created": 5},
    }
    assert _strict((tmp_path / "placement-eval.json").read_text())["rows"] == rows


def test_a_log_given_twice_is_read_once(tmp_path: Path, bad_rows_log: Path) -> None:
    file = bad_rows_log / "io_log.parquet"
    n = pq.read_table(file).num_rows
    res = _invoke(
        "simulate", str(bad_rows_log), str(file), "--policy", "first-fit", "--no-bound",
        "--json", "--no-progress",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    report = _strict(res.output)["input"]
    assert report["files_read"] == 1 and report["files_repeated"] == 1
    assert report["rows_read"] == n
    res = _invoke(
        "simulate", str(bad_rows_log), str(file), "--policy", "first-fit", "--no-bound",
        "--no-progress",
    )  # fmt: skip
    assert "1 file(s) given more than once read once" in res.output


def test_simulate_without_a_model_names_the_skipped_lightgbm(zero_log: Path) -> None:
    res = _invoke("simulate", str(zero_log), "--policy", "all", "--policy", "lightgbm")
    assert res.exit_code == 2 and "--model DIR" in res.output
    res = _invoke("simulate", str(zero_log), "--no-bound", "--no-progress")
    assert res.exit_code == 0, res.output
    assert "lightgbm skipped: give --model DIR" in res.output
    res = _invoke("simulate", str(zero_log), "--no-bound", "--no-progress", "--json")
    assert res.exit_code == 0, res.output
    payload = _strict(res.output)
    assert payload["notes"] == ["lightgbm skipped: give --model DIR"]
    assert "lightgbm" not in {r["policy"] for r in payload["results"]}


def test_simulate_refuses_a_budget_of_zero(zero_log: Path) -> None:
    for budget in ("0%", "0", "0.0%"):
        res = _invoke("simulate", str(zero_log), "--policy", "first-fit", "--budget", budget)
        assert res.exit_code == 2, (budget, res.output)
        assert "--budget" in res.output
    res = _invoke("simulate", str(zero_log), "--policy", "first-fit", "--budget", "0%")
    assert "0% is not in (0, 100]" in res.output
    res = _invoke("evaluate", str(zero_log), "--out", "unused", "--budgets", "0")
    assert res.exit_code == 2 and "0% is not in (0, 100]" in res.output


def test_simulate_reads_a_bare_budget_as_a_percent_as_evaluate_does(zero_log: Path) -> None:
    def capacity(budget: str) -> tuple[int, int]:
        args = ["--policy", "first-fit", "--no-bound", "--no-progress", "--json"]
        res = _invoke("simulate", str(zero_log), "--budget", budget, *args)
        assert res.exit_code == 0, (budget, res.output)
        payload = _strict(res.output)
        return payload["ssd_capacity_bytes"], payload["peak_live_bytes"]

    cap, peak = capacity("5")
    assert peak > 1000 and cap == int(0.05 * peak) == capacity("5%")[0] == capacity("5 %")[0]
    assert capacity("0.5")[0] == int(0.005 * peak)
    # bytes and sizes keep their units
    assert capacity("5B")[0] == 5
    assert capacity("2GiB")[0] == 2 * 2**30
    assert capacity("500MB")[0] == 500_000_000
    # a bare number meant as bytes is refused with the way to say bytes
    res = _invoke("simulate", str(zero_log), "--policy", "first-fit", "--budget", "1000000")
    assert res.exit_code == 2 and "--budget" in res.output
    assert "is not in (0, 100]" in res.output and "1000000B" in res.output
    help_text = " ".join(_invoke("simulate", "--help").output.split())
    assert "(5 or 5%" in help_text and "1000000B" in help_text


def test_a_directory_holding_only_a_kept_collection_names_it(
    tmp_path: Path, zero_log: Path
) -> None:
    """The directory of an interrupted collection holds its runs' logs in a hidden
    ``.parts-*`` directory, which readers skip: the error names it and says to pass it."""
    out = tmp_path / "col"
    parts = out / ".parts-1f6b8639"
    (parts / ".incomplete").mkdir(parents=True)
    pq.write_table(pq.read_table(zero_log), parts / "io_log-0.parquet")
    pq.write_table(pq.read_table(zero_log), parts / ".incomplete" / "io_log-0.parquet")
    (out / ".parts-empty").mkdir()  # holds no log: not one to point at
    res = _invoke("train", str(out), "--out", str(tmp_path / "m"), "--no-progress")
    assert res.exit_code == 1
    message = " ".join(res.output.split())
    assert f"kept in the hidden {parts}," in message
    assert "give that directory itself as LOGS" in message
    assert ".parts-empty" not in message and ".incomplete" not in message
    # beside logs that are read, the skipped directory's line names it too
    res = _invoke("simulate", str(zero_log), str(out), "--policy", "first-fit", "--no-bound")
    assert res.exit_code == 0, res.output
    assert f"skipped {out}: no *.parquet log files there; " in res.output
    assert str(parts) in res.output
    # and the directory itself is read
    res = _invoke("train", str(parts), "--out", str(tmp_path / "m"), "--no-progress")
    assert res.exit_code == 0, res.output


def test_evaluate_says_which_outputs_it_replaced(tmp_path: Path, zero_log: Path) -> None:
    res = _invoke("evaluate", str(zero_log), "--out", str(tmp_path), *QUICK, "--no-bound")
    assert res.exit_code == 0, res.output
    assert "replaced existing" not in res.output
    res = _invoke("evaluate", str(zero_log), "--out", str(tmp_path), *QUICK, "--no-bound")
    assert res.exit_code == 0, res.output
    assert (
        "(replaced existing placement-eval.json, placement-eval.txt, placement-eval.png)"
        in res.output
    )


def test_the_bound_has_one_label_in_evaluate_and_simulate(tmp_path: Path, zero_log: Path) -> None:
    from placement.evaluate import UPPER_BOUND

    res = _invoke("simulate", str(zero_log), "--policy", "first-fit", "--no-progress")
    assert res.exit_code == 0, res.output
    assert any(line.startswith(UPPER_BOUND) for line in res.output.splitlines())
    res = _invoke("evaluate", str(zero_log), "--out", str(tmp_path), *QUICK)
    assert res.exit_code == 0, res.output
    assert any(line.startswith(UPPER_BOUND) for line in res.output.splitlines())


def test_the_text_file_holds_what_the_command_printed(tmp_path: Path, bad_rows_log: Path) -> None:
    """evaluate's .txt opens with the inputs, the split, the test files and the overlap, and
    holds the lines printed around the table: two evaluations that differ only in their
    overlap write different files."""
    texts = {}
    for name, extra in (("eval", []), ("eval4", ["--overlap", "4"])):
        out = tmp_path / name
        res = _invoke("evaluate", str(bad_rows_log), "--out", str(out), *QUICK, *extra)
        assert res.exit_code == 0, res.output
        printed = res.output.rstrip("\n").splitlines()
        assert printed[-1].startswith("wrote ")
        text = (out / "placement-eval.txt").read_text()
        assert text.splitlines() == printed[:-1]
        texts[name] = text
    for text in texts.values():
        lines = text.splitlines()
        assert lines[0] == f"logs: {bad_rows_log}"
        assert lines[1].startswith("input: 1 file(s), ") and "5 bad rows dropped" in lines[1]
        assert lines[2] == "  dropped 5 row(s): deleted before created"
        assert lines[3].startswith("TCO savings vs all-HDD (time split, ")
        assert "Spearman (predicted vs true density)" in text
        assert "at 5%: lightgbm captures " in text and "no placement saves more than" in text
    assert "runs as logged" in texts["eval"] and "replayed" not in texts["eval"]
    assert "runs replayed 4 at a time" in texts["eval4"]


def test_the_json_names_its_version_time_and_inputs(tmp_path: Path, zero_log: Path) -> None:
    import datetime

    res = _invoke(
        "evaluate", str(zero_log), str(zero_log.parent), "--out", str(tmp_path), *QUICK, "--json"
    )
    assert res.exit_code == 0, res.output
    printed = _strict(res.output)
    saved = _strict((tmp_path / "placement-eval.json").read_text())
    for data in (printed, saved):
        assert data["evaluation_version"] == 1
        made = datetime.datetime.fromisoformat(data["generated_at"])
        assert made.utcoffset() == datetime.timedelta(0)
        assert data["inputs"] == [str(zero_log), str(zero_log.parent)]
        assert {"config", "rows", "savings", "goals", "feature_importances"} <= set(data)
    res = _invoke("simulate", str(zero_log), "--policy", "first-fit", "--no-progress", "--json")
    assert res.exit_code == 0, res.output
    data = _strict(res.output)
    assert data["simulation_version"] == 1 and data["inputs"] == [str(zero_log)]
    assert datetime.datetime.fromisoformat(data["generated_at"]).utcoffset() is not None
    assert {"input", "peak_live_bytes", "ssd_capacity_bytes", "results"} <= set(data)


def test_simulate_prints_the_budget_as_it_was_meant(zero_log: Path) -> None:
    args = ["--policy", "first-fit", "--no-bound", "--no-progress"]
    for budget in ("5", "5%", " 5 %"):
        res = _invoke("simulate", str(zero_log), "--budget", budget, *args)
        assert res.exit_code == 0, res.output
        line = next(x for x in res.output.splitlines() if x.startswith("SSD budget "))
        assert "bytes (5% of peak live bytes " in line, line
        res = _invoke("simulate", str(zero_log), "--budget", budget, *args, "--json")
        assert _strict(res.output)["budget"] == "5%"
    res = _invoke("simulate", str(zero_log), "--budget", "2GiB", *args)
    assert res.exit_code == 0, res.output
    assert "SSD budget 2,147,483,648 bytes (2GiB; peak live bytes " in res.output


def test_the_bound_option_says_how_many_budgets_it_bounds() -> None:
    def bound_help(command: str) -> str:
        text = " ".join(_invoke(command, "--help").output.split())
        return text[text.index("--bound / --no-bound") :].split("[default")[0]

    assert "at the budget " in bound_help("simulate") and "each" not in bound_help("simulate")
    assert "at each budget " in bound_help("evaluate")


def test_simulate_writes_what_it_prints_with_out(tmp_path: Path, zero_log: Path) -> None:
    args = ["simulate", str(zero_log), "--policy", "first-fit", "--no-bound", "--no-progress"]
    out = tmp_path / "sim"
    res = _invoke(*args, "--out", str(out))
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} == {"placement-simulate.json", "placement-simulate.txt"}
    printed = res.output.rstrip("\n").splitlines()
    assert printed[-1] == (
        f"wrote {out / 'placement-simulate.json'}, {out / 'placement-simulate.txt'}"
    )
    assert (out / "placement-simulate.txt").read_text().splitlines() == printed[:-1]
    assert printed[0] == f"logs: {zero_log}" and printed[2].startswith("SSD budget ")
    saved = _strict((out / "placement-simulate.json").read_text())
    shown = _strict(_invoke(*args, "--json").output)
    for data in (saved, shown):
        data.pop("generated_at")
        for r in data["results"]:
            r.pop("wall_s")
    assert saved == shown
    res = _invoke(*args, "--out", str(out), "--json")
    assert res.exit_code == 0, res.output
    data = _strict(res.output)
    assert data["files"] == {
        "json": str(out / "placement-simulate.json"),
        "table": str(out / "placement-simulate.txt"),
    }
    assert len(data["files_replaced"]) == 2
    # an --out that cannot be written is refused before any work
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = _invoke(*args, "--out", str(blocker / "sim"))
    assert res.exit_code == 1 and f"cannot write to {blocker / 'sim'}" in res.output


def test_a_copy_of_a_log_under_another_name_is_counted_once(
    tmp_path: Path, bad_rows_log: Path
) -> None:
    """The same rows read from two files (a log copied under another name) are one set of
    files: the copy's rows are dropped, counted, and change nothing."""
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "other.parquet").write_bytes((bad_rows_log / "io_log.parquet").read_bytes())
    n = pq.read_table(bad_rows_log / "io_log.parquet").num_rows
    sim = ["--policy", "first-fit", "--no-bound", "--no-progress"]
    once = _strict(_invoke("simulate", str(bad_rows_log), *sim, "--json").output)
    res = _invoke("simulate", str(bad_rows_log), str(copy), *sim, "--json")
    assert res.exit_code == 0, res.output
    twice = _strict(res.output)
    report = twice["input"]
    assert report["files_read"] == 2 and report["rows_read"] == 2 * n
    assert report["rows_dropped"] == 10 and report["rows_repeated"] == n - 5
    assert report["rows_usable"] == n - 5 == once["input"]["rows_usable"]
    assert once["input"]["rows_repeated"] == 0
    assert twice["peak_live_bytes"] == once["peak_live_bytes"]
    assert twice["results"][0]["n_files"] == once["results"][0]["n_files"] == n - 5
    assert twice["results"][0]["savings_fraction"] == once["results"][0]["savings_fraction"]
    res = _invoke("simulate", str(bad_rows_log), str(copy), *sim)
    assert f"{n - 5} duplicate rows dropped" in res.output.splitlines()[1]
    # evaluate: the same test files and savings as from the log alone
    outs = {}
    for name, logs in (("once", [bad_rows_log]), ("twice", [bad_rows_log, copy])):
        res = _invoke("evaluate", *map(str, logs), "--out", str(tmp_path / name), *QUICK)
        assert res.exit_code == 0, res.output
        outs[name] = _strict((tmp_path / name / "placement-eval.json").read_text())
    assert outs["twice"]["rows"]["test"] == outs["once"]["rows"]["test"]
    assert outs["twice"]["rows"]["usable"] == n - 5
    assert outs["twice"]["rows"]["input"]["rows_repeated"] == n - 5
    assert outs["twice"]["savings"] == outs["once"]["savings"]


def test_prices_change_what_simulate_and_evaluate_count_and_are_shown(
    tmp_path: Path, zero_log: Path
) -> None:
    """At list prices moving ``zero_log``'s short-lived files to SSD saves (one file is live
    at a time: a budget of all peak live bytes holds it); at an SSD price of a billion
    dollars per GB-month nothing does, and the outputs say which prices were used."""
    args = ["--policy", "oracle", "--budget", "100", "--no-bound", "--no-progress"]
    dear = ["--price", "ssd_usd_per_gb_month=1e9"]

    def oracle(*prices: str) -> tuple[float, dict[str, Any], str]:
        res = _invoke("simulate", str(zero_log), *args, *prices, "--json")
        assert res.exit_code == 0, res.output
        payload = _strict(res.output)
        text = _invoke("simulate", str(zero_log), *args, *prices).output
        return payload["results"][0]["savings_fraction"], payload["cost_model"], text

    saved, cost, text = oracle()
    assert saved > 0.5 and cost["ssd_usd_per_gb_month"] == 0.08
    assert "prices: defaults" in text
    saved, cost, text = oracle(*dear)
    assert saved == 0.0 and cost["ssd_usd_per_gb_month"] == 1e9
    assert "prices: ssd_usd_per_gb_month=1e+09; the rest defaults" in text

    quick = [a if a != "5" else "100" for a in QUICK]  # --budgets 100
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ["--out", str(tmp_path)]
        res = _invoke("evaluate", str(zero_log), *out, *quick, "--no-bound", *dear)
    assert res.exit_code == 0, res.output
    # a constant prediction has no rank correlation: left out, without scipy's warning
    assert not [w for w in caught if "is constant" in str(w.message)]
    assert "prices: ssd_usd_per_gb_month=1e+09; the rest defaults" in res.output
    saved_json = _strict((tmp_path / "placement-eval.json").read_text())
    assert saved_json["config"]["cost_model"]["ssd_usd_per_gb_month"] == 1e9
    assert saved_json["savings"]["oracle"] == {"100%": 0.0}


def test_a_bad_price_is_a_usage_error_naming_the_field(zero_log: Path) -> None:
    for command in (["simulate", str(zero_log)], ["evaluate", str(zero_log), "--out", "unused"]):
        res = _invoke(*command, "--price", "ssd_usd_per_gb=0.01")
        assert res.exit_code == 2, res.output
        assert "--price" in res.output and "did you mean ssd_usd_per_gb_month?" in res.output


def test_train_refuses_an_out_it_cannot_write_before_training(
    tmp_path: Path, zero_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from placement.model import ModelSet

    def no_training(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the training ran")

    monkeypatch.setattr(ModelSet, "fit", no_training)
    (tmp_path / "file").write_text("a regular file")
    out = tmp_path / "file" / "model"
    res = _invoke("train", str(zero_log), "--out", str(out), "--no-progress")
    assert res.exit_code == 1, res.output
    assert f"cannot write to {out}:" in res.output and "--out" in res.output


def test_a_log_path_that_does_not_exist_is_refused_not_skipped(
    tmp_path: Path, zero_log: Path
) -> None:
    typo = tmp_path / "lgos"
    for command in (
        ["train", str(zero_log), str(typo), "--out", str(tmp_path / "m")],
        ["evaluate", str(zero_log), str(typo), "--out", str(tmp_path / "e"), *QUICK],
        ["simulate", str(zero_log), str(typo), "--no-progress"],
    ):
        res = _invoke(*command)
        assert res.exit_code == 1, (command, res.output)
        assert f"log path {typo} does not exist" in res.output, res.output
    assert not (tmp_path / "m").exists(), "nothing trained on the logs that were there"


def test_simulate_names_its_model_and_says_when_its_figures_are_in_sample(
    tmp_path: Path,
) -> None:
    seen, unseen = tmp_path / "seen.parquet", tmp_path / "unseen.parquet"
    pq.write_table(make_log(pipelines=2, runs=3, files_per_stage=2, seed=5), seen)
    other = make_log(pipelines=2, runs=3, files_per_stage=2, seed=6)
    runs = [f"later-{r}" for r in other.column("run_id").to_pylist()]
    pq.write_table(_with_column(other, "run_id", runs), unseen)
    model = tmp_path / "model"
    assert _invoke("train", str(seen), "--out", str(model), "--trees", "5").exit_code == 0
    for log, trained_on in ((seen, 6), (unseen, 0)):
        res = _invoke("simulate", str(log), "--model", str(model), "--no-progress", "--json")
        assert res.exit_code == 0, res.output
        payload = _strict(res.output)
        facts = payload["model"]
        assert facts["dir"] == str(model) and facts["trained_rows"] > 0
        assert facts["runs_trained_on_here"] == trained_on
        in_sample = any("in-sample" in n for n in payload.get("notes", []))
        assert in_sample == (trained_on > 0), payload.get("notes")
    text = _invoke("simulate", str(seen), "--model", str(model), "--no-progress").output
    assert f"model: {model}" in text and "trained on 6 of the 6 runs" in text


def test_a_single_budget_plots_without_a_matplotlib_warning(
    tmp_path: Path, bad_rows_log: Path
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = _invoke(
            "evaluate", str(bad_rows_log), "--out", str(tmp_path), *QUICK, "--budgets", "0.0001"
        )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "placement-eval.png").stat().st_size > 0
    assert [str(w.message) for w in caught if "xlims" in str(w.message)] == []


def test_progress_bars_stay_out_of_pipes(tmp_path: Path, bad_rows_log: Path) -> None:
    """Without --no-progress, a run whose stderr is not a terminal (CliRunner's, a pipe, a
    log file) prints no tqdm bar, as ``report`` does."""
    args = ["--split", "time", "--budgets", "5", "--no-measure"]
    for command in (
        ["evaluate", str(bad_rows_log), "--out", str(tmp_path), *args],
        ["simulate", str(bad_rows_log)],
    ):
        res = _invoke(*command)
        assert res.exit_code == 0, res.output
        assert "\r" not in res.output and "/s]" not in res.output, res.output
