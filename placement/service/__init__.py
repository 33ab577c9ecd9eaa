"""The placement service on a Dask cluster: a scheduler plugin that hosts the model, the
adaptive threshold and the cluster-wide SSD ledger, and workers that place their spill,
P2P shuffle and rechunk files on SSD or HDD under leases it grants.

Start it with ``dataplane serve`` (an embedded ``LocalCluster``) or with
``--preload placement.dask`` on ``dask scheduler`` and ``dask worker``; see
:mod:`placement.dask` and :mod:`placement.service.config` for the configuration keys.

Design (why leases)
-------------------
Dask creates a spill file or a P2P shard file from the worker's event loop, so a
decision cannot wait for the scheduler without stalling the worker. The scheduler
therefore *lends* each worker an SSD allowance, the current density threshold (with
``occupancy_basis="after"`` a curve over SSD occupancy, so each file is judged at the
occupancy it would leave) and
the model (:mod:`placement.service.link`, every ~250 ms); the worker decides each file
locally in microseconds (:mod:`placement.service.lease`) and reports its real SSD
usage back at every renewal, which reconciles the ledger
(:mod:`placement.service.ledger`; reports are numbered, so one that lands after a later
one changes nothing). A worker that cannot renew keeps deciding under its
lease until the lease expires, then sends new files to HDD; no task ever waits on the
service.
"""

from __future__ import annotations

from placement.service.client import decide, reload_model, service_state
from placement.service.config import LinkConfig, ServiceConfig
from placement.service.errors import ServiceConfigError, ServiceError, ServiceUnavailable
from placement.service.lease import Lease, LeasedChooser
from placement.service.ledger import ClusterLedger
from placement.service.link import ServiceLink
from placement.service.predictor import Predictor
from placement.service.scheduler_plugin import PlacementSchedulerPlugin
from placement.service.service import PlacementService
from placement.service.worker_plugin import (
    ServiceWorkerPlugin,
    install_tiered_spill,
    worker_link,
    worker_service_state,
)

__all__ = [
    "ClusterLedger",
    "Lease",
    "LeasedChooser",
    "LinkConfig",
    "PlacementSchedulerPlugin",
    "PlacementService",
    "Predictor",
    "ServiceConfig",
    "ServiceConfigError",
    "ServiceError",
    "ServiceLink",
    "ServiceUnavailable",
    "ServiceWorkerPlugin",
    "decide",
    "install_tiered_spill",
    "reload_model",
    "service_state",
    "worker_link",
    "worker_service_state",
]
