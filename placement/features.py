"""Creation-time features of a temporary file, for predicting its I/O density.

A placement decision is made when a file is created, so a feature may use only

* the file's **creation-time columns** of the log schema
  (:data:`placement.schema.CREATION_COLUMNS`: kind, operator, expected size,
  partition counts, input bytes, priority, memory pressure, cluster width and, for a
  spilled key, the graph-order distance to its next reader and its readers left), and
* the **history** of earlier runs: per (pipeline, stage), stage, pipeline,
  (file kind, operator) and file kind statistics of the density, lifetime, size and
  operation rate of files whose run had *finished* before this file was created
  (:class:`HistoryStore`).

Features that transfer to pipelines never seen in training
-----------------------------------------------------------
A new pipeline has no (pipeline, stage) or pipeline history, and often no stage
name in common with earlier pipelines, but its files still have a kind (spill,
shuffle...). The **file kind** level (``h_k_*``) is known for every file once any
earlier run wrote a file of that kind, and ``h_k_size_ratio``,
``h_k_rate_density`` and ``h_k_ld_adj`` place this file against the typical file
of its kind (its size against their mean size; the density their operation rate
and their density imply at this file's size).

``h_prior_ld`` is the **history prior** (:func:`history_prior`): the mean log
density of the most specific history level that knows the file, (pipeline, stage),
else stage, else (kind, operator), else kind, corrected by a share (the level's
*size slope*) of the log ratio of the file's expected size to that level's mean
size. The slopes lie between 0 ("density does not depend on size") and 1
("operations per file are fixed", density ~ 1/size):

* stage levels (``ps``, ``s``): :data:`PRIOR_SIZE_SLOPE` = 0.5 (a file twice as
  large as the other files of its stage is expected about 1.4x sparser);
* file-kind levels (``ko``, ``k``): :data:`PRIOR_KIND_SIZE_SLOPE` = 1.0 (a file
  twice as large as the other files of its kind is expected 2x sparser, as if its
  operations per file were those of its kind's typical file).

Both were chosen by inner validation only: grouped k-fold over the pipelines *inside*
each training fold of the pipeline split, LightGBM policy's share of the oracle's
savings at a 5% SSD budget, mean of 3 seeds, with an earlier simulator that told
policies each file's final size (``benchmarks/placement.md`` records the re-check
under the current one). A common slope of 0, 0.25, 0.5, 0.75, 1.0 scored 0.831,
0.832, 0.829, 0.827, 0.800 (flat up to 0.75, so the stage slope stays 0.5); with the
stage slope at 0.5, a kind slope of 0, 0.5, 1.0,
1.5 scored 0.832, 0.829, 0.840, 0.839 (1.0 also on 3 further seeds: 0.836 against
0.831). The kind levels are the ones files of unseen pipelines fall back to. A
separate residual model for files without stage history (trained on those files, or
on every file with its stage and pipeline history hidden) scored 0.826 and 0.824,
so the model stays one.
The model (:mod:`placement.model`) learns the *residual* of the log density
against this prior, so on an unseen pipeline it starts from what earlier files of
the same kind did rather than from the average of every training pipeline.

No outcome column (:data:`placement.schema.OUTCOME_COLUMNS`) of the file itself, nor of
any file of its own run, ever enters its features. ``tests/placement/test_features.py``
guards this by shuffling the outcome columns of a run and checking that its features
do not change.

Categorical columns (``file_kind``, ``operator``) are coded with fixed tables
(:data:`FILE_KINDS`, :data:`OPERATORS`); a value outside them is coded as missing
(``NaN``), so features never depend on the data they were built from. Stage and
pipeline names enter only through the history statistics: they carry over to new
pipelines whose stages share names (``getitem``, ``shuffle-barrier``...) and never
become ids a model could memorise.

Units: every ``log_*`` feature is a base-10 logarithm (sizes in bytes, lifetimes in
seconds, densities in operations per byte per second, rates in operations per second).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from placement.errors import PlacementTypeError, SchemaError
from placement.schema import MIN_LIFETIME_S, MIN_SIZE_BYTES, REQUIRED_COLUMNS, log_io_density

__all__ = [
    "CATEGORICAL_FEATURES",
    "FEATURE_COLUMNS",
    "FILE_KINDS",
    "HISTORY_LEVELS",
    "OPERATORS",
    "PRIOR_KIND_SIZE_SLOPE",
    "PRIOR_LEVELS",
    "PRIOR_SIZE_SLOPE",
    "PRIOR_SIZE_SLOPES",
    "HistorySnapshot",
    "HistoryStore",
    "RowIssues",
    "build_features",
    "clean_table",
    "estimated_sizes",
    "features_from_request",
    "history_prior",
    "log_density",
    "size_estimate",
]

#: Codes of the ``file_kind`` column (the values the log schema allows).
FILE_KINDS: tuple[str, ...] = ("spill", "shuffle", "rechunk", "cache_shard", "other")
#: Codes of the ``operator`` column; any other operator is coded as missing.
OPERATORS: tuple[str, ...] = (
    "shuffle",
    "groupby",
    "merge",
    "set_index",
    "sort",
    "rechunk",
    "matmul",
    "bag",
    "reuse",
    "cache",
)
_KIND_CODE = {k: float(i) for i, k in enumerate(FILE_KINDS)}
_OP_CODE = {k: float(i) for i, k in enumerate(OPERATORS)}

#: History levels: name -> key columns. Statistics of earlier runs are kept per key.
HISTORY_LEVELS: dict[str, tuple[str, ...]] = {
    "ps": ("pipeline", "stage"),
    "s": ("stage",),
    "p": ("pipeline",),
    "ko": ("file_kind", "operator"),
    "k": ("file_kind",),
}
#: History levels the prior (:func:`history_prior`) falls back through, most specific first.
PRIOR_LEVELS: tuple[str, ...] = ("ps", "s", "ko", "k")
#: Share of the log size ratio (file against its history level) the prior subtracts at
#: the stage levels ``ps`` and ``s`` (see the module docstring for how it was chosen).
PRIOR_SIZE_SLOPE = 0.5
#: The same share at the file-kind levels ``ko`` and ``k`` (those of unseen pipelines).
PRIOR_KIND_SIZE_SLOPE = 1.0
#: Size slope of each level of :data:`PRIOR_LEVELS`.
PRIOR_SIZE_SLOPES: dict[str, float] = {
    "ps": PRIOR_SIZE_SLOPE,
    "s": PRIOR_SIZE_SLOPE,
    "ko": PRIOR_KIND_SIZE_SLOPE,
    "k": PRIOR_KIND_SIZE_SLOPE,
}
#: Statistics kept per history key (means over files of earlier runs). ``lgrow`` is the
#: mean log10 of final size over expected size, over the files that logged an expected
#: size (:func:`size_estimate`).
_STATS = ("n", "ld", "sd", "llife", "lrate", "lsize", "lgrow")
#: Per-(run, key) sums the statistics are computed from (``ng``: files with an expected size).
_SUMS = ["n", "ld", "ld2", "llife", "lrate", "lsize", "lgrow", "ng"]

_BASE_FEATURES = (
    "file_kind",
    "operator",
    "log_expected_size",
    "n_partitions_in",
    "n_partitions_out",
    "log_input_bytes",
    "log_input_per_partition",
    "priority",
    "memory_pressure",
    "n_workers",
    # spill files: signed log10(1 + |positions|) to the key's next reader, its readers left
    "log_reuse_distance",
    "n_dependents",
)
_HISTORY_FEATURES = tuple(
    f"h_{level}_{stat}"
    for level in HISTORY_LEVELS
    for stat in (
        ("n", "ld", "sd", "llife", "lrate", "lsize")
        if level in ("ps", "k")
        else ("n", "ld", "lrate")
    )
) + (
    # density the history's operation rate implies for this file's expected size
    "h_ps_rate_density",
    "h_s_rate_density",
    "h_ko_rate_density",
    # this file's expected size against the typical size of its (pipeline, stage)
    "h_ps_size_ratio",
    # the same against every earlier file of its kind (transfers to new pipelines)
    "h_k_rate_density",
    "h_k_size_ratio",
    "h_k_ld_adj",
    # the history prior the model learns the residual against (history_prior)
    "h_prior_ld",
)

#: The model's input columns, in order. Creation-time facts and history only.
FEATURE_COLUMNS: tuple[str, ...] = _BASE_FEATURES + _HISTORY_FEATURES
#: Feature columns holding category codes (LightGBM categorical features).
CATEGORICAL_FEATURES: tuple[str, ...] = ("file_kind", "operator")

_FEATURE_INDEX = {name: i for i, name in enumerate(FEATURE_COLUMNS)}


# ------------------------------------------------------------------------- helpers
def _as_frame(table: pa.Table | pd.DataFrame) -> pd.DataFrame:
    if isinstance(table, pd.DataFrame):
        return table
    if isinstance(table, pa.Table):
        return table.to_pandas()
    raise PlacementTypeError(
        f"expected a pyarrow Table or pandas DataFrame of log rows, got {type(table).__name__}"
    )


def _log10_pos(values: Any, floor: float = 1.0) -> np.ndarray:
    v = (
        pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        if isinstance(values, pd.Series)
        else np.asarray(values, dtype=np.float64)
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log10(np.maximum(v, floor))


def _num(df: pd.DataFrame, name: str) -> np.ndarray:
    if name not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _str(df: pd.DataFrame, name: str) -> pd.Series:
    if name not in df.columns:
        return pd.Series([""] * len(df), index=df.index, dtype=object)
    return df[name].astype(object).where(df[name].notna(), "").astype(str)


def log_density(table: pa.Table | pd.DataFrame) -> np.ndarray:
    """log10 of each row's I/O density (operations per byte per second), floored at
    :data:`placement.schema.LOG_DENSITY_FLOOR` for files without I/O (see
    :mod:`placement.schema`)."""
    df = _as_frame(table)
    life = _num(df, "deleted_at") - _num(df, "created_at")
    return log_io_density(_num(df, "read_ops"), _num(df, "write_ops"), _num(df, "size_bytes"), life)


@dataclasses.dataclass
class RowIssues:
    """Rows dropped by :func:`clean_table`, counted by reason."""

    total_rows: int = 0
    dropped: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def n_dropped(self) -> int:
        return int(sum(self.dropped.values()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_rows": self.total_rows,
            "dropped_rows": self.n_dropped,
            "by_reason": dict(self.dropped),
        }


def clean_table(table: pa.Table | pd.DataFrame) -> tuple[pd.DataFrame, RowIssues]:
    """Drop rows that cannot be used and count them by reason; never raises on bad rows.

    A row is dropped when a required column is null, a time is not finite, it was
    deleted before it was created, or a size or operation count is negative.

    Returns
    -------
    (DataFrame, RowIssues)
        The usable rows (index reset) and the count of dropped rows per reason.

    Raises
    ------
    SchemaError
        If a required column is missing altogether (the table is not a placement log).
    """
    df = _as_frame(table)
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise SchemaError(
            f"log table lacks required column(s) {missing}; "
            f"placement logs need {list(REQUIRED_COLUMNS)}"
        )
    issues = RowIssues(total_rows=len(df))
    keep = np.ones(len(df), dtype=bool)

    def drop(reason: str, bad: np.ndarray) -> None:
        bad = bad & keep
        n = int(bad.sum())
        if n:
            issues.dropped[reason] = issues.dropped.get(reason, 0) + n
            keep[bad] = False

    for col in REQUIRED_COLUMNS:
        drop(f"null {col}", df[col].isna().to_numpy())
    created, deleted = _num(df, "created_at"), _num(df, "deleted_at")
    drop("non-finite time", ~(np.isfinite(created) & np.isfinite(deleted)))
    drop("deleted before created", deleted < created)
    for col in ("size_bytes", "read_ops", "write_ops", "read_bytes", "write_bytes"):
        drop(f"negative {col}", _num(df, col) < 0)
    out = df.loc[keep].reset_index(drop=True) if issues.n_dropped else df.reset_index(drop=True)
    return out, issues


# ------------------------------------------------------------------------- history
class HistoryStore:
    """Statistics of the density of files from earlier, finished runs.

    For every history level (:data:`HISTORY_LEVELS`) and key (e.g. a (pipeline,
    stage) pair) it keeps, per run, the count of files and sums of log10 density,
    its square, log10 lifetime, log10 operation rate (operations per second of life)
    and log10 size. A run counts as finished at its last file's deletion (or at a later
    creation of a file whose row the store cannot use).

    A file's history features (:meth:`features_for`) use only runs that had finished
    *strictly before the file was created*; its own run is never among them (a run
    finishes after each of its files is created). :meth:`lookup` (single decisions in
    a live service) uses every run stored so far.

    Parameters
    ----------
    table : pyarrow.Table or pandas.DataFrame, optional
        Log rows to start from (see :meth:`add`).
    """

    def __init__(self, table: pa.Table | pd.DataFrame | None = None) -> None:
        # per level: DataFrame of per-(run, key) sums with the run's end time
        self._runs: dict[str, pd.DataFrame] = {}
        self._latest: dict[str, dict[tuple[str, ...], np.ndarray]] | None = None
        self._run_ids: set[str] = set()
        if table is not None:
            self.add(table)

    @classmethod
    def from_table(cls, table: pa.Table | pd.DataFrame) -> HistoryStore:
        """A store holding every run of ``table``."""
        return cls(table)

    @property
    def n_runs(self) -> int:
        """Runs stored."""
        return len(self._run_ids)

    def add(self, table: pa.Table | pd.DataFrame) -> None:
        """Add the rows of finished runs (rows of a run already stored are added to it).

        Only the rows :func:`clean_table` keeps add statistics; a run's end also counts
        the times of the rows it drops (:meth:`_run_ends`).
        """
        raw = _as_frame(table)
        df, _ = clean_table(raw)
        if df.empty:
            return
        life = _num(df, "deleted_at") - _num(df, "created_at")
        size = np.maximum(_num(df, "size_bytes"), MIN_SIZE_BYTES)
        ops = _num(df, "read_ops") + _num(df, "write_ops")
        lifef = np.maximum(life, MIN_LIFETIME_S)
        ld = log_io_density(_num(df, "read_ops"), _num(df, "write_ops"), size, life)
        expected = _num(df, "expected_size_bytes")
        with np.errstate(invalid="ignore", divide="ignore"):
            final = np.maximum(_num(df, "size_bytes"), 1.0)
            grow = np.where(expected > 0, np.log10(final / np.maximum(expected, 1.0)), np.nan)
        base = pd.DataFrame(
            {
                "run_id": _str(df, "run_id").to_numpy(),
                "pipeline": _str(df, "pipeline").to_numpy(),
                "stage": _str(df, "stage").to_numpy(),
                "file_kind": _str(df, "file_kind").to_numpy(),
                "operator": _str(df, "operator").to_numpy(),
                "n": 1.0,
                "ld": ld,
                "ld2": ld * ld,
                "llife": np.log10(lifef),
                "lrate": np.log10(np.maximum(ops, 1.0) / lifef),
                "lsize": np.log10(size),
                "lgrow": np.nan_to_num(grow, nan=0.0),
                "ng": np.isfinite(grow).astype(np.float64),
            }
        )
        end = self._run_ends(raw).loc[base["run_id"].unique()]
        self._run_ids.update(end.index)
        for level, keys in HISTORY_LEVELS.items():
            agg = (
                base.groupby(["run_id", *keys], sort=False, observed=True)[_SUMS]
                .sum()
                .reset_index()
            )
            if level in self._runs:
                agg = (
                    pd.concat([self._runs[level].drop(columns=["end"]), agg])
                    .groupby(["run_id", *keys], sort=False)[_SUMS]
                    .sum()
                    .reset_index()
                )
            # a run's end is its last deletion over every level (recomputed over all rows)
            agg["end"] = agg["run_id"].map(self._run_end(end, level))
            self._runs[level] = agg
        self._latest = None

    @staticmethod
    def _run_ends(df: pd.DataFrame) -> pd.Series:
        """Each run's end (s): the latest finite creation or deletion time of its rows.

        Rows :func:`clean_table` drops count too: :func:`build_features` still featurizes
        them, and a run must end no earlier than each of its files is created, or a
        dropped file created last would see its own run as history.
        """
        created, deleted = _num(df, "created_at"), _num(df, "deleted_at")
        with np.errstate(invalid="ignore"):
            times = np.fmax(  # fmax skips a NaN operand
                np.where(np.isfinite(created), created, np.nan),
                np.where(np.isfinite(deleted), deleted, np.nan),
            )
        return pd.Series(times).groupby(_str(df, "run_id").to_numpy(), sort=False).max()

    def _run_end(self, end: pd.Series, level: str) -> pd.Series:
        prev = self._runs.get(level)
        if prev is None:
            return end
        old = prev.groupby("run_id")["end"].max()
        return pd.concat([old, end]).groupby(level=0).max()

    @staticmethod
    def _stats(sums: pd.DataFrame) -> pd.DataFrame:
        n = sums["n"].to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = sums["ld"].to_numpy() / n
            var = np.maximum(sums["ld2"].to_numpy() / n - mean * mean, 0.0)
            return pd.DataFrame(
                {
                    "n": np.log1p(n),
                    "ld": mean,
                    "sd": np.sqrt(var),
                    "llife": sums["llife"].to_numpy() / n,
                    "lrate": sums["lrate"].to_numpy() / n,
                    "lsize": sums["lsize"].to_numpy() / n,
                    "lgrow": sums["lgrow"].to_numpy() / sums["ng"].to_numpy(),
                },
                index=sums.index,
            )

    def features_for(self, table: pa.Table | pd.DataFrame) -> pd.DataFrame:
        """History statistics of each row of ``table``, from runs finished before it was created.

        Returns a DataFrame (same length and order as ``table``) with columns
        ``h_<level>_<stat>``; a key without earlier runs gives ``NaN`` (and ``n`` 0).
        """
        df = _as_frame(table)
        out = pd.DataFrame(index=pd.RangeIndex(len(df)))
        at = _num(df, "created_at")
        query = pd.DataFrame({"at": at, "_row": np.arange(len(df))})
        for name in ("pipeline", "stage", "file_kind", "operator"):
            query[name] = _str(df, name).to_numpy()
        ok = np.isfinite(at)
        q = query.loc[ok].sort_values("at", kind="stable")
        for level, keys in HISTORY_LEVELS.items():
            cols = [f"h_{level}_{s}" for s in _STATS]
            result = np.full((len(df), len(_STATS)), np.nan)
            result[:, 0] = 0.0
            runs = self._runs.get(level)
            if runs is not None and len(q):
                r = runs.sort_values("end", kind="stable")
                cum = r.groupby(list(keys), sort=False)[_SUMS].cumsum()
                cum[list(keys)] = r[list(keys)].to_numpy()
                cum["end"] = r["end"].to_numpy()
                cum = cum.sort_values("end", kind="stable")
                merged = pd.merge_asof(
                    q,
                    cum,
                    left_on="at",
                    right_on="end",
                    by=list(keys),
                    allow_exact_matches=False,
                    direction="backward",
                )
                found = merged["n"].notna().to_numpy()
                stats = self._stats(merged.loc[found, _SUMS])
                rows = merged.loc[found, "_row"].to_numpy()
                result[rows] = stats[list(_STATS)].to_numpy()
            for j, c in enumerate(cols):
                out[c] = result[:, j]
        return out

    def _latest_table(self) -> dict[str, dict[tuple[str, ...], np.ndarray]]:
        if self._latest is None:
            latest: dict[str, dict[tuple[str, ...], np.ndarray]] = {}
            for level, keys in HISTORY_LEVELS.items():
                runs = self._runs.get(level)
                table: dict[tuple[str, ...], np.ndarray] = {}
                if runs is not None:
                    sums = runs.groupby(list(keys), sort=False)[_SUMS].sum()
                    stats = self._stats(sums)[list(_STATS)]
                    for key, row in zip(stats.index, stats.to_numpy(), strict=True):
                        table[key if isinstance(key, tuple) else (key,)] = row
                latest[level] = table
            self._latest = latest
        return self._latest

    def lookup(
        self, pipeline: str, stage: str, file_kind: str = "", operator: str = ""
    ) -> dict[str, float]:
        """History statistics of one key set over every stored run (for live decisions).

        Returns a mapping ``h_<level>_<stat> -> value`` (``NaN`` where the key is unknown).
        """
        return _lookup(self._latest_table(), pipeline, stage, file_kind, operator)

    def snapshot(self) -> HistorySnapshot:
        """The statistics :meth:`lookup` uses, frozen (small; what a Dask worker needs)."""
        return HistorySnapshot(self._latest_table(), n_runs=self.n_runs)

    def __repr__(self) -> str:
        return f"<HistoryStore: {self.n_runs} runs>"


def _lookup(
    latest: Mapping[str, Mapping[tuple[str, ...], np.ndarray]],
    pipeline: str,
    stage: str,
    file_kind: str,
    operator: str,
) -> dict[str, float]:
    values = {
        "pipeline": pipeline or "",
        "stage": stage or "",
        "file_kind": file_kind or "",
        "operator": operator or "",
    }
    out: dict[str, float] = {}
    for level, keys in HISTORY_LEVELS.items():
        row = latest.get(level, {}).get(tuple(values[k] for k in keys))
        for j, stat in enumerate(_STATS):
            if row is None:
                out[f"h_{level}_{stat}"] = 0.0 if stat == "n" else math.nan
            else:
                out[f"h_{level}_{stat}"] = float(row[j])
    return out


class HistorySnapshot:
    """Per-key history statistics over every run a :class:`HistoryStore` held, frozen.

    It answers :meth:`lookup` exactly as its store did when the snapshot was taken, and
    holds one small array per key (not the per-run sums), so it is cheap to pickle and
    to keep on every Dask worker. Build it with :meth:`HistoryStore.snapshot`.
    """

    #: Answers remembered per key set (live decisions repeat the same few keys).
    CACHE_SIZE = 4096

    def __init__(
        self, latest: Mapping[str, Mapping[tuple[str, ...], np.ndarray]], *, n_runs: int = 0
    ) -> None:
        self._latest = {level: dict(table) for level, table in latest.items()}
        self.n_runs = int(n_runs)
        self._cache: dict[tuple[str, str, str, str], dict[str, float]] = {}

    def lookup(
        self, pipeline: str, stage: str, file_kind: str = "", operator: str = ""
    ) -> dict[str, float]:
        """As :meth:`HistoryStore.lookup` (the answer is shared: do not modify it)."""
        key = (pipeline or "", stage or "", file_kind or "", operator or "")
        out = self._cache.get(key)
        if out is None:
            out = _lookup(self._latest, *key)
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = out
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {"_latest": self._latest, "n_runs": self.n_runs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = {}

    @property
    def n_keys(self) -> int:
        """Keys held, over every history level."""
        return sum(len(t) for t in self._latest.values())

    def __repr__(self) -> str:
        return f"<HistorySnapshot: {self.n_runs} runs, {self.n_keys} keys>"


# ------------------------------------------------------------------------- features
def history_prior(log_size: Any, hist: Mapping[str, Any]) -> Any:
    """The history prior of a file's log10 density (see the module docstring).

    Parameters
    ----------
    log_size : float or numpy.ndarray
        log10 of the file's expected size in bytes (``NaN`` if unknown).
    hist : mapping
        History statistics ``h_<level>_ld`` and ``h_<level>_lsize`` for every level of
        :data:`PRIOR_LEVELS` (scalars or arrays, ``NaN`` where a level has no runs).

    Returns
    -------
    float or numpy.ndarray
        ``h_L_ld - PRIOR_SIZE_SLOPES[L] * (log_size - h_L_lsize)`` for the first level
        ``L`` of :data:`PRIOR_LEVELS` with history (the size term is left out when the
        size is unknown); ``NaN`` where no level has any.

    Examples
    --------
    A file of 10 MB whose (pipeline, stage) wrote files of 1 MB at a mean log density
    of -5 gets a prior of ``-5 - 0.5 * (7 - 6) = -5.5``. Without any stage history, a
    10 MB spill file whose earlier spill files averaged 1 MB at -5 gets
    ``-5 - 1.0 * (7 - 6) = -6``.
    """
    if isinstance(log_size, float):  # one live decision: no numpy on this path
        for level in PRIOR_LEVELS:
            ld = float(hist[f"h_{level}_ld"])
            if ld == ld:  # not NaN
                shift = log_size - float(hist[f"h_{level}_lsize"])
                return ld - PRIOR_SIZE_SLOPES[level] * (shift if shift == shift else 0.0)
        return math.nan
    prior: Any = math.nan
    for level in reversed(PRIOR_LEVELS):
        ld = hist[f"h_{level}_ld"]
        shift = np.nan_to_num(log_size - hist[f"h_{level}_lsize"], nan=0.0)
        value = ld - PRIOR_SIZE_SLOPES[level] * shift
        prior = np.where(np.isnan(ld), prior, value)
    return prior if np.ndim(prior) else float(prior)


def size_estimate(log_expected: Any, hist: Mapping[str, Any]) -> Any:
    """log10 of the bytes a new file is expected to reach, from its expected size and history.

    A file's logged expected size is what the storage layer knew at its creation: a
    spill file's pickled size (exact), a P2P shuffle file's pipeline input over its
    output partitions (in the workload suite its final size was 0.04x to 2x that, the
    10th and 90th percentiles). The estimate corrects it by the mean log ratio of final
    to expected size of the files of earlier runs at the first level of
    :data:`PRIOR_LEVELS` that logged one ((pipeline, stage), stage, (kind, operator),
    kind); a file without an expected size gets its level's mean log size. Policies
    reserve this many bytes of SSD for the file (:mod:`placement.simulator`, the
    service's leases).

    Parameters
    ----------
    log_expected : float or numpy.ndarray
        log10 of the file's expected size in bytes (``NaN`` if unknown).
    hist : mapping
        History statistics ``h_<level>_lgrow`` and ``h_<level>_lsize`` of every level
        of :data:`PRIOR_LEVELS` (scalars or arrays, ``NaN`` where unknown).

    Returns
    -------
    float or numpy.ndarray
        log10 bytes; ``log_expected`` itself where no level knows a ratio, ``NaN``
        where neither the expected size nor any history is known.
    """
    if isinstance(log_expected, float):  # one live decision: no numpy on this path
        known = log_expected == log_expected
        for level in PRIOR_LEVELS:
            value = float(hist[f"h_{level}_lgrow" if known else f"h_{level}_lsize"])
            if value == value:
                return log_expected + value if known else value
        return log_expected
    log_expected = np.asarray(log_expected, dtype=np.float64)
    grow: Any = np.full(log_expected.shape, np.nan)
    mean_size: Any = np.full(log_expected.shape, np.nan)
    for level in reversed(PRIOR_LEVELS):
        g, m = hist[f"h_{level}_lgrow"], hist[f"h_{level}_lsize"]
        grow = np.where(np.isnan(g), grow, g)
        mean_size = np.where(np.isnan(m), mean_size, m)
    return np.where(np.isnan(log_expected), mean_size, log_expected + np.nan_to_num(grow))


def estimated_sizes(
    table: pa.Table | pd.DataFrame, history: HistoryStore | None = None
) -> np.ndarray:
    """Bytes each log row's file is expected to reach, known at its creation
    (:func:`size_estimate`).

    ``history`` defaults to a store of ``table`` itself; a row sees only runs finished
    before its creation. Returns float64 bytes, ``NaN`` where nothing is known.
    """
    df = _as_frame(table)
    if history is None:
        history = HistoryStore.from_table(df)
    hist = history.features_for(df)
    cols = {c: hist[c].to_numpy() for c in hist.columns}
    log_expected = _log10_pos(_num(df, "expected_size_bytes"))
    return np.power(10.0, size_estimate(log_expected, cols))


def _derived(log_size: Any, hist: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Fill the derived history features (works on arrays and on scalars)."""
    floor = math.log10(MIN_SIZE_BYTES)
    ls = np.maximum(log_size, floor)
    # density = operation rate / size; in logs: lrate - log size (a rate already divides by
    # lifetime)
    out["h_ps_rate_density"] = hist["h_ps_lrate"] - ls
    out["h_s_rate_density"] = hist["h_s_lrate"] - ls
    out["h_ko_rate_density"] = hist["h_ko_lrate"] - ls
    out["h_ps_size_ratio"] = log_size - hist["h_ps_lsize"]
    out["h_k_rate_density"] = hist["h_k_lrate"] - ls
    out["h_k_size_ratio"] = log_size - hist["h_k_lsize"]
    # the kind's mean density moved to this file's size as if its operations were fixed
    out["h_k_ld_adj"] = hist["h_k_ld"] - (log_size - hist["h_k_lsize"])
    out["h_prior_ld"] = history_prior(log_size, hist)


def build_features(
    table: pa.Table | pd.DataFrame, history: HistoryStore | None = None
) -> pd.DataFrame:
    """Feature matrix of log rows: one row per file, columns :data:`FEATURE_COLUMNS`.

    Parameters
    ----------
    table : pyarrow.Table or pandas.DataFrame
        Log rows (at least the id and creation-time columns; outcome columns are ignored).
    history : HistoryStore, optional
        Earlier runs; by default a store built from ``table`` itself. Either way a row
        sees only runs that finished before it was created.

    Returns
    -------
    pandas.DataFrame
        float64 columns, ``NaN`` where a fact is unknown; same length and order as ``table``.
    """
    df = _as_frame(table)
    if history is None:
        history = HistoryStore.from_table(df)
    n = len(df)
    cols: dict[str, Any] = {}
    cols["file_kind"] = (
        _str(df, "file_kind").map(_KIND_CODE).to_numpy(dtype=np.float64, na_value=np.nan)
    )
    cols["operator"] = (
        _str(df, "operator").map(_OP_CODE).to_numpy(dtype=np.float64, na_value=np.nan)
    )
    exp_size = _num(df, "expected_size_bytes")
    log_size = _log10_pos(exp_size)
    cols["log_expected_size"] = log_size
    cols["n_partitions_in"] = _num(df, "n_partitions_in")
    cols["n_partitions_out"] = _num(df, "n_partitions_out")
    inp = _num(df, "input_bytes")
    cols["log_input_bytes"] = _log10_pos(inp)
    with np.errstate(invalid="ignore", divide="ignore"):
        cols["log_input_per_partition"] = _log10_pos(
            inp / np.maximum(cols["n_partitions_out"], 1.0)
        )
    cols["priority"] = _num(df, "priority")
    cols["memory_pressure"] = _num(df, "memory_pressure")
    cols["n_workers"] = _num(df, "n_workers")
    cols["log_reuse_distance"] = _signed_log(_num(df, "reuse_distance"))
    cols["n_dependents"] = _num(df, "n_dependents")
    hist = history.features_for(df)
    for c in hist.columns:
        if c in _FEATURE_INDEX:
            cols[c] = hist[c].to_numpy()
    _derived(log_size, {c: hist[c].to_numpy() for c in hist.columns}, cols)
    out = pd.DataFrame(
        {c: np.asarray(cols[c], dtype=np.float64) for c in FEATURE_COLUMNS}, index=pd.RangeIndex(n)
    )
    return out


def _signed_log(values: Any) -> Any:
    """``sign(x) * log10(1 + |x|)``: a log scale for counts that may be negative (NaN stays)."""
    if isinstance(values, float):  # one live decision: no numpy on this path
        return math.copysign(math.log10(1.0 + abs(values)), values) if values == values else values
    return np.sign(values) * np.log10(1.0 + np.abs(values))


def _request_get(request: Any, name: str) -> Any:
    if isinstance(request, Mapping):
        value = request.get(name)
    else:
        value = getattr(request, name, None)
    if value is not None and not isinstance(value, (str, int, float)):
        value = getattr(value, "value", value)  # enums such as FileKind
    return value


def _f(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def features_from_request(
    request: Any, history: HistoryStore | HistorySnapshot | None = None
) -> np.ndarray:
    """Feature row of one file about to be created (for single, live decisions).

    Parameters
    ----------
    request : mapping or object
        Creation-time facts by log-schema column name (a dict, a dataclass such as
        ``placement.storage.FileRequest``, or any object with those attributes).
        Missing facts become ``NaN``.
    history : HistoryStore or HistorySnapshot, optional
        Earlier runs (every stored run counts); without it history features are unknown.

    Returns
    -------
    numpy.ndarray
        float64 vector in :data:`FEATURE_COLUMNS` order; pass it to
        :meth:`placement.model.DensityModel.predict`. No pandas on this path.
    """
    row = np.full(len(FEATURE_COLUMNS), np.nan)
    kind = _request_get(request, "file_kind")
    op = _request_get(request, "operator")
    row[0] = _KIND_CODE.get(str(kind), math.nan) if kind is not None else math.nan
    row[1] = _OP_CODE.get(str(op), math.nan) if op is not None else math.nan
    exp_size = _f(_request_get(request, "expected_size_bytes"))
    log_size = math.log10(max(exp_size, 1.0)) if math.isfinite(exp_size) else math.nan
    row[2] = log_size
    p_in = _f(_request_get(request, "n_partitions_in"))
    p_out = _f(_request_get(request, "n_partitions_out"))
    inp = _f(_request_get(request, "input_bytes"))
    row[3], row[4] = p_in, p_out
    row[5] = math.log10(max(inp, 1.0)) if math.isfinite(inp) else math.nan
    if math.isfinite(inp) and math.isfinite(p_out):  # as build_features: NaN without p_out
        row[6] = math.log10(max(inp / max(p_out, 1.0), 1.0))
    row[7] = _f(_request_get(request, "priority"))
    row[8] = _f(_request_get(request, "memory_pressure"))
    row[9] = _f(_request_get(request, "n_workers"))
    row[_FEATURE_INDEX["log_reuse_distance"]] = _signed_log(
        _f(_request_get(request, "reuse_distance"))
    )
    row[_FEATURE_INDEX["n_dependents"]] = _f(_request_get(request, "n_dependents"))
    if history is not None:
        hist = history.lookup(
            str(_request_get(request, "pipeline") or ""),
            str(_request_get(request, "stage") or ""),
            str(kind or ""),
            str(op or ""),
        )
    else:
        hist = {
            f"h_{lv}_{s}": (0.0 if s == "n" else math.nan) for lv in HISTORY_LEVELS for s in _STATS
        }
    for name, value in hist.items():
        j = _FEATURE_INDEX.get(name)
        if j is not None:
            row[j] = value
    derived: dict[str, Any] = {}
    _derived(log_size if math.isfinite(log_size) else math.nan, hist, derived)
    for name, value in derived.items():
        row[_FEATURE_INDEX[name]] = value
    return row
