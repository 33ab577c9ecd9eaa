"""``Loader(..., cache=CacheConfig(...))`` on real DALI, real LMDB and real Fashion-MNIST PNGs."""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from collections import Counter
from pathlib import Path

import lmdb
import numpy as np
import pytest
from click.testing import CliRunner

import cache.env
import dataplane
from cache import CacheStore, verify
from dataplane import CacheConfig, CacheWarning, ConfigError, Loader, StaleCacheError
from dataplane.sources import ImageFolderSource
from tests.cache import helpers as cache_helpers
from tests.dataplane.conftest import SMALL
from tests.dataplane.helpers import batch_keys, decoded_keys, identity_recipe, pixel_key

REPO = Path(__file__).resolve().parents[2]


def random_recipe(size: int = 28, channels: int = 1):  # type: ignore[no-untyped-def]
    """The ``train`` recipe (random crops and flips) with mean 0, std 1: pixels round-trip."""
    from preprocessing import make_recipe

    return make_recipe(
        "train", size=size, channels=channels, mean=(0.0,) * channels, std=(1.0,) * channels
    )


@pytest.fixture(scope="module")
def train_dir(fmnist_small: Path) -> Path:
    return fmnist_small / "train"


@pytest.fixture(scope="module")
def source_keys(train_dir: Path) -> dict[int, str]:
    """Pixel key of every sample decoded by PIL (what the identity recipe yields)."""
    source = ImageFolderSource(train_dir)
    out = {}
    for i in range(len(source)):
        (key,) = decoded_keys([source.read(i)])
        out[i] = key
    return out


def cached_loader(data, path: Path, *, recipe=None, variants: int = 2, **options) -> Loader:  # type: ignore[no-untyped-def]
    cache_options = {
        k: options.pop(k) for k in ("max_bytes", "rebuild", "fill", "fill_queue") if k in options
    }
    cache_options.setdefault("max_bytes", 64 << 20)
    # A queue longer than an epoch's batches: the background writer never drops a batch
    # here, so every epoch's fresh samples are cached before the next pass.
    cache_options.setdefault("fill_queue", 64)
    options.setdefault("batch_size", 64)
    options.setdefault("device", "cpu")
    options.setdefault("shuffle", True)
    return Loader(
        data,
        recipe=recipe if recipe is not None else random_recipe(),
        cache=CacheConfig(path, variants=variants, **cache_options),
        **options,
    )


def enospc_commit(txn: lmdb.Transaction) -> None:
    """Fault injection for ``cache.env._commit``: the disk is full."""
    txn.abort()
    raise lmdb.Error("mdb_txn_commit: No space left on device")


def epoch_keys(loader: Loader, epoch: int | None = None) -> dict[int, str]:
    """Iterate one epoch; pixel key of each sample index (from the loader's plan)."""
    if epoch is not None:
        loader.set_epoch(epoch)
    epoch = loader.epoch
    start = loader.state_dict()["batches_done"]
    planned = list(loader.plan.batches(epoch, start))
    out: dict[int, str] = {}
    yielded = 0
    for (images, _), indices in zip(loader, planned, strict=True):
        for i, key in zip(indices.tolist(), batch_keys(images), strict=True):
            assert i not in out, "every sample at most once"
            out[i] = key
        yielded += 1
    assert yielded == len(planned)
    return out


def test_dataplane_exports_cache_config() -> None:
    import cache

    assert dataplane.CacheConfig is cache.CacheConfig
    assert "CacheConfig" in dataplane.__all__


def test_epoch_serves_variant_epoch_mod_variants_with_the_filled_pixels(
    train_dir: Path, tmp_path: Path
) -> None:
    loader = cached_loader(train_dir, tmp_path / "c", variants=2, seed=5)
    seen = [epoch_keys(loader, e) for e in range(4)]
    for keys in seen:
        assert sorted(keys) == list(range(SMALL)), "every sample exactly once per epoch"
    # Epochs 0 and 1 fill variants 0 and 1 (fresh, random augmentation) ...
    differ = sum(seen[0][i] != seen[1][i] for i in range(SMALL))
    assert differ > 0.8 * SMALL, "two variants are two random augmentations"
    # ... epochs 2 and 3 serve them again: the very pixels produced when filling.
    assert seen[2] == seen[0]
    assert seen[3] == seen[1]
    stats = loader.last_epoch_stats
    assert stats is not None and stats.cache is not None
    assert (stats.cache.variant, stats.cache.hits, stats.cache.misses) == (1, SMALL, 0)
    assert stats.cache.fresh == 0 and stats.cache.filled == 0
    # What is on disk is what epoch 0 yielded.
    store = loader.cache_store
    out = np.empty((SMALL, 1, 28, 28), np.uint8)
    assert store.get_batch(np.arange(SMALL), 0, out).all()
    assert {i: pixel_key(out[i]) for i in range(SMALL)} == seen[0]
    # The public cache side is the one serving these passes, over the same store.
    side = loader.cache_side
    assert side is not None and side.enabled and side.store is store
    loader.close()


