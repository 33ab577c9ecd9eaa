"""The trace simulator: replay order, budget enforcement, pricing, overload, bad rows."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from placement.cost import CostModel
from placement.policy import AdaptiveThresholdPolicy, AllHDDPolicy, FirstFitPolicy, OraclePolicy
from placement.schema import MIN_SIZE_BYTES, SCHEMA
from placement.simulator import Trace, overlap_runs, peak_live_bytes, simulate
from placement.tier import Tier
from tests.placement.logtables import make_log


def _log(rows: list[tuple[float, float, int, int]]) -> pd.DataFrame:
    """Rows of (created_at, deleted_at, size_bytes, ops)."""
    out = []
    for i, (c, d, size, ops) in enumerate(rows):
        out.append(
            {
                "file_id": f"f{i}",
                "pipeline": "p",
                "run_id": "r",
                "stage": "s",
                "created_at": c,
                "file_kind": "spill",
                "deleted_at": d,
                "size_bytes": size,
                "read_ops": ops - 1,
                "write_ops": 1,
                "read_bytes": size * (ops - 1),
                "write_bytes": size,
            }
        )
    df = pd.DataFrame(out)
    for f in SCHEMA:
        if f.name not in df.columns:
            df[f.name] = None
    return df


class AlwaysSSD:
    """A rogue policy that asks for SSD for every file."""

    name = "always-ssd"

    def place(self, file_id, predicted_log_density, size_bytes, now):
        return Tier.SSD

    def release(self, file_id, now):
        return None


def test_deletions_free_space_before_creations_at_the_same_time() -> None:
    df = _log([(0.0, 1.0, 100, 2), (1.0, 2.0, 100, 2)])
    r = simulate(df, FirstFitPolicy(100), CostModel(), 100, keep_tiers=True)
    assert r.tiers.tolist() == [1, 1] and r.peak_ssd_bytes == 100


def test_tco_and_savings_match_the_cost_model() -> None:
    # the trace starts at t=100 s; the third file arrives as the first leaves
    df = _log([(100.0, 110.0, 10_000, 2), (100.0, 110.0, 10_000, 40), (110.0, 111.0, 5_000, 3)])
    cost = CostModel()
    r = simulate(df, FirstFitPolicy(15_000), cost, 15_000, keep_tiers=True)
    assert r.tiers.tolist() == [1, 0, 1]
    assert r.n_files == 3 and r.ssd_files == 2
    assert r.ssd_bytes == 10_000 + 5_000  # every file that went to SSD, at its final size
    assert r.peak_ssd_bytes == 10_000  # never both at once
    # byte-seconds: 10_000 B x 10 s each for the first two, 5_000 B x 1 s for the third
    assert r.ssd_byte_seconds_share == pytest.approx((100_000 + 5_000) / (2 * 100_000 + 5_000))
    assert r.duration_s == pytest.approx(111.0 - 100.0)  # first creation to last deletion
    life = np.array([10.0, 10.0, 1.0])
    size = np.array([10_000.0, 10_000.0, 5_000.0])
    ops = np.array([2.0, 40.0, 3.0])
    ssd, hdd = cost.ssd_cost(size, life), cost.hdd_cost(size, life, ops)
    assert r.tco_usd == pytest.approx(ssd[0] + hdd[1] + ssd[2])
    assert r.all_hdd_tco_usd == pytest.approx(hdd.sum())
    assert r.savings_fraction == pytest.approx((hdd[0] - ssd[0] + hdd[2] - ssd[2]) / hdd.sum())
    assert r.ssd_io_share == pytest.approx(5 / 45)
    assert simulate(df, AllHDDPolicy(), cost, 15_000).savings_usd == 0.0


def test_a_policy_cannot_exceed_the_budget(rng: np.random.Generator) -> None:
    c = rng.uniform(0, 100, 500)
    df = _log([(float(a), float(a + rng.exponential(3)), int(rng.integers(1, 100)), 2) for a in c])
    r = simulate(df, AlwaysSSD(), CostModel(), 300)
    assert r.overruled > 0 and r.peak_ssd_bytes <= 300
    r = simulate(df, FirstFitPolicy(300), CostModel(), 300)
    assert r.overruled == 0 and r.peak_ssd_bytes <= 300


def test_oracle_is_feasible_and_beats_first_fit_on_a_real_shaped_log() -> None:
    log = make_log(seed=3)
    trace = Trace.from_table(log)
    cap = int(0.05 * peak_live_bytes(trace))
    oracle = simulate(trace, trace.oracle(cap), CostModel(), cap)
    first_fit = simulate(trace, FirstFitPolicy(cap), CostModel(), cap)
    assert oracle.overruled == 0
    assert oracle.savings_usd > first_fit.savings_usd
    assert OraclePolicy.for_table(log, cap).admitted == trace.oracle(cap).admitted


def test_hdd_overload_is_measured() -> None:
    # two files of 200 ops/s each overlap for 1 s; one drive gives 170 ops/s
    df = _log([(0.0, 2.0, 4096, 400), (1.0, 3.0, 4096, 400)])
    r = simulate(df, AllHDDPolicy(), CostModel(), 0, hdd_drives=1)
    assert r.hdd_peak_iops_demand == pytest.approx(400)
    assert r.hdd_overload_s == pytest.approx(3.0)  # 200 > 170 over [0, 3)
    assert r.hdd_overload_ops == pytest.approx(30 + 230 + 30)
    relieved = simulate(df, FirstFitPolicy(4096), CostModel(), 4096)
    assert relieved.hdd_overload_s == pytest.approx(2.0)  # only the second file, over [1, 3)


def test_predictions_reach_the_policy_and_must_match_rows() -> None:
    df = _log([(float(i), float(i) + 0.5, 100, 2) for i in range(100)])
    pred = np.where(np.arange(100) % 2 == 0, -1.0, np.nan)  # no prediction: HDD
    r = simulate(
        df, AdaptiveThresholdPolicy(1000), CostModel(), 1000, predictions=pred, keep_tiers=True
    )
    assert r.tiers[1::2].sum() == 0 and r.tiers[::2].sum() == 50
    df2 = df.assign(predicted_log_density=pred)
    assert simulate(df2, AdaptiveThresholdPolicy(1000), CostModel(), 1000).ssd_files == 50
    with pytest.raises(ValueError, match="usable rows"):
        simulate(df, FirstFitPolicy(10), CostModel(), 10, predictions=np.zeros(3))


def test_bad_rows_are_dropped_and_counted() -> None:
    df = _log([(0.0, 1.0, 100, 2), (5.0, 1.0, 100, 2), (math.nan, 1.0, 100, 2)])
    r = simulate(df, FirstFitPolicy(1000), CostModel(), 1000)
    assert r.n_files == 1 and r.dropped_rows == 2
    with pytest.raises(ValueError, match="ssd_capacity_bytes"):
        simulate(df, FirstFitPolicy(10), CostModel(), -1)


def test_capacity_is_checked_like_the_ledgers() -> None:
    """The replay's budget goes through the same check as the ledgers, the oracle and the
    bound: a float is truncated to whole bytes, non-numbers and NaN are refused by name."""
    df = _log([(0.0, 1.0, 100, 2), (0.5, 1.0, 100, 2)])
    r = simulate(df, FirstFitPolicy(150), CostModel(), 150.9)
    assert r.ssd_capacity_bytes == 150 and r.ssd_files == 1
    with pytest.raises(ValueError, match="ssd_capacity_bytes=nan"):
        simulate(df, FirstFitPolicy(150), CostModel(), math.nan)
    for bad in ("150", True):
        with pytest.raises(TypeError, match="ssd_capacity_bytes"):
            simulate(df, FirstFitPolicy(150), CostModel(), bad)


def test_peak_live_bytes() -> None:
    df = _log([(0.0, 2.0, 10, 2), (1.0, 3.0, 20, 2), (2.0, 4.0, 40, 2)])
    assert peak_live_bytes(df) == 60
    assert peak_live_bytes(df.iloc[:0]) == 0


def test_overlapped_runs_keep_their_own_timing_and_start_k_times_as_often() -> None:
    log = make_log(seed=4).to_pandas()
    runs = log.groupby("run_id").agg(start=("created_at", "min"), end=("deleted_at", "max"))
    runs = runs.sort_values("start")
    assert (runs["start"].iloc[1:].to_numpy() >= runs["end"].iloc[:-1].to_numpy()).all()
    duration = (runs["end"] - runs["start"]).to_numpy()

    out = overlap_runs(log, 4)
    assert list(out.columns) == list(log.columns) and len(out) == len(log)
    times = ["created_at", "deleted_at"]
    pd.testing.assert_frame_equal(out.drop(columns=times), log.drop(columns=times))
    np.testing.assert_allclose(  # lifetimes and offsets inside each run are unchanged
        (out["deleted_at"] - out["created_at"]).to_numpy(),
        (log["deleted_at"] - log["created_at"]).to_numpy(),
    )
    starts = out.groupby("run_id")["created_at"].min().loc[runs.index].to_numpy()
    expected = runs["start"].iloc[0] + np.concatenate([[0], np.cumsum(duration[:-1])]) / 4
    # times are epoch seconds (~1.7e9): a relative tolerance would hide minutes
    np.testing.assert_allclose(starts, expected, rtol=0, atol=1e-3)
    # runs now overlap: live bytes peak higher than when they ran one after another
    assert peak_live_bytes(out) > peak_live_bytes(log)
    # k = 1 only closes the gaps between runs
    closed = (
        overlap_runs(log, 1)
        .groupby("run_id")
        .agg(start=("created_at", "min"), end=("deleted_at", "max"))
        .loc[runs.index]
    )
    np.testing.assert_allclose(
        closed["start"].iloc[1:].to_numpy(), closed["end"].iloc[:-1].to_numpy(), rtol=0, atol=1e-3
    )
    for bad in (0, -1.0, float("nan"), True, "2"):
        with pytest.raises(ValueError, match="overlap k="):
            overlap_runs(log, bad)


def test_roster_gives_density_fed_policies_the_break_even_test() -> None:
    """A 1 MB file written and read once over 0.1 s is dense enough for an empty SSD but loses money
    on it once wear is priced: the cost-aware policies keep it on HDD, first-fit does not."""
    from placement.simulator import policy_roster

    df = _log([(0.0, 0.1, 10**6, 2), (0.0, 0.1, 10**4, 40)])
    trace = Trace.from_table(df)
    wear = CostModel(ssd_usd_per_tb_written=0.057, hdd_bytes_per_s=270e6)
    assert wear.saving(10**6, 0.1, 2, 2e6, 1e6) < 0 < wear.saving(10**4, 0.1, 40, 4e5, 1e4)
    pred = np.log10(trace.density)  # a perfect density prediction
    life = np.array([0.1, 0.1])  # and a right expected lifetime

    def tiers(break_even: bool) -> dict[str, list[int]]:
        roster = policy_roster(
            trace,
            wear,
            stage_history=pred,
            lightgbm=pred,
            expected_lifetime=life,
            break_even=break_even,
        )
        out = {}
        for name, make, p in roster:
            r = simulate(trace, make(10**7), wear, 10**7, predictions=p, keep_tiers=True)
            out[name] = r.tiers.tolist()
        return out

    priced, plain = tiers(True), tiers(False)
    for name in ("stage-history", "lightgbm"):
        assert priced[name] == [0, 1] and plain[name] == [1, 1]
    assert priced["first-fit"] == plain["first-fit"] == [1, 1]
    assert priced["small-files-first"] == plain["small-files-first"] == [1, 1]
    assert priced["oracle"] == [0, 1]
    with pytest.raises(ValueError, match="expected_lifetime"):
        policy_roster(trace, wear, stage_history=pred, lightgbm=pred, expected_lifetime=life[:1])


class Recorder(FirstFitPolicy):
    """First-fit that remembers the size each file was placed with."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.sizes: dict[int, int] = {}

    def place(self, file_id, predicted_log_density, size_bytes, now):
        self.sizes[file_id] = size_bytes
        return super().place(file_id, predicted_log_density, size_bytes, now)


