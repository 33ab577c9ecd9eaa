"""Analyses of an :class:`~logs_analysis.aggregate.Aggregate`.

* :mod:`.distributions` - density, lifetime and size distributions by pipeline, stage,
  operator and file kind (quantiles and log-scale histograms);
* :mod:`.skew` - the share of all I/O carried by the densest 1% / 5% of bytes;
* :mod:`.predictability` - cross-validated LightGBM on creation-time features
  (:mod:`placement.features`, :mod:`placement.model`): rank correlation, importances;
* :mod:`.savings` - the placement simulator's savings against all-HDD per policy and
  SSD budget (:mod:`placement.simulator`).

The last two need :mod:`placement`'s model and simulator; when those cannot be
imported they return :class:`Unavailable` with the reason, and the report says so.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Unavailable"]


@dataclasses.dataclass(frozen=True)
class Unavailable:
    """An analysis that could not run, and why (shown in the report)."""

    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"unavailable": self.reason}
