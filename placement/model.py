"""LightGBM model of a temporary file's I/O density, from creation-time features.

:class:`DensityModel` is a gradient-boosted **regressor on log10(io_density)**
(operations per byte per second, :mod:`placement.schema`). Why a regressor rather than
a classifier over density classes: the policy compares predictions against a threshold
that moves with SSD occupancy and recent traffic (:mod:`placement.policy`), so it needs
a total order of files at any cut, not a few fixed class boundaries; density spans
seven orders of magnitude, so the target is its logarithm, where squared error treats
a 10x miss the same at every scale.

The trees learn the **residual against the history prior** (``h_prior_ld``, see
:func:`placement.features.history_prior`): the prior is LightGBM's initial score in
training and is added back to the trees' output in prediction, so a prediction is
``prior + trees(features)``. A file without any history (no earlier run wrote a file
of its kind) gets the mean training target as its prior (``prior_fallback`` in the
sidecar). Why: on pipelines never seen in training, trees fitted to the density
itself fall back to the average of the training pipelines, while the residual keeps
what earlier files of the same stage or kind did; on the workload suite, chosen by
grouped k-fold over the *training* pipelines, it raised the LightGBM policy's share
of the oracle's savings at a 5% SSD budget from 0.79 to 0.83 there, and a size slope
of 1.0 at the file-kind levels of the prior
(:data:`~placement.features.PRIOR_KIND_SIZE_SLOPE`) to 0.84. (These scores, and those
below, were measured with an earlier simulator that told policies each file's final
size; ``benchmarks/placement.md`` records the re-check under the current one.)

:class:`ModelSet` holds per-workload (per-pipeline) models beside a global one. A file
of a pipeline with its own model gets, by default, the mean of that model's and the
global model's predictions (:attr:`Combine.MEAN`), else the global model's. Why the
mean: a per-pipeline model learns from fewer rows. In inner validation on the time
split (each pipeline's latest training runs held out, 3 seeds, 5% SSD budget), the
per-pipeline models alone captured 0.889, 0.865 and 0.691 of the oracle's savings with
runs as logged, 4 and 16 at a time, the global model 0.883, 0.864 and 0.754, and their
mean 0.887, 0.878 and 0.749: never far from the better of the two. Any saved
:class:`DensityModel` directory can be plugged in for a pipeline (bring your own
model); :attr:`Combine.OWN` uses such models alone.

Files
-----
A model is a directory holding ``model.txt`` (LightGBM's text model) and ``model.json``
(the sidecar: format name, model version, log schema version, feature list, training
summary). :meth:`DensityModel.load` refuses, with :class:`~placement.errors.ModelError`
naming the file and the fix, a missing or corrupt file, another format, a newer model
version or schema version, a feature list other than this code's
:data:`~placement.features.FEATURE_COLUMNS`, and a history prior built with other size
slopes than :data:`~placement.features.PRIOR_SIZE_SLOPES` (the trees fit the residual
against that prior, so they are only valid with it).

Decision latency: :meth:`DensityModel.predict_one` (the live path: one feature row from
:func:`~placement.features.features_from_request`) uses LightGBM's single-row fast C API
(``LGBM_BoosterPredictForMatSingleRowFast``, set up once per booster), a few
microseconds against ~50 us for ``Booster.predict`` on a 1 x F array, whose per-call
setup dominates; if the fast path cannot be set up it falls back to ``Booster.predict``.
Batches go through ``Booster.predict`` with every thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from placement.errors import ModelError, PlacementConfigError, PlacementTypeError
from placement.features import (
    CATEGORICAL_FEATURES,
    FEATURE_COLUMNS,
    PRIOR_SIZE_SLOPES,
    HistoryStore,
    build_features,
    clean_table,
    log_density,
)
from placement.schema import SCHEMA_VERSION

__all__ = [
    "MODEL_FORMAT",
    "MODEL_VERSION",
    "PRIOR_FEATURE",
    "Combine",
    "DensityModel",
    "ModelParams",
    "ModelSet",
]

logger = logging.getLogger(__name__)

MODEL_FORMAT = "dataplane.placement.density-model"
MODEL_SET_FORMAT = "dataplane.placement.model-set"
MODEL_VERSION = 2
#: The feature column whose value is the offset the trees are fitted against.
PRIOR_FEATURE = "h_prior_ld"
MODEL_FILE = "model.txt"
META_FILE = "model.json"
SET_FILE = "models.json"
#: The line LightGBM writes after the last tree of a text model.
_TREES_END = b"end of trees"
#: How to fix a model set that cannot be read.
_RETRAIN = (
    "write the directory again with `dataplane placement train LOGS --out DIR` "
    "(or give another model directory)"
)
#: Sidecar key of the SHA-256 (hex) of ``model.txt`` (sidecars written before it have none).
MODEL_HASH_KEY = "model_sha256"
#: Subdirectory of a model-set directory holding one directory per save (:meth:`ModelSet.save`).
SETS_DIR = "sets"
#: Lock file of a model-set directory, held while a save writes it.
SET_LOCK_FILE = ".models.lock"
#: Fewest training rows a pipeline needs for its own model, in :meth:`ModelSet.fit` and in
#: :func:`placement.evaluate.evaluate`'s per-workload policy alike, so that what evaluate
#: measures is what ``dataplane placement train --per-workload`` builds.
MIN_PIPELINE_ROWS = 100


def _file_sha256(path: Path) -> str:
    """SHA-256 (hex) of the file at ``path``."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _set_roots(index_file: Path) -> set[str]:
    """The ``sets/<stamp>`` directories the model-set index at ``index_file`` names."""
    try:
        meta = json.loads(index_file.read_text())
        paths = [meta["global"], *dict(meta.get("pipelines", {})).values()]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return set()
    parts = (Path(str(p)).parts for p in paths)
    return {f"{p[0]}/{p[1]}" for p in parts if len(p) > 2 and p[0] == SETS_DIR}


