"""The torch DataLoader baseline over a real image folder (Fashion-MNIST PNGs)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from trainers.errors import TrainerConfigError, TrainerDataError
from trainers.torch_baseline import FolderDataset, TorchBaselineLoader, Transform


def _labels(loader: TorchBaselineLoader) -> list[int]:
    return [int(v) for _, y in loader for v in y]


def test_batches_shapes_and_normalization(png_folder: Path) -> None:
    loader = TorchBaselineLoader(png_folder / "train", batch_size=64, num_workers=2)
    assert loader.transform.size == 28 and loader.transform.channels == 1  # inferred from the PNGs
    assert len(loader) == 4  # 200 samples: 3 full batches + a partial one
    batches = list(loader)
    assert [b[0].shape[0] for b in batches] == [64, 64, 64, 8]
    images, labels = batches[0]
    assert images.dtype == torch.float32 and images.shape[1:] == (1, 28, 28)
    assert labels.dtype == torch.int64
    assert -1.0 <= float(images.min()) and float(images.max()) <= 1.0  # mean 0.5, std 0.5
    assert float(images.min()) < -0.9  # black background survives


def test_every_sample_once_per_epoch_new_order_each_epoch(png_folder: Path) -> None:
    loader = TorchBaselineLoader(png_folder / "train", batch_size=50, num_workers=0, seed=3)
    truth = Counter(label for _, label in loader.dataset.samples)
    loader.set_epoch(0)
    e0 = _labels(loader)
    loader.set_epoch(1)
    e1 = _labels(loader)
    assert Counter(e0) == truth == Counter(e1)
    assert e0 != e1
    again = TorchBaselineLoader(png_folder / "train", batch_size=50, num_workers=0, seed=3)
    again.set_epoch(1)
    assert _labels(again) == e1


def test_mid_epoch_resume_yields_the_same_remaining_batches(png_folder: Path) -> None:
    full = TorchBaselineLoader(png_folder / "train", batch_size=32, num_workers=2, seed=1)
    full.set_epoch(2)
    reference = list(full)
    part = TorchBaselineLoader(png_folder / "train", batch_size=32, num_workers=2, seed=1)
    part.set_epoch(2)
    it = iter(part)
    for _ in range(3):
        next(it)
    state = part.state_dict()
    assert state["position"] == 3 and state["epoch"] == 2
    resumed = TorchBaselineLoader(png_folder / "train", batch_size=32, num_workers=2, seed=1)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(reference) - 3
    for (xa, ya), (xb, yb) in zip(rest, reference[3:], strict=True):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)  # same images, same augmentation
    other = TorchBaselineLoader(png_folder / "train", batch_size=16, num_workers=0, seed=1)
    with pytest.raises(TrainerConfigError, match="batch_size=32 but this loader has batch_size=16"):
        other.load_state_dict(state)


def test_shards_are_disjoint_and_equal(png_folder: Path) -> None:
    ranks = [
        TorchBaselineLoader(
            png_folder / "train",
            batch_size=32,
            num_workers=0,
            rank=r,
            world_size=3,
            train=False,
            shuffle=True,
        )
        for r in range(3)
    ]
    assert len({len(r) for r in ranks}) == 1
    keys = [set(r._order()) for r in ranks]
    assert not (keys[0] & keys[1]) and not (keys[1] & keys[2]) and not (keys[0] & keys[2])
    assert sum(len(k) for k in keys) == 198  # 200 // 3 * 3


def test_eval_transform_is_deterministic_center_crop(png_folder: Path) -> None:
    loader = TorchBaselineLoader(png_folder / "test", batch_size=100, train=False, num_workers=0)
    a = next(iter(loader))[0]
    loader.set_epoch(5)
    b = next(iter(loader))[0]
    assert torch.equal(a, b)


def test_random_resized_crop_follows_area_and_ratio() -> None:
    t = Transform(size=28, channels=3, area=(0.25, 0.5), aspect_ratio=(1.0, 1.0))
    rng = random.Random(0)
    for _ in range(200):
        left, top, right, bottom = t._crop_box(100, 100, rng)
        w, h = right - left, bottom - top
        assert w == h and 0.24 <= w * h / 1e4 <= 0.51
        assert 0 <= left and right <= 100 and 0 <= top and bottom <= 100
    img = Image.fromarray(np.zeros((40, 60, 3), dtype=np.uint8))
    assert t(img, rng).shape == (3, 28, 28)


def test_bad_folders_and_files(tmp_path: Path) -> None:
    with pytest.raises(TrainerDataError, match="does not exist"):
        TorchBaselineLoader(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainerDataError, match="no class sub-folders"):
        TorchBaselineLoader(tmp_path / "empty")
    (tmp_path / "noimg" / "cat").mkdir(parents=True)
    (tmp_path / "noimg" / "cat" / "notes.txt").write_text("hi")
    with pytest.raises(TrainerDataError, match="holds no images"):
        TorchBaselineLoader(tmp_path / "noimg")
    bad = tmp_path / "bad" / "cat"
    bad.mkdir(parents=True)
    (bad / "x.png").write_bytes(b"\x89PNG truncated")
    ds = FolderDataset(tmp_path / "bad", Transform(size=8, channels=1))
    with pytest.raises(TrainerDataError, match=r"cannot read image 0 \(.*x.png\)"):
        ds[(0, 0)]
    with pytest.raises(TrainerConfigError, match="channels must be 1 or 3"):
        Transform(size=8, channels=2)


def test_a_class_folder_without_images_is_kept_with_a_warning(tmp_path: Path) -> None:
    from dataplane.sources import EmptyClassWarning

    for name in ("a", "c"):
        (tmp_path / name).mkdir()
        Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / name / "0.png")
    (tmp_path / "b").mkdir()
    with pytest.warns(EmptyClassWarning, match=r"class folder b \(label 1\) of .* holds no images"):
        ds = FolderDataset(tmp_path, Transform(size=8, channels=1))
    assert ds.classes == ["a", "b", "c"]
    assert [label for _, label in ds.samples] == [0, 2]


def test_mixed_sizes_give_the_shape_the_dataplane_loader_infers(tmp_path: Path) -> None:
    from dataplane import Loader, MixedImageSizeWarning

    # The first image is the largest and in grayscale; one later image is in colour.
    sides = {"a": [(90, 120), (40, 50), (30, 60)], "b": [(48, 44), (70, 64), (36, 36)]}
    for cls, shapes in sides.items():
        (tmp_path / cls).mkdir()
        for k, (w, h) in enumerate(shapes):
            mode = "RGB" if (cls, k) == ("b", 2) else "L"
            Image.new(mode, (w, h), color=128 if mode == "L" else (10, 200, 30)).save(
                tmp_path / cls / f"{k}.png"
            )
    with pytest.warns(MixedImageSizeWarning):
        baseline = TorchBaselineLoader(tmp_path, batch_size=2)
    with pytest.warns(MixedImageSizeWarning):
        loader = Loader(tmp_path, batch_size=2, recipe="eval", device="cpu")
    assert (baseline.transform.size, baseline.transform.channels) == (40, 3)  # not 90, 1
    assert (loader.recipe.size, loader.recipe.channels) == (40, 3)
