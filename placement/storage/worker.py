"""The placement storage of one Dask worker: store, log writer, spill and P2P hooks.

:class:`WorkerStorage` is the plain class behind
:class:`~placement.storage.plugin.PlacementWorkerPlugin`; it can be tested and used
without a plugin. When the worker's ``data`` is a
:class:`~placement.storage.spill.TieredSpillBuffer`, its store and log writer are
shared, so spill and P2P files of a worker land in one store and one log.

What a worker loses when its process dies: its writer flushes the buffered rows every
``flush_interval_s`` seconds (when there are any); SIGTERM and SIGINT save them first
(:mod:`placement.storage.shutdown`); SIGKILL loses the rows of the last
``flush_interval_s`` seconds and those of the live files, whose count the next store on
the same tier directories records (:mod:`placement.logwriter`).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import warnings
from dataclasses import dataclass
from typing import Any

from tornado.ioloop import PeriodicCallback

from placement.errors import PlacementTypeError
from placement.logwriter import FlushMode, LogWriter
from placement.storage.chooser import TierChooser
from placement.storage.config import (
    HDD_DIR_KEY,
    LOG_DIR_KEY,
    SSD_DIR_KEY,
    check_storage_dirs,
    config_dir,
    default_target_fraction,
    env_name,
    tier_dirs,
)
from placement.storage.context import RequestBuilder
from placement.storage.errors import StorageConfigError, StorageError
from placement.storage.shuffle import ShuffleFileRouter
from placement.storage.shutdown import SignalSaver
from placement.storage.spill import TieredSpillBuffer
from placement.storage.store import TieredFileStore

logger = logging.getLogger(__name__)

PLUGIN_NAME = "placement-storage"
_FLUSH_CALLBACK = "placement-log-flush"


def _warn_defaults(options: StorageOptions, ssd: str, hdd: str, logs: str | None) -> None:
    """Say so when a worker's tiers default to its local directory (one disk: placement
    then has no SSD to choose) or it writes no I/O log; both start, as for a local test."""
    unset = [
        key
        for key, given in ((SSD_DIR_KEY, options.ssd_dir), (HDD_DIR_KEY, options.hdd_dir))
        if not given and not config_dir(key)
    ]
    if len(unset) == 2:
        logger.warning(
            "%s not set: the tiers default to %s and %s, below the worker's local directory "
            "(one disk, so no tier is faster); set %s to the SSD and HDD directories",
            " and ".join(unset),
            ssd,
            hdd,
            ", ".join(f"{key} ({env_name(key)})" for key in unset),
        )
    elif unset:
        [key] = unset
        tier, path = ("SSD", ssd) if key == SSD_DIR_KEY else ("HDD", hdd)
        logger.warning(
            "%s not set: the %s tier defaults to %s, below the worker's local directory; "
            "set %s (%s) to the %s directory",
            key,
            tier,
            path,
            key,
            env_name(key),
            tier,
        )
    if not logs:
        logger.warning(
            "%s not set: this worker writes no I/O log, so its files cannot train the next "
            "model; set %s (%s) to a directory the workers share",
            LOG_DIR_KEY,
            LOG_DIR_KEY,
            env_name(LOG_DIR_KEY),
        )


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
        Seconds between flushes of the buffered log rows, made only when there are some
        (default 5): the rows a worker killed by SIGKILL loses are those of its last
        ``flush_interval_s`` seconds.
    save_on_signal : bool
        In a worker running in its process's main thread, save the log rows when SIGTERM
        or SIGINT stops the process (:class:`~placement.storage.shutdown.SignalSaver`;
        default True).
    """

    ssd_dir: str | None = None
    hdd_dir: str | None = None
    log_dir: str | None = None
    chooser: TierChooser | None = None
    route_p2p: bool = True
    flush_interval_s: float = 5.0
    save_on_signal: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.flush_interval_s, (int, float)) and self.flush_interval_s > 0):
            raise StorageConfigError(
                f"flush_interval_s={self.flush_interval_s!r} must be > 0 seconds"
            )
        if not isinstance(self.save_on_signal, bool):
            raise PlacementTypeError(
                f"save_on_signal={self.save_on_signal!r} must be True or False"
            )
        if self.chooser is not None and not callable(getattr(self.chooser, "choose", None)):
            raise PlacementTypeError(f"chooser={self.chooser!r} has no choose(request) method")


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
        self._saver: SignalSaver | None = None
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
            _warn_defaults(options, ssd, hdd, logs)
            check_storage_dirs(ssd, hdd, logs)  # a clear error before anything is created
            # rows come from whichever thread deletes a file, sometimes the event loop: the
            # flushes they make due are written by the writer's own thread
            writer = LogWriter(logs, flush_mode=FlushMode.BACKGROUND) if logs else None
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

            async def flush_if_due() -> None:
                # in a thread: a flush writes and fsyncs a file, which on a busy disk can
                # take longer than a lease renewal may wait, and the event loop that renews
                # leases and sends heartbeats must not wait for the disk (tornado awaits the
                # coroutine and skips calls while one runs)
                await asyncio.to_thread(writer.maybe_flush, min_age_s=0)

            pc = PeriodicCallback(flush_if_due, options.flush_interval_s * 1000)
            worker.periodic_callbacks[_FLUSH_CALLBACK] = pc
            pc.start()
            self._flush_callback = pc
        if options.save_on_signal:
            # SIGINT ends a worker process started by a nanny (placement.storage.shutdown)
            ending = [signal.SIGINT] if multiprocessing.parent_process() is not None else []
            saver = SignalSaver(self._save_rows, self._close_at_exit, ending=ending)
            if saver.install():
                self._saver = saver
                if self.writer is not None:
                    self.writer.prepare()  # not in the handler, with the nanny's SIGKILL near
        return self

    def _save_rows(self) -> None:
        """Write the buffered log rows (a signal came; the process may go on)."""
        if self.writer is not None:
            self.writer.flush()

    def _close_at_exit(self) -> None:
        """Save everything before the process ends (a signal came whose default action
        ends it): buffered rows first, then the store closed (every live file deleted,
        its row written) and the log closed. Each step is tried even if one fails."""
        try:
            self._save_rows()
        finally:
            try:
                self.store.close()
            finally:
                if self.writer is not None:
                    self.writer.close()

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
        if self._saver is not None:
            self._saver.uninstall()
            self._saver = None
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
            f"worker {dask_worker.address} has no placement storage (no {PLUGIN_NAME!r} "
            "plugin): start the workers with `dask worker --preload placement.dask` (if they "
            "were, the worker's log says why the storage did not start), or register "
            "placement.storage.PlacementWorkerPlugin on the client"
        )
    return storage


def flush_worker_logs(dask_worker: Any) -> dict[str, int]:
    """``client.run`` helper: flush this worker's log and return its counters."""
    return worker_storage(dask_worker).flush()


def worker_storage_state(dask_worker: Any) -> dict[str, int]:
    """``client.run`` helper: this worker's storage counters (see :meth:`WorkerStorage.state`)."""
    return worker_storage(dask_worker).state()
