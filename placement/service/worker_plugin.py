"""The worker side of the service: tiered spill and P2P files decided under the scheduler's leases.

:class:`ServiceWorkerPlugin` is :class:`~placement.storage.PlacementWorkerPlugin` (the
tiered store, its log, the P2P routing) with the store's chooser replaced by a
:class:`~placement.service.lease.LeasedChooser` that a
:class:`~placement.service.link.ServiceLink` keeps supplied with leases and models.

Spill files go through the store only when the worker's ``data`` is a
:class:`~placement.storage.TieredSpillBuffer`. A worker started by
``dask worker --preload placement.dask`` has Dask's own (empty) ``SpillBuffer`` when
the preload runs; :func:`install_tiered_spill` swaps it for a tiered one with the
same target and memory limit. That relies on ``Worker.memory_manager.data`` and
``Worker.state.data`` being the only references to the mapping before the worker
has run anything (true for distributed 2023-2026.8); a worker that already holds
data keeps Dask's buffer and only its P2P files are routed (a warning says so).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import Any

from distributed.spill import SpillBuffer

from placement.errors import PlacementTypeError
from placement.service.config import LinkConfig
from placement.service.errors import ServiceError
from placement.service.lease import LeasedChooser
from placement.service.link import ServiceLink
from placement.storage.chooser import FixedTier, TierChooser
from placement.storage.config import LOG_DIR_KEY, config_dir
from placement.storage.plugin import PlacementWorkerPlugin
from placement.storage.spill import TieredSpillBuffer, tiered_spill_buffer
from placement.storage.worker import PLUGIN_NAME
from placement.tier import Tier

logger = logging.getLogger(__name__)


def install_tiered_spill(
    worker: Any,
    *,
    ssd_dir: str | None = None,
    hdd_dir: str | None = None,
    log_dir: str | None = None,
) -> TieredSpillBuffer | None:
    """Make ``worker.data`` a :class:`TieredSpillBuffer` if it is not one already.

    Returns the worker's tiered buffer, or ``None`` (with a warning) when the worker's
    mapping cannot be swapped (it holds data, or is not Dask's own ``SpillBuffer`` or
    ``dict``).
    """
    data = worker.data
    if isinstance(data, TieredSpillBuffer):
        return data
    if len(data) or type(data) not in (SpillBuffer, dict):
        warnings.warn(
            f"worker {worker.address}: its data mapping ({type(data).__name__}, {len(data)} keys) "
            "cannot be replaced by a tiered spill buffer, so its spill files stay Dask's own; "
            "start the worker with --preload placement.dask (or data=tiered_spill_buffer) "
            "to place them",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    memory_limit = getattr(worker.memory_manager, "memory_limit", None)
    target = getattr(data, "n", None) if isinstance(data, SpillBuffer) else None
    buffer = tiered_spill_buffer(
        worker.local_directory,
        ssd_dir=ssd_dir,
        hdd_dir=hdd_dir,
        log_dir=log_dir or config_dir(LOG_DIR_KEY),
        memory_limit=memory_limit,
        target=target,
    )
    worker.memory_manager.data = buffer
    worker.state.data = buffer
    if isinstance(data, SpillBuffer):
        data.close()
    return buffer


class ServiceWorkerPlugin(PlacementWorkerPlugin):
    """Tiered storage on a worker whose tiers the placement service decides.

    Lifecycle: ``setup(worker)`` reads the renewal settings, swaps in a tiered spill
    buffer when it can (:func:`install_tiered_spill`), attaches the storage (the tier and
    log directories are checked where the store is made, before anything is created:
    :func:`~placement.storage.config.check_storage_dirs`;
    :class:`~placement.storage.WorkerStorage`), installs a :class:`LeasedChooser` as
    the store's chooser and starts the :class:`ServiceLink` (one renewal is attempted
    at once, without waiting for it); ``teardown(worker)`` stops the link and closes
    the storage. When ``setup`` fails (a bad ``placement.*`` value, a directory it
    cannot write) it logs one line naming the key and the fix, undoes what it did
    (store directories and locks included, on a worker that is not running yet) and
    raises: the ``placement.dask`` preload then fails the worker's start. The plugin
    shares the name ``placement-storage`` with :class:`PlacementWorkerPlugin`, so
    :func:`~placement.storage.worker_storage_state` and
    :func:`~placement.storage.flush_worker_logs` work unchanged.

    Parameters
    ----------
    ssd_dir, hdd_dir, log_dir : str, optional
        As :class:`PlacementWorkerPlugin` (default: Dask config ``placement.*-dir``).
    fallback : TierChooser, optional
        Tier of files decided without a valid lease (default ``FixedTier(HDD)``).
    link : LinkConfig, optional
        Renewal settings (default: Dask config ``placement.service.*``).
    swap_spill : bool
        Swap Dask's spill buffer for a tiered one when possible (default True).
    flush_interval_s : float
        Seconds between checks that flush buffered log rows.
    """

    def __init__(
        self,
        *,
        ssd_dir: str | None = None,
        hdd_dir: str | None = None,
        log_dir: str | None = None,
        fallback: TierChooser | None = None,
        link: LinkConfig | None = None,
        swap_spill: bool = True,
        flush_interval_s: float = 5.0,
    ) -> None:
        super().__init__(
            ssd_dir=ssd_dir, hdd_dir=hdd_dir, log_dir=log_dir, flush_interval_s=flush_interval_s
        )
        fallback = fallback if fallback is not None else FixedTier(Tier.HDD)
        if not callable(getattr(fallback, "choose", None)):
            raise PlacementTypeError(f"fallback={fallback!r} has no choose(request) method")
        if link is not None and not isinstance(link, LinkConfig):
            raise PlacementTypeError(f"link must be a LinkConfig, got {type(link).__name__}")
        self.fallback = fallback
        self.link_config = link
        self.swap_spill = bool(swap_spill)
        self.link: ServiceLink | None = None

    async def setup(self, worker: Any) -> None:  # type: ignore[override]
        installed: list[TieredSpillBuffer] = []
        try:
            self._setup(worker, installed)
        except Exception as exc:
            await self._undo(worker, installed)
            logger.error(
                "placement storage on worker %s not started: %s",
                getattr(worker, "address", worker),
                exc,
            )
            raise

    def _setup(self, worker: Any, installed: list[TieredSpillBuffer]) -> None:
        # The directories are checked where the store is made, before anything is created:
        # by install_tiered_spill (tiered_spill_buffer), or else by WorkerStorage.attach.
        link_config = self.link_config or LinkConfig.from_dask_config()
        if self.swap_spill:
            before = worker.data
            buffer = install_tiered_spill(
                worker,
                ssd_dir=self.options.ssd_dir,
                hdd_dir=self.options.hdd_dir,
                log_dir=self.options.log_dir,
            )
            if buffer is not None and buffer is not before:
                installed.append(buffer)
        chooser = LeasedChooser(
            fallback=self.fallback, unknown_size_bytes=link_config.unknown_size_bytes
        )
        self.options = dataclasses.replace(self.options, chooser=chooser)
        super().setup(worker)
        assert self.storage is not None
        self.storage.store.chooser = chooser
        self.link = ServiceLink(
            chooser, self.storage.store, worker.scheduler, worker.address, config=link_config
        )
        self.link.start()

    async def _undo(self, worker: Any, installed: list[TieredSpillBuffer]) -> None:
        """Undo a failed :meth:`setup`, best effort: stop the link, and on a worker that is
        not running yet (a failed start) close the store this setup created, so that its
        directories and lock files go; a running worker keeps its spill buffer."""
        starting = getattr(getattr(worker, "status", None), "name", "") != "running"
        try:
            if self.link is not None:
                await self.link.stop()
                self.link = None
            if self.storage is not None:
                self.storage.close(worker_closing=starting)
                self.storage = None
            elif starting:
                for buffer in installed:
                    buffer.close()
        except Exception:  # noqa: BLE001 - the setup error is the one to report
            logger.exception("undoing a failed placement storage setup failed")

    async def teardown(self, worker: Any) -> None:  # type: ignore[override]
        if self.link is not None:
            await self.link.stop()
            self.link = None
        super().teardown(worker)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # setup put this worker's leased chooser (it holds a lock) in the options: a copy
        # gets the options the plugin was made with, and builds its own chooser in setup
        options = dataclasses.replace(self.options, chooser=None)
        state.update(storage=None, link=None, options=options)
        return state


def worker_link(dask_worker: Any) -> ServiceLink:
    """The :class:`ServiceLink` of a worker running :class:`ServiceWorkerPlugin`.

    Raises
    ------
    ServiceError
        If the worker runs no placement service: no placement storage at all, or the
        storage alone (:class:`~placement.storage.PlacementWorkerPlugin`).
    """
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if getattr(plugin, "storage", None) is None:
        raise ServiceError(
            f"worker {dask_worker.address} runs no placement service: start the workers "
            "with `dask worker --preload placement.dask` (if they were, the worker's log "
            "says why the placement storage did not start), or `dataplane serve`"
        )
    link = getattr(plugin, "link", None)
    if link is None:
        raise ServiceError(
            f"worker {dask_worker.address} runs placement storage without the service "
            "(placement.storage.PlacementWorkerPlugin); start the workers with "
            "`dask worker --preload placement.dask` for the service"
        )
    return link


def worker_service_state(dask_worker: Any) -> dict[str, Any]:
    """``client.run`` helper: the worker's link, chooser and usage counters."""
    return worker_link(dask_worker).state()