def test_policies_decide_on_the_size_known_at_creation_and_the_oracle_on_the_outcome() -> None:
    # file 0 was expected at 100 bytes but grew to 5000; file 1 has no expected size
    df = _log([(0.0, 2.0, 5000, 4), (1.0, 3.0, 300, 4)])
    df["expected_size_bytes"] = [100, None]
    rec = Recorder(1000)
    r = simulate(df, rec, CostModel(), 1000, keep_tiers=True)
    assert rec.sizes == {0: 100, 1: 300}  # no expected size: the final one
    # first-fit reserved 100 bytes, but the file takes 5000: the replay overrules it to HDD
    assert r.overruled == 1 and r.tiers.tolist() == [0, 1]
    # a size estimate (e.g. from history) replaces the expected size where it is known
    trace = Trace.from_table(df)
    assert trace.known_size.tolist() == [100, 300]
    est = Trace.from_clean(df, known_size=np.array([6000.0, math.nan]))
    rec2 = Recorder(1000)
    simulate(est, rec2, CostModel(), 1000)
    assert rec2.sizes == {0: 6000, 1: 300}
    with pytest.raises(ValueError, match="known_size has shape"):
        Trace.from_clean(df, known_size=np.zeros(3))
    # a file declared empty is told 0 bytes, not its outcome; a huge estimate stays huge
    declared = df.assign(expected_size_bytes=[0, None])
    assert Trace.from_table(declared).known_size.tolist() == [0, 300]
    huge = Trace.from_clean(df, known_size=np.array([1e19, math.nan]))
    assert huge.known_size.tolist() == [2**62, 300]
    # the oracle knows the outcome: it is told (and packs by) the final size
    oracle = trace.oracle(5000)
    assert oracle.knows_outcome
    seen: dict[int, int] = {}
    place = oracle.place
    oracle.place = lambda i, p, size, t: seen.setdefault(i, size) and place(i, p, size, t)
    simulate(trace, oracle, CostModel(), 5000)
    assert seen == {0: 5000, 1: 300}


