"""Distributions of I/O density, lifetime and size, from the aggregate's histograms.

Quantiles are read back from log-scale histograms (:mod:`logs_analysis.histogram`):
within a factor ``10**0.02`` (~4.7%) of the exact value. Densities are in operations
per byte per second, lifetimes in seconds, sizes in bytes; a quantile that falls among
zero values (files never read or written, density 0) is 0.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from logs_analysis.aggregate import Aggregate
from logs_analysis.histogram import ZERO_BIN, Histogram, quantiles_from_counts

__all__ = ["QUANTILES", "UNITS", "GroupDistribution", "distribution_table"]

#: Quantiles reported.
QUANTILES: tuple[float, ...] = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
#: Unit of each variable.
UNITS = {"density": "operations per byte per second", "lifetime": "seconds", "size": "bytes"}


@dataclasses.dataclass
class GroupDistribution:
    """One key's distribution of a variable.

    Attributes
    ----------
    key : list of str
        The grouping's values (e.g. ``[pipeline, stage]``); empty for the whole log.
    rows : int
        Files.
    bytes : int
        Sum of sizes, in bytes.
    ops : int or None
        Sum of read and write operations (density only).
    quantiles : dict
        ``"p50" -> value`` in the variable's unit.
    decades : float
        ``log10(p99 / p1)`` over the files with a value above zero (for density: the files
        with I/O), p1 and p99 taken among those files only: orders of magnitude the middle
        98% of them spans (NaN when fewer than two such files).
    share_rows, share_bytes, share_ops : float
        Shares of the whole log.
    """

    key: list[str]
    rows: int
    bytes: int
    ops: int | None
    quantiles: dict[str, float]
    decades: float
    share_rows: float
    share_bytes: float
    share_ops: float | None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["decades"] = None if not math.isfinite(self.decades) else self.decades
        return out


def _label(q: float) -> str:
    return f"p{100 * q:g}"


def distribution_table(
    agg: Aggregate, variable: str, grouping: str, *, top: int | None = 30
) -> list[GroupDistribution]:
    """Distribution of ``variable`` for each key of ``grouping``, largest (by rows) first.

    Parameters
    ----------
    agg : Aggregate
    variable : str
        ``density``, ``lifetime`` or ``size``.
    grouping : str
        A grouping name of :data:`~logs_analysis.aggregate.DENSITY_GROUPINGS` (density) or
        :data:`~logs_analysis.aggregate.SHAPE_GROUPINGS`.
    top : int or None
        Keep the ``top`` largest keys (None: all).
    """
    hist: Histogram = agg.histogram(variable, grouping)
    total_rows = max(agg.totals.get("rows", 0.0), 1.0)
    total_bytes = max(agg.totals.get("bytes", 0.0), 1.0)
    total_ops = max(agg.totals.get("ops", 0.0), 1.0)
    out: list[GroupDistribution] = []
    frame = hist.frame
    if not len(frame):
        return out
    groups = frame.groupby("key", sort=False, observed=True)
    sums = (
        groups[["n", "bytes"] + (["ops"] if "ops" in frame.columns else [])]
        .sum()
        .sort_values("n", ascending=False)
    )
    keys = list(sums.index if top is None else sums.index[:top])
    for key in keys:
        part = groups.get_group(key)
        bins, counts = part["bin"].to_numpy(), part["n"].to_numpy()
        qs = quantiles_from_counts(bins, counts, QUANTILES)
        values = {
            _label(q): (0.0 if v == -math.inf else float(10.0**v))
            for q, v in zip(QUANTILES, qs, strict=True)
        }
        row = sums.loc[key]
        ops = int(round(float(row["ops"]))) if "ops" in row.index else None
        out.append(
            GroupDistribution(
                key=Histogram.split_key(str(key)),
                rows=int(row["n"]),
                bytes=int(round(float(row["bytes"]))),
                ops=ops,
                quantiles=values,
                decades=_decades(bins, counts),
                share_rows=float(row["n"]) / total_rows,
                share_bytes=float(row["bytes"]) / total_bytes,
                share_ops=None if ops is None else ops / total_ops,
            )
        )
    return out


def _decades(bins: np.ndarray, counts: np.ndarray) -> float:
    """``log10(p99 / p1)`` of the values above zero (bins other than ``ZERO_BIN``), NaN when
    fewer than two such values."""
    positive = bins != ZERO_BIN
    if counts[positive].sum() < 2:
        return math.nan
    lo, hi = quantiles_from_counts(bins[positive], counts[positive], (0.01, 0.99))
    return float(hi - lo) if math.isfinite(lo) and math.isfinite(hi) else math.nan


def histogram_series(
    agg: Aggregate, variable: str, grouping: str, key: str = "", *, weight: str = "n"
) -> tuple[np.ndarray, np.ndarray]:
    """(log10 bin lower edges, weights) of one key's histogram, zero bin left out."""
    from logs_analysis.histogram import bin_lower

    part = agg.histogram(variable, grouping).of(key)
    part = part[part["bin"] >= 0]
    return bin_lower(part["bin"].to_numpy()), part[weight].to_numpy(dtype=np.float64)
