"""Functions that tests run on worker processes (``client.run``, ``client.submit``).

A worker imports this module to run them, so it imports nothing heavy: no pandas, which a
worker running a pipeline without dataframes has not imported either (the first log flush
of such a worker imports it through pyarrow, which takes long enough to matter when the
flush has a deadline).
"""

from __future__ import annotations

import os
import time
from typing import Any


def make_rows(n_deleted: int, n_live: int, dask_worker: Any = None) -> dict[str, Any]:
    """On a worker: ``n_deleted`` files written and deleted (their rows buffered) and
    ``n_live`` written and left alive; the worker's pid, store label and counters."""
    from placement.storage import FileRequest
    from placement.storage.worker import worker_storage

    storage = worker_storage(dask_worker)
    store = storage.store
    for i in range(n_deleted + n_live):
        request = FileRequest(file_kind="spill", created_at=time.time(), pipeline="sig")
        handle = store.create(f"sig/{i}", request)
        store.write(handle, b"x" * 100)
        if i < n_deleted:
            store.delete(handle)
    return {"pid": os.getpid(), "label": store.label, **storage.state()}


def hog_memory(nbytes: int) -> None:
    """Touch ``nbytes`` bytes of memory and hold them (until the worker is terminated)."""
    block = bytearray(nbytes)
    for i in range(0, nbytes, 4096):
        block[i] = 1
    time.sleep(60)
