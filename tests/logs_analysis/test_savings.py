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
