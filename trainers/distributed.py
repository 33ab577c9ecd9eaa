"""The little :func:`trainers.fit` needs from ``torch.distributed``.

When a default process group is initialised (``torchrun --nproc_per_node N``
followed by ``torch.distributed.init_process_group``: ``gloo`` on CPU,
``nccl`` on GPUs), the model is wrapped in
:class:`~torch.nn.parallel.DistributedDataParallel`, validation counts are
summed over ranks, and only rank 0 writes files. Without a process group
everything is a no-op on a single process.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["DistContext", "unwrap"]


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a :class:`DistributedDataParallel` wrapper (or ``model`` itself)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


@dataclass(frozen=True)
class DistContext:
    """Rank and world size of this process.

    Attributes
    ----------
    rank : int
        This process's rank (0 without a process group).
    world_size : int
        Number of processes (1 without a process group).
    backend : str | None
        The process group's backend (``"gloo"``, ``"nccl"``) or ``None``.
    """

    rank: int = 0
    world_size: int = 1
    backend: str | None = None

    @classmethod
    def current(cls) -> DistContext:
        """The context of the default process group, or a single-process one."""
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), str(dist.get_backend()))
        return cls()

    @property
    def enabled(self) -> bool:
        """Whether a process group with more than one process is active."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Whether this process writes files (rank 0)."""
        return self.rank == 0

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        """Wrap ``model`` (already on ``device``) in DDP when a process group is active."""
        if not self.enabled:
            return model
        if device.type == "cuda":
            return DistributedDataParallel(model, device_ids=[device.index or 0])
        return DistributedDataParallel(model)

    def sum(self, values: list[float], device: torch.device) -> list[float]:
        """Sum ``values`` element-wise over all ranks (identity on one process)."""
        if not self.enabled:
            return list(values)
        reduce_device = device if self.backend == "nccl" else torch.device("cpu")
        t = torch.tensor(values, dtype=torch.float64, device=reduce_device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return [float(v) for v in t.cpu().tolist()]

    def broadcast_flag(self, flag: bool, device: torch.device) -> bool:
        """``True`` on every rank if ``flag`` is true on any rank."""
        return self.sum([1.0 if flag else 0.0], device)[0] > 0
