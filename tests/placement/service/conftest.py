"""Fixtures shared by the placement service's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from placement.storage import TieredFileStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TieredFileStore]:
    """A tiered store over two folders of ``tmp_path``, closed after the test."""
    with TieredFileStore(ssd_dir=tmp_path / "ssd", hdd_dir=tmp_path / "hdd") as s:
        yield s
