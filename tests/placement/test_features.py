"""Creation-time features: no outcome leaks, history from earlier runs only, bad rows counted."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from placement.errors import SchemaError
from placement.features import (
    FEATURE_COLUMNS,
    HISTORY_LEVELS,
    PRIOR_SIZE_SLOPES,
    HistoryStore,
    build_features,
    clean_table,
    estimated_sizes,
    features_from_request,
    history_prior,
    log_density,
    size_estimate,
)
from placement.schema import ID_COLUMNS, MIN_SIZE_BYTES, OUTCOME_COLUMNS
from tests.placement.logtables import make_log

OUTCOME_NUMERIC = ["deleted_at", "size_bytes", "read_ops", "write_ops", "read_bytes", "write_bytes"]


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    return make_log(seed=1).to_pandas()


def test_feature_columns_hold_no_outcome_or_id_column() -> None:
    assert not set(FEATURE_COLUMNS) & set(OUTCOME_COLUMNS)
    assert not set(FEATURE_COLUMNS) & set(ID_COLUMNS)
    assert not set(FEATURE_COLUMNS) & {"io_density", "lifetime_s"}
    assert len(set(FEATURE_COLUMNS)) == len(FEATURE_COLUMNS)


def test_shuffling_a_runs_outcomes_leaves_its_features_and_earlier_ones_unchanged(
    log: pd.DataFrame, rng: np.random.Generator
) -> None:
    runs = log.groupby("run_id")["created_at"].min().sort_values().index.tolist()
    target = runs[len(runs) // 2]
    before = build_features(log)
    changed = log.copy()
    in_run = (changed["run_id"] == target).to_numpy()
    # permute the target run's outcome columns among its rows (lifetimes stay positive)
    perm = rng.permutation(np.flatnonzero(in_run))
    life = changed["deleted_at"] - changed["created_at"]
    changed.loc[in_run, ["size_bytes", "read_ops", "write_ops", "read_bytes", "write_bytes"]] = (
        changed.loc[
            perm, ["size_bytes", "read_ops", "write_ops", "read_bytes", "write_bytes"]
        ].to_numpy()
    )
    changed.loc[in_run, "deleted_at"] = (
        changed.loc[in_run, "created_at"].to_numpy() + life.to_numpy()[perm]
    )
    # and scramble every later run's outcomes
    later = changed["run_id"].isin(runs[runs.index(target) + 1 :]).to_numpy()
    changed.loc[later, "read_ops"] = changed.loc[later, "read_ops"] * 7 + 3
    changed.loc[later, "size_bytes"] = changed.loc[later, "size_bytes"] // 5 + 1
    assert not np.allclose(log_density(changed), log_density(log))
    after = build_features(changed)
    upto = ~later
    pd.testing.assert_frame_equal(before.loc[upto], after.loc[upto])
    # outcomes of the target run do reach later runs' history features
    assert not before.loc[later, "h_ps_ld"].equals(after.loc[later, "h_ps_ld"])


def test_first_run_has_no_history_and_second_sees_the_first(log: pd.DataFrame) -> None:
    feats = build_features(log)
    first = (log["run_id"] == "pipe0-run0").to_numpy()
    assert (feats.loc[first, "h_ps_n"] == 0).all()
    assert feats.loc[first, "h_ps_ld"].isna().all()
    second = ((log["run_id"] == "pipe0-run1") & (log["stage"] == "load")).to_numpy()
    earlier = ((log["run_id"] == "pipe0-run0") & (log["stage"] == "load")).to_numpy()
    expected = log_density(log.loc[earlier]).mean()
    np.testing.assert_allclose(feats.loc[second, "h_ps_ld"].to_numpy(), expected)
    np.testing.assert_allclose(feats.loc[second, "h_ps_n"].to_numpy(), np.log1p(earlier.sum()))


def test_files_without_io_rank_last_without_breaking_history_or_training(
    log: pd.DataFrame,
) -> None:
    from placement.model import DensityModel, ModelParams
    from placement.schema import LOG_DENSITY_FLOOR

    cold = log.copy()
    idle = np.random.default_rng(0).random(len(cold)) < 0.05  # never read or written
    cold.loc[idle, ["read_ops", "write_ops", "read_bytes", "write_bytes"]] = 0
    target = log_density(cold)
    assert (target[idle] == LOG_DENSITY_FLOOR).all() and np.isfinite(target).all()
    assert target[idle].max() < target[~idle].min(), "they rank below every file with I/O"
    feats = build_features(cold)
    seen = feats["h_ps_n"] > 0
    for column in ("h_ps_ld", "h_ps_sd", "h_prior_ld"):
        assert np.isfinite(feats.loc[seen, column]).all(), column
    model = DensityModel(ModelParams(n_estimators=30, num_threads=1)).fit(cold)
    assert sum(model.feature_importances("gain").values()) > 0, "the model learned something"
    pred = model.predict_table(cold)
    busy = ~idle
    rho = pd.Series(pred[busy]).corr(pd.Series(target[busy]), method="spearman")
    assert rho > 0.5, rho
    # NaN stays NaN (a row without its deletion time), and is not floored
    broken = cold.head(3).copy()
    broken["deleted_at"] = np.nan
    assert np.isnan(log_density(broken)).all()


def test_a_file_created_the_instant_a_run_ends_does_not_see_that_run() -> None:
    """History comes from runs that ended strictly before a file was created: a run whose
    last file is deleted at the very time another file is created is not yet history."""
    log = make_log(pipelines=1, runs=2, files_per_stage=3).to_pandas()
    first = (log["run_id"] == "pipe0-run0").to_numpy()
    end = float(log.loc[first, "deleted_at"].max())
    load = np.flatnonzero(((log["run_id"] == "pipe0-run1") & (log["stage"] == "load")).to_numpy())
    at_end, just_after = load[:2]
    assert log.loc[at_end, "created_at"] > end  # the runs did not overlap as logged
    log.loc[at_end, "created_at"] = end
    log.loc[just_after, "created_at"] = np.nextafter(end, math.inf)
    feats = build_features(log)
    levels = [f"h_{level}_n" for level in HISTORY_LEVELS]
    assert (feats.loc[at_end, levels] == 0).all()
    assert feats.loc[at_end, [f"h_{level}_ld" for level in HISTORY_LEVELS]].isna().all()
    # a moment later the first run is history: its 3 load files at the (pipeline, stage) level
    assert feats.loc[just_after, "h_ps_n"] == pytest.approx(np.log1p(3))
    assert (feats.loc[just_after, levels] > 0).all()
    earlier = first & (log["stage"] == "load").to_numpy()
    assert feats.loc[just_after, "h_ps_ld"] == pytest.approx(log_density(log.loc[earlier]).mean())
    # the store's own query answers the same
    store = HistoryStore(log.loc[first])
    queried = store.features_for(log.loc[[at_end, just_after]])
    assert queried.loc[0, "h_ps_n"] == 0 and queried.loc[1, "h_ps_n"] == pytest.approx(np.log1p(3))


def test_kind_history_comes_from_earlier_runs_of_other_pipelines(log: pd.DataFrame) -> None:
    feats = build_features(log)
    # the very first run has no history at any level, kind included
    first = (log["run_id"] == "pipe0-run0").to_numpy()
    assert (feats.loc[first, "h_k_n"] == 0).all()
    assert feats.loc[first, ["h_k_ld", "h_k_size_ratio", "h_prior_ld"]].isna().all().all()
    # the first run of another pipeline knows the kind from pipe0-run0 (finished before it)
    spill = (log["file_kind"] == "spill").to_numpy()
    second = ((log["run_id"] == "pipe1-run0") & spill).to_numpy()
    assert (feats.loc[second, "h_ps_n"] == 0).all()
    created = log.loc[second, "created_at"].min()
    ends = log.groupby("run_id")["deleted_at"].max()
    done = log["run_id"].map(ends).to_numpy() < created
    assert set(log.loc[done, "run_id"]) == {"pipe0-run0"}
    earlier = done & spill
    np.testing.assert_allclose(
        feats.loc[second, "h_k_ld"].to_numpy(), log_density(log.loc[earlier]).mean()
    )
    mean_lsize = np.log10(log.loc[earlier, "size_bytes"].to_numpy(float)).mean()
    np.testing.assert_allclose(
        feats.loc[second, "h_k_size_ratio"].to_numpy(),
        feats.loc[second, "log_expected_size"].to_numpy() - mean_lsize,
    )
    # with no (pipeline, stage), stage or (kind, operator) history the prior is the kind's
    no_specific = feats.loc[second, ["h_s_ld", "h_ko_ld"]].isna().all(axis=1).to_numpy()
    rows = np.flatnonzero(second)[no_specific]
    expected = feats.loc[rows, "h_k_ld"] - 1.0 * feats.loc[rows, "h_k_size_ratio"]
    np.testing.assert_allclose(feats.loc[rows, "h_prior_ld"], expected)


def test_history_prior_falls_back_from_specific_to_kind_level() -> None:
    nan = float("nan")
    hist = {
        "h_ps_ld": -5.0,
        "h_ps_lsize": 6.0,
        "h_s_ld": -4.0,
        "h_s_lsize": 5.0,
        "h_ko_ld": nan,
        "h_ko_lsize": nan,
        "h_k_ld": -6.0,
        "h_k_lsize": 7.0,
    }
    # the docstring's worked example: 10 MB file, 1 MB peers at -5 -> -5.5
    assert history_prior(7.0, hist) == pytest.approx(-5.5)
    assert history_prior(7.0, {**hist, "h_ps_ld": nan, "h_ps_lsize": nan}) == pytest.approx(-5.0)
    only_kind = {**hist, "h_ps_ld": nan, "h_s_ld": nan}
    assert history_prior(7.0, only_kind) == pytest.approx(-6.0)
    assert history_prior(nan, only_kind) == pytest.approx(-6.0)  # size unknown: no size term
    # the kind levels move a whole log size ratio (operations per file fixed), the stage
    # levels half of one: 10x the kind's mean size -> 10x sparser
    assert history_prior(8.0, only_kind) == pytest.approx(-7.0)
    assert history_prior(8.0, {**only_kind, "h_ko_ld": -5.0, "h_ko_lsize": 6.0}) == pytest.approx(
        -7.0
    )
    assert history_prior(8.0, hist) == pytest.approx(-6.0)
    assert PRIOR_SIZE_SLOPES == {"ps": 0.5, "s": 0.5, "ko": 1.0, "k": 1.0}
    assert np.isnan(history_prior(7.0, {k: nan for k in hist}))
    # the batch (array) form agrees with the single-decision (float) form
    sizes = np.array([7.0, 5.5, nan])
    arrays = {k: np.full(3, v) for k, v in hist.items()}
    np.testing.assert_allclose(
        history_prior(sizes, arrays), [history_prior(float(x), hist) for x in sizes]
    )


@pytest.mark.parametrize("unknown_partitions", [False, True])
def test_request_features_match_batch_features(log: pd.DataFrame, unknown_partitions: bool) -> None:
    runs = log.groupby("run_id")["created_at"].min().sort_values().index.tolist()
    last = runs[-1]
    if unknown_partitions:  # a spill of a stage the run context does not count
        log = log.copy()
        log["n_partitions_out"] = log["n_partitions_out"].astype("Float64")
        log.loc[log["run_id"] == last, "n_partitions_out"] = None
        assert log["input_bytes"].notna().all()
    history = HistoryStore(log[log["run_id"] != last])
    batch = build_features(log)
    rows = np.flatnonzero((log["run_id"] == last).to_numpy())[:10]
    for i in rows:
        single = features_from_request(log.iloc[i].to_dict(), history)
        np.testing.assert_allclose(single, batch.iloc[i].to_numpy(), rtol=1e-9, equal_nan=True)


def test_request_from_dataclass_and_unknown_facts() -> None:
    @dataclasses.dataclass
    class Request:
        file_kind: str
        pipeline: str
        stage: str
        expected_size_bytes: int | None = None

    row = features_from_request(Request("spill", "p", "s", 2**20))
    assert row.shape == (len(FEATURE_COLUMNS),)
    assert row[FEATURE_COLUMNS.index("log_expected_size")] == pytest.approx(np.log10(2**20))
    assert row[FEATURE_COLUMNS.index("file_kind")] == 0.0
    assert np.isnan(row[FEATURE_COLUMNS.index("operator")])
    assert np.isnan(features_from_request({"file_kind": "nonsense"})[0])


def test_clean_table_counts_bad_rows(log: pd.DataFrame) -> None:
    bad = log.copy()
    bad.loc[0, "deleted_at"] = bad.loc[0, "created_at"] - 1
    bad.loc[1, "size_bytes"] = -5
    bad.loc[2, "created_at"] = np.nan
    out, issues = clean_table(bad)
    assert len(out) == len(log) - 3
    assert issues.n_dropped == 3
    assert issues.dropped["deleted before created"] == 1
    assert issues.dropped["negative size_bytes"] == 1


def test_clean_table_names_missing_columns(log: pd.DataFrame) -> None:
    with pytest.raises(SchemaError, match="read_ops"):
        clean_table(log.drop(columns=["read_ops"]))


def test_history_snapshot_answers_like_its_store_and_pickles_small(log: pd.DataFrame) -> None:
    import pickle

    store = HistoryStore(log)
    snap = store.snapshot()
    assert snap.n_runs == store.n_runs and snap.n_keys > 0
    row = log.iloc[7].to_dict()
    np.testing.assert_array_equal(
        features_from_request(row, snap), features_from_request(row, store)
    )
    assert snap.lookup("nope", "nope") == store.lookup("nope", "nope")
    assert len(pickle.dumps(snap)) < len(pickle.dumps(store))


def test_size_estimate_learns_how_much_a_stage_outgrows_its_expected_size(
    log: pd.DataFrame,
) -> None:
    grown = log.copy()
    shuffle = (grown["file_kind"] == "shuffle").to_numpy()
    # shuffle files end 10x larger than expected at their creation
    grown.loc[shuffle, "expected_size_bytes"] = grown.loc[shuffle, "size_bytes"] // 10
    est = estimated_sizes(grown)
    expected = grown["expected_size_bytes"].to_numpy(np.float64)
    first_run = (grown["run_id"] == grown.sort_values("created_at")["run_id"].iloc[0]).to_numpy()
    np.testing.assert_allclose(est[first_run], expected[first_run])  # no history yet
    later = ~first_run
    np.testing.assert_allclose(est[later & shuffle] / expected[later & shuffle], 10.0, rtol=0.01)
    # spill files were expected within 10% of their final size: the estimate stays close
    ratio = est[later & ~shuffle] / expected[later & ~shuffle]
    assert np.all((ratio > 0.9) & (ratio < 1.1))
    # a file of its own run never informs the estimate
    run = grown["run_id"].iloc[-1]
    own = (grown["run_id"] == run).to_numpy()
    changed = grown.copy()
    changed.loc[own, "size_bytes"] = changed.loc[own, "size_bytes"] * 1000
    np.testing.assert_allclose(estimated_sizes(changed), est)


def test_size_estimate_without_an_expected_size_uses_the_stage_mean_size(
    log: pd.DataFrame,
) -> None:
    store = HistoryStore.from_table(log)
    hist = store.lookup("pipe0", "aggregate", "spill", "groupby")
    got = size_estimate(math.nan, hist)
    assert got == pytest.approx(hist["h_ps_lsize"])
    # the scalar (live) path and the array path agree
    log_expected = np.array([math.nan, 6.0])
    arrays = {k: np.full(2, v) for k, v in hist.items()}
    np.testing.assert_allclose(size_estimate(log_expected, arrays), [got, size_estimate(6.0, hist)])
    assert size_estimate(6.0, hist) == pytest.approx(6.0 + hist["h_ps_lgrow"])
    # nothing known at all: unknown
    empty = HistoryStore().lookup("new", "stage")
    assert math.isnan(size_estimate(math.nan, empty))
    assert size_estimate(5.0, empty) == 5.0


def _one_run(sizes: list[int], lives: list[float], ops: list[int]) -> pd.DataFrame:
    """One run of pipeline ``pipe0``: its ``load`` files get the given outcomes."""
    log = make_log(pipelines=1, runs=1, files_per_stage=len(sizes)).to_pandas()
    load = (log["stage"] == "load").to_numpy()
    log.loc[load, "size_bytes"] = sizes
    log.loc[load, "deleted_at"] = log.loc[load, "created_at"].to_numpy() + np.asarray(lives)
    log.loc[load, "read_ops"] = np.asarray(ops) - 1
    log.loc[load, "write_ops"] = 1
    return log


def test_clean_table_keeps_empty_idle_files_deleted_when_created(log: pd.DataFrame) -> None:
    """Zero bytes, zero operations and a zero lifetime are usable; only negatives are not."""
    edge = log.head(3).copy()
    edge.loc[0, "deleted_at"] = edge.loc[0, "created_at"]
    edge.loc[1, ["size_bytes", "read_bytes", "write_bytes"]] = 0
    edge.loc[2, ["read_ops", "write_ops"]] = 0
    out, issues = clean_table(edge)
    assert len(out) == 3 and issues.n_dropped == 0


def test_clean_table_drops_rows_with_an_infinite_time(log: pd.DataFrame) -> None:
    bad = log.head(3).copy()
    bad.loc[0, "deleted_at"] = math.inf
    bad.loc[1, "created_at"] = -math.inf
    out, issues = clean_table(bad)
    assert len(out) == 1 and issues.dropped == {"non-finite time": 2}


def test_history_means_floor_sizes_and_lifetimes_and_rate_ops_per_second() -> None:
    # load files: 0 bytes deleted when created with 2 ops; 1 MB over 1 s with 10 ops;
    # 100 kB over 10 s with 100 ops. Sizes floor at 4096 B, lifetimes at 1 ms.
    log = _one_run([0, 10**6, 10**5], [0.0, 1.0, 10.0], [2, 10, 100])
    hist = HistoryStore(log).lookup("pipe0", "load")
    assert hist["h_ps_lsize"] == pytest.approx((math.log10(4096) + 6 + 5) / 3)
    assert hist["h_ps_llife"] == pytest.approx((-3 + 0 + 1) / 3)
    # operations per second: 2 / 1e-3, 10 / 1, 100 / 10
    assert hist["h_ps_lrate"] == pytest.approx((math.log10(2000) + 1 + 1) / 3)
    densities = log_density(log[log["stage"] == "load"])
    assert hist["h_ps_ld"] == pytest.approx(densities.mean())
    assert hist["h_ps_sd"] == pytest.approx(densities.std())  # over the files, not a sample


def test_size_ratios_place_the_file_against_its_levels_mean_size(log: pd.DataFrame) -> None:
    feats = build_features(log)
    for level in ("ps", "k"):
        seen = (feats[f"h_{level}_n"] > 0).to_numpy()
        np.testing.assert_allclose(
            feats.loc[seen, f"h_{level}_size_ratio"],
            feats.loc[seen, "log_expected_size"] - feats.loc[seen, f"h_{level}_lsize"],
        )
    # a file 10x the mean size of its (pipeline, stage) is one log ratio above it
    store = HistoryStore(log)
    row = log.iloc[0].to_dict()
    lsize = store.lookup(row["pipeline"], row["stage"])["h_ps_lsize"]
    got = features_from_request({**row, "expected_size_bytes": 10 ** (lsize + 1)}, store)
    assert got[FEATURE_COLUMNS.index("h_ps_size_ratio")] == pytest.approx(1.0)


def test_size_growth_history_counts_only_files_that_logged_a_positive_expected_size() -> None:
    # grew 10x from 100 B; expected 0 (no ratio); no expected size at all
    log = _one_run([1000, 10**6, 10**4], [1.0, 1.0, 1.0], [2, 2, 2])
    load = (log["stage"] == "load").to_numpy()
    log["expected_size_bytes"] = log["expected_size_bytes"].astype("Float64")
    log.loc[load, "expected_size_bytes"] = [100, 0, None]
    hist = HistoryStore(log).lookup("pipe0", "load")
    assert hist["h_ps_lgrow"] == pytest.approx(1.0)
    assert size_estimate(3.0, hist) == pytest.approx(4.0)


def test_rate_density_of_a_file_below_the_minimum_size_uses_the_minimum(log: pd.DataFrame) -> None:
    """Densities floor sizes at MIN_SIZE_BYTES; the history's rate density does the same."""
    store = HistoryStore(log)
    row = log.iloc[0].to_dict()
    col = FEATURE_COLUMNS.index("h_ps_rate_density")
    rates = [
        features_from_request({**row, "expected_size_bytes": size}, store)[col]
        for size in (10, MIN_SIZE_BYTES)
    ]
    lrate = store.lookup(row["pipeline"], row["stage"])["h_ps_lrate"]
    assert rates == pytest.approx([lrate - math.log10(MIN_SIZE_BYTES)] * 2)
    batch = build_features(log.assign(expected_size_bytes=10))
    seen = (batch["h_ps_n"] > 0).to_numpy()
    np.testing.assert_allclose(
        batch.loc[seen, "h_ps_rate_density"],
        batch.loc[seen, "h_ps_lrate"] - math.log10(MIN_SIZE_BYTES),
    )


