"""The loaders each schedule builds: the perfect schedule's phase 1 reads and fills the cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from trainers.cli import train_command
from trainers.data import DatasetSplits, build_loaders, cache_available
from trainers.run_record import RunRecord

pytestmark = pytest.mark.skipif(
    not cache_available(), reason="this dataplane has no augmented-sample cache"
)


def _splits(png_folder: Path) -> DatasetSplits:
    return DatasetSplits(png_folder / "train", png_folder / "test")


def test_perfect_phase_one_loader_has_the_cache_and_the_others_do_not(
    png_folder: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    loaders = build_loaders(
        "perfect",
        _splits(png_folder),
        batch_size=50,
        device="cpu",
        cache_dir=cache_dir,
        variants=1,
    )
    assert loaders.fresh is not None
    assert loaders.train.cache_store is not None
    assert Path(loaders.train.cache_store.path) == cache_dir
    assert loaders.train.cache_store.variants == 1
    assert loaders.fresh.cache_store is None
    assert loaders.val.cache_store is None

    fresh_only = build_loaders("fresh", _splits(png_folder), batch_size=50, device="cpu")
    assert fresh_only.fresh is None and fresh_only.train.cache_store is None


def test_perfect_phase_one_serves_later_epochs_from_the_cache(
    png_folder: Path, tmp_path: Path
) -> None:
    loaders = build_loaders(
        "perfect",
        _splits(png_folder),
        batch_size=50,
        device="cpu",
        cache_dir=tmp_path / "cache",
        variants=1,
    )
    cached = loaders.train
    hits = []
    for epoch in range(2):
        cached.set_epoch(epoch)
        samples = sum(len(labels) for _, labels in cached)
        assert samples == 200
        assert cached.cache_stats is not None
        hits.append(cached.cache_stats.hits)
    # epoch 0 fills the single variant; epoch 1 serves every sample from it
    assert hits == [0, 200]
    assert cached.cache_store.count() == 200


def test_train_perfect_fills_the_runs_cache(png_folder: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "p"
    result = CliRunner().invoke(
        train_command,
        [
            *("--data", str(png_folder), "--schedule", "perfect", "--epochs", "2"),
            *("--batch-size", "50", "--run-dir", str(run_dir), "--device", "cpu"),
            *("--no-progress", "--variants", "1"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert [e.phase for e in RunRecord.read(run_dir).epochs] == ["cached", "fresh"]
    from cache import CacheStore

    store = CacheStore.open_existing(run_dir / "cache")
    try:
        # the phase-1 epoch put every training sample's variant 0 in the run's cache
        assert store.counts() == {0: 200}
    finally:
        store.close()
