"""CacheStore over a cache's life: full then cleared or rebuilt, forked, rebuilt by
another process, damaged metadata, a grown map, dead readers."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cache import (
    CacheConfig,
    CacheConfigError,
    CacheError,
    CacheStore,
    StoreState,
    UnreadableMetaError,
)
from cache.meta import META_KEY
from tests.cache import helpers

Opener = Callable[..., CacheStore]

SMALL = (3, 32, 32)  # 3 KiB records: 2 MiB holds about 480
ROOT = Path(__file__).resolve().parents[2]


def _fill(store: CacheStore, variant: int = 0, batch: int = 32) -> int:
    written = 0
    for start in range(0, helpers.NUM_SAMPLES, batch):
        idx = np.arange(start, start + batch)
        written += store.put_batch(
            idx, variant, helpers.images(idx, variant, SMALL), helpers.labels(idx)
        )
        if not store.admitting:
            break
    return written


def test_a_full_cache_fills_again_after_clear(open_store: Opener) -> None:
    store = open_store(helpers.identity(shape=SMALL), max_bytes=2 << 20)
    first = _fill(store)
    assert store.state is StoreState.FULL and 0 < first < helpers.NUM_SAMPLES
    info = store.info()
    assert info.full and info.used_bytes <= info.max_bytes == 2 << 20
    assert info.file_bytes <= info.map_bytes
    assert store.clear() == first
    assert store.state is StoreState.ADMITTING
    again = _fill(store)
    assert again >= first - 32  # the freed pages are reused: about as much as the first fill
    assert helpers.check_batch(store, np.arange(again), 0) == again
    store.close()
    # The next process finds a cache that is full again, not stuck empty.
    assert open_store(helpers.identity(shape=SMALL), max_bytes=2 << 20).count() == again


def test_a_full_cache_fills_again_after_a_rebuild(open_store: Opener) -> None:
    first = _fill(open_store(helpers.identity(shape=SMALL), max_bytes=2 << 20))
    assert first > 0
    rebuilt = open_store(
        helpers.identity(recipe="v2", shape=SMALL), max_bytes=2 << 20, rebuild=True
    )
    assert rebuilt.count() == 0
    assert _fill(rebuilt) >= first - 32


def _serve(store: CacheStore, idx: np.ndarray, seconds: float) -> int:
    """Serve ``idx`` (variant 0) again and again for ``seconds``; returns the batches."""
    out = np.empty((idx.size, *store.sample_shape), np.uint8)
    batches = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert store.get_batch(idx, 0, out).all()
        batches += 1
    assert np.array_equal(out, helpers.images(idx, 0))
    return batches


@contextlib.contextmanager
def _forked(child: Callable[[], bool]) -> Iterator[None]:
    """Run ``child`` in a forked child while the block runs in the parent; on leaving,
    assert the child returned True without raising (its error comes through a pipe)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(read_fd)
            code = 0 if child() else 2
        except BaseException as exc:  # noqa: BLE001 - reported to the parent through the pipe
            os.write(write_fd, repr(exc).encode()[:500])
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        yield
    finally:
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read_fd, "rb") as pipe:
            error = pipe.read().decode()
    assert os.waitstatus_to_exitcode(status) == 0, error


def test_a_forked_child_serves_beside_its_parent(open_store: Opener) -> None:
    store = open_store()
    idx = np.arange(64)
    store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    assert helpers.check_batch(store, idx, 0) == 64  # the parent holds a (spare) read slot

    def child() -> bool:
        served = _serve(store, idx, 0.5) > 0
        store.close()
        return served

    with _forked(child):
        assert _serve(store, idx, 0.5) > 0
    assert helpers.check_batch(store, idx, 0) == 64


def test_a_forked_child_can_close_an_inherited_store_and_open_the_cache_again(
    open_store: Opener,
) -> None:
    """The inherited handle stays open in the child after its store is closed there, so
    the child's next open of the same cache must still get past py-lmdb's same-file
    check."""
    store = open_store()
    idx = np.arange(64)
    store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    assert helpers.check_batch(store, idx, 0) == 64

    def child() -> bool:
        store.close()
        again = open_store()
        ok = helpers.check_batch(again, idx, 0) == 64
        again.close()
        return ok

    with _forked(child):
        pass
    assert helpers.check_batch(store, idx, 0) == 64


def test_a_store_stops_using_a_cache_another_store_rebuilt(
    open_store: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    old = open_store(helpers.identity(recipe="v1"))
    idx = np.arange(8)
    assert old.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) == 8
    # Elsewhere (another process or store) the cache is rebuilt for recipe v2.
    new = open_store(helpers.identity(recipe="v2"), rebuild=True)
    more = np.arange(8, 16)
    with caplog.at_level(logging.INFO, logger="cache.store"):
        assert old.put_batch(more, 0, helpers.images(more, 0), helpers.labels(more)) == 0
    assert old.state is StoreState.STALE and not old.admitting
    assert "rebuilt or cleared by another process" in caplog.text
    assert "serves fresh samples" in caplog.text
    # Logged once, at INFO: the loader warns (CacheWarning), a caller reads the state.
    (record,) = (r for r in caplog.records if "rebuilt or cleared" in r.getMessage())
    assert record.levelno == logging.INFO
    assert new.count() == 0  # no v1 sample under v2's metadata
    assert helpers.check_batch(old, more, 0) == 0  # nor served by the old store
    assert not old.completed(0).any()
    # Another store rewriting the metadata with other variants is not a rebuild.
    v2 = open_store(helpers.identity(recipe="v2"))
    assert v2.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) == 8
    open_store(helpers.identity(recipe="v2"), variants=3).close()
    assert v2.put_batch(more, 0, helpers.images(more, 0), helpers.labels(more)) == 8
    assert v2.state is StoreState.ADMITTING


