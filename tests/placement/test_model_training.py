"""The density model's settings, training and prediction paths, on small real tables."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pandas as pd
import pytest

from placement import model as model_module
from placement.errors import ModelError, PlacementConfigError
from placement.features import CATEGORICAL_FEATURES, FEATURE_COLUMNS, build_features, log_density
from placement.model import DensityModel, ModelParams
from tests.placement.logtables import make_log

SMALL = ModelParams(n_estimators=10, min_data_in_leaf=5, num_threads=1)


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    return make_log(seed=4, pipelines=2, runs=2, files_per_stage=10).to_pandas()


@pytest.fixture(scope="module")
def feats(log: pd.DataFrame) -> pd.DataFrame:
    return build_features(log)


@pytest.fixture(scope="module")
def model(log: pd.DataFrame) -> DensityModel:
    return DensityModel(SMALL).fit(log)


# ---------------------------------------------------------------- settings
def test_the_least_valid_settings_are_accepted() -> None:
    params = ModelParams(n_estimators=1, num_leaves=2, min_data_in_leaf=1, num_threads=0, seed=-3)
    assert params.lightgbm()["num_leaves"] == 2 and params.lightgbm()["seed"] == -3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_estimators": 0}, r"n_estimators=0 must be an int >= 1"),
        ({"n_estimators": 2.5}, r"n_estimators=2.5 must be an int >= 1"),
        ({"min_data_in_leaf": 0}, r"min_data_in_leaf=0 must be an int >= 1"),
        ({"feature_fraction": 0}, r"feature_fraction=0 must be in \(0, 1\]"),
        ({"bagging_fraction": 1.5}, r"bagging_fraction=1.5 must be in \(0, 1\]"),
        ({"learning_rate": "0.1"}, r"learning_rate='0.1' must be in \(0, 1\]"),
        ({"seed": "0"}, "seed must be an int"),
        ({"num_threads": -1}, "num_threads an int >= 0"),
        ({"num_threads": 1.0}, "num_threads an int >= 0"),
    ],
)
def test_bad_settings_name_the_setting(options: dict[str, object], message: str) -> None:
    with pytest.raises(PlacementConfigError, match=message):
        ModelParams(**options)  # type: ignore[arg-type]


def test_the_settings_reach_lightgbm(log: pd.DataFrame, feats: pd.DataFrame) -> None:
    """Seed, shares and sizes are what the trees were grown with."""
    params = ModelParams(
        n_estimators=7, num_leaves=3, min_data_in_leaf=5, learning_rate=0.3, seed=1, num_threads=1
    )
    m = DensityModel(params).fit(log)
    assert m.booster.num_trees() == 7
    assert max(t["num_leaves"] for t in m.booster.dump_model()["tree_info"]) <= 3
    same = DensityModel(params).fit(log).predict(feats)
    other_seed = DensityModel(ModelParams(**{**vars(params), "seed": 2})).fit(log).predict(feats)
    np.testing.assert_array_equal(m.predict(feats), same)
    assert not np.allclose(m.predict(feats), other_seed)
    assert m.metadata["params"] == vars(params)


def test_the_categorical_features_are_trained_as_categories(model: DensityModel) -> None:
    infos = model.booster.dump_model()["feature_infos"]
    for name in CATEGORICAL_FEATURES:
        assert infos[name]["values"], name  # LightGBM lists a category's values
    assert infos["log_expected_size"]["values"] == []  # and none for a numeric feature


# ---------------------------------------------------------------- training
def test_fit_records_what_it_trained_on(log: pd.DataFrame) -> None:
    bad = log.copy()
    bad.loc[0, "deleted_at"] = bad.loc[0, "created_at"] - 1.0  # deleted before created
    m = DensityModel(SMALL).fit(bad)
    assert m.metadata["dropped_rows"] == 1
    assert m.metadata["trained_rows"] == len(log) - 1
    assert m.metadata["pipelines"] == ["pipe0", "pipe1"]
    assert m.metadata["runs"] == 4
    assert m.metadata["run_ids"] == sorted(log["run_id"].unique())


def test_fit_without_usable_rows_is_a_clear_error(log: pd.DataFrame) -> None:
    bad = log.copy()
    bad["deleted_at"] = bad["created_at"] - 1.0
    with pytest.raises(ModelError, match="no usable log rows"):
        DensityModel(SMALL).fit(bad)


def test_fit_features_refuses_targets_that_do_not_fit(feats: pd.DataFrame) -> None:
    with pytest.raises(ModelError, match=f"{len(feats)} feature rows but 3 targets"):
        DensityModel(SMALL).fit_features(feats, np.zeros(3))
    with pytest.raises(ModelError, match="no finite log-density targets"):
        DensityModel(SMALL).fit_features(feats, np.full(len(feats), np.nan))


def test_sample_weights_change_the_model(log: pd.DataFrame, feats: pd.DataFrame) -> None:
    target = log_density(log)
    plain = DensityModel(SMALL).fit_features(feats, target)
    ones = DensityModel(SMALL).fit_features(feats, target, np.ones(len(target)))
    weight = np.where(log["pipeline"] == "pipe0", 100.0, 1.0)
    weighted = DensityModel(SMALL).fit_features(feats, target, weight)
    np.testing.assert_allclose(ones.predict(feats), plain.predict(feats))
    assert not np.allclose(weighted.predict(feats), plain.predict(feats))


class _TooFewLeaves(ModelParams):
    """Settings that LightGBM itself refuses (an injected fault: ModelParams checks its own)."""

    def lightgbm(self) -> dict[str, object]:
        return {**super().lightgbm(), "num_leaves": 1}


def test_a_training_that_lightgbm_refuses_is_a_model_error(feats: pd.DataFrame) -> None:
    with pytest.raises(ModelError, match="LightGBM training failed"):
        DensityModel(_TooFewLeaves(n_estimators=2)).fit_features(feats, np.zeros(len(feats)))


# ---------------------------------------------------------------- prediction
def test_a_feature_frame_is_read_by_column_name(model: DensityModel, feats: pd.DataFrame) -> None:
    shuffled = feats[list(reversed(FEATURE_COLUMNS))].assign(extra=1.0)
    np.testing.assert_array_equal(model.predict(shuffled), model.predict(feats))


@pytest.mark.parametrize("shape", [(), (2, len(FEATURE_COLUMNS), 1), (len(FEATURE_COLUMNS) + 1,)])
def test_features_of_another_shape_are_refused(model: DensityModel, shape: tuple[int, ...]) -> None:
    with pytest.raises(ModelError, match=r"expected \(rows, \d+\)"):
        model.predict(np.zeros(shape))


@pytest.mark.parametrize("n", [3, len(FEATURE_COLUMNS) + 1])
def test_a_single_row_of_another_length_is_refused(model: DensityModel, n: int) -> None:
    with pytest.raises(
        ModelError, match=f"feature row has {n} values; expected {len(FEATURE_COLUMNS)}"
    ):
        model.predict_one(np.zeros(n))


def test_the_single_row_path_follows_a_retrained_booster(
    log: pd.DataFrame, feats: pd.DataFrame
) -> None:
    m = DensityModel(SMALL).fit(log)
    row = feats.to_numpy(np.float64)[0]
    m.predict_one(row)
    m.fit_features(feats, log_density(log) + 2.0)  # the same object, a new booster
    assert m.predict_one(row) == pytest.approx(m.predict(row)[0])


def test_without_the_fast_path_a_single_row_still_gets_its_prior(
    model: DensityModel,
    feats: pd.DataFrame,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If LightGBM's single-row API cannot be set up, Booster.predict answers the same."""

    def unavailable(booster: object, n_features: int) -> None:
        raise OSError("single-row prediction is not available")

    rows = feats.to_numpy(np.float64)[:2].copy()
    rows[1, FEATURE_COLUMNS.index("h_prior_ld")] = np.nan  # no history: the fallback prior
    m = pickle.loads(pickle.dumps(model))  # a copy without a fast path set up
    monkeypatch.setattr(model_module, "_SingleRow", unavailable)
    with caplog.at_level(logging.INFO, logger="placement.model"):
        got = [m.predict_one(row) for row in rows]
    np.testing.assert_allclose(got, m.predict(rows))
    assert "fast path unavailable" in caplog.text


def test_a_model_that_has_predicted_one_row_pickles(
    model: DensityModel, feats: pd.DataFrame
) -> None:
    row = feats.to_numpy(np.float64)[3]
    want = model.predict_one(row)
    copy = pickle.loads(pickle.dumps(model))
    assert copy.predict_one(row) == pytest.approx(want)
    np.testing.assert_array_equal(copy.predict(feats), model.predict(feats))


def test_split_importances_count_the_splits(model: DensityModel) -> None:
    split = model.feature_importances("split")
    gain = model.feature_importances("gain")
    n_splits = sum(t["num_leaves"] - 1 for t in model.booster.dump_model()["tree_info"])
    assert sum(split.values()) == n_splits
    assert all(v == int(v) for v in split.values())
    assert split != gain
    assert list(split.values()) == sorted(split.values(), reverse=True)