def test_a_policys_ledger_follows_the_real_bytes_the_replay_reports() -> None:
    # file 0 expected at 100 bytes ends at 600; file 1 (500 bytes) arrives while it lives
    df = _log([(0.0, 5.0, 600, 4), (1.0, 2.0, 500, 4), (3.0, 4.0, 300, 4)])
    df["expected_size_bytes"] = [100, 500, 300]
    policy = FirstFitPolicy(1000)
    r = simulate(df, policy, CostModel(), 1000, keep_tiers=True)
    # told 600 bytes are used, first-fit refuses file 1 itself instead of being overruled
    assert r.tiers.tolist() == [1, 0, 1] and r.overruled == 0
    # a file the replay overrules to HDD frees its reservation in the policy's ledger
    small = FirstFitPolicy(500)
    r2 = simulate(df, small, CostModel(), 500, keep_tiers=True)
    assert r2.overruled == 1 and r2.tiers.tolist() == [0, 1, 1]
    assert small.ledger.used == 0


def test_ledger_resize_moves_the_used_bytes() -> None:
    policy = FirstFitPolicy(1000)
    assert policy.place("a", 0.0, 100, 0.0) is Tier.SSD
    policy.settle("a", Tier.SSD, 900)
    assert policy.ledger.used == 900 and not policy.ledger.fits(200)
    policy.settle("b", Tier.SSD, 50)  # never admitted: nothing changes
    assert policy.ledger.used == 900 and "b" not in policy.ledger
    policy.settle("a", Tier.HDD, 0)
    assert policy.ledger.used == 0


