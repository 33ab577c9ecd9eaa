"""The worker plugin that turns placement storage on (a thin shell over :class:`WorkerStorage`)."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from placement.storage.chooser import TierChooser
from placement.storage.worker import PLUGIN_NAME, StorageOptions, WorkerStorage


class PlacementWorkerPlugin(WorkerPlugin):
    """Routes a worker's P2P shuffle/rechunk files through its tiered store and flushes its log.

    Lifecycle: ``setup(worker)`` calls :meth:`WorkerStorage.attach`; ``teardown(worker)``
    calls :meth:`WorkerStorage.close`. Register with ``client.register_plugin(plugin)``;
    spill files are handled by the worker's ``data=`` mapping
    (:func:`~placement.storage.spill.tiered_spill_buffer`), whose store this plugin reuses.
    Options are those of :class:`StorageOptions`.
    """

    name = PLUGIN_NAME

    def __init__(
        self,
        *,
        ssd_dir: str | None = None,
        hdd_dir: str | None = None,
        log_dir: str | None = None,
        chooser: TierChooser | None = None,
        route_p2p: bool = True,
        flush_interval_s: float = 5.0,
        save_on_signal: bool = True,
    ) -> None:
        self.options = StorageOptions(
            ssd_dir=None if ssd_dir is None else str(ssd_dir),
            hdd_dir=None if hdd_dir is None else str(hdd_dir),
            log_dir=None if log_dir is None else str(log_dir),
            chooser=chooser,
            route_p2p=route_p2p,
            flush_interval_s=flush_interval_s,
            save_on_signal=save_on_signal,
        )
        self.storage: WorkerStorage | None = None

    def setup(self, worker: Any) -> None:
        self.storage = WorkerStorage.attach(worker, self.options)

    def teardown(self, worker: Any) -> None:
        if self.storage is not None:
            closing = getattr(getattr(worker, "status", None), "name", "") in (
                "closing",
                "closed",
                "failed",
            )
            self.storage.close(worker_closing=closing)
            self.storage = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "storage": None}
