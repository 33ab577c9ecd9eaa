"""How each placement policy is drawn: one colour, marker and line style per policy.

Every plot of a policy's results takes its style from :data:`POLICY_STYLES`, so that a
policy looks the same in every figure (``dataplane placement evaluate``'s PNG, the logs
report's charts). Names are the policies' names as
:func:`placement.simulator.policy_roster` and :mod:`placement.evaluate` give them, and
:data:`UPPER_BOUND` for the most any placement could save. Each entry has a colour of its
own (matplotlib's default ``tab10`` cycle, written out): no two policies share one.

A policy the mapping does not name gets one of the spare colours (:data:`SPARE_COLORS`)
in the order the plot meets it (:func:`policy_styles`), so it can differ from one plot to
the next: name it in :data:`POLICY_STYLES` to fix it.

This module imports nothing heavy (no matplotlib): a plot passes
:meth:`PolicyStyle.kwargs` to ``Axes.plot``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["POLICY_STYLES", "SPARE_COLORS", "UPPER_BOUND", "PolicyStyle", "policy_styles"]

#: Row name of the savings bound in tables and plots (not a policy: no placement reaches it;
#: :mod:`placement.bound`).
UPPER_BOUND = "upper-bound (LP)"


@dataclasses.dataclass(frozen=True)
class PolicyStyle:
    """How one policy's line is drawn.

    Parameters
    ----------
    color : str
        A matplotlib colour, ``#rrggbb``.
    marker : str
        A matplotlib marker (``"o"``, ``"s"``, ...); ``""`` for none.
    linestyle : str
        ``"-"``, ``"--"``, ``":"`` or ``"-."``.
    linewidth : float
        In points.
    """

    color: str
    marker: str
    linestyle: str = "-"
    linewidth: float = 1.2

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``matplotlib.axes.Axes.plot`` drawing this style."""
        return {
            "color": self.color,
            "marker": self.marker or "None",
            "linestyle": self.linestyle,
            "linewidth": self.linewidth,
        }


#: Policy name -> its style. The learned policies and the limits are drawn thicker.
POLICY_STYLES: Mapping[str, PolicyStyle] = MappingProxyType(
    {
        "all-hdd": PolicyStyle("#c7c7c7", "x", ":"),
        "first-fit": PolicyStyle("#1f77b4", "^"),
        "small-files-first": PolicyStyle("#2ca02c", "v"),
        "stage-history": PolicyStyle("#ff7f0e", "D"),
        "lightgbm": PolicyStyle("#d62728", "o", "-", 2.0),
        "lightgbm-per-workload": PolicyStyle("#9467bd", "s", "-", 2.0),
        "threshold+true-density": PolicyStyle("#8c564b", "P", "-."),
        "oracle": PolicyStyle("#000000", "", "--", 2.0),
        UPPER_BOUND: PolicyStyle("#7f7f7f", "", ":", 2.0),
    }
)

#: Colours no entry of :data:`POLICY_STYLES` uses, for the policies it does not name.
SPARE_COLORS: tuple[str, ...] = ("#e377c2", "#bcbd22", "#17becf")

#: Line styles cycled, with the spare colours, for policies the mapping does not name.
_SPARE_LINESTYLES = ("-", "--", "-.")


def policy_styles(names: Iterable[str]) -> dict[str, PolicyStyle]:
    """The style of each policy of ``names``, in their order.

    A name of :data:`POLICY_STYLES` gets its entry; any other the next spare colour (and,
    after every spare colour, the next line style), so that no two lines of one plot look
    alike.
    """
    out: dict[str, PolicyStyle] = {}
    spare = 0
    for name in names:
        if name in out:
            continue
        style = POLICY_STYLES.get(name)
        if style is None:
            color = SPARE_COLORS[spare % len(SPARE_COLORS)]
            dash = _SPARE_LINESTYLES[(spare // len(SPARE_COLORS)) % len(_SPARE_LINESTYLES)]
            style = PolicyStyle(color, ".", dash)
            spare += 1
        out[name] = style
    return out