def test_savings_by_group_splits_the_savings_exactly() -> None:
    """Per group, the TCO its SSD files saved; the groups add up to the replay's saving, and a
    group with nothing on SSD saved nothing."""
    from placement.simulator import savings_by_group

    df = _log([(0.0, 1.0, 100, 50), (0.0, 1.0, 100, 40), (2.0, 3.0, 100, 2)])
    trace = Trace.from_table(df)
    cost = CostModel()
    r = simulate(trace, FirstFitPolicy(150), cost, 150, keep_tiers=True)
    assert r.tiers.tolist() == [1, 0, 1]
    groups = np.array(["a", "a", "b"])
    parts = savings_by_group(trace, r.tiers, groups, cost)
    ssd, hdd = trace.costs(cost)
    assert parts["a"] == pytest.approx((hdd[0] - ssd[0]) / hdd.sum())
    assert parts["b"] == pytest.approx((hdd[2] - ssd[2]) / hdd.sum())
    assert sum(parts.values()) == pytest.approx(r.savings_fraction)
    assert savings_by_group(trace, np.zeros(3), groups, cost) == {"a": 0.0, "b": 0.0}
    with pytest.raises(ValueError, match="one entry per file"):
        savings_by_group(trace, r.tiers[:2], groups, cost)
    no_tiers = simulate(trace, FirstFitPolicy(150), cost, 150)
    with pytest.raises(ValueError, match="keep_tiers=True"):
        savings_by_group(trace, no_tiers.tiers, groups, cost)


