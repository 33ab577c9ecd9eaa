"""The worker-side tier chooser: decides locally, under a lease granted by the scheduler.

A :class:`LeasedChooser` is the :class:`~placement.storage.TierChooser` of a worker's
:class:`~placement.storage.TieredFileStore` when the placement service runs. Its
:meth:`~LeasedChooser.choose` never waits on the network (it is called from the
worker's event loop when Dask spills a key or writes a P2P shard): it predicts the
file's density with the model the scheduler shipped, and puts the file on SSD when

* it holds a **lease** that has not expired,
* the prediction is at or above the lease's **threshold** (the cluster-wide adaptive
  threshold, :class:`~placement.policy.AdaptiveThresholdPolicy`); under
  ``occupancy_basis="after"`` it is taken from the lease's threshold curve at the
  occupancy the file would leave: the cluster's used
  bytes when the lease was granted, plus what this worker placed since, plus the
  file, over the budget (rounded up to the curve's next point, so never more lenient
  than the policy); a lease without a curve carries one threshold for all files, and
* the file's expected size (corrected by earlier runs' history) fits in what is left
  of the lease's **allowance**
  (a dense file that does not fit is remembered, and the next renewal - sent at once -
  asks for a lease large enough for it).

Otherwise the file goes where the **fallback** chooser says (HDD by default). Without
a lease (the service has not answered yet, or it has not answered for a whole lease
life) every file takes the fallback. A chooser that fails for any reason also takes
the fallback: a decision never raises and never blocks.

:meth:`~LeasedChooser.begin_sync` / :meth:`~LeasedChooser.accept` bracket one renewal
(see :class:`~placement.service.link.ServiceLink`). Bytes placed after a renewal was
sent count against both the old lease and the new one, so the worker never spends
more than the scheduler lent: the lease expires on the worker's clock ``ttl`` seconds
after the *request* was sent, before the scheduler's copy of it does.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placement.errors import PlacementTypeError
from placement.service.errors import ServiceConfigError
from placement.service.predictor import Predictor
from placement.storage.chooser import FixedTier, TierChooser
from placement.storage.request import FileRequest
from placement.tier import Tier

logger = logging.getLogger(__name__)

#: Decision latencies kept (a ring buffer), for p50/p99.
LATENCY_SAMPLES = 8192
#: Predictions kept for the scheduler's threshold window between two renewals.
MAX_OBSERVATIONS = 2048


@dataclass(frozen=True)
class Lease:
    """What the scheduler lent a worker.

    Parameters
    ----------
    allowance_bytes : int
        Bytes the worker may place on SSD under this lease.
    threshold : float
        Lowest predicted log10 density admitted to SSD (``-inf``: any).
    expires_at : float
        Worker monotonic time (seconds) after which the lease is void.
    model_version : int
        Version of the predictor the scheduler holds.
    curve : tuple of float
        Thresholds at occupancies ``k / (len(curve) - 1)`` (empty: use ``threshold``).
    used_bytes : int
        Bytes the cluster held on SSD when the lease was granted.
    capacity_bytes : int
        The cluster's SSD budget, in bytes.
    """

    allowance_bytes: int
    threshold: float
    expires_at: float
    model_version: int
    curve: tuple[float, ...] = ()
    used_bytes: int = 0
    capacity_bytes: int = 0

    def threshold_for(self, spent_bytes: int, size_bytes: int) -> float:
        """Threshold of a file of ``size_bytes`` when this worker has placed
        ``spent_bytes`` on SSD since the lease was asked for."""
        if not self.curve or self.capacity_bytes <= 0:
            return self.threshold
        occupancy = (self.used_bytes + spent_bytes + size_bytes) / self.capacity_bytes
        last = len(self.curve) - 1
        return self.curve[min(max(math.ceil(occupancy * last), 0), last)]


@dataclass(frozen=True)
class SyncTicket:
    """What a renewal request carries from the chooser (see :meth:`LeasedChooser.begin_sync`).

    ``shortfall_bytes`` is the largest file that was dense enough for SSD but did not
    fit in the allowance since the last renewal (0 if none): the next lease should
    cover it. ``first_sent`` holds, for each observation, the number of the report that
    first carried it: a failed renewal's observations go out again with the next one,
    and the scheduler skips those it already counted (0 for all when unnumbered).
    """

    sent_at: float
    spent_before: int
    observations: list[tuple[float, int]]
    counts: dict[str, int]
    shortfall_bytes: int = 0
    first_sent: list[int] = field(default_factory=list)


class LeasedChooser:
    """Chooses SSD or HDD locally under a lease (see the module docstring). Thread-safe.

    Parameters
    ----------
    fallback : TierChooser, optional
        Decides when there is no valid lease or a decision fails (``FixedTier(HDD)``).
    unknown_size_bytes : int
        Bytes reserved for a file whose size neither its ``expected_size_bytes`` nor the
        history of earlier runs tells.
    on_low : callable, optional
        Called (from any thread, at most once per lease) when half the allowance is
        spent or a dense file did not fit, so the link can renew early. Must be
        thread-safe and quick.
    clock : callable
        Monotonic clock, in seconds.
    """

    def __init__(
        self,
        *,
        fallback: TierChooser | None = None,
        unknown_size_bytes: int = 4 * 2**20,
        on_low: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        fallback = fallback if fallback is not None else FixedTier(Tier.HDD)
        if not callable(getattr(fallback, "choose", None)):
            raise PlacementTypeError(f"fallback={fallback!r} has no choose(request) method")
        if not isinstance(unknown_size_bytes, int) or unknown_size_bytes < 0:
            raise ServiceConfigError(
                f"unknown_size_bytes={unknown_size_bytes!r} must be an int >= 0"
            )
        self.fallback = fallback
        self.unknown_size_bytes = unknown_size_bytes
        self.on_low = on_low
        self.clock = clock
        self._lock = threading.Lock()
        self._lease: Lease | None = None
        self._predictor = Predictor()
        self._spent = 0
        self._shortfall = 0
        self._low_signalled = False
        # (log10 density, size, number of the report that first carried it; 0: none yet)
        self._observations: deque[tuple[float, int, int]] = deque(maxlen=MAX_OBSERVATIONS)
        self._counts = {"ssd": 0, "hdd": 0, "fallback": 0, "errors": 0}
        self._latency = np.zeros(LATENCY_SAMPLES, dtype=np.int64)
        self._n_latency = 0
        self._error_logged = False

    # ------------------------------------------------------------------ deciding
    def estimate(self, request: FileRequest) -> int:
        """Bytes to reserve for ``request``: its expected size corrected by the history of
        earlier runs (:meth:`Predictor.expected_size`), else ``unknown_size_bytes``."""
        with self._lock:
            predictor = self._predictor
        return self.estimate_with(predictor, request)

    def estimate_with(self, predictor: Predictor, request: FileRequest) -> int:
        """Bytes to reserve for ``request`` by ``predictor`` (:meth:`estimate` uses the
        chooser's own); for callers that remember estimates per predictor."""
        size = predictor.expected_size(request)
        return size if size is not None else self.unknown_size_bytes

    def choose(self, request: FileRequest) -> Tier:
        """Tier of a new file; never raises, never blocks on the network."""
        start = time.perf_counter_ns()
        try:
            return self._choose(request)
        except Exception:
            with self._lock:
                self._counts["errors"] += 1
                first = not self._error_logged
                self._error_logged = True
            if first:
                logger.exception(
                    "placement decision failed; using %r from now on when it does", self.fallback
                )
            return self._fallback(request)
        finally:
            elapsed = time.perf_counter_ns() - start
            with self._lock:  # choose runs on worker and executor threads at once
                self._latency[self._n_latency % LATENCY_SAMPLES] = elapsed
                self._n_latency += 1

    def _fallback(self, request: FileRequest) -> Tier:
        try:
            tier = Tier(self.fallback.choose(request))
        except Exception:  # noqa: BLE001
            tier = Tier.HDD
        with self._lock:
            self._counts["fallback"] += 1
            self._counts[tier.value] += 1
        return tier

    def _choose(self, request: FileRequest) -> Tier:
        with self._lock:
            lease = self._lease
            predictor = self._predictor
        if lease is None or self.clock() >= lease.expires_at:
            return self._fallback(request)
        size = self.estimate_with(predictor, request)
        pred = float(predictor.predict(request, size))
        signal = False
        with self._lock:
            lease = self._lease  # a renewal may have landed meanwhile
            tier = Tier.HDD
            if (
                lease is not None
                and pred > -math.inf  # NaN (no prediction) and -inf go to HDD, +inf passes
                and pred >= lease.threshold_for(self._spent, size)
            ):
                if self._spent + size <= lease.allowance_bytes:
                    tier = Tier.SSD
                    self._spent += size
                else:  # dense enough, but the lease is too small: ask for more
                    self._shortfall = max(self._shortfall, size)
                if (
                    not self._low_signalled
                    and (self._shortfall or self._spent * 2 >= lease.allowance_bytes)
                    and self.on_low is not None
                ):
                    self._low_signalled = signal = True
            self._counts[tier.value] += 1
            if math.isfinite(pred):
                self._observations.append((pred, size, 0))
        if signal and self.on_low is not None:
            try:
                self.on_low()
            except Exception:
                logger.debug("early lease renewal signal failed", exc_info=True)
        return tier

    # ------------------------------------------------------------------ renewals
    def begin_sync(self, seq: int = 0) -> SyncTicket:
        """Start a renewal: take the predictions seen since the last one and note the bytes
        spent. ``seq`` numbers the report this renewal sends (0: unnumbered); predictions
        not sent before are marked as first sent with it."""
        with self._lock:
            taken = [(p, s, first or seq) for p, s, first in self._observations]
            self._observations.clear()
            shortfall, self._shortfall = self._shortfall, 0
            return SyncTicket(
                self.clock(),
                self._spent,
                [(p, s) for p, s, _ in taken],
                dict(self._counts),
                shortfall,
                [first for _, _, first in taken],
            )

    def accept(
        self,
        ticket: SyncTicket,
        *,
        allowance_bytes: int,
        threshold: float,
        ttl_s: float,
        model_version: int,
        curve: Sequence[float] | None = None,
        used_bytes: int = 0,
        capacity_bytes: int = 0,
    ) -> Lease:
        """Install the lease granted in answer to ``ticket``.

        Bytes placed on SSD after ``ticket`` was taken are not in the usage the
        scheduler saw, so they stay counted against the new allowance (and are added
        to ``used_bytes`` when a file's threshold is read off ``curve``).
        """
        lease = Lease(
            allowance_bytes=max(int(allowance_bytes), 0),
            threshold=float(threshold),
            expires_at=ticket.sent_at + float(ttl_s),
            model_version=int(model_version),
            curve=tuple(float(t) for t in curve) if curve else (),
            used_bytes=max(int(used_bytes), 0),
            capacity_bytes=max(int(capacity_bytes), 0),
        )
        with self._lock:
            self._spent = max(self._spent - ticket.spent_before, 0)
            self._lease = lease
            self._low_signalled = False
        return lease

    def restore(self, ticket: SyncTicket) -> None:
        """A renewal failed: put its predictions back for the next one (as room allows)."""
        with self._lock:
            self._shortfall = max(self._shortfall, ticket.shortfall_bytes)
            room = MAX_OBSERVATIONS - len(self._observations)
            if room > 0:
                first = ticket.first_sent or [0] * len(ticket.observations)
                kept = [(p, s, f) for (p, s), f in zip(ticket.observations, first, strict=True)]
                self._observations.extendleft(reversed(kept[-room:]))

    def install_predictor(self, predictor: Predictor) -> None:
        """Use ``predictor`` for decisions from now on."""
        if not isinstance(predictor, Predictor):
            raise PlacementTypeError(
                f"predictor must be a Predictor, got {type(predictor).__name__}"
            )
        with self._lock:
            self._predictor = predictor

    # ------------------------------------------------------------------ inspection
    @property
    def lease(self) -> Lease | None:
        with self._lock:
            return self._lease

    @property
    def predictor(self) -> Predictor:
        with self._lock:
            return self._predictor

    def has_valid_lease(self) -> bool:
        """Whether a lease is held and has not expired."""
        lease = self.lease
        return lease is not None and self.clock() < lease.expires_at

    def latencies_ns(self) -> np.ndarray:
        """The last (up to 8192) decision latencies, in nanoseconds."""
        n = min(self._n_latency, LATENCY_SAMPLES)
        return self._latency[:n].copy()

    def stats(self) -> dict[str, Any]:
        """Decision counts, spent bytes, lease and latency percentiles (microseconds)."""
        lat = self.latencies_ns()
        with self._lock:
            lease = self._lease
            out: dict[str, Any] = {
                "decisions": dict(self._counts),
                "spent_bytes": self._spent,
                "model_version": self._predictor.version,
                "predictor": self._predictor.kind,
            }
        now = self.clock()
        out["lease"] = (
            None
            if lease is None
            else {
                "allowance_bytes": lease.allowance_bytes,
                "threshold": lease.threshold,
                "expires_in_s": lease.expires_at - now,
                "valid": now < lease.expires_at,
            }
        )
        out["latency_us"] = (
            {
                "n": int(self._n_latency),
                "p50": float(np.percentile(lat, 50)) / 1e3,
                "p99": float(np.percentile(lat, 99)) / 1e3,
                "max": float(lat.max()) / 1e3,
            }
            if lat.size
            else {"n": 0}
        )
        return out

    def __repr__(self) -> str:
        return f"<LeasedChooser lease={self.lease} predictor={self.predictor!r}>"
