"""Replay one trace through every policy at each SSD budget, with the bound beside them.

Both comparisons of the project, :func:`placement.evaluate.evaluate` (held-out pipelines
or time) and the report's savings curve (:mod:`logs_analysis.analyses.savings`), ask the
same thing of a trace: at each budget, a share of the trace's peak live bytes, what does
each policy of :func:`placement.simulator.policy_roster` save, and what is the most any
placement could save (:func:`placement.bound.savings_upper_bound`)? This module is that
loop, once; each caller keeps the figures it reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from placement.bound import savings_upper_bound
from placement.cost import CostModel
from placement.errors import PlacementConfigError
from placement.simulator import PolicyMaker, SimulationResult, Trace, peak_live_bytes, simulate

__all__ = ["BudgetReplay", "replay_budgets"]


@dataclasses.dataclass(frozen=True)
class BudgetReplay:
    """Every policy's replay at one SSD budget.

    Attributes
    ----------
    budget : float
        The budget as a share of the trace's peak live bytes, in (0, 1].
    capacity_bytes : int
        The SSD capacity that share gives, bytes (rounded down).
    results : dict
        Policy name -> its :class:`~placement.simulator.SimulationResult` (``policy`` set
        to the name), in roster order.
    upper_bound : float or None
        The most any placement could save, as a share of the all-HDD TCO; ``None`` when
        not asked for.
    """

    budget: float
    capacity_bytes: int
    results: dict[str, SimulationResult]
    upper_bound: float | None = None


def replay_budgets(
    trace: Trace,
    policies: Sequence[PolicyMaker],
    budgets: Sequence[float],
    cost_model: CostModel,
    *,
    upper_bound: bool = True,
    keep_tiers: bool = False,
    on_replay: Callable[[], None] | None = None,
) -> list[BudgetReplay]:
    """Replay ``trace`` through each of ``policies`` at each of ``budgets``.

    Parameters
    ----------
    trace : Trace
        The files replayed.
    policies : sequence of PolicyMaker
        ``(name, make, predictions)`` triples, e.g. from
        :func:`placement.simulator.policy_roster`; ``make(capacity_bytes)`` builds a fresh
        policy for each replay.
    budgets : sequence of float
        SSD budgets as shares of :func:`~placement.simulator.peak_live_bytes` (callers
        validate them: each in (0, 1]).
    cost_model : CostModel
        Prices of every replay and of the bound.
    upper_bound : bool
        Also solve :func:`~placement.bound.savings_upper_bound` at each budget (seconds
        per budget on tens of thousands of files; see that module).
    keep_tiers : bool
        Keep each replay's per-file tiers (:attr:`SimulationResult.tiers`).
    on_replay : callable, optional
        Called after each policy's replay (progress).

    Returns
    -------
    list of BudgetReplay
        One per budget, in the order given.

    Raises
    ------
    PlacementConfigError
        (A :class:`ValueError`.) If two policies share a name: results are keyed by
        name, so one replay would replace the other.
    """
    names = [name for name, _, _ in policies]
    for name in names:
        if names.count(name) > 1:
            raise PlacementConfigError(
                f"policy name {name!r} is given {names.count(name)} times; results are keyed "
                "by name: give each policy its own name"
            )
    peak = peak_live_bytes(trace)
    out: list[BudgetReplay] = []
    for b in budgets:
        cap = int(b * peak)
        bound = None
        if upper_bound:
            bound = savings_upper_bound(trace, cap, cost_model).savings_fraction
        results: dict[str, SimulationResult] = {}
        for name, make, pred in policies:
            result = simulate(
                trace, make(cap), cost_model, cap, predictions=pred, keep_tiers=keep_tiers
            )
            result.policy = name
            results[name] = result
            if on_replay is not None:
                on_replay()
        out.append(
            BudgetReplay(budget=float(b), capacity_bytes=cap, results=results, upper_bound=bound)
        )
    return out
