"""Fixtures of the trainer tests: small slices of the real Fashion-MNIST."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.trainers.helpers import load_fmnist


@pytest.fixture(scope="session")
def fmnist_arrays(fmnist_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """2048 training and 1024 test images of Fashion-MNIST (real labels)."""
    return {
        "train": load_fmnist(fmnist_dir, "train", limit=2048),
        "val": load_fmnist(fmnist_dir, "t10k", limit=1024),
    }


@pytest.fixture(scope="session")
def png_folder(tmp_path_factory: pytest.TempPathFactory, fmnist_dir: Path) -> Path:
    """A tiny image folder (one sub-folder per class, PNG) of real Fashion-MNIST images.

    ``train/`` holds 200 images, ``test/`` 100.
    """
    from PIL import Image

    root = tmp_path_factory.mktemp("fmnist-png")
    for split, idx_split, n in (("train", "train", 200), ("test", "t10k", 100)):
        images, labels = load_fmnist(fmnist_dir, idx_split, limit=n)
        for i, (img, label) in enumerate(zip(images, labels, strict=True)):
            d = root / split / f"{int(label):02d}_class"
            d.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img, mode="L").save(d / f"{i:05d}.png")
    return root
