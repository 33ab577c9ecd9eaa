"""What :func:`trainers.fit` needs from a loader.

Any iterable that yields ``(images, labels)`` batches (``images`` a float32
NCHW tensor, ``labels`` an int64 tensor of class indices) and has the four
methods below works: :class:`dataplane.Loader` (fresh or cached),
:class:`trainers.torch_baseline.TorchBaselineLoader`, or your own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["REQUIRED_LOADER_METHODS", "EpochLoader"]

#: Methods :func:`trainers.fit` calls on a training loader.
REQUIRED_LOADER_METHODS: tuple[str, ...] = (
    "__iter__",
    "__len__",
    "set_epoch",
    "state_dict",
    "load_state_dict",
)


@runtime_checkable
class EpochLoader(Protocol):
    """A resumable, epoch-aware batch loader.

    ``set_epoch(e)`` selects epoch ``e`` (its shuffle order and, for a cached
    loader, its variant) and rewinds to its start. ``state_dict()`` taken
    after ``k`` batches of an epoch and passed to ``load_state_dict`` on a
    fresh loader makes its next iteration yield exactly the remaining
    batches of that epoch. ``len()`` is the number of batches per epoch.
    """

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]: ...

    def __len__(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
