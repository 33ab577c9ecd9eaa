"""CacheStore on a real LMDB environment: serving, filling, bounds, staleness."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache import (
    CacheConfig,
    CacheError,
    CacheFiller,
    CacheStore,
    StaleCacheError,
    StoreState,
)
from tests.cache import helpers

Opener = Callable[..., CacheStore]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 20), st.integers(1, 20)),
    written=st.sets(st.integers(0, 99), max_size=40),
    asked=st.lists(st.integers(0, 99), min_size=1, max_size=40),
    variant=st.integers(0, 2),
)
def test_put_get_round_trip(shape, written, asked, variant) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ident = helpers.identity(shape=shape, num_samples=100)
        with CacheStore(CacheConfig(Path(tmp), variants=3, max_bytes=8 << 20), ident) as store:
            idx = np.array(sorted(written), dtype=np.int64)
            assert (
                store.put_batch(
                    idx, variant, helpers.images(idx, variant, shape), helpers.labels(idx)
                )
                == idx.size
            )
            out = np.zeros((len(asked), *shape), np.uint8)
            lab = np.full(len(asked), -1, np.int64)
            found = store.get_batch(asked, variant, out, labels=lab)
            assert found.tolist() == [i in written for i in asked]
            for row, i in enumerate(asked):
                if i in written:
                    assert np.array_equal(out[row], helpers.image(i, variant, shape))
                    assert lab[row] == helpers.label(i)
                else:
                    assert not out[row].any() and lab[row] == -1  # untouched
            assert store.counts()[variant] == idx.size
            assert store.completed(variant).nonzero()[0].tolist() == sorted(written)


def test_partial_fill_serves_what_is_there(open_store: Opener) -> None:
    store = open_store()
    idx = np.arange(0, 100, 2)
    store.put_batch(idx, 1, helpers.images(idx, 1), helpers.labels(idx))
    asked = np.arange(100)
    assert helpers.check_batch(store, asked, 1) == 50
    assert helpers.check_batch(store, asked, 0) == 0  # other variant untouched
    assert store.counts() == {0: 0, 1: 50}
    assert store.stats.hits == 50 and store.stats.misses == 150


def test_a_complete_variant_is_remembered_until_a_record_leaves(open_store: Opener) -> None:
    store = open_store()
    n = store.identity.num_samples
    idx = np.arange(n)
    store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    assert store.completed(0).all()
    # Another store on the same cache (as another process would) drops a record: this
    # one still answers from memory, until serving misses the record ...
    other = open_store()
    assert other.drop([(7, 0)]) == 1
    assert store.completed(0).all()
    assert helpers.check_batch(store, np.array([6, 7]), 0) == 1
    assert store.completed(0).nonzero()[0].tolist() == [i for i in range(n) if i != 7]
    # ... and a drop by this store is seen at once.
    store.put_batch(np.array([7]), 0, helpers.images(np.array([7]), 0), helpers.labels([7]))
    assert store.completed(0).all()
    store.drop([(3, 0)])
    assert not store.completed(0)[3]
    store.clear()
    assert not store.completed(0).any()


def test_existing_records_are_kept(open_store: Opener) -> None:
    store = open_store()
    idx = np.arange(4)
    assert store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) == 4
    other = helpers.images(idx, 1)  # different bytes under the same keys
    assert store.put_batch(idx, 0, other, helpers.labels(idx)) == 0
    assert helpers.check_batch(store, idx, 0) == 4


def test_bad_arguments_name_the_fix(open_store: Opener) -> None:
    store = open_store()
    idx = np.arange(2)
    with pytest.raises(CacheError, match=r"images must be uint8 of shape \(2, 3, 16, 16\)"):
        store.put_batch(idx, 0, np.zeros((2, 16, 16, 3), np.uint8), [0, 1])
    with pytest.raises(CacheError, match="variant 5 is out of range 0..1"):
        store.put_batch(idx, 5, helpers.images(idx, 0), [0, 1])
    with pytest.raises(CacheError, match="out of range for a cache of 512 samples"):
        store.put_batch(np.array([600]), 0, helpers.images(np.array([1]), 0), [0])
    with pytest.raises(CacheError, match="out must be a C-contiguous uint8 array"):
        store.get_batch(idx, 0, np.zeros((2, 3, 16, 16), np.float32))
    with pytest.raises(CacheError, match="out must be"):
        store.get_batch(idx, 0, np.zeros((1, 3, 16, 16), np.uint8))


def test_reopen_sees_records_and_same_process_shares_env(
    tmp_path: Path, open_store: Opener
) -> None:
    a = open_store()
    idx = np.arange(10)
    a.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    b = open_store()  # a second store on the same directory in one process
    assert helpers.check_batch(b, idx, 0) == 10
    a.close()
    assert helpers.check_batch(b, idx, 0) == 10  # b still works after a closed
    b.close()
    with CacheStore.open_existing(tmp_path / "cache") as c:
        assert c.counts() == {0: 10, 1: 0}
        assert c.identity == helpers.identity()


def test_stale_recipe_is_refused_then_rebuilt(open_store: Opener) -> None:
    store = open_store()
    idx = np.arange(8)
    store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx))
    store.close()
    changed = helpers.identity(recipe="recipe-v2")
    with pytest.raises(StaleCacheError, match="recipe fingerprint: recipe-v1 -> recipe-v2") as info:
        open_store(changed)
    assert "rebuild=True" in str(info.value) and "--rebuild" in str(info.value)
    assert "dataset" not in str(info.value)
    assert len(info.value.changes) == 1
    # refused: nothing was lost
    with CacheStore.open_existing(store.path) as kept:
        assert kept.count() == 8
    rebuilt = open_store(changed, rebuild=True)
    assert rebuilt.count() == 0
    assert rebuilt.meta.identity.recipe_fingerprint == "recipe-v2"
    rebuilt.close()
    assert open_store(changed).count() == 0  # no longer stale; not rebuilt again


def test_stale_dataset_names_the_changed_entries(open_store: Opener) -> None:
    open_store().close()
    changed = helpers.identity(dataset={"files": "f0", "sizes": "s1"}, num_samples=500)
    with pytest.raises(StaleCacheError) as info:
        open_store(changed)
    text = str(info.value)
    assert "dataset fingerprint: changed entries: sizes s0 -> s1" in text
    assert "number of samples: 512 -> 500" in text
    assert "recipe" not in text.split("(")[1].split(")")[0]
    with pytest.raises(StaleCacheError, match=r"sample shape: \(3, 16, 16\) -> \(1, 16, 16\)"):
        open_store(helpers.identity(shape=(1, 16, 16)))


def test_max_bytes_bound_stops_admitting_without_raising(open_store: Opener) -> None:
    shape = (3, 64, 64)  # 12 KiB records: 1 MiB holds a few dozen
    store = open_store(helpers.identity(shape=shape), max_bytes=1 << 20)
    written = 0
    for start in range(0, 512, 16):
        idx = np.arange(start, start + 16)
        written += store.put_batch(idx, 0, helpers.images(idx, 0, shape), helpers.labels(idx))
        if store.state is StoreState.FULL:
            break
    assert store.state is StoreState.FULL
    assert 0 < written < 512
    assert store.count() == written
    # full: further writes are not attempted, serving goes on, nothing raised
    idx = np.arange(500, 512)
    assert store.put_batch(idx, 1, helpers.images(idx, 1, shape), helpers.labels(idx)) == 0
    assert helpers.check_batch(store, np.arange(written), 0) == written
    info = store.info()
    assert info.full and info.file_bytes <= 1 << 20


@pytest.mark.parametrize(
    ("shape", "batch"), [((3, 96, 96), 16), ((3, 64, 64), 1), ((1, 28, 28), 100)]
)
def test_a_full_cache_is_full_for_every_writer_and_for_info(
    open_store: Opener, tmp_path: Path, shape: tuple[int, ...], batch: int
) -> None:
    """One definition of full: the writers fill record by record up to where one more
    record would not fit, whatever their batch size, and info then says full, as does
    every store opened later; while info says not full, one more record is written."""
    config = {"variants": 1, "max_bytes": 1 << 20, "path": tmp_path / "c"}
    ident = helpers.identity(shape=shape, num_samples=4096)
    writer = open_store(ident, **config)
    written = helpers.fill_until_full(writer, batch)
    assert writer.state is StoreState.FULL and 0 < written < ident.num_samples
    info = writer.info()
    assert info.full and info.records == written == writer.count()
    writer.close()
    with CacheStore.open_existing(tmp_path / "c") as inspected:  # what `cache info` opens
        again = inspected.info()
    assert again.full and again.state is StoreState.FULL, "the writers stopped: info agrees"
    assert again.used_bytes + again.next_record_bytes > again.max_bytes - again.bookkeeping_bytes
    later = open_store(ident, **config)  # a later writer admits nothing, at once
    assert later.state is StoreState.FULL and later.info().full
    assert later.put_batch([written], 0, helpers.images(np.array([written]), 0, shape), [0]) == 0
    later.close()

    # While info says not full, one more record fits.
    single = open_store(ident, variants=1, max_bytes=1 << 20, path=tmp_path / "one")
    index = 0
    while not single.info().full:
        idx = np.array([index])
        assert single.put_batch(idx, 0, helpers.images(idx, 0, shape), helpers.labels(idx)) == 1
        index += 1
    assert single.state is StoreState.FULL and index > 0


def test_stores_of_one_process_write_within_the_max_bytes_of_the_first_to_open(
    open_store: Opener, tmp_path: Path
) -> None:
    """A process maps a cache once, sized by its first opener: a store opened meanwhile
    with a larger max_bytes stops where the first would, and says which bound is in force;
    opened anew, its own bound applies."""
    shape = (3, 64, 64)  # 12 KiB records
    ident = helpers.identity(shape=shape, num_samples=4096)
    path = tmp_path / "c"
    first = open_store(ident, variants=1, max_bytes=1 << 20, path=path)
    second = open_store(ident, variants=1, max_bytes=64 << 20, path=path)
    assert (first.max_bytes, second.max_bytes) == (1 << 20, 1 << 20)
    written = helpers.fill_until_full(second, 16)
    assert second.state is StoreState.FULL and 0 < written < 100
    info = second.info()
    assert info.full and info.max_bytes == 1 << 20
    assert info.used_bytes <= info.max_bytes - info.bookkeeping_bytes
    first.close()
    second.close()
    alone = open_store(ident, variants=1, max_bytes=64 << 20, path=path)  # mapped anew
    assert alone.max_bytes == 64 << 20 and alone.admitting
    idx = np.arange(written, written + 16)
    assert alone.put_batch(idx, 0, helpers.images(idx, 0, shape), helpers.labels(idx)) == 16
    smaller = open_store(ident, variants=1, max_bytes=2 << 20, path=path)
    assert smaller.max_bytes == 2 << 20, "a smaller bound of a later store is its own"


def test_map_full_never_escapes_the_background_filler(open_store: Opener) -> None:
    shape = (3, 64, 64)
    store = open_store(helpers.identity(shape=shape), max_bytes=1 << 20, fill_queue=64)
    filler = CacheFiller(store)
    for start in range(0, 512, 16):
        idx = np.arange(start, start + 16)
        filler.submit(idx, 0, helpers.images(idx, 0, shape), helpers.labels(idx))
    filler.close()
    assert filler.error is None
    assert store.state is StoreState.FULL
    assert filler.stats.written == store.count() > 0
    assert filler.submit(np.arange(2), 1, helpers.images(np.arange(2), 1, shape), [0, 1]) is False


def test_background_filler_owns_what_it_queued_and_recycles_its_buffers(
    open_store: Opener,
) -> None:
    """The producer reuses one buffer for every batch: each batch is
    encoded before submit returns, so the cache holds every batch's own pixels; the
    writer hands its record buffers back, so the filler keeps a bounded few."""
    shape = (1, 8, 8)
    store = open_store(helpers.identity(shape=shape), fill_queue=2)
    filler = CacheFiller(store)
    reused = np.empty((10, *shape), np.uint8)
    for start in range(0, 100, 10):
        idx = np.arange(start, start + 10)
        reused[:] = helpers.images(idx, 0, shape)
        filler.submit(idx, 0, reused, helpers.labels(idx))
        reused[:] = 0  # the producer overwrites its buffer at once
        filler.flush()
    assert filler.stats.written == 100 and filler.stats.dropped_queue_full == 0
    assert helpers.check_batch(store, np.arange(100), 0) == 100  # every batch's own pixels
    assert 1 <= len(filler._buffers) <= 2 * filler.queue_batches + 1
    filler.close()
    with pytest.raises(CacheError, match="images must be uint8"):
        store.encode_batch(np.arange(2), 0, np.zeros((2, 3), np.float32), [0, 1])


def test_store_pickles_without_its_environment(open_store: Opener) -> None:
    store = open_store(rebuild=True)
    idx = np.arange(5)
    store.put_batch(idx, 1, helpers.images(idx, 1), helpers.labels(idx))
    clone = pickle.loads(pickle.dumps(store))
    assert clone.config.rebuild is False  # an unpickled copy never clears the cache
    assert helpers.check_batch(clone, idx, 1) == 5
    clone.close()


@pytest.mark.parametrize("shape", [(3, 16, 16), (3, 80, 80)], ids=["staged-read", "direct-read"])
def test_corrupt_records_are_never_served_on_either_read_path(
    open_store: Opener, shape: tuple[int, ...]
) -> None:
    from cache.record import pack_key

    store = open_store(helpers.identity(shape=shape, num_samples=20))
    idx = np.arange(10)
    store.put_batch(idx, 0, helpers.images(idx, 0, shape), helpers.labels(idx))
    shared = store._env()
    with shared.env.begin(write=True, db=shared.records) as txn:  # real bytes, changed on disk
        flipped = bytearray(txn.get(pack_key(3, 0)))
        flipped[24 + 7] ^= 0x10
        txn.put(pack_key(3, 0), bytes(flipped))
        txn.put(pack_key(5, 0), txn.get(pack_key(5, 0))[:-1])
        bad_magic = bytearray(txn.get(pack_key(7, 0)))
        bad_magic[0:4] = b"XXXX"
        txn.put(pack_key(7, 0), bytes(bad_magic))
    asked = np.array([9, 3, 12, 5, 0, 7, 1, 15])
    out = np.zeros((len(asked), *shape), np.uint8)
    lab = np.full(len(asked), -1, np.int64)
    found = store.get_batch(asked, 0, out, labels=lab)
    assert found.tolist() == [True, False, False, False, True, False, True, False]
    for row in np.flatnonzero(found):
        assert np.array_equal(out[row], helpers.image(int(asked[row]), 0, shape))
        assert lab[row] == helpers.label(int(asked[row]))
    assert not out[~found].any() and (lab[~found] == -1).all()
    assert store.stats.corrupt == 3
    redo = np.array([3, 5, 7])
    assert store.put_batch(redo, 0, helpers.images(redo, 0, shape), helpers.labels(redo)) == 3
    assert store.stats.dropped == 3
    assert helpers.check_batch(store, np.arange(10), 0) == 10
