"""What happened in an epoch: counts reported by the loader at epoch end."""

from __future__ import annotations

import dataclasses

from dataplane.producer import SkippedSample


@dataclasses.dataclass
class CacheStats:
    """What the augmented-sample cache did in one pass (counts in samples).

    Attributes
    ----------
    variant : int
        The variant the pass served (``epoch % variants``).
    hits : int
        Samples served from the cache.
    misses : int
        Samples not in the cache (absent, or failing their checksum), produced
        fresh.
    corrupt : int
        Of the misses, records found but failing their check (never served;
        dropped and refilled).
    fresh : int
        Samples produced by the fresh path (DALI); may exceed ``misses`` when
        a sample planned as a miss was filled meanwhile, or be below it when
        corrupt source samples were skipped.
    fill_queued : int
        Fresh samples handed to the cache filler (queued or written).
    fill_dropped : int
        Fresh samples not offered to the cache: background queue full, cache
        full (``max_bytes``), failed, read-only or ``fill="off"``.
    filled : int
        Records the filler committed during the pass (the pass waits for its
        queued writes at its end, so this counts the pass's own fills).
    state : str
        The cache's state at the end of the pass: ``"admitting"``, ``"full"``,
        ``"failed"`` or ``"read-only"``.
    """

    variant: int
    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    fresh: int = 0
    fill_queued: int = 0
    fill_dropped: int = 0
    filled: int = 0
    state: str = "admitting"

    @property
    def hit_rate(self) -> float:
        """Fraction of looked-up samples served from the cache (0 when none)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


@dataclasses.dataclass
class EpochStats:
    """Counts of one (possibly resumed) pass over an epoch.

    Attributes
    ----------
    epoch : int
        The epoch.
    batches : int
        Batches yielded in this pass.
    samples : int
        Samples yielded in this pass (padding repeats included).
    skipped : list of SkippedSample
        Corrupt or unreadable samples left out (``on_corrupt="skip"``).
    seconds : float
        Wall time of the pass, in seconds.
    complete : bool
        Whether the pass reached the end of the epoch.
    cache : CacheStats or None
        What the cache did (``None`` for a loader without ``cache=``).
    """

    epoch: int
    batches: int = 0
    samples: int = 0
    skipped: list[SkippedSample] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    complete: bool = False
    cache: CacheStats | None = None

    @property
    def num_skipped(self) -> int:
        """Number of samples skipped."""
        return len(self.skipped)

    @property
    def samples_per_second(self) -> float:
        """Throughput of the pass, in samples per second."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0