def _garble_meta(store: CacheStore) -> None:
    shared = store._env()
    with shared.env.begin(write=True, db=shared.meta) as txn:
        txn.put(META_KEY, b'{"schema_version": 1, "recipe_fi')


def test_unreadable_metadata_is_rebuilt_or_cleared(open_store: Opener, tmp_path: Path) -> None:
    from dataplane.cache_cli import cache_group

    store = open_store()
    idx = np.arange(16)
    store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    _garble_meta(store)
    store.close()
    with pytest.raises(UnreadableMetaError, match="dataplane cache clear") as info:
        open_store()
    assert "rebuild=True" in str(info.value)
    rebuilt = open_store(rebuild=True)
    assert rebuilt.count() == 0 and rebuilt.meta.identity == helpers.identity()
    rebuilt.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    _garble_meta(rebuilt)
    rebuilt.close()
    path = str(tmp_path / "cache")
    result = CliRunner().invoke(cache_group, ["clear", "--yes", path])
    assert result.exit_code == 0, result.output
    assert "16 records and the unreadable metadata deleted" in result.output
    reopened = open_store()
    assert reopened.count() == 0 and reopened.meta.identity == helpers.identity()


_GROW_AND_CLEAR = """
import sys
import numpy as np
from cache import CacheConfig, CacheStore
from tests.cache import helpers
shape = (3, 64, 64)
config = CacheConfig(sys.argv[1], variants=2, max_bytes=32 << 20)
store = CacheStore(config, helpers.identity(shape=shape))
idx = np.arange(512)
store.put_batch(idx, 1, helpers.images(idx, 1, shape), helpers.labels(idx))
store.clear()
store.close()
"""


def test_a_write_adopts_a_map_another_process_grew(open_store: Opener, tmp_path: Path) -> None:
    shape = (3, 64, 64)
    store = open_store(helpers.identity(shape=shape), max_bytes=4 << 20)
    idx = np.arange(16)
    assert store.put_batch(idx, 0, helpers.images(idx, 0, shape), helpers.labels(idx)) == 16
    # Another process with a larger max_bytes grows data.mdb past this map, then clears.
    subprocess.run(
        [sys.executable, "-c", _GROW_AND_CLEAR, str(tmp_path / "cache")],
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    assert (tmp_path / "cache" / "data.mdb").stat().st_size > 6 << 20
    more = np.arange(16, 32)  # no read first: the write meets MDB_MAP_RESIZED itself
    assert store.put_batch(more, 0, helpers.images(more, 0, shape), helpers.labels(more)) == 16
    assert store.state is StoreState.ADMITTING
    assert helpers.check_batch(store, more, 0) == 16  # (the other process cleared 0..15)


_READ_AND_HANG = """
import sys, time
from cache import CacheConfig, CacheStore
from tests.cache import helpers
store = CacheStore(CacheConfig(sys.argv[1], variants=2, max_bytes=2 << 20),
                   helpers.identity(shape=(3, 32, 32)))
with store._read() as txn:
    txn.get(b"x")
    print("reading", flush=True)
    time.sleep(60)
"""


def test_slots_of_dead_readers_do_not_keep_a_refill_out(open_store: Opener, tmp_path: Path) -> None:
    store = open_store(helpers.identity(shape=SMALL), max_bytes=2 << 20)
    idx = np.arange(400)
    assert store.put_batch(idx, 0, helpers.images(idx, 0, SMALL), helpers.labels(idx)) == 400
    reader = subprocess.Popen(
        [sys.executable, "-c", _READ_AND_HANG, str(tmp_path / "cache")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
    finally:
        reader.send_signal(signal.SIGKILL)
        reader.wait(timeout=30)
        if reader.stdout is not None:
            reader.stdout.close()
    assert store.clear() == 400
    written = 0
    for start in range(0, 400, 25):  # as the filler writes: batch by batch
        part = idx[start : start + 25]
        written += store.put_batch(part, 0, helpers.images(part, 0, SMALL), helpers.labels(part))
    assert written == 400 and store.state is StoreState.ADMITTING


def test_config_limits_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(CacheConfigError, match="max_readers must be <= 65536"):
        CacheConfig(tmp_path / "c", max_readers=1 << 31)
    with pytest.raises(CacheConfigError, match="max_readers must be <= 65536"):
        CacheConfig(tmp_path / "c", max_readers=10**8)
    with pytest.raises(CacheConfigError, match="contains a NUL byte"):
        CacheConfig(f"{tmp_path}/a\0b")
    with pytest.raises(CacheError, match="lower max_bytes"):
        CacheStore(CacheConfig(tmp_path / "huge", max_bytes=1 << 50), helpers.identity())
