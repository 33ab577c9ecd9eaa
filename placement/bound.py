"""Upper bound on the savings of any placement of a trace: the linear-programming relaxation.

The oracle (:meth:`placement.simulator.Trace.oracle`) is a greedy packing: it knows the
future, but it is not the best placement there is, so "the oracle saves only 1.2x the
best heuristic" does not by itself say that no policy could do better. This module
answers that question from above.

A placement puts file ``i`` (size ``s_i`` bytes, alive over ``[created_i, deleted_i)``)
on SSD (``x_i = 1``) or HDD (``x_i = 0``) and saves ``g_i = hdd_cost_i - ssd_cost_i``
US dollars (:meth:`placement.simulator.Trace.costs`). The replay admits a file only if
it fits, so every placement it can produce, online or offline, with any predictor,
satisfies at every instant ``t``::

    sum of s_i * x_i over the files alive at t  <=  C   (the SSD budget, bytes)

Allowing ``0 <= x_i <= 1`` makes this a linear program whose optimum is at least the
savings of every such placement (the 0/1 optimum itself is NP-hard). Only files with
``g_i > 0`` and ``0 < s_i <= C`` enter it: the rest can only lose or never fit, and
files of zero bytes take SSD for free. The constraints are written through the SSD
level after each event time (:func:`_solve`), two matrix entries per file.

The bound reported is not the solver's objective but a dual bound, valid whatever the
solver's tolerances. For any prices ``y_t >= 0`` (US dollars per budget's worth of SSD,
one per event time ``t``), weak duality gives::

    LP optimum  <=  sum_t y_t  +  sum_i max(0, g_i - (s_i / C) * sum of y_t over the
                                   times at which file i is alive)

(each file either pays its SSD share at those prices or takes its slack). The ``y_t``
are the solver's dual values of the SSD-level bounds, clipped to ``>= 0``, and the sum is
taken in float64 in US dollars, unscaled. HiGHS's tolerances are absolute, so the
program is solved with gains scaled to a largest of 1; its objective, scaled back, can
then fall short of the optimum by up to the tolerance times the largest gain, below
the oracle's savings when gains span 8 or more orders of magnitude. The dual bound
cannot: inexact duals only loosen it. Where the solver is accurate the two agree.

Solved with SciPy's HiGHS (``scipy.optimize.linprog``; a well-kept solver rather than
a hand-written one). ``benchmarks/placement.py`` prints the program's size and solve
time: on the workload suite's 42,475 files (~85,000 event times) 1.3-7.7 s per budget
on 2 cores, the runs replayed as collected or up to 16 at a time.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from placement.cost import CostModel
from placement.errors import PlacementError
from placement.policy import check_capacity
from placement.simulator import Trace

__all__ = ["BoundError", "SavingsBound", "savings_upper_bound"]


class BoundError(PlacementError, RuntimeError):
    """The linear program of :func:`savings_upper_bound` could not be solved."""


@dataclasses.dataclass(frozen=True)
class SavingsBound:
    """What :func:`savings_upper_bound` found.

    Attributes
    ----------
    savings_usd : float
        No placement of the trace under the budget saves more than this (US dollars).
    all_hdd_tco_usd : float
        TCO of every file on HDD (US dollars), the baseline savings are measured from.
    ssd_capacity_bytes : int
        The SSD budget (bytes).
    n_files : int
        Files in the linear program (profitable, non-empty, no larger than the budget).
    n_times : int
        Event times of those files (one equality of the program each).
    wall_s : float
        Seconds spent building and solving it.
    """

    savings_usd: float
    all_hdd_tco_usd: float
    ssd_capacity_bytes: int
    n_files: int
    n_times: int
    wall_s: float

    @property
    def savings_fraction(self) -> float:
        """The bound as a share of the all-HDD TCO (0 when that is 0)."""
        return self.savings_usd / self.all_hdd_tco_usd if self.all_hdd_tco_usd > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "savings_fraction": self.savings_fraction}


def savings_upper_bound(
    trace: Trace, ssd_capacity_bytes: int, cost_model: CostModel | None = None
) -> SavingsBound:
    """The most any placement of ``trace`` can save under an SSD budget (LP relaxation).

    Parameters
    ----------
    trace : placement.simulator.Trace
        The files, as the simulator replays them.
    ssd_capacity_bytes : int
        SSD budget in bytes (>= 0).
    cost_model : CostModel, optional
        Prices; default :class:`CostModel()`, as :func:`placement.simulator.simulate`.

    Returns
    -------
    SavingsBound
        Its ``savings_usd`` is at least :attr:`SimulationResult.savings_usd` of every
        policy replayed on the same trace, budget and prices, the oracle included: a
        weak-duality bound of the linear program (module docstring), at or above its
        optimum whatever the solver's tolerances.

    Raises
    ------
    PlacementConfigError, PlacementTypeError
        (A :class:`ValueError`, a :class:`TypeError`.) If the budget is not a number of
        bytes >= 0.
    BoundError
        If the solver does not reach an optimum (its message is quoted).
    """
    start = time.perf_counter()
    cap = check_capacity(ssd_capacity_bytes)
    ssd_cost, hdd_cost = trace.costs(cost_model or CostModel())
    gain = hdd_cost - ssd_cost
    size = trace.size.astype(np.float64)
    free = float(gain[(gain > 0) & (size <= 0)].sum())
    pack = np.flatnonzero((gain > 0) & (size > 0) & (size <= cap))
    best = 0.0
    n_times = 0
    if len(pack):
        created, deleted = trace.created[pack], trace.deleted[pack]
        g = gain[pack]
        share = size[pack] / cap
        n_times, at_create, at_delete = _event_index(created, deleted)
        res = _solve(n_times, at_create, at_delete, share, g)
        if res.status != 0:
            raise BoundError(
                f"the savings bound's linear program ({len(pack)} files, {n_times} event "
                f"times) was not solved: {res.message}"
            )
        best = _dual_bound(res, at_create, at_delete, share, g)
    return SavingsBound(
        savings_usd=best + free,
        all_hdd_tco_usd=float(hdd_cost.sum()),
        ssd_capacity_bytes=cap,
        n_files=len(pack),
        n_times=n_times,
        wall_s=time.perf_counter() - start,
    )


def _event_index(created: np.ndarray, deleted: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """The number of distinct event times of the files, and each file's creation and
    deletion as an index into those times (sorted): file ``i`` is alive over the levels
    ``[at_create[i], at_delete[i])`` of :func:`_solve`."""
    times = np.unique(np.concatenate([created, deleted]))
    return len(times), np.searchsorted(times, created), np.searchsorted(times, deleted)


def _solve(
    m: int, at_create: np.ndarray, at_delete: np.ndarray, share: np.ndarray, gain: np.ndarray
) -> Any:
    """Solve the LP in level form over ``m`` event times (:func:`_event_index`); returns
    scipy's result.

    Variables: ``x_i`` for the files, then ``L_t`` for each event time, the SSD level
    just after the events at ``t`` (deletions, then creations), as a share of the budget.
    One equality per time, ``L_t - L_(t-1) - (shares created at t) + (shares deleted at
    t) = 0`` with ``0 <= L_t <= 1``, ties every level to the files live then. Each file
    has two entries and each level two, so the matrix holds ``2 * (files + times)``
    entries whatever the overlap; a constraint per instant over the live files would
    hold one entry per file and instant it spans, which grows with the overlap.
    """
    from scipy import sparse
    from scipy.optimize import linprog

    n = len(at_create)
    levels = np.arange(m)
    rows = np.concatenate([at_create, at_delete, levels, levels[1:]])
    cols = np.concatenate([np.arange(n), np.arange(n), n + levels, n + levels[:-1]])
    vals = np.concatenate([-share, share, np.ones(m), -np.ones(m - 1)])
    matrix = sparse.csc_matrix((vals, (rows, cols)), shape=(m, n + m))
    # gains scaled so the largest is 1 (and sizes to shares of the budget): HiGHS's
    # tolerances are absolute, and gains are micro-dollars next to sizes of gigabytes
    objective = np.concatenate([-gain / gain.max(), np.zeros(m)])
    return linprog(objective, A_eq=matrix, b_eq=np.zeros(m), bounds=(0.0, 1.0), method="highs")


def _dual_bound(
    res: Any, at_create: np.ndarray, at_delete: np.ndarray, share: np.ndarray, gain: np.ndarray
) -> float:
    """Weak-duality upper bound of the LP optimum, US dollars (module docstring).

    In the level form of :func:`_solve` the price of the SSD level at event ``t`` is
    ``y_t = lambda_t - lambda_(t+1)`` (``lambda`` the equalities' duals, ``lambda_m =
    0``): the dual of the upper bound ``L_t <= 1``. The duals come scaled with the
    gains (largest 1) and are scaled back; ``y`` is clipped to ``>= 0``, so the bound
    holds for whatever duals the solver returns.
    """
    lam = np.asarray(res.eqlin.marginals, np.float64) * float(gain.max())
    y = np.maximum(lam - np.append(lam[1:], 0.0), 0.0)
    y[~np.isfinite(y)] = 0.0  # any y >= 0 gives a valid bound
    # file i is alive over the levels [at_create, at_delete)
    prefix = np.concatenate([[0.0], np.cumsum(y)])
    priced = share * (prefix[at_delete] - prefix[at_create])
    slack = np.maximum(gain - priced, 0.0)
    return float(y.sum() + slack.sum())
