"""Dask preload of the placement service: ``--preload placement.dask``.

On a real cluster::

    export DASK_PLACEMENT__SSD_DIR=/mnt/nvme/dask DASK_PLACEMENT__HDD_DIR=/data/dask
    export DASK_PLACEMENT__SSD_CAPACITY=200GiB DASK_PLACEMENT__LOG_DIR=/shared/placement-logs
    export DASK_PLACEMENT__MODEL=/shared/placement-model      # optional
    dask scheduler --preload placement.dask
    dask worker tcp://scheduler:8786 --preload placement.dask

or, in one process tree, ``dataplane serve`` (an embedded ``LocalCluster`` that sets the
same preloads through ``distributed.scheduler.preload`` / ``distributed.worker.preload``).

:func:`dask_setup` receives the server it is preloaded into: on the scheduler it adds
:class:`~placement.service.scheduler_plugin.PlacementSchedulerPlugin` (the model, the
threshold policy and the SSD ledger, built from ``placement.*`` config; a missing
``placement.ssd-capacity`` or a bad model stops the scheduler with a message naming
the fix); on a worker it adds
:class:`~placement.service.worker_plugin.ServiceWorkerPlugin` (tiered spill, P2P
routing, lease-based decisions, I/O logs). Preloading it into a nanny is an error
(use ``--preload``, not ``--preload-nanny``).

This module is named after Dask and imports it: ``import dask`` here is the library
(absolute imports), never this module.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dask_setup", "dask_teardown"]


async def dask_setup(server: Any) -> None:
    """Start the placement service's scheduler or worker side on ``server``."""
    from distributed import Nanny, Scheduler, Worker

    from placement.service.errors import ServiceConfigError

    if isinstance(server, Scheduler):
        from placement.service.scheduler_plugin import PLUGIN_NAME, PlacementSchedulerPlugin

        await server.register_scheduler_plugin(
            PlacementSchedulerPlugin(), name=PLUGIN_NAME, idempotent=True
        )
    elif isinstance(server, Worker):
        from placement.service.worker_plugin import ServiceWorkerPlugin

        result = await server.plugin_add(ServiceWorkerPlugin(), catch_errors=False)
        if isinstance(result, dict) and result.get("status") == "error":  # pragma: no cover
            raise ServiceConfigError(f"the placement worker plugin failed to start: {result}")
    elif isinstance(server, Nanny):
        raise ServiceConfigError(
            "placement.dask is a scheduler and worker preload, not a nanny preload: "
            "use `dask worker --preload placement.dask`, not --preload-nanny"
        )
    else:
        raise ServiceConfigError(
            f"placement.dask cannot be preloaded into a {type(server).__name__}; "
            "preload it into the scheduler and the workers"
        )


async def dask_teardown(server: Any) -> None:
    """Nothing to undo: plugins are closed with their server."""
    return
