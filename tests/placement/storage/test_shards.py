"""Tests of cache shards (:mod:`placement.storage.shards`) on a real tiered store."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

import placement.storage.store as store_module
from placement.storage import (
    ByKindTier,
    FileKind,
    RunContext,
    ShardCache,
    ShardError,
    TieredFileStore,
    TierIOError,
    set_run_context,
)
from placement.storage.context import RequestBuilder
from placement.tier import Tier
from tests.placement.storage.conftest import ListSink

RECORD = np.dtype([("x", "<f4", (6,)), ("y", "<i8")])


@pytest.fixture
def store(tmp_path: Path, sink: ListSink) -> TieredFileStore:
    s = TieredFileStore(
        ssd_dir=tmp_path / "ssd",
        hdd_dir=tmp_path / "hdd",
        sink=sink,
        chooser=ByKindTier({FileKind.CACHE_SHARD: Tier.SSD}),
    )
    yield s
    s.close()


@pytest.fixture
def cache(store: TieredFileStore) -> ShardCache:
    return ShardCache(store, RequestBuilder(), worker="tcp://w:1")


def records(n: int) -> np.ndarray:
    out = np.empty(n, RECORD)
    out["x"] = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
    out["y"] = np.arange(n) * 10
    return out


def test_a_shard_is_written_once_read_many_times_and_logged_as_one_row(
    cache: ShardCache, store: TieredFileStore, sink: ListSink
) -> None:
    data = records(50)
    set_run_context(RunContext(pipeline="train", run_id="r1", n_partitions_in=7))
    try:
        ref = cache.put("cache-0", data, stage="augmented-shard", n_shards=4)
    finally:
        set_run_context(None)
    assert (ref.n_records, ref.record_shape, ref.worker) == (50, (), "tcp://w:1")
    assert ref.nbytes == data.nbytes == 50 * ref.record_nbytes
    assert store.get("shards/cache-0").tier is Tier.SSD  # the chooser saw kind cache_shard

    np.testing.assert_array_equal(cache.read(ref), data)
    np.testing.assert_array_equal(cache.read(ref, 10, 13), data[10:13])
    order = np.random.default_rng(0).permutation(50)
    np.testing.assert_array_equal(cache.take(ref, order[:7]), data[order[:7]])
    batches = list(cache.batches(ref, 16, rng=np.random.default_rng(1)))
    assert sorted(len(b) for b in batches) == [2, 16, 16, 16]
    np.testing.assert_array_equal(np.sort(np.concatenate(batches)["y"]), data["y"])

    assert cache.drop(ref) is True and cache.drop(ref) is False
    (row,) = sink.rows
    assert row["file_kind"] == "cache_shard" and row["stage"] == "augmented-shard"
    assert row["operator"] == "cache" and row["pipeline"] == "train" and row["run_id"] == "r1"
    assert row["n_partitions_out"] == 4 and row["n_partitions_in"] == 7
    assert row["expected_size_bytes"] == row["size_bytes"] == data.nbytes
    # one op for the whole read, one for the range, one per taken record, one per batch
    assert row["write_ops"] == 1 and row["read_ops"] == 1 + 1 + 7 + 4
    assert row["read_bytes"] == (50 + 3 + 7 + 50) * ref.record_nbytes
    assert row["tier"] == "ssd"


def test_plain_arrays_keep_their_record_shape(cache: ShardCache) -> None:
    matrix = np.arange(40, dtype=np.float32).reshape(10, 4)
    ref = cache.put("features", matrix, stage="feature-shard")
    assert ref.record_shape == (4,) and ref.record_nbytes == 16
    np.testing.assert_array_equal(cache.read(ref, 2, 5), matrix[2:5])
    np.testing.assert_array_equal(cache.take(ref, [9, 0, 9]), matrix[[9, 0, 9]])
    assert sum(len(c) for c in cache.batches(ref, 3)) == 10
    # an empty partition's shard, and times: both failed to write before
    empty = cache.put("empty", np.empty((0, 3), np.float64), stage="feature-shard")
    assert empty.n_records == 0 and cache.read(empty).shape == (0, 3)
    times = np.array(["2026-01-01T00:00", "2026-06-30T12:00"], dtype="datetime64[ns]")
    for name, arr in (("times", times), ("spans", np.diff(times))):
        ref = cache.put(name, arr, stage="feature-shard")
        np.testing.assert_array_equal(cache.read(ref), arr)


def test_missing_shards_and_bad_ranges_are_clear_errors(
    cache: ShardCache, store: TieredFileStore
) -> None:
    ref = cache.put("s", records(5), stage="st")
    with pytest.raises(ShardError, match=r"records \[3, 9\) are outside shard 's' \(5 records\)"):
        cache.read(ref, 3, 9)
    with pytest.raises(ShardError, match="record indices 0..5 are outside"):
        cache.take(ref, [0, 5])
    with pytest.raises(ValueError, match="batch_size=0"):
        next(cache.batches(ref, 0))
    with pytest.raises(ValueError, match="runs past the end"):
        store.read_range(store.get("shards/s"), 0, ref.nbytes + 1)
    with pytest.raises(ValueError, match="Python objects"):
        cache.put("obj", np.array([object()]), stage="st")
    with pytest.raises(ValueError, match="at least one dimension"):
        cache.put("scalar", np.float32(1.0), stage="st")
    cache.drop(ref)
    with pytest.raises(ShardError, match="rebuild the cache.*workers=\\[ref.worker\\]"):
        cache.take(ref, [0])
    with pytest.raises(ShardError, match="not on worker tcp://w:1"):
        cache.read(ref)


def test_ssd_full_puts_the_shard_on_hdd_intact(
    cache: ShardCache, store: TieredFileStore, sink: ListSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store_module._write_frames

    def ssd_full(fd: int, frames: list) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(store.roots[Tier.SSD])):
            os.write(fd, bytes(frames[0])[:3])  # a torn tail
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, frames)

    monkeypatch.setattr(store_module, "_write_frames", ssd_full)
    data = records(20)
    ref = cache.put("big", data, stage="st")
    np.testing.assert_array_equal(cache.take(ref, [19, 3]), data[[19, 3]])
    cache.drop(ref)
    assert sink.rows[0]["tier"] == "hdd" and sink.rows[0]["size_bytes"] == data.nbytes


def test_a_put_failing_on_every_tier_leaves_nothing_behind(
    cache: ShardCache, store: TieredFileStore, sink: ListSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, frames: list) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "_write_frames", full)
    with pytest.raises(TierIOError) as info:
        cache.put("s", records(4), stage="st")
    assert info.value.errno == errno.ENOSPC
    assert store.live_files() == [] and sink.rows == []
