"""The ``placement.dask`` preload on each kind of server, built in this process and not
started: the plugin it hands to a scheduler or a worker (to be started by the server, not
by the preload), and the servers it refuses. The started path is tested on real clusters
in ``tests/placement/service``."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from distributed import Nanny, Scheduler, Worker
from distributed.diagnostics.plugin import WorkerPlugin

from placement.dask import dask_setup, dask_teardown
from placement.service import ServiceConfigError
from placement.service.scheduler_plugin import PLUGIN_NAME, PlacementSchedulerPlugin
from placement.service.worker_plugin import ServiceWorkerPlugin
from placement.storage.worker import PLUGIN_NAME as STORAGE_PLUGIN


class OwnPlugin(WorkerPlugin):
    """A plugin the worker was built with."""

    name = "own"


def test_a_scheduler_holds_the_service_plugin_once_not_started() -> None:
    async def main() -> list[Any]:
        scheduler = Scheduler(port=0, dashboard=False, dashboard_address=None)
        try:
            await dask_setup(scheduler)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # nor warns of a plugin replaced
                await dask_setup(scheduler)  # a second preload of the module adds nothing
            await dask_teardown(scheduler)  # and teardown takes nothing away
            plugins = scheduler.plugins.values()
            return [p for p in plugins if isinstance(p, PlacementSchedulerPlugin)]
        finally:
            await scheduler.close()

    (plugin,) = asyncio.run(main())
    assert plugin.name == PLUGIN_NAME and plugin.service is None  # started by the scheduler


@pytest.mark.parametrize("kind", [list, tuple, set], ids=["list", "tuple", "set"])
def test_a_worker_sets_up_the_storage_plugin_after_its_own_when_it_starts(
    kind: Callable[[list[WorkerPlugin]], Any],
) -> None:
    own = OwnPlugin()

    async def main() -> tuple[Any, dict[str, Any]]:
        worker = Worker("tcp://127.0.0.1:1", nthreads=1, plugins=kind([own]))
        try:
            await dask_setup(worker)
            return worker._pending_plugins, dict(worker.plugins)
        finally:
            await worker.close()

    pending, installed = asyncio.run(main())
    assert isinstance(pending, tuple) and len(pending) == 2 and pending[0] is own
    assert isinstance(pending[1], ServiceWorkerPlugin) and pending[1].name == STORAGE_PLUGIN
    assert installed == {}  # set up by Worker.start, whose failure stops the worker


def test_a_nanny_is_refused_with_the_preload_flag_to_use() -> None:
    async def main() -> None:
        nanny = Nanny("tcp://127.0.0.1:1", nthreads=1)
        try:
            with pytest.raises(
                ServiceConfigError,
                match=r"scheduler and worker preload, not a nanny preload: .*not --preload-nanny",
            ):
                await dask_setup(nanny)
            assert nanny.plugins == {}
        finally:
            await nanny.close()

    asyncio.run(main())
