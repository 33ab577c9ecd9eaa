"""The ``torch`` schedule's loader: a plain :class:`torch.utils.data.DataLoader` with PIL
transforms.

This is the baseline users come from: worker processes (``num_workers`` = the
cores available) open each image with PIL and apply the usual transforms,
written here in plain PIL and torch (torchvision does not import beside the
pinned torch, so nothing here needs it):

``train``
    random resized crop (torchvision's algorithm: area fraction uniform in
    ``area``, log-uniform aspect ratio in ``aspect_ratio``, 10 attempts, then a
    centre crop), bilinear resize to ``size`` x ``size``, horizontal flip with
    probability 0.5, to tensor, normalize.
``eval``
    resize the shorter side to ``round(size / crop_fraction)``, centre crop
    ``size``, to tensor, normalize.

The defaults match the data plane's built-in ``train``/``eval`` recipes (area
0.08-1, aspect 3/4-4/3, crop fraction 0.875; mean/std 0.5 for grayscale and
ImageNet's for RGB, as fractions of 255), so the ``torch`` and ``fresh``
schedules see the same distribution of images.

The loader follows :class:`trainers.protocols.EpochLoader`: ``set_epoch``,
``len``, and ``state_dict``/``load_state_dict`` that resume mid-epoch. The
random draws of sample ``i`` in epoch ``e`` come from a generator seeded by
``(seed, e, i)``, so a resumed epoch sees exactly the same images. With a
process group, each rank takes a disjoint, equal-sized shard of the epoch's
order (the tail that does not divide evenly is dropped).
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image, UnidentifiedImageError

from dataplane.sources import warn_empty_classes
from trainers.errors import TrainerConfigError, TrainerDataError

__all__ = ["IMAGE_EXTENSIONS", "FolderDataset", "TorchBaselineLoader", "Transform"]

#: File suffixes read as images (lower case).
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".webp"})
_GRAY_MEAN, _GRAY_STD = (0.5,), (0.5,)
_RGB_MEAN, _RGB_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def available_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Transform:
    """PIL transforms of one sample (see the module docstring).

    Parameters
    ----------
    size : int
        Output side, in pixels.
    channels : {1, 3}
        Output channels (images are converted to ``L`` or ``RGB``).
    train : bool
        Random resized crop + flip (``True``) or resize + centre crop.
    area : tuple of float
        Range of the crop's area as a fraction of the image.
    aspect_ratio : tuple of float
        Range of the crop's width / height.
    flip : bool
        Random horizontal flip (train only).
    crop_fraction : float
        Eval: the centre crop's share of the resized shorter side.
    mean, std : tuple of float, optional
        Per-channel statistics as fractions of 255 (defaults by channels).
    """

    size: int
    channels: int
    train: bool = True
    area: tuple[float, float] = (0.08, 1.0)
    aspect_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    crop_fraction: float = 0.875
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise TrainerConfigError(f"size must be a positive number of pixels, got {self.size!r}")
        if self.channels not in (1, 3):
            raise TrainerConfigError(f"channels must be 1 or 3, got {self.channels!r}")
        if not 0 < self.area[0] <= self.area[1] <= 1:
            raise TrainerConfigError(
                f"area must be (lo, hi) with 0 < lo <= hi <= 1, got {self.area!r}"
            )
        if not 0 < self.aspect_ratio[0] <= self.aspect_ratio[1]:
            raise TrainerConfigError(
                f"aspect_ratio must be (lo, hi) with 0 < lo <= hi, got {self.aspect_ratio!r}"
            )
        if not 0 < self.crop_fraction <= 1:
            raise TrainerConfigError(f"crop_fraction must be in (0, 1], got {self.crop_fraction!r}")
        gray = self.channels == 1
        mean = self.mean if self.mean is not None else (_GRAY_MEAN if gray else _RGB_MEAN)
        std = self.std if self.std is not None else (_GRAY_STD if gray else _RGB_STD)
        if len(mean) != self.channels or len(std) != self.channels or min(std) <= 0:
            raise TrainerConfigError(
                f"mean and std need {self.channels} value(s) each (std > 0), got {mean!r}, {std!r}"
            )
        object.__setattr__(self, "mean", tuple(float(m) for m in mean))
        object.__setattr__(self, "std", tuple(float(s) for s in std))

    def _crop_box(self, width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
        area = width * height
        log_lo, log_hi = math.log(self.aspect_ratio[0]), math.log(self.aspect_ratio[1])
        for _ in range(10):
            target = area * rng.uniform(*self.area)
            ratio = math.exp(rng.uniform(log_lo, log_hi))
            w = round(math.sqrt(target * ratio))
            h = round(math.sqrt(target / ratio))
            if 0 < w <= width and 0 < h <= height:
                top = rng.randint(0, height - h)
                left = rng.randint(0, width - w)
                return left, top, left + w, top + h
        in_ratio = width / height  # fallback: the largest centre crop with a ratio in range
        if in_ratio < self.aspect_ratio[0]:
            w, h = width, round(width / self.aspect_ratio[0])
        elif in_ratio > self.aspect_ratio[1]:
            h, w = height, round(height * self.aspect_ratio[1])
        else:
            w, h = width, height
        left, top = (width - w) // 2, (height - h) // 2
        return left, top, left + w, top + h

    def __call__(self, image: Image.Image, rng: random.Random) -> torch.Tensor:
        """Transform one PIL image into a normalized float32 CHW tensor."""
        image = image.convert("L" if self.channels == 1 else "RGB")
        if self.train:
            box = self._crop_box(image.width, image.height, rng)
            image = image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)
            if self.flip and rng.random() < 0.5:
                image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        else:
            shorter = max(self.size, round(self.size / self.crop_fraction))
            scale = shorter / min(image.width, image.height)
            w, h = (
                max(self.size, round(image.width * scale)),
                max(self.size, round(image.height * scale)),
            )
            image = image.resize((w, h), Image.Resampling.BILINEAR)
            left, top = (w - self.size) // 2, (h - self.size) // 2
            image = image.crop((left, top, left + self.size, top + self.size))
        array = np.asarray(image, dtype=np.uint8)
        if array.ndim == 2:
            array = array[:, :, None]
        tensor = torch.from_numpy(array.copy()).permute(2, 0, 1).to(torch.float32).div_(255.0)
        mean = torch.tensor(self.mean).view(-1, 1, 1)
        std = torch.tensor(self.std).view(-1, 1, 1)
        return tensor.sub_(mean).div_(std)


class FolderDataset(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """An image folder (one sub-folder per class, sorted by name -> labels 0..C-1).

    Items are addressed by ``(index, epoch)`` keys so that the random draws of
    a sample depend only on ``(seed, epoch, index)``, whichever worker
    transforms it. A class folder without images stays a class, with a
    :class:`dataplane.sources.EmptyClassWarning` naming it (as the data plane's
    image folder does, so that both give the same labels).
    """

    def __init__(
        self, root: str | os.PathLike[str], transform: Transform, *, seed: int = 0
    ) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise TrainerDataError(
                f"dataset folder {self.root} does not exist; create it with "
                "`dataplane ingest fmnist OUT` or point --data at an image folder"
            )
        classes = sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )
        if not classes:
            raise TrainerDataError(
                f"{self.root} has no class sub-folders; "
                "an image folder needs one sub-folder per class"
            )
        samples: list[tuple[str, int]] = []
        for label, name in enumerate(classes):
            for path in sorted((self.root / name).iterdir()):
                if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file():
                    samples.append((str(path), label))
        if not samples:
            raise TrainerDataError(
                f"{self.root} holds no images ({', '.join(sorted(IMAGE_EXTENSIONS))}) in "
                f"{len(classes)} class folders"
            )
        labels = (label for _, label in samples)
        warn_empty_classes(self.root, classes, labels, extensions=IMAGE_EXTENSIONS)
        self.classes = classes
        self.samples = samples
        self.transform = transform
        self.seed = seed

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int]:  # type: ignore[override]
        index, epoch = key
        path, label = self.samples[index]
        try:
            with Image.open(path) as image:
                image.load()
                rng = random.Random(f"{self.seed}:{epoch}:{index}")
                return self.transform(image, rng), label
        except (OSError, UnidentifiedImageError, ValueError) as exc:
            raise TrainerDataError(
                f"cannot read image {index} ({path}): {exc}; fix or remove the file"
            ) from exc


@dataclass(frozen=True)
class _Unreadable:
    """What a worker hands back instead of a batch holding an unreadable image."""

    message: str


class _Guarded(torch.utils.data.Dataset[Any]):
    """A :class:`FolderDataset` whose read errors come back as :class:`_Unreadable` items.

    An exception raised in a DataLoader worker reaches the main process with
    the worker's traceback pasted into its message; handing the message back
    as data lets :meth:`TorchBaselineLoader.__iter__` raise it as it was.
    """

    def __init__(self, dataset: FolderDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        try:
            return self.dataset[key]
        except TrainerDataError as exc:
            return _Unreadable(str(exc))


def _collate(items: list[Any]) -> Any:
    """Stack a batch, or pass on the first :class:`_Unreadable` item of it."""
    for item in items:
        if isinstance(item, _Unreadable):
            return item
    return torch.utils.data.default_collate(items)


class _BatchKeys(torch.utils.data.Sampler[list[tuple[int, int]]]):
    """Batches of ``(index, epoch)`` keys; the loader swaps ``batches`` before each pass."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int]]] = []

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _infer_shape(samples: Sequence[tuple[str, int]]) -> tuple[int, int]:
    """(size, channels) as ``dataplane.Loader`` infers them, so both loaders of a comparison
    serve the same shape (the median shorter side of a few probed images, with a warning
    when sizes differ; 3 channels if any probed image is in colour)."""
    from dataplane.shape import infer_image_shape
    from dataplane.sources import FileListSource

    source = FileListSource(samples, check_files=False)
    return infer_image_shape(source, np.asarray([label for _, label in samples]))


