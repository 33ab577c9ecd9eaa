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

and installs the answer: a new lease (allowance, threshold, life) and, when the
scheduler holds a newer model, that model.

What happens on failure
-----------------------
* **Scheduler slow or unreachable**: an answer that takes longer than
  ``sync_timeout_s`` counts as a failure. Decisions go on locally under the current
  lease until it expires (``placement.service.lease-ttl``), then every new file goes
  to the fallback tier (HDD). Tasks never wait on the service. The first failure is
  logged as a warning, the recovery at info level.
* **Scheduler back**: the next renewal reports the worker's real SSD usage, so the
  ledger is corrected at once, and a fresh lease resumes SSD placement.
* **Scheduler without the service** (no ``placement_sync`` handler): as unreachable,
  with a warning that names the preload to add.
* **A bad model payload**: the worker keeps its current model and says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from placement.service.config import LinkConfig
from placement.service.errors import ServiceUnavailable
from placement.service.lease import LeasedChooser
from placement.service.predictor import Predictor
from placement.storage.store import TieredFileStore
from placement.tier import Tier

logger = logging.getLogger(__name__)

SYNC_HANDLER = "placement_sync"
#: Round-trip times kept, for p50/p99.
RTT_SAMPLES = 4096


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
            raise TypeError(f"chooser must be a LeasedChooser, got {type(chooser).__name__}")
        if not isinstance(address, str) or not address:
            raise ValueError(f"address={address!r} must be the worker's address")
        self.chooser = chooser
        self.store = store
        self.rpc = rpc
        self.address = address
        self.config = config or LinkConfig()
        self.clock = clock
        self.syncs = 0
        self.failures = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.model_errors = 0
        self._rtt: deque[float] = deque(maxlen=RTT_SAMPLES)
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # ------------------------------------------------------------------ one renewal
    def usage(self) -> dict[str, int]:
        """Bytes of live files now: committed on SSD (at least their expected size) and per tier."""
        committed = 0
        by_tier = {Tier.SSD: 0, Tier.HDD: 0}
        live = self.store.live_files()
        for handle in live:
            current = handle.stats.current_bytes
            by_tier[handle.tier] += current
            if handle.tier is Tier.SSD:
                committed += max(current, self.chooser.estimate(handle.request))
        return {
            "ssd_committed_bytes": committed,
            "ssd_bytes": by_tier[Tier.SSD],
            "hdd_bytes": by_tier[Tier.HDD],
            "live_files": len(live),
        }

    async def sync_once(self) -> bool:
        """Renew the lease once. Returns whether the scheduler answered in time; never raises
        (except cancellation)."""
        ticket = self.chooser.begin_sync()
        usage = self.usage()
        message = {
            "worker": self.address,
            "used_bytes": usage["ssd_committed_bytes"],
            "observations": [[p, s] for p, s in ticket.observations],
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
                "link_failures": self.failures,
            },
        }
        started = time.perf_counter()
        try:
            handler = getattr(self.rpc, SYNC_HANDLER)
            reply = await asyncio.wait_for(handler(**message), timeout=self.config.sync_timeout_s)
            if not isinstance(reply, dict) or "allowance" not in reply:
                raise ServiceUnavailable(
                    "the scheduler has no placement service (no answer to "
                    f"{SYNC_HANDLER!r}); start it with `dask scheduler --preload placement.dask`"
                )
        except asyncio.CancelledError:
            self.chooser.restore(ticket)
            raise
        except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback later
            self.chooser.restore(ticket)
            self._failed(exc)
            return False
        self._rtt.append(time.perf_counter() - started)
        payload = reply.get("predictor")
        if payload is not None:
            await self._install(payload)
        self.chooser.accept(
            ticket,
            allowance_bytes=int(reply["allowance"]),
            threshold=float(reply["threshold"]),
            ttl_s=float(reply["ttl"]),
            model_version=int(reply.get("model_version", 0)),
            curve=reply.get("curve"),
            used_bytes=int(reply.get("used", 0)),
            capacity_bytes=int(reply.get("capacity", 0)),
        )
        self.syncs += 1
        if self.consecutive_failures:
            logger.info(
                "placement service answers again after %d failed renewal(s); SSD placement resumes",
                self.consecutive_failures,
            )
        self.consecutive_failures = 0
        return True

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        if isinstance(exc, asyncio.TimeoutError):
            reason = f"no answer within {self.config.sync_timeout_s:g} s"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        self.last_error = reason
        if self.consecutive_failures == 1:
            logger.warning(
                "placement service unreachable from %s (%s); new files use the current lease "
                "until it expires, then %r",
                self.address,
                reason,
                self.chooser.fallback,
            )
        else:
            logger.debug("placement lease renewal failed again: %s", reason)

    async def _install(self, payload: bytes) -> None:
        try:
            predictor = await asyncio.to_thread(Predictor.from_bytes, payload)
        except Exception as exc:  # noqa: BLE001 - keep deciding with the model we have
            self.model_errors += 1
            logger.error(
                "placement model from the scheduler not installed, keeping the current one: %s", exc
            )
            return
        self.chooser.install_predictor(predictor)
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

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._closed:
            await self.sync_once()
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.sync_interval_s)

    async def stop(self) -> None:
        """Stop renewing (the lease stays until it expires)."""
        self._closed = True
        self.chooser.on_low = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

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
            "model_errors": self.model_errors,
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
