"""What learned placement would save: the placement simulator's savings curve.

The rows cross-validated by :mod:`.predictability` are replayed through
:func:`placement.simulator.simulate` with each policy of :mod:`placement.policy`, at SSD
budgets that are shares of the replayed rows' peak live bytes:

============================  =====================================================
policy                        fed
============================  =====================================================
``all-hdd``                   nothing (the baseline every saving is measured against)
``first-fit``                 nothing: SSD while it fits
``small-files-first``         sizes, under the adaptive threshold
``stage-history``             the (pipeline, stage) mean density of earlier runs
``lightgbm``                  the out-of-fold LightGBM predictions
``oracle``                    the true densities and the future (a greedy packing)
============================  =====================================================

Beside them, the most any placement of the rows could save at each budget
(:func:`placement.bound.savings_upper_bound`, a linear-programming relaxation: at or
above the oracle), so a reader sees how much room any policy has left. The replays at
each budget are :func:`placement.replay.replay_budgets`, the loop the placement
evaluation runs too.

Costs are those of :class:`placement.cost.CostModel` (defaults and sources documented
there). When it prices SSD wear or HDD transfer, the break-even test of the density-fed
policies takes each file's expected lifetime from its (pipeline, stage) history, as the
placement evaluation does (:func:`placement.evaluate.stage_history_lifetime`).

Replays are Python event loops (a few microseconds per file), so at most ``max_rows``
rows are replayed: whole runs, taken in an order set by a hash of ``run_id`` while they
fit (a run that would overshoot is passed over for the next). With fewer than 5 runs, or
when whole runs fill less than half of ``max_rows``, ``max_rows`` rows are drawn at random
instead.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from logs_analysis.analyses import Unavailable
from logs_analysis.errors import AnalysisConfigError
from placement.cost import DEFAULT_BUDGETS  # numpy only: no simulator, no LightGBM

__all__ = ["DEFAULT_BUDGETS", "HEURISTICS", "SavingsResult", "savings_curve"]

#: The policies compared with learned placement as heuristics (as
#: ``placement.evaluate.HEURISTICS``, not imported here: that module loads LightGBM).
HEURISTICS: tuple[str, ...] = ("first-fit", "small-files-first", "stage-history")


@dataclasses.dataclass
class SavingsResult:
    """Savings per policy and budget.

    Attributes
    ----------
    budgets : list of float
        SSD budgets as shares of ``peak_live_bytes``.
    peak_live_bytes : int
        Most bytes alive at once among the replayed rows.
    savings : dict
        Policy -> list of savings against all-HDD (share of the all-HDD TCO), per budget.
    ssd_io_share : dict
        Policy -> list of the share of operations served from SSD, per budget.
    simulations : list of dict
        Every replay's :meth:`placement.simulator.SimulationResult.to_dict`, with its budget.
    rows : int
        Rows replayed.
    all_hdd_tco_usd : float
        TCO of the replayed rows on HDD alone, US dollars.
    cost_model : dict
    wall_s : float
    upper_bound : list of float
        The most any placement could save (share of the all-HDD TCO), per budget.
    savings_by_kind : dict
        Policy -> per budget, file kind -> the TCO its files of that kind saved on SSD, as
        a share of the all-HDD TCO (sums to ``savings``; where the savings come from).
    """

    budgets: list[float]
    peak_live_bytes: int
    savings: dict[str, list[float]]
    ssd_io_share: dict[str, list[float]]
    simulations: list[dict[str, Any]]
    rows: int
    all_hdd_tco_usd: float
    cost_model: dict[str, Any]
    wall_s: float = 0.0
    upper_bound: list[float] = dataclasses.field(default_factory=list)
    savings_by_kind: dict[str, list[dict[str, float]]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def best_heuristic(self) -> list[dict[str, Any]]:
        """Per budget, the heuristic of :data:`HEURISTICS` that saved most: ``policy``, its
        ``savings`` (share of the all-HDD TCO) and ``lightgbm_ratio``, LightGBM's savings
        as a multiple of it (``None`` when it saved nothing)."""
        out: list[dict[str, Any]] = []
        names = [h for h in HEURISTICS if h in self.savings]
        for i in range(len(self.budgets)):
            if not names:
                out.append({"policy": None, "savings": None, "lightgbm_ratio": None})
                continue
            best = max(names, key=lambda h: self.savings[h][i])
            value = self.savings[best][i]
            lgbm = self.savings.get("lightgbm", [math.nan] * len(self.budgets))[i]
            ratio = lgbm / value if value > 0 and math.isfinite(lgbm) else None
            out.append({"policy": best, "savings": value, "lightgbm_ratio": ratio})
        return out

    def capture(self, policy: str = "lightgbm") -> list[float | None]:
        """``policy``'s share of the oracle's savings at each budget."""
        out: list[float | None] = []
        for p, o in zip(self.savings[policy], self.savings["oracle"], strict=True):
            out.append(p / o if o > 0 else None)
        return out


def _subset(df: pd.DataFrame, max_rows: int, seed: int) -> np.ndarray:
    """Mask of at most ``max_rows`` rows to replay (see the module docstring)."""
    if len(df) <= max_rows:
        return np.ones(len(df), dtype=bool)
    runs = df["run_id"].astype(str)
    unique = runs.unique()
    if len(unique) >= 5:
        h = pd.util.hash_pandas_object(pd.Series(unique), index=False).to_numpy()
        counts = runs.value_counts()
        keep, total = [], 0
        for i in np.argsort(h, kind="stable"):
            n = int(counts[unique[i]])
            if total + n <= max_rows:  # whole runs while they fit
                keep.append(unique[i])
                total += n
                if total == max_rows:
                    break
        if 2 * total >= max_rows:
            return runs.isin(keep).to_numpy()
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(df), dtype=bool)
    mask[rng.choice(len(df), max_rows, replace=False)] = True
    return mask


def _stage_history_lifetime(table: pd.DataFrame) -> np.ndarray:
    """Expected lifetime per row of cleaned ``table`` (seconds, ``NaN`` without history):
    the geometric mean lifetime of its (pipeline, stage) in the runs of ``table`` finished
    before it, as :func:`placement.evaluate.evaluate` gives the break-even test. Imported
    here, not at module import: the evaluation module imports LightGBM."""
    from placement.evaluate import stage_history_lifetime
    from placement.features import HistoryStore, build_features

    features = build_features(table, HistoryStore.from_table(table))
    return np.asarray(stage_history_lifetime(features), np.float64)


def savings_curve(
    table: pd.DataFrame,
    predictions: np.ndarray,
    stage_history: np.ndarray,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    *,
    max_rows: int = 20_000,
    seed: int = 0,
    cost_model: Any = None,
    expected_lifetime: np.ndarray | None = None,
    on_replay: Callable[[], None] | None = None,
) -> SavingsResult | Unavailable:
    """Replay ``table`` (cleaned rows) through every policy at every budget.

    Parameters
    ----------
    table : pandas.DataFrame
        Rows cleaned by :func:`placement.features.clean_table` (e.g.
        :attr:`PredictabilityResult.table`).
    predictions, stage_history : numpy.ndarray
        Predicted log10 density per row (LightGBM, out of fold) and the stage-history estimate.
    budgets : sequence of float
        SSD budgets, shares of peak live bytes in (0, 1].
    max_rows : int
        Most rows replayed: whole runs while they fit, else this many rows drawn at random
        (see the module docstring).
    cost_model : placement.cost.CostModel, optional
        Prices; default :class:`placement.cost.CostModel()`.
    expected_lifetime : numpy.ndarray, optional
        Expected lifetime per row of ``table`` in seconds, known at the file's creation
        (``NaN`` where unknown), for the break-even test when ``cost_model`` prices wear
        or transfer. Default: :func:`placement.evaluate.stage_history_lifetime` of
        ``table``'s features (history of earlier runs in ``table``), computed only then.
    on_replay : callable, optional
        Called after each replay (progress).
    """
    try:
        from placement.cost import CostModel
        from placement.features import estimated_sizes
        from placement.replay import replay_budgets
        from placement.simulator import Trace, peak_live_bytes, policy_roster, savings_by_group
    except ImportError as exc:
        return Unavailable(f"placement's simulator or policies cannot be imported ({exc})")
    budgets = [float(b) for b in budgets]
    if not budgets or any(not 0 < b <= 1 for b in budgets):
        raise AnalysisConfigError(f"budgets={budgets!r} must be shares in (0, 1]")
    start = time.perf_counter()
    cost_model = cost_model or CostModel()
    if expected_lifetime is not None and np.shape(expected_lifetime) != (len(table),):
        raise AnalysisConfigError(
            f"expected_lifetime has shape {np.shape(expected_lifetime)} but table has "
            f"{len(table)} rows; give one lifetime (seconds, NaN if unknown) per row"
        )
    if expected_lifetime is None and cost_model.prices_lifetime:
        try:
            expected_lifetime = _stage_history_lifetime(table)
        except ImportError as exc:
            return Unavailable(f"placement's features or evaluation cannot be imported ({exc})")
    mask = _subset(table, max_rows, seed)
    df = table.loc[mask].reset_index(drop=True)
    pred = np.asarray(predictions, np.float64)[mask]
    hist = np.asarray(stage_history, np.float64)[mask]
    life = None if expected_lifetime is None else np.asarray(expected_lifetime, np.float64)[mask]
    # policies reserve what each file is expected to reach, known at its creation
    trace = Trace.from_clean(df, known_size=estimated_sizes(df))
    peak = peak_live_bytes(trace)
    if peak <= 0:
        return Unavailable("the replayed rows hold no bytes (every size is 0)")

    makers = policy_roster(
        trace, cost_model, stage_history=hist, lightgbm=pred, expected_lifetime=life
    )
    replays = replay_budgets(
        trace, makers, budgets, cost_model, keep_tiers=True, on_replay=on_replay
    )
    kinds = df["file_kind"].astype(str).to_numpy()
    savings: dict[str, list[float]] = {name: [] for name, _, _ in makers}
    io_share: dict[str, list[float]] = {name: [] for name, _, _ in makers}
    by_kind: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in makers}
    sims = []
    all_hdd = math.nan
    for replay in replays:
        for name, result in replay.results.items():
            all_hdd = result.all_hdd_tco_usd
            savings[name].append(float(result.savings_fraction))
            io_share[name].append(float(result.ssd_io_share))
            by_kind[name].append(savings_by_group(trace, result.tiers, kinds, cost_model))
            sims.append({**result.to_dict(), "budget": replay.budget})
    return SavingsResult(
        budgets=budgets,
        peak_live_bytes=int(peak),
        savings=savings,
        ssd_io_share=io_share,
        simulations=sims,
        rows=len(df),
        all_hdd_tco_usd=float(all_hdd),
        cost_model=cost_model.to_dict(),
        wall_s=time.perf_counter() - start,
        upper_bound=[math.nan if r.upper_bound is None else r.upper_bound for r in replays],
        savings_by_kind=by_kind,
    )
