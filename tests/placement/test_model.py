"""The LightGBM density model: learns, saves and loads, refuses bad files, routes per workload."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from placement.errors import ModelError
from placement.features import (
    FEATURE_COLUMNS,
    PRIOR_SIZE_SLOPES,
    HistoryStore,
    build_features,
    features_from_request,
    log_density,
)
from placement.model import MODEL_VERSION, Combine, DensityModel, ModelParams, ModelSet
from placement.schema import SCHEMA_VERSION
from tests.placement.logtables import make_log

FAST = ModelParams(n_estimators=60, num_threads=1)


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    return make_log(seed=2).to_pandas()


@pytest.fixture(scope="module")
def split(log: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    test = log["run_id"].str.endswith("run3").to_numpy()
    return ~test, test


@pytest.fixture(scope="module")
def model(log: pd.DataFrame, split: tuple[np.ndarray, np.ndarray]) -> DensityModel:
    train, _ = split
    return DensityModel(FAST).fit(log.loc[train])


def test_predictions_rank_held_out_runs(
    log: pd.DataFrame, split: tuple[np.ndarray, np.ndarray], model: DensityModel
) -> None:
    _, test = split
    feats = build_features(log, HistoryStore(log))
    pred = model.predict(feats.loc[test])
    rho = spearmanr(pred, log_density(log.loc[test])).statistic
    assert rho > 0.8
    assert pred.shape == (int(test.sum()),)


def test_single_row_path_equals_batch(log: pd.DataFrame, model: DensityModel) -> None:
    history = HistoryStore(log)
    row = features_from_request(log.iloc[5].to_dict(), history)
    assert model.predict_one(row) == pytest.approx(model.predict(row[None, :])[0])
    assert model.predict(row).shape == (1,)


def test_trees_fit_the_residual_against_the_history_prior(
    log: pd.DataFrame, split: tuple[np.ndarray, np.ndarray], model: DensityModel
) -> None:
    feats = build_features(log)
    x = feats.to_numpy(np.float64)
    prior = feats["h_prior_ld"].to_numpy()
    assert np.isnan(prior).any() and np.isfinite(prior).any()
    raw = model.booster.predict(x)
    expected = raw + np.where(np.isnan(prior), model.prior_fallback, prior)
    np.testing.assert_allclose(model.predict(feats), expected)
    train, _ = split
    assert model.prior_fallback == pytest.approx(float(np.mean(log_density(log.loc[train]))))
    # the single-decision path adds the same prior, also without any history
    no_history = features_from_request(log.iloc[0].to_dict())
    assert np.isnan(no_history[FEATURE_COLUMNS.index("h_prior_ld")])
    assert model.predict_one(no_history) == pytest.approx(model.predict(no_history)[0])


def test_feature_importances_name_every_feature(model: DensityModel) -> None:
    imp = model.feature_importances()
    assert set(imp) == set(FEATURE_COLUMNS)
    values = list(imp.values())
    assert values == sorted(values, reverse=True) and values[0] > 0
    with pytest.raises(ValueError, match="gain"):
        model.feature_importances("bogus")


def test_save_load_round_trip(tmp_path: Path, log: pd.DataFrame, model: DensityModel) -> None:
    model.save(tmp_path / "m")
    loaded = DensityModel.load(tmp_path / "m")
    feats = build_features(log)
    np.testing.assert_array_equal(loaded.predict(feats), model.predict(feats))
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert (
        meta["feature_columns"] == list(FEATURE_COLUMNS)
        and meta["schema_version"] == SCHEMA_VERSION == 2
    )
    assert meta["prior_feature"] == "h_prior_ld"
    assert meta["prior_size_slopes"] == PRIOR_SIZE_SLOPES
    assert loaded.prior_fallback == model.prior_fallback
    assert loaded.file_bytes > 0
    assert (
        DensityModel.load(tmp_path / "m" / "model.json").booster.num_trees()
        == model.booster.num_trees()
    )


def test_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no model directory.*placement train"):
        DensityModel.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="model.json is missing"):
        DensityModel.load(tmp_path / "empty")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: (d / "model.txt").write_text("tree\nnot a model\n"), "corrupt or not the one"),
        # a sidecar from before the hash: LightGBM itself refuses the file
        (
            lambda d: _edit_meta(d, model_sha256=None) or (d / "model.txt").write_text("x"),
            "corrupt",
        ),
        (lambda d: (d / "model.json").write_text("{not json"), "not JSON"),
        (lambda d: _edit_meta(d, model_version=99), "model version 99"),
        (lambda d: _edit_meta(d, schema_version=99), "schema version 99"),
        (lambda d: _edit_meta(d, feature_columns=["a", "b"]), "other features"),
        (lambda d: _edit_meta(d, format="something-else"), "not a placement density model"),
        (lambda d: _edit_meta(d, prior_fallback=None), "history prior"),
        # trained against a prior with other size slopes (or from before they were recorded)
        (lambda d: _edit_meta(d, prior_size_slopes={"ps": 0.5, "k": 0.5}), "size slopes.*retrain"),
        (lambda d: _edit_meta(d, prior_size_slopes=None), "size slopes.*retrain"),
    ],
)
def test_bad_model_files_are_refused(
    tmp_path: Path, model: DensityModel, edit, message: str
) -> None:
    d = model.save(tmp_path / "m")
    model.path = None
    edit(d)
    with pytest.raises(ModelError, match=message):
        DensityModel.load(d)


def _edit_meta(directory: Path, **changes: object) -> None:
    meta = json.loads((directory / "model.json").read_text())
    meta.update(changes)
    (directory / "model.json").write_text(json.dumps(meta))


def test_untrained_and_misshapen_inputs() -> None:
    with pytest.raises(ModelError, match="not trained"):
        DensityModel().predict(np.zeros(len(FEATURE_COLUMNS)))
    with pytest.raises(ValueError, match="learning_rate"):
        ModelParams(learning_rate=2.0)
    with pytest.raises(ValueError, match=r"num_leaves=1 must be an int >= 2"):
        ModelParams(num_leaves=1)  # LightGBM's least; "positive" would call 1 valid


def test_wrong_feature_shape(model: DensityModel) -> None:
    with pytest.raises(ModelError, match="expected"):
        model.predict(np.zeros((2, 3)))
    with pytest.raises(ModelError, match="build_features"):
        model.predict(pd.DataFrame({"x": [1.0]}))


def test_model_set_routes_per_pipeline_with_global_fallback(
    tmp_path: Path, log: pd.DataFrame
) -> None:
    models = ModelSet.fit(log, per_workload=True, min_rows=50, params=FAST)
    assert set(models.per_pipeline) == set(log["pipeline"].unique())
    # bring your own model: one trained on shifted targets, for pipe1 only
    feats = build_features(log)
    own = DensityModel(FAST).fit_features(feats, log_density(log) + 3.0)
    own.save(tmp_path / "own")
    models.add("pipe1", tmp_path / "own")
    names = log["pipeline"].to_numpy()
    pipe1 = names == "pipe1"
    base = models.global_model.predict(feats)
    # by default a pipeline's own model is averaged with the global one
    assert models.combine is Combine.MEAN
    pred = models.predict(feats, names)
    np.testing.assert_allclose(pred[pipe1], (own.predict(feats[pipe1]) + base[pipe1]) / 2)
    assert 1.0 < np.mean(pred[pipe1] - base[pipe1]) < 2.0
    # ... or used alone
    alone = ModelSet(models.global_model, models.per_pipeline, combine="own")
    np.testing.assert_allclose(alone.predict(feats, names)[pipe1], own.predict(feats[pipe1]))
    assert np.mean(alone.predict(feats, names)[pipe1] - base[pipe1]) > 2.0
    # the single-row path agrees with the batch path in both modes
    row = feats.to_numpy(np.float64)[np.flatnonzero(pipe1)[0]]
    for m in (models, alone):
        batch = m.predict(row.reshape(1, -1), "pipe1")[0]
        assert m.predict_one(row, "pipe1") == pytest.approx(batch, abs=1e-9)
        assert m.predict_one(row, "unknown") == pytest.approx(base[pipe1][0], abs=1e-9)
    np.testing.assert_array_equal(models.predict(feats, ["unknown"] * len(feats)), base)
    models.save(tmp_path / "set")
    again = ModelSet.load(tmp_path / "set")
    assert again.combine is Combine.MEAN
    np.testing.assert_allclose(again.predict(feats, names), pred)
    alone.save(tmp_path / "alone")
    assert ModelSet.load(tmp_path / "alone").combine is Combine.OWN
    # a single model directory loads as a set with only the global model
    assert ModelSet.load(tmp_path / "own").per_pipeline == {}
    with pytest.raises(ValueError, match="combine='best'"):
        ModelSet(models.global_model, combine="best")


def test_add_takes_the_global_model_of_a_trained_set_or_a_single_model(
    tmp_path: Path, log: pd.DataFrame, model: DensityModel
) -> None:
    """README's bring-your-own-model: ``add`` takes what ``dataplane placement train --out``
    writes (a set: its global model), a single model directory, and says which it takes."""
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from placement.cli import placement_group

    logs = tmp_path / "logs"
    logs.mkdir()
    pq.write_table(make_log(seed=5, pipelines=2, runs=2, files_per_stage=10), logs / "a.parquet")
    res = CliRunner().invoke(
        placement_group, ["train", str(logs), "--out", str(tmp_path / "my_model"), "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "my_model" / "models.json").is_file()
    trained = ModelSet.load(tmp_path / "my_model").global_model
    feats = build_features(log)
    models = ModelSet(model)
    models.add("etl", tmp_path / "my_model")
    np.testing.assert_allclose(models.per_pipeline["etl"].predict(feats), trained.predict(feats))
    models.save(tmp_path / "set")
    again = ModelSet.load(tmp_path / "set")
    np.testing.assert_allclose(again.per_pipeline["etl"].predict(feats), trained.predict(feats))
    # a single model directory (or its model.json) still works
    model.save(tmp_path / "single")
    models.add("other", str(tmp_path / "single" / "model.json"))
    np.testing.assert_allclose(models.per_pipeline["other"].predict(feats), model.predict(feats))
    # anything else: the error names both layouts
    (tmp_path / "empty").mkdir()
    for bad, what in [("empty", "holds no model"), ("nowhere", "does not exist")]:
        with pytest.raises(ModelError, match=what) as info:
            models.add("etl", tmp_path / bad)
        assert "models.json" in str(info.value) and "placement train" in str(info.value)
        assert "model.json and model.txt" in str(info.value)
    assert set(models.per_pipeline) == {"etl", "other"}


def test_model_sets_saved_before_combine_keep_using_own_models(
    tmp_path: Path, log: pd.DataFrame
) -> None:
    models = ModelSet.fit(log, per_workload=True, min_rows=50, params=FAST, combine="own")
    models.save(tmp_path / "set")
    index = tmp_path / "set" / "models.json"
    meta = json.loads(index.read_text())
    del meta["combine"]
    index.write_text(json.dumps(meta))
    assert ModelSet.load(tmp_path / "set").combine is Combine.OWN
    meta["combine"] = "median"
    index.write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="combine='median'.*upgrade"):
        ModelSet.load(tmp_path / "set")
    # an index that is damaged or of another kind: the error says how to get a good one
    for text in ("{not json", json.dumps({"format": "something-else"})):
        index.write_text(text)
        with pytest.raises(ModelError, match=r"models\.json.*dataplane placement train"):
            ModelSet.load(tmp_path / "set")


def test_min_rows_decides_which_pipelines_get_their_own_model(log: pd.DataFrame) -> None:
    # pipe0 keeps 100 rows, the others all 240
    df = log.drop(log.index[log["pipeline"] == "pipe0"][100:]).reset_index(drop=True)
    feats, target = build_features(df), log_density(df)
    names = df["pipeline"].to_numpy()
    glob = DensityModel(FAST).fit_features(feats, target)
    for min_rows, want in (
        (100, {"pipe0", "pipe1", "pipe2", "pipe3"}),
        (101, {"pipe1", "pipe2", "pipe3"}),
        (241, set()),
    ):
        models = ModelSet.from_global(glob, feats, target, names, min_rows=min_rows, params=FAST)
        assert set(models.per_pipeline) == want and models.global_model is glob
    # only the named pipelines; none at all without min_rows
    only = ModelSet.from_global(glob, feats, target, names, only=["pipe2", "nope"], params=FAST)
    assert set(only.per_pipeline) == {"pipe2"}
    assert ModelSet.from_global(glob, feats, target, names, min_rows=None).per_pipeline == {}
    # fit builds the same per-pipeline models from the same rows
    fitted = ModelSet.fit(df, min_rows=101, params=FAST)
    np.testing.assert_allclose(
        fitted.per_pipeline["pipe1"].predict(feats),
        ModelSet.from_global(glob, feats, target, names, min_rows=101, params=FAST)
        .per_pipeline["pipe1"]
        .predict(feats),
    )
    assert ModelSet.fit(df, per_workload=False, params=FAST).per_pipeline == {}
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match=r"min_rows=.* must be an int >= 1"):
            ModelSet.from_global(glob, feats, target, names, min_rows=bad)


def test_a_save_cut_short_never_pairs_a_model_with_another_sidecar(
    tmp_path: Path, log: pd.DataFrame, model: DensityModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = model.save(tmp_path / "m")
    other = DensityModel(ModelParams(n_estimators=5, num_threads=1)).fit(log)
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst).name == "model.json":  # model.txt is already in place
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(ModelError, match="cannot write the model"):
        other.save(d)
    monkeypatch.undo()
    with pytest.raises(ModelError, match="not the one its sidecar .* was written with"):
        DensityModel.load(d)


def test_model_set_saves_are_all_or_nothing(
    tmp_path: Path, log: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "set"
    first = ModelSet.fit(log, min_rows=50, params=FAST)
    first.save(d)
    feats, names = build_features(log), log["pipeline"].to_numpy()
    want = first.predict(feats, names)
    # a retrain without pipe0: every other pipeline's model moves to another pipelines/<i>
    second = ModelSet.fit(log[log["pipeline"] != "pipe0"], min_rows=50, params=FAST)
    assert set(second.per_pipeline) == {"pipe1", "pipe2", "pipe3"}
    real_save, calls = DensityModel.save, []

    def save(self: DensityModel, path: str | os.PathLike[str]) -> Path:
        calls.append(path)
        if len(calls) == 3:
            raise ModelError("cannot write the model: No space left on device")
        return real_save(self, path)

    monkeypatch.setattr(DensityModel, "save", save)
    with pytest.raises(ModelError, match="No space left"):
        second.save(d)
    monkeypatch.undo()
    # the set on disk is still the first one, whole, and the partial save is gone
    np.testing.assert_array_equal(ModelSet.load(d).predict(feats, names), want)
    assert len(list((d / "sets").iterdir())) == 1
    # saves that finish: the newest set is loaded, the one before it kept, older ones removed
    second.save(d)
    np.testing.assert_array_equal(
        ModelSet.load(d).predict(feats, names), second.predict(feats, names)
    )
    assert len(list((d / "sets").iterdir())) == 2
    first.save(d)
    index = json.loads((d / "models.json").read_text())
    kept = {p.name for p in (d / "sets").iterdir()}
    assert len(kept) == 2 and index["global"].split("/")[1] in kept
    # readable by a service running as another user, as a plain directory would be
    (tmp_path / "plain").mkdir()
    mode = (tmp_path / "plain").stat().st_mode
    assert all((d / "sets" / name).stat().st_mode == mode for name in kept)
    np.testing.assert_array_equal(ModelSet.load(d).predict(feats, names), want)


def test_overlapping_saves_into_one_directory_take_turns(
    tmp_path: Path, log: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "set"
    first = ModelSet.fit(log, min_rows=50, params=FAST)
    second = ModelSet.fit(log[log["pipeline"] != "pipe0"], min_rows=50, params=FAST)
    real_save = DensityModel.save
    other: list[threading.Thread] = []

    def save(self: DensityModel, path: str | os.PathLike[str]) -> Path:
        out = real_save(self, path)
        if not other:  # a second training saves while the first is half way
            other.append(threading.Thread(target=second.save, args=(d,)))
            other[0].start()
            other[0].join(timeout=0.5)  # it waits for the first to finish (else: a mix)
        return out

    monkeypatch.setattr(DensityModel, "save", save)
    first.save(d)
    other[0].join()
    monkeypatch.undo()
    # the second save ran after the first: its set is whole and loaded, the first's kept
    feats, names = build_features(log), log["pipeline"].to_numpy()
    np.testing.assert_array_equal(
        ModelSet.load(d).predict(feats, names), second.predict(feats, names)
    )
    assert len(list((d / "sets").iterdir())) == 2


def test_bad_model_options_raise_placement_errors() -> None:
    from placement.errors import PlacementConfigError, PlacementError, PlacementTypeError

    with pytest.raises(PlacementError, match=r"num_leaves=1 must be an int >= 2") as info:
        ModelParams(num_leaves=1)
    assert isinstance(info.value, PlacementConfigError) and isinstance(info.value, ValueError)
    with pytest.raises(PlacementError, match="kind='cover' must be 'gain' or 'split'"):
        DensityModel().feature_importances("cover")
    with pytest.raises(PlacementTypeError, match="global_model must be a DensityModel"):
        ModelSet("not a model")  # type: ignore[arg-type]


def test_predictions_on_the_training_rows_are_unbiased(
    log: pd.DataFrame, split: tuple[np.ndarray, np.ndarray], model: DensityModel
) -> None:
    """Prior plus trees lands on the target, not on the target plus the prior."""
    train, _ = split
    rows = log.loc[train]
    bias = float(np.mean(model.predict_table(rows) - log_density(rows)))
    assert abs(bias) < 0.05


def test_shares_of_one_are_valid_params() -> None:
    params = ModelParams(learning_rate=1.0, feature_fraction=1.0, bagging_fraction=1.0)
    assert params.lightgbm()["bagging_fraction"] == 1.0


def test_a_bagging_fraction_below_one_samples_rows(log: pd.DataFrame) -> None:
    feats = build_features(log)
    preds = [
        DensityModel(ModelParams(n_estimators=20, num_threads=1, bagging_fraction=share))
        .fit(log)
        .predict(feats)
        for share in (0.5, 1.0)
    ]
    assert not np.allclose(preds[0], preds[1])


@pytest.mark.parametrize(
    ("key", "newer"), [("model_version", MODEL_VERSION + 1), ("schema_version", SCHEMA_VERSION + 1)]
)
def test_a_model_one_version_newer_is_refused(
    tmp_path: Path, model: DensityModel, key: str, newer: int
) -> None:
    d = model.save(tmp_path / "m")
    model.path = None
    _edit_meta(d, **{key: newer})
    with pytest.raises(ModelError, match=f"version {newer}.*upgrade dataplane"):
        DensityModel.load(d)


def test_file_bytes_counts_the_model_and_its_sidecar(tmp_path: Path, model: DensityModel) -> None:
    assert DensityModel().file_bytes == 0
    d = model.save(tmp_path / "m")
    model.path = None
    loaded = DensityModel.load(d)
    sizes = [(d / name).stat().st_size for name in ("model.txt", "model.json")]
    assert loaded.file_bytes == sum(sizes) and min(sizes) > 0


def test_one_pipeline_name_per_row_or_a_clear_error(log: pd.DataFrame) -> None:
    models = ModelSet.fit(log, per_workload=False, params=FAST)
    feats = build_features(log).iloc[:3]
    with pytest.raises(ValueError, match="2 pipeline names for 3 feature rows"):
        models.predict(feats, ["pipe0", "pipe1"])


def test_loading_a_set_from_one_of_its_files_names_the_directory(
    tmp_path: Path, model: DensityModel
) -> None:
    ModelSet(model).save(tmp_path / "set")
    model.path = None
    with pytest.raises(ModelError, match="is a file; give the model directory that holds it"):
        ModelSet.load(tmp_path / "set" / "models.json")


def test_a_sidecar_from_before_the_hash_still_loads(tmp_path: Path, model: DensityModel) -> None:
    d = model.save(tmp_path / "m")
    model.path = None
    meta = json.loads((d / "model.json").read_text())
    del meta["model_sha256"]
    (d / "model.json").write_text(json.dumps(meta))
    feats = build_features(make_log(seed=3, runs=2, files_per_stage=3).to_pandas())
    np.testing.assert_array_equal(DensityModel.load(d).predict(feats), model.predict(feats))


def test_a_save_keeps_the_set_before_it_even_with_a_global_model_only(
    tmp_path: Path, model: DensityModel
) -> None:
    d = tmp_path / "set"
    ModelSet(model).save(d)
    first = json.loads((d / "models.json").read_text())["global"]
    ModelSet(model).save(d)
    model.path = None
    # a reader that had just read the first index still finds its model
    assert DensityModel.load(d / first).booster.num_trees() == model.booster.num_trees()
    assert len(list((d / "sets").iterdir())) == 2


def test_a_model_set_that_does_not_exist_says_how_to_train_one(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no model directory.*placement train"):
        ModelSet.load(tmp_path / "nowhere")


def test_rows_without_a_finite_target_are_left_out_of_training(log: pd.DataFrame) -> None:
    feats, target = build_features(log), log_density(log)
    gaps = target.copy()
    gaps[::7] = np.nan
    with_gaps = DensityModel(FAST).fit_features(feats, gaps)
    finite = np.isfinite(gaps)
    without = DensityModel(FAST).fit_features(feats.loc[finite], target[finite])
    assert with_gaps.metadata["trained_rows"] == int(finite.sum())
    np.testing.assert_array_equal(with_gaps.predict(feats), without.predict(feats))
