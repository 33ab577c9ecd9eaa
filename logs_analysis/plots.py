"""Report figures (matplotlib, Agg backend), returned as base64 PNG data URIs.

Every figure is drawn from numbers already in the report (histograms, quantiles,
curves), so the HTML and ``report.json`` show the same data. Figures are closed after
encoding, so drawing many keeps memory flat.

Text taken from logs (pipeline, stage and file-kind names in legends and tick labels)
goes through :func:`_text`, which escapes ``$``: matplotlib would otherwise parse a name
such as ``etl_${ENV}_$(date +%F)`` as mathtext and fail to draw the figure.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "density_by_group",
    "importances",
    "predicted_vs_true",
    "quantile_ranges",
    "savings_curves",
    "shape_histograms",
    "skew_curve",
    "to_data_uri",
]

_PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def to_data_uri(fig: Any, dpi: int = 110) -> str:
    """Encode a figure as a ``data:image/png;base64,...`` URI and close it."""
    plt = _plt()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _text(label: str) -> str:
    """``label`` shown literally by matplotlib: each ``$`` escaped, so no mathtext is parsed.

    Matplotlib treats text with an even number of unescaped ``$`` as math and draws an
    escaped ``\\$`` as ``$``.
    """
    return str(label).replace("$", r"\$")


def _short(label: str, width: int = 40) -> str:
    """``label`` cut in the middle to ``width`` characters (paths keep their informative
    ends), escaped for matplotlib with :func:`_text`."""
    label = str(label)
    if len(label) > width:
        head = (width - 1) // 2
        label = label[:head] + "\u2026" + label[len(label) - (width - 1 - head) :]
    return _text(label)


def density_by_group(
    series: Sequence[tuple[str, np.ndarray, np.ndarray]], title: str, xlabel: str
) -> str:
    """Step histograms (share of files per 0.2 decade) of several groups on one log axis.

    ``series``: ``(label, log10 bin lower edges, counts)`` per group.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 3.8))
    for i, (label, lo, counts) in enumerate(series):
        if len(lo) == 0 or counts.sum() <= 0:
            continue
        coarse = np.floor(lo * 5.0 + 1e-9) / 5.0  # 0.2-decade bins for the eye
        edges, inv = np.unique(coarse, return_inverse=True)
        c = np.bincount(inv, weights=counts)
        full = np.arange(edges.min(), edges.max() + 0.4, 0.2)
        y = np.zeros(len(full))
        y[np.clip(np.round((edges - full[0]) / 0.2).astype(int), 0, len(full) - 1)] = c / c.sum()
        ax.step(
            10.0**full,
            y,
            where="post",
            color=_PALETTE[i % len(_PALETTE)],
            label=_short(label),
            lw=1.4,
        )
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of files per 0.2 decade")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3, which="both")
    if series:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return to_data_uri(fig)


def quantile_ranges(rows: Sequence[tuple[str, dict[str, float]]], title: str, xlabel: str) -> str:
    """One line per group: p5-p95 thin, p25-p75 thick, median dot (log axis)."""
    plt = _plt()
    n = max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * n + 1.2))
    floor = None
    for _, quantiles in rows:
        positive = [v for v in quantiles.values() if v > 0]
        if positive:
            floor = min(positive) if floor is None else min(floor, min(positive))
    floor = (floor or 1e-12) / 3.0
    for i, (_label, q) in enumerate(rows):
        y = n - 1 - i
        v = {k: max(val, floor) for k, val in q.items()}
        ax.plot([v["p5"], v["p95"]], [y, y], color="#9bb7d4", lw=2, solid_capstyle="butt")
        ax.plot([v["p25"], v["p75"]], [y, y], color="#1f77b4", lw=6, solid_capstyle="butt")
        ax.plot([v["p50"]], [y], "o", color="#d62728", ms=4)
    ax.set_yticks(range(n))
    ax.set_yticklabels([_short(r[0], 55) for r in reversed(rows)], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3, axis="x", which="both")
    return to_data_uri(fig)


