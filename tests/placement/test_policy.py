"""Placement policies: never over budget, SSD full -> HDD, adaptive threshold, the oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from placement.cost import CostModel
from placement.errors import PlacementConfigError, PlacementError, PlacementTypeError
from placement.policy import (
    AdaptiveThresholdPolicy,
    AllHDDPolicy,
    FirstFitPolicy,
    OccupancyBasis,
    OraclePolicy,
    PlacementPolicy,
    SmallFilesFirstPolicy,
    SSDLedger,
    StageHistoryPolicy,
    check_capacity,
    oracle_admissions,
)
from placement.schema import MIN_LIFETIME_S
from placement.tier import Tier


def test_every_policy_follows_the_protocol() -> None:
    for p in (
        AllHDDPolicy(),
        FirstFitPolicy(10),
        SmallFilesFirstPolicy(10),
        StageHistoryPolicy(10),
        AdaptiveThresholdPolicy(10),
        OraclePolicy([], 10),
    ):
        assert isinstance(p, PlacementPolicy)


def test_first_fit_fills_then_falls_back_to_hdd_and_reuses_freed_space() -> None:
    p = FirstFitPolicy(100)
    assert p.place("a", math.nan, 60, 0.0) is Tier.SSD
    assert p.place("b", math.nan, 60, 1.0) is Tier.HDD  # does not fit: HDD, no error
    assert p.place("c", math.nan, 40, 2.0) is Tier.SSD
    assert p.ledger.used == 100
    p.release("a", 3.0)
    p.release("b", 3.0)  # an HDD file: nothing to free
    assert p.ledger.used == 40
    assert p.place("d", math.nan, 60, 4.0) is Tier.SSD


def test_zero_capacity_and_bad_capacity() -> None:
    assert FirstFitPolicy(0).place("a", 0.0, 1, 0.0) is Tier.HDD
    with pytest.raises(ValueError, match="ssd_capacity_bytes"):
        FirstFitPolicy(-1)
    with pytest.raises(ValueError, match="ssd_capacity_bytes"):
        SSDLedger(float("inf"))  # type: ignore[arg-type]


def test_all_hdd() -> None:
    assert AllHDDPolicy().place("a", 10.0, 1, 0.0) is Tier.HDD


def test_small_files_first_with_a_size_limit() -> None:
    p = SmallFilesFirstPolicy(1000, max_size_bytes=100)
    assert p.place("small", math.nan, 50, 0.0) is Tier.SSD
    assert p.place("big", math.nan, 500, 0.0) is Tier.HDD


def test_small_files_first_without_a_size_limit_admits_the_small_files_of_recent_traffic() -> None:
    """Ranked by size alone (smallest first) under the adaptive threshold: with the SSD 80%
    full only the smallest files of the recent bytes get in."""
    p = SmallFilesFirstPolicy(10**6, min_window=10, refresh=1)
    sizes = np.logspace(2, 5, 60).astype(int)  # 100 bytes .. 100 kB, mixed in time
    for i, size in enumerate(np.random.default_rng(0).permutation(sizes)):
        p.place(("warm", i), math.nan, int(size), float(i))  # no density estimate needed
        p.release(("warm", i), float(i))
    assert p.place("filler", math.nan, 800_000, 100.0) is Tier.SSD  # empty SSD: anything
    assert p.ledger.occupancy == pytest.approx(0.8)
    assert p.place("small", math.nan, 1_000, 101.0) is Tier.SSD
    assert p.place("large", math.nan, 100_000, 102.0) is Tier.HDD  # it would fit
    assert p.ledger.used == 801_000


def test_adaptive_threshold_admits_all_when_empty_and_only_dense_files_when_full(
    rng: np.random.Generator,
) -> None:
    p = AdaptiveThresholdPolicy(1000, min_window=10, refresh=1, occupancy_basis="before")
    preds = rng.normal(-5, 1, 200)
    for i, x in enumerate(preds[:100]):  # files that leave at once keep the SSD empty
        p.place(("warm", i), float(x), 10, float(i))
        p.release(("warm", i), float(i))
    assert p.threshold() == -math.inf  # empty SSD: anything that fits
    assert p.place("low-when-empty", -9.0, 10, 100.0) is Tier.SSD
    assert p.place("filler", -9.0, 880, 101.0) is Tier.SSD  # occupancy now 0.89
    bar = p.threshold()
    # f = (1 - 0.89) ** 0.5 = 0.33 of the 1890 recent bytes: the densest ~63 of the 100 warm files
    warm = np.sort(preds[:100])[::-1]
    assert warm[70] < bar <= warm[55]
    assert p.place("low-when-full", float(warm[90]), 10, 102.0) is Tier.HDD
    assert p.place("dense-when-full", float(preds.max()) + 1, 10, 103.0) is Tier.SSD
    assert p.place("unknown", math.nan, 1, 104.0) is Tier.HDD
    assert p.ledger.used <= p.ledger.capacity


@pytest.mark.parametrize(
    "options",
    [
        {"window": 0},
        {"min_window": -1},
        {"exponent": 0},
        {"refresh": 0},
        {"exponent": float("nan")},
        {"occupancy_basis": "during"},
    ],
)
def test_adaptive_threshold_validates_options(options: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        AdaptiveThresholdPolicy(10, **options)


def _max_overlap(created, deleted, size, mask) -> float:
    events = sorted(
        [(d, 0, -s) for c, d, s, m in zip(created, deleted, size, mask, strict=True) if m]
        + [(c, 1, s) for c, d, s, m in zip(created, deleted, size, mask, strict=True) if m]
    )
    level = peak = 0.0
    for _, _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def test_oracle_admissions_hand_example() -> None:
    #           [0,10) dense 6   [0,5) 5   [5,10) 5   [2,3) 4 (densest)
    created = np.array([0.0, 0.0, 5.0, 2.0])
    deleted = np.array([10.0, 5.0, 10.0, 3.0])
    size = np.array([6.0, 5.0, 5.0, 4.0])
    value = np.array([2.0, 1.0, 1.0, 3.0])
    mask = oracle_admissions(created, deleted, size, value, 10)
    # densest [2,3) size 4, then the 6-byte [0,10) fits beside it; then neither 5 fits
    assert mask.tolist() == [True, False, False, True]
    assert oracle_admissions(created, deleted, size, value, 10, min_value=2.5).tolist() == [
        False,
        False,
        False,
        True,
    ]


def test_oracle_admissions_without_capacity_still_take_empty_files() -> None:
    created, deleted = np.array([0.0, 0.0, 1.0]), np.array([2.0, 2.0, 3.0])
    size, value = np.array([0.0, 5.0, 0.0]), np.array([1.0, 2.0, 3.0])
    # 0 + 0 <= 0 fits, as in the simulator's ledger and the bound
    assert oracle_admissions(created, deleted, size, value, 0).tolist() == [True, False, True]


def test_oracle_admissions_are_feasible_and_greedy(rng: np.random.Generator) -> None:
    n = 300
    created = rng.uniform(0, 100, n)
    deleted = created + rng.exponential(5, n)
    size = rng.integers(1, 50, n).astype(float)
    value = rng.normal(size=n)
    cap = 200
    mask = oracle_admissions(created, deleted, size, value, cap)
    assert _max_overlap(created, deleted, size, mask) <= cap
    assert mask[np.argmax(value)]  # the most valuable file always fits alone
    # maximality: every rejected file would overflow the SSD next to those admitted
    for i in np.flatnonzero(~mask)[:40]:
        trial = mask.copy()
        trial[i] = True
        assert _max_overlap(created, deleted, size, trial) > cap


def test_oracle_policy_places_its_admissions() -> None:
    p = OraclePolicy([1, 3], 10)
    assert p.place(1, math.nan, 5, 0.0) is Tier.SSD
    assert p.place(2, math.nan, 1, 0.0) is Tier.HDD
    assert p.place(3, math.nan, 6, 0.0) is Tier.HDD  # would not fit: HDD, never an error


def test_observed_predictions_move_the_threshold_at_a_given_occupancy() -> None:
    """A service keeps its ledger elsewhere: it feeds predictions and passes the occupancy."""
    p = AdaptiveThresholdPolicy(1000, min_window=4, refresh=1)
    for pred in (-8.0, -7.0, -6.0, -5.0):
        p.observe(pred, 10)
    p.observe(math.nan, 10)  # ignored
    assert p.ledger.used == 0 and len(p.ledger) == 0  # nothing was placed
    assert p.threshold(occupancy=0.0) == -math.inf
    assert p.threshold(occupancy=0.75) == -6.0  # the densest half of recent bytes
    assert p.threshold(occupancy=1.0) == math.inf
    assert p.threshold(occupancy=2.0) == math.inf  # over budget: nothing more


def _warm(p: AdaptiveThresholdPolicy, preds: np.ndarray, size: int) -> None:
    """Feed ``preds`` through ``p`` as files that leave at once (the SSD stays empty)."""
    for i, x in enumerate(preds):
        p.place(("warm", i), float(x), size, float(i))
        p.release(("warm", i), float(i))


def test_threshold_after_admission_charges_a_file_for_the_space_it_takes() -> None:
    """The worked example of the module docstring: 100 bytes of SSD, 20 used."""
    preds = np.linspace(-7.0, -3.0, 101)  # equal sizes: share f is the densest f of the files
    after = AdaptiveThresholdPolicy(100, min_window=10, refresh=1, occupancy_basis="after")
    assert AdaptiveThresholdPolicy(100).occupancy_basis is OccupancyBasis.BEFORE  # the default
    _warm(after, preds, 1)
    assert after.place("held", float(preds.max()), 20, 200.0) is Tier.SSD
    assert after.occupancy_with(5) == pytest.approx(0.25)
    assert after.occupancy_with(60) == pytest.approx(0.80)
    # a 60-byte file must be among the densest 45% (above the 56th-densest of 102 recent):
    mid = float(np.quantile(preds, 0.40))  # ranks in the densest 60%, not 45%
    assert after.place("big-middling", mid, 60, 201.0) is Tier.HDD
    assert after.place("small-middling", mid, 5, 202.0) is Tier.SSD  # densest 87% suffices
    assert after.place("fills-it", float(preds.max()) + 1, 75, 203.0) is Tier.HDD  # f = 0
    assert after.ledger.used == 25

    before = AdaptiveThresholdPolicy(100, min_window=10, refresh=1, occupancy_basis="before")
    _warm(before, preds, 1)
    assert before.place("held", float(preds.max()), 20, 200.0) is Tier.SSD
    assert before.occupancy_with(60) == pytest.approx(0.20)
    assert before.place("big-middling", mid, 60, 201.0) is Tier.SSD  # densest 89% suffices


# ---------------------------------------------------------------- the break-even test
#: SSD wear and HDD transfer priced: short-lived files must be dense to pay for their wear.
WEAR = CostModel(ssd_usd_per_tb_written=0.057, hdd_bytes_per_s=270e6)


def test_break_even_keeps_a_dense_enough_but_unprofitable_file_on_hdd() -> None:
    """Dense enough for the threshold (an empty SSD admits anything), not worth SSD under wear."""
    life = 0.1  # expected seconds: d* = 3.8e-5 ops per byte per second (10**-4.42)
    floor = math.log10(WEAR.break_even_density(life))
    assert floor == pytest.approx(-4.416, abs=1e-3)
    for cls in (AdaptiveThresholdPolicy, StageHistoryPolicy):
        priced = cls(10**9, cost_model=WEAR, expected_lifetime=lambda _id: life)
        assert priced.threshold() == -math.inf  # the threshold alone would admit it
        assert priced.place("sparse", floor - 0.5, 10**6, 0.0) is Tier.HDD
        assert priced.place("dense", floor + 0.5, 10**6, 0.0) is Tier.SSD
        assert priced.ledger.used == 10**6
        # the same file is admitted under the default prices (no wear) and without a model
        default = cls(10**9, cost_model=CostModel())
        assert default.place("sparse", floor - 0.5, 10**6, 0.0) is Tier.SSD
        assert cls(10**9).place("sparse", floor - 0.5, 10**6, 0.0) is Tier.SSD


def test_break_even_test_agrees_with_the_cost_model(rng: np.random.Generator) -> None:
    """A file passes exactly when the cost model prices its expected outcome as a saving."""
    for _ in range(300):
        life = float(10 ** rng.uniform(-2.5, 2.5))
        log_d = float(rng.uniform(-9.0, -3.0))
        size = float(10 ** rng.uniform(4, 8))
        p = AdaptiveThresholdPolicy(
            10**12, cost_model=WEAR, expected_lifetime=lambda _id, life=life: life
        )
        ops = 10**log_d * size * life  # what the prediction implies over the expected life
        # written once, read back once: a = r = 1
        saving = WEAR.saving(size, life, ops, io_bytes=2 * size, write_bytes=size)
        if abs(float(saving)) > 1e-6 * float(WEAR.ssd_cost(size, life, size)):
            assert p.worth_ssd("f", log_d) == (saving > 0)


def test_default_prices_admit_every_logged_density() -> None:
    """Without wear the break-even density is ~10**-8.57 for any lifetime."""
    p = AdaptiveThresholdPolicy(100, cost_model=CostModel(), expected_lifetime=lambda _id: 1e-3)
    assert p.break_even_log_density(1e-3) == pytest.approx(-8.565, abs=1e-3)
    assert p.break_even_log_density(1e3) == p.break_even_log_density(None)
    assert p.worth_ssd("f", -7.0) and not p.worth_ssd("f", -9.0)


def test_without_a_lifetime_estimate_the_policy_learns_it_from_released_files() -> None:
    p = AdaptiveThresholdPolicy(10**9, cost_model=WEAR)  # no expected_lifetime
    # nothing released yet: the lifetime-free break-even (capacity price only)
    assert p.break_even_log_density() == pytest.approx(math.log10(CostModel().break_even_density()))
    assert p.place("old", -3.0, 10, 5.0) is Tier.SSD
    p.place("still-alive", -3.0, 10, 5.0)
    assert p.break_even_log_density() < -8  # a file alive now tells nothing yet
    p.release("old", 5.1)  # lived 0.1 s (released 5.1 s into the clock)
    assert p.break_even_log_density() == pytest.approx(math.log10(WEAR.break_even_density(0.1)))
    assert p.place("sparse", -5.0, 10**6, 6.0) is Tier.HDD
    # a NaN estimate for a file falls back on the same learned lifetime
    q = AdaptiveThresholdPolicy(10**9, cost_model=WEAR, expected_lifetime=lambda _id: math.nan)
    q.place("old", -3.0, 10, 5.0)
    q.release("old", 5.1)
    assert q.break_even_log_density(math.nan) == p.break_even_log_density()
    assert q.place("sparse", -5.0, 10**6, 6.0) is Tier.HDD


def test_break_even_leaves_the_baselines_alone_and_validates_options() -> None:
    with pytest.raises(ValueError, match="cost_model"):
        SmallFilesFirstPolicy(10, cost_model=WEAR)
    with pytest.raises(TypeError, match="cost_model"):
        AdaptiveThresholdPolicy(10, cost_model="wear")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected_lifetime"):
        AdaptiveThresholdPolicy(10, expected_lifetime=1.0)  # type: ignore[arg-type]
    assert FirstFitPolicy(10**9).place("sparse", -9.0, 10**6, 0.0) is Tier.SSD


# ---------------------------------------------------------------- edge values and errors
def test_infinite_predictions_rank_densest_and_sparsest_nan_goes_to_hdd() -> None:
    """+inf is admitted whenever it fits, even past a full window's threshold; -inf and NaN
    go to HDD; none of them enters the window."""
    p = AdaptiveThresholdPolicy(100, min_window=4, refresh=1)
    for i in range(8):
        p.place(f"w{i}", -1.0 - i, 5, float(i))  # the window is full
    assert math.isfinite(p.threshold())
    count = p._count
    assert p.place("densest", math.inf, 10, 9.0) is Tier.SSD
    assert p.place("sparsest", -math.inf, 10, 9.0) is Tier.HDD
    assert p.place("unknown", math.nan, 10, 9.0) is Tier.HDD
    free = p.ledger.capacity - p.ledger.used
    assert p.place("too-big", math.inf, free + 1, 9.0) is Tier.HDD
    assert p.place("just-fits", math.inf, free, 9.0) is Tier.SSD
    assert p._count == count  # non-finite predictions stay out of the window
    # an empty SSD and no window yet: -inf would clear a threshold of -inf, but goes to HDD
    q = AdaptiveThresholdPolicy(100)
    assert q.threshold() == -math.inf
    assert q.place("sparsest", -math.inf, 10, 0.0) is Tier.HDD
    assert q.place("densest", math.inf, 10, 0.0) is Tier.SSD
    # a priced break-even test does not refuse +inf either
    r = AdaptiveThresholdPolicy(10**9, cost_model=WEAR, expected_lifetime=lambda _id: 1e-3)
    assert r.place("densest", math.inf, 10**6, 0.0) is Tier.SSD


def test_threshold_rejects_a_non_finite_occupancy() -> None:
    p = AdaptiveThresholdPolicy(100, min_window=2)
    for v in (-1.0, -2.0, -3.0, -4.0):
        p.observe(v, 1)
    assert p.threshold(occupancy=0.99) == -1.0
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(PlacementConfigError, match="occupancy="):
            p.threshold(occupancy=bad)
        with pytest.raises(ValueError, match="occupancy="):
            p.admitted_share(bad)
    # rejected before the window fills, too
    with pytest.raises(PlacementConfigError, match="occupancy="):
        AdaptiveThresholdPolicy(100).threshold(occupancy=math.nan)


@pytest.mark.parametrize(
    "options, name",
    [
        ({"window": True}, "window"),
        ({"min_window": False}, "min_window"),
        ({"refresh": True}, "refresh"),
        ({"exponent": True}, "exponent"),
        ({"window": 4.0}, "window"),
    ],
)
def test_bools_and_floats_are_not_counts_or_exponents(options: dict, name: str) -> None:
    with pytest.raises(PlacementConfigError, match=f"^{name}="):
        AdaptiveThresholdPolicy(100, **options)


def test_small_files_first_rejects_a_bool_size_limit() -> None:
    with pytest.raises(PlacementConfigError, match="max_size_bytes=True"):
        SmallFilesFirstPolicy(100, max_size_bytes=True)
    assert SmallFilesFirstPolicy(100, max_size_bytes=0).max_size_bytes == 0


def test_ledger_rejects_a_negative_reservation() -> None:
    ledger = SSDLedger(10)
    with pytest.raises(PlacementConfigError, match="size_bytes=-5"):
        ledger.admit("a", -5)
    assert ledger.used == 0 and "a" not in ledger
    assert ledger.admit("b", 0) and ledger.admit("c", 10) and not ledger.fits(1)


def test_configuration_errors_are_placement_errors_and_builtin_errors() -> None:
    """Every bad argument raises a PlacementError that is also the built-in error callers
    catch (ValueError for bad values, TypeError for wrong types)."""
    cases = [
        (lambda: check_capacity(-1), ValueError),
        (lambda: check_capacity("1GB"), TypeError),
        (lambda: check_capacity(True), TypeError),
        (lambda: AdaptiveThresholdPolicy(10, window=0), ValueError),
        (lambda: AdaptiveThresholdPolicy(10, occupancy_basis="middle"), ValueError),
        (lambda: AdaptiveThresholdPolicy(10, cost_model="wear"), TypeError),
        (lambda: SmallFilesFirstPolicy(10, cost_model=WEAR), ValueError),
        (lambda: SmallFilesFirstPolicy(10, max_size_bytes=-1), ValueError),
        (lambda: oracle_admissions([0.0], [1.0], [1], [1.0], -1), ValueError),
    ]
    for make, builtin in cases:
        with pytest.raises(PlacementError) as info:
            make()
        assert isinstance(info.value, builtin), info.value
    assert issubclass(PlacementConfigError, ValueError)
    assert issubclass(PlacementTypeError, TypeError)


# ---------------------------------------------------------------- ledger and occupancy accounting
def test_occupancy_is_a_share_in_zero_to_one_and_a_zero_capacity_is_full() -> None:
    assert OccupancyBasis.AFTER.occupancy(20, 5, 100) == pytest.approx(0.25)
    assert OccupancyBasis.AFTER.occupancy(90, 20, 100) == 1.0  # would overfill it: full
    assert OccupancyBasis.BEFORE.occupancy(120, 0, 100) == 1.0  # over budget after a resize
    for basis in OccupancyBasis:
        assert basis.occupancy(0, 5, 0) == 1.0
    assert SSDLedger(0).occupancy == 1.0
    assert AdaptiveThresholdPolicy(0).admitted_share() == 0.0
    # an empty file still fits a zero capacity, as in the oracle
    assert AdaptiveThresholdPolicy(0).place("empty", -5.0, 0, 0.0) is Tier.SSD


def test_ledger_holds_one_reservation_per_file() -> None:
    ledger = SSDLedger(100)
    assert ledger.admit("a", 10)
    assert not ledger.admit("a", 10)  # already held: no second reservation
    assert ledger.used == 10 and len(ledger) == 1
    assert ledger.release("a") == 10 and ledger.used == 0


def test_ledger_resize_follows_real_bytes_floored_at_zero() -> None:
    ledger = SSDLedger(20)
    assert ledger.admit("a", 10)
    ledger.resize("a", 30)  # grew past its reservation: over budget until released
    assert ledger.used == 30 and ledger.occupancy == 1.5
    ledger.resize("a", -5)
    assert ledger.used == 0
    ledger.resize("ghost", 7)  # holds nothing: no-op
    assert ledger.used == 0 and "ghost" not in ledger
    assert ledger.release("a") == 0 and ledger.used == 0


# ---------------------------------------------------------------- the threshold's window
def test_old_predictions_leave_the_window() -> None:
    p = AdaptiveThresholdPolicy(100, window=4, min_window=4, refresh=1)
    for pred in (-1.0, -2.0, -3.0, -4.0):
        p.observe(pred, 10)
    assert p.threshold(occupancy=0.75) == -2.0  # the densest half of the four
    for pred in (-10.0, -11.0, -12.0, -13.0):
        p.observe(pred, 10)
    assert p.threshold(occupancy=0.75) == -11.0  # only the last four count


def test_the_exponent_sets_the_share_of_recent_bytes_admitted() -> None:
    # (1 - 0.75) ** 0.5 = 0.5, (1 - 0.75) ** 1 = 0.25, (1 - 0.75) ** 2 = 0.0625
    for exponent, share in ((0.5, 0.5), (1.0, 0.25), (2.0, 0.0625)):
        p = AdaptiveThresholdPolicy(100, min_window=4, refresh=1, exponent=exponent)
        assert p.admitted_share(0.75) == pytest.approx(share)
    p = AdaptiveThresholdPolicy(100, min_window=4, refresh=1, exponent=1.0)
    for pred in (-1.0, -2.0, -3.0, -4.0):
        p.observe(pred, 10)
    assert p.threshold(occupancy=0.75) == -1.0  # the densest quarter: the densest file


def test_empty_files_weigh_as_one_byte_in_the_window() -> None:
    p = AdaptiveThresholdPolicy(100, min_window=4, refresh=1)
    for pred in (-1.0, -2.0, -3.0, -4.0):
        p.observe(pred, 0)
    assert p.threshold(occupancy=0.75) == -2.0  # equal weights: the densest half


def test_predictions_of_files_sent_to_hdd_still_move_the_threshold() -> None:
    """Files that fail the break-even test go to HDD, but their predictions enter the window."""
    p = AdaptiveThresholdPolicy(
        10**9, min_window=4, refresh=1, cost_model=WEAR, expected_lifetime=lambda _id: 0.1
    )
    floor = p.break_even_log_density(0.1)
    for i, pred in enumerate((floor - 1, floor - 2, floor - 3, floor - 4)):
        assert p.place(i, pred, 10, float(i)) is Tier.HDD
    assert p.threshold(occupancy=0.75) == floor - 2  # the densest half of four equal files


# ---------------------------------------------------------------- the break-even test's lifetimes
def test_a_prediction_at_the_break_even_density_is_worth_ssd() -> None:
    """A predicted saving of exactly zero is non-negative: the file may go to SSD."""
    p = AdaptiveThresholdPolicy(10**9, cost_model=WEAR, expected_lifetime=lambda _id: 1.0)
    floor = p.break_even_log_density(1.0)
    assert p.worth_ssd("f", floor)
    assert not p.worth_ssd("f", math.nextafter(floor, -math.inf))
    assert p.place("at-break-even", floor, 10, 0.0) is Tier.SSD


def test_learned_lifetime_is_the_geometric_mean_of_released_files() -> None:
    p = AdaptiveThresholdPolicy(10**9, cost_model=WEAR)
    p.place("short", -3.0, 10, 0.0)
    p.place("long", -3.0, 10, 0.0)
    p.release("short", 0.1)
    p.release("long", 1000.0)
    # 10 ** ((log10 0.1 + log10 1000) / 2) = 10 ** 1 = 10 s
    assert p.break_even_log_density() == pytest.approx(math.log10(WEAR.break_even_density(10.0)))


def test_a_file_released_as_it_is_created_counts_as_living_the_minimum_lifetime() -> None:
    p = AdaptiveThresholdPolicy(10**9, cost_model=WEAR)
    p.place("instant", -3.0, 10, 5.0)
    p.release("instant", 5.0)
    expected = math.log10(WEAR.break_even_density(MIN_LIFETIME_S))
    assert p.break_even_log_density() == pytest.approx(expected)


def test_expected_lifetimes_below_the_minimum_are_priced_at_the_minimum() -> None:
    p = AdaptiveThresholdPolicy(10**9, cost_model=WEAR, expected_lifetime=lambda _id: 1e-6)
    assert p.break_even_log_density(1e-6) == p.break_even_log_density(MIN_LIFETIME_S)
    assert p.break_even_log_density(1e-6) < math.log10(WEAR.break_even_density(1e-6))


# ---------------------------------------------------------------- small files first, the oracle
def test_small_files_first_admits_a_file_of_exactly_the_size_limit() -> None:
    p = SmallFilesFirstPolicy(1000, max_size_bytes=100)
    assert p.place("at-limit", math.nan, 100, 0.0) is Tier.SSD
    assert p.place("over-limit", math.nan, 101, 0.0) is Tier.HDD


def test_small_files_first_ranks_an_empty_file_as_the_smallest() -> None:
    p = SmallFilesFirstPolicy(100, min_window=4, refresh=1)
    for i, size in enumerate((10, 20, 30, 40)):
        p.place(("warm", i), math.nan, size, float(i))
        p.release(("warm", i), float(i))
    assert p.place("filler", math.nan, 90, 10.0) is Tier.SSD
    assert math.isfinite(p.threshold())  # 90% full: only the smallest recent files get in
    assert p.place("empty", math.nan, 0, 11.0) is Tier.SSD


def test_oracle_admissions_break_value_ties_by_creation_time() -> None:
    created, deleted = np.array([5.0, 0.0]), np.array([10.0, 10.0])
    size, value = np.array([6.0, 6.0]), np.array([1.0, 1.0])
    # only one fits; equal value: the earlier file wins
    assert oracle_admissions(created, deleted, size, value, 10).tolist() == [False, True]


def test_oracle_admissions_keep_files_valued_exactly_at_the_minimum() -> None:
    created, deleted = np.array([0.0, 0.0]), np.array([1.0, 1.0])
    size, value = np.array([1.0, 1.0]), np.array([2.0, 1.0])
    mask = oracle_admissions(created, deleted, size, value, 10, min_value=2.0)
    assert mask.tolist() == [True, False]


def test_oracle_admissions_take_a_zero_lifetime_file_only_where_it_fits() -> None:
    """A file deleted as it is created holds its bytes at that instant."""
    one = np.array([1.0])
    assert oracle_admissions(one, one, np.array([5.0]), one, 10).tolist() == [True]
    created, deleted = np.array([0.0, 1.0]), np.array([2.0, 1.0])
    size, value = np.array([10.0, 5.0]), np.array([2.0, 1.0])
    assert oracle_admissions(created, deleted, size, value, 10).tolist() == [True, False]
