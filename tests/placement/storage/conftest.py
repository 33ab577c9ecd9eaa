"""Fixtures of the storage tests: a store over two folders of the test's own, the rows it
logs, and stop signals a test can raise without ending its process."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from placement.storage import TieredFileStore


class ListSink:
    """A log sink that keeps each row it is given, in order."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows.append(dict(row))


@pytest.fixture
def sink() -> ListSink:
    return ListSink()


@pytest.fixture
def store(tmp_path: Path, sink: ListSink) -> Iterator[TieredFileStore]:
    """A tiered store over ``tmp_path/ssd`` and ``tmp_path/hdd`` logging to ``sink``."""
    s = TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd", sink=sink)
    yield s
    s.close()


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
