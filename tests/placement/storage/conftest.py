"""Fixtures of the storage tests: stop signals a test can raise without ending its process."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest


class Calls:
    """What the saver and the previous handler were asked to do, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def flush(self) -> None:
        self.calls.append("flush")

    def close(self) -> None:
        self.calls.append("close")

    def previous(self, signum: int, frame: Any) -> None:
        self.calls.append(f"previous {signal.Signals(signum).name}")


@pytest.fixture
def calls() -> Iterator[Calls]:
    """Calls, with SIGTERM's and SIGINT's handlers set to its ``previous`` and restored after."""
    recorder = Calls()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in saved:
        signal.signal(sig, recorder.previous)
    try:
        yield recorder
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
