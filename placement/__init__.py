"""Learned SSD/HDD placement of intermediate files.

The temporary files a Dask pipeline writes (spill, P2P shuffle and rechunk partitions,
cache shards) differ by orders of magnitude in I/O density, which is unknown when a file
is created. This package logs every such file, learns its density from creation-time
facts, places the densest files on SSD under a capacity budget, and measures what that
saves against all-HDD, simple heuristics, the oracle and the most any placement could save.

Modules, in the order data flows through them:

* :mod:`placement.schema`: the I/O log, one row per temporary file; units and I/O density.
* :mod:`placement.workloads`: the real Dask workload suite; :mod:`placement.collect` runs it
  and writes such logs (``dataplane placement collect``), telling the workers what
  :mod:`placement.graph_facts` learns of each run's task graphs; :mod:`placement.logwriter`
  writes and reads them.
* :mod:`placement.features`: creation-time features and the history of earlier runs.
* :mod:`placement.model`: the LightGBM density model, global and per pipeline.
* :mod:`placement.cost`: prices and a file's total cost of ownership on each tier
  (:mod:`placement.tier`).
* :mod:`placement.policy`: online policies under an SSD budget, and the oracle.
* :mod:`placement.simulator`: replays a log through a policy and prices the outcome;
  :mod:`placement.bound` bounds what any placement could save; :mod:`placement.replay`
  runs every policy at each budget.
* :mod:`placement.evaluate`: trains on part of a log and replays the rest
  (``dataplane placement evaluate``; the commands are :mod:`placement.cli`, their tables
  :mod:`placement.text`, the style each policy is drawn in :mod:`placement.style`);
  :mod:`placement.measure` times a decision and sizes the model.
* :mod:`placement.storage` (worker side) and :mod:`placement.service` (scheduler side):
  the placement running on a Dask cluster, loaded by ``--preload placement.dask``.
* :mod:`placement.local_cluster`: the ``LocalCluster`` of ``collect`` and ``dataplane serve``
  (no HTTP server unless asked for); :mod:`placement.signals`: SIGTERM stops a command as
  Ctrl-C does.

The names below are imported from their modules on first use (:pep:`562`), so that
``import placement`` stays cheap for the Dask preload and for :mod:`logs_analysis`, which
needs only the cost model. The evaluation is imported from its module
(``from placement.evaluate import EvaluationConfig, evaluate``): a package attribute
``evaluate`` would be shadowed by the module of the same name.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "PlacementError": "placement.errors",
    "SchemaError": "placement.errors",
    "ModelError": "placement.errors",
    "PlacementConfigError": "placement.errors",
    "PlacementTypeError": "placement.errors",
    "SCHEMA": "placement.schema",
    "read_logs": "placement.logwriter",
    "HistoryStore": "placement.features",
    "build_features": "placement.features",
    "DensityModel": "placement.model",
    "ModelParams": "placement.model",
    "ModelSet": "placement.model",
    "CostModel": "placement.cost",
    "DEFAULT_BUDGETS": "placement.cost",
    "Tier": "placement.tier",
    "AdaptiveThresholdPolicy": "placement.policy",
    "OccupancyBasis": "placement.policy",
    "Trace": "placement.simulator",
    "simulate": "placement.simulator",
    "savings_upper_bound": "placement.bound",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'placement' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
