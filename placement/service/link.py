"""A worker's link to the placement service on the scheduler: renews its lease.

:class:`ServiceLink` runs on the worker's event loop. Every ``sync_interval_s``
(sooner when the :class:`~placement.service.lease.LeasedChooser` has spent half its
allowance) it sends the scheduler one ``placement_sync`` message carrying

* the bytes its live SSD files hold (each file counts at least its expected size),
  and the bytes on each tier - the ledger is reconciled from this on every renewal;
* the predictions (log10 density, size) of the files placed since the last renewal,
  which feed the cluster-wide adaptive threshold;
* the largest dense file its lease was too small for, if any (``want_bytes``);
* its decision counters and store counters (what the scheduler records per worker);
* the model version it holds,
* the link's incarnation (a random token) and the report's number, one more than the
  last; and, for each prediction, the number of the report that first carried it, so
  that the scheduler refuses a report overtaken by a later one and counts each
  prediction once (see :mod:`placement.service.ledger`),

and installs the answer: a new lease (allowance, threshold, life) and, when the
scheduler holds another model version than the worker, the scheduler's model.

What happens on failure
-----------------------
* **Scheduler slow or unreachable**: an answer that takes longer than
  ``sync_timeout_s`` counts as a failure. Decisions go on locally under the current
  lease until it expires (``placement.service.lease-ttl``), then every new file goes
  to the fallback tier (HDD). Tasks never wait on the service. The first failure is
  logged as a warning, the recovery at info level.
* **Scheduler back**: the next renewal reports the worker's real SSD usage, so the
  ledger is corrected at once, and a fresh lease resumes SSD placement.
* **Scheduler without the service** (it answers that it has no ``placement_sync``
  handler: started without ``--preload placement.dask``, or the service failed to
  start there): as unreachable, with one warning per outage that says so. Renewals back
  off: the wait doubles from ``placement.service.sync-interval`` up to
  ``placement.service.max-backoff`` (30 s), so the scheduler, which logs every
  message it has no handler for, is not flooded; the first answer of a service brings
  the normal interval back.
* **A bad model payload**: the worker keeps its current model and says why, once per
  model version; it reports the version (``bad_model_version``) so that the scheduler
  does not ship it again until a newer one exists.
* **A malformed answer, or any other error of a renewal** (usage, model, reply):
  counts as a failed renewal (``last_error`` says why); the renewal loop logs an
  unexpected error once and goes on, so only :meth:`ServiceLink.stop` ends it.
* **Leases shorter than the renewal interval**: an answer whose lease life is not
  longer than ``placement.service.sync-interval``, or that arrives after its lease
  expired (which then does not count as a renewal), logs one warning naming both keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from placement.errors import PlacementTypeError
from placement.service.config import (
    LEASE_TTL_KEY,
    MAX_BACKOFF_KEY,
    SYNC_INTERVAL_KEY,
    LinkConfig,
    ServiceConfig,
)
from placement.service.errors import ServiceConfigError, ServiceError, ServiceUnavailable
from placement.service.lease import LeasedChooser, SyncTicket
from placement.service.predictor import Predictor
from placement.storage.store import TempFile, TieredFileStore
from placement.tier import Tier

logger = logging.getLogger(__name__)

SYNC_HANDLER = "placement_sync"
#: Round-trip times kept, for p50/p99.
RTT_SAMPLES = 4096
#: Distinct unexpected renewal-loop errors logged with their traceback.
MAX_LOGGED_ERRORS = 32


class ServiceLink:
    """Keeps a worker's :class:`LeasedChooser` supplied with leases and models.

    Parameters
    ----------
    chooser : LeasedChooser
        The chooser of the worker's store.
    store : TieredFileStore
        The worker's store (its live files are the usage reported).
    rpc : object
        Has an awaitable ``placement_sync(**message)`` method: the worker's
        ``worker.scheduler`` (Dask's pooled RPC, which uses the cluster's TLS
        ``Security`` when it has one), or a stand-in in tests.
    address : str
        The worker's address (its key in the ledger).
    config : LinkConfig, optional
        Renewal interval, answer timeout, size of unknown files.
    clock : callable
        Monotonic clock, in seconds.
    """

    def __init__(
        self,
        chooser: LeasedChooser,
        store: TieredFileStore,
        rpc: Any,
        address: str,
        *,
        config: LinkConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(chooser, LeasedChooser):
            raise PlacementTypeError(
                f"chooser must be a LeasedChooser, got {type(chooser).__name__}"
            )
        if not isinstance(address, str) or not address:
            raise ServiceConfigError(f"address={address!r} must be the worker's address")
        self.chooser = chooser
        self.store = store
        self.rpc = rpc
        self.address = address
        self.config = config or LinkConfig()
        self.clock = clock
        #: Random token naming this link in its reports: a restarted worker at the same
        #: address numbers its reports afresh.
        self.incarnation = secrets.token_hex(8)
        #: Number of the last report built (each renewal's report gets the next one).
        self.seq = 0
        self.syncs = 0
        self.failures = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None
        #: Answers in a row saying the scheduler runs no placement service.
        self.no_service_answers = 0
        self.model_errors = 0
        self.bad_model_version: int | None = None
        self._warned: set[str] = set()
        self._logged_errors: set[str] = set()
        self._rtt: deque[float] = deque(maxlen=RTT_SAMPLES)
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: Reservation of each live SSD file, with the predictor that estimated it.
        self._estimates: dict[TempFile, tuple[Predictor, int]] = {}

    # ------------------------------------------------------------------ one renewal
    def usage(self) -> dict[str, int]:
        """Bytes of live files now: committed on SSD (at least their expected size) and per tier.

        Each SSD file's reservation (:meth:`LeasedChooser.estimate`) is remembered with the
        predictor that made it, so a renewal estimates only the files that are new since the
        last one (or all of them once after a new model): the history lookups of a renewal
        grow with the files created, not with every file still alive.
        """
        committed = 0
        by_tier = {Tier.SSD: 0, Tier.HDD: 0}
        live = self.store.live_files()
        predictor = self.chooser.predictor
        known = self._estimates
        estimates: dict[TempFile, tuple[Predictor, int]] = {}
        for handle in live:
            current = handle.stats.current_bytes
            by_tier[handle.tier] += current
            if handle.tier is Tier.SSD:
                entry = known.get(handle)
                if entry is None or entry[0] is not predictor:
                    entry = (predictor, self.chooser.estimate_with(predictor, handle.request))
                estimates[handle] = entry
                committed += max(current, entry[1])
        self._estimates = estimates  # deleted files and files now on HDD are forgotten
        return {
            "ssd_committed_bytes": committed,
            "ssd_bytes": by_tier[Tier.SSD],
            "hdd_bytes": by_tier[Tier.HDD],
            "live_files": len(live),
        }

    def _message(self, ticket: SyncTicket) -> dict[str, Any]:
        usage = self.usage()
        message: dict[str, Any] = {
            "worker": self.address,
            "used_bytes": usage["ssd_committed_bytes"],
            "observations": [[p, s] for p, s in ticket.observations],
            "observation_seqs": ticket.first_sent,
            "incarnation": self.incarnation,
            "seq": self.seq,
            "want_bytes": ticket.shortfall_bytes or None,
            "model_version": self.chooser.predictor.version,
            "counters": {
                **{f"decisions_{k}": v for k, v in ticket.counts.items()},
                "ssd_bytes": usage["ssd_bytes"],
                "hdd_bytes": usage["hdd_bytes"],
                "live_files": usage["live_files"],
                "store_fallbacks": self.store.fallbacks,
                "orphans_removed": self.store.orphans_removed,
                "rows_dropped": self.store.rows_dropped,
                # rows a log writer discarded while its disk refused them (LogWriter.rows_lost)
                "log_rows_lost": getattr(self.store.sink, "rows_lost", 0),
                "link_failures": self.failures,
            },
        }
        if self.bad_model_version is not None:  # absent: none (older schedulers lack it)
            message["bad_model_version"] = self.bad_model_version
        return message

    async def sync_once(self) -> bool:
        """Renew the lease once. Returns whether a lease still valid came back in time;
        never raises (except cancellation)."""
        self.seq += 1
        ticket = self.chooser.begin_sync(self.seq)
        started = time.perf_counter()
        try:
            message = self._message(ticket)
            handler = getattr(self.rpc, SYNC_HANDLER)
            reply = await asyncio.wait_for(handler(**message), timeout=self.config.sync_timeout_s)
            if reply is None:  # what Dask answers for an op it has no handler for
                raise ServiceUnavailable(
                    f"the scheduler runs no placement service (it has no {SYNC_HANDLER!r} "
                    "handler): it was started without `--preload placement.dask`, or the "
                    "service failed to start there (see the scheduler's log)"
                )
            if isinstance(reply, dict) and "refused" in reply:
                raise ServiceError(f"the scheduler refused the renewal: {reply['refused']}")
            if not isinstance(reply, dict):
                raise ServiceError(
                    f"malformed {SYNC_HANDLER} answer from the scheduler (a "
                    f"{type(reply).__name__}, not a lease); run the same placement version "
                    "on the scheduler and the workers"
                )
            lease = _parse_reply(reply)
            rtt = time.perf_counter() - started
            if self._check_ttl(ticket, lease["ttl_s"]):
                self.chooser.restore(ticket)
                return False
            payload = reply.get("predictor")
            if payload is not None:
                await self._install(payload, lease["model_version"])
            self.chooser.accept(ticket, **lease)
        except asyncio.CancelledError:
            self.chooser.restore(ticket)
            raise
        except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback later
            self.chooser.restore(ticket)
            self._failed(exc)
            return False
        self._rtt.append(rtt)
        self.syncs += 1
        self.no_service_answers = 0
        if self.consecutive_failures:
            logger.info(
                "placement service answers again after %d failed renewal(s); SSD placement resumes",
                self.consecutive_failures,
            )
        self.consecutive_failures = 0
        return True

    def _check_ttl(self, ticket: SyncTicket, ttl_s: float) -> bool:
        """Warn (once per cause) when leases lapse between renewals; returns whether the
        lease answered to ``ticket`` has already expired (it then counts as a failure)."""
        interval = self.config.sync_interval_s
        fix = (
            f"set {LEASE_TTL_KEY} on the scheduler to several times {SYNC_INTERVAL_KEY} on "
            "the workers and well above the renewal round trip (defaults: "
            f"{ServiceConfig.lease_ttl_s:g} s and {LinkConfig.sync_interval_s:g} s)"
        )
        elapsed = self.chooser.clock() - ticket.sent_at
        expired = elapsed >= ttl_s
        if expired:
            reason = (
                f"the lease arrived expired: its life ({ttl_s:g} s, {LEASE_TTL_KEY}) had "
                f"passed since the renewal was sent {elapsed:.3g} s ago"
            )
            self._failed(ServiceError(reason), warn=False)
            cause = "expired"
        elif ttl_s <= interval:
            reason = (
                f"the lease life ({ttl_s:g} s, {LEASE_TTL_KEY} on the scheduler) is not "
                f"longer than the renewal interval ({interval:g} s, {SYNC_INTERVAL_KEY} on "
                "this worker), so leases lapse between renewals"
            )
            cause = "short"
        else:
            return False
        if cause not in self._warned:
            self._warned.add(cause)
            logger.warning(
                "placement worker %s: %s and new files go to %r meanwhile; %s",
                self.address,
                reason,
                self.chooser.fallback,
                fix,
            )
        return expired

    def _failed(self, exc: BaseException, *, warn: bool = True) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        if isinstance(exc, asyncio.TimeoutError):
            reason = f"no answer within {self.config.sync_timeout_s:g} s"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        self.last_error = reason
        if isinstance(exc, ServiceUnavailable):
            self.no_service_answers += 1
            if self.no_service_answers == 1:  # once per outage
                logger.warning(
                    "placement worker %s: %s; new files use the current lease until it "
                    "expires, then %r, and renewals are retried less and less often (up to "
                    "every %g s, %s) until the service answers",
                    self.address,
                    exc,
                    self.chooser.fallback,
                    self.config.max_backoff_s,
                    MAX_BACKOFF_KEY,
                )
                return
        else:
            self.no_service_answers = 0
        if self.consecutive_failures == 1 and warn:
            logger.warning(
                "placement lease renewal failed on %s (%s); new files use the current lease "
                "until it expires, then %r",
                self.address,
                reason,
                self.chooser.fallback,
            )
        else:
            logger.debug("placement lease renewal failed again: %s", reason)

    async def _install(self, payload: bytes, version: int) -> None:
        if version == self.bad_model_version:
            return  # this version did not install before (a scheduler that re-sends it)
        try:
            predictor = await asyncio.to_thread(Predictor.from_bytes, payload)
        except Exception as exc:  # noqa: BLE001 - keep deciding with the model we have
            self.model_errors += 1
            self.bad_model_version = version
            logger.error(
                "placement model version %d from the scheduler not installed, keeping the "
                "current one (the scheduler will not send it again; a newer model is tried): %s",
                version,
                exc,
            )
            return
        self.chooser.install_predictor(predictor)
        self.bad_model_version = None
        logger.info("placement model version %d installed (%s)", predictor.version, predictor.kind)

    # ------------------------------------------------------------------ the loop
    def start(self) -> None:
        """Start renewing in the background on the running event loop."""
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self.chooser.on_low = self.wake
        self._task = asyncio.ensure_future(self._run())

    def wake(self) -> None:
        """Renew now (thread-safe; the chooser calls it when half its lease is spent)."""
        loop, event = self._loop, self._wake
        if loop is None or event is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(event.set)

    def next_wait_s(self) -> float:
        """Seconds until the next renewal: the renewal interval, or while the scheduler
        answers that it runs no placement service, that interval doubled for each such
        answer after the first, up to ``max_backoff_s``."""
        interval = self.config.sync_interval_s
        if self.no_service_answers <= 1:
            return interval
        doublings = min(self.no_service_answers - 1, 64)
        return max(interval, min(interval * 2.0**doublings, self.config.max_backoff_s))

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._closed:
            try:
                await self.sync_once()
                self._wake.clear()
                wait_s = self.next_wait_s()
                if self.no_service_answers:
                    # backing off: an early-renewal signal does not cut the wait short
                    await asyncio.sleep(wait_s)
                    continue
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=wait_s)
            except Exception as exc:  # noqa: BLE001 - only stop() ends the renewals
                self._loop_error(exc)
                await asyncio.sleep(self.config.sync_interval_s)

    def _loop_error(self, exc: Exception) -> None:
        self._failed(exc, warn=False)
        key = f"{type(exc).__name__}: {exc}"
        if key in self._logged_errors or len(self._logged_errors) >= MAX_LOGGED_ERRORS:
            logger.debug("placement lease renewal loop error again: %s", key)
            return
        self._logged_errors.add(key)
        logger.error(
            "placement lease renewal on %s failed unexpectedly; renewals go on: %s",
            self.address,
            key,
            exc_info=exc,
        )

    async def stop(self) -> None:
        """Stop renewing (the lease stays until it expires)."""
        self._closed = True
        self.chooser.on_low = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                logger.exception(
                    "placement lease renewals of %s had stopped on an error", self.address
                )

    # ------------------------------------------------------------------ inspection
    def rtt_s(self) -> np.ndarray:
        """Round-trip times of the last renewals, in seconds."""
        return np.asarray(self._rtt, dtype=np.float64)

    def state(self) -> dict[str, Any]:
        """Counters of the link and of its chooser, JSON-ready."""
        rtt = self.rtt_s()
        return {
            "address": self.address,
            "syncs": self.syncs,
            "failures": self.failures,
            "consecutive_failures": self.consecutive_failures,
            "last_error": self.last_error,
            "no_service_answers": self.no_service_answers,
            "next_wait_s": self.next_wait_s(),
            "model_errors": self.model_errors,
            "bad_model_version": self.bad_model_version,
            "rtt_ms": (
                {
                    "n": int(rtt.size),
                    "p50": float(np.percentile(rtt, 50)) * 1e3,
                    "p99": float(np.percentile(rtt, 99)) * 1e3,
                }
                if rtt.size
                else {"n": 0}
            ),
            "chooser": self.chooser.stats(),
            "usage": self.usage(),
        }


def _parse_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """The lease fields of a ``placement_sync`` answer, as :meth:`LeasedChooser.accept`
    takes them.

    Raises
    ------
    ServiceError
        If a field is missing or not a number (the message names the fix).
    """
    try:
        curve = reply.get("curve")
        return {
            "allowance_bytes": int(reply["allowance"]),
            "threshold": float(reply["threshold"]),
            "ttl_s": float(reply["ttl"]),
            "model_version": int(reply.get("model_version", 0)),
            "curve": [float(t) for t in curve] if curve else None,
            "used_bytes": int(reply.get("used", 0)),
            "capacity_bytes": int(reply.get("capacity", 0)),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ServiceError(
            f"malformed placement_sync answer from the scheduler ({type(exc).__name__}: {exc}); "
            "run the same placement version on the scheduler and the workers"
        ) from None
