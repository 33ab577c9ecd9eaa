"""The savings bound: above every placement the replay can make, exact where it can be."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from placement.bound import BoundError, savings_upper_bound
from placement.cost import CostModel
from placement.errors import PlacementError
from placement.features import RowIssues
from placement.policy import FirstFitPolicy
from placement.simulator import Trace, peak_live_bytes, simulate

MB = 1_000_000


def _trace(created, deleted, size, ops) -> Trace:
    created = np.asarray(created, np.float64)
    size = np.asarray(size, np.int64)
    ops = np.asarray(ops, np.float64)
    return Trace(
        created=created,
        deleted=np.asarray(deleted, np.float64),
        size=size,
        ops=ops,
        io_bytes=size.astype(np.float64) * 2,
        write_bytes=size.astype(np.float64),
        issues=RowIssues(total_rows=len(created)),
    )


def _best_placement(trace: Trace, cap: int) -> float:
    """The exact 0/1 optimum by trying every subset (small traces only)."""
    ssd, hdd = trace.costs(CostModel())
    gain = hdd - ssd
    n = len(trace)
    best = 0.0
    for chosen in itertools.product((False, True), repeat=n):
        x = np.array(chosen)
        live = [
            trace.size[x & (trace.created <= t) & (trace.deleted > t)].sum() for t in trace.created
        ]
        if max(live) <= cap:
            best = max(best, float(gain[x].sum()))
    return best


def _random_trace(rng: np.random.Generator, n: int) -> Trace:
    created = rng.uniform(0, 10, n).round(1)
    return _trace(
        created,
        created + rng.uniform(0.5, 5, n).round(1),
        rng.integers(1, 60, n) * MB,
        rng.integers(1, 5_000, n),
    )


def test_the_greedy_oracle_can_miss_the_optimum_and_the_bound_covers_it() -> None:
    # A is the densest, but once it is on SSD neither B nor C fits; B and C together save more
    trace = _trace([0, 0, 0], [10, 10, 10], [60 * MB, 50 * MB, 50 * MB], [60_000, 45_000, 45_000])
    cap = 100 * MB
    ssd, hdd = trace.costs(CostModel())
    gain = hdd - ssd
    assert (gain > 0).all() and gain[1] + gain[2] > gain[0]
    oracle = simulate(trace, trace.oracle(cap), CostModel(), cap, keep_tiers=True)
    assert oracle.tiers.tolist() == [1, 0, 0]
    best = _best_placement(trace, cap)
    assert best == pytest.approx(gain[1] + gain[2])
    bound = savings_upper_bound(trace, cap)
    assert oracle.savings_usd < best <= bound.savings_usd * (1 + 1e-9)
    assert bound.all_hdd_tco_usd == pytest.approx(hdd.sum())


def test_the_bound_is_the_fractional_optimum() -> None:
    # two files of 0.6 of the budget, alive together, equal gains: x1 + x2 <= 1 / 0.6
    trace = _trace([0, 0], [10, 10], [60 * MB, 60 * MB], [50_000, 50_000])
    ssd, hdd = trace.costs(CostModel())
    gain = (hdd - ssd)[0]
    bound = savings_upper_bound(trace, 100 * MB)
    assert bound.savings_usd == pytest.approx(gain / 0.6, rel=1e-6)
    assert bound.n_files == 2 and bound.n_times == 2


def test_files_apart_in_time_all_fit_and_the_bound_is_their_sum() -> None:
    trace = _trace([0, 2, 4], [1, 3, 5], [90 * MB, 80 * MB, 70 * MB], [9_000, 8_000, 7_000])
    ssd, hdd = trace.costs(CostModel())
    gain = hdd - ssd
    bound = savings_upper_bound(trace, 100 * MB)
    assert bound.savings_usd == pytest.approx(gain[gain > 0].sum(), rel=1e-6)
    full = simulate(trace, FirstFitPolicy(100 * MB), CostModel(), 100 * MB)
    assert full.savings_usd == pytest.approx(bound.savings_usd, rel=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_no_placement_beats_the_bound(seed: int) -> None:
    rng = np.random.default_rng(seed)
    trace = _random_trace(rng, 9)
    cap = int(0.4 * peak_live_bytes(trace))
    bound = savings_upper_bound(trace, cap)
    best = _best_placement(trace, cap)
    oracle = simulate(trace, trace.oracle(cap), CostModel(), cap)
    first_fit = simulate(trace, FirstFitPolicy(cap), CostModel(), cap)
    tol = 1e-9 * bound.all_hdd_tco_usd
    assert max(oracle.savings_usd, first_fit.savings_usd) <= best + tol
    assert best <= bound.savings_usd + tol
    ssd, hdd = trace.costs(CostModel())
    gain = hdd - ssd
    assert bound.savings_usd <= gain[(gain > 0) & (trace.size <= cap)].sum() + tol


@pytest.mark.parametrize("seed", range(3))
def test_the_bound_is_the_relaxation_written_per_instant(seed: int) -> None:
    # the same program written directly: one row per creation time over the files alive
    # then; its optimum must equal the level form's (so the bound is tight, not just above)
    from scipy.optimize import linprog

    rng = np.random.default_rng(100 + seed)
    trace = _random_trace(rng, 40)
    cap = int(0.3 * peak_live_bytes(trace))
    ssd, hdd = trace.costs(CostModel())
    gain = hdd - ssd
    use = (gain > 0) & (trace.size <= cap)
    live = np.array(
        [(trace.created <= t) & (trace.deleted > t) & use for t in np.unique(trace.created)]
    )
    res = linprog(
        -gain * use,
        A_ub=live * trace.size / cap,
        b_ub=np.ones(len(live)),
        bounds=(0, 1),
        method="highs",
    )
    assert res.status == 0
    bound = savings_upper_bound(trace, cap)
    assert bound.savings_usd == pytest.approx(-res.fun, rel=1e-6)
    oracle = simulate(trace, trace.oracle(cap), CostModel(), cap)
    assert oracle.savings_usd <= bound.savings_usd * (1 + 1e-9)


def test_budget_edges_and_bad_budgets() -> None:
    trace = _trace([0, 0], [1, 1], [10 * MB, 500 * MB], [5_000, 5_000])
    assert savings_upper_bound(trace, 0).savings_usd == 0.0
    too_big = savings_upper_bound(trace, 100 * MB)
    assert too_big.n_files == 1  # the 500 MB file can never fit
    assert too_big.to_dict()["savings_fraction"] == pytest.approx(too_big.savings_fraction)
    with pytest.raises(ValueError, match="ssd_capacity_bytes"):
        savings_upper_bound(trace, -1)
    with pytest.raises(TypeError, match="ssd_capacity_bytes"):
        savings_upper_bound(trace, "1GB")  # type: ignore[arg-type]


def test_a_solver_failure_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import scipy.optimize

    failed = SimpleNamespace(status=4, message="numerical difficulties", fun=0.0)
    monkeypatch.setattr(scipy.optimize, "linprog", lambda *a, **k: failed)
    trace = _trace([0, 0], [1, 1], [10 * MB, 20 * MB], [5_000, 5_000])
    with pytest.raises(BoundError, match="2 files.*numerical difficulties") as info:
        savings_upper_bound(trace, 100 * MB)
    assert isinstance(info.value, PlacementError)


@pytest.mark.parametrize("big_ops", [1e12, 1e13])
def test_the_bound_stays_above_the_oracle_when_gains_span_many_orders(big_ops: float) -> None:
    """Three huge, long files next to 3,000 small ones: the smallest gains are 1e-8 and 1e-9
    of the largest, below the solver's tolerance once gains are scaled to a largest of 1.
    The solver's objective then falls short of the oracle; the dual bound does not."""
    rng = np.random.default_rng(0)
    k = 3000
    created = rng.uniform(0, 1000, k)
    deleted = created + rng.uniform(1, 50, k)
    size = rng.integers(1, 20, k) * MB
    ops = 10 ** rng.uniform(3, 4, k)
    created[:3], deleted[:3], ops[:3], size[:3] = 0, 1100, big_ops, 10 * MB
    trace = _trace(created, deleted, size, ops)
    gain = np.subtract(*trace.costs(CostModel())[::-1])
    assert gain[gain > 0].min() / gain.max() < 1e-7
    cap = 60 * MB
    bound = savings_upper_bound(trace, cap)
    oracle = simulate(trace, trace.oracle(cap), CostModel(), cap)
    first_fit = simulate(trace, FirstFitPolicy(cap), CostModel(), cap)
    assert max(oracle.savings_usd, first_fit.savings_usd) <= bound.savings_usd


