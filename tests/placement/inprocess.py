"""A real Dask worker of a real scheduler, both started in the test's own process: for
tests of what the storage reads of and sets on a ``distributed.Worker``, without the
start-up time of a cluster of worker processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from distributed import Scheduler, Worker


@asynccontextmanager
async def started_worker(**worker_kwargs: Any) -> AsyncIterator[Worker]:
    """A started one-thread ``Worker`` of a started scheduler, both closed after the block;
    ``worker_kwargs`` go to the worker (``local_directory``, ``data``, ``memory_limit``)."""
    async with (
        Scheduler(port=0, dashboard=False, dashboard_address=None) as scheduler,
        Worker(scheduler.address, nthreads=1, **worker_kwargs) as worker,
    ):
        yield worker


def on_a_worker(check: Callable[[Worker], Any]) -> Any:
    """``check(worker)`` run on a ``started_worker``; its answer returned.

    Tasks ``check`` adds to the worker's state (``add_task`` of the context tests) are
    taken out again before the worker closes.
    """

    async def main() -> Any:
        async with started_worker() as worker:
            keys = set(worker.state.tasks)
            try:
                return check(worker)
            finally:
                worker.state.executing.clear()
                for key in set(worker.state.tasks) - keys:
                    del worker.state.tasks[key]

    return asyncio.run(main())
