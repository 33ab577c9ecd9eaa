"""Skew: how much of all I/O the densest files carry.

Files are ranked by I/O density, densest first; walking down that ranking, the share of
all operations carried by the first 1% (5%) of **bytes** is the skew at 1% (5%). If I/O
were spread evenly over bytes it would be 1% (5%); a value near 100% means a small SSD
holding the densest bytes would serve almost all of the I/O. The same is reported per
byte-second (the SSD capacity a file occupies for its life), which is the resource an
SSD budget actually limits.

Computed from the density histogram (bins of 0.02 decades), splitting the boundary bin
in proportion: exact up to the ordering of files inside one bin.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from logs_analysis.aggregate import Aggregate

__all__ = ["SHARES", "SkewResult", "skew", "skew_by", "skew_of"]

SHARES: tuple[float, ...] = (0.01, 0.05)


@dataclasses.dataclass
class SkewResult:
    """Operation share carried by the densest shares of bytes (and of byte-seconds).

    Attributes
    ----------
    by_bytes : dict
        ``"1%" -> share of operations`` carried by the densest 1% of bytes.
    by_byte_seconds : dict
        The same per byte-second of SSD occupancy.
    curve : dict
        ``x`` (cumulative share of bytes, densest first) and ``y`` (cumulative share of
        operations), for the Lorenz-style plot.
    """

    by_bytes: dict[str, float]
    by_byte_seconds: dict[str, float]
    curve: dict[str, list[float]]

    def to_dict(self) -> dict[str, Any]:
        return {"by_bytes": self.by_bytes, "by_byte_seconds": self.by_byte_seconds}


def _share_at(frame: pd.DataFrame, capacity: str, share: float) -> float:
    cap = frame[capacity].to_numpy(np.float64)
    ops = frame["ops"].to_numpy(np.float64)
    total_cap, total_ops = cap.sum(), ops.sum()
    if total_cap <= 0 or total_ops <= 0:
        return float("nan")
    cum = np.cumsum(cap)
    target = share * total_cap
    k = int(np.searchsorted(cum, target, side="left"))
    k = min(k, len(cap) - 1)
    before_cap = cum[k - 1] if k else 0.0
    before_ops = ops[:k].sum()
    frac = (target - before_cap) / cap[k] if cap[k] > 0 else 0.0
    return float((before_ops + min(max(frac, 0.0), 1.0) * ops[k]) / total_ops)


def skew_of(frame: pd.DataFrame, shares: Sequence[float] = SHARES) -> SkewResult:
    """Skew of one density histogram frame (``bin, bytes, ops, byte_s``)."""
    f = frame.groupby("bin", sort=False)[["bytes", "ops", "byte_s"]].sum().reset_index()
    f = f.sort_values("bin", ascending=False).reset_index(drop=True)
    by_bytes = {f"{100 * s:g}%": _share_at(f, "bytes", s) for s in shares}
    by_bs = {f"{100 * s:g}%": _share_at(f, "byte_s", s) for s in shares}
    total_b, total_o = f["bytes"].sum(), f["ops"].sum()
    x = (
        np.concatenate([[0.0], np.cumsum(f["bytes"].to_numpy()) / total_b])
        if total_b > 0
        else np.array([0.0])
    )
    y = (
        np.concatenate([[0.0], np.cumsum(f["ops"].to_numpy()) / total_o])
        if total_o > 0
        else np.zeros_like(x)
    )
    if len(x) > 400:  # thin for the plot
        idx = np.unique(np.linspace(0, len(x) - 1, 400).astype(int))
        x, y = x[idx], y[idx]
    return SkewResult(by_bytes, by_bs, {"x": x.tolist(), "y": y.tolist()})


def skew(agg: Aggregate, shares: Sequence[float] = SHARES) -> SkewResult:
    """Skew of the whole log."""
    return skew_of(agg.histogram("density", "overall").frame, shares)


def skew_by(
    agg: Aggregate, grouping: str = "pipeline", shares: Sequence[float] = SHARES, top: int = 30
) -> dict[str, dict[str, Any]]:
    """Skew of each key of a density grouping (largest keys first)."""
    frame = agg.histogram("density", grouping).frame
    if not len(frame):
        return {}
    order = frame.groupby("key", observed=True)["n"].sum().sort_values(ascending=False).index[:top]
    return {str(k): skew_of(frame[frame["key"] == k], shares).to_dict() for k in order}
