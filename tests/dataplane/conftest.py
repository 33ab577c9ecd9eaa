"""Fixtures of the data-plane tests: small real Fashion-MNIST datasets made by ingest."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from dataplane.ingest import ingest_fmnist
from tests.dataplane.helpers import batch_keys

#: Training images kept by the session's small datasets.
SMALL = 300


@pytest.fixture(scope="session")
def fmnist_small(tmp_path_factory: pytest.TempPathFactory, fmnist_dir: Path) -> Path:
    """``OUT`` of ``dataplane ingest fmnist OUT --limit 300`` (PNG image folders)."""
    out = tmp_path_factory.mktemp("fmnist-folder")
    ingest_fmnist(out, fmt="folder", limit=SMALL, source_dir=fmnist_dir, progress=False)
    return out


@pytest.fixture(scope="session")
def fmnist_parquet(tmp_path_factory: pytest.TempPathFactory, fmnist_dir: Path) -> Path:
    """``OUT`` of ``dataplane ingest fmnist OUT --format parquet --limit 300``."""
    out = tmp_path_factory.mktemp("fmnist-parquet")
    ingest_fmnist(out, fmt="parquet", limit=SMALL, source_dir=fmnist_dir, progress=False)
    return out


@pytest.fixture
def writable_copy(fmnist_small: Path, tmp_path: Path) -> Path:
    """A private copy of the small train folder, free to corrupt."""
    target = tmp_path / "train"
    shutil.copytree(fmnist_small / "train", target)
    return target


@pytest.fixture
def keys_of() -> Callable[..., list[list[str]]]:
    """Iterate a loader once; pixel keys of every batch, in order."""

    def run(loader) -> list[list[str]]:  # type: ignore[no-untyped-def]
        return [batch_keys(x) for x, _ in loader]

    return run
