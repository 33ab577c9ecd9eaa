"""Fixtures of the cache tests: small real LMDB caches in temporary directories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cache import CacheConfig, CacheIdentity, CacheStore
from tests.cache import helpers


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., CacheStore]]:
    """``open_store(identity=None, **config)`` -> a CacheStore under tmp_path/cache; closed
    after."""
    opened: list[CacheStore] = []

    def _open(identity: CacheIdentity | None = None, **options: Any) -> CacheStore:
        options.setdefault("variants", 2)
        options.setdefault("max_bytes", 64 << 20)
        path = options.pop("path", tmp_path / "cache")
        store = CacheStore(CacheConfig(path, **options), identity or helpers.identity())
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
