"""One pass over an epoch: produced uint8 batches -> normalized tensors + labels.

:class:`LoaderIterator` is what ``iter(loader)`` returns. It pulls
:class:`~dataplane.producer.ProducedBatch` from a producer, normalizes the images
on the target device (or, with ``normalize=False``, hands the uint8 images on,
copied once only when they view a producer's reused buffer), attaches labels,
advances the loader's cursor after each batch, and reports the epoch's counts at
the end. It stops cleanly when :meth:`close` is called or when it is
garbage-collected (a ``for`` loop left with ``break``): the producer's threads are
released.

A loader has one live iterator at a time: a new ``iter(loader)``, ``set_epoch``
or ``load_state_dict`` closes the current one with :meth:`supersede`, after which
its ``__next__`` raises ``RuntimeError`` (an exhausted iterator, or one closed by
the user or by ``loader.close()``, raises ``StopIteration``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from dataplane.errors import CorruptSampleWarning, DataError, PipelineError, warn_user
from dataplane.producer import BatchProducer, ProducedBatch
from dataplane.stats import EpochStats

if TYPE_CHECKING:
    import torch

    from preprocessing import Recipe

logger = logging.getLogger(__name__)

SUPERSEDED_MESSAGE = (
    "this Loader iterator was closed by a new iter(loader) or set_epoch() (or "
    "load_state_dict()); a Loader has one live iterator at a time: finish or close() a "
    "pass before starting the next, call set_epoch() between passes, and use a second "
    "Loader for a second consumer"
)


@dataclasses.dataclass
class Cursor:
    """Where the loader stands: the epoch, and the next batch to yield in it."""

    epoch: int = 0
    position: int = 0


class LoaderIterator:
    """Iterator over the remaining batches of one epoch (see module docs).

    Parameters
    ----------
    producer : BatchProducer
        Yields the epoch's batches in order.
    cursor : Cursor
        The loader's position, advanced after each batch.
    recipe : Recipe
        Supplies mean/std for normalization.
    labels : numpy.ndarray
        Label of every source index (int64).
    device : torch.device
        Where images and labels are returned.
    on_end : callable
        Called with the :class:`EpochStats` when the epoch is complete.
    normalize : bool
        Return float32 normalized images (True) or the uint8 images as produced.
    pin_memory : bool
        Return CPU images and labels in page-locked (pinned) memory, for fast
        asynchronous copies to a CUDA device (needs one).
    """

    def __init__(
        self,
        producer: BatchProducer,
        *,
        cursor: Cursor,
        recipe: Recipe,
        labels: np.ndarray,
        device: torch.device,
        on_end: Callable[[EpochStats], None],
        normalize: bool = True,
        pin_memory: bool = False,
    ) -> None:
        self._producer = producer
        self._batches: Iterator[ProducedBatch] | None = iter(producer)
        self._cursor = cursor
        self._recipe = recipe
        self._labels = labels
        self._device = device
        self._on_end = on_end
        self._normalize = normalize
        self._pin_memory = pin_memory
        self._stats = EpochStats(epoch=cursor.epoch)
        self._started: float | None = None
        self._superseded = False

    def __iter__(self) -> LoaderIterator:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        from preprocessing import normalize

        if self._batches is None:
            if self._superseded:
                raise RuntimeError(SUPERSEDED_MESSAGE)
            raise StopIteration
        if self._started is None:
            self._started = time.perf_counter()
        try:
            produced = next(self._batches)
        except StopIteration:
            self._finish()
            raise
        except BaseException:
            self.close()
            raise
        if produced.indices.size == 0:
            self.close()
            raise self._empty_batch_error(produced)
        if self._normalize:
            images = normalize(produced.images, self._recipe)
        elif produced.shared:  # the producer reuses this buffer: one copy, with numpy on
            # the host (torch's CPU copy would start an OpenMP team; see normalize)
            images = (
                torch.from_numpy(produced.images.numpy().copy())
                if produced.images.device.type == "cpu"
                else produced.images.clone()
            )
        else:
            images = produced.images
        labels = torch.from_numpy(self._labels[produced.indices])
        if self._device.type != "cpu":
            labels = labels.to(self._device, non_blocking=True)
        elif self._pin_memory:
            images, labels = images.pin_memory(), labels.pin_memory()
        self._stats.batches += 1
        self._stats.samples += int(images.shape[0])
        self._stats.skipped.extend(produced.skipped)
        self._cursor.position = produced.position + 1
        return images, labels

    def _empty_batch_error(self, produced: ProducedBatch) -> Exception:
        """The error for a batch without samples (a training step would give NaN)."""
        skipped = list(produced.skipped) or self._stats.skipped[-3:]
        where = f"batch {produced.position} of epoch {self._stats.epoch}"
        if not skipped:
            return PipelineError(
                f"the producer yielded {where} without any sample; a producer must yield at "
                "least one sample per batch"
            )
        shown = ", ".join(f"{s.index} ({s.path}: {s.reason})" for s in skipped[:3])
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        return DataError(
            f"every sample of {where} is corrupt or unreadable ({shown}{more}) and no valid "
            "sample of the pass is left to stand in for them; fix or remove the files",
            index=skipped[0].index,
            path=skipped[0].path,
        )

    def _finish(self) -> None:
        stats = self._stats
        stats.seconds = time.perf_counter() - (self._started or time.perf_counter())
        stats.complete = True
        self.close()
        if stats.skipped:
            shown = ", ".join(f"{s.index} ({s.path})" for s in stats.skipped[:3])
            more = f" and {stats.num_skipped - 3} more" if stats.num_skipped > 3 else ""
            message = (
                f"skipped {stats.num_skipped} corrupt or unreadable sample(s) in epoch "
                f"{stats.epoch}: {shown}{more}; see loader.last_epoch_stats.skipped"
            )
            # Once, as a warning at the user's loop; the log has it at DEBUG only (with no
            # logging configured, a WARNING record would be printed a second time).
            logger.debug("%s", message)
            warn_user(message, CorruptSampleWarning)
        self._on_end(stats)

    @property
    def closed(self) -> bool:
        """Whether the pass is over: exhausted, closed or superseded."""
        return self._batches is None

    def supersede(self) -> None:
        """Close on behalf of the loader, which starts another pass: a later
        ``__next__`` raises ``RuntimeError`` (no-op once finished or closed)."""
        if self._batches is not None:
            self._superseded = True
            self.close()

    def close(self) -> None:
        """Stop: release the producer (and its threads). Idempotent."""
        batches, self._batches = self._batches, None
        if batches is not None:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
            self._producer.close()

    def __del__(self) -> None:
        self.close()
