"""What happened in an epoch: counts reported by the loader at epoch end."""

from __future__ import annotations

import dataclasses

from dataplane.producer import SkippedSample


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
    """

    epoch: int
    batches: int = 0
    samples: int = 0
    skipped: list[SkippedSample] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    complete: bool = False

    @property
    def num_skipped(self) -> int:
        """Number of samples skipped."""
        return len(self.skipped)

    @property
    def samples_per_second(self) -> float:
        """Throughput of the pass, in samples per second."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0
