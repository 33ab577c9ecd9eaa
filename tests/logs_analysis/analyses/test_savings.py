"""The report's savings curve: the break-even test gets each file's expected lifetime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from logs_analysis.analyses.savings import SavingsResult, savings_curve
from tests.placement.logtables import make_log


@pytest.fixture(scope="module")
def table() -> Any:
    from placement.features import clean_table

    df, _ = clean_table(make_log(runs=3, files_per_stage=10))
    return df


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record the ``expected_lifetime`` every policy_roster call gets."""
    from placement import simulator

    seen: list[Any] = []
    real = simulator.policy_roster

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("expected_lifetime"))
        return real(*args, **kwargs)

    monkeypatch.setattr(simulator, "policy_roster", spy)
    return seen


def test_priced_lifetime_uses_the_stage_history_lifetime_as_evaluate_does(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from placement.cost import CostModel
    from placement.evaluate import stage_history_lifetime
    from placement.features import HistoryStore, build_features, log_density

    wear = CostModel(ssd_usd_per_tb_written=0.057, hdd_bytes_per_s=270e6)
    seen = _spy(monkeypatch)
    pred = log_density(table)
    result = savings_curve(table, pred, pred, [0.05, 0.2], cost_model=wear)
    assert isinstance(result, SavingsResult)
    want = stage_history_lifetime(build_features(table, HistoryStore.from_table(table)))
    assert np.isnan(want).any() and np.isfinite(want).any()  # first runs have no history
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], want)
    # a caller that has the lifetimes passes them
    seen.clear()
    given = np.full(len(table), 2.0)
    savings_curve(table, pred, pred, [0.05], cost_model=wear, expected_lifetime=given)
    np.testing.assert_array_equal(seen[0], given)
    with pytest.raises(ValueError, match="expected_lifetime has shape"):
        savings_curve(table, pred, pred, [0.05], cost_model=wear, expected_lifetime=given[:3])


