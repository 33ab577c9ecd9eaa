"""Client-side helpers: talk to the placement service on a cluster's scheduler.

Each takes a ``distributed.Client`` and sends one message to the scheduler's handler
(over the client's own connection, TLS included). In an asynchronous client they
return awaitables. A scheduler that runs no placement service answers such a message
with nothing: the helpers raise :class:`~placement.service.errors.ServiceUnavailable`
then, rather than return ``None``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from placement.errors import ModelError
from placement.service.errors import ServiceUnavailable

#: Why a helper got no answer, and how to start the service.
NO_SERVICE = (
    "the scheduler at {address} runs no placement service (it has no {op!r} handler): start "
    "it with `dask scheduler --preload placement.dask` (or `dataplane serve`); if it was "
    "started so, the service failed to start there: see the scheduler's log for why"
)


async def _call(client: Any, op: str, **kwargs: Any) -> Any:
    """Send ``op`` to the scheduler; raise :class:`ServiceUnavailable` for no answer."""
    result = await getattr(client.scheduler, op)(**kwargs)
    if result is None:  # what Dask answers for an op it has no handler for
        address = getattr(client.scheduler, "address", None) or "?"
        raise ServiceUnavailable(NO_SERVICE.format(address=address, op=op))
    return result


def reload_model(client: Any, path: str | os.PathLike[str] | None = None) -> Any:
    """Load the model at ``path`` on the scheduler now (default: ``placement.model`` again).

    The path is read by the scheduler, on its machine. A relative ``path`` that exists
    here is resolved here first (from the client's working directory, symbolic links
    followed, so that ``link/../model`` names the directory it names here); one that
    does not is sent as it is and read from the scheduler's working directory.

    Workers receive it at their next lease renewal (within ~250 ms). The scheduler
    also re-reads the history statistics from ``placement.log-dir``, every logged file
    included. Call it between runs where you can: the evaluation's history holds finished
    runs only, and the files a running pipeline has deleted so far lean to its short-lived
    ones.

    Returns
    -------
    dict
        The new model's version, kind, source, trees and payload size (bytes).

    Raises
    ------
    ModelError
        If the scheduler cannot load the model (the current model stays in use).
    ServiceUnavailable
        If the scheduler runs no placement service.
    """
    sent: str | None = None
    if path is not None:
        sent = os.fspath(path)
        if not os.path.isabs(sent) and os.path.exists(sent):
            sent = os.path.realpath(sent)
    return client.sync(_reload_model, client, sent)


async def _reload_model(client: Any, path: str | None) -> Any:
    """Send ``placement_reload_model``; raise the scheduler's refusal as a ModelError."""
    result = await _call(client, "placement_reload_model", path=path)
    if isinstance(result, dict) and "refused" in result:
        raise ModelError(str(result["refused"]))
    return result


def service_state(client: Any) -> Any:
    """The service's ledger, threshold, model and per-worker records (a dict).

    Raises
    ------
    ServiceUnavailable
        If the scheduler runs no placement service.
    """
    return client.sync(_call, client, "placement_state")


def decide(client: Any, requests: Sequence[Mapping[str, Any]], *, worker: str = "client") -> Any:
    """Decide a batch of files on the scheduler (see :meth:`PlacementService.decide`).

    Raises
    ------
    ServiceUnavailable
        If the scheduler runs no placement service.
    """
    return client.sync(
        _call, client, "placement_decide", worker=worker, requests=[dict(r) for r in requests]
    )
