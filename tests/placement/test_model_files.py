"""Model files: what a save writes, and every way a model directory or set index can be bad."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest

from placement.errors import ModelError
from placement.features import FEATURE_COLUMNS, build_features
from placement.model import DensityModel, ModelParams, ModelSet
from tests.placement.conftest import unwritable_dir
from tests.placement.logtables import make_log

SMALL = ModelParams(n_estimators=8, min_data_in_leaf=5, num_threads=1, seed=3)


@pytest.fixture(scope="module")
def log() -> pd.DataFrame:
    return make_log(seed=6, pipelines=2, runs=2, files_per_stage=10).to_pandas()


@pytest.fixture(scope="module")
def feats(log: pd.DataFrame) -> pd.DataFrame:
    return build_features(log)


@pytest.fixture(scope="module")
def model(log: pd.DataFrame) -> DensityModel:
    return DensityModel(SMALL).fit(log)


@pytest.fixture
def saved(tmp_path: Path, model: DensityModel) -> Path:
    """A fresh copy of ``model`` on disk (``model.path`` left as it was)."""
    path = model.path
    directory = model.save(tmp_path / "m")
    model.path = path
    return directory


def _meta(directory: Path) -> dict[str, object]:
    meta: dict[str, object] = json.loads((directory / "model.json").read_text())
    return meta


def _write_meta(directory: Path, meta: object) -> None:
    (directory / "model.json").write_text(json.dumps(meta))


def _edit_meta(directory: Path, **changes: object) -> None:
    _write_meta(directory, {**_meta(directory), **changes})


def _drop_hash(directory: Path) -> None:
    """The sidecar as written before it held the model file's hash."""
    _write_meta(directory, {k: v for k, v in _meta(directory).items() if k != "model_sha256"})


def _rehash(directory: Path) -> None:
    digest = hashlib.sha256((directory / "model.txt").read_bytes()).hexdigest()
    _edit_meta(directory, model_sha256=digest)


# ---------------------------------------------------------------- DensityModel.save
def test_a_save_writes_the_two_files_and_remembers_where(tmp_path: Path, log: pd.DataFrame) -> None:
    m = DensityModel(SMALL).fit(log)
    d = m.save(tmp_path / "deep" / "m")
    assert d == tmp_path / "deep" / "m" and m.path == d
    assert sorted(os.listdir(d)) == ["model.json", "model.txt"]  # no temporary file left
    assert m.file_bytes == sum((d / f).stat().st_size for f in ("model.json", "model.txt"))
    assert _meta(d)["model_sha256"] == hashlib.sha256((d / "model.txt").read_bytes()).hexdigest()


