"""The epoch plan: which samples, in which order, in which batch, on which rank.

Pure logic (numpy only), so that every property is testable without a pipeline.

Order
    With ``shuffle`` the epoch's order is a permutation of ``range(N)`` drawn from
    ``numpy.random.default_rng([seed, epoch])``: the same for the same seed and
    epoch on every rank and every run, different from epoch to epoch. Without
    ``shuffle`` it is ``0, 1, ..., N-1``.

Sharding
    The order is cut into *rounds* of ``world_size * batch_size`` samples; in each
    round rank ``r`` takes the ``r``-th slice of ``batch_size``. Every rank thus has
    the same number of batches, and the shards are disjoint. How the last,
    incomplete round is handled is the :class:`LastBatchPolicy`.

Worked example (``N = 10`` samples, ``batch_size = 4``)::

    world_size = 1        batches           samples used   notes
    DROP                  [4, 4]            8              2 dropped (differ by epoch)
    PARTIAL               [4, 4, 2]         10             last batch short
    PAD                   [4, 4, 4]         12             2 repeated (order[0], order[1])

    world_size = 2        rank 0 / rank 1   samples used   notes
    DROP                  [4] / [4]         8              2 dropped
    PARTIAL               [4, 1] / [4, 1]   10             last round split 1 + 1
    PAD                   [4, 4] / [4, 4]   16             6 repeated (wrap around)

In general, with ``R = world_size * batch_size``: DROP gives ``N // R`` full
batches per rank; PARTIAL and PAD give ``ceil(N / R)``. PARTIAL splits the last
round's ``N mod R`` samples as evenly as possible (sizes differ by at most one);
if fewer samples remain than ranks, a rank left without one repeats the epoch's
first samples so that no batch is empty. PAD fills the last round by wrapping
around to the start of the epoch's order, so every batch is full.

Under PARTIAL and PAD every sample is used at least once per epoch across ranks
(exactly once except for the repeats described); under DROP each used sample is
used once and at most ``R - 1`` are left out.

Resume
    A position is ``(epoch, batch)``: :meth:`EpochPlan.batches` with ``start=k``
    yields exactly the batches ``k, k+1, ...`` of that epoch.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator

import numpy as np

from dataplane.errors import ConfigError


class LastBatchPolicy(str, enum.Enum):
    """What to do with the samples that do not fill a last batch (see module docs)."""

    DROP = "drop"
    PARTIAL = "partial"
    PAD = "pad"


#: Seeds are below this bound: the order is drawn from the seed's low 48 bits.
MAX_SEED = 2**48


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """The order, shard and batches of every epoch for one rank.

    Parameters
    ----------
    num_samples : int
        Size ``N`` of the dataset (> 0).
    batch_size : int
        Samples per batch (> 0).
    shuffle : bool
        Permute the order each epoch.
    seed : int
        Seed of the permutation (must be equal on all ranks), in ``0 <= seed <
        2**48`` (:data:`MAX_SEED`): the order uses the seed's low 48 bits, so larger
        seeds are refused rather than silently sharing an order.
    rank, world_size : int
        This rank and the number of ranks (``0 <= rank < world_size``).
    last_batch : LastBatchPolicy
        Handling of the last, incomplete round.
    """

    num_samples: int
    batch_size: int
    shuffle: bool = False
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    last_batch: LastBatchPolicy = LastBatchPolicy.PARTIAL

    def __post_init__(self) -> None:
        if self.num_samples <= 0:
            raise ConfigError(f"num_samples must be positive, got {self.num_samples}")
        if self.batch_size <= 0:
            raise ConfigError(f"batch_size must be positive, got {self.batch_size}")
        if not 0 <= self.seed < MAX_SEED:
            raise ConfigError(f"need 0 <= seed < 2**48, got {self.seed}")
        if self.world_size <= 0 or not 0 <= self.rank < self.world_size:
            raise ConfigError(f"need 0 <= rank < world_size, got {self.rank}, {self.world_size}")
        object.__setattr__(self, "last_batch", LastBatchPolicy(self.last_batch))

    @property
    def round_size(self) -> int:
        """Samples consumed by all ranks per batch step: ``world_size * batch_size``."""
        return self.world_size * self.batch_size

    def __len__(self) -> int:
        """Batches per epoch on this rank (equal on every rank)."""
        if self.last_batch is LastBatchPolicy.DROP:
            return self.num_samples // self.round_size
        return -(-self.num_samples // self.round_size)

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's global order of sample indices (int64, length ``N``)."""
        if not self.shuffle:
            return np.arange(self.num_samples, dtype=np.int64)
        rng = np.random.default_rng([int(self.seed) & 0xFFFFFFFFFFFF, int(epoch)])
        return rng.permutation(self.num_samples).astype(np.int64)

    def batch(self, epoch: int, k: int, order: np.ndarray | None = None) -> np.ndarray:
        """Sample indices of this rank's batch ``k`` of ``epoch``."""
        n_batches = len(self)
        if not 0 <= k < n_batches:
            raise IndexError(f"batch {k} out of range: this epoch has {n_batches} batches")
        if order is None:
            order = self.order(epoch)
        b, w, r = self.batch_size, self.world_size, self.rank
        start = k * self.round_size
        if start + self.round_size <= self.num_samples:
            return order[start + r * b : start + (r + 1) * b]
        # The last, incomplete round (never reached under DROP).
        remaining = self.num_samples - start
        if self.last_batch is LastBatchPolicy.PAD:
            idx = (start + r * b + np.arange(b)) % self.num_samples
            return order[idx]
        base, extra = divmod(remaining, w)
        lo = start + r * base + min(r, extra)
        size = base + (1 if r < extra else 0)
        if size > 0:
            return order[lo : lo + size]
        return order[[(r - remaining) % self.num_samples]]

    def batches(self, epoch: int, start: int = 0) -> Iterator[np.ndarray]:
        """This rank's batches of ``epoch`` from batch ``start`` on (resume)."""
        n_batches = len(self)
        if not 0 <= start <= n_batches:
            raise IndexError(f"start batch {start} out of range 0..{n_batches}")
        order = self.order(epoch)
        for k in range(start, n_batches):
            yield self.batch(epoch, k, order)

    def shard(self, epoch: int) -> np.ndarray:
        """All sample indices of this rank in ``epoch``, batch after batch."""
        parts = list(self.batches(epoch))
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