def test_default_prices_need_no_lifetime(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from placement.features import log_density

    seen = _spy(monkeypatch)
    pred = log_density(table)
    assert isinstance(savings_curve(table, pred, pred, [0.05]), SavingsResult)
    assert seen == [None]


def test_savings_rows_is_a_maximum_of_whole_runs(table: Any) -> None:
    import pandas as pd

    from logs_analysis.analyses.savings import _subset
    from placement.features import log_density

    rng = np.random.default_rng(0)
    sizes = rng.integers(20, 200, 40)
    df = pd.DataFrame({"run_id": np.repeat([f"r{i}" for i in range(40)], sizes)})
    for max_rows in (150, 500, 1234, 4000):
        mask = _subset(df, max_rows, 0)
        assert max_rows / 2 <= mask.sum() <= max_rows, max_rows
        kept = df.loc[mask, "run_id"].value_counts()
        assert (kept == df["run_id"].value_counts()[kept.index]).all()  # whole runs
    # with few runs, or runs too large to fill half of it, rows are drawn: exactly max_rows
    assert _subset(df.iloc[: sizes[:3].sum()], 50, 0).sum() == 50
    big = pd.DataFrame({"run_id": np.repeat([f"r{i}" for i in range(6)], 300)})
    assert _subset(big, 250, 0).sum() == 250
    # the replay itself: 12 runs of 30 rows, at most 100 replayed
    pred = log_density(table)
    result = savings_curve(table, pred, pred, [0.05], max_rows=100)
    assert isinstance(result, SavingsResult)
    assert 50 <= result.rows <= 100


def test_savings_rows_help_says_runs_may_be_cut(table: Any) -> None:
    """``--savings-rows 1`` replays one row: the help said "whole runs" only."""
    from click.testing import CliRunner

    from logs_analysis.analyses.savings import _subset
    from logs_analysis.cli import report_command

    assert _subset(table, 1, 0).sum() == 1  # a cap, below the size of any run
    help_text = " ".join(CliRunner().invoke(report_command, ["--help"]).output.split())
    assert "at most N, as whole runs while they fit" in help_text
    assert "N rows are drawn at random, cutting runs" in help_text


def test_best_heuristic_per_budget(table: Any) -> None:
    from placement.evaluate import HEURISTICS
    from placement.features import log_density

    pred = log_density(table)
    result = savings_curve(table, pred, pred, [0.05, 0.2])
    assert isinstance(result, SavingsResult)
    best = result.best_heuristic()
    assert len(best) == 2
    for i, b in enumerate(best):
        assert b["policy"] in HEURISTICS
        assert b["savings"] == max(result.savings[h][i] for h in HEURISTICS)
        assert b["lightgbm_ratio"] == pytest.approx(result.savings["lightgbm"][i] / b["savings"])
    from logs_analysis.analyses import savings

    assert savings.HEURISTICS == HEURISTICS  # kept in step with the placement evaluation


def test_five_runs_are_enough_to_replay_whole_runs_filling_max_rows_exactly() -> None:
    import pandas as pd

    from logs_analysis.analyses.savings import _subset

    # 5 runs of 10 rows: any 3 of them fill max_rows=30 exactly, so 3 whole runs are kept
    df = pd.DataFrame({"run_id": np.repeat([f"r{i}" for i in range(5)], 10)})
    for seed in range(5):
        mask = _subset(df, 30, seed)
        kept = df.loc[mask, "run_id"].value_counts()
        assert mask.sum() == 30 and len(kept) == 3 and (kept == 10).all(), seed


@pytest.mark.parametrize("budgets", [[0.0], [0.05, 0.0], [1.5], []])
def test_budgets_outside_zero_to_one_are_refused(table: Any, budgets: list[float]) -> None:
    from logs_analysis.errors import AnalysisConfigError
    from placement.features import log_density

    pred = log_density(table)
    with pytest.raises(AnalysisConfigError, match="must be shares in"):
        savings_curve(table, pred, pred, budgets)


def test_the_whole_ssd_is_a_valid_budget(table: Any) -> None:
    from placement.features import log_density

    pred = log_density(table)
    assert isinstance(savings_curve(table, pred, pred, [1.0], max_rows=60), SavingsResult)


def test_no_lightgbm_ratio_where_the_best_heuristic_saved_nothing() -> None:
    result = SavingsResult(
        budgets=[0.05, 0.2],
        peak_live_bytes=1,
        savings={
            "first-fit": [0.0, 0.1],
            "small-files-first": [-0.2, 0.05],
            "stage-history": [0.0, 0.3],
            "lightgbm": [0.1, 0.6],
        },
        ssd_io_share={},
        simulations=[],
        rows=1,
        all_hdd_tco_usd=1.0,
        cost_model={},
    )
    first, second = result.best_heuristic()
    assert first["savings"] == 0.0 and first["lightgbm_ratio"] is None
    assert second["policy"] == "stage-history"
    assert second["lightgbm_ratio"] == pytest.approx(0.6 / 0.3)


def test_all_hdd_tco_is_the_baseline_of_the_replays(table: Any) -> None:
    from placement.features import log_density

    pred = log_density(table)
    result = savings_curve(table, pred, pred, [0.05, 0.2])
    assert isinstance(result, SavingsResult)
    assert result.all_hdd_tco_usd > 0
    assert {s["all_hdd_tco_usd"] for s in result.simulations} == {result.all_hdd_tco_usd}
    assert len(result.upper_bound) == 2


def test_rows_that_hold_no_bytes_have_no_savings_curve(table: Any) -> None:
    from logs_analysis.analyses import Unavailable

    empty = table.assign(size_bytes=0, write_bytes=0, read_bytes=0)
    zeros = np.zeros(len(empty))
    result = savings_curve(empty, zeros, zeros, [0.05])
    assert isinstance(result, Unavailable) and "hold no bytes" in result.reason
