"""The CUDA path: mixed (GPU) decode, CUDA tensors. Runs only where CUDA exists."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from dataplane import Loader
from dataplane.errors import CorruptSampleWarning
from dataplane.sources import ImageFolderSource
from tests.dataplane.helpers import batch_keys, identity_recipe

pytestmark = pytest.mark.gpu


def test_cuda_loader_yields_cuda_tensors_equal_to_cpu(fmnist_small: Path) -> None:
    data = fmnist_small / "train"
    gpu = Loader(data, recipe=identity_recipe(), batch_size=64, device="cuda", shuffle=True)
    cpu = Loader(data, recipe=identity_recipe(), batch_size=64, device="cpu", shuffle=True)
    assert gpu.device.value == "cuda"
    gpu_batches = list(gpu)
    cpu_batches = list(cpu)
    for (xg, yg), (xc, yc) in zip(gpu_batches, cpu_batches, strict=True):
        assert xg.is_cuda and yg.is_cuda and xg.dtype == torch.float32 and yg.dtype == torch.int64
        assert batch_keys(xg) == batch_keys(xc)
        assert torch.equal(yg.cpu(), yc)


def test_cuda_normalize_false_yields_cuda_uint8_equal_to_the_cpu_pixels(fmnist_small: Path) -> None:
    data = fmnist_small / "train"
    gpu = Loader(data, recipe=identity_recipe(), batch_size=64, device="cuda", normalize=False)
    cpu = Loader(data, recipe=identity_recipe(), batch_size=64, device="cpu", normalize=False)
    for (xg, _), (xc, _) in zip(list(gpu), list(cpu), strict=True):
        assert xg.is_cuda and xg.dtype == torch.uint8
        assert torch.equal(xg.cpu(), xc)


def test_cuda_train_recipe_and_default_device(fmnist_small: Path) -> None:
    loader = Loader(fmnist_small / "train", batch_size=100, recipe="train", size=32, channels=3)
    assert loader.device.value == "cuda", "device=None picks CUDA when available"
    images, labels = next(iter(loader))
    assert images.shape == (100, 3, 32, 32) and images.is_cuda
    loader.close()


def test_cuda_skips_corrupt_samples(writable_copy: Path) -> None:
    source = ImageFolderSource(writable_copy)
    path = Path(source.describe(9))
    path.write_bytes(path.read_bytes()[:40])
    loader = Loader(writable_copy, batch_size=64, device="cuda", on_corrupt="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptSampleWarning)
        total = sum(len(x) for x, _ in loader)
    assert total == len(source) - 1
    assert loader.last_epoch_stats is not None and loader.last_epoch_stats.num_skipped == 1
