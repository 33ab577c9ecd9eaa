"""The LMDB environment of a cache: its map size, damaged files, full disks, shared handles."""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest

import cache.env
from cache import CacheConfig, CacheError, CacheStore, DamagedCacheError
from cache.env import (
    NEARLY_FULL_BYTES,
    SharedEnv,
    acquire,
    disk_full,
    free_bytes,
    map_headroom,
    release,
    remove_files,
    settle,
)
from tests.cache import helpers

PAGE = max(mmap.PAGESIZE, 4096)


def _config(path: Path) -> CacheConfig:
    return CacheConfig(path, variants=2, max_bytes=8 << 20)


def _written(path: Path) -> Path:
    """A closed cache at ``path`` holding 64 samples of variant 0."""
    store = CacheStore(_config(path), helpers.identity())
    idx = np.arange(64)
    store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    store.close()
    return path


def test_the_headroom_is_64_pages_and_a_512th_of_max_bytes_rounded_up_to_pages() -> None:
    assert map_headroom(0) == 64 * PAGE
    assert map_headroom(512 * 3 * PAGE) == (64 + 3) * PAGE  # a 512th: 3 pages
    assert map_headroom(512 * 3 * PAGE + 512) == (64 + 4) * PAGE  # 3 pages and 1 byte: 4


def test_the_map_of_a_new_cache_is_max_bytes_plus_the_headroom(tmp_path: Path) -> None:
    config = _config(tmp_path / "c")
    shared = acquire(config.path, config, create=True)
    try:
        assert shared.env.info()["map_size"] == config.max_bytes + map_headroom(config.max_bytes)
        assert shared.max_bytes == config.max_bytes and not shared.readonly
    finally:
        release(config.path, shared)


def test_a_data_file_one_byte_short_is_refused_as_truncated(tmp_path: Path) -> None:
    path = _written(tmp_path / "c")
    size = (path / "data.mdb").stat().st_size  # every page the newest meta page counts
    os.truncate(path / "data.mdb", size - 1)
    with pytest.raises(DamagedCacheError, match=rf"truncated: {size - 1} bytes of {size}\)"):
        acquire(path, None, create=False)


def test_a_write_error_is_a_full_disk_when_the_write_needs_more_than_is_free(
    tmp_path: Path,
) -> None:
    free = free_bytes(tmp_path)
    assert free is not None
    exc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    reason = disk_full(tmp_path, exc, needed=2 * free + NEARLY_FULL_BYTES)
    assert reason is not None and reason.startswith(f"the disk holding {tmp_path} is full (")
    assert reason.endswith("bytes free; No space left on device)")
    assert disk_full(tmp_path, ValueError("no space"), needed=2 * free + NEARLY_FULL_BYTES) is None


def test_the_files_of_a_cache_this_process_has_open_are_not_removed(tmp_path: Path) -> None:
    path = _written(tmp_path / "c")
    (path / "notes.txt").write_text("kept")
    shared = acquire(path, _config(path), create=False)
    try:
        with pytest.raises(CacheError, match="this process still has it open"):
            remove_files(path)
        assert (path / "data.mdb").is_file() and (path / "lock.mdb").is_file()
    finally:
        release(path, shared)
    assert remove_files(path) == ["data.mdb", "lock.mdb"]
    assert sorted(p.name for p in path.iterdir()) == ["notes.txt"]


def test_settle_says_whether_it_committed(tmp_path: Path) -> None:
    path = _written(tmp_path / "c")
    shared = acquire(path, _config(path), create=False)
    try:
        assert settle(shared)
    finally:
        release(path, shared)
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=2, subdir=True)
    try:
        records = env.open_db(b"records", create=False)
        meta = env.open_db(b"meta", create=False)
        assert not settle(SharedEnv(env, records, meta, os.getpid(), readonly=True))
    finally:
        env.close()


def test_a_disk_quota_at_creation_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def over_quota(*args: Any, **kwargs: Any) -> lmdb.Environment:
        raise lmdb.Error(f"mdb_env_open: {os.strerror(errno.EDQUOT)}")

    monkeypatch.setattr(cache.env.lmdb, "open", over_quota)  # the fault: a quota at open
    path = tmp_path / "c"
    path.mkdir()
    with pytest.raises(CacheError, match="free disk space or choose another path") as info:
        acquire(path, _config(path), create=True)
    assert str(info.value).startswith(
        f"cannot create the cache at {path}: mdb_env_open: {os.strerror(errno.EDQUOT)};"
    )
    assert not (path / "data.mdb").exists()


@pytest.mark.parametrize("durable", [True, False])
def test_commits_are_synced_to_disk_only_when_the_cache_is_durable(
    tmp_path: Path, durable: bool
) -> None:
    config = CacheConfig(tmp_path / "c", variants=2, max_bytes=8 << 20, durable=durable)
    shared = acquire(config.path, config, create=True)
    try:
        assert shared.env.flags()["sync"] is durable
    finally:
        release(config.path, shared)


def test_a_handle_inherited_through_fork_is_kept_open_when_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing it would drop the locks and reader slots of this process's own handle."""
    path = _written(tmp_path / "c")
    shared = acquire(path, _config(path), create=False)
    key = os.path.realpath(path)
    monkeypatch.setitem(cache.env._INHERITED, key, [])  # forgotten when the test ends
    shared.owner_pid = os.getpid() + 1  # as a child process sees its parent's handle
    release(path, shared)
    assert shared.env.stat()["entries"] >= 0  # still open: a closed one raises
    assert cache.env._INHERITED[key] == [shared]
    shared.env.close()
