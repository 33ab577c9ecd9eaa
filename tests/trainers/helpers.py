"""Test helpers: real Fashion-MNIST tensors, a minimal resumable in-memory loader, run records.

The loader stands in for ``dataplane.Loader`` where a test is about the
trainer, not the loader: it has the same contract (``set_epoch``, ``len``,
``state_dict``/``load_state_dict`` that resume mid-epoch, sharding by rank).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from trainers.run_record import EpochRecord, RunRecord


def read_idx(path: Path) -> np.ndarray:
    """Read a (gzipped) IDX file into a numpy array (big-endian header, uint8 data)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fmnist(root: Path, split: str, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) uint8 and labels (N,) of split ``train`` or ``t10k``."""
    images = read_idx(root / f"{split}-images-idx3-ubyte.gz")
    labels = read_idx(root / f"{split}-labels-idx1-ubyte.gz")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    return images, labels


class ArrayLoader:
    """Batches of normalised float32 NCHW tensors from uint8 arrays.

    Epoch ``e`` uses the permutation of ``default_rng((seed, e))`` and flips a
    sample horizontally when ``augment`` and a coin seeded by ``(seed, e,
    batch)`` says so. With a process group (or ``rank``/``world_size``) each
    rank takes a disjoint, equal-sized shard; incomplete batches are dropped.
    """

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        *,
        batch_size: int = 64,
        shuffle: bool = True,
        augment: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if dist.is_available() and dist.is_initialized() and rank is None:
            rank, world_size = dist.get_rank(), dist.get_world_size()
        self.rank = rank or 0
        self.world_size = world_size or 1
        self.images = images
        self.labels = labels
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.augment = augment
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self.per_rank = len(images) // self.world_size
        self.epochs_seen: list[int] = []

    def __len__(self) -> int:
        return self.per_rank // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.epochs_seen.append(self.epoch)
        n = len(self.images)
        order = (
            np.random.default_rng((self.seed, self.epoch)).permutation(n)
            if self.shuffle
            else np.arange(n)
        )
        shard = order[self.rank * self.per_rank : (self.rank + 1) * self.per_rank]
        while self.position < len(self):
            k = self.position
            idx = np.sort(shard[k * self.batch_size : (k + 1) * self.batch_size])
            x = torch.from_numpy(self.images[idx].astype(np.float32) / 255.0).unsqueeze(1)
            if self.augment:
                coin = np.random.default_rng((self.seed, self.epoch, k)).random(len(idx)) < 0.5
                flip = torch.from_numpy(coin)
                x[flip] = x[flip].flip(-1)
            x = (x - 0.5) / 0.5
            y = torch.from_numpy(self.labels[idx].astype(np.int64))
            self.position += 1
            yield x, y


class InterruptingLoader(ArrayLoader):
    """An :class:`ArrayLoader` that raises ``KeyboardInterrupt`` when asked for one batch.

    ``interrupt_at = (epoch, k)``: raised instead of yielding batch ``k`` of
    ``epoch`` (as Ctrl-C arriving while the trainer waits for data would).
    """

    def __init__(self, *args: Any, interrupt_at: tuple[int, int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.interrupt_at: tuple[int, int] | None = interrupt_at

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for batch in super().__iter__():
            if self.interrupt_at == (self.epoch, self.position - 1):
                self.position -= 1  # the batch was never delivered
                self.interrupt_at = None
                raise KeyboardInterrupt
            yield batch


def run_record(
    name: str, target: float | None, accuracies: list[float], **fields: Any
) -> RunRecord:
    """A run record with one epoch per accuracy, 10 s each."""
    rec = RunRecord(
        name=name,
        schedule=fields.pop("schedule", name),
        model=fields.pop("model", "SmallCNN"),
        epochs_planned=fields.pop("epochs_planned", len(accuracies) or 2),
        target_accuracy=target,
        world_size=1,
        device=fields.pop("device", "cpu"),
        switch_rule={},
        status=fields.pop("status", "completed"),
        extra=fields.pop("extra", {"batch_size": 64, "lr": 0.05, "variants": None}),
    )
    for i, acc in enumerate(accuracies):
        t = 10.0 * (i + 1)
        rec.add_epoch(
            EpochRecord(i, "fresh", 1, 64, t, 1, 1, 0, 0, t, 0.5, 6.4, 1.0, acc, 1.0, acc, 0.05, t)
        )
    return rec