def test_normalize_false_yields_uint8_that_outlives_the_ring(
    train_dir: Path, tmp_path: Path
) -> None:
    """uint8 batches served from the cache's reused ring buffers are the consumer's own:
    kept across the whole pass they still hold their pixels, and normalizing them gives
    exactly what a normalizing loader yields for the same cached epoch."""
    import torch

    from preprocessing import make_recipe, normalize

    recipe = make_recipe("train", size=28, channels=1, mean=(0.25,), std=(0.5,))
    path = tmp_path / "c"
    filler = cached_loader(train_dir, path, recipe=recipe, variants=1, seed=3)
    epoch_keys(filler, 0)  # fills variant 0
    filler.close()

    raw = cached_loader(train_dir, path, recipe=recipe, variants=1, seed=3, normalize=False)
    raw.set_epoch(1)
    kept = [(images, labels) for images, labels in raw]  # held past the ring's reuse
    stats = raw.last_epoch_stats
    assert stats is not None and stats.cache is not None and stats.cache.hits == SMALL
    assert len(kept) == len(raw) > raw.config.prefetch + 1, "the ring is reused in the pass"
    assert all(x.dtype == torch.uint8 and x.shape[1:] == (1, 28, 28) for x, _ in kept)
    raw.close()

    normalized = cached_loader(train_dir, path, recipe=recipe, variants=1, seed=3)
    normalized.set_epoch(1)
    for (u8, labels), (f32, labels2) in zip(kept, normalized, strict=True):
        assert torch.equal(labels, labels2)
        assert f32.dtype == torch.float32
        assert torch.equal(normalize(u8, recipe), f32)
    normalized.close()


def test_fill_counts_and_background_filling(train_dir: Path, tmp_path: Path) -> None:
    loader = cached_loader(train_dir, tmp_path / "c", variants=1, fill="background", fill_queue=2)
    epoch_keys(loader, 0)
    first = loader.cache_stats
    assert first is not None and loader.last_epoch_stats.cache is first  # type: ignore[union-attr]
    assert (first.hits, first.misses, first.fresh) == (0, SMALL, SMALL)
    assert first.fill_queued + first.fill_dropped == SMALL
    assert first.filled == first.fill_queued == loader.cache_store.count()
    epoch_keys(loader, 1)
    second = loader.cache_stats
    assert second is not first
    assert second.hits == first.filled and second.hits + second.misses == SMALL
    assert second.hit_rate == second.hits / SMALL
    loader.close()


def test_partial_cache_mixes_hits_and_misses_every_sample_once(
    train_dir: Path, tmp_path: Path, source_keys: dict[int, str], rng: np.random.Generator
) -> None:
    loader = cached_loader(
        train_dir, tmp_path / "c", recipe=identity_recipe(), variants=1, batch_size=50
    )
    store = loader.cache_store
    # Pre-fill a random third of the samples with marker images (one value per sample).
    cached = np.sort(rng.choice(SMALL, size=SMALL // 3, replace=False))
    markers = np.stack([np.full((1, 28, 28), 1 + i % 250, np.uint8) for i in cached])
    store.put_batch(cached, 0, markers, loader._labels[cached])
    expected = dict(source_keys)
    for i, marker in zip(cached.tolist(), markers, strict=True):
        expected[i] = pixel_key(marker)
    keys = epoch_keys(loader, 0)
    assert keys == expected, "cached samples from the cache, the others fresh, each once"
    stats = loader.cache_stats
    assert (stats.hits, stats.misses, stats.fresh) == (
        cached.size,
        SMALL - cached.size,
        SMALL - cached.size,
    )
    assert stats.filled == SMALL - cached.size
    # The next epoch of the variant is entirely cached.
    assert epoch_keys(loader, 1) == expected
    assert (loader.cache_stats.hits, loader.cache_stats.fresh) == (SMALL, 0)
    loader.close()


def test_fully_cached_epoch_reads_no_source_and_never_starts_dali(
    writable_copy: Path, tmp_path: Path
) -> None:
    path = tmp_path / "c"
    filling = cached_loader(writable_copy, path, variants=1, seed=1)
    filled = epoch_keys(filling, 0)
    filling.close()
    # A fresh interpreter: builds the loader, then the dataset's files disappear.
    child = f"""
import json, shutil, sys
from pathlib import Path
from dataplane import CacheConfig, Loader
from tests.dataplane.helpers import batch_keys
from tests.dataplane.test_cached_loader import random_recipe
loader = Loader({str(writable_copy)!r}, batch_size=64, recipe=random_recipe(), shuffle=True,
                seed=1, device="cpu",
                cache=CacheConfig({str(path)!r}, variants=1, max_bytes=64 << 20))
for f in Path({str(writable_copy)!r}).rglob("*.png"):
    f.unlink()
keys = {{}}
for (images, _), idx in zip(loader, loader.plan.batches(0)):
    keys.update(zip(idx.tolist(), batch_keys(images)))
stats = loader.last_epoch_stats.cache
print(json.dumps({{"keys": keys, "hits": stats.hits, "fresh": stats.fresh,
                  "dali": [m for m in sys.modules if m.split(".")[0] == "nvidia"]}}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", child],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["dali"] == [], "a fully cached epoch never imports DALI"
    assert (result["hits"], result["fresh"]) == (SMALL, 0)
    assert {int(k): v for k, v in result["keys"].items()} == filled


def test_tiny_max_bytes_stops_admitting_and_keeps_serving_fresh(
    train_dir: Path, tmp_path: Path
) -> None:
    # 3x64x64 samples are 12 KiB: a 1 MiB cache holds a few dozen of the 300.
    loader = cached_loader(
        train_dir, tmp_path / "c", recipe=random_recipe(64, 3), variants=1, max_bytes=1 << 20,
        batch_size=32,
    )
    with pytest.warns(CacheWarning, match="reached max_bytes=1048576.*Raise max_bytes"):
        keys0 = epoch_keys(loader, 0)
    assert sorted(keys0) == list(range(SMALL))
    stats = loader.cache_stats
    assert stats.state == "full" and 0 < stats.filled < SMALL
    held = loader.cache_store.count()
    assert held == stats.filled
    keys1 = epoch_keys(loader, 1)  # no second warning, no exception
    assert sorted(keys1) == list(range(SMALL))
    assert loader.cache_stats.hits == held and loader.cache_stats.misses == SMALL - held
    assert loader.cache_stats.fill_dropped == SMALL - held
    cached = [i for i in range(SMALL) if keys1[i] == keys0[i]]
    assert len(cached) >= held, "the held samples are served as filled"
    assert verify(loader.cache_store).clean
    loader.close()


def test_cache_full_warning_points_at_the_users_loop_and_is_not_logged_again(
    train_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loader = cached_loader(
        train_dir, tmp_path / "c", recipe=random_recipe(64, 3), variants=1, max_bytes=1 << 20,
        batch_size=32, fill="inline",
    )
    with (
        caplog.at_level(logging.WARNING),
        pytest.warns(CacheWarning, match="reached max_bytes") as caught,
    ):
        for _ in loader:  # the warning's line
            pass
    (warning,) = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert (warning.filename, warning.lineno) == (__file__, _line_of("for _ in loader:  # the"))
    assert not [r for r in caplog.records if "max_bytes" in r.getMessage()], (
        "printed once: as the warning, not also as a WARNING log record"
    )
    loader.close()


def test_cache_full_warning_names_the_bound_in_force_of_two_loaders(
    train_dir: Path, tmp_path: Path
) -> None:
    """Two loaders of one cache in a process share its LMDB map, sized by the first: the
    second one's warning names that bound, not its own larger one, and the fix."""
    path = tmp_path / "c"
    options = {"recipe": random_recipe(64, 3), "variants": 1, "batch_size": 32}
    first = cached_loader(train_dir, path, max_bytes=1 << 20, **options)
    second = cached_loader(train_dir, path, max_bytes=64 << 20, **options)
    with pytest.warns(CacheWarning, match="reached max_bytes") as caught:
        for _ in second:
            pass
    (message,) = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert f"reached max_bytes={1 << 20} bytes" in message
    assert f"not this loader's max_bytes={64 << 20}" in message
    assert "another loader (or cache store) opened the cache first" in message
    assert "Give every Loader of this cache the same max_bytes" in message
    assert "Raise max_bytes" not in message, "raising this loader's bound changes nothing"
    info = second.cache_store.info()
    assert info.full and info.max_bytes == 1 << 20
    assert info.used_bytes <= info.max_bytes
    first.close()
    second.close()


def _line_of(text: str) -> int:
    """Line number in this file of the first line containing ``text``."""
    lines = Path(__file__).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line and "_line_of" not in line)


def test_stale_recipe_is_refused_with_the_fix_and_rebuild_works(
    train_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "c"
    loader = cached_loader(train_dir, path, variants=1)
    epoch_keys(loader, 0)
    loader.close()
    with pytest.raises(StaleCacheError, match=r"size 28 -> 32.*rebuild=True.*--rebuild") as info:
        cached_loader(train_dir, path, recipe=random_recipe(32), variants=1)
    assert isinstance(info.value, dataplane.DataplaneError)
    assert isinstance(info.value, cache.StaleCacheError)
    assert any("recipe" in change for change in info.value.changes)
    rebuilt = cached_loader(train_dir, path, recipe=random_recipe(32), variants=1, rebuild=True)
    assert rebuilt.cache_store.count() == 0
    keys = epoch_keys(rebuilt, 0)
    assert sorted(keys) == list(range(SMALL))
    assert rebuilt.cache_store.count() == SMALL
    assert epoch_keys(rebuilt, 1) == keys
    rebuilt.close()


def test_stale_dataset_is_refused(writable_copy: Path, tmp_path: Path) -> None:
    path = tmp_path / "c"
    loader = cached_loader(writable_copy, path, variants=1)
    epoch_keys(loader, 0)
    loader.close()
    victim = min(writable_copy.rglob("*.png"))
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 10**9))
    with pytest.raises(StaleCacheError, match=r"dataset image folder .*rebuild=True"):
        cached_loader(writable_copy, path, variants=1)


