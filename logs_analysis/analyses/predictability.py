"""Is I/O density predictable from what is known when a file is created?

Cross-validated LightGBM on creation-time features, with :mod:`placement`'s own
features (:func:`placement.features.build_features`, history of earlier runs included)
and model (:class:`placement.model.DensityModel`, a regressor on log10 density):

1. rows are cleaned (:func:`placement.features.clean_table`) and featurised with a
   history of the whole sample (a file sees only runs finished before it was created);
2. folds hold out whole **pipelines** when there are at least two, else whole **runs**,
   else rows (grouped k-fold, at most ``folds`` folds); each row's prediction comes from
   a model that never saw its group;
3. reported: Spearman rank correlation of predicted vs true density over all rows and
   per pipeline, next to two baselines (the stage-history estimate and ``-log size``,
   i.e. "smaller files are denser"), and the mean gain importance of each feature.

The out-of-fold predictions are kept for :mod:`logs_analysis.analyses.savings`. A fold
whose other folds hold fewer than :data:`MIN_TRAIN_ROWS` rows with I/O cannot be trained
for; if any row is left without an out-of-fold prediction that way (e.g. two runs, one
of them tiny), the whole analysis is unavailable, saying how many rows lack one, rather
than judging learned placement on the few rows that have one (and the savings replay,
which needs them all, is unavailable too).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
import pandas as pd

from logs_analysis.analyses import Unavailable
from logs_analysis.errors import AnalysisConfigError

__all__ = [
    "MIN_ROWS",
    "MIN_TRAIN_ROWS",
    "PredictabilityConfig",
    "PredictabilityResult",
    "predictability",
]

#: Fewest usable rows to cross-validate on.
MIN_ROWS = 40
#: Fewest training rows with I/O (finite log density) a fold's model is fitted on.
MIN_TRAIN_ROWS = 10


@dataclasses.dataclass(frozen=True, kw_only=True)
class PredictabilityConfig:
    """Settings of :func:`predictability`.

    Parameters
    ----------
    folds : int
        Most folds (>= 2).
    n_estimators : int
        LightGBM trees per fold.
    seed : int
        Seed of LightGBM and of the row folds.
    """

    folds: int = 4
    n_estimators: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.folds, int) or self.folds < 2:
            raise AnalysisConfigError(f"folds={self.folds!r} must be an int >= 2")
        if not isinstance(self.n_estimators, int) or self.n_estimators < 1:
            raise AnalysisConfigError(f"n_estimators={self.n_estimators!r} must be a positive int")


@dataclasses.dataclass
class PredictabilityResult:
    """What :func:`predictability` measured.

    Attributes
    ----------
    rows : int
        Rows cross-validated.
    split : str
        ``pipeline``, ``run`` or ``row``: what each fold held out.
    folds : int
    spearman : dict
        ``lightgbm``, ``stage-history``, ``small-files-first`` -> rank correlation with the
        true density over all rows (NaN where undefined).
    spearman_by_pipeline : dict
        Pipeline -> LightGBM rank correlation on its rows (pipelines with >= 20 rows).
    feature_importances : dict
        Feature -> share of the total gain (mean over folds), largest first.
    table : pandas.DataFrame
        The cleaned rows cross-validated (for the savings replay).
    predictions, stage_history : numpy.ndarray
        Out-of-fold predicted log10 density, and the stage-history estimate, per row of ``table``.
    wall_s : float
    """

    rows: int
    split: str
    folds: int
    spearman: dict[str, float]
    spearman_by_pipeline: dict[str, float]
    feature_importances: dict[str, float]
    table: pd.DataFrame = dataclasses.field(repr=False)
    predictions: np.ndarray = dataclasses.field(repr=False)
    stage_history: np.ndarray = dataclasses.field(repr=False)
    true_log_density: np.ndarray = dataclasses.field(repr=False)
    notes: list[str] = dataclasses.field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "split": self.split,
            "folds": self.folds,
            "spearman": {k: _finite(v) for k, v in self.spearman.items()},
            "spearman_by_pipeline": {k: _finite(v) for k, v in self.spearman_by_pipeline.items()},
            "feature_importances": self.feature_importances,
            "notes": list(self.notes),
            "wall_s": self.wall_s,
        }


def _finite(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return math.nan
    return float(spearmanr(a[ok], b[ok]).statistic)


def _folds(df: pd.DataFrame, k: int, seed: int) -> tuple[str, list[np.ndarray]]:
    """(what is held out, test mask of each fold)."""
    for split, column in (("pipeline", "pipeline"), ("run", "run_id")):
        groups = df[column].astype(str).to_numpy()
        names = sorted(set(groups))
        if len(names) >= 2:
            kk = min(k, len(names))
            rng = np.random.default_rng(seed)
            order = [names[i] for i in rng.permutation(len(names))]
            return split, [np.isin(groups, order[f::kk]) for f in range(kk)]
    rng = np.random.default_rng(seed)
    fold = rng.integers(0, k, len(df))
    return "row", [fold == f for f in range(k)]


def predictability(
    sample: pd.DataFrame, config: PredictabilityConfig | None = None
) -> PredictabilityResult | Unavailable:
    """Cross-validate the density model on ``sample`` (see the module docstring)."""
    config = config or PredictabilityConfig()
    try:
        from placement.errors import PlacementError
        from placement.features import HistoryStore, build_features, clean_table, log_density
        from placement.model import DensityModel, ModelParams
    except ImportError as exc:
        return Unavailable(f"placement's features or model cannot be imported ({exc})")
    try:
        with np.errstate(divide="ignore", invalid="ignore"):  # zero densities have log10 = -inf
            return _predictability(
                sample,
                config,
                HistoryStore,
                build_features,
                clean_table,
                log_density,
                DensityModel,
                ModelParams,
            )
    except PlacementError as exc:  # e.g. LightGBM failing on a degenerate sample
        return Unavailable(f"the model could not be cross-validated: {exc}")


def _predictability(
    sample: pd.DataFrame,
    config: PredictabilityConfig,
    HistoryStore: Any,
    build_features: Any,
    clean_table: Any,
    log_density: Any,
    DensityModel: Any,
    ModelParams: Any,
) -> PredictabilityResult | Unavailable:
    start = time.perf_counter()
    df, _ = clean_table(sample)
    if len(df) < MIN_ROWS:
        return Unavailable(
            f"only {len(df)} usable rows; cross-validation needs at least {MIN_ROWS}"
        )
    target = log_density(df)
    finite = np.isfinite(target)
    if finite.sum() < MIN_ROWS or np.ptp(target[finite]) == 0:
        return Unavailable("the densities are all equal or zero: there is nothing to rank")
    history = HistoryStore.from_table(df)
    features = build_features(df, history)
    split, tests = _folds(df, config.folds, config.seed)
    pred = np.full(len(df), np.nan)
    importances: dict[str, float] = {}
    params = ModelParams(
        n_estimators=config.n_estimators,
        seed=config.seed,
        min_data_in_leaf=min(20, max(2, len(df) // 20)),
    )
    used = learned = skipped = 0
    for test in tests:
        train = ~test & finite
        if not test.any():
            continue
        if train.sum() < MIN_TRAIN_ROWS:
            skipped += 1
            continue
        model = DensityModel(params).fit_features(features.loc[train], target[train])
        pred[test] = model.predict(features.loc[test])
        gains = model.feature_importances("gain")
        total = sum(gains.values())
        if total > 0:  # a fold whose trees never split has no importances to share
            for name, v in gains.items():
                importances[name] = importances.get(name, 0.0) + v / total
            learned += 1
        used += 1
    if used == 0:
        return Unavailable(
            f"no fold had enough rows to train on ({len(df)} rows, split by {split})"
        )
    missing = int(np.count_nonzero(~np.isfinite(pred)))
    if missing:
        return Unavailable(
            f"only {len(df) - missing:,} of {len(df):,} rows got an out-of-fold prediction: "
            f"{skipped} of {used + skipped} folds (split by {split}) left fewer than "
            f"{MIN_TRAIN_ROWS} rows with I/O to train on, so learned placement cannot be "
            f"judged on the other {missing:,} rows; give logs of more runs or pipelines"
        )
    importances = {
        k: v / max(learned, 1) for k, v in sorted(importances.items(), key=lambda kv: -kv[1])
    }
    stage_hist = _stage_history(features)
    notes = []
    log_size = features["log_expected_size"].to_numpy(np.float64)
    if not np.isfinite(log_size).any():
        log_size = np.log10(np.maximum(df["size_bytes"].to_numpy(np.float64), 1.0))
        notes.append(
            "the log declares no expected sizes: the small-files-first baseline ranks by the final "
            "size (known only afterwards), which flatters it"
        )
    spearman = {
        "lightgbm": _spearman(pred, target),
        "stage-history": _spearman(stage_hist, target),
        "small-files-first": _spearman(-log_size, target),
    }
    if not np.isfinite(spearman["lightgbm"]):
        notes.append(
            "the cross-validated predictions do not vary (each fold had too little to learn from), "
            "so their rank correlation is undefined"
        )
    by_pipeline = {}
    pipes = df["pipeline"].astype(str).to_numpy()
    for name in sorted(set(pipes)):
        mask = pipes == name
        if mask.sum() >= 20:
            by_pipeline[name] = _spearman(pred[mask], target[mask])
    return PredictabilityResult(
        rows=len(df),
        split=split,
        folds=used,
        spearman=spearman,
        spearman_by_pipeline=by_pipeline,
        feature_importances=importances,
        table=df,
        predictions=pred,
        stage_history=stage_hist,
        true_log_density=target,
        notes=notes,
        wall_s=time.perf_counter() - start,
    )


def _stage_history(features: pd.DataFrame) -> np.ndarray:
    try:
        from placement.evaluate import stage_history_prediction

        return np.asarray(stage_history_prediction(features), dtype=np.float64)
    except ImportError:
        est = features["h_ps_ld"].copy()
        for col in ("h_s_ld", "h_ko_ld", "h_p_ld"):
            est = est.fillna(features[col])
        return est.to_numpy(np.float64)
