"""Fixtures shared by the whole suite.

Data fixtures point at real data installed by ``make test`` (Debian's
``dataset-fashion-mnist`` and ``opencv-doc``) or at ``../shared`` beside the
checkout; each skips cleanly when its data is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FMNIST_DIR = Path(os.environ.get("DATAPLANE_FMNIST_DIR", "/usr/share/datasets/fashion-mnist"))
OPENCV_EXAMPLES = Path(os.environ.get("DATAPLANE_JPEG_DIR", "/usr/share/doc/opencv-doc/examples"))
SHARED_DIR = Path(os.environ.get("DATAPLANE_SHARED_DIR", REPO_ROOT.parent / "shared"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests on machines without CUDA (they run on a GPU machine)."""
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (marker 'gpu')")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator (seed 0) so failures reproduce."""
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def fmnist_dir() -> Path:
    """Directory holding the Fashion-MNIST IDX files (Debian ``dataset-fashion-mnist``)."""
    if not (FMNIST_DIR / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(
            f"Fashion-MNIST not installed at {FMNIST_DIR} "
            "(apt-get install dataset-fashion-mnist)"
        )
    return FMNIST_DIR


@pytest.fixture(scope="session")
def opencv_jpegs() -> list[Path]:
    """Real photos (~0.23 Mpx JPEGs) from Debian ``opencv-doc``."""
    paths = sorted(p for p in OPENCV_EXAMPLES.rglob("*.jpg") if p.is_file())
    if not paths:
        pytest.skip(f"no JPEGs under {OPENCV_EXAMPLES} (apt-get install opencv-doc)")
    return paths


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``shared`` folder beside the checkout (real Spark event logs)."""
    if not SHARED_DIR.is_dir():
        pytest.skip(f"{SHARED_DIR} is absent")
    return SHARED_DIR
