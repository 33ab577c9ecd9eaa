"""The loader's configuration, validated at construction.

Every option is checked for type and value here, before any pipeline runs; a
bad one raises :class:`~dataplane.errors.ConfigError` naming the option, the
value and the fix.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Mapping
from typing import Any, TypeGuard

from dataplane.errors import ConfigError
from dataplane.plan import MAX_SEED, LastBatchPolicy
from dataplane.producer import OnCorrupt, ProducerFactory


def default_num_threads() -> int:
    """CPU cores this process may run on (``len(os.sched_getaffinity(0))``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def is_integral(value: Any) -> TypeGuard[numbers.Integral]:
    """True for a Python or numpy integer (:class:`numbers.Integral`), False for a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int(name: str, value: Any, *, minimum: int, hint: str) -> int:
    if not is_integral(value):
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


#: Options of ``torch.utils.data.DataLoader`` without an equivalent: torch's default value (given
#: explicitly it has no effect and is accepted) and what to do instead.
TORCH_ONLY_OPTIONS: dict[str, tuple[Any, str]] = {
    "sampler": (
        None,
        "the order comes from shuffle= and seed=, and this process's shard from rank= and "
        "world_size= (taken from torch.distributed when it is initialised); call "
        "loader.set_epoch(epoch) as with a DistributedSampler",
    ),
    "batch_sampler": (
        None,
        "batches are formed from batch_size=, shuffle= and drop_last= (or last_batch=)",
    ),
    "collate_fn": (
        None,
        "batches already come as (images, labels) tensors: post-process them in the training "
        "loop, or put per-sample transforms in a preprocessing recipe (recipe=)",
    ),
    "worker_init_fn": (
        None,
        "samples are decoded by DALI threads of this process, which run no Python: do "
        "per-process set-up before building the Loader",
    ),
    "generator": (
        None,
        "pass seed= (an int, the same on every rank): the order is a function of (seed, epoch)",
    ),
    "timeout": (
        0,
        "batches come from DALI threads of this process and there is no per-batch timeout: "
        "leave it out",
    ),
    "multiprocessing_context": (
        None,
        "samples are decoded by DALI threads of this process, not by worker processes: leave it "
        "out and set num_threads= (or num_workers=)",
    ),
    "in_order": (True, "batches always come in the epoch's order: leave it out"),
    "pin_memory_device": (
        "",
        "pin_memory=True pins for the current CUDA device; for CUDA tensors pass device='cuda'",
    ),
}


def _is_torch_default(value: Any, default: Any) -> bool:
    if default is None or isinstance(default, bool):
        return value is default
    return type(value) in (type(default), float) and bool(value == default)


def check_torch_options(options: Mapping[str, Any]) -> None:
    """Refuse ``DataLoader`` options that have no equivalent, naming what to use instead.

    Each option of :data:`TORCH_ONLY_OPTIONS` is accepted at torch's default value (it has
    no effect) and refused otherwise.

    Raises
    ------
    TypeError
        For a name that is no option of the Loader nor of torch's ``DataLoader``, as Python
        does for an unexpected keyword argument.
    ConfigError
        For a torch-only option at another value than torch's default.
    """
    for name in options:
        if name not in TORCH_ONLY_OPTIONS:
            raise TypeError(f"Loader.__init__() got an unexpected keyword argument {name!r}")
    for name, value in options.items():
        default, instead = TORCH_ONLY_OPTIONS[name]
        if not _is_torch_default(value, default):
            shown = repr(value) if len(repr(value)) <= 60 else f"a {type(value).__name__}"
            raise ConfigError(
                f"{name}= of torch's DataLoader has no equivalent in dataplane.Loader (got "
                f"{shown}); {instead}"
            )


def _last_batch(last_batch: Any, drop_last: Any) -> LastBatchPolicy:
    """``last_batch``, or torch's ``drop_last`` (True: DROP, False: PARTIAL); default PARTIAL."""
    if drop_last is not None and not isinstance(drop_last, bool):
        raise ConfigError(
            f"drop_last must be True, False or None, not {drop_last!r} (drop_last=True is "
            "last_batch='drop')"
        )
    if last_batch is None:
        if drop_last is None:
            return LastBatchPolicy.PARTIAL
        return LastBatchPolicy.DROP if drop_last else LastBatchPolicy.PARTIAL
    policy: LastBatchPolicy = _enum("last_batch", LastBatchPolicy, last_batch)
    if drop_last is not None and drop_last != (policy is LastBatchPolicy.DROP):
        raise ConfigError(
            f"drop_last={drop_last} conflicts with last_batch={policy.value!r}; give only one "
            "(drop_last=True is last_batch='drop', drop_last=False is last_batch='partial')"
        )
    return policy


