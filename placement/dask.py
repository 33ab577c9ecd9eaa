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
threshold policy and the SSD ledger, built from ``placement.*`` config); on a worker it
adds :class:`~placement.service.worker_plugin.ServiceWorkerPlugin` (tiered spill, P2P
routing, lease-based decisions, I/O logs). Preloading it into a nanny is an error
(use ``--preload``, not ``--preload-nanny``).

What happens on failure
-----------------------
Distributed logs an exception raised by a preload and starts the server anyway, so the
plugins are not started here: they are handed to the server, which starts them after its
preloads and fails to start when one of them raises.

* **Scheduler** (``placement.ssd-capacity`` unset or invalid, a ``placement.model``
  that cannot be loaded, a bad ``placement.service.*`` value): the scheduler logs one
  line, ``placement service not started: <key>... <fix>``, closes, and
  ``dask scheduler`` exits with status 1 (after distributed's own "Scheduler failed to
  start" traceback). No scheduler runs without the service its workers expect.
* **Worker** (``placement.ssd-dir`` and ``placement.hdd-dir`` one directory, a directory
  that cannot be created or written, a bad ``placement.service.*`` value): the worker
  logs ``placement storage on worker ... not started: <key>... <fix>``, removes what it
  had created, closes before it registers with the scheduler (it never joins the
  cluster, so no task runs without placement), and ``dask worker`` exits with status 1.
  Under a nanny (the default of ``dask worker``) the nanny does not retry a worker that
  failed to start: it closes too. A worker that dies later (killed, out of memory) and
  whose restart fails the same way (say its SSD became read-only) is not restarted in a
  loop either: its nanny logs the failure and closes, and ``dask worker`` ends (with
  status 0: distributed's command does not report a failed restart). The dead worker's
  store directories stay until a store starts on those directories again.

This module is named after Dask and imports it: ``import dask`` here is the library
(absolute imports), never this module.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dask_setup", "dask_teardown"]


async def dask_setup(server: Any) -> None:
    """Add the placement service's scheduler or worker plugin to ``server``; the server
    starts it after its preloads and fails to start if it cannot (see the module
    docstring)."""
    from distributed import Nanny, Scheduler, Worker

    from placement.service.errors import ServiceConfigError

    if isinstance(server, Scheduler):
        from placement.service.scheduler_plugin import PLUGIN_NAME, PlacementSchedulerPlugin

        # Not register_scheduler_plugin, which starts the plugin here, where distributed's
        # PreloadManager would log and swallow its error: the scheduler starts the plugins
        # it holds right after the preloads, and an error there fails Scheduler.start, which
        # closes the scheduler and makes `dask scheduler` exit with status 1. This is
        # distributed's own failed-start path, so listeners and comms are closed in order
        # (os._exit or sys.exit from a callback would skip that, or be swallowed).
        server.add_plugin(PlacementSchedulerPlugin(), name=PLUGIN_NAME, idempotent=True)
    elif isinstance(server, Worker):
        from placement.service.worker_plugin import ServiceWorkerPlugin

        plugin = ServiceWorkerPlugin()
        pending = getattr(server, "_pending_plugins", None)
        if isinstance(pending, (tuple, list, set, frozenset)):
            # The plugins given to Worker(plugins=...) are set up after the preloads and
            # before the worker registers with the scheduler, and a failure there fails
            # Worker.start (distributed 2026.8): the worker closes without joining the
            # cluster and `dask worker` (and its nanny) exits with status 1. Set up here
            # instead, a failure would only be logged and the worker would join without
            # placement. The test of a worker refusing to start catches a change of this.
            server._pending_plugins = (*pending, plugin)
        else:  # pragma: no cover - a distributed without it: set up now, failures logged
            await server.plugin_add(plugin, catch_errors=False)
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
