"""A cache reopened with another number of variants: nothing stored is lost, the
change is reported, and ``info`` counts only the variants in use."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from cache import CacheStore, verify
from tests.cache import helpers

Opener = Callable[..., CacheStore]


def _fill_all(store: CacheStore, idx: np.ndarray) -> None:
    for variant in range(store.variants):
        store.put_batch(idx, variant, helpers.images(idx, variant), helpers.labels(idx))


def test_fewer_variants_keep_the_records_and_report_them_unused(
    open_store: Opener, tmp_path: Path
) -> None:
    from dataplane.cache_cli import cache_group

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
    with open_store(variants=2) as store:
        assert store.variants_change is None, "reported once, by the store that changed it"
    with open_store(variants=2, path=tmp_path / "new") as store:
        assert store.variants_change is None, "a new cache changes nothing"

    runner = CliRunner()
    result = runner.invoke(cache_group, ["info", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "samples      512 x 2 variants, uint8 CHW (3, 16, 16)" in lines
    assert [line for line in lines if line.startswith("variant ")] == [
        "variant 0    64 / 512 (12.5%)",
        "variant 1    64 / 512 (12.5%)",
    ]
    assert "records      128 / 1024" in lines
    (unused,) = [line for line in lines if line.startswith("unused")]
    assert unused.startswith(
        "unused       128 records outside the metadata (variant 2: 64, variant 3: 64)"
    )
    assert unused.endswith(f"`dataplane cache verify --repair {path}` deletes them")
    doc = json.loads(runner.invoke(cache_group, ["info", "--json", str(path)]).output)
    assert (doc["counts"], doc["records"], doc["unused_records"]) == ({"0": 64, "1": 64}, 128, 128)

    # The larger setting serves the kept records again.
    with open_store(variants=4) as store:
        change = store.variants_change
        assert change is not None and (change.old, change.new, change.unused) == (2, 4, 0)
        assert "variants 2..3 are served from the records it holds" in change.message
        assert store.counts() == {0: 64, 1: 64, 2: 64, 3: 64} and store.unused_counts() == {}
        assert helpers.check_batch(store, idx, 3) == 64
    # Down to one variant, then repaired: info has nothing unused left.
    with open_store(variants=1) as store:
        change = store.variants_change
        assert change is not None and "192 records of variants 1..3" in change.message
        assert verify(store, repair=True).dropped_unused == 192
        assert store.info().unused == {} and store.count() == 64
    result = runner.invoke(cache_group, ["info", str(path)])
    assert "unused" not in result.output and "records      64 / 512" in result.output



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