def test_a_trace_rejects_files_that_are_deleted_when_created() -> None:
    """Deletions replay before creations at equal times, so a file deleted when it is created
    would hold its SSD bytes for ever: a Trace built directly must give deleted > created."""
    from placement.errors import PlacementConfigError
    from placement.features import RowIssues

    def make(created: list[float], deleted: list[float]) -> Trace:
        size = np.full(len(created), 10 * 10**6, np.int64)
        return Trace(
            created=np.asarray(created, np.float64),
            deleted=np.asarray(deleted, np.float64),
            size=size,
            ops=np.full(len(created), 1e4),
            io_bytes=size * 2.0,
            write_bytes=size * 1.0,
            issues=RowIssues(total_rows=len(created)),
        )

    for deleted in ([0.0, 6.0], [-1.0, 6.0], [math.nan, 6.0]):
        with pytest.raises(PlacementConfigError, match=r"1 of 2 files .*deleted must be > created"):
            make([0.0, 5.0], deleted)
    # floored as from_table floors it, the file is released and the next one fits
    trace = make([0.0, 5.0], [1e-3, 6.0])
    policy = FirstFitPolicy(10 * 10**6)
    result = simulate(trace, policy, CostModel(), 10 * 10**6, keep_tiers=True)
    assert result.tiers.tolist() == [1, 1]
    assert policy.ledger.used == 0 and len(policy.ledger) == 0
    # from_table floors a zero lifetime instead of failing
    assert Trace.from_table(_log([(0.0, 0.0, 100, 2)])).lifetime[0] > 0


def test_roster_needs_a_lifetime_estimate_when_lifetime_is_priced() -> None:
    """With wear priced, the break-even test without per-file lifetimes falls back on one
    lifetime for all files: the roster refuses that and says what to pass."""
    from placement.errors import PlacementConfigError
    from placement.simulator import policy_roster

    trace = Trace.from_table(_log([(0.0, 0.1, 10**6, 2), (0.0, 0.1, 10**4, 40)]))
    pred = np.log10(trace.density)
    wear = CostModel(ssd_usd_per_tb_written=0.057, hdd_bytes_per_s=270e6)
    with pytest.raises(
        PlacementConfigError, match="expected_lifetime=None.*stage_history_lifetime"
    ):
        policy_roster(trace, wear, stage_history=pred, lightgbm=pred)
    # fine where the test does not need it: default prices, or no break-even test
    assert len(policy_roster(trace, CostModel(), stage_history=pred, lightgbm=pred)) == 6
    plain = policy_roster(trace, wear, stage_history=pred, lightgbm=pred, break_even=False)
    assert len(plain) == 6
    life = np.array([0.1, math.nan])  # NaN: unknown for that file
    assert (
        len(policy_roster(trace, wear, stage_history=pred, lightgbm=pred, expected_lifetime=life))
        == 6
    )


@pytest.mark.parametrize("name", ["oracle", "lightgbm", "all-hdd", "stage-history"])
def test_roster_rejects_an_extra_policy_named_like_a_built_in_one(name: str) -> None:
    from placement.errors import PlacementConfigError
    from placement.simulator import policy_roster

    trace = Trace.from_table(_log([(0.0, 1.0, 100, 2), (0.5, 2.0, 200, 4)]))
    pred = np.log10(trace.density)
    with pytest.raises(PlacementConfigError, match=f"extra policy name '{name}' is already"):
        policy_roster(trace, CostModel(), stage_history=pred, lightgbm=pred, extra={name: pred})
    roster = policy_roster(
        trace, CostModel(), stage_history=pred, lightgbm=pred, extra={"true-density": pred}
    )
    assert [r[0] for r in roster][-2:] == ["true-density", "oracle"]


def test_a_known_size_of_zero_is_told_as_zero_not_replaced() -> None:
    """A size estimate of 0 bytes is a known size; only NaN falls back to the expected size."""
    df = _log([(0.0, 2.0, 5000, 4), (1.0, 3.0, 300, 4)])
    df["expected_size_bytes"] = [100, None]
    est = Trace.from_clean(df, known_size=np.array([0.0, math.nan]))
    assert est.known_size.tolist() == [0, 300]


def test_overlapped_runs_start_after_the_durations_of_the_runs_before_them() -> None:
    # runs of 10 s, 4 s and 1 s, logged apart; at k = 2 run j starts at (durations before j) / 2
    df = _log([(0.0, 10.0, 100, 2), (20.0, 24.0, 100, 2), (30.0, 31.0, 100, 2)])
    df["run_id"] = ["a", "b", "c"]
    out = overlap_runs(df, 2)
    np.testing.assert_allclose(out["created_at"], [0.0, 10 / 2, (10 + 4) / 2])
    np.testing.assert_allclose(out["deleted_at"] - out["created_at"], [10.0, 4.0, 1.0])


