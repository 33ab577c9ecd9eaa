"""Client-side helpers: talk to the placement service on a cluster's scheduler.

Each takes a ``distributed.Client`` and sends one message to the scheduler's handler
(over the client's own connection, TLS included). In an asynchronous client they
return awaitables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any


def reload_model(client: Any, path: str | os.PathLike[str] | None = None) -> Any:
    """Load the model at ``path`` on the scheduler now (default: ``placement.model`` again).

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
    """
    return client.sync(
        client.scheduler.placement_reload_model, path=None if path is None else os.fspath(path)
    )


def service_state(client: Any) -> Any:
    """The service's ledger, threshold, model and per-worker records (a dict)."""
    return client.sync(client.scheduler.placement_state)


def decide(client: Any, requests: Sequence[Mapping[str, Any]], *, worker: str = "client") -> Any:
    """Decide a batch of files on the scheduler (see :meth:`PlacementService.decide`)."""
    return client.sync(
        client.scheduler.placement_decide, worker=worker, requests=[dict(r) for r in requests]
    )
