"""The worker-thread lifecycle shared by the built-in producers."""

from __future__ import annotations

import threading
import time

import pytest

from dataplane.background import BackgroundProducer


class Counting(BackgroundProducer):
    """Puts ``n`` integers, then raises if ``fail`` is set."""

    def __init__(self, n: int, *, fail: bool = False) -> None:
        super().__init__(prefetch=2, thread_name="test-background")
        self.n, self.fail = n, fail
        self.released: list[int] = []
        self.cleaned = threading.Event()

    def _run(self) -> bool:
        for i in range(self.n):
            if not self._put(i):
                return False
        if self.fail:
            raise ValueError("boom after the last item")
        return True

    def _release(self, item: int) -> None:
        self.released.append(item)

    def _cleanup(self) -> None:
        self.cleaned.set()


def test_items_in_order_then_end() -> None:
    producer = Counting(5)
    assert list(producer) == [0, 1, 2, 3, 4]
    assert producer.released == [0, 1, 2, 3, 4]
    assert producer.cleaned.wait(5)


def test_worker_error_reaches_the_consumer_after_earlier_items() -> None:
    got: list[int] = []
    with pytest.raises(ValueError, match="boom after the last item"):
        for item in Counting(3, fail=True):
            got.append(item)
    assert got == [0, 1, 2]


def test_break_stops_and_joins_the_worker() -> None:
    producer = Counting(10_000)
    for item in producer:
        if item == 3:
            break
    producer.close()
    assert producer.cleaned.wait(5)
    deadline = time.monotonic() + 5
    while any(t.name == "test-background" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "worker thread still alive"
        time.sleep(0.01)


def test_iterates_once() -> None:
    producer = Counting(1)
    list(producer)
    with pytest.raises(RuntimeError, match="iterates once"):
        list(producer)