def shape_histograms(
    panels: Sequence[tuple[str, str, Sequence[tuple[str, np.ndarray, np.ndarray]]]],
) -> str:
    """Side-by-side histograms (e.g. lifetime and size), each ``(title, xlabel, series)``."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.4), squeeze=False)
    for ax, (title, xlabel, series) in zip(axes[0], panels, strict=True):
        for i, (label, lo, counts) in enumerate(series):
            if len(lo) == 0 or counts.sum() <= 0:
                continue
            coarse = np.floor(lo * 5.0 + 1e-9) / 5.0
            edges, inv = np.unique(coarse, return_inverse=True)
            c = np.bincount(inv, weights=counts)
            ax.bar(
                10.0**edges,
                c / c.sum(),
                width=10.0 ** (edges + 0.2) - 10.0**edges,
                align="edge",
                alpha=0.55,
                color=_PALETTE[i % len(_PALETTE)],
                label=_short(label, 20),
            )
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("share of files per 0.2 decade")
        ax.set_title(title, fontsize=11)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return to_data_uri(fig)


def skew_curve(
    curves: Sequence[tuple[str, list[float], list[float]]], marks: Sequence[float] = (0.01, 0.05)
) -> str:
    """Cumulative share of operations against cumulative share of bytes, densest first."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for i, (label, x, y) in enumerate(curves):
        xs, ys = np.asarray(x), np.asarray(y)
        ok = xs > 0
        ax.plot(xs[ok], ys[ok], color=_PALETTE[i % len(_PALETTE)], lw=1.6, label=_short(label, 30))
    grid = np.logspace(-4, 0, 50)
    ax.plot(grid, grid, ls="--", color="grey", lw=1, label="I/O spread evenly")
    for m in marks:
        ax.axvline(m, color="#444", lw=0.8, ls=":")
        ax.text(m, 0.02, f" {100 * m:g}%", fontsize=8, color="#444")
    ax.set_xscale("log")
    ax.set_xlim(1e-4, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("share of bytes, densest files first")
    ax.set_ylabel("share of all I/O operations")
    ax.set_title("How much I/O the densest bytes carry", fontsize=11)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    return to_data_uri(fig)


def predicted_vs_true(
    true_ld: np.ndarray, pred_ld: np.ndarray, rho: float, *, max_points: int = 5000, seed: int = 0
) -> str:
    """Scatter of out-of-fold predicted against true log10 density (a sample of points)."""
    plt = _plt()
    ok = np.isfinite(true_ld) & np.isfinite(pred_ld)
    t, p = true_ld[ok], pred_ld[ok]
    if len(t) > max_points:
        idx = np.random.default_rng(seed).choice(len(t), max_points, replace=False)
        t, p = t[idx], p[idx]
    fig, ax = plt.subplots(figsize=(5.0, 4.4))
    ax.scatter(t, p, s=4, alpha=0.35, color="#1f77b4", edgecolors="none")
    if len(t):
        lo, hi = float(min(t.min(), p.min())), float(max(t.max(), p.max()))
        ax.plot([lo, hi], [lo, hi], ls="--", color="grey", lw=1)
    ax.set_xlabel("true log10 density (ops/byte/s)")
    ax.set_ylabel("predicted log10 density (out of fold)")
    title = (
        f"LightGBM, cross-validated: Spearman {rho:.2f}"
        if math.isfinite(rho)
        else "LightGBM, cross-validated"
    )
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    return to_data_uri(fig)


def importances(values: dict[str, float], top: int = 15) -> str:
    """Horizontal bars of the largest feature importances (share of gain)."""
    plt = _plt()
    items = list(values.items())[:top]
    fig, ax = plt.subplots(figsize=(5.6, 0.3 * max(len(items), 1) + 1.0))
    names = [_text(k) for k, _ in reversed(items)]
    ax.barh(names, [v for _, v in reversed(items)], color="#2ca02c")
    ax.set_xlabel("share of total gain")
    ax.set_title("Feature importance (creation-time features)", fontsize=11)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(alpha=0.3, axis="x")
    return to_data_uri(fig)


def savings_curves(
    budgets: Sequence[float],
    savings: Mapping[str, Sequence[float]],
    upper_bound: Sequence[float] = (),
) -> str:
    """Savings against all-HDD (share of TCO) per policy, against the SSD budget, with the
    most any placement could save (dotted) when ``upper_bound`` is given."""
    from placement.style import UPPER_BOUND, policy_styles

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    x = [100 * b for b in budgets]
    names = [name for name in savings if name != "all-hdd"]
    # the styles of `dataplane placement evaluate`'s plot: a policy looks the same in both
    styles = policy_styles([*names, UPPER_BOUND])
    for name in names:
        values = savings[name]
        ax.plot(x, [100 * v for v in values], ms=4, label=_text(name), **styles[name].kwargs())
    if upper_bound:
        line = styles[UPPER_BOUND].kwargs()
        ax.plot(x, [100 * v for v in upper_bound], label="upper bound (LP)", **line)
    ax.set_xscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:g}%" for v in x])
    ax.set_xlabel("SSD budget (share of peak live bytes)")
    ax.set_ylabel("TCO saved vs all-HDD (%)")
    ax.set_title("Savings of each placement policy", fontsize=11)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, frameon=False)
    return to_data_uri(fig)


def savings_by_kind(parts: Mapping[str, Mapping[str, float]], budget: float) -> str:
    """Where each policy's savings come from at one SSD budget: a horizontal bar per
    policy, stacked by file kind (points of the all-HDD TCO)."""
    plt = _plt()
    names = [n for n in parts if n != "all-hdd"]
    kinds = sorted({k for n in names for k in parts[n]})
    fig, ax = plt.subplots(figsize=(7.0, 0.45 * len(names) + 1.4))
    left = [0.0] * len(names)
    for i, kind in enumerate(kinds):
        widths = [100 * parts[n].get(kind, 0.0) for n in names]
        ax.barh(
            [_text(n) for n in names],
            widths,
            left=left,
            color=_PALETTE[i % len(_PALETTE)],
            label=_text(kind),
        )
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel(f"TCO saved vs all-HDD at {100 * budget:g}% SSD (%), by file kind")
    ax.set_title("Where each policy's savings come from", fontsize=11)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(
        fontsize=8,
        frameon=False,
        ncol=min(len(kinds), 4),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
    )
    return to_data_uri(fig)
