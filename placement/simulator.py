"""Trace simulator: replays a placement log through a policy and prices the outcome.

Each log row is one file, alive over ``[created_at, deleted_at)`` (a lifetime is floored
at :data:`~placement.schema.MIN_LIFETIME_S`). The replay walks the creations and
deletions in time order (deletions first at equal times, so a freed byte can be reused
at once) and calls ``policy.place`` / ``policy.release``. Files are named by their row
position. A policy decides at creation, so ``place`` is told the size known then, the
log's ``expected_size_bytes`` (the final ``size_bytes`` only where no expected size was
logged), and reserves that much in its own ledger, as the live service does; a shuffle
file that grows after its creation is not judged by its final size. Only a policy that
sets ``knows_outcome = True`` (the oracle, the limit) is told the final size.
The simulator keeps its own SSD ledger against ``ssd_capacity_bytes`` (each file
reserves its final ``size_bytes``): a policy that asks for SSD when the file does not
fit is overruled to HDD and counted in :attr:`SimulationResult.overruled`, so no policy
can exceed the budget. After each SSD request the replay tells a policy that has a
``settle`` method where the file went and its final size, as the live service's ledger
learns real bytes from worker reports, so a policy's occupancy follows real bytes while
its decisions use only what was known at creation.

What is reported (:class:`SimulationResult`):

* **TCO**: the sum of each file's cost on its tier (:class:`~placement.cost.CostModel`),
  and the savings against placing everything on HDD (dollars and share);
* **SSD bytes and I/O share**: files, bytes and byte-seconds placed on SSD, peak SSD
  bytes, and the share of all operations served by SSD;
* **HDD overload**: the HDD fleet (``hdd_drives``, by default the drives the peak live
  bytes need, at least one) serves ``hdd_drives * hdd_iops_per_drive`` operations per
  second; each HDD file asks for ``ops / lifetime`` over its life. The seconds where
  the demand is above that, and the operations above it, are counted (a sweep over
  sorted events in numpy).

Speed: the event loop is Python over numpy-sorted events; pricing and the overload
sweep are vectorized and ``AllHDDPolicy`` skips the loop. Measured on a 2-core machine
(``benchmarks/placement.py``): ~0.8 M rows/s with first-fit and ~0.14 M rows/s with
the adaptive threshold, so 10 M rows replay in about 15 s and 75 s; memory is a few
Python lists of the row count. The oracle's packing (:func:`placement.policy.oracle_admissions`)
is the slowest part, ~20 s per million files.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from placement.cost import CostModel
from placement.errors import PlacementConfigError
from placement.features import RowIssues, clean_table
from placement.policy import (
    AdaptiveThresholdPolicy,
    AllHDDPolicy,
    FirstFitPolicy,
    OraclePolicy,
    PlacementPolicy,
    SmallFilesFirstPolicy,
    StageHistoryPolicy,
    check_capacity,
    oracle_admissions,
)
from placement.schema import MIN_LIFETIME_S, MIN_SIZE_BYTES
from placement.tier import Tier

__all__ = [
    "PolicyMaker",
    "SimulationResult",
    "Trace",
    "check_overlap",
    "overlap_runs",
    "peak_live_bytes",
    "policy_roster",
    "savings_by_group",
    "simulate",
]

#: A policy to replay: its name, a constructor taking the SSD capacity in bytes, and the
#: predicted log10 densities it is fed (``None`` for policies that need none).
PolicyMaker = tuple[str, Callable[[int], PlacementPolicy], "np.ndarray | None"]


@dataclasses.dataclass(frozen=True)
class Trace:
    """A log table as the arrays a replay needs (row order kept).

    Attributes are numpy arrays of length ``n``: ``created`` and ``deleted`` (seconds;
    ``deleted`` already floored to ``created + MIN_LIFETIME_S``), ``size`` (bytes, as
    logged), ``ops`` (read + write operations), ``io_bytes`` (read + written bytes) and
    ``write_bytes``; ``known_size`` (bytes) is the size a policy is told at the file's
    creation: by default ``expected_size_bytes`` where the log has one (0 included), else
    ``size`` (see :meth:`from_clean`).

    Every file must live a positive time, ``deleted > created``: the replay handles
    deletions before creations at equal times, so a file deleted when it is created
    would never be released. :meth:`from_table` and :meth:`from_clean` floor lifetimes
    at :data:`~placement.schema.MIN_LIFETIME_S`; a Trace built directly is checked, not
    floored.

    Raises
    ------
    PlacementConfigError
        (A :class:`ValueError`.) If some file has ``deleted <= created`` (or a ``NaN``
        time).
    """

    created: np.ndarray
    deleted: np.ndarray
    size: np.ndarray
    ops: np.ndarray
    io_bytes: np.ndarray
    write_bytes: np.ndarray
    issues: RowIssues
    known_size: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.known_size is None:
            object.__setattr__(self, "known_size", self.size)
        with np.errstate(invalid="ignore"):
            bad = ~(np.asarray(self.deleted) > np.asarray(self.created))  # NaN included
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise PlacementConfigError(
                f"{int(bad.sum())} of {len(bad)} files have deleted <= created (first: row "
                f"{first}, created={float(self.created[first])!r}, "
                f"deleted={float(self.deleted[first])!r}); deleted must be > created: floor "
                "each lifetime at placement.schema.MIN_LIFETIME_S as Trace.from_table does"
            )

    @classmethod
    def from_table(cls, table: pa.Table | pd.DataFrame) -> Trace:
        """Trace of ``table``; unusable rows are dropped and counted in ``issues``."""
        df, issues = clean_table(table)
        return cls.from_clean(df, issues)

    @classmethod
    def from_clean(
        cls,
        df: pd.DataFrame,
        issues: RowIssues | None = None,
        *,
        known_size: np.ndarray | None = None,
    ) -> Trace:
        """Trace of rows already passed through :func:`~placement.features.clean_table`.

        ``known_size`` (bytes per row, ``NaN`` where unknown) overrides the size
        policies are told at creation, e.g. :func:`placement.features.estimated_sizes`;
        rows it leaves unknown fall back to the expected size, then the final size.
        """
        issues = issues or RowIssues(total_rows=len(df))
        created = df["created_at"].to_numpy(np.float64)
        deleted = np.maximum(df["deleted_at"].to_numpy(np.float64), created + MIN_LIFETIME_S)
        size = df["size_bytes"].to_numpy(np.int64)
        ops = df["read_ops"].to_numpy(np.float64) + df["write_ops"].to_numpy(np.float64)
        write_bytes = df["write_bytes"].to_numpy(np.float64)
        io_bytes = df["read_bytes"].to_numpy(np.float64) + write_bytes
        known = size
        if "expected_size_bytes" in df.columns:
            expected = pd.to_numeric(df["expected_size_bytes"], errors="coerce").to_numpy(
                np.float64, na_value=np.nan
            )
            # a logged 0 is a known size too: only a missing one falls back to the outcome
            known = np.where(expected >= 0, np.nan_to_num(expected), size).astype(np.int64)
        if known_size is not None:
            given = np.asarray(known_size, dtype=np.float64)
            if given.shape != size.shape:
                raise PlacementConfigError(
                    f"known_size has shape {given.shape} but the table has {len(size)} rows; "
                    "give one size per row (NaN where unknown)"
                )
            ok = np.isfinite(given) & (given >= 0)
            # clipped below 2**62 bytes: a larger estimate would wrap around in int64
            given = np.minimum(np.round(np.nan_to_num(given)), float(2**62))
            known = np.where(ok, given, known).astype(np.int64)
        return cls(created, deleted, size, ops, io_bytes, write_bytes, issues, known)

    def __len__(self) -> int:
        return len(self.created)

    @property
    def lifetime(self) -> np.ndarray:
        return self.deleted - self.created

    @property
    def density(self) -> np.ndarray:
        """True I/O density, operations per byte per second."""
        return self.ops / (np.maximum(self.size, MIN_SIZE_BYTES) * self.lifetime)

    def costs(self, cost_model: CostModel) -> tuple[np.ndarray, np.ndarray]:
        """(SSD cost, HDD cost) of each file, US dollars."""
        size = np.maximum(self.size, MIN_SIZE_BYTES).astype(np.float64)
        life = self.lifetime
        return (
            cost_model.ssd_cost(size, life, self.write_bytes),
            cost_model.hdd_cost(size, life, self.ops, self.io_bytes),
        )

    def saving_density(self, cost_model: CostModel) -> np.ndarray:
        """US dollars saved on SSD per byte-second of SSD each file holds (the oracle's rank)."""
        ssd, hdd = self.costs(cost_model)
        return (hdd - ssd) / (np.maximum(self.size, MIN_SIZE_BYTES) * self.lifetime)

    def oracle(self, ssd_capacity_bytes: int, cost_model: CostModel | None = None) -> OraclePolicy:
        """The oracle of this trace (:func:`~placement.policy.oracle_admissions` ranked by
        :meth:`saving_density`, profitable files only)."""
        value = self.saving_density(cost_model or CostModel())
        mask = oracle_admissions(
            self.created, self.deleted, self.size, value, ssd_capacity_bytes, min_value=0.0
        )
        return OraclePolicy(np.flatnonzero(mask).tolist(), ssd_capacity_bytes)


def _sweep(
    created: np.ndarray, deleted: np.ndarray, amount: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Level of ``sum(amount)`` over live intervals: (event times, level after each event)."""
    times = np.concatenate([deleted, created])
    delta = np.concatenate([-amount, amount]).astype(np.float64)
    kind = np.concatenate([np.zeros(len(deleted)), np.ones(len(created))])
    order = np.lexsort((kind, times))
    return times[order], np.cumsum(delta[order])


def check_overlap(k: Any) -> float:
    """``k`` as runs at a time for :func:`overlap_runs` (``inf``: every run at once).

    Raises
    ------
    ValueError
        If ``k`` is not a positive number.
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not k > 0:
        raise PlacementConfigError(f"overlap k={k!r} must be a positive number of runs at a time")
    return float(k)


def overlap_runs(table: pd.DataFrame, k: float) -> pd.DataFrame:
    """The log with its runs replayed as a shared cluster running ``k`` at a time would.

    The workload collector runs pipelines one after another. Here each run keeps its
    files' timing, but runs start ``k`` times as often: in their original order, run
    ``j`` starts at the sum of the durations (first creation to last deletion, seconds)
    of the runs before it, divided by ``k``, so about ``k`` runs are live at once.
    ``k = 1`` only closes the gaps between runs. Only ``created_at`` and ``deleted_at``
    change; history features then count only the runs finished before each file, as
    a live service would.

    Raises
    ------
    ValueError
        If ``k`` is not a positive number.
    """
    k = check_overlap(k)
    runs = table.groupby("run_id").agg(start=("created_at", "min"), end=("deleted_at", "max"))
    runs = runs.sort_values("start")
    duration = (runs["end"] - runs["start"]).to_numpy(np.float64)
    starts = runs["start"].iloc[0] + np.concatenate([[0.0], np.cumsum(duration[:-1])]) / k
    shift = table["run_id"].map(pd.Series(starts - runs["start"].to_numpy(), index=runs.index))
    return table.assign(
        created_at=table["created_at"] + shift, deleted_at=table["deleted_at"] + shift
    )


def peak_live_bytes(table: pa.Table | pd.DataFrame | Trace) -> int:
    """Largest number of bytes alive at once, in bytes (the SSD a budget is a share of)."""
    trace = table if isinstance(table, Trace) else Trace.from_table(table)
    if len(trace) == 0:
        return 0
    _, level = _sweep(trace.created, trace.deleted, trace.size.astype(np.float64))
    return round(level.max())


@dataclasses.dataclass
class SimulationResult:
    """Outcome of one replay (money in US dollars, sizes in bytes, times in seconds)."""

    policy: str
    ssd_capacity_bytes: int
    n_files: int
    tco_usd: float
    all_hdd_tco_usd: float
    ssd_files: int
    ssd_bytes: int
    ssd_byte_seconds_share: float
    ssd_io_share: float
    peak_ssd_bytes: int
    overruled: int
    hdd_drives: int
    hdd_iops_supply: float
    hdd_peak_iops_demand: float
    hdd_overload_s: float
    hdd_overload_ops: float
    duration_s: float
    wall_s: float
    dropped_rows: int = 0
    tiers: np.ndarray | None = dataclasses.field(default=None, repr=False)

    @property
    def savings_usd(self) -> float:
        """TCO saved against all-HDD, US dollars."""
        return self.all_hdd_tco_usd - self.tco_usd

    @property
    def savings_fraction(self) -> float:
        """Savings as a share of the all-HDD TCO."""
        return self.savings_usd / self.all_hdd_tco_usd if self.all_hdd_tco_usd > 0 else 0.0

    @property
    def hdd_overload_time_share(self) -> float:
        """Share of the replay's duration the HDDs were asked for more than they give."""
        return self.hdd_overload_s / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (without the per-file tiers)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "tiers"}
        out["savings_usd"] = self.savings_usd
        out["savings_fraction"] = self.savings_fraction
        out["hdd_overload_time_share"] = self.hdd_overload_time_share
        return out


def savings_by_group(
    trace: Trace, on_ssd: np.ndarray | None, groups: np.ndarray, cost_model: CostModel
) -> dict[str, float]:
    """Where a placement's savings come from: per group of files (e.g. file kind), the TCO
    saved against all-HDD by the group's files on SSD, as a share of the whole trace's
    all-HDD TCO (the shares sum to the replay's ``savings_fraction``: the TCO is a sum
    over files).

    Parameters
    ----------
    trace : Trace
        The files replayed.
    on_ssd : numpy.ndarray
        Per file, whether it went to SSD (:attr:`SimulationResult.tiers` of a replay
        with ``keep_tiers=True``).
    groups : numpy.ndarray
        Per file, its group's label.
    cost_model : CostModel
        The replay's prices.

    Raises
    ------
    ValueError
        If ``on_ssd`` is ``None`` (a replay without ``keep_tiers=True``) or either array
        does not hold one entry per file.
    """
    if on_ssd is None:
        raise PlacementConfigError(
            "on_ssd is None: the replay kept no per-file tiers; simulate with keep_tiers=True"
        )
    on_ssd = np.asarray(on_ssd).astype(bool)
    groups = np.asarray(groups).astype(str)
    if on_ssd.shape != (len(trace),) or groups.shape != (len(trace),):
        raise PlacementConfigError(
            f"on_ssd {on_ssd.shape} and groups {groups.shape} need one entry per file of "
            f"the trace ({len(trace)})"
        )
    ssd_cost, hdd_cost = trace.costs(cost_model)
    all_hdd = float(hdd_cost.sum())
    saved = np.where(on_ssd, hdd_cost - ssd_cost, 0.0)
    if all_hdd <= 0:
        return {str(g): 0.0 for g in np.unique(groups)}
    per = pd.Series(saved).groupby(groups).sum() / all_hdd
    return {str(g): float(v) for g, v in per.items()}


def simulate(
    table: pa.Table | pd.DataFrame | Trace,
    policy: PlacementPolicy,
    cost_model: CostModel | None = None,
    ssd_capacity_bytes: int | None = None,
    *,
    predictions: np.ndarray | None = None,
    hdd_drives: int | None = None,
    progress: bool = False,
    keep_tiers: bool = False,
) -> SimulationResult:
    """Replay ``table`` through ``policy`` and price it.

    Parameters
    ----------
    table : pyarrow.Table, pandas.DataFrame or Trace
        Log rows (invalid rows are dropped and counted in ``dropped_rows``).
    policy : PlacementPolicy
        A fresh policy (it keeps state across calls).
    cost_model : CostModel, optional
        Prices; default :class:`CostModel()`.
    ssd_capacity_bytes : int or float, optional
        SSD budget the replay enforces, in bytes (a float is truncated to whole bytes, as
        the ledgers do); default the policy's own ledger capacity (0 if
        it has none).
    predictions : numpy.ndarray, optional
        Predicted log10 density per row, handed to ``policy.place``; default the
        table's ``predicted_log_density`` column if present, else ``NaN``.
    hdd_drives : int, optional
        HDDs serving the HDD tier (for the overload count); default the drives the peak
        live bytes need, at least 1.
    progress : bool
        Show a tqdm progress bar over the events.
    keep_tiers : bool
        Keep each file's tier (``Tier`` codes: 1 SSD, 0 HDD) in ``result.tiers``.
    """
    start_wall = time.perf_counter()
    cost_model = cost_model or CostModel()
    if hdd_drives is not None and (
        isinstance(hdd_drives, bool)
        or not isinstance(hdd_drives, (int, np.integer))
        or hdd_drives < 1
    ):  # refused before the replay, as the budget is
        raise PlacementConfigError(f"hdd_drives={hdd_drives!r} must be a positive int")
    df: pd.DataFrame | None = None
    if isinstance(table, Trace):
        trace = table
    else:
        df, issues = clean_table(table)
        trace = Trace.from_clean(df, issues)
    n = len(trace)
    if predictions is not None:
        pred = np.asarray(predictions, np.float64)
        if pred.shape != (n,):
            raise PlacementConfigError(
                f"predictions has shape {pred.shape} but the table has {n} usable rows "
                f"({trace.issues.n_dropped} invalid rows dropped); give one prediction per usable "
                "row (clean the table first with placement.features.clean_table)"
            )
    elif df is not None and "predicted_log_density" in df.columns:
        pred = pd.to_numeric(df["predicted_log_density"], errors="coerce").to_numpy(np.float64)
    else:
        pred = np.full(n, np.nan)
    if ssd_capacity_bytes is None:
        ledger = getattr(policy, "ledger", None)
        ssd_capacity_bytes = ledger.capacity if ledger is not None else 0
    cap = check_capacity(ssd_capacity_bytes)

    on_ssd = np.zeros(n, dtype=bool)
    overruled = 0
    peak_ssd = 0
    if n and not isinstance(policy, AllHDDPolicy):
        times = np.concatenate([trace.deleted, trace.created])
        kind = np.concatenate([np.zeros(n, np.int8), np.ones(n, np.int8)])
        order = np.lexsort((kind, times))
        ev_time = times[order].tolist()
        ev_create = kind[order].astype(bool).tolist()
        ev_file = (order % n).tolist()
        size_l = trace.size.tolist()
        known = trace.size if trace.known_size is None else trace.known_size
        known_l = size_l if getattr(policy, "knows_outcome", False) else known.tolist()
        pred_l = pred.tolist()
        ssd_flags = [False] * n
        used = 0
        place, release, SSD = policy.place, policy.release, Tier.SSD
        settle = getattr(policy, "settle", None)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(
                total=2 * n,
                desc=f"simulate {policy.name}",
                unit="event",
                leave=False,
                disable=None,  # shown on a terminal only, not in pipes and log files
            )
        step = max(1, (2 * n) // 200)
        for k, (t, create, i) in enumerate(zip(ev_time, ev_create, ev_file, strict=True)):
            if create:
                if place(i, pred_l[i], known_l[i], t) is SSD:
                    s = size_l[i]
                    if used + s <= cap:
                        used += s
                        ssd_flags[i] = True
                        peak_ssd = max(peak_ssd, used)
                    else:
                        overruled += 1
                    if settle is not None:
                        settle(i, SSD if ssd_flags[i] else Tier.HDD, s)
            else:
                release(i, t)
                if ssd_flags[i]:
                    used -= size_l[i]
            if bar is not None and k % step == 0:
                bar.update(step if k else 1)
        if bar is not None:
            bar.close()
        on_ssd = np.fromiter(ssd_flags, dtype=bool, count=n)

    life = trace.lifetime
    size_c = np.maximum(trace.size, MIN_SIZE_BYTES).astype(np.float64)
    ssd_cost, hdd_cost = trace.costs(cost_model)
    tco = float(np.where(on_ssd, ssd_cost, hdd_cost).sum())
    all_hdd = float(hdd_cost.sum())
    byte_s = size_c * life
    total_ops = float(trace.ops.sum())

    peak_live = peak_live_bytes(trace) if n else 0
    if hdd_drives is None:
        hdd_drives = max(1, math.ceil(peak_live / cost_model.hdd_drive_capacity_bytes))
    supply = float(hdd_drives) * cost_model.hdd_iops_per_drive
    hdd = ~on_ssd
    peak_demand = overload_s = overload_ops = 0.0
    if hdd.any():
        t, demand = _sweep(trace.created[hdd], trace.deleted[hdd], trace.ops[hdd] / life[hdd])
        dt = np.diff(t)
        level = demand[:-1]
        over = level > supply * (1 + 1e-9)
        peak_demand = float(demand.max())
        overload_s = float(dt[over].sum())
        overload_ops = float(((level - supply)[over] * dt[over]).sum())
    duration = float(trace.deleted.max() - trace.created.min()) if n else 0.0
    return SimulationResult(
        policy=getattr(policy, "name", type(policy).__name__),
        ssd_capacity_bytes=cap,
        n_files=n,
        tco_usd=tco,
        all_hdd_tco_usd=all_hdd,
        ssd_files=int(on_ssd.sum()),
        ssd_bytes=int(trace.size[on_ssd].sum()),
        ssd_byte_seconds_share=float(byte_s[on_ssd].sum() / byte_s.sum()) if n else 0.0,
        ssd_io_share=float(trace.ops[on_ssd].sum() / total_ops) if total_ops > 0 else 0.0,
        peak_ssd_bytes=int(peak_ssd),
        overruled=overruled,
        hdd_drives=int(hdd_drives),
        hdd_iops_supply=supply,
        hdd_peak_iops_demand=peak_demand,
        hdd_overload_s=overload_s,
        hdd_overload_ops=overload_ops,
        duration_s=duration,
        wall_s=time.perf_counter() - start_wall,
        dropped_rows=trace.issues.n_dropped,
        tiers=on_ssd.astype(np.int8) if keep_tiers else None,
    )


def _named(policy: Any, name: str) -> Any:
    policy.name = name
    return policy


def _row_lookup(values: np.ndarray | None) -> Callable[[Any], float] | None:
    """``file id -> value`` for files named by row position (as :func:`simulate` names them)."""
    if values is None:
        return None
    arr = np.asarray(values, np.float64)

    def lookup(file_id: Any) -> float:
        return float(arr[file_id])

    return lookup


def policy_roster(
    trace: Trace,
    cost_model: CostModel,
    *,
    stage_history: np.ndarray,
    lightgbm: np.ndarray,
    extra: Mapping[str, np.ndarray] | None = None,
    options: Mapping[str, Any] | None = None,
    expected_lifetime: np.ndarray | None = None,
    break_even: bool = True,
) -> list[PolicyMaker]:
    """The policies every comparison replays, in report order.

    all-HDD, first-fit, small-files-first, the stage-history heuristic, the adaptive
    threshold fed ``lightgbm`` (the LightGBM policy), one adaptive threshold per entry
    of ``extra`` (name -> predicted log10 densities), and the oracle last.

    The policies fed a density estimate (stage history, LightGBM, ``extra``) take the
    break-even test of :mod:`placement.policy` under ``cost_model``: a file whose
    predicted saving is negative stays on HDD. First-fit (the baseline),
    small-files-first (no density estimate), all-HDD and the oracle (which skips
    unprofitable files on its own, knowing their outcome) do not.

    Parameters
    ----------
    trace : Trace
        The files replayed (the oracle needs their true densities and lifetimes).
    cost_model : CostModel
        Prices the oracle ranks files by and the break-even test uses.
    stage_history, lightgbm : numpy.ndarray
        Predicted log10 density per file of the two learned-or-historic policies.
    extra : mapping, optional
        More adaptive-threshold policies by name, with their predictions.
    options : mapping, optional
        Keyword options of the threshold policies (``exponent``, ``window``, ...).
    expected_lifetime : numpy.ndarray, optional
        Expected lifetime per file in seconds, known at its creation (e.g.
        :func:`placement.evaluate.stage_history_lifetime`; ``NaN`` where unknown, where
        each policy falls back to its own estimate from the files released before, see
        :class:`~placement.policy.AdaptiveThresholdPolicy`). Required when
        ``cost_model`` prices wear or transfer (:attr:`CostModel.prices_lifetime`) and
        ``break_even`` is true: one lifetime estimate for every file (the only
        fallback) admits short-lived files whose wear costs more than they save, and on
        the placement logs loses money against all-HDD.
    break_even : bool
        Give the density-fed policies the break-even test (default); ``False``
        replays them without it, to measure what it changes.

    Raises
    ------
    PlacementConfigError
        (A :class:`ValueError`.) If ``expected_lifetime`` is missing where it is
        required or has not one entry per file, or a name of ``extra`` is already in
        the roster.
    """
    opts = dict(options or {})
    if expected_lifetime is not None and np.shape(expected_lifetime) != (len(trace),):
        raise PlacementConfigError(
            f"expected_lifetime has shape {np.shape(expected_lifetime)} but the trace has "
            f"{len(trace)} files; give one lifetime (seconds, NaN if unknown) per file"
        )
    if break_even and expected_lifetime is None and cost_model.prices_lifetime:
        raise PlacementConfigError(
            "expected_lifetime=None, but the cost model prices SSD wear or HDD transfer, so "
            "the break-even test needs each file's expected lifetime: pass "
            "expected_lifetime=placement.evaluate.stage_history_lifetime(features) (NaN "
            "where unknown), or break_even=False to replay without the test"
        )
    priced: dict[str, Any] = (
        {"cost_model": cost_model, "expected_lifetime": _row_lookup(expected_lifetime)}
        if break_even
        else {}
    )

    def threshold(name: str) -> Callable[[int], PlacementPolicy]:
        return lambda cap: _named(AdaptiveThresholdPolicy(cap, **opts, **priced), name)

    roster: list[PolicyMaker] = [
        ("all-hdd", lambda cap: AllHDDPolicy(), None),
        ("first-fit", lambda cap: FirstFitPolicy(cap), None),
        ("small-files-first", lambda cap: SmallFilesFirstPolicy(cap, **opts), None),
        (
            "stage-history",
            lambda cap: StageHistoryPolicy(cap, **opts, **priced),
            stage_history,
        ),
        ("lightgbm", threshold("lightgbm"), lightgbm),
    ]
    roster += [(name, threshold(name), pred) for name, pred in (extra or {}).items()]
    roster.append(("oracle", lambda cap: trace.oracle(cap, cost_model), None))
    names = [name for name, _, _ in roster]
    for name in extra or {}:
        if names.count(name) > 1:
            raise PlacementConfigError(
                f"extra policy name {name!r} is already in the roster ({', '.join(names)}); "
                "give it another name: replays are keyed by name"
            )
    return roster
