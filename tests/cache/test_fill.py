"""The background filler never stalls serving: with its queue full, a batch is dropped."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from cache import CacheFiller, CacheStore, FillMode
from tests.cache import helpers

Opener = Callable[..., CacheStore]

#: Bound on waits that only guard against a hang (never reached when the code is right).
HANG_GUARD_S = 30.0


def test_a_full_queue_drops_the_batch_instead_of_waiting_for_a_slow_writer(
    open_store: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(fill=FillMode.BACKGROUND, fill_queue=1)
    writing = threading.Event()  # the writer thread is inside its transaction
    release = threading.Event()  # lets it finish
    real_put, real_encode = store.put_encoded, store.encode_batch
    encoded: list[int] = []

    def slow_put(batches: Any) -> int:  # injected fault: a disk that stalls
        writing.set()
        release.wait(2 * HANG_GUARD_S)  # set by the test; outlasts the guard on submit
        return real_put(batches)

    def counting_encode(indices: Any, *args: Any, **kwargs: Any) -> Any:  # observation only
        encoded.append(len(indices))
        return real_encode(indices, *args, **kwargs)

    monkeypatch.setattr(store, "put_encoded", slow_put)
    monkeypatch.setattr(store, "encode_batch", counting_encode)
    filler = CacheFiller(store)
    assert filler.queue_batches == 1
    batches = [np.arange(k * 8, (k + 1) * 8) for k in range(3)]
    results: list[bool] = []

    def serve() -> None:
        idx = batches[0]
        results.append(filler.submit(idx, 0, helpers.images(idx, 0), helpers.labels(idx)))
        if not writing.wait(HANG_GUARD_S):  # the writer took batch 0 and is stuck writing it
            return
        for idx in batches[1:]:  # batch 1 fills the queue; batch 2 finds it full
            results.append(filler.submit(idx, 0, helpers.images(idx, 0), helpers.labels(idx)))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        server.join(HANG_GUARD_S)
        assert not server.is_alive(), "submit waited for the writer: serving stalled"
        assert writing.is_set()
        assert results == [True, True, False]
        assert filler.stats.submitted == 24
        assert filler.stats.dropped_queue_full == 8
        assert filler.stats.dropped_not_admitting == 0
        assert encoded == [8, 8], "a dropped batch is not encoded"
    finally:
        release.set()
        server.join(HANG_GUARD_S)
        filler.close()
    # the two queued batches were written; the dropped one was not
    assert filler.stats.written == 16
    assert helpers.check_batch(store, np.arange(16), 0) == 16
    assert helpers.check_batch(store, batches[2], 0) == 0
