"""ModelSet: what its training records, how it routes rows to models, and bad set indexes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from placement.errors import ModelError
from placement.features import build_features, log_density
from placement.model import Combine, ModelParams, ModelSet
from tests.placement.conftest import unwritable_dir
from tests.placement.logtables import make_log

SMALL = ModelParams(n_estimators=8, min_data_in_leaf=5, num_threads=1, seed=5)


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    return make_log(seed=7, pipelines=2, runs=2, files_per_stage=10).to_pandas()


@pytest.fixture(scope="module")
def feats(log: pd.DataFrame) -> pd.DataFrame:
    return build_features(log)


@pytest.fixture(scope="module")
def models(log: pd.DataFrame) -> ModelSet:
    return ModelSet.fit(log, min_rows=50, params=SMALL)


def test_a_fitted_set_records_what_each_model_learned_from(
    log: pd.DataFrame, models: ModelSet
) -> None:
    assert models.global_model.metadata["pipelines"] == ["pipe0", "pipe1"]
    assert models.global_model.metadata["run_ids"] == sorted(log["run_id"].unique())
    assert set(models.per_pipeline) == {"pipe0", "pipe1"}
    for name, m in models.per_pipeline.items():
        assert m.metadata["pipelines"] == [name]
        assert m.params == SMALL and m.metadata["trained_rows"] == 60
    assert models.global_model.params == SMALL


def test_combine_reaches_the_set_from_fit_and_from_global(
    log: pd.DataFrame, feats: pd.DataFrame, models: ModelSet
) -> None:
    assert ModelSet.fit(log, min_rows=50, params=SMALL, combine="own").combine is Combine.OWN
    names = log["pipeline"].to_numpy()
    alone = ModelSet.from_global(
        models.global_model,
        feats,
        log_density(log),
        names,
        params=SMALL,
        min_rows=50,
        combine=Combine.OWN,
    )
    assert alone.combine is Combine.OWN


def test_rows_go_to_their_pipelines_models(
    log: pd.DataFrame, feats: pd.DataFrame, models: ModelSet
) -> None:
    glob, own = models.global_model, models.per_pipeline["pipe0"]
    mean = (own.predict(feats) + glob.predict(feats)) / 2
    # one name for every row
    np.testing.assert_allclose(models.predict(feats, "pipe0"), mean)
    np.testing.assert_array_equal(models.predict(feats), glob.predict(feats))
    # a missing name gets the global model, whatever stands for it
    names = np.array(["pipe0", None, np.nan, "pipe0", "unknown"], dtype=object)
    rows = feats.iloc[: len(names)]
    want = np.where(pd.isna(names) | (names == "unknown"), glob.predict(rows), mean[: len(names)])
    np.testing.assert_allclose(models.predict(rows, names), want)
    np.testing.assert_allclose(models.predict(rows, pd.Series(names)), want)
    row = feats.to_numpy(np.float64)[0]
    assert models.predict_one(row, None) == pytest.approx(glob.predict_one(row))
    assert models.predict_one(row, "pipe0") == pytest.approx(mean[0])
    assert models.model_for(None) is glob and models.model_for("pipe0") is own


def test_pipeline_names_are_matched_as_text(feats: pd.DataFrame, models: ModelSet) -> None:
    own = models.per_pipeline["pipe1"]
    numbered = ModelSet(models.global_model, combine="own")
    numbered.add(7, own)  # type: ignore[arg-type]
    assert set(numbered.per_pipeline) == {"7"}
    rows = feats.iloc[:4]
    np.testing.assert_array_equal(numbered.predict(rows, [7, 7, "7", 7]), own.predict(rows))
    assert numbered.model_for(7) is own  # type: ignore[arg-type]


def test_a_set_round_trips_its_routing(
    tmp_path: Path, log: pd.DataFrame, feats: pd.DataFrame, models: ModelSet
) -> None:
    names = log["pipeline"].to_numpy()
    for combine in Combine:
        path = tmp_path / combine.value
        ModelSet(models.global_model, models.per_pipeline, combine=combine).save(path)
        again = ModelSet.load(path)
        assert again.combine is combine and set(again.per_pipeline) == {"pipe0", "pipe1"}
        want = ModelSet(models.global_model, models.per_pipeline, combine=combine)
        np.testing.assert_array_equal(again.predict(feats, names), want.predict(feats, names))
        # each pipeline got its own model back, not another pipeline's
        for name, m in models.per_pipeline.items():
            np.testing.assert_array_equal(again.per_pipeline[name].predict(feats), m.predict(feats))


@pytest.fixture
def index(tmp_path: Path, models: ModelSet) -> Iterator[Path]:
    models.save(tmp_path / "set")
    yield tmp_path / "set" / "models.json"


@pytest.mark.parametrize(
    "changes",
    [
        {"pipelines": None},
        {"pipelines": ["pipe0"]},
        {"pipelines": 5},
        {"pipelines": {"pipe0": None}},
        {"global": None},
        {"global": 3},
    ],
)
def test_an_index_that_does_not_name_its_models_is_refused(
    index: Path, changes: dict[str, object]
) -> None:
    meta = json.loads(index.read_text())
    index.write_text(json.dumps({**meta, **changes}))
    with pytest.raises(ModelError, match=r"models\.json does not name its models.*placement train"):
        ModelSet.load(index.parent)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"combine": ["mean"]}, r"combine=\['mean'\]; expected one of"),
        ({"model_version": "2"}, "model version '2'; upgrade"),
        ({"model_version": 99}, "model version 99; upgrade"),
    ],
)
def test_an_index_of_another_version_is_refused(
    index: Path, changes: dict[str, object], message: str
) -> None:
    meta = json.loads(index.read_text())
    index.write_text(json.dumps({**meta, **changes}))
    with pytest.raises(ModelError, match=message):
        ModelSet.load(index.parent)


def test_an_index_that_is_not_a_mapping_or_text_is_refused(index: Path) -> None:
    for content in (b"[1, 2]", b"\xff\xfe{}"):
        index.write_bytes(content)
        with pytest.raises(ModelError, match=r"models\.json .*dataplane placement train"):
            ModelSet.load(index.parent)


def test_a_directory_with_a_model_file_but_no_index_or_sidecar_is_refused(
    tmp_path: Path, models: ModelSet
) -> None:
    d = models.global_model.save(tmp_path / "m")
    (d / "model.json").unlink()
    with pytest.raises(ModelError, match="holds neither models.json nor model.json"):
        ModelSet.load(d)


def test_a_set_is_saved_into_a_new_nested_directory(
    tmp_path: Path, feats: pd.DataFrame, models: ModelSet
) -> None:
    models.save(tmp_path / "a" / "b" / "set")
    again = ModelSet.load(tmp_path / "a" / "b" / "set")
    np.testing.assert_array_equal(again.predict(feats), models.predict(feats))


def test_a_set_save_into_a_directory_it_cannot_write_is_a_model_error(
    tmp_path: Path, models: ModelSet
) -> None:
    with unwritable_dir(tmp_path / "ro") as ro:
        for target in (ro, ro / "set"):
            with pytest.raises(ModelError, match=f"cannot write a model set into {target}"):
                models.save(target)


def test_a_set_save_leaves_only_its_index_lock_and_sets(tmp_path: Path, models: ModelSet) -> None:
    models.save(tmp_path / "set")
    assert sorted(os.listdir(tmp_path / "set")) == [".models.lock", "models.json", "sets"]


def test_a_set_save_that_cannot_make_its_directories_is_a_model_error(
    tmp_path: Path, models: ModelSet
) -> None:
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "sets").write_text("")  # in the way of the sets directory
    with pytest.raises(ModelError, match="cannot write a model set into"):
        models.save(tmp_path / "set")


def test_a_set_save_whose_index_cannot_be_replaced_removes_its_models(
    tmp_path: Path, models: ModelSet
) -> None:
    (tmp_path / "set" / "models.json").mkdir(parents=True)  # in the way of the index
    with pytest.raises(ModelError, match=r"cannot write \S*models\.json"):
        models.save(tmp_path / "set")
    assert list((tmp_path / "set" / "sets").iterdir()) == []
