"""An embedded ``LocalCluster`` running the placement service (what ``dataplane serve`` starts).

:func:`service_cluster` sets the same Dask config a real cluster would use - the
``placement.dask`` preload for the scheduler and the workers
(``distributed.scheduler.preload`` / ``distributed.worker.preload``) and the
``placement.*`` keys - and starts a multi-process ``LocalCluster`` under it, so the
embedded cluster exercises exactly the preload path of ``dask scheduler --preload
placement.dask``. Worker processes restarted by their nanny get the same config.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import dask
from distributed.worker_memory import parse_memory_limit

from placement.errors import PlacementError
from placement.local_cluster import WORKER_PRELOAD_KEY, local_cluster
from placement.model import ModelSet
from placement.service.config import MODEL_KEY, SSD_CAPACITY_KEY, LinkConfig, size_in_bytes
from placement.service.errors import ServiceConfigError
from placement.service.scheduler_plugin import PlacementSchedulerPlugin
from placement.storage.config import (
    HDD_DIR_KEY,
    LOG_DIR_KEY,
    SSD_DIR_KEY,
    check_storage_dirs,
    spill_heavy_settings,
)

logger = logging.getLogger(__name__)

PRELOAD = "placement.dask"
SCHEDULER_PRELOAD_KEY = "distributed.scheduler.preload"


def tight_memory(target_fraction: float = 0.02) -> dict[str, Any]:
    """Dask config for spill- and shuffle-heavy runs: P2P shuffles, small managed memory."""
    if not 0 < target_fraction < 0.7:
        raise ServiceConfigError(f"target_fraction={target_fraction!r} must be in (0, 0.7)")
    return spill_heavy_settings(target_fraction)


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """An embedded cluster running the service (validated at construction).

    Parameters
    ----------
    ssd_dir, hdd_dir : str
        Tier directories shared by the workers.
    ssd_capacity : int or str
        Cluster-wide SSD budget (bytes, or ``"2GiB"``).
    log_dir : str, optional
        I/O log directory (and the history the model reads).
    model : str, optional
        Model directory (``dataplane placement train --out``).
    n_workers, threads_per_worker : int
        Worker processes and threads each.
    memory_limit : str or float
        Memory limit of each worker, as Dask reads it: a size (``"1GiB"``, the default, or
        bytes), a fraction of this machine's memory (``"0.25"``), ``"auto"`` (its share by
        threads) or ``"0"`` or ``None`` (no limit).
    local_directory : str, optional
        Dask's scratch directory for the workers.
    scheduler_port : int
        Scheduler port (0: any free port).
    dashboard_address : str, optional
        Dashboard address (``":8787"``); ``None`` (the default) starts no dashboard and no
        HTTP server on the scheduler.
    link : LinkConfig, optional
        Renewal settings (``placement.service.*`` keys).
    config : mapping
        More Dask config (e.g. :func:`tight_memory`); the keys above win.
    """

    ssd_dir: str
    hdd_dir: str
    ssd_capacity: int | str
    log_dir: str | None = None
    model: str | None = None
    n_workers: int = 2
    threads_per_worker: int = 1
    memory_limit: str | float | None = "1GiB"
    local_directory: str | None = None
    scheduler_port: int = 0
    dashboard_address: str | None = None
    link: LinkConfig | None = None
    config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("n_workers", "threads_per_worker"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ServiceConfigError(f"{name}={value!r} must be a positive int")
        port = self.scheduler_port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
            raise ServiceConfigError(f"scheduler_port={port!r} must be in [0, 65535]")
        size_in_bytes("ssd_capacity", self.ssd_capacity)  # as the scheduler will read it
        _check_memory_limit(self.memory_limit, self.threads_per_worker)
        if self.ssd_dir == self.hdd_dir:
            raise ServiceConfigError(
                f"ssd_dir and hdd_dir are both {self.ssd_dir!r}; give each tier its own directory"
            )

    def dask_config(self) -> dict[str, Any]:
        """The Dask config the cluster runs under (preloads and ``placement.*`` keys)."""
        out = dict(self.config)
        for key in (SCHEDULER_PRELOAD_KEY, WORKER_PRELOAD_KEY):
            current = list(out.get(key) or dask.config.get(key, default=None) or [])
            out[key] = current if PRELOAD in current else [*current, PRELOAD]
        out[SSD_DIR_KEY] = self.ssd_dir
        out[HDD_DIR_KEY] = self.hdd_dir
        out[SSD_CAPACITY_KEY] = self.ssd_capacity
        out[LOG_DIR_KEY] = self.log_dir
        out[MODEL_KEY] = self.model
        if self.link is not None:
            out.update(self.link.dask_config())
        return out


@contextlib.contextmanager
def service_cluster(
    options: ServeOptions, *, models: ModelSet | None = None, **cluster_kwargs: Any
) -> Iterator[Any]:
    """A multi-process ``LocalCluster`` running the placement service; closed on exit.

    ``cluster_kwargs`` go to ``LocalCluster`` (e.g. ``security=``). ``models`` are the models
    at ``options.model``, already loaded: the scheduler, which runs in this process, serves
    them instead of reading the directory again (its plugin is added before the preload's,
    which then adds none: ``idempotent``).

    The cluster is a :func:`placement.local_cluster.local_cluster`: without
    ``options.dashboard_address`` (nor a ``dashboard_address`` in ``cluster_kwargs``) it has no
    dashboard and its scheduler no HTTP server at all (``cluster.dashboard_link`` is ``""``),
    and its worker processes ignore SIGINT, so Ctrl-C stops the cluster from this process.

    Raises
    ------
    PlacementError
        If the service cannot start on the scheduler or a worker (a ``placement.*`` value,
        a model, a directory): the error that stopped it, rather than Dask's "failed to
        start".
    """
    kwargs: dict[str, Any] = {
        "n_workers": options.n_workers,
        "threads_per_worker": options.threads_per_worker,
        "processes": True,
        "memory_limit": options.memory_limit,
        "scheduler_port": options.scheduler_port,
        "dashboard_address": options.dashboard_address,
    }
    if options.local_directory:
        kwargs["local_directory"] = options.local_directory
    kwargs.update(cluster_kwargs)
    if models is not None:
        if options.model is None:
            raise ServiceConfigError(
                "models given without options.model: give the directory they were loaded from"
            )
        scheduler_kwargs = dict(kwargs.get("scheduler_kwargs") or {})
        plugin = PlacementSchedulerPlugin(models=models)
        scheduler_kwargs["plugins"] = [*scheduler_kwargs.get("plugins", ()), plugin]
        kwargs["scheduler_kwargs"] = scheduler_kwargs
    # here, not only in the workers, whose start fails with Dask's "Nanny failed to start"
    check_storage_dirs(options.ssd_dir, options.hdd_dir, options.log_dir)
    with dask.config.set(options.dask_config()), contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(local_cluster(**kwargs))
        except RuntimeError as exc:  # Dask's "Cluster failed to start", caused by ours?
            cause = _placement_cause(exc)
            if cause is None:
                raise
            raise type(cause)(*cause.args) from exc
        yield cluster


def _check_memory_limit(value: object, threads: int) -> None:
    """Refuse a worker memory limit that Dask cannot read, or reads as a negative size.

    Read by Dask's own ``parse_memory_limit``, so that ``"auto"``, a fraction and ``"0"``
    (no limit) mean here what they mean to ``dask worker --memory-limit``.
    """
    fix = "give a size such as '2GiB', a fraction of this machine's memory such as '0.25' or 'auto'"
    if value is None:  # Dask's "no limit"
        return
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise ServiceConfigError(f"memory_limit={value!r} is not a memory limit; {fix}")
    try:
        limit = parse_memory_limit(value, threads, logger=logger)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ServiceConfigError(f"memory_limit={value!r}: {exc}; {fix}") from None
    if limit is not None and limit < 0:
        raise ServiceConfigError(f"memory_limit={value!r} is negative; {fix}")


def _placement_cause(exc: BaseException) -> PlacementError | None:
    """The :class:`PlacementError` that ``exc`` was (indirectly) raised from, if any."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, PlacementError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None
