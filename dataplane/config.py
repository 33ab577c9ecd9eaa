"""The loader's configuration, validated at construction.

Every option is checked for type and value here, before any pipeline runs; a
bad one raises :class:`~dataplane.errors.ConfigError` naming the option, the
value and the fix.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from dataplane.errors import ConfigError
from dataplane.plan import MAX_SEED, LastBatchPolicy
from dataplane.producer import OnCorrupt, ProducerFactory


def default_num_threads() -> int:
    """CPU cores this process may run on (``len(os.sched_getaffinity(0))``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def _int(name: str, value: Any, *, minimum: int, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, not {type(value).__name__} {value!r}; {hint}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}; {hint}")
    return int(value)


def _enum(name: str, enum_type: Any, value: Any) -> Any:
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(value.lower() if isinstance(value, str) else value)
    except (ValueError, AttributeError):
        allowed = ", ".join(repr(m.value) for m in enum_type)
        raise ConfigError(
            f"{name}={value!r} is not valid; use one of {allowed} (or {enum_type.__name__}.*)"
        ) from None


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """Validated options of a :class:`~dataplane.Loader` (see its docstring)."""

    batch_size: int
    shuffle: bool
    seed: int
    last_batch: LastBatchPolicy
    rank: int
    world_size: int
    num_threads: int
    prefetch: int
    on_corrupt: OnCorrupt
    producer: ProducerFactory | None
    normalize: bool = True

    @classmethod
    def create(
        cls,
        *,
        batch_size: Any,
        shuffle: Any,
        seed: Any,
        last_batch: Any,
        rank: Any,
        world_size: Any,
        num_threads: Any,
        prefetch: Any,
        on_corrupt: Any,
        producer: Any,
        normalize: Any = True,
    ) -> LoaderConfig:
        """Validate raw options; resolve defaults (threads, distributed rank)."""
        batch_size = _int("batch_size", batch_size, minimum=1, hint="e.g. batch_size=256")
        if not isinstance(shuffle, bool):
            raise ConfigError(f"shuffle must be True or False, not {shuffle!r}")
        seed = _int("seed", seed, minimum=0, hint="use the same non-negative seed on every rank")
        if seed >= MAX_SEED:
            raise ConfigError(
                f"seed must be < 2**48 ({MAX_SEED}), got {seed}; the epoch order uses the "
                f"seed's low 48 bits, so pass a seed in 0..2**48-1, e.g. seed % 2**48 (the "
                "same on every rank)"
            )
        last_batch = _enum("last_batch", LastBatchPolicy, last_batch)
        on_corrupt = _enum("on_corrupt", OnCorrupt, on_corrupt)
        if num_threads is None:
            num_threads = default_num_threads()
        num_threads = _int(
            "num_threads", num_threads, minimum=1, hint="or None for the available cores"
        )
        prefetch = _int("prefetch", prefetch, minimum=1, hint="batches prepared ahead, e.g. 2")
        rank, world_size = resolve_shard(rank, world_size)
        if producer is not None and not callable(producer):
            raise ConfigError(
                f"producer must be a factory callable (context, requests) -> BatchProducer, "
                f"not {producer!r}"
            )
        if not isinstance(normalize, bool):
            raise ConfigError(
                f"normalize must be True (float32 normalized images) or False (uint8 images), "
                f"not {normalize!r}"
            )
        return cls(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            last_batch=last_batch,
            rank=rank,
            world_size=world_size,
            num_threads=num_threads,
            prefetch=prefetch,
            on_corrupt=on_corrupt,
            producer=producer,
            normalize=normalize,
        )


def resolve_shard(rank: Any, world_size: Any) -> tuple[int, int]:
    """This process's ``(rank, world_size)``.

    Explicit values win; both ``None`` means: from ``torch.distributed`` when a
    process group is initialised, else ``(0, 1)``.

    Raises
    ------
    ConfigError
        If only one of the two is given, or ``not 0 <= rank < world_size``.
    """
    if rank is None and world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
        return 0, 1
    if rank is None or world_size is None:
        raise ConfigError(
            "give both rank= and world_size= (or neither, to take them from "
            f"torch.distributed); got rank={rank!r}, world_size={world_size!r}"
        )
    world_size = _int("world_size", world_size, minimum=1, hint="the number of processes")
    rank = _int("rank", rank, minimum=0, hint="this process's index, 0..world_size-1")
    if rank >= world_size:
        raise ConfigError(f"rank={rank} must be < world_size={world_size} (ranks count from 0)")
    return rank, world_size