@pytest.mark.parametrize("seed", range(4))
def test_the_bound_holds_whatever_duals_the_solver_returns(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is weak duality over the solver's duals: perturbed, zeroed or negative
    duals loosen it, never push it below the best placement."""
    import scipy.optimize

    rng = np.random.default_rng(seed)
    trace = _random_trace(rng, 9)
    cap = int(0.4 * peak_live_bytes(trace))
    exact = savings_upper_bound(trace, cap).savings_usd
    best = _best_placement(trace, cap)
    real = scipy.optimize.linprog

    for noise in ("zero", "scaled", "negative"):

        def perturbed(*args, noise=noise, **kwargs):
            res = real(*args, **kwargs)
            lam = np.asarray(res.eqlin.marginals, np.float64)
            lam = {
                "zero": np.zeros_like(lam),
                "scaled": lam * rng.uniform(0.5, 2.0, lam.shape),
                "negative": -np.abs(lam),
            }[noise]
            res.eqlin = SimpleNamespace(marginals=lam)
            return res

        monkeypatch.setattr(scipy.optimize, "linprog", perturbed)
        loose = savings_upper_bound(trace, cap).savings_usd
        assert best <= loose * (1 + 1e-12), noise
        assert exact <= loose * (1 + 1e-9), noise  # the solver's own duals are the tightest


def test_a_zero_byte_file_takes_ssd_for_free_and_the_bound_counts_it() -> None:
    # no budget at all, yet a 0-byte file fits (0 <= 0) and saves its whole gain
    trace = _trace([0, 0], [10, 10], [0, 10 * MB], [50_000, 50_000])
    ssd, hdd = trace.costs(CostModel())
    gain = hdd - ssd
    assert gain[0] > 0
    placed = simulate(trace, FirstFitPolicy(0), CostModel(), 0, keep_tiers=True)
    assert placed.tiers.tolist() == [1, 0]
    bound = savings_upper_bound(trace, 0)
    assert bound.n_files == 0  # nothing to pack: the free file is added outside the program
    assert bound.savings_usd == pytest.approx(gain[0])
    assert bound.savings_fraction == pytest.approx(gain[0] / hdd.sum())
    assert placed.savings_usd <= bound.savings_usd * (1 + 1e-9)


def test_a_file_the_size_of_the_whole_budget_can_be_placed_and_is_counted() -> None:
    trace = _trace([0], [10], [100 * MB], [50_000])
    ssd, hdd = trace.costs(CostModel())
    gain = float((hdd - ssd)[0])
    assert gain > 0
    placed = simulate(trace, FirstFitPolicy(100 * MB), CostModel(), 100 * MB)
    assert placed.savings_usd == pytest.approx(gain)
    bound = savings_upper_bound(trace, 100 * MB)
    assert bound.n_files == 1
    assert bound.savings_usd == pytest.approx(gain, rel=1e-6)


def test_files_that_lose_money_on_ssd_stay_out_of_the_bound() -> None:
    # big files read once over a long life: SSD capacity costs more than the HDD they free
    trace = _trace([0, 0], [1e6, 1e6], [50 * MB, 40 * MB], [1, 1])
    ssd, hdd = trace.costs(CostModel())
    assert ((hdd - ssd) < 0).all()
    bound = savings_upper_bound(trace, 100 * MB)
    assert bound.n_files == 0 and bound.n_times == 0
    assert bound.savings_usd == 0.0 and bound.savings_fraction == 0.0


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_the_bound_ignores_duals_that_are_not_finite(monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN or infinite duals price nothing: the bound falls back to every gain, still finite."""
    import scipy.optimize

    trace = _trace([0, 0], [10, 10], [60 * MB, 60 * MB], [50_000, 50_000])
    ssd, hdd = trace.costs(CostModel())
    gain = hdd - ssd
    real = scipy.optimize.linprog
    for bad in (math.nan, math.inf):

        def broken(*args, bad=bad, **kwargs):
            res = real(*args, **kwargs)
            res.eqlin = SimpleNamespace(marginals=np.full_like(res.eqlin.marginals, bad))
            return res

        monkeypatch.setattr(scipy.optimize, "linprog", broken)
        bound = savings_upper_bound(trace, 100 * MB)
        # every y is 0: each file keeps its whole gain as slack
        assert bound.savings_usd == pytest.approx(gain.sum()), bad
