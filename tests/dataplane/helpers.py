"""Helpers of the data-plane tests (identity of images by their pixels)."""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np


def pixel_key(pixels: np.ndarray) -> str:
    """Identity of an image by its pixels."""
    return hashlib.sha1(np.ascontiguousarray(pixels, dtype=np.uint8).tobytes()).hexdigest()


def decoded_keys(encoded: Iterable[bytes]) -> Counter[str]:
    """Multiset of pixel keys of encoded grayscale images (decoded with PIL)."""
    from PIL import Image

    keys: Counter[str] = Counter()
    for data in encoded:
        with Image.open(io.BytesIO(data)) as image:
            keys[pixel_key(np.asarray(image.convert("L"))[None])] += 1
    return keys


def identity_recipe():  # type: ignore[no-untyped-def]
    """eval recipe that returns images unchanged: 28 px, 1 channel, /255 only."""
    from preprocessing import make_recipe

    return make_recipe("eval", size=28, channels=1, mean=(0.0,), std=(1.0,), crop_fraction=1.0)


def batch_keys(images) -> list[str]:  # type: ignore[no-untyped-def]
    """Pixel keys of a batch yielded with :func:`identity_recipe`."""
    pixels = (images.cpu().numpy() * 255.0).round().astype(np.uint8)
    return [pixel_key(p) for p in pixels]


def tiny_folder(root: Path, per_class: int = 6, side: int = 8) -> Path:
    """An image folder of two classes of small grayscale PNGs."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (side, side), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


def folder(root: Path, files: dict[str, bytes]) -> Path:
    """An image folder from ``{"class/name.ext": bytes}``."""
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def cpu_loader(data, *, batch_size: int, **kwargs):  # type: ignore[no-untyped-def]
    """A CPU ``Loader`` on one DALI thread, ``eval`` recipe unless given."""
    from dataplane import Loader

    kwargs.setdefault("recipe", "eval")
    return Loader(data, batch_size=batch_size, device="cpu", num_threads=1, **kwargs)
