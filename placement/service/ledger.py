"""The cluster-wide SSD ledger: bytes on SSD per worker and in total, against the budget.

Three amounts are kept per worker, in bytes:

* ``used`` - bytes of the worker's live SSD files, as it last reported them (each
  file counts its expected size until it grows past it);
* ``reserved`` - bytes of files the service itself placed on SSD for the worker
  (:meth:`ClusterLedger.reserve`, batched decisions) since its last report; each
  counts for one lease life after it was made at most (a worker's next report covers
  its files; a requester that never reports, such as a client, deciding without pause
  holds only its last lease life's reservations);
* ``granted`` - the worker's current *lease*: bytes it may still place on SSD on its
  own, until ``granted_until`` (scheduler clock, seconds).

The service never lends more than is free: ``sum(used + reserved + live grants) <=
capacity`` after every grant. A report replaces the worker's ``used`` and clears its
``reserved`` (its files are in the report now): the ledger is reconciled on every
report. A lease that expires stops counting; a worker that leaves (or dies) is removed
with everything it held. As a safety net, a worker whose last report is older than
``stale_after_s`` (a few lease lives, :meth:`ClusterLedger.expire`) and that holds no
live lease or reservation is forgotten too, so a share can never outlive its worker.

Reports can arrive out of order: a worker that gave up waiting for an answer sends its
next report while the first may still be on its way, or waiting in a handler. Each
report may therefore carry the worker link's *incarnation* (a token drawn when the
link starts) and a sequence number that grows by one per report. A report numbered at
or below the last one applied from the same incarnation is *stale*: it changes nothing
(:meth:`ClusterLedger.report` returns ``False``), so an old usage figure never replaces
a newer one. A new incarnation (a restarted worker at the same address) starts afresh.
Tokens are random, not ordered, so the ledger cannot tell an older incarnation from a
newer one by its token; it *retires* the incarnation of a worker's last applied report
when the worker is removed (:meth:`ClusterLedger.remove`: it left the cluster or died,
which the scheduler sees before a new worker can register at the same address), and a
late report of a retired incarnation is stale too. The last :data:`MAX_RETIRED` retired
incarnations over all addresses are remembered. A report of another incarnation that
is not retired is applied, in arrival order: an incarnation is never retired by
another's report, since a late report of an old process would then lock the live one
out for good. Reports without a number (older workers) are applied in arrival order,
as before.

Worked example (capacity 100, largest lease 30)::

    grant(a, want=30)  -> 30    used a=0  granted a=30        free 70
    grant(b, want=30)  -> 30    granted b=30                  free 40
    report(a, used=25); grant(a, want=30) -> 30   a: 25+30    free 15
    report(b, used=60)  (b's files grew past its lease)       free -45 (over budget)
    grant(b, want=30)  -> 0     b: 60+0; free -15: nothing is lent until files are deleted
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from placement.service.errors import ServiceError

#: Most retired worker incarnations remembered, over all addresses (an address and a
#: token each; a late report of an incarnation older than these is applied as a new one).
MAX_RETIRED = 4096

K = TypeVar("K")


def remember(memory: dict[K, None], key: K, limit: int) -> None:
    """Add ``key`` to ``memory`` as its newest entry (a dict kept in insertion order),
    forgetting the oldest entries beyond ``limit``."""
    memory.pop(key, None)
    memory[key] = None
    while len(memory) > limit:
        del memory[next(iter(memory))]


@dataclass
class WorkerShare:
    """What one worker holds in the ledger (bytes; ``*_until`` and ``last_report`` in
    scheduler seconds; ``incarnation`` and ``seq`` number its last applied report, ``None``
    and 0 when its reports are unnumbered). ``reserved`` is the sum of ``reservations``,
    lapsed ones included until the next reservation or report drops them."""

    used: int = 0
    reserved: int = 0
    #: (lapse time, bytes) of each reservation since the last report, by lapse time
    reservations: list[tuple[float, int]] = field(default_factory=list)
    granted: int = 0
    granted_until: float = -math.inf
    reports: int = 0
    last_report: float = -math.inf
    incarnation: str | None = None
    seq: int = 0

    def live_grant(self, now: float) -> int:
        """The lease still in force at ``now`` (0 once expired)."""
        return self.granted if now < self.granted_until else 0

    def live_reserved(self, now: float | None) -> int:
        """Reservations still counted at ``now`` (all of them when ``now`` is ``None``)."""
        if now is None or not self.reservations or now < self.reservations[0][0]:
            return self.reserved  # none lapsed: the common case, O(1)
        return self.reserved - sum(n for _, n in self.reservations[: self._lapsed(now)])

    def add_reservation(self, size: int, *, now: float, ttl_s: float) -> None:
        """Hold ``size`` bytes until ``now + ttl_s``, dropping reservations lapsed at ``now``.

        Reservations lapsing at the same time (one batch) share an entry, so a client
        holds one entry per batch of its last lease life, not one per file.
        """
        held = self.reservations
        if held and held[0][0] <= now:
            lapsed = self._lapsed(now)
            self.reserved -= sum(n for _, n in held[:lapsed])
            del held[:lapsed]
        until = now + float(ttl_s)
        # with one ttl and a steady clock, every new reservation lapses last: O(1)
        at = len(held) if not held or held[-1][0] <= until else self._lapsed(until)
        if at and held[at - 1][0] == until:
            held[at - 1] = (until, held[at - 1][1] + size)
        else:
            held.insert(at, (until, size))
        self.reserved += size

    def clear_reservations(self) -> None:
        """Drop every reservation (a report covers the files they were made for)."""
        self.reservations.clear()
        self.reserved = 0

    def _lapsed(self, now: float) -> int:
        # a reservation counts while now < its lapse time
        return bisect.bisect_right(self.reservations, now, key=lambda r: r[0])


#: WorkerShare fields left out of :meth:`ClusterLedger.snapshot` (times, tokens and the
#: reservation list behind ``reserved``).
_UNSHOWN = frozenset({"granted_until", "reservations", "last_report", "incarnation"})


def check_report_number(incarnation: Any, seq: Any) -> None:
    """Refuse a malformed report number (see the module docstring): both ``None``, or a
    non-empty ``incarnation`` string and an int ``seq >= 1``."""
    if incarnation is None and seq is None:
        return
    if not isinstance(incarnation, str) or not incarnation:
        raise ServiceError(
            f"incarnation={incarnation!r} must be a non-empty string when seq is given"
        )
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise ServiceError(f"seq={seq!r} must be an int >= 1 when incarnation is given")


def _nbytes(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ServiceError(f"{name}={value!r} must be a non-negative int number of bytes")
    return value


class ClusterLedger:
    """SSD bytes per worker against a cluster-wide capacity (see the module docstring).

    Parameters
    ----------
    capacity_bytes : int
        The SSD budget, in bytes.
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = _nbytes("capacity_bytes", capacity_bytes)
        self._shares: dict[str, WorkerShare] = {}
        # (address, incarnation) of removed workers' last numbered reports, oldest first
        self._retired: dict[tuple[str, str], None] = {}

    def _share(self, worker: str) -> WorkerShare:
        if not isinstance(worker, str) or not worker:
            raise ServiceError(f"worker={worker!r} must be a non-empty address string")
        share = self._shares.get(worker)
        if share is None:
            share = self._shares[worker] = WorkerShare()
        return share

    def applied_seq(self, worker: str, incarnation: str | None) -> int:
        """Number of the last report applied from ``worker``'s ``incarnation`` (0: none, or
        the worker is unknown, or its last applied report came from another incarnation)."""
        share = self._shares.get(worker)
        if share is None or incarnation is None or share.incarnation != incarnation:
            return 0
        return share.seq

    def is_retired(self, worker: str, incarnation: str | None) -> bool:
        """Whether ``incarnation`` of ``worker`` was retired: the worker was removed after
        a report of it was applied."""
        return incarnation is not None and (worker, incarnation) in self._retired

    def is_stale(self, worker: str, *, incarnation: str | None, seq: int | None) -> bool:
        """Whether report ``seq`` of ``incarnation`` was overtaken: a report of the same
        incarnation numbered ``seq`` or later was applied, or the incarnation is retired.
        Unnumbered reports never are."""
        check_report_number(incarnation, seq)
        if seq is None:
            return False
        return seq <= self.applied_seq(worker, incarnation) or self.is_retired(worker, incarnation)

    def report(
        self,
        worker: str,
        used_bytes: int,
        *,
        now: float,
        incarnation: str | None = None,
        seq: int | None = None,
    ) -> bool:
        """``worker`` holds ``used_bytes`` on SSD at ``now`` (scheduler seconds): replaces
        its ``used``, clears ``reserved``.

        ``incarnation`` and ``seq`` number the report (module docstring). Returns
        ``False``, changing nothing, when the report is stale; ``True`` when applied.
        """
        used = _nbytes("used_bytes", used_bytes)
        if self.is_stale(worker, incarnation=incarnation, seq=seq):
            return False
        share = self._share(worker)
        if seq is not None:
            share.incarnation, share.seq = incarnation, seq
        share.used = used
        share.clear_reservations()
        share.reports += 1
        share.last_report = float(now)
        return True

    def grant(
        self, worker: str, want_bytes: int, *, now: float, ttl_s: float, max_bytes: int
    ) -> int:
        """Lend ``worker`` up to ``want_bytes`` (at most ``max_bytes``) until ``now + ttl_s``.

        Replaces the worker's previous lease. Returns the bytes lent (0 when the SSD
        is fully committed).
        """
        want = _nbytes("want_bytes", want_bytes)
        share = self._share(worker)
        share.granted = 0
        amount = max(0, min(want, int(max_bytes), self.free(now)))
        share.granted = amount
        share.granted_until = now + float(ttl_s)
        return amount

    def reserve(self, worker: str, size_bytes: int, *, now: float, ttl_s: float) -> bool:
        """Reserve ``size_bytes`` for a file the service places on SSD for ``worker``, if free.

        The reservation counts until ``worker`` reports or ``ttl_s`` seconds pass, whichever
        comes first; later reservations do not prolong it.
        """
        size = _nbytes("size_bytes", size_bytes)
        if size > self.free(now):
            return False
        self._share(worker).add_reservation(size, now=now, ttl_s=ttl_s)
        return True

    def expire(self, now: float, *, stale_after_s: float = math.inf) -> list[str]:
        """Forget requesters that hold nothing at ``now`` and either never reported or
        last reported more than ``stale_after_s`` seconds before ``now``.

        Returns the workers forgotten although they had reported (stale shares).
        """
        stale = []
        for name, share in list(self._shares.items()):
            if share.live_grant(now) or share.live_reserved(now):
                continue
            if share.reports == 0:
                del self._shares[name]
            elif now - share.last_report > stale_after_s:
                del self._shares[name]
                stale.append(name)
        return stale

    def remove(self, worker: str) -> WorkerShare | None:
        """Forget ``worker`` (it left the cluster or died), retiring the incarnation of its
        last numbered report; returns what it held."""
        share = self._shares.pop(worker, None)
        if share is not None and share.incarnation is not None:
            remember(self._retired, (worker, share.incarnation), MAX_RETIRED)
        return share

    # ------------------------------------------------------------------ totals
    def used(self, now: float | None = None) -> int:
        """Bytes on SSD (reported plus reserved) over all workers; ``now`` drops expired
        reservations."""
        return sum(s.used + s.live_reserved(now) for s in self._shares.values())

    def committed(self, now: float) -> int:
        """Bytes used, reserved or lent (live leases) over all workers."""
        return sum(s.used + s.live_reserved(now) + s.live_grant(now) for s in self._shares.values())

    def free(self, now: float) -> int:
        """Bytes neither used, reserved nor lent (negative when over budget)."""
        return self.capacity - self.committed(now)

    def occupancy(self, now: float | None = None) -> float:
        """Used share of the capacity (1.0 for a zero capacity); may exceed 1."""
        return self.used(now) / self.capacity if self.capacity else 1.0

    def workers(self) -> list[str]:
        return list(self._shares)

    def __contains__(self, worker: object) -> bool:
        return worker in self._shares

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._shares))

    def __len__(self) -> int:
        return len(self._shares)

    def share(self, worker: str) -> WorkerShare | None:
        """What ``worker`` holds, if it is known."""
        return self._shares.get(worker)

    def snapshot(self, now: float) -> dict[str, Any]:
        """Totals and per-worker shares, JSON-ready (bytes)."""
        workers = {}
        for name, s in self._shares.items():
            # field by field rather than asdict(), which would deep-copy every reservation
            row = {f.name: getattr(s, f.name) for f in fields(s) if f.name not in _UNSHOWN}
            row["granted"] = s.live_grant(now)
            row["reserved"] = s.live_reserved(now)
            workers[name] = row
        return {
            "capacity_bytes": self.capacity,
            "used_bytes": self.used(now),
            "committed_bytes": self.committed(now),
            "free_bytes": self.free(now),
            "occupancy": self.occupancy(now),
            "workers": workers,
        }

    def __repr__(self) -> str:
        return f"<ClusterLedger {self.used()}/{self.capacity} SSD bytes, {len(self)} workers>"
