"""The multi-process ``LocalCluster`` of the placement commands (``dataplane serve`` and
``dataplane placement collect``): no HTTP server unless asked for, and worker processes that
leave Ctrl-C to the process that started them.

:func:`local_cluster` starts a ``distributed.LocalCluster`` and closes it on exit. Two things
differ from ``LocalCluster`` itself:

* **No HTTP server without a dashboard address.** ``distributed`` starts the scheduler's HTTP
  server, on port 8787 of every interface, even when told ``dashboard_address=None``
  (dask/distributed#7207). Without a dashboard address it is started on a free loopback port
  instead (no clash on 8787, nothing opened to the network) and stopped as soon as the
  cluster is up; ``cluster.dashboard_link`` is then ``""``.
* **Ctrl-C reaches the parent alone.** A terminal sends SIGINT to every process of its
  foreground job, worker processes included; each would die of a ``KeyboardInterrupt`` with a
  traceback, and its nanny would log the loss, while the parent closes the cluster anyway.
  This module is therefore also a worker preload (``distributed.worker.preload``): in a worker
  process it ignores SIGINT, so the parent's ``KeyboardInterrupt`` closes the workers the
  ordinary way (their nanny asks them to stop; past its timeout it kills them). A worker
  process interrupted before the preload runs (in its first second or so, while Python starts
  and imports ``distributed``) still dies of the interrupt.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["dask_setup", "local_cluster"]

#: This module, as a worker preload (it is also one).
WORKER_PRELOAD = __name__
WORKER_PRELOAD_KEY = "distributed.worker.preload"

#: where the scheduler's HTTP server listens, until it is stopped, when no dashboard is wanted:
#: a free port of the loopback interface (so no clash on 8787 and nothing opened to the network)
_NO_DASHBOARD_ADDRESS = "127.0.0.1:0"


async def _stop_http_server(scheduler: Any) -> None:
    """Stop the scheduler's HTTP server and drop it from its services (on its event loop)."""
    server = scheduler.services.pop("dashboard", None)
    if server is not None:
        server.stop()


@contextlib.contextmanager
def local_cluster(*, dashboard_address: str | None = None, **kwargs: Any) -> Iterator[Any]:
    """A ``distributed.LocalCluster`` without an unwanted HTTP server; closed on exit.

    Parameters
    ----------
    dashboard_address : str, optional
        Dashboard address (``":8787"``); ``None`` (the default, unlike ``LocalCluster``'s)
        starts no dashboard and no HTTP server on the scheduler.
    **kwargs
        Passed to ``LocalCluster`` (``n_workers``, ``processes``, ``scheduler_kwargs``, ...).
        With worker processes (``processes=True``, ``LocalCluster``'s default) this module is
        added to the front of the workers' preloads (``preload=`` if given, else the Dask
        config key ``distributed.worker.preload``, set while the cluster runs), so that
        worker processes ignore SIGINT.

    Yields
    ------
    distributed.LocalCluster
        The running cluster.
    """
    import dask
    from distributed import LocalCluster

    no_dashboard = dashboard_address is None
    if no_dashboard:
        kwargs["scheduler_kwargs"] = {
            "dashboard": False,
            "dashboard_address": _NO_DASHBOARD_ADDRESS,
            **(kwargs.get("scheduler_kwargs") or {}),
        }
    config: dict[str, Any] = {}
    if kwargs.get("processes", True):
        if kwargs.get("preload") is not None:
            kwargs["preload"] = _with_preload(kwargs["preload"])
        else:
            config[WORKER_PRELOAD_KEY] = _with_preload(
                dask.config.get(WORKER_PRELOAD_KEY, default=None)
            )
    with (
        dask.config.set(config),
        LocalCluster(dashboard_address=dashboard_address, **kwargs) as cluster,
    ):
        if no_dashboard:
            cluster.sync(_stop_http_server, cluster.scheduler)
            cluster.scheduler_info.get("services", {}).pop("dashboard", None)
        yield cluster


def _with_preload(preloads: str | list[str] | None) -> list[str]:
    """``preloads`` (one or several, or none) with this module first, once."""
    current = [preloads] if isinstance(preloads, str) else list(preloads or [])
    return [WORKER_PRELOAD, *(p for p in current if p != WORKER_PRELOAD)]


async def dask_setup(server: Any) -> None:
    """Worker preload: in a worker process, ignore SIGINT (its parent handles Ctrl-C).

    Does nothing elsewhere: in a worker running in the process that started the cluster
    (``processes=False``) or in a process that is no child (``dask worker --no-nanny``).
    """
    from distributed import Worker

    if (
        isinstance(server, Worker)
        and multiprocessing.parent_process() is not None
        and threading.current_thread() is threading.main_thread()
    ):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