def _num_threads(num_threads: Any, num_workers: Any) -> int:
    """``num_threads``, or torch's ``num_workers`` (0 -> 1), or the available cores."""
    hint = "or None for the available cores"
    if num_workers is not None:
        workers = _int(
            "num_workers",
            num_workers,
            minimum=0,
            hint="it sets the DALI threads of this process (0 means 1 thread)",
        )
        from_workers = max(1, workers)
        if num_threads is not None:
            threads = _int("num_threads", num_threads, minimum=1, hint=hint)
            if threads != from_workers:
                raise ConfigError(
                    f"num_workers={workers} conflicts with num_threads={threads}; give only "
                    "one (num_workers=n is num_threads=max(1, n))"
                )
        return from_workers
    if num_threads is None:
        return default_num_threads()
    return _int("num_threads", num_threads, minimum=1, hint=hint)


def _prefetch(prefetch: Any, prefetch_factor: Any) -> int:
    """``prefetch``, or torch's ``prefetch_factor``; default 2."""
    hint = "batches prepared ahead, e.g. 2"
    if prefetch_factor is None:
        return 2 if prefetch is None else _int("prefetch", prefetch, minimum=1, hint=hint)
    factor = _int("prefetch_factor", prefetch_factor, minimum=1, hint=hint)
    if prefetch is not None and _int("prefetch", prefetch, minimum=1, hint=hint) != factor:
        raise ConfigError(
            f"prefetch_factor={factor} conflicts with prefetch={prefetch}; give only one "
            "(prefetch_factor=n is prefetch=n)"
        )
    return factor


def _bool(name: str, value: Any, meaning: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, not {value!r}; {meaning}")
    return value


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """Validated options of a :class:`~dataplane.Loader` (see its docstring).

    torch ``DataLoader`` options are resolved here: ``drop_last`` into ``last_batch``,
    ``num_workers`` into ``num_threads``, ``prefetch_factor`` into ``prefetch``;
    ``pin_memory`` is kept, ``persistent_workers`` only checked.

    Build it with :meth:`create`, as :class:`~dataplane.Loader` does: the class's own
    constructor takes values already checked and resolved, and checks nothing again.
    """

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
    pin_memory: bool = False

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
        drop_last: Any = None,
        num_workers: Any = None,
        prefetch_factor: Any = None,
        pin_memory: Any = False,
        persistent_workers: Any = False,
        torch_options: Mapping[str, Any] | None = None,
    ) -> LoaderConfig:
        """Validate raw options; resolve defaults (threads, distributed rank) and the
        torch ``DataLoader`` options (``torch_options``: the other keyword arguments)."""
        check_torch_options(torch_options or {})
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
        last_batch = _last_batch(last_batch, drop_last)
        on_corrupt = _enum("on_corrupt", OnCorrupt, on_corrupt)
        num_threads = _num_threads(num_threads, num_workers)
        prefetch = _prefetch(prefetch, prefetch_factor)
        pin_memory = _bool(
            "pin_memory", pin_memory, "True pins the CPU batches when a CUDA device is present"
        )
        _bool(
            "persistent_workers",
            persistent_workers,
            "it has no effect: the DALI pipelines already persist from pass to pass",
        )
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
            pin_memory=pin_memory,
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