def test_deleting_an_overruled_file_frees_no_ssd_bytes() -> None:
    # file 0 fills the SSD; file 1 is overruled to HDD and deleted at t=2; file 2 (t=3) still
    # finds the SSD full of file 0
    df = _log([(0.0, 10.0, 100, 2), (1.0, 2.0, 100, 2), (3.0, 4.0, 100, 2)])
    r = simulate(df, AlwaysSSD(), CostModel(), 100, keep_tiers=True)
    assert r.tiers.tolist() == [1, 0, 0] and r.overruled == 2 and r.peak_ssd_bytes == 100


def test_ssd_byte_seconds_count_a_tiny_file_as_a_whole_block() -> None:
    """Byte-seconds are counted at the size files are priced at, at least MIN_SIZE_BYTES."""
    # a 100-byte file on SSD next to a MIN_SIZE_BYTES file on HDD, equal lifetimes: half each
    df = _log([(0.0, 1.0, 100, 2), (0.0, 1.0, MIN_SIZE_BYTES, 2)])
    r = simulate(df, FirstFitPolicy(100), CostModel(), 100, keep_tiers=True)
    assert r.tiers.tolist() == [1, 0]
    assert r.ssd_byte_seconds_share == pytest.approx(0.5)


def test_default_hdd_fleet_has_the_drives_the_peak_live_bytes_need() -> None:
    drive = int(CostModel().hdd_drive_capacity_bytes)
    # 1.5 drives' worth of bytes alive at once needs 2 drives; exactly one drive's worth, 1
    for peak, drives in ((drive + drive // 2, 2), (drive, 1), (4096, 1)):
        r = simulate(_log([(0.0, 1.0, peak, 2)]), AllHDDPolicy(), CostModel(), 0)
        assert r.hdd_drives == drives
        assert r.hdd_iops_supply == pytest.approx(drives * CostModel().hdd_iops_per_drive)


def test_a_fleet_of_no_hdd_is_refused() -> None:
    df = _log([(0.0, 1.0, 100, 2)])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="hdd_drives"):
            simulate(df, AllHDDPolicy(), CostModel(), 0, hdd_drives=bad)  # type: ignore[arg-type]


def test_a_demand_equal_to_the_hdd_supply_is_no_overload() -> None:
    # 340 ops over 2 s is 170 ops/s, what one drive serves (CostModel().hdd_iops_per_drive)
    assert CostModel().hdd_iops_per_drive == 170
    r = simulate(_log([(0.0, 2.0, 4096, 340)]), AllHDDPolicy(), CostModel(), 0, hdd_drives=1)
    assert r.hdd_peak_iops_demand == pytest.approx(170)
    assert r.hdd_overload_s == 0.0 and r.hdd_overload_ops == 0.0


def test_overload_time_share_is_over_the_whole_replay_whatever_the_row_order() -> None:
    # a quiet file logged first, over [10, 12); two files of 200 ops/s each over [0, 3)
    # overload one drive (170 ops/s) for 3 s of the 12 s from first creation to last deletion
    df = _log([(10.0, 12.0, 4096, 2), (0.0, 2.0, 4096, 400), (1.0, 3.0, 4096, 400)])
    r = simulate(df, AllHDDPolicy(), CostModel(), 0, hdd_drives=1)
    assert r.duration_s == pytest.approx(12.0)
    assert r.hdd_overload_s == pytest.approx(3.0)
    assert r.hdd_overload_time_share == pytest.approx(3.0 / 12.0)
    assert r.to_dict()["hdd_overload_time_share"] == pytest.approx(0.25)


def test_the_budget_defaults_to_the_policys_own_ledger() -> None:
    df = _log([(0.0, 1.0, 100, 2), (0.5, 1.0, 100, 2)])
    r = simulate(df, FirstFitPolicy(150), CostModel())
    assert r.ssd_capacity_bytes == 150 and r.ssd_files == 1
    # a policy without a ledger gets no SSD: every request is overruled
    rogue = simulate(df, AlwaysSSD(), CostModel())
    assert rogue.ssd_capacity_bytes == 0 and rogue.ssd_files == 0 and rogue.overruled == 2