def test_an_untrained_model_is_not_saved(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not trained"):
        DensityModel().save(tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_save_into_a_directory_it_cannot_write_is_a_model_error(
    tmp_path: Path, model: DensityModel
) -> None:
    with (
        unwritable_dir(tmp_path / "ro") as ro,
        pytest.raises(ModelError, match=f"cannot write the model to {ro}"),
    ):
        model.save(ro)


# ---------------------------------------------------------------- DensityModel.load
def test_a_loaded_model_keeps_its_settings_prior_and_place(
    saved: Path, model: DensityModel, feats: pd.DataFrame
) -> None:
    for given in (saved, saved / "model.txt", saved / "model.json"):
        loaded = DensityModel.load(given)
        assert loaded.path == saved and loaded.params == SMALL
        assert loaded.prior_fallback == model.prior_fallback
        assert loaded.metadata["run_ids"] == model.metadata["run_ids"]
        np.testing.assert_array_equal(loaded.predict(feats), model.predict(feats))


def _no_model_txt(d: Path) -> None:
    (d / "model.txt").unlink()


def _sidecar_is_a_directory(d: Path) -> None:
    (d / "model.json").unlink()
    (d / "model.json").mkdir()


def _other_prior_feature(d: Path) -> None:
    _edit_meta(d, prior_feature="h_ps_ld_mean")


def _newer_params(d: Path) -> None:
    _edit_meta(d, params={**_meta(d)["params"], "a_newer_setting": 1})  # type: ignore[dict-item]


def _bad_params(d: Path) -> None:
    _edit_meta(d, params={**_meta(d)["params"], "num_leaves": 1})  # type: ignore[dict-item]


def _truncated_without_hash(d: Path) -> None:
    """A model file cut inside its trees, beside a sidecar too old to hold its hash
    (LightGBM itself would abort the process on it)."""
    text = (d / "model.txt").read_bytes()
    (d / "model.txt").write_bytes(text[: len(text) // 2])
    _drop_hash(d)


def _truncated_with_hash(d: Path) -> None:
    text = (d / "model.txt").read_bytes()
    (d / "model.txt").write_bytes(text[: len(text) // 2])


def _bad_last_line(d: Path) -> None:
    """Trees LightGBM parses, then a last line its Python side cannot read."""
    with (d / "model.txt").open("a") as f:
        f.write("pandas_categorical:{not json\n")
    _rehash(d)


def _other_feature_names(d: Path) -> None:
    """A real LightGBM model with as many features as ours, under other names."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, len(FEATURE_COLUMNS)))
    names = [f"f{i}" for i in range(len(FEATURE_COLUMNS))]
    data = lgb.Dataset(x, x[:, 0], feature_name=names, params={"verbosity": -1})
    lgb.train({"verbosity": -1, "num_threads": 1}, data, num_boost_round=2).save_model(
        str(d / "model.txt")
    )
    _rehash(d)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_no_model_txt, r"model file \S*model\.txt is missing"),
        (_sidecar_is_a_directory, r"model file \S*model\.json is missing"),
        (lambda d: (d / "model.json").write_bytes(b"\xff\xfe{}"), "unreadable or not JSON"),
        (lambda d: _write_meta(d, [1, 2]), "not a placement density model .format None"),
        (lambda d: _edit_meta(d, model_version="2"), "model version '2'"),
        (lambda d: _edit_meta(d, schema_version="2"), "schema version '2'"),
        (
            lambda d: _edit_meta(d, feature_columns=list(reversed(FEATURE_COLUMNS))),
            "other features",
        ),
        (_other_prior_feature, "does not name its history prior"),
        (lambda d: _edit_meta(d, prior_fallback=True), "prior_fallback, got True"),
        (lambda d: _edit_meta(d, prior_fallback=float("nan")), "prior_fallback, got nan"),
        (_newer_params, "training params .*a_newer_setting.*retrain"),
        (_bad_params, "training params .*num_leaves=1.*retrain"),
        (_truncated_without_hash, "model.txt is truncated or corrupt .*end of trees"),
        (_truncated_with_hash, "not the one its sidecar"),
        (lambda d: (d / "model.txt").write_text("x"), "not the one its sidecar"),
        (_bad_last_line, "model.txt is corrupt or unreadable"),
        (_other_feature_names, r"has features \['f0'.*do not match"),
    ],
)
def test_bad_model_files_are_refused_by_name(
    saved: Path, edit: Callable[[Path], None], message: str
) -> None:
    edit(saved)
    with pytest.raises(ModelError, match=message) as info:
        DensityModel.load(saved)
    assert str(saved) in str(info.value)


def test_a_path_that_is_a_plain_file_is_no_model_directory(tmp_path: Path) -> None:
    (tmp_path / "m.bin").write_text("")
    with pytest.raises(ModelError, match=r"no model directory at \S*m\.bin; train one"):
        DensityModel.load(tmp_path / "m.bin")


@pytest.mark.parametrize("name", ["model.json", "model.txt"])
def test_a_file_that_cannot_be_read_is_a_model_error(
    saved: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_read_bytes, real_read_text = Path.read_bytes, Path.read_text

    def fail_on(path: Path) -> None:
        if path.name == name:
            raise OSError(errno.EIO, "Input/output error", str(path))

    def read_bytes(self: Path) -> bytes:
        fail_on(self)
        return real_read_bytes(self)

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        fail_on(self)
        return real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(ModelError, match=f"{name} is unreadable.*Input/output error"):
        DensityModel.load(saved)


# ---------------------------------------------------------------- ModelSet.add
def test_add_takes_a_sets_index_file_or_names_what_it_found(
    tmp_path: Path, saved: Path, model: DensityModel, feats: pd.DataFrame
) -> None:
    ModelSet(DensityModel.load(saved)).save(tmp_path / "set")
    models = ModelSet(model)
    models.add("a", tmp_path / "set" / "models.json")
    np.testing.assert_array_equal(models.per_pipeline["a"].predict(feats), model.predict(feats))
    # a model directory missing one of its two files is a model, and says which file
    only_txt, only_json = tmp_path / "only_txt", tmp_path / "only_json"
    only_txt.mkdir()
    only_json.mkdir()
    (only_txt / "model.txt").write_bytes((saved / "model.txt").read_bytes())
    (only_json / "model.json").write_bytes((saved / "model.json").read_bytes())
    with pytest.raises(ModelError, match=r"only_txt/model\.json is missing"):
        models.add("b", only_txt)
    with pytest.raises(ModelError, match=r"only_json/model\.txt is missing"):
        models.add("b", only_json)
    (tmp_path / "weights.bin").write_text("")
    with pytest.raises(ModelError, match=r"weights\.bin is not a directory; give a model set"):
        models.add("b", tmp_path / "weights.bin")
    assert set(models.per_pipeline) == {"a"}


def test_a_set_does_not_change_the_mapping_it_was_given(model: DensityModel) -> None:
    given = {"a": model}
    models = ModelSet(model, given)
    models.add("b", model)
    assert given == {"a": model} and set(models.per_pipeline) == {"a", "b"}


def test_a_set_fit_without_usable_rows_is_a_clear_error(log: pd.DataFrame) -> None:
    bad = log.copy()
    bad["deleted_at"] = bad["created_at"] - 1.0
    with pytest.raises(ModelError, match="no usable log rows"):
        ModelSet.fit(bad, params=SMALL)