def _lgb() -> Any:
    try:
        import lightgbm
    except ImportError as exc:  # pragma: no cover - lightgbm is a core dependency
        raise ModelError("the placement model needs LightGBM: pip install 'lightgbm>=4'") from exc
    return lightgbm


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelParams:
    """LightGBM training settings (defaults suit thousands to millions of rows).

    Parameters
    ----------
    n_estimators : int
        Boosting rounds (trees).
    learning_rate : float
        Shrinkage per tree.
    num_leaves : int
        Leaves per tree.
    min_data_in_leaf : int
        Fewest rows in a leaf.
    feature_fraction, bagging_fraction : float
        Shares of features and rows sampled per tree, in (0, 1].
    seed : int
        Random seed (training is deterministic for a seed and thread count).
    num_threads : int
        Training threads; 0 lets LightGBM choose.

    Notes
    -----
    The defaults were checked by grouped validation inside the training folds of the
    pipeline split: the share of the oracle's savings at a 5% SSD budget on the inner
    held-out pipelines, averaged over 4 outer folds and 3 seeds. They scored highest of
    16 settings (7-63 leaves, 5-100 rows per leaf, L2 0 or 10, 300 or 600 trees): 0.840
    against 0.823-0.840. Sample weights did not help either (see ``benchmarks/placement.md``).
    """

    n_estimators: int = 300
    learning_rate: float = 0.05
    num_leaves: int = 31
    min_data_in_leaf: int = 20
    feature_fraction: float = 0.8
    bagging_fraction: float = 0.8
    seed: int = 0
    num_threads: int = 0

    def __post_init__(self) -> None:
        for name in ("n_estimators", "num_leaves", "min_data_in_leaf"):
            value = getattr(self, name)
            least = 2 if name == "num_leaves" else 1
            if not isinstance(value, int) or value < least:
                raise PlacementConfigError(
                    f"ModelParams {name}={value!r} must be an int >= {least}"
                )
        for name in ("learning_rate", "feature_fraction", "bagging_fraction"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise PlacementConfigError(f"ModelParams {name}={value!r} must be in (0, 1]")
        if (
            not isinstance(self.seed, int)
            or not isinstance(self.num_threads, int)
            or self.num_threads < 0
        ):
            raise PlacementConfigError(
                "ModelParams seed must be an int and num_threads an int >= 0"
            )

    def lightgbm(self) -> dict[str, Any]:
        """The LightGBM parameter dict."""
        return {
            "objective": "regression",
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_data_in_leaf,
            "feature_fraction": self.feature_fraction,
            "bagging_fraction": self.bagging_fraction,
            "bagging_freq": 1 if self.bagging_fraction < 1 else 0,
            "seed": self.seed,
            "deterministic": True,
            "num_threads": self.num_threads,
            "verbosity": -1,
        }


_PRIOR_INDEX = FEATURE_COLUMNS.index(PRIOR_FEATURE)


def _as_matrix(features: Any) -> np.ndarray:
    """Features as a 2-D float64 array in FEATURE_COLUMNS order."""
    if isinstance(features, pd.DataFrame):
        missing = [c for c in FEATURE_COLUMNS if c not in features.columns]
        if missing:
            raise ModelError(
                f"feature frame lacks {missing}; build it with placement.features.build_features"
            )
        return features.loc[:, list(FEATURE_COLUMNS)].to_numpy(np.float64)
    arr = np.asarray(features, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != len(FEATURE_COLUMNS):
        raise ModelError(
            f"features have shape {arr.shape}; expected (rows, {len(FEATURE_COLUMNS)}) in "
            "placement.features.FEATURE_COLUMNS order"
        )
    return arr


class _SingleRow:
    """LightGBM's single-row fast prediction for one booster (C API; thread-safe by a lock).

    ``LGBM_BoosterPredictForMatSingleRowFastInit`` parses the prediction settings once;
    each call then only walks the trees. The booster is kept referenced so its handle
    outlives this object.
    """

    def __init__(self, booster: Any, n_features: int) -> None:
        from lightgbm.basic import _LIB, _safe_call

        self._lib = _LIB
        self._safe_call = _safe_call
        self._booster = booster
        self._config = ctypes.c_void_p()
        _safe_call(
            _LIB.LGBM_BoosterPredictForMatSingleRowFastInit(
                booster._handle,
                ctypes.c_int(0),  # C_API_PREDICT_NORMAL
                ctypes.c_int(0),  # start_iteration
                ctypes.c_int(-1),  # num_iteration: all
                ctypes.c_int(1),  # C_API_DTYPE_FLOAT64
                ctypes.c_int32(n_features),
                ctypes.c_char_p(b""),
                ctypes.byref(self._config),
            )
        )
        self._out = np.zeros(1, dtype=np.float64)
        self._out_ptr = self._out.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        self._out_len = ctypes.c_int64(0)
        self._n = n_features
        self._lock = threading.Lock()

    def __call__(self, row: np.ndarray) -> float:
        x = np.ascontiguousarray(row, dtype=np.float64).reshape(-1)
        if x.shape[0] != self._n:
            raise ModelError(f"feature row has {x.shape[0]} values; expected {self._n}")
        with self._lock:
            self._safe_call(
                self._lib.LGBM_BoosterPredictForMatSingleRowFast(
                    self._config,
                    x.ctypes.data_as(ctypes.c_void_p),
                    ctypes.byref(self._out_len),
                    self._out_ptr,
                )
            )
            return float(self._out[0])

    def __del__(self) -> None:
        config = getattr(self, "_config", None)
        if config is not None and config.value:
            with contextlib.suppress(Exception):  # at interpreter shutdown the library may be gone
                self._lib.LGBM_FastConfigFree(config)


class DensityModel:
    """LightGBM regressor of log10 I/O density (see the module docstring).

    Parameters
    ----------
    params : ModelParams, optional
        Training settings.
    """

    def __init__(self, params: ModelParams | None = None) -> None:
        self.params = params or ModelParams()
        self.booster: Any = None
        self.metadata: dict[str, Any] = {}
        self.path: Path | None = None
        self._single: tuple[Any, _SingleRow | None] | None = None
        #: Prior (log10 density) of a file without history; set by training or loading.
        self.prior_fallback: float = 0.0

    def _prior(self, x: np.ndarray) -> np.ndarray:
        """The offset of each feature row: its history prior, else :attr:`prior_fallback`."""
        prior = x[:, _PRIOR_INDEX]
        return np.where(np.isnan(prior), self.prior_fallback, prior)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_single"] = None  # a C handle: rebuilt where the model is unpickled
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_single", None)

    # ------------------------------------------------------------------ training
    def fit(
        self, table: pa.Table | pd.DataFrame, history: HistoryStore | None = None
    ) -> DensityModel:
        """Train on log rows: features by :func:`~placement.features.build_features`,
        target their log10 density. Invalid rows are dropped (see ``metadata``)."""
        df, issues = clean_table(table)
        if len(df) == 0:
            raise ModelError("no usable log rows to train on")
        features = build_features(df, history)
        self.fit_features(features, log_density(df))
        self.metadata["dropped_rows"] = issues.n_dropped
        self.metadata["pipelines"] = sorted(map(str, df["pipeline"].unique()))
        self.metadata["runs"] = int(df["run_id"].nunique())
        self.metadata["run_ids"] = sorted(map(str, df["run_id"].unique()))
        return self

    def fit_features(
        self, features: Any, target: np.ndarray, weight: np.ndarray | None = None
    ) -> DensityModel:
        """Train on a feature matrix and log10-density targets."""
        lgb = _lgb()
        x = _as_matrix(features)
        y = np.asarray(target, np.float64)
        if len(y) != len(x):
            raise ModelError(f"{len(x)} feature rows but {len(y)} targets")
        ok = np.isfinite(y)
        if not ok.any():
            raise ModelError("no finite log-density targets to train on")
        start = time.perf_counter()
        self.prior_fallback = float(np.mean(y[ok]))
        data = lgb.Dataset(
            x[ok],
            y[ok],
            init_score=self._prior(x[ok]),
            weight=None if weight is None else np.asarray(weight, np.float64)[ok],
            feature_name=list(FEATURE_COLUMNS),
            categorical_feature=list(CATEGORICAL_FEATURES),
            params={"verbosity": -1, "min_data_in_bin": 1},
            free_raw_data=True,
        )
        try:
            self.booster = lgb.train(
                self.params.lightgbm(), data, num_boost_round=self.params.n_estimators
            )
        except lgb.basic.LightGBMError as exc:
            raise ModelError(f"LightGBM training failed: {exc}") from exc
        self.metadata = {
            "format": MODEL_FORMAT,
            "model_version": MODEL_VERSION,
            "schema_version": SCHEMA_VERSION,
            "feature_columns": list(FEATURE_COLUMNS),
            "categorical_features": list(CATEGORICAL_FEATURES),
            "target": "log10_io_density",
            "target_units": "log10(operations per byte per second)",
            "prior_feature": PRIOR_FEATURE,
            "prior_fallback": self.prior_fallback,
            "prior_size_slopes": dict(PRIOR_SIZE_SLOPES),
            "params": dataclasses.asdict(self.params),
            "trained_rows": int(ok.sum()),
            "train_seconds": time.perf_counter() - start,
            "lightgbm_version": lgb.__version__,
            "trained_at": time.time(),
        }
        return self

    # ------------------------------------------------------------------ prediction
    def _require(self) -> Any:
        if self.booster is None:
            raise ModelError(
                "the density model is not trained: call fit() or DensityModel.load(path)"
            )
        return self.booster

    def predict(self, features: Any, *, num_threads: int | None = None) -> np.ndarray:
        """Predicted log10 density of each feature row.

        Parameters
        ----------
        features : DataFrame, 2-D array or 1-D row
            Rows in :data:`~placement.features.FEATURE_COLUMNS` order (a DataFrame by name).
        num_threads : int, optional
            Threads; default 1 for a single row (lowest latency) and LightGBM's
            default for batches.
        """
        booster = self._require()
        x = _as_matrix(features)
        if num_threads is None:
            num_threads = 1 if len(x) == 1 else 0
        raw = np.asarray(booster.predict(x, num_threads=num_threads), dtype=np.float64)
        return raw + self._prior(x)

    def predict_one(self, row: np.ndarray) -> float:
        """Predicted log10 density of one feature row (the single-decision path, see the
        module docstring)."""
        booster = self._require()
        row = np.asarray(row, dtype=np.float64).reshape(-1)
        if row.shape[0] != len(FEATURE_COLUMNS):
            raise ModelError(
                f"feature row has {row.shape[0]} values; expected {len(FEATURE_COLUMNS)} in "
                "placement.features.FEATURE_COLUMNS order"
            )
        single = self._single
        if single is None or single[0] is not booster:
            try:
                fast: _SingleRow | None = _SingleRow(booster, len(FEATURE_COLUMNS))
            except Exception as exc:  # noqa: BLE001 - the slow path still works
                logger.info(
                    "LightGBM single-row fast path unavailable (%s); using Booster.predict", exc
                )
                fast = None
            single = self._single = (booster, fast)
        prior = float(row[_PRIOR_INDEX])
        if prior != prior:  # NaN: no history at any level
            prior = self.prior_fallback
        if single[1] is not None:
            return single[1](row) + prior
        raw = booster.predict(row.reshape(1, -1), num_threads=1)[0]
        return float(raw) + prior

    def predict_table(
        self, table: pa.Table | pd.DataFrame, history: HistoryStore | None = None
    ) -> np.ndarray:
        """Predicted log10 density of each log row (features built from ``table`` and
        ``history``)."""
        return self.predict(build_features(table, history))

    def feature_importances(self, kind: str = "gain") -> dict[str, float]:
        """Importance of each feature (``gain``: total loss reduction; ``split``: uses), sorted."""
        if kind not in ("gain", "split"):
            raise PlacementConfigError(f"kind={kind!r} must be 'gain' or 'split'")
        booster = self._require()
        values = booster.feature_importance(importance_type=kind)
        pairs = sorted(
            zip(booster.feature_name(), map(float, values), strict=True), key=lambda p: -p[1]
        )
        return dict(pairs)

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``model.txt`` and ``model.json`` into directory ``path`` (created).

        Files are written under temporary names and renamed. The sidecar holds the
        SHA-256 of ``model.txt``, so a crash between the two renames leaves a pair that
        :meth:`load` refuses by name, never a model that loads with another's sidecar.
        """
        lgb = _lgb()
        booster = self._require()
        directory = Path(path)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            tmp_model = directory / f".{MODEL_FILE}.tmp"
            tmp_meta = directory / f".{META_FILE}.tmp"
            booster.save_model(str(tmp_model))
            self.metadata[MODEL_HASH_KEY] = _file_sha256(tmp_model)
            tmp_meta.write_text(json.dumps(self.metadata, indent=2, default=str))
            os.replace(tmp_model, directory / MODEL_FILE)
            os.replace(tmp_meta, directory / META_FILE)
        except (OSError, lgb.basic.LightGBMError) as exc:
            raise ModelError(f"cannot write the model to {directory}: {exc}") from exc
        self.path = directory
        return directory

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DensityModel:
        """Load a model directory written by :meth:`save` (or its ``model.json``/``model.txt``).

        Raises
        ------
        ModelError
            If a file is missing, unreadable or corrupt, or the model is incompatible.
        """
        lgb = _lgb()
        p = Path(path)
        directory = p.parent if p.name in (MODEL_FILE, META_FILE) else p
        model_file, meta_file = directory / MODEL_FILE, directory / META_FILE
        hint = "train one with `dataplane placement train LOGS... --out DIR`"
        if not directory.is_dir():
            raise ModelError(f"no model directory at {directory}; {hint}")
        for f in (meta_file, model_file):
            if not f.is_file():
                raise ModelError(f"model file {f} is missing; {hint}")
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(
                f"model sidecar {meta_file} is unreadable or not JSON ({exc}); {hint}"
            ) from exc
        if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
            raise ModelError(
                f"{meta_file} is not a placement density model (format "
                f"{meta.get('format') if isinstance(meta, dict) else None!r}, "
                f"expected {MODEL_FORMAT!r}); {hint}"
            )
        version = meta.get("model_version")
        if not isinstance(version, int) or version > MODEL_VERSION:
            raise ModelError(
                f"{meta_file} has model version {version!r}; "
                f"this dataplane reads up to {MODEL_VERSION}: "
                "upgrade dataplane or retrain the model"
            )
        schema_version = meta.get("schema_version")
        if not isinstance(schema_version, int) or schema_version > SCHEMA_VERSION:
            raise ModelError(
                f"{meta_file} was trained on log schema version {schema_version!r}; "
                "this dataplane reads "
                f"up to {SCHEMA_VERSION}: upgrade dataplane or retrain the model"
            )
        if meta.get("feature_columns") != list(FEATURE_COLUMNS):
            raise ModelError(
                f"{meta_file} was trained on other features than this dataplane builds; "
                f"retrain it: {hint}"
            )
        digest = meta.get(MODEL_HASH_KEY)
        try:
            text = model_file.read_bytes()
        except OSError as exc:
            raise ModelError(f"model file {model_file} is unreadable ({exc}); {hint}") from exc
        torn = digest is not None and digest != hashlib.sha256(text).hexdigest()
        if torn:
            raise ModelError(
                f"model file {model_file} is corrupt or not the one its sidecar {meta_file} "
                "was written with (their SHA-256 differs: a save cut short, or one of the two "
                f"replaced); save the model again or {hint}"
            )
        # LightGBM aborts the process on a file cut short inside its trees (its parser fails
        # in a parallel region); a sidecar without the hash cannot tell, the end marker can
        if _TREES_END not in text:
            raise ModelError(
                f"model file {model_file} is truncated or corrupt (it lacks the "
                f"{_TREES_END.decode()!r} line LightGBM writes after the last tree); "
                f"save the model again or {hint}"
            )
        try:
            booster = lgb.Booster(model_file=str(model_file))
        except (lgb.basic.LightGBMError, OSError, ValueError) as exc:
            raise ModelError(
                f"model file {model_file} is corrupt or unreadable ({exc}); {hint}"
            ) from exc
        if booster.num_feature() != len(FEATURE_COLUMNS) or booster.feature_name() != list(
            FEATURE_COLUMNS
        ):
            raise ModelError(
                f"model file {model_file} has features {booster.feature_name()[:5]}... "
                "which do not match "
                f"its sidecar; {hint}"
            )
        params = meta.get("params")
        try:
            model = cls(ModelParams(**params) if isinstance(params, dict) else None)
        except (TypeError, PlacementConfigError) as exc:
            raise ModelError(
                f"{meta_file} has training params this dataplane does not take ({exc}); "
                f"retrain it: {hint}"
            ) from exc
        fallback = meta.get("prior_fallback")
        if (
            meta.get("prior_feature") != PRIOR_FEATURE
            or isinstance(fallback, bool)
            or not isinstance(fallback, (int, float))
            or not math.isfinite(fallback)
        ):
            raise ModelError(
                f"{meta_file} does not name its history prior ({PRIOR_FEATURE!r} and a finite "
                f"numeric prior_fallback, got {fallback!r}); retrain it: {hint}"
            )
        if meta.get("prior_size_slopes") != PRIOR_SIZE_SLOPES:
            raise ModelError(
                f"{meta_file} was trained against a history prior with size slopes "
                f"{meta.get('prior_size_slopes')!r}; this dataplane builds it with "
                f"{dict(PRIOR_SIZE_SLOPES)!r} (placement.features.PRIOR_SIZE_SLOPES), so its "
                f"trees would fit the wrong residual; retrain it: {hint}"
            )
        model.booster = booster
        model.metadata = meta
        model.prior_fallback = float(fallback)
        model.path = directory
        return model

    @property
    def file_bytes(self) -> int:
        """Bytes of the saved model files (0 if not saved)."""
        if self.path is None:
            return 0
        return sum(
            (self.path / f).stat().st_size
            for f in (MODEL_FILE, META_FILE)
            if (self.path / f).exists()
        )

    def __repr__(self) -> str:
        state = f"{self.booster.num_trees()} trees" if self.booster is not None else "untrained"
        return f"<DensityModel {state}>"


class Combine(str, enum.Enum):
    """How a :class:`ModelSet` predicts for a pipeline that has its own model."""

    #: The mean of the pipeline's model and the global model (log10 densities).
    MEAN = "mean"
    #: The pipeline's own model alone.
    OWN = "own"

    def __str__(self) -> str:
        return self.value


def check_min_rows(n: Any) -> int:
    """``n`` as the fewest rows a pipeline needs for its own model.

    Raises
    ------
    PlacementConfigError
        (A :class:`ValueError`.) If ``n`` is not an int >= 1.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise PlacementConfigError(f"min_rows={n!r} must be an int >= 1")
    return n


def _load_one_model(path: Path) -> DensityModel:
    """The model at ``path``: a model set's global model (``models.json``, what ``dataplane
    placement train`` writes) or a single model directory (``model.json``, ``model.txt``)."""
    directory = path.parent if path.name in (MODEL_FILE, META_FILE, SET_FILE) else path
    if (directory / SET_FILE).is_file():
        return ModelSet.load(directory).global_model
    if (directory / META_FILE).is_file() or (directory / MODEL_FILE).is_file():
        return DensityModel.load(directory)
    if not directory.exists():
        what = "does not exist"
    elif not directory.is_dir():
        what = "is not a directory"
    else:
        what = "holds no model"
    raise ModelError(
        f"{directory} {what}; give a model set directory (with {SET_FILE}, as `dataplane "
        f"placement train LOGS... --out DIR` writes it; its global model is used) or a single "
        f"model directory (with {META_FILE} and {MODEL_FILE}, as DensityModel.save writes it)"
    )


class ModelSet:
    """Per-workload density models with a global fallback.

    Parameters
    ----------
    global_model : DensityModel
        Predicts for any pipeline without its own model.
    per_pipeline : mapping of str to DensityModel, optional
        A model per pipeline name.
    combine : Combine or str
        For a pipeline with its own model: ``mean`` (default) averages its prediction
        with the global model's, ``own`` uses it alone (see the module docstring).
    """

    def __init__(
        self,
        global_model: DensityModel,
        per_pipeline: Mapping[str, DensityModel] | None = None,
        *,
        combine: Combine | str = Combine.MEAN,
    ) -> None:
        if not isinstance(global_model, DensityModel):
            raise PlacementTypeError(
                f"global_model must be a DensityModel, got {type(global_model).__name__}"
            )
        try:
            self.combine = Combine(combine)
        except ValueError:
            raise PlacementConfigError(
                f"combine={combine!r} must be one of {[c.value for c in Combine]}"
            ) from None
        self.global_model = global_model
        self.per_pipeline: dict[str, DensityModel] = dict(per_pipeline or {})

    @classmethod
    def fit(
        cls,
        table: pa.Table | pd.DataFrame,
        history: HistoryStore | None = None,
        *,
        per_workload: bool = True,
        min_rows: int = MIN_PIPELINE_ROWS,
        params: ModelParams | None = None,
        combine: Combine | str = Combine.MEAN,
    ) -> ModelSet:
        """Train a global model, and one per pipeline with at least ``min_rows`` rows."""
        df, _ = clean_table(table)
        if len(df) == 0:
            raise ModelError("no usable log rows to train on")
        history = history or HistoryStore.from_table(df)
        features = build_features(df, history)
        target = log_density(df)
        global_model = DensityModel(params).fit_features(features, target)
        global_model.metadata["pipelines"] = sorted(map(str, df["pipeline"].unique()))
        # what `placement simulate` checks to say its figures are in-sample
        global_model.metadata["run_ids"] = sorted(map(str, df["run_id"].unique()))
        pipes = df["pipeline"].astype(str).to_numpy()
        return cls.from_global(
            global_model,
            features,
            target,
            pipes,
            min_rows=min_rows if per_workload else None,
            params=params,
            combine=combine,
        )

    @classmethod
    def from_global(
        cls,
        global_model: DensityModel,
        features: pd.DataFrame,
        target: np.ndarray,
        pipelines: np.ndarray,
        *,
        min_rows: int | None = MIN_PIPELINE_ROWS,
        only: Iterable[str] | None = None,
        params: ModelParams | None = None,
        combine: Combine | str = Combine.MEAN,
    ) -> ModelSet:
        """A set of ``global_model`` and a model per pipeline trained on its own rows.

        Parameters
        ----------
        global_model : DensityModel
            The trained global model.
        features, target, pipelines
            The training rows' features, log10 densities and pipeline names (aligned).
        min_rows : int, optional
            Fewest rows a pipeline needs for its own model; ``None``: no per-pipeline models.
        only : iterable of str, optional
            Train models for these pipelines alone (default: every pipeline in the rows).
        params : ModelParams, optional
            LightGBM settings of the per-pipeline models.
        combine : Combine or str
            As in :class:`ModelSet`.
        """
        pipelines = np.asarray(pipelines).astype(str)
        models: dict[str, DensityModel] = {}
        if min_rows is not None:
            check_min_rows(min_rows)
            names = set(pipelines) if only is None else set(map(str, only))
            for name in sorted(names):
                mask = pipelines == name
                if mask.sum() >= min_rows:
                    m = DensityModel(params).fit_features(features.loc[mask], target[mask])
                    m.metadata["pipelines"] = [name]
                    models[name] = m
        return cls(global_model, models, combine=combine)

    def add(self, pipeline: str, model: DensityModel | str | os.PathLike[str]) -> None:
        """Use ``model`` for ``pipeline``.

        Parameters
        ----------
        pipeline : str
            The pipeline name whose files ``model`` will predict for.
        model : DensityModel or path
            A model, or a directory holding one: a model set as ``dataplane placement train
            --out DIR`` (and :meth:`save`) writes it (``models.json``), whose global model
            is taken; or a single model as :meth:`DensityModel.save` writes it
            (``model.json`` and ``model.txt``).

        Raises
        ------
        ModelError
            If the path holds neither layout, or the model in it does not load.
        """
        if not isinstance(model, DensityModel):
            model = _load_one_model(Path(model))
        self.per_pipeline[str(pipeline)] = model

    def model_for(self, pipeline: str | None) -> DensityModel:
        """``pipeline``'s own model, else the global model."""
        return (
            self.per_pipeline.get(str(pipeline), self.global_model)
            if pipeline is not None
            else self.global_model
        )

    def _models_for(self, pipeline: str | None) -> tuple[DensityModel, ...]:
        """The models whose mean predicts for ``pipeline`` (as :attr:`combine` says)."""
        own = self.model_for(pipeline)
        if own is self.global_model or self.combine is Combine.OWN:
            return (own,)
        return (own, self.global_model)

    def _predict_one_pipeline(self, x: np.ndarray, pipeline: str | None) -> np.ndarray:
        return np.mean([m.predict(x) for m in self._models_for(pipeline)], axis=0)

    def predict(self, features: Any, pipelines: Any = None) -> np.ndarray:
        """Predicted log10 density; ``pipelines`` (one name, or one per row) picks the models
        (combined as :attr:`combine` says). A missing name (``None``, ``NaN``) gets the
        global model."""
        x = _as_matrix(features)
        if pipelines is None or isinstance(pipelines, str):
            return self._predict_one_pipeline(x, pipelines)
        names = np.asarray(pipelines, dtype=object)
        if len(names) != len(x):
            raise PlacementConfigError(f"{len(names)} pipeline names for {len(x)} feature rows")
        out = np.empty(len(x))
        # factorize, not ``names == name``: NaN equals no name, and its rows would be left unset
        codes, uniques = pd.factorize(names, use_na_sentinel=False)
        for code, name in enumerate(uniques):
            mask = codes == code
            out[mask] = self._predict_one_pipeline(x[mask], None if pd.isna(name) else name)
        return out

    def predict_one(self, row: np.ndarray, pipeline: str | None = None) -> float:
        """Predicted log10 density of one feature row of ``pipeline`` (the live path)."""
        models = self._models_for(pipeline)
        return sum(m.predict_one(row) for m in models) / len(models)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the set into directory ``path``: ``models.json`` and the models it names.

        Each save writes every model into a new directory ``sets/<stamp>/`` (``global/``
        and ``pipelines/<i>/``), then replaces ``models.json`` in one rename. Why: a
        service reloads the set from the directory a retrain writes into
        (``placement.service.reload_model``), and model ``pipelines/<i>`` is a different
        pipeline's from one training to the next; written in place, a reader between
        two files, or a save cut short, could pair a pipeline with another's model. Here
        a reader sees the old set or the new one. The set the old ``models.json`` named
        is kept for readers that had just read it; older ones are removed (the
        ``global/`` and ``pipelines/`` directories of sets saved before this layout are
        left alone). Saves into one directory take turns (an exclusive ``flock`` on its
        ``.models.lock``), so two trainings that overlap both leave a whole set.

        Raises
        ------
        ModelError
            If a file cannot be written; ``models.json`` and the set it names are then
            left as they were, and the partial new directory is removed.
        """
        directory = Path(path)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            lock = os.open(directory / SET_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise ModelError(f"cannot write a model set into {directory}: {exc}") from exc
        try:
            # saves into one directory take turns: each removes the sets the others wrote
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._save_locked(directory)
        finally:
            os.close(lock)  # releases the lock

    def _save_locked(self, directory: Path) -> Path:
        """:meth:`save`, holding the directory's lock."""
        index_file = directory / SET_FILE
        previous = _set_roots(index_file)
        try:
            (directory / SETS_DIR).mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
            # mkdir, not tempfile.mkdtemp: the service may run as another user, and
            # mkdtemp's directories are private to their owner
            root = directory / SETS_DIR / f"{stamp}-{uuid.uuid4().hex[:8]}"
            root.mkdir()
        except OSError as exc:
            raise ModelError(f"cannot write a model set into {directory}: {exc}") from exc
        rel = f"{SETS_DIR}/{root.name}"
        try:
            self.global_model.save(root / "global")
            index: dict[str, str] = {}
            for i, (name, model) in enumerate(sorted(self.per_pipeline.items())):
                model.save(root / "pipelines" / f"{i:03d}")
                index[name] = f"{rel}/pipelines/{i:03d}"
            meta = {
                "format": MODEL_SET_FORMAT,
                "model_version": MODEL_VERSION,
                "global": f"{rel}/global",
                "pipelines": index,
                "combine": self.combine.value,
            }
            tmp = directory / f".{SET_FILE}.tmp"
            try:
                tmp.write_text(json.dumps(meta, indent=2))
                os.replace(tmp, index_file)
            except OSError as exc:
                raise ModelError(f"cannot write {index_file}: {exc}") from exc
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        keep = {rel} | previous
        for old in (directory / SETS_DIR).iterdir():
            if old.is_dir() and f"{SETS_DIR}/{old.name}" not in keep:
                shutil.rmtree(old, ignore_errors=True)
        return directory

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModelSet:
        """Load a directory written by :meth:`save`, or a single model directory (global only).

        Raises
        ------
        ModelError
            If ``path`` is a file (give the directory that holds it), or the models in it
            are missing, unreadable or incompatible.
        """
        directory = Path(path)
        if directory.is_file():
            raise ModelError(
                f"{directory} is a file; give the model directory that holds it "
                f"({directory.parent}), not a file in it"
            )
        index_file = directory / SET_FILE
        if not index_file.is_file():
            if (directory / META_FILE).is_file() or not directory.exists():
                return cls(DensityModel.load(directory))
            raise ModelError(
                f"{directory} holds neither {SET_FILE} nor {META_FILE}; "
                "give a directory written by "
                "`dataplane placement train`"
            )
        try:
            meta = json.loads(index_file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(
                f"model index {index_file} is unreadable or not JSON ({exc}); {_RETRAIN}"
            ) from exc
        if not isinstance(meta, dict) or meta.get("format") != MODEL_SET_FORMAT:
            raise ModelError(
                f"{index_file} is not a placement model set (format {MODEL_SET_FORMAT!r} "
                f"expected); {_RETRAIN}"
            )
        if not isinstance(meta.get("model_version"), int) or meta["model_version"] > MODEL_VERSION:
            raise ModelError(
                f"{index_file} has model version {meta.get('model_version')!r}; upgrade dataplane"
            )
        pipelines, global_dir = meta.get("pipelines", {}), meta.get("global", "global")
        if (
            not isinstance(pipelines, dict)
            or not all(isinstance(sub, str) for sub in pipelines.values())
            or not isinstance(global_dir, str)
        ):
            raise ModelError(
                f"{index_file} does not name its models (a 'global' directory and a "
                f"'pipelines' mapping of names to directories, got {global_dir!r} and "
                f"{pipelines!r}); {_RETRAIN}"
            )
        models = {str(name): DensityModel.load(directory / sub) for name, sub in pipelines.items()}
        # sets saved before ``combine`` existed used each pipeline's own model alone
        combine = meta.get("combine", Combine.OWN.value)
        if not isinstance(combine, str) or combine not in {c.value for c in Combine}:
            raise ModelError(
                f"{index_file} has combine={combine!r}; expected one of "
                f"{[c.value for c in Combine]} (a newer dataplane wrote it: upgrade)"
            )
        global_model = DensityModel.load(directory / global_dir)
        return cls(global_model, models, combine=combine)

    def __repr__(self) -> str:
        return (
            f"<ModelSet global + {len(self.per_pipeline)} per-pipeline models, "
            f"combine={self.combine.value}>"
        )
