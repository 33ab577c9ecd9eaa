"""``dataplane cache`` (``dataplane.cache_cli``) on real LMDB caches: what ``info`` and
``verify --repair`` say of the records a smaller ``variants`` setting leaves unused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from cache import CacheConfig, CacheStore, verify
from dataplane.cache_cli import cache_group
from tests.cache import helpers


def _open(path: Path, variants: int) -> CacheStore:
    return CacheStore(CacheConfig(path, variants=variants, max_bytes=64 << 20), helpers.identity())


def test_info_counts_unused_variants_apart_and_verify_repair_deletes_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache"
    idx = np.arange(64)
    with _open(path, variants=4) as store:
        for variant in range(4):
            store.put_batch(idx, variant, helpers.images(idx, variant), helpers.labels(idx))
    with _open(path, variants=2) as store:  # fewer variants: 2 and 3 are never served again
        assert store.count() == 256

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

    result = runner.invoke(cache_group, ["verify", "--repair", "--no-progress", str(path)])
    assert result.exit_code == 0, result.output
    assert "128 records outside the metadata (never served): 128 deleted" in result.output
    with CacheStore.open_existing(path) as store:
        assert store.counts() == {0: 64, 1: 64}
        assert verify(store).clean
    # info has nothing unused left
    result = runner.invoke(cache_group, ["info", str(path)])
    lines = result.output.splitlines()
    assert "records      128 / 1024" in lines
    assert not [line for line in lines if line.startswith("unused")], result.output
