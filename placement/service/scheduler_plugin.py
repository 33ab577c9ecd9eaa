"""The scheduler plugin hosting the placement service (a thin shell over
:class:`PlacementService`)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from placement.errors import ModelError, PlacementError
from placement.model import ModelSet
from placement.service.config import MODEL_KEY, ServiceConfig
from placement.service.errors import StaleReport, WorkerRemoved
from placement.service.service import PlacementService
from placement.storage.config import env_name

logger = logging.getLogger(__name__)

#: Decision batches of at least this many requests are predicted off the event loop
#: (:meth:`PlacementSchedulerPlugin.handle_decide`); smaller ones are decided on the loop.
THREADED_BATCH = 256

#: Keys of a ``placement_sync`` report that :meth:`PlacementService.sync` takes; a report
#: with others (from a newer worker) is served on these, the others ignored with a warning.
_SYNC_KEYS = frozenset(inspect.signature(PlacementService.sync).parameters) - {"self"}

PLUGIN_NAME = "placement-service"
#: Scheduler handlers the plugin adds: message op -> method name.
HANDLERS = {
    "placement_sync": "handle_sync",
    "placement_decide": "handle_decide",
    "placement_state": "handle_state",
    "placement_reload_model": "handle_reload_model",
}


class PlacementSchedulerPlugin(SchedulerPlugin):
    """Hosts a :class:`PlacementService` on the scheduler and answers workers and clients.

    Lifecycle: ``start(scheduler)`` adds the handlers of :data:`HANDLERS` to
    ``scheduler.handlers`` (so they travel over Dask's own comms, TLS included when the
    cluster has a ``Security``); ``remove_worker`` drops a departed worker's share of
    the SSD ledger and refuses its later renewals, ``add_worker`` accepts a worker
    (again); ``close()`` removes the handlers. Added by the ``placement.dask`` preload
    (``dask scheduler --preload placement.dask``), with
    ``client.register_plugin(PlacementSchedulerPlugin(...))``, or in the scheduler's
    process with ``scheduler.add_plugin(...)``. A service that cannot be built from the
    config makes ``start`` log one error line (the key and the fix) and raise, so a
    scheduler starting with the plugin fails to start.

    Parameters
    ----------
    service : PlacementService, optional
        The service to host; by default one built from Dask's config
        (:meth:`ServiceConfig.from_dask_config`) when the plugin starts.
        ``client.register_plugin`` pickles the plugin, so the scheduler then hosts a
        *copy* of this service (its clocks must pickle too): read its state with
        :func:`~placement.service.client.service_state`, not from this object.
    models : ModelSet, optional
        Without ``service``: the models at ``placement.model``, already loaded, for the
        service built at start (``dataplane serve`` loads them once, to refuse a bad model
        before its cluster starts, and hands them to its scheduler this way).
    """

    name = PLUGIN_NAME

    def __init__(
        self, service: PlacementService | None = None, *, models: ModelSet | None = None
    ) -> None:
        if service is not None and not isinstance(service, PlacementService):
            raise TypeError(f"service must be a PlacementService, got {type(service).__name__}")
        if models is not None and (service is not None or not isinstance(models, ModelSet)):
            raise TypeError(
                "models must be a ModelSet, given without a service (they serve the one "
                "built from Dask's config)"
            )
        self.service = service
        self.models = models
        self.scheduler: Any = None
        self._unknown_logged = False

    async def start(self, scheduler: Any) -> None:
        if self.service is None:
            try:
                self.service = service_from_dask_config(models=self.models)
            except PlacementError as exc:
                # a configuration error: one line that names the key and the fix, no traceback
                logger.error("placement service not started: %s", exc)
                raise
        self.scheduler = scheduler
        for op, method in HANDLERS.items():
            scheduler.handlers[op] = getattr(self, method)
        logger.info("placement service started: %r", self.service)

    async def close(self) -> None:
        if self.scheduler is not None:
            for op, method in HANDLERS.items():
                if self.scheduler.handlers.get(op) == getattr(self, method):
                    del self.scheduler.handlers[op]

    def add_worker(self, scheduler: Any, worker: str) -> None:
        if self.service is not None:
            self.service.add_worker(worker)

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        if self.service is not None:
            self.service.remove_worker(worker)

    def _service(self) -> PlacementService:
        if self.service is None:
            raise RuntimeError("the placement scheduler plugin has not started")
        return self.service

    # ------------------------------------------------------------------ handlers
    async def handle_sync(self, **message: Any) -> dict[str, Any]:
        """``placement_sync``: a worker's report; answers its new lease, or
        ``{"refused": reason}`` to a worker the scheduler has removed and to a report
        overtaken by a later one of its worker."""
        unknown = message.keys() - _SYNC_KEYS
        if unknown:  # a newer worker's report: what this scheduler knows of it still counts
            if not self._unknown_logged:
                logger.warning(
                    "placement_sync from %s has keys this scheduler does not know (%s); "
                    "ignoring them (a newer dataplane on the workers? upgrade the scheduler's)",
                    message.get("worker"),
                    ", ".join(sorted(unknown)),
                )
                self._unknown_logged = True
            message = {k: v for k, v in message.items() if k in _SYNC_KEYS}
        try:
            return self._service().sync(**message)
        except (WorkerRemoved, StaleReport) as exc:
            return {"refused": str(exc)}

    async def handle_decide(
        self, worker: str, requests: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """``placement_decide``: a batch of decision requests. A batch of
        :data:`THREADED_BATCH` requests or more is checked and predicted in a thread (its
        features and model calls grow with its length, up to
        :data:`~placement.service.service.MAX_BATCH`), so the event loop goes on serving
        the scheduler; it is then placed on the loop, where the ledger's other updates
        happen."""
        service = self._service()
        if isinstance(requests, list) and len(requests) >= THREADED_BATCH:
            batch = await asyncio.to_thread(service.predict_batch, worker=worker, requests=requests)
            return service.admit_batch(batch)
        return service.decide(worker=worker, requests=requests)

    async def handle_state(self) -> dict[str, Any]:
        """``placement_state``: ledger, threshold, model and worker records."""
        return self._service().state()

    async def handle_reload_model(self, path: str | None = None) -> dict[str, Any]:
        """``placement_reload_model``: load a new model without a restart (in a thread).

        ``path`` is read on the scheduler: a relative one from the scheduler's working
        directory (the error says so). A model that cannot be loaded is answered with
        ``{"refused": reason}``, which the client helper raises as a
        :class:`~placement.errors.ModelError`, and logged on the scheduler as one line (a
        raised error would print distributed's traceback there on every attempt); the
        current model stays in use."""
        try:
            return await asyncio.to_thread(self._service().reload_model, path)
        except ModelError as exc:
            reason = str(exc)
            if path is not None and not os.path.isabs(path):
                reason += (
                    f" (the scheduler read the relative path {path!r} from its working "
                    f"directory {os.getcwd()}; give a path the scheduler can read, absolute "
                    "where the client's and the scheduler's directories differ)"
                )
            logger.warning("placement: model not reloaded, the current one stays: %s", reason)
            return {"refused": reason}

    def __getstate__(self) -> dict[str, Any]:
        # every attribute travels (a copy is built without __init__) but the scheduler's
        return {**self.__dict__, "scheduler": None}


def service_from_dask_config(*, models: ModelSet | None = None) -> PlacementService:
    """A :class:`PlacementService` built from the ``placement.*`` Dask config keys.

    Parameters
    ----------
    models : ModelSet, optional
        The models at ``placement.model``, already loaded (they are not read again).

    Raises
    ------
    ServiceConfigError
        If a key is missing or invalid (the message names the key and the fix).
    ModelError
        If ``placement.model`` names no loadable model (the message names the key).
    """
    config = ServiceConfig.from_dask_config()
    try:
        return PlacementService(config, models=models)
    except ModelError as exc:
        path = config.model_path
        if path is None:
            raise
        where = "" if os.path.isabs(path) else f" (from the working directory {os.getcwd()})"
        raise ModelError(
            f"{MODEL_KEY}={path!r}{where} cannot be loaded: {exc}; set {MODEL_KEY} "
            f"({env_name(MODEL_KEY)}) to a model directory written by `dataplane placement "
            "train --out DIR`, or unset it to start without a model"
        ) from exc
