"""``benchmarks/time_to_accuracy.py``: real cache for ``perfect``, subsets, full validation split.

No training here (the benchmark's runs take minutes); it checks what the runs
are built from, on real Fashion-MNIST. Never asserts on time.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import benchmarks.time_to_accuracy as tta


def _args(tmp_path: Path, **overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "epochs_28": 2,
        "epochs_224": 2,
        "target_28": 0.8,
        "target_224": 0.8,
        "subset_28": 300,
        "subset_224": 300,
        "variants": 1,
        "seed": 0,
        "device": "cpu",
        "data_root": tmp_path / "data",
        "cache_root": tmp_path / "cache",
    }
    values.update(overrides)
    return argparse.Namespace(**values)


def test_no_in_memory_stand_in_or_backend_option() -> None:
    assert not hasattr(tta, "InMemoryVariantLoader")
    with pytest.raises(SystemExit):
        tta.main(["--phase1-backend", "memory", "--report-only"])


def test_subset_keeps_the_full_test_split_and_perfect_reads_the_lmdb_cache(
    tmp_path: Path, fmnist_dir: Path
) -> None:
    args = _args(tmp_path)
    cfg = tta._configs(args)["28"]
    splits = tta._splits(cfg, args.data_root)
    train = sorted(splits.train.rglob("*.png"))
    assert len(train) == 300
    assert {int(p.stem) for p in train} == set(range(300))
    assert len(list(splits.val.rglob("*.png"))) == tta.FMNIST_TEST_IMAGES
    assert tta._splits(cfg, args.data_root) == splits  # linked once, reused

    loaders = tta._loaders(cfg, "perfect", splits, args, args.cache_root / "fmnist-28")
    try:
        assert loaders.fresh is not None
        assert loaders.train.cache_store is not None
        images, labels = next(iter(loaders.train))
        assert tuple(images.shape) == (cfg.batch_size, 1, 28, 28)
        assert len(labels) == cfg.batch_size
        assert (args.cache_root / "fmnist-28").is_dir()
    finally:
        for loader in (loaders.train, loaders.fresh, loaders.val):
            close = getattr(loader, "close", None)
            if callable(close):
                close()
