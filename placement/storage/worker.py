"""The placement storage of one Dask worker: store, log writer, spill and P2P hooks.

:class:`WorkerStorage` is the plain class behind
:class:`~placement.storage.plugin.PlacementWorkerPlugin`; it can be tested and used
without a plugin. When the worker's ``data`` is a
:class:`~placement.storage.spill.TieredSpillBuffer`, its store and log writer are
shared, so spill and P2P files of a worker land in one store and one log.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

from tornado.ioloop import PeriodicCallback

from placement.logwriter import LogWriter
from placement.storage.chooser import TierChooser
from placement.storage.config import LOG_DIR_KEY, config_dir, default_target_fraction, tier_dirs
from placement.storage.context import RequestBuilder
from placement.storage.errors import StorageError
from placement.storage.shuffle import ShuffleFileRouter
from placement.storage.spill import TieredSpillBuffer
from placement.storage.store import TieredFileStore

logger = logging.getLogger(__name__)

PLUGIN_NAME = "placement-storage"
_FLUSH_CALLBACK = "placement-log-flush"


@dataclass(frozen=True, kw_only=True)
class StorageOptions:
    """Where a worker's temporary files and logs go (validated at construction).

    Parameters
    ----------
    ssd_dir, hdd_dir : str, optional
        Tier directories; default Dask config ``placement.ssd-dir``/``placement.hdd-dir``,
        else folders below the worker's local directory.
    log_dir : str, optional
        Log directory; default Dask config ``placement.log-dir``; unset means no log.
    chooser : TierChooser, optional
        Tier chooser for a store created here (a ``TieredSpillBuffer``'s store keeps its own).
    route_p2p : bool
        Route P2P shuffle and rechunk files through the store (default True).
    flush_interval_s : float
        Seconds between checks that flush buffered log rows.
    """

    ssd_dir: str | None = None
    hdd_dir: str | None = None
    log_dir: str | None = None
    chooser: TierChooser | None = None
    route_p2p: bool = True
    flush_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if not (isinstance(self.flush_interval_s, (int, float)) and self.flush_interval_s > 0):
            raise ValueError(f"flush_interval_s={self.flush_interval_s!r} must be > 0 seconds")
        if self.chooser is not None and not callable(getattr(self.chooser, "choose", None)):
            raise TypeError(f"chooser={self.chooser!r} has no choose(request) method")


class WorkerStorage:
    """Store, log writer and hooks of one worker (see the module docstring).

    Use :meth:`attach`; :meth:`close` undoes it.
    """

    def __init__(
        self,
        *,
        store: TieredFileStore,
        builder: RequestBuilder,
        writer: LogWriter | None,
        owns_store: bool,
    ) -> None:
        self.store = store
        self.builder = builder
        self.writer = writer
        self.owns_store = owns_store
        self.router: ShuffleFileRouter | None = None
        self._flush_callback: PeriodicCallback | None = None
        self._worker: Any = None

    @classmethod
    def attach(cls, worker: Any, options: StorageOptions | None = None) -> WorkerStorage:
        """Set up placement storage on ``worker`` (a ``distributed.Worker``)."""
        options = options or StorageOptions()
        data = worker.data
        if isinstance(data, TieredSpillBuffer):
            self = cls(
                store=data.store, builder=data.builder, writer=data.log_writer, owns_store=False
            )
            limit = getattr(worker.memory_manager, "memory_limit", None)
            if limit and data.memory_limit is None:
                # an explicit target is kept; only a defaulted one follows the worker's limit
                fraction = None if data.explicit_target else default_target_fraction()
                data.set_memory_limit(limit, fraction)
        else:
            ssd, hdd = tier_dirs(worker.local_directory, options.ssd_dir, options.hdd_dir)
            logs = options.log_dir or config_dir(LOG_DIR_KEY)
            writer = LogWriter(logs) if logs else None
            store = TieredFileStore(
                ssd_dir=ssd, hdd_dir=hdd, chooser=options.chooser, sink=writer, label="worker"
            )
            self = cls(store=store, builder=RequestBuilder(), writer=writer, owns_store=True)
        self._worker = worker
        self.builder.bind_worker(worker)
        if options.route_p2p:
            router = ShuffleFileRouter(self.store, self.builder, worker.address)
            try:
                router.install()
                self.router = router
            except StorageError as exc:
                warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
        if self.writer is not None:
            writer = self.writer

            def flush_if_due() -> None:
                writer.maybe_flush()

            pc = PeriodicCallback(flush_if_due, options.flush_interval_s * 1000)
            worker.periodic_callbacks[_FLUSH_CALLBACK] = pc
            pc.start()
            self._flush_callback = pc
        return self

    def flush(self) -> dict[str, int]:
        """Write buffered log rows now; return counts (live files, rows written, pending)."""
        if self.writer is not None:
            self.writer.flush()
        return self.state()

    def state(self) -> dict[str, int]:
        """Counters for drivers and tests: live files, rows written, fallbacks."""
        return {
            "live_files": len(self.store.live_files()),
            "rows_written": self.writer.rows_written if self.writer else 0,
            "rows_pending": self.writer.pending if self.writer else 0,
            "fallbacks": self.store.fallbacks,
            "orphans_removed": self.store.orphans_removed,
        }

    def close(self, *, worker_closing: bool = False) -> None:
        """Stop routing and flushing, write buffered rows; close the store if created here.

        A ``TieredSpillBuffer``'s store stays open unless ``worker_closing``: a worker
        that only drops the plugin may still hold spilled keys. When the worker itself is
        closing, its remaining files are deleted and logged.
        """
        if self.router is not None:
            self.router.uninstall()
            self.router = None
        if self._flush_callback is not None:
            self._flush_callback.stop()
            if self._worker is not None:
                self._worker.periodic_callbacks.pop(_FLUSH_CALLBACK, None)
            self._flush_callback = None
        if self.owns_store or worker_closing:
            self.store.close()
            if self.writer is not None:
                self.writer.close()
        elif self.writer is not None:
            try:
                self.writer.flush()
            except Exception:
                logger.exception("flushing placement log rows at worker shutdown failed")


def worker_storage(dask_worker: Any) -> WorkerStorage:
    """The :class:`WorkerStorage` of a worker running the placement plugin.

    Raises
    ------
    StorageError
        If the worker has no ``placement-storage`` plugin.
    """
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    storage = getattr(plugin, "storage", None)
    if storage is None:
        raise StorageError(
            f"worker {dask_worker.address} has no {PLUGIN_NAME!r} plugin; register "
            "placement.storage.PlacementWorkerPlugin on the client first"
        )
    return storage


def flush_worker_logs(dask_worker: Any) -> dict[str, int]:
    """``client.run`` helper: flush this worker's log and return its counters."""
    return worker_storage(dask_worker).flush()


def worker_storage_state(dask_worker: Any) -> dict[str, int]:
    """``client.run`` helper: this worker's storage counters (see :meth:`WorkerStorage.state`)."""
    return worker_storage(dask_worker).state()