def _flip_record_on_disk(path: Path, store: CacheStore, index: int, variant: int) -> int:
    """Flip one payload byte of the record of ``(index, variant)`` in ``data.mdb``.

    Every copy of the record's bytes in the file is changed (LMDB may keep old
    copies in free pages). Returns the number of copies changed.
    """
    from cache.record import pack_key

    with store._env().env.begin(db=store._env().records) as txn:
        value = bytes(txn.get(pack_key(index, variant)))
    data = bytearray((path / "data.mdb").read_bytes())
    copies = 0
    start = data.find(value)
    with open(path / "data.mdb", "r+b") as f:
        while start >= 0:
            f.seek(start + 24 + 100)  # a payload byte
            f.write(bytes([value[24 + 100] ^ 0xFF]))
            copies += 1
            start = data.find(value, start + 1)
    return copies


def test_a_corrupt_record_is_never_served_and_is_refilled(
    train_dir: Path, tmp_path: Path, source_keys: dict[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "c"
    loader = cached_loader(train_dir, path, recipe=identity_recipe(), variants=1, fill="inline")
    assert epoch_keys(loader, 0) == source_keys
    assert _flip_record_on_disk(path, loader.cache_store, 17, 0) >= 1
    report = verify(loader.cache_store)
    assert report.corrupt == [(17, 0)]
    with caplog.at_level(logging.WARNING, logger="cache.store"):
        keys = epoch_keys(loader, 1)
    assert keys == source_keys, "the corrupt record is not served: sample 17 is produced fresh"
    assert "(index 17, variant 0) is corrupt" in caplog.text
    stats = loader.cache_stats
    assert (stats.hits, stats.misses, stats.corrupt, stats.fresh) == (SMALL - 1, 1, 1, 1)
    assert stats.filled == 1
    report = verify(loader.cache_store)
    assert report.clean and report.ok == SMALL, "dropped and refilled"
    assert epoch_keys(loader, 2) == source_keys
    assert loader.cache_stats.hits == SMALL
    loader.close()


def test_a_cache_rebuilt_mid_pass_is_left_for_one_fresh_producer(
    train_dir: Path,
    tmp_path: Path,
    source_keys: dict[int, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another store rebuilds the cache during a cached pass: every batch still comes,
    with its labels, and the rest of the pass is produced by one fresh producer (not
    one per batch)."""
    import dataclasses

    import torch

    from dataplane.dali_producer import DaliBatchProducer

    built: list[int] = []  # requests of each fresh producer built

    def counting(context, requests):  # type: ignore[no-untyped-def]
        built.append(len(requests))
        return DaliBatchProducer(context, requests)

    path = tmp_path / "c"
    loader = cached_loader(
        train_dir, path, recipe=identity_recipe(), variants=1, fill="inline", batch_size=16,
        producer=counting,
    )
    assert epoch_keys(loader, 0) == source_keys
    assert loader.cache_store.count() == SMALL
    side = loader.cache_side
    assert side is not None
    built.clear()
    loader.set_epoch(1)
    planned = list(loader.plan.batches(1))
    keys: dict[int, str] = {}
    rebuilt: list[CacheStore] = []

    def serve() -> None:
        for n, ((images, labels), idx) in enumerate(zip(loader, planned, strict=True)):
            assert torch.equal(labels, torch.from_numpy(loader._labels[idx]))
            keys.update(zip(idx.tolist(), batch_keys(images), strict=True))
            if n == 1:  # elsewhere, the cache is rebuilt for another recipe
                rebuilt.append(
                    CacheStore(
                        dataclasses.replace(side.config, rebuild=True),
                        dataclasses.replace(side.identity, recipe_fingerprint="another recipe"),
                    )
                )

    with pytest.warns(CacheWarning, match="rebuilt or cleared by another process") as warned:
        serve()
    assert len(rebuilt) == 1
    # Reported once: the CacheWarning, not a WARNING record beside it.
    assert len([w for w in warned if issubclass(w.category, CacheWarning)]) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert keys == source_keys, "every sample once, cached before the rebuild, fresh after"
    assert len(built) == 1, "one fresh producer for the rest of the pass"
    assert 0 < built[0] < len(planned) - 1
    stats = loader.cache_stats
    assert stats.fresh == sum(int(b.size) for b in planned[-built[0] :])
    assert not side.enabled and "rebuilt or cleared" in (side.disabled or "")
    assert epoch_keys(loader, 2) == source_keys  # later passes are fresh
    rebuilt[0].close()
    loader.close()


def test_a_cache_rebuilt_during_a_filling_pass_is_warned_once(
    train_dir: Path, tmp_path: Path, source_keys: dict[int, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Another store rebuilds the cache while a pass fills it (every sample a miss, so
    only the filler's writes meet the rebuild): one CacheWarning at the end of the pass,
    no WARNING record beside it, and later passes are fresh without another warning."""
    import dataclasses

    path = tmp_path / "c"
    loader = cached_loader(
        train_dir, path, recipe=identity_recipe(), variants=1, fill="inline", batch_size=16
    )
    side = loader.cache_side
    assert side is not None
    keys: dict[int, str] = {}
    rebuilt: list[CacheStore] = []
    planned = list(loader.plan.batches(0))
    with pytest.warns(CacheWarning, match="rebuilt or cleared by another process") as warned:
        for n, ((images, _), idx) in enumerate(zip(loader, planned, strict=True)):
            keys.update(zip(idx.tolist(), batch_keys(images), strict=True))
            if n == 1:  # elsewhere, the cache is rebuilt for another recipe
                rebuilt.append(
                    CacheStore(
                        dataclasses.replace(side.config, rebuild=True),
                        dataclasses.replace(side.identity, recipe_fingerprint="another recipe"),
                    )
                )
    assert keys == source_keys
    assert len([w for w in warned if issubclass(w.category, CacheWarning)]) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not side.enabled and "rebuilt or cleared" in (side.disabled or "")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        assert epoch_keys(loader, 1) == source_keys
    assert rebuilt[0].count() == 0, "nothing of the old recipe under the new metadata"
    rebuilt[0].close()
    loader.close()


def test_resume_mid_epoch_with_the_cache(train_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "c"
    first = cached_loader(train_dir, path, variants=2, seed=9, batch_size=32)
    filled0 = epoch_keys(first, 0)
    # Epoch 1 (variant 1, filling) interrupted after 3 batches.
    first.set_epoch(1)
    it = iter(first)
    order = list(first.plan.batches(1))
    seen: dict[int, str] = {}
    for k in range(3):
        images, _ = next(it)
        seen.update(zip(order[k].tolist(), batch_keys(images), strict=True))
    state = first.state_dict()
    assert (state["epoch"], state["batches_done"]) == (1, 3)
    it.close()
    first.close()

    resumed = cached_loader(train_dir, path, variants=2, seed=9, batch_size=32)
    resumed.load_state_dict(state)
    rest = epoch_keys(resumed)
    assert not seen.keys() & rest.keys() and len(seen) + len(rest) == SMALL
    variant1 = {**seen, **rest}
    # Epoch 2 (variant 0) is served from the cache: bit-identical to epoch 0.
    # Resuming in it mid-way gives exactly the remaining cached batches.
    resumed.set_epoch(2)
    it = iter(resumed)
    next(it)
    next(it)
    state2 = resumed.state_dict()
    it.close()
    again = cached_loader(train_dir, path, variants=2, seed=9, batch_size=32)
    again.load_state_dict(state2)
    tail = epoch_keys(again)
    expected_tail = {i: filled0[i] for b in list(again.plan.batches(2))[2:] for i in b.tolist()}
    assert tail == expected_tail
    assert again.cache_stats.hits == len(expected_tail) and again.cache_stats.fresh == 0
    # Epoch 3 serves variant 1, filled by the two halves of the interrupted epoch.
    keys3 = epoch_keys(again, 3)
    assert again.cache_stats.hits == SMALL
    assert keys3 == variant1
    for loader in (resumed, again):
        loader.close()


def test_disk_full_while_filling_warns_and_serves_fresh(
    train_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loader = cached_loader(train_dir, tmp_path / "c", variants=1)
    monkeypatch.setattr(cache.env, "_commit", enospc_commit)
    with pytest.warns(CacheWarning, match="No space left on device.*produced fresh"):
        keys = epoch_keys(loader, 0)
    assert sorted(keys) == list(range(SMALL))
    assert loader.cache_stats.state == "failed" and loader.cache_stats.filled == 0
    keys = epoch_keys(loader, 1)  # no exception; everything fresh
    assert sorted(keys) == list(range(SMALL))
    assert (loader.cache_stats.misses, loader.cache_stats.fresh) == (SMALL, SMALL)
    loader.close()


def test_disk_full_warning_is_not_logged_again(
    train_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    loader = cached_loader(train_dir, tmp_path / "c", variants=1)
    monkeypatch.setattr(cache.env, "_commit", enospc_commit)
    with (
        caplog.at_level(logging.WARNING),
        pytest.warns(CacheWarning, match="No space left on device") as caught,
    ):
        for _ in loader:
            pass
    assert len([w for w in caught if issubclass(w.category, CacheWarning)]) == 1
    assert not [r for r in caplog.records if "No space left" in r.getMessage()], (
        "printed once: as the warning, not also as a WARNING log record"
    )
    loader.close()


def test_unusable_cache_path_warns_and_serves_fresh(train_dir: Path, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.warns(CacheWarning, match="is not a directory; choose another path"):
        loader = cached_loader(train_dir, not_a_dir, variants=1)
    assert loader.cache_stats is None
    side = loader.cache_side  # kept, with the reason it is not used
    assert side is not None and not side.enabled and side.store is None
    assert "not a directory" in (side.disabled or "")
    assert sum(len(x) for x, _ in loader) == SMALL
    assert loader.last_epoch_stats.cache is None  # type: ignore[union-attr]


def test_cache_option_is_validated(train_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cache=CacheConfig\('.*c'\)"):
        Loader(train_dir, batch_size=8, recipe="train", cache=str(tmp_path / "c"))  # type: ignore[arg-type]


def test_breaking_out_of_a_cached_pass_stops_its_threads(train_dir: Path, tmp_path: Path) -> None:
    loader = cached_loader(train_dir, tmp_path / "c", variants=1, batch_size=16)
    before = set(threading.enumerate())
    for i, _ in enumerate(loader):  # a filling pass: cache worker + DALI producer
        if i == 2:
            break
    gc.collect()
    names = {t.name for t in set(threading.enumerate()) - before}
    assert not names & {"dataplane-cache", "dataplane-producer"}
    assert sum(len(x) for x, _ in loader) == SMALL  # usable after an early stop
    loader.close()
    assert not any(t.name == "cache-filler" for t in threading.enumerate())
    assert sum(len(x) for x, _ in loader) == SMALL  # and after close


def test_cache_built_by_the_cli_is_served_by_the_loader(train_dir: Path, tmp_path: Path) -> None:
    from dataplane.cache_cli import build_command

    path = tmp_path / "built"
    result = CliRunner().invoke(
        build_command,
        [str(train_dir), str(path), "--variants", "2", "--max-bytes", "64M", "--batch-size",
         "64", "--device", "cpu", "--no-progress", "--json"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["records"] == 2 * SMALL
    loader = Loader(
        train_dir, batch_size=64, recipe="train", shuffle=True, device="cpu",
        cache=CacheConfig(path, variants=2, max_bytes=64 << 20),
    )
    for epoch in (0, 1):
        assert sum(len(x) for x, _ in loader) == SMALL
        assert (loader.cache_stats.variant, loader.cache_stats.hits) == (epoch, SMALL)
    loader.close()


def build_cli(train_dir: Path, path: Path, *extra: str) -> tuple[int, str]:
    from dataplane.cache_cli import build_command

    result = CliRunner().invoke(
        build_command,
        [str(train_dir), str(path), "--variants", "2", "--max-bytes", "64M", "--batch-size",
         "64", "--device", "cpu", "--no-progress", *extra],
    )
    return result.exit_code, result.output


def test_resumed_cli_build_produces_only_the_missing_samples(
    train_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataplane.dali_producer

    path = tmp_path / "built"
    code, output = build_cli(train_dir, path, "--json")
    assert code == 0, output
    first = json.loads(output)
    assert (first["written"], first["produced"]) == (2 * SMALL, 2 * SMALL)
    assert first["built_variants"] == [0, 1]
    lost = {0: [3, 150], 1: list(range(100, 140)) + [299]}  # as if a build had crashed
    with CacheStore.open_existing(path) as store:
        assert store.drop((i, v) for v, ids in lost.items() for i in ids) == 43
    real = dataplane.dali_producer.DaliBatchProducer
    asked: dict[int, list[int]] = {}

    def counting(context, requests):  # type: ignore[no-untyped-def]
        asked.setdefault(context.epoch, []).extend(i for r in requests for i in r.indices.tolist())
        return real(context, requests)

    monkeypatch.setattr(dataplane.dali_producer, "DaliBatchProducer", counting)
    code, output = build_cli(train_dir, path, "--json")
    assert code == 0, output
    again = json.loads(output)
    assert asked == lost, "only the missing samples are produced"
    assert (again["written"], again["produced"], again["built_variants"]) == (43, 43, [0, 1])
    assert (again["records"], again["error"]) == (2 * SMALL, None)
    asked.clear()
    code, output = build_cli(train_dir, path)  # complete: nothing to do, human output
    assert code == 0, output
    assert asked == {}
    assert "0 records written" in output and f"records {2 * SMALL} / {2 * SMALL}" in output
    with CacheStore.open_existing(path) as store:
        assert verify(store).clean


def test_fewer_variants_say_the_cache_changed_and_keep_its_records(
    train_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "built"
    code, output = build_cli(train_dir, path, "--variants", "4", "--json")
    assert code == 0, output
    assert json.loads(output)["records"] == 4 * SMALL
    kept = (
        f"the cache at {path} was built with variants=4 and now keeps variants=2: its "
        f"{2 * SMALL} records of variants 2..3 are kept but unused"
    )
    with pytest.warns(CacheWarning, match=kept) as caught:
        loader = Loader(
            train_dir, batch_size=64, recipe="train", device="cpu",
            cache=CacheConfig(path, variants=2, max_bytes=64 << 20),
        )
    assert len(caught) == 1 and caught[0].filename == __file__, "points at the Loader(...) call"
    assert f"`dataplane cache verify --repair {path}` deletes them" in str(caught[0].message)
    info = loader.cache_store.info()
    assert (info.records, info.expected_records, info.unused_records) == (
        2 * SMALL, 2 * SMALL, 2 * SMALL
    )
    assert sum(len(x) for x, _ in loader) == SMALL and loader.cache_stats.hits == SMALL
    loader.close()
    with CacheStore.open_existing(path) as store:
        assert store.count() == 4 * SMALL, "nothing stored is lost"

    # The CLI says it too, in its output and its JSON.
    code, output = build_cli(train_dir, path, "--variants", "4")
    assert code == 0 and "variants changed" not in output, output
    code, output = build_cli(train_dir, path, "--variants", "1")
    assert code == 0, output
    assert (
        f"variants changed: the cache at {path} was built with variants=4 and now keeps "
        f"variants=1: its {3 * SMALL} records of variants 1..3 are kept but unused"
    ) in output
    assert f"records {SMALL} / {SMALL}" in output
    code, output = build_cli(train_dir, path, "--variants", "4", "--json")
    assert json.loads(output)["variants_change"] == {"from": 1, "to": 4, "unused_records": 0}
    code, output = build_cli(train_dir, path, "--variants", "2", "--json")
    doc = json.loads(output)
    assert doc["variants_change"] == {"from": 4, "to": 2, "unused_records": 2 * SMALL}
    assert (doc["records"], doc["unused_records"]) == (2 * SMALL, 2 * SMALL)
    with warnings.catch_warnings():  # the same setting again: nothing to say
        warnings.simplefilter("error", CacheWarning)
        Loader(
            train_dir, batch_size=64, recipe="train", device="cpu",
            cache=CacheConfig(path, variants=2, max_bytes=64 << 20),
        ).close()


def test_filling_variants_another_loader_dropped_warns_once_naming_both_counts(
    train_dir: Path, tmp_path: Path
) -> None:
    """A second loader with fewer variants, built while the cache is still empty, has
    nothing to say; the first one's later fills of the dropped variants fall outside the
    cache's metadata, and that loader says so once."""
    path = tmp_path / "c"
    first = cached_loader(train_dir, path, variants=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        second = cached_loader(train_dir, path, variants=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(4):
            assert len(epoch_keys(first, epoch)) == SMALL
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1, messages
    (message,) = messages
    assert (
        f"the cache at {path} keeps variants=2 since another loader (or process) opened it "
        f"with variants=2, and this loader has variants=4: the records it fills for variants "
        f"2..3 ({SMALL} of variant 2 this pass) are outside the cache's metadata"
    ) in message
    assert f"`dataplane cache verify --repair {path}` deletes them" in message
    assert "Give every Loader of this cache the same variants (variants=4" in message
    assert second.cache_store.info().unused == {2: SMALL, 3: SMALL}
    first.close()
    second.close()


def test_cli_build_stops_with_status_1_when_a_write_fails(
    train_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "built"
    Loader(  # the cache exists (its metadata written), empty
        train_dir, recipe="train", device="cpu",
        cache=CacheConfig(path, variants=2, max_bytes=64 << 20),
    ).close()
    monkeypatch.setattr(cache.env, "_commit", enospc_commit)
    code, output = build_cli(train_dir, path, "--batch-size", "32")
    assert code == 1, output
    assert "stopped: writing to the cache" in output and "No space left on device" in output
    assert "0 records written" in output
    assert "CacheWarning" not in output


def test_cli_build_into_an_unusable_path_exits_1(train_dir: Path, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    code, output = build_cli(train_dir, not_a_dir)
    assert code == 1
    assert "Error: " in output and "is not a directory" in output


# -- a damaged, truncated or read-only cache: a clear message, fresh samples ------------
def _damaged_pattern(path: Path) -> str:
    return rf"the cache at {re.escape(str(path))} is damaged \(.*MDB_(CORRUPTED|PAGE_NOTFOUND)"


def test_a_damaged_page_is_named_by_every_command_and_the_loader_serves_fresh(
    train_dir: Path, tmp_path: Path
) -> None:
    from dataplane.cache_cli import cache_group
    from dataplane.cli import main

    path = tmp_path / "built"
    code, output = build_cli(train_dir, path)
    assert code == 0, output
    assert cache_helpers.damage_record_pages(path, 150, 1), "a page of variant 1 is damaged"
    damaged = _damaged_pattern(path)
    fix = r"Rebuild it: CacheConfig\(.*, rebuild=True\), or `dataplane cache build --rebuild"
    runner = CliRunner()
    info = runner.invoke(cache_group, ["info", str(path)])
    assert info.exit_code == 1 and isinstance(info.exception, SystemExit), info.output
    assert re.search(rf"^Error: {damaged}.*{fix}", info.output), info.output
    checked = runner.invoke(cache_group, ["verify", "--repair", "--no-progress", str(path)])
    assert checked.exit_code == 1 and isinstance(checked.exception, SystemExit), checked.output
    assert re.search(rf"^damaged    {damaged}.*{fix}", checked.output, re.M), checked.output
    assert "repaired   nothing: deleting records cannot mend a damaged file" in checked.output
    code, output = build_cli(train_dir, path)
    assert code == 1 and re.search(rf"Error: {damaged}.*{fix}", output), output
    # The loader serves variant 0 from the cache; variant 1 meets the damage: one warning
    # naming the fix, and every sample fresh.
    loader = Loader(
        train_dir, batch_size=64, recipe="train", device="cpu",
        cache=CacheConfig(path, variants=2, max_bytes=64 << 20),
    )
    assert sum(len(x) for x, _ in loader) == SMALL and loader.cache_stats.hits == SMALL
    with pytest.warns(CacheWarning, match=rf"^{damaged}.*{fix}.*fresh samples$") as caught:
        assert sum(len(x) for x, _ in loader) == SMALL
    assert len([w for w in caught if issubclass(w.category, CacheWarning)]) == 1
    assert (loader.cache_stats.hits, loader.cache_stats.fresh) == (0, SMALL)
    assert sum(len(x) for x, _ in loader) == SMALL  # later passes: fresh, no error
    loader.close()
    iterated = runner.invoke(
        main, ["iterate", str(train_dir), "--cache", str(path), "--variants", "2",
               "--batch-size", "64", "--max-bytes", "64M", "--device", "cpu"],
    )
    assert iterated.exit_code == 0, iterated.output
    assert re.search(rf"Warning: {damaged}", iterated.output), iterated.output
    code, output = build_cli(train_dir, path, "--rebuild", "--json")
    assert code == 0, output
    assert json.loads(output)["records"] == 2 * SMALL
    with CacheStore.open_existing(path) as store:
        assert verify(store).clean


def _dataplane(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``dataplane`` command in a child process (a crash fails the test, not the run)."""
    return subprocess.run(
        [sys.executable, "-m", "dataplane.cli", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )


def _no_crash(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode >= 0, f"killed by {signal.Signals(-proc.returncode).name}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


_LOAD_TRUNCATED = """
import json, sys, warnings
from dataplane import CacheConfig, Loader
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    loader = Loader(sys.argv[1], batch_size=64, recipe="train", device="cpu",
                    cache=CacheConfig(sys.argv[2], variants=2, max_bytes=64 << 20))
    served = [sum(len(x) for x, _ in loader) for _ in range(2)]
print(json.dumps({"served": served, "enabled": loader.cache_side.enabled,
                  "warnings": [str(w.message) for w in caught]}))
"""


def test_a_truncated_cache_is_refused_by_every_command_and_the_loader_serves_fresh(
    train_dir: Path, tmp_path: Path
) -> None:
    path, other = tmp_path / "built", tmp_path / "other"
    code, output = build_cli(train_dir, path)
    assert code == 0, output
    shutil.copytree(path, other)
    (other / "notes.txt").write_text("kept")
    half = (path / "data.mdb").stat().st_size // 2
    for where in (path, other):
        os.truncate(where / "data.mdb", half)
    truncated = (
        rf"the cache at {re.escape(str(path))} is damaged \(its data.mdb is truncated: {half} "
        r"bytes of \d+\)\. Rebuild it: CacheConfig\(.*rebuild=True\)"
    )
    build = ["cache", "build", str(train_dir), str(path), "--variants", "2", "--max-bytes",
             "64M", "--batch-size", "64", "--device", "cpu", "--no-progress"]
    for args in (["cache", "info", str(path)], ["cache", "verify", "--no-progress", str(path)],
                 build):
        proc = _dataplane(*args)
        text = _no_crash(proc)
        assert proc.returncode == 1 and re.search(rf"Error: {truncated}", text), (args, text)
    proc = _dataplane("iterate", str(train_dir), "--cache", str(path), "--variants", "2",
                      "--max-bytes", "64M", "--batch-size", "64", "--device", "cpu")
    text = _no_crash(proc)
    assert proc.returncode == 0 and re.search(rf"Warning: the cache is not used: {truncated}", text)
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_TRUNCATED, str(train_dir), str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    _no_crash(proc)
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded["served"] == [SMALL, SMALL] and not loaded["enabled"]
    assert len(loaded["warnings"]) == 1
    assert re.match(rf"the cache is not used: {truncated}", loaded["warnings"][0])
    proc = _dataplane("cache", "clear", "--yes", str(other))
    assert proc.returncode == 0 and "data.mdb and lock.mdb deleted" in _no_crash(proc)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    proc = _dataplane(*build, "--rebuild")
    assert proc.returncode == 0, _no_crash(proc)
    proc = _dataplane("cache", "verify", "--no-progress", str(path))
    assert proc.returncode == 0 and f"complete   {2 * SMALL} / {2 * SMALL}" in _no_crash(proc)


#: Bind-mounts ``$0`` read-only at ``$1`` in a private mount namespace, then runs the rest.
_READ_ONLY_MOUNT = 'mount --bind "$0" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'


def test_cli_build_into_a_read_only_cache_builds_nothing_and_exits_1(
    train_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "built"
    code, output = build_cli(train_dir, path)
    assert code == 0, output
    if os.geteuid() != 0:  # permissions apply: a directory this user may not write
        where, why = path, "this user may not write its directory"
        for p in (*path.iterdir(), path):
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            code, output = build_cli(train_dir, path, "--variants", "3")
        finally:
            for p in (path, *path.iterdir()):
                p.chmod(0o755 if p.is_dir() else 0o644)
    else:  # root writes anyway: a read-only bind mount (a private one, gone with the child)
        if shutil.which("unshare") is None:
            pytest.skip("a read-only mount needs unshare")
        where, why = tmp_path / "ro", "the file system holding it is mounted read-only"
        where.mkdir()
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   _READ_ONLY_MOUNT, str(path), str(where)]
        probe = subprocess.run([*command, "true"], capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            pytest.skip(f"cannot mount here: {probe.stderr.strip()}")
        proc = subprocess.run(
            [*command, sys.executable, "-m", "dataplane.cli", "cache", "build", str(train_dir),
             str(where), "--variants", "3", "--max-bytes", "64M", "--batch-size", "64",
             "--device", "cpu", "--no-progress"],
            cwd=REPO, capture_output=True, text=True, timeout=300,
        )
        code, output = proc.returncode, _no_crash(proc)
    assert code == 1, output
    assert (
        f"Error: the cache at {where} is read-only ({why}): nothing was built, and {SMALL} "
        "samples of variant 2 are still missing. Make it writable, or build into another path"
    ) in output
    with CacheStore.open_existing(path) as store:
        assert store.count() == 2 * SMALL and store.meta.variants == 2  # untouched


def test_cached_loader_on_real_jpegs_at_224(opencv_jpegs: list[Path], tmp_path: Path) -> None:
    folders = sorted({p.parent for p in opencv_jpegs})
    items = [(str(p), folders.index(p.parent)) for p in opencv_jpegs[:40]]
    loader = Loader(
        items, batch_size=16, recipe="train", size=224, shuffle=True, device="cpu",
        cache=CacheConfig(tmp_path / "c", variants=1, max_bytes=64 << 20),
    )
    first = [x.clone() for x, _ in loader]
    second = [x for x, _ in loader]
    assert loader.cache_stats.hits == len(items)
    assert first[0].shape == (16, 3, 224, 224)
    # Epochs 0 and 1 differ in order: compare the normalized images as multisets.
    def digests(batches):  # type: ignore[no-untyped-def]
        return Counter(hashlib.sha1(b.numpy().tobytes()).hexdigest() for x in batches for b in x)

    assert digests(second) == digests(first), "epoch 1 serves epoch 0's augmentations exactly"
    loader.close()


class _PatternProducer:
    """A fresh producer without DALI: sample ``i`` is the constant image ``i % 251``,
    made on the context's device (CUDA here)."""

    def __init__(self, context, requests) -> None:  # type: ignore[no-untyped-def]
        self.context, self.requests = context, list(requests)

    def __iter__(self):  # type: ignore[no-untyped-def]
        import torch

        from dataplane.producer import ProducedBatch

        r = self.context.recipe
        device = f"cuda:{self.context.device_id}"
        for request in self.requests:
            values = torch.from_numpy(request.indices % 251).to(torch.uint8).to(device)
            images = values.view(-1, 1, 1, 1).expand(-1, r.channels, r.size, r.size).contiguous()
            yield ProducedBatch(request.position, images, request.indices)

    def close(self) -> None:
        pass


@pytest.mark.gpu
def test_cuda_loader_merges_cached_and_fresh_rows_on_the_gpu(tmp_path: Path) -> None:
    import torch
    from PIL import Image

    from preprocessing import normalize

    for c in range(3):  # a real image folder (only its size and labels are read here)
        (tmp_path / "data" / f"class{c}").mkdir(parents=True)
        for i in range(40):
            Image.new("RGB", (32, 32), (i, c, 0)).save(tmp_path / "data" / f"class{c}" / f"{i}.png")
    loader = Loader(
        tmp_path / "data", batch_size=32, recipe="train", size=32, shuffle=True, device="cuda",
        producer=_PatternProducer,
        cache=CacheConfig(tmp_path / "c", variants=1, max_bytes=64 << 20, fill="inline"),
    )
    n = 120
    store = loader.cache_store
    cached = np.arange(0, n, 3)
    markers = np.stack([np.full((3, 32, 32), 200 - i % 100, np.uint8) for i in cached])
    store.put_batch(cached, 0, markers, loader._labels[cached])
    expected = {int(i): 200 - int(i) % 100 if i % 3 == 0 else int(i) % 251 for i in range(n)}

    def check_epoch(epoch: int) -> None:
        loader.set_epoch(epoch)
        for (images, labels), idx in zip(loader, loader.plan.batches(epoch), strict=True):
            assert images.device.type == "cuda" and labels.device.type == "cuda"
            values = torch.tensor([expected[int(i)] for i in idx], dtype=torch.uint8)
            want = normalize(
                values.view(-1, 1, 1, 1).expand(-1, 3, 32, 32).contiguous().cuda(), loader.recipe
            )
            torch.testing.assert_close(images, want, rtol=0, atol=0)

    check_epoch(0)
    assert (loader.cache_stats.hits, loader.cache_stats.misses) == (cached.size, n - cached.size)
    assert loader.cache_stats.filled == n - cached.size  # copied back from the GPU to fill
    check_epoch(1)
    assert (loader.cache_stats.hits, loader.cache_stats.fresh) == (n, 0)
    loader.close()