def test_kind_density_moved_to_a_file_ten_times_larger_is_ten_times_sparser(
    log: pd.DataFrame,
) -> None:
    feats = build_features(log)
    seen = (feats["h_k_n"] > 0).to_numpy()
    np.testing.assert_allclose(
        feats.loc[seen, "h_k_ld_adj"], feats.loc[seen, "h_k_ld"] - feats.loc[seen, "h_k_size_ratio"]
    )
    store = HistoryStore(log)
    row = log.iloc[0].to_dict()
    hist = store.lookup(row["pipeline"], row["stage"], row["file_kind"], row["operator"])
    size = 10 ** (hist["h_k_lsize"] + 1)
    got = features_from_request({**row, "expected_size_bytes": size}, store)
    assert got[FEATURE_COLUMNS.index("h_k_ld_adj")] == pytest.approx(hist["h_k_ld"] - 1)


def test_no_output_partitions_counts_as_one_in_batch_and_request_features(
    log: pd.DataFrame,
) -> None:
    zero = log.head(1).assign(n_partitions_out=0)
    col = FEATURE_COLUMNS.index("log_input_per_partition")
    expected = math.log10(float(zero.loc[0, "input_bytes"]))
    assert build_features(zero).loc[0, "log_input_per_partition"] == pytest.approx(expected)
    assert features_from_request(zero.iloc[0].to_dict())[col] == pytest.approx(expected)


