"""Recipe pipelines on real DALI with real images: layout, values, augmentation."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from preprocessing import INPUT_NAME, Device, build_pipeline, make_recipe, normalize

# DALI's RandAugment uses its own deprecated operator aliases when it runs.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def fmnist_pngs(fmnist_dir: Path) -> list[bytes]:
    """16 real Fashion-MNIST images as PNG bytes."""
    from dataplane.idx import read_idx

    images = read_idx(fmnist_dir / "t10k-images-idx3-ubyte.gz")[:16]
    out = []
    for image in images:
        buf = io.BytesIO()
        Image.fromarray(image, mode="L").save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def run_once(
    recipe, encoded: list[bytes], device: Device = Device.CPU, seed: int = 1
) -> np.ndarray:  # type: ignore[no-untyped-def]
    pipe = build_pipeline(
        recipe,
        device=device,
        batch_size=len(encoded),
        num_threads=1,
        seed=seed,
        prefetch_queue_depth=1,
    )
    pipe.feed_input(INPUT_NAME, [np.frombuffer(e, dtype=np.uint8) for e in encoded])
    (out,) = pipe.run()
    if device is Device.CUDA:
        out = out.as_cpu()
    return np.asarray(out.as_tensor())


def pil_pixels(encoded: list[bytes]) -> np.ndarray:
    return np.stack([np.asarray(Image.open(io.BytesIO(e)).convert("L"))[None] for e in encoded])


def test_eval_without_resize_is_identity_in_chw(fmnist_pngs: list[bytes]) -> None:
    recipe = make_recipe("eval", size=28, channels=1, crop_fraction=1.0)
    out = run_once(recipe, fmnist_pngs)
    assert out.dtype == np.uint8 and out.shape == (16, 1, 28, 28)
    np.testing.assert_array_equal(out, pil_pixels(fmnist_pngs))


def test_eval_center_crops_after_resizing_the_shorter_side(fmnist_pngs: list[bytes]) -> None:
    out = run_once(make_recipe("eval", size=24, channels=3), fmnist_pngs)
    assert out.shape == (16, 3, 24, 24)
    # Grayscale decoded as RGB: equal channels.
    np.testing.assert_array_equal(out[:, 0], out[:, 1])
    again = run_once(make_recipe("eval", size=24, channels=3), fmnist_pngs, seed=99)
    np.testing.assert_array_equal(out, again)  # eval is deterministic


def test_train_flip_mirrors_horizontally(fmnist_pngs: list[bytes]) -> None:
    # Full-area, square crops of a 28 px image at 28 px: only the flip changes pixels.
    recipe = make_recipe("train", size=28, channels=1, area=(1.0, 1.0), aspect_ratio=(1.0, 1.0))
    batch = fmnist_pngs * 4
    out = run_once(recipe, batch)
    reference = pil_pixels(batch)
    same = [np.array_equal(o, r) for o, r in zip(out, reference, strict=True)]
    mirrored = [np.array_equal(o, r[:, :, ::-1]) for o, r in zip(out, reference, strict=True)]
    assert all(s or m for s, m in zip(same, mirrored, strict=True))
    assert any(same) and any(mirrored), "about half the samples are flipped"


def test_train_random_resized_crop_on_real_jpegs(opencv_jpegs: list[Path]) -> None:
    encoded = [p.read_bytes() for p in opencv_jpegs[:8]]
    recipe = make_recipe("train", size=64, channels=3)
    a = run_once(recipe, encoded, seed=1)
    b = run_once(recipe, encoded, seed=2)
    assert a.shape == (8, 3, 64, 64) and a.dtype == np.uint8
    assert not np.array_equal(a, b), "different seeds, different crops"
    np.testing.assert_array_equal(a, run_once(recipe, encoded, seed=1))


def test_train_with_randaugment(opencv_jpegs: list[Path]) -> None:
    encoded = [p.read_bytes() for p in opencv_jpegs[:4]]
    plain = make_recipe("train", size=48, channels=3, flip=False)
    augmented = make_recipe("train", size=48, channels=3, flip=False, randaugment=(3, 20))
    a = run_once(plain, encoded)
    b = run_once(augmented, encoded)
    assert b.shape == a.shape == (4, 3, 48, 48)
    assert not np.array_equal(a, b)


def test_normalize_matches_the_formula() -> None:
    recipe = make_recipe("eval", size=4, channels=3, mean=(0.1, 0.2, 0.3), std=(0.5, 0.25, 2.0))
    images = torch.randint(0, 256, (5, 3, 4, 4), dtype=torch.uint8)
    out = normalize(images, recipe)
    mean = torch.tensor(recipe.mean, dtype=torch.float64).view(1, 3, 1, 1)
    std = torch.tensor(recipe.std, dtype=torch.float64).view(1, 3, 1, 1)
    expected = (images.double() / 255.0 - mean) / std
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="C=3"):
        normalize(images[:, :1], recipe)


@pytest.mark.gpu
def test_cuda_pipeline_matches_cpu_eval(fmnist_pngs: list[bytes]) -> None:
    recipe = make_recipe("eval", size=28, channels=1, crop_fraction=1.0)
    gpu = run_once(recipe, fmnist_pngs, device=Device.CUDA)
    np.testing.assert_array_equal(gpu, pil_pixels(fmnist_pngs))
    augmented = make_recipe("train", size=32, channels=3, randaugment=(2, 9))
    train = run_once(augmented, fmnist_pngs, Device.CUDA)
    assert train.shape == (16, 3, 32, 32)


def test_normalize_paths_give_the_same_bits() -> None:
    from preprocessing.normalize import NUMPY_MAX_ELEMENTS

    recipe = make_recipe("train", size=8, channels=3)
    big = torch.randint(0, 256, (1, 3, 1500, 1000), dtype=torch.uint8)
    assert big.numel() > NUMPY_MAX_ELEMENTS
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with_numpy = normalize(big, recipe)
        torch.set_num_threads(4)
        with_torch = normalize(big, recipe)
    finally:
        torch.set_num_threads(threads)
    assert with_numpy.dtype == with_torch.dtype == torch.float32
    assert torch.equal(with_numpy, with_torch)


def test_randaugment_on_grayscale_images_runs_on_one_channel(fmnist_pngs: list[bytes]) -> None:
    """DALI's saturation operator (RandAugment's ``color``) crashes the process on one
    channel; the ``train`` recipe leaves it out there. 3 operations on each of 64 images,
    twice: ``color``, one of 14 operations, would be drawn about 27 times."""
    recipe = make_recipe("train", size=28, channels=1, randaugment=(3, 9))
    plain = run_once(make_recipe(recipe, randaugment=None), fmnist_pngs * 4)
    for seed in (1, 2):
        out = run_once(recipe, fmnist_pngs * 4, seed=seed)
        assert out.shape == (64, 1, 28, 28) and out.dtype == np.uint8
    assert not np.array_equal(out, plain), "RandAugment changed the pixels"


def test_misshapen_images_raise_a_preprocessing_error() -> None:
    from preprocessing import PreprocessingError, PreprocessingInputError

    recipe = make_recipe("eval", size=4, channels=3)
    images = torch.zeros((2, 1, 4, 4), dtype=torch.uint8)
    with pytest.raises(PreprocessingError, match="C=3") as info:
        normalize(images, recipe)
    assert isinstance(info.value, PreprocessingInputError) and isinstance(info.value, ValueError)
