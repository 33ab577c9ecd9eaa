"""A set-up service worker plugin pickles, without its storage, link or leased chooser."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

from distributed import Scheduler, Worker

from placement.service import (
    PlacementSchedulerPlugin,
    PlacementService,
    ServiceConfig,
    ServiceWorkerPlugin,
)
from placement.storage import TieredSpillBuffer
from placement.storage.worker import PLUGIN_NAME


def test_a_set_up_service_worker_plugin_pickles_as_it_was_made(tmp_path: Path) -> None:
    """``__getstate__`` drops what ties the plugin to its worker: the storage, the link and
    the leased chooser setup put in its options (which holds a lock); the copy keeps the
    options the plugin was made with."""
    plugin = ServiceWorkerPlugin(
        ssd_dir=str(tmp_path / "ssd"), hdd_dir=str(tmp_path / "hdd"), log_dir=str(tmp_path / "l")
    )
    service = PlacementSchedulerPlugin(PlacementService(ServiceConfig(ssd_capacity_bytes=2**20)))

    async def main() -> bytes:
        async with (
            Scheduler(port=0, dashboard=False, dashboard_address=None, plugins=[service]) as s,
            Worker(s.address, nthreads=1, local_directory=str(tmp_path / "local")) as worker,
        ):
            await worker.plugin_add(plugin, catch_errors=False)
            try:
                assert plugin.storage is not None and plugin.link is not None
                return pickle.dumps(plugin)
            finally:
                await worker.plugin_remove(PLUGIN_NAME)
                if isinstance(worker.data, TieredSpillBuffer):
                    worker.data.close()

    copied = pickle.loads(asyncio.run(main()))
    assert copied.storage is None and copied.link is None and copied.options.chooser is None
    assert copied.options.ssd_dir == str(tmp_path / "ssd")
    assert copied.options.log_dir == str(tmp_path / "l")