class TorchBaselineLoader:
    """A torch DataLoader over an image folder, with the EpochLoader interface.

    Parameters
    ----------
    root : path
        Image folder (one sub-folder per class).
    batch_size : int
        Samples per batch (per rank).
    train : bool
        Train transforms (random resized crop, flip) or eval transforms.
    size, channels : int, optional
        Output side in pixels and channels; default from the images, as
        ``dataplane.Loader`` infers them (median shorter side of a few probed images;
        1 for grayscale, 3 if any of them is in colour).
    shuffle : bool
        A new order every epoch from ``(seed, epoch)``; default ``train``.
    seed : int
        Seed of the order and the augmentation.
    drop_last : bool
        Drop the last incomplete batch.
    num_workers : int, optional
        Worker processes; default: the cores available (0 loads in-process).
    rank, world_size : int, optional
        This process's shard; default from ``torch.distributed``.
    transform_options : dict, optional
        Extra :class:`Transform` fields (``area``, ``aspect_ratio``, ``flip``,
        ``crop_fraction``, ``mean``, ``std``).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        batch_size: int = 256,
        train: bool = True,
        size: int | None = None,
        channels: int | None = None,
        shuffle: bool | None = None,
        seed: int = 0,
        drop_last: bool = False,
        num_workers: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        transform_options: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise TrainerConfigError(f"batch_size must be a positive int, got {batch_size!r}")
        if num_workers is None:
            num_workers = available_cores()
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise TrainerConfigError(f"num_workers must be an int >= 0, got {num_workers!r}")
        if rank is None and world_size is None and dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        self.rank = 0 if rank is None else rank
        self.world_size = 1 if world_size is None else world_size
        if not 0 <= self.rank < self.world_size:
            raise TrainerConfigError(
                f"rank {self.rank} is not in 0..world_size-1 ({self.world_size})"
            )
        probe = FolderDataset(root, Transform(size=1, channels=1), seed=seed)
        if size is None or channels is None:
            inferred_size, inferred_channels = _infer_shape(probe.samples)
            size = inferred_size if size is None else size
            channels = inferred_channels if channels is None else channels
        self.transform = Transform(
            size=size, channels=channels, train=train, **(transform_options or {})
        )
        probe.transform = self.transform
        self.dataset = probe
        self.batch_size = batch_size
        self.shuffle = train if shuffle is None else shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.per_rank = (
            len(self.dataset) // self.world_size if self.world_size > 1 else len(self.dataset)
        )
        self.epoch = 0
        self.position = 0
        self._keys = _BatchKeys()
        self._loader: torch.utils.data.DataLoader[Any] | None = None

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        if self.drop_last:
            return self.per_rank // self.batch_size
        return math.ceil(self.per_rank / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Select epoch ``epoch`` and rewind to its start."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise TrainerConfigError(f"epoch must be a non-negative int, got {epoch!r}")
        self.epoch = epoch
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        """Epoch and batches already yielded in it (plus settings checked on load)."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "num_samples": len(self.dataset),
            "batch_size": self.batch_size,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next pass yields the remaining batches."""
        for key in ("seed", "num_samples", "batch_size", "rank", "world_size"):
            mine = self.state_dict()[key]
            if state.get(key) != mine:
                raise TrainerConfigError(
                    f"cannot resume: the loader state has {key}={state.get(key)!r} but this loader "
                    f"has {key}={mine!r}; build it with the same settings"
                )
        position = int(state["position"])
        if not 0 <= position <= len(self):
            raise TrainerConfigError(f"loader state position {position} is outside 0..{len(self)}")
        self.epoch = int(state["epoch"])
        self.position = position

    def _order(self) -> Sequence[int]:
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.epoch)).permutation(n)
        else:
            order = np.arange(n)
        if self.world_size > 1:
            order = order[: self.per_rank * self.world_size][self.rank :: self.world_size]
        return order.tolist()

    def _dataloader(self) -> torch.utils.data.DataLoader[Any]:
        if self._loader is None:
            self._loader = torch.utils.data.DataLoader(
                _Guarded(self.dataset),
                batch_sampler=self._keys,
                collate_fn=_collate,
                num_workers=self.num_workers,
                persistent_workers=self.num_workers > 0,
                prefetch_factor=4 if self.num_workers > 0 else None,
            )
        return self._loader

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self._order()
        batches = [
            [(i, self.epoch) for i in order[k * self.batch_size : (k + 1) * self.batch_size]]
            for k in range(len(self))
        ]
        self._keys.batches = batches[self.position :]
        epoch = self.epoch
        for batch in self._dataloader():
            if isinstance(batch, _Unreadable):
                raise TrainerDataError(batch.message)
            images, labels = batch
            self.position += 1
            yield images, labels.to(torch.int64)
        if self.epoch == epoch:
            self.epoch, self.position = epoch + 1, 0