def test_a_request_with_no_history_has_zero_counts_as_batch_features_do(log: pd.DataFrame) -> None:
    store = HistoryStore(log)
    new = {**log.iloc[0].to_dict(), "pipeline": "new", "stage": "new", "file_kind": "other"}
    new["operator"] = "cache"
    row = features_from_request(new, store)
    for level in HISTORY_LEVELS:
        assert row[FEATURE_COLUMNS.index(f"h_{level}_n")] == 0.0, level
        assert np.isnan(row[FEATURE_COLUMNS.index(f"h_{level}_ld")]), level
    first = build_features(log).iloc[0]  # the first file of the log has no history either
    assert (first[[f"h_{level}_n" for level in HISTORY_LEVELS]] == 0).all()


def test_a_run_added_in_parts_ends_at_its_last_deletion_over_every_part() -> None:
    """A run stored in two parts, its latest file first, is history only after that file."""
    log = make_log(pipelines=1, runs=2, files_per_stage=3).to_pandas()
    first = log[log["run_id"] == "pipe0-run0"]
    last = first["deleted_at"].idxmax()
    store = HistoryStore(first.loc[[last]])
    store.add(first.drop(index=last))
    end = float(first["deleted_at"].max())
    early_end = float(first.drop(index=last)["deleted_at"].max())
    assert early_end < end
    query = log[log["run_id"] == "pipe0-run1"].head(2).reset_index(drop=True)
    query["created_at"] = [(early_end + end) / 2, np.nextafter(end, math.inf)]
    feats = store.features_for(query)
    assert (feats.loc[0, [f"h_{level}_n" for level in HISTORY_LEVELS]] == 0).all()
    assert feats.loc[1, "h_p_n"] == pytest.approx(np.log1p(len(first)))
    alone = store.features_for(query.tail(1))  # the same file queried on its own
    assert alone.loc[0, "h_p_n"] == pytest.approx(np.log1p(len(first)))


def test_a_file_dropped_from_history_still_never_sees_its_own_run() -> None:
    """A row clean_table drops still ends its run no earlier than its creation: build_features
    featurizes it, and its own run must not be history to it."""
    log = make_log(pipelines=1, runs=1, files_per_stage=3).to_pandas()
    last = log["created_at"].idxmax()
    log.loc[last, "read_bytes"] = -1  # unusable: clean_table drops it from the store
    log.loc[last, "deleted_at"] = log["deleted_at"].max() + 10
    others = log.index != last
    # every kept file of the run is deleted before the dropped one is created
    log.loc[others, "deleted_at"] = np.minimum(
        log.loc[others, "deleted_at"], log.loc[last, "created_at"] - 0.01
    )
    feats = build_features(log)
    assert (feats.loc[last, [f"h_{level}_n" for level in HISTORY_LEVELS]] == 0).all()
    assert HistoryStore(log).n_runs == 1  # the run's kept files are still history
