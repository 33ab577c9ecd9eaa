"""A cache reopened with another number of variants: nothing stored is lost, the
change is reported, and ``info`` counts only the variants in use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from cache import CacheStore, verify
from tests.cache import helpers

Opener = Callable[..., CacheStore]


def _fill_all(store: CacheStore, idx: np.ndarray) -> None:
    for variant in range(store.variants):
        store.put_batch(idx, variant, helpers.images(idx, variant), helpers.labels(idx))


def test_fewer_variants_keep_the_records_and_report_them_unused(
    open_store: Opener, tmp_path: Path
) -> None:
    path = tmp_path / "cache"
    idx = np.arange(64)
    with open_store(variants=4) as store:
        _fill_all(store, idx)
    with open_store(variants=2) as store:
        assert store.count() == 256, "nothing stored is lost"
        assert store.counts() == {0: 64, 1: 64}
        info = store.info()
        assert (info.records, info.expected_records) == (128, 1024)
        assert (info.unused, info.unused_records) == ({2: 64, 3: 64}, 128)
        assert info.bytes_per_sample == info.used_bytes / 256
        doc = info.as_dict()
        assert doc["counts"] == {"0": 64, "1": 64} and doc["records"] == 128
        assert (doc["unused_counts"], doc["unused_records"]) == ({"2": 64, "3": 64}, 128)
        assert store.unused_counts() == {2: 64, 3: 64}
        change = store.variants_change
        assert change is not None and (change.old, change.new, change.unused) == (4, 2, 128)
        assert (
            f"the cache at {path} was built with variants=4 and now keeps variants=2: its 128 "
            "records of variants 2..3 are kept but unused" in change.message
        )
        assert f"`dataplane cache verify --repair {path}` deletes them" in change.message
        # verify without repair names them and deletes nothing
        report = verify(store)
        assert len(report.out_of_range) == 128 and report.dropped_unused == 0
        assert store.count() == 256
    with open_store(variants=2) as store:
        assert store.variants_change is None, "reported once, by the store that changed it"
    with open_store(variants=2, path=tmp_path / "new") as store:
        assert store.variants_change is None, "a new cache changes nothing"

    # The larger setting serves the kept records again.
    with open_store(variants=4) as store:
        change = store.variants_change
        assert change is not None and (change.old, change.new, change.unused) == (2, 4, 0)
        assert "variants 2..3 are served from the records it holds" in change.message
        assert store.counts() == {0: 64, 1: 64, 2: 64, 3: 64} and store.unused_counts() == {}
        assert helpers.check_batch(store, idx, 3) == 64
    # Down to one variant, then repaired: nothing unused is left.
    with open_store(variants=1) as store:
        change = store.variants_change
        assert change is not None and "192 records of variants 1..3" in change.message
        assert verify(store, repair=True).dropped_unused == 192
        assert store.info().unused == {} and store.count() == 64
    with CacheStore.open_existing(path) as store:
        assert store.counts() == {0: 64}
        assert verify(store).clean


def test_a_store_sees_the_variants_another_store_wrote_since(open_store: Opener) -> None:
    first = open_store(variants=4)
    assert first.stored_variants() == 4
    second = open_store(variants=2)  # rewrites the metadata: variants=2
    assert (first.stored_variants(), second.stored_variants()) == (2, 2)
    idx = np.arange(8)
    first.put_batch(idx, 3, helpers.images(idx, 3), helpers.labels(idx))  # still its own
    assert helpers.check_batch(first, idx, 3) == 8
    assert second.info().unused == {3: 8}, "outside the metadata"
    open_store(variants=4)
    assert first.stored_variants() == second.stored_variants() == 4
