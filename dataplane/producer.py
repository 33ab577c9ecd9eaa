"""The seam where a batch's samples are produced.

The loader turns its epoch plan into a sequence of :class:`BatchRequest` and asks
a :class:`BatchProducer` for the augmented uint8 images of each, in order. The
default producer runs the recipe's DALI pipeline on freshly read bytes
(:class:`dataplane.dali_producer.DaliBatchProducer`); with ``cache=`` the loader
uses :class:`dataplane.cached_producer.CachedBatchProducer`, which serves
augmented samples from the cache and asks a fresh producer for the misses.
Another producer plugs in through a :data:`ProducerFactory` given to the loader.

Lifecycle
---------
1. ``factory(context, requests)`` creates a producer for one pass over
   ``requests`` (one epoch, or the rest of one after a resume).
2. Iterating it yields one :class:`ProducedBatch` per request, **in order**,
   with ``position`` equal to the request's. It may work ahead by at most
   ``context.prefetch`` batches.
3. ``close()`` releases threads and memory; it is called when the pass ends or
   the consumer stops early, and must be idempotent.

A producer may reuse the memory of a batch's ``images`` once the consumer asks
for the next batch (the cache-backed producer serves views of a small ring of
preallocated buffers); the loader's iterator normalizes each batch into a new
tensor before that.

Failure contract: a sample that cannot be read or decoded raises
:class:`dataplane.errors.DataError` (naming index and file) under
``OnCorrupt.RAISE``; under ``OnCorrupt.SKIP`` it is left out of its batch and
listed in :attr:`ProducedBatch.skipped`. A batch that would be left empty holds
other samples of the pass instead (the built-in producers take the next valid
ones, see :func:`following_indices`). The loader's iterator refuses an empty
batch: it raises ``DataError`` naming the skipped samples, or
:class:`dataplane.errors.PipelineError` when neither the batch nor an earlier
batch of the pass lists a skipped sample (a producer that yields no sample).
Other failures raise :class:`dataplane.errors.DataplaneError` subclasses.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Container, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

    from dataplane.sources import Source
    from preprocessing import Device, Recipe


class OnCorrupt(str, enum.Enum):
    """What to do with a sample that cannot be read or decoded."""

    RAISE = "raise"
    SKIP = "skip"


@dataclasses.dataclass(frozen=True)
class BatchRequest:
    """One planned batch.

    Attributes
    ----------
    position : int
        Batch number within the epoch.
    indices : numpy.ndarray
        Source indices of the batch's samples (int64), in order.
    """

    position: int
    indices: np.ndarray


@dataclasses.dataclass(frozen=True)
class SkippedSample:
    """A sample left out under ``OnCorrupt.SKIP``."""

    index: int
    path: str
    reason: str


@dataclasses.dataclass(frozen=True)
class ProducedBatch:
    """Augmented images of one request.

    Attributes
    ----------
    position : int
        The request's position.
    images : torch.Tensor
        uint8, ``(n, channels, size, size)``, on the target device.
    indices : numpy.ndarray
        Source index of each row of ``images`` (the request's indices minus
        skipped samples).
    skipped : tuple of SkippedSample
        Samples of the request that were skipped.
    shared : bool
        ``images`` views a buffer the producer reuses once the consumer asks for
        the next batch (the cache's ring on the CPU): a consumer that hands the
        tensor on copies it first. False: ``images`` belongs to the consumer.
    """

    position: int
    images: torch.Tensor
    indices: np.ndarray
    skipped: tuple[SkippedSample, ...] = ()
    shared: bool = False


@dataclasses.dataclass(frozen=True)
class ProducerContext:
    """Everything a producer needs for one pass.

    Attributes
    ----------
    source : Source
        Where encoded bytes come from.
    recipe : Recipe
        The augmentation to apply.
    device : Device
        Where the pipeline runs; images are returned on this device.
    device_id : int or None
        CUDA device index (None on CPU).
    batch_size : int
        Largest batch, in samples.
    num_threads : int
        CPU worker threads the producer may use.
    prefetch : int
        Batches the producer may prepare ahead of the consumer.
    seed : int
        Seed of this pass's augmentation randomness.
    epoch : int
        The epoch being produced.
    on_corrupt : OnCorrupt
        Corrupt-sample policy.
    state : dict or None
        Scratch space kept by the loader across its passes, where a producer may
        keep expensive objects (e.g. a built pipeline) for the next pass.
    checked : numpy.ndarray or None
        One flag per source index, set once the sample passed the structural
        check of :mod:`dataplane.validate`; shared across passes of a loader so
        each sample is checked once. ``None``: check every time.
    """

    source: Source
    recipe: Recipe
    device: Device
    device_id: int | None
    batch_size: int
    num_threads: int
    prefetch: int
    seed: int
    epoch: int
    on_corrupt: OnCorrupt
    checked: np.ndarray | None = None
    state: dict[Any, Any] | None = None


class BatchProducer(Protocol):
    """Produces the batches of one pass, in request order (see module docs)."""

    def __iter__(self) -> Iterator[ProducedBatch]: ...

    def close(self) -> None: ...


ProducerFactory = Callable[[ProducerContext, Sequence[BatchRequest]], BatchProducer]


def following_indices(
    requests: Sequence[BatchRequest], k: int, exclude: Container[int] = ()
) -> Iterator[int]:
    """Source indices of the requests after request ``k``, in planned order.

    The candidates to stand in for request ``k`` when every one of its samples was
    skipped: the indices of requests ``k + 1``, ``k + 2``, ... wrapping around to the
    first, request ``k`` itself excluded; each index at most once, none in
    ``exclude``. ``exclude`` is consulted as each index comes up, so a caller may
    add to it while iterating (a candidate found corrupt). The caller stops when it
    has enough.
    """
    n = len(requests)
    seen: set[int] = set()
    for step in range(1, n):
        for i in requests[(k + step) % n].indices.tolist():
            if i in exclude or i in seen:
                continue
            seen.add(i)
            yield i
