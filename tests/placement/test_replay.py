"""One trace through every policy at each budget: the loop evaluate and the report share."""

from __future__ import annotations

import numpy as np
import pytest

from placement.bound import savings_upper_bound
from placement.cost import CostModel
from placement.features import RowIssues
from placement.replay import BudgetReplay, replay_budgets
from placement.simulator import Trace, peak_live_bytes, policy_roster, simulate

MB = 1_000_000


@pytest.fixture(scope="module")
def trace() -> Trace:
    rng = np.random.default_rng(3)
    n = 60
    created = rng.uniform(0, 20, n)
    size = rng.integers(1, 50, n) * MB
    return Trace(
        created=created,
        deleted=created + rng.uniform(0.5, 6, n),
        size=size,
        ops=rng.integers(1, 20_000, n).astype(np.float64),
        io_bytes=size * 2.0,
        write_bytes=size * 1.0,
        issues=RowIssues(total_rows=n),
    )


def _roster(trace: Trace, cost: CostModel):
    true = np.log10(trace.density)
    noisy = true + np.random.default_rng(0).normal(0, 0.5, len(trace))
    return policy_roster(trace, cost, stage_history=noisy, lightgbm=true)


def test_each_budget_replays_every_policy_as_simulate_does(trace: Trace) -> None:
    cost = CostModel()
    roster = _roster(trace, cost)
    budgets = (0.2, 0.05, 0.5)
    calls = []
    replays = replay_budgets(trace, roster, budgets, cost, on_replay=lambda: calls.append(1))
    assert len(calls) == len(roster) * len(budgets)
    assert [r.budget for r in replays] == list(budgets)
    peak = peak_live_bytes(trace)
    names = [name for name, _, _ in roster]
    for replay in replays:
        assert isinstance(replay, BudgetReplay)
        assert replay.capacity_bytes == int(replay.budget * peak)
        assert list(replay.results) == names
        for name, make, pred in roster:
            got = replay.results[name]
            cap = replay.capacity_bytes
            alone = simulate(trace, make(cap), cost, cap, predictions=pred)
            assert got.policy == name
            assert got.ssd_capacity_bytes == replay.capacity_bytes
            assert got.tco_usd == pytest.approx(alone.tco_usd)
            assert got.ssd_files == alone.ssd_files
        # the bound is the LP's at that capacity, and no replay beats it
        bound = savings_upper_bound(trace, replay.capacity_bytes, cost).savings_fraction
        assert replay.upper_bound == pytest.approx(bound)
        best = max(r.savings_fraction for r in replay.results.values())
        assert best <= replay.upper_bound + 1e-9
    # more SSD never saves the oracle less
    oracle = {r.budget: r.results["oracle"].savings_fraction for r in replays}
    assert oracle[0.05] <= oracle[0.2] <= oracle[0.5]


def test_bound_can_be_skipped_and_tiers_kept(trace: Trace) -> None:
    cost = CostModel()
    replays = replay_budgets(trace, _roster(trace, cost), [0.1], cost, upper_bound=False)
    assert len(replays) == 1 and replays[0].upper_bound is None
    assert replays[0].results["oracle"].savings_fraction > 0
    assert replays[0].results["oracle"].tiers is None
    kept = replay_budgets(
        trace, _roster(trace, cost), [0.1], cost, upper_bound=False, keep_tiers=True
    )
    for name, result in kept[0].results.items():
        assert result.tiers.shape == (len(trace),)
        assert int(result.tiers.sum()) == result.ssd_files == replays[0].results[name].ssd_files


def test_two_policies_of_one_name_are_an_error(trace: Trace) -> None:
    """Results are keyed by name: a second policy of the same name would replace the first."""
    from placement.errors import PlacementConfigError

    roster = _roster(trace, CostModel())
    twice = [*roster, ("first-fit", roster[1][1], None)]
    with pytest.raises(PlacementConfigError, match="'first-fit' is given 2 times"):
        replay_budgets(trace, twice, [0.1], CostModel(), upper_bound=False)
