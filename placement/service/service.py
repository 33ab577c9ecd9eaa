"""The scheduler side of the placement service: model, threshold policy and SSD ledger.

:class:`PlacementService` is the plain class behind
:class:`~placement.service.scheduler_plugin.PlacementSchedulerPlugin`; it needs no
cluster and is tested directly. It answers three requests:

:meth:`~PlacementService.sync` (every worker, every ~250 ms)
    The worker reports the bytes its live SSD files hold, the predictions of the files
    it placed, and its counters. The service records the report, reconciles the
    ledger (:class:`~placement.service.ledger.ClusterLedger`), feeds the predictions to
    the cluster-wide adaptive threshold
    (:class:`~placement.policy.AdaptiveThresholdPolicy`) and answers with a lease: an
    SSD allowance, the threshold (and, with ``occupancy_basis="after"``, the threshold
    curve: the threshold at occupancies 0, 1/32, ..., 1, with the cluster's used bytes
    and the budget, so that a worker judges each file at the occupancy it would leave,
    as the policy does), the lease's life, and the
    model when the worker holds another version, older or newer: the scheduler's model
    is the one its threshold learns from (and not the version the worker reported it
    could not install). Workers then decide locally
    (:class:`~placement.service.lease.LeasedChooser`), so no file creation waits on the
    scheduler.
:meth:`~PlacementService.decide` (batched decision requests)
    The service itself decides a batch of files (for producers that are not behind a
    lease, and to measure decisions through the scheduler): one model call per
    pipeline, the same threshold rule, bytes reserved in the ledger until the worker's
    next report (one lease life at most). Requests that are malformed, or whose ``name``
    would escape a tier directory (``..``, absolute paths), are refused one by one.
:meth:`~PlacementService.reload_model`
    Loads a newly trained model (``dataplane placement train`` over the service's own
    logs) and the history statistics from the log directory, without a restart;
    workers pick it up at their next renewal.

The model configured at startup (``config.model_path``) is loaded when the service is
built, but the history statistics it reads come from every log file in the log
directory, which can take seconds: they are read in a thread
(:meth:`~PlacementService.wait_for_history`), so the scheduler's event loop, which
builds the service, goes on serving meanwhile. Until they are read the service answers
as a service without a model does (the size heuristic, model version 0, no model
shipped); then the model (version 1) is installed, as a reload installs one, and workers
pick it up at their next renewal.

What happens on failure: a malformed report raises
:class:`~placement.service.errors.ServiceError` (the worker treats it as an unreachable
service and falls back to HDD); a report from a worker the scheduler has removed
(:meth:`~PlacementService.remove_worker`) raises
:class:`~placement.service.errors.WorkerRemoved`, so that it cannot recreate the
worker's share (a numbered report of another incarnation than the removed worker's last
is a new worker at the same address, which may renew before the scheduler has seen it
register, and is served; so is a late one of the removed worker itself if its share had
been forgotten as silent before the removal, whose incarnation was then not retired: its
share lasts until silent shares expire); a numbered report overtaken by a later one of
the same worker (one the worker gave up waiting for), or one of a removed worker's
process that arrives after a new worker registered at its address, raises
:class:`~placement.service.errors.StaleReport` and changes nothing, and a prediction
sent again after a failed renewal is counted once (see
:mod:`placement.service.ledger`); a worker that stops reporting is forgotten after
:data:`STALE_LEASES` lease lives even if its removal was never seen; a model that cannot
be loaded raises :class:`~placement.errors.ModelError` and the current model stays in
use; unreadable log files are skipped when reading history, and history that cannot be
read at all leaves the model without it (logged).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement.errors import PlacementError
from placement.features import HistorySnapshot, HistoryStore
from placement.logwriter import read_logs
from placement.model import ModelSet
from placement.policy import AdaptiveThresholdPolicy, OccupancyBasis
from placement.service.config import ServiceConfig
from placement.service.errors import ServiceError, StaleReport, WorkerRemoved
from placement.service.ledger import ClusterLedger, check_report_number, remember
from placement.service.predictor import Predictor
from placement.storage.errors import UnsafePathError
from placement.storage.paths import check_name
from placement.storage.request import FileRequest
from placement.tier import Tier

logger = logging.getLogger(__name__)

#: Points of the threshold curve a lease carries (occupancies 0, 1/32, ..., 1).
CURVE_POINTS = 33

#: Most predictions one report may carry, and most requests one batch may hold.
MAX_OBSERVATIONS = 10_000
MAX_BATCH = 10_000
_MAX_COUNTERS = 64
#: A worker silent for this many lease lives loses its share of the ledger.
STALE_LEASES = 4
#: Most removed workers remembered (to refuse their late renewals).
MAX_REMOVED = 4096
#: Size assumed by batched decisions for a file of unknown size, in bytes.
UNKNOWN_SIZE_BYTES = 4 * 2**20


@dataclass
class WorkerRecord:
    """What the service knows about one worker from its reports."""

    first_seen: float
    last_seen: float
    syncs: int = 0
    model_version: int = 0
    bad_model_version: int | None = None
    predictions: int = 0
    service_decisions: dict[str, int] = field(default_factory=lambda: {"ssd": 0, "hdd": 0})
    counters: dict[str, float] = field(default_factory=dict)


def _predictions(
    observations: Any, first_sent: Any = None, *, counted_up_to: int = 0
) -> list[tuple[float, int]]:
    """The finite predictions of a report, less those first sent in a report numbered
    ``counted_up_to`` or before (already counted when that report was applied)."""
    if observations is None:
        observations = []
    if first_sent is not None and (
        not isinstance(first_sent, (list, tuple))
        or len(first_sent) != len(observations)
        or any(isinstance(f, bool) or not isinstance(f, int) or f < 0 for f in first_sent)
    ):
        raise ServiceError(
            "observation_seqs must be a list of ints >= 0, one per observation "
            f"({len(observations)}); got {first_sent!r:.200}"
        )
    if not isinstance(observations, (list, tuple)) or len(observations) > MAX_OBSERVATIONS:
        raise ServiceError(
            f"observations must be a list of at most {MAX_OBSERVATIONS} [log_density, size] pairs"
        )
    out = []
    for k, item in enumerate(observations):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ServiceError(f"observation {item!r} is not a [log_density, size_bytes] pair")
        pred, size = item
        if isinstance(pred, bool) or not isinstance(pred, (int, float)):
            raise ServiceError(f"observation {item!r}: the prediction must be a number")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ServiceError(f"observation {item!r}: the size must be an int >= 0 bytes")
        first = first_sent[k] if first_sent is not None else 0
        if math.isfinite(pred) and not 0 < first <= counted_up_to:
            out.append((float(pred), size))
    return out


def _counters(counters: Any) -> dict[str, float]:
    if counters is None:
        return {}
    if not isinstance(counters, Mapping) or len(counters) > _MAX_COUNTERS:
        raise ServiceError(
            f"counters must be a mapping of at most {_MAX_COUNTERS} names to numbers"
        )
    out: dict[str, float] = {}
    for name, value in counters.items():
        if (
            not isinstance(name, str)
            or isinstance(value, bool)
            or not isinstance(value, (int, float))
        ):
            raise ServiceError(f"counter {name!r}={value!r} must be a name and a number")
        out[name] = value
    return out


@dataclass
class PredictedBatch:
    """A batch of decision requests checked and predicted (:meth:`PlacementService.predict_batch`),
    not yet placed.

    Attributes
    ----------
    worker : str
        The requester's address.
    answers : list of dict
        One per request, in order; refused requests already hold ``{"error": reason}``.
    positions : list of int
        Positions in ``answers`` of the valid requests.
    sizes : list of int
        Their expected sizes in bytes.
    log_densities : list of float
        Their predicted log10 densities (operations per byte per second).
    """

    worker: str
    answers: list[dict[str, Any]]
    positions: list[int]
    sizes: list[int]
    log_densities: list[float]


class PlacementService:
    """Model, adaptive threshold and SSD ledger of a cluster (see the module docstring).

    Parameters
    ----------
    config : ServiceConfig
        Budget, model path, log directory, lease settings.
    predictor : Predictor, optional
        Start with this predictor instead of loading ``config.model_path``.
    models : ModelSet, optional
        The models at ``config.model_path``, already loaded (``dataplane serve`` loads them to
        refuse a bad model before its cluster starts): used as loaded from there, history
        and all, without reading the directory again.
    clock : callable
        Monotonic clock, in seconds (lease lives).
    wall_clock : callable
        Wall clock, in seconds since the epoch (report times).

    Raises
    ------
    ModelError
        If ``config.model_path`` is set and cannot be loaded (the message names the fix).
    ServiceError
        If ``models`` is given with a ``predictor``, or without a ``config.model_path``.
    """

    def __init__(
        self,
        config: ServiceConfig,
        *,
        predictor: Predictor | None = None,
        models: ModelSet | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(config, ServiceConfig):
            raise TypeError(f"config must be a ServiceConfig, got {type(config).__name__}")
        if models is not None:
            if not isinstance(models, ModelSet):
                raise TypeError(f"models must be a ModelSet, got {type(models).__name__}")
            if predictor is not None or not config.model_path:
                raise ServiceError(
                    "models are the ones loaded from config.model_path: give them with "
                    "config.model_path set and no predictor"
                )
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock
        self.ledger = ClusterLedger(config.ssd_capacity_bytes)
        self.policy = AdaptiveThresholdPolicy(
            config.ssd_capacity_bytes,
            window=config.window,
            exponent=config.exponent,
            occupancy_basis=config.occupancy_basis,
        )
        self._lock = threading.Lock()
        self.records: dict[str, WorkerRecord] = {}
        self.departed = 0
        #: Reports refused as overtaken by a later one (:class:`StaleReport`).
        self.stale_reports = 0
        # addresses of removed workers, oldest first: their late renewals are refused
        self._removed: dict[str, None] = {}
        self.reloads = 0
        #: The configured model, waiting for its history (read in a thread).
        self._pending: Predictor | None = None
        self._history_done = threading.Event()
        if predictor is None:
            if config.model_path:
                # a bad model stops the service here, as it always did; only the history
                # (every log file) is left to the thread
                if models is None:
                    models = ModelSet.load(config.model_path)
                self._pending = Predictor(models, version=1, source=str(config.model_path))
            predictor = Predictor()
        self._predictor = predictor
        self._payload = predictor.to_bytes() if predictor.version else None
        self._start_history()

    # ------------------------------------------------------------------ model
    @property
    def predictor(self) -> Predictor:
        with self._lock:
            return self._predictor

    def _start_history(self) -> None:
        """Read the pending model's history in a thread (nothing to do without one)."""
        if self._pending is None:
            self._history_done.set()
            return
        self._history_done.clear()
        threading.Thread(target=self._load_history, name="placement-history", daemon=True).start()

    def _load_history(self) -> None:
        """Read the history and install the pending model with it (in the history thread)."""
        try:
            with self._lock:
                pending = self._pending
            if pending is None:
                return
            try:
                history = self.read_history()
            except Exception:
                logger.exception(
                    "reading placement history from %s failed; the model runs without it",
                    self.config.log_dir,
                )
                history = None
            predictor = Predictor(
                pending.models, history, version=pending.version, source=pending.source
            )
            payload = predictor.to_bytes()
            with self._lock:
                installed = self._predictor.version < predictor.version  # no reload won
                if installed:
                    self._predictor, self._payload = predictor, payload
                self._pending = None
            if installed:
                logger.info(
                    "placement model version %d loaded from %s, with the history of %d run(s)",
                    predictor.version,
                    predictor.source,
                    history.n_runs if history is not None else 0,
                )
        finally:
            self._history_done.set()

    @property
    def history_loading(self) -> bool:
        """Whether the configured model still waits for its history (read in a thread)."""
        return not self._history_done.is_set()

    def wait_for_history(self, timeout: float | None = None) -> bool:
        """Wait until the configured model's history is read and the model installed.

        Parameters
        ----------
        timeout : float, optional
            Most seconds to wait; ``None`` waits as long as it takes.

        Returns
        -------
        bool
            True when nothing is left to read (at once without a configured model).
        """
        return self._history_done.wait(timeout)

    def read_history(self) -> HistorySnapshot | None:
        """History statistics of the runs logged in ``config.log_dir`` (``None`` if none).

        Blocking (reads every log file): the service calls it in a thread.
        """
        log_dir = self.config.log_dir
        if not log_dir or not Path(log_dir).is_dir():
            return None
        try:
            logs = read_logs(log_dir)
        except (OSError, PlacementError) as exc:
            logger.warning("cannot read placement history from %s: %s", log_dir, exc)
            return None
        for path, reason in logs.bad_files[:5]:
            logger.warning("skipped placement log file %s: %s", path, reason)
        if logs.unlogged_files:
            logger.warning(
                "%d temporary file(s) of workers that died went without a log row "
                "(%d record(s) in %s): the history lacks them",
                logs.unlogged_files,
                len(logs.unlogged),
                log_dir,
            )
        if logs.table.num_rows == 0:
            return None
        return HistoryStore.from_table(logs.table).snapshot()

    def _build(self, path: str, *, version: int) -> Predictor:
        models = ModelSet.load(path)
        return Predictor(models, self.read_history(), version=version, source=str(path))

    def reload_model(self, path: str | None = None) -> dict[str, Any]:
        """Load the model at ``path`` (default ``config.model_path``) and fresh history.

        Blocking (reads files): the plugin runs it in a thread. Workers receive the new
        model at their next renewal.

        Raises
        ------
        ServiceError
            If no path is given and none is configured.
        ModelError
            If the model cannot be loaded; the current model stays in use.
        """
        path = path if path is not None else self.config.model_path
        if not isinstance(path, str) or not path:
            raise ServiceError(
                "no model to load: pass the directory written by `dataplane placement train "
                "--out DIR`, or set placement.model"
            )
        with self._lock:
            version = self._predictor.version + 1
        predictor = self._build(path, version=version)
        payload = predictor.to_bytes()
        with self._lock:
            if self._predictor.version >= version:  # a concurrent reload won
                version = self._predictor.version + 1
                predictor.version = version
                payload = predictor.to_bytes()
            self._predictor, self._payload = predictor, payload
            self.reloads += 1
        logger.info("placement model version %d loaded from %s", version, path)
        return {**predictor.describe(), "payload_bytes": len(payload)}

    # ------------------------------------------------------------------ renewals
    def _record(self, worker: str) -> WorkerRecord:
        rec = self.records.get(worker)
        if rec is None:
            now = self.wall_clock()
            rec = self.records[worker] = WorkerRecord(first_seen=now, last_seen=now)
        return rec

    def threshold(self, size_bytes: int = 0) -> float:
        """The admission threshold now (log10 density) for a file of ``size_bytes``, at the
        occupancy the policy's :class:`~placement.policy.OccupancyBasis` says: the
        ledger's, with the file's bytes added for ``AFTER``."""
        ledger = self.ledger
        if not ledger.capacity:
            return math.inf
        occupancy = self.policy.occupancy_basis.occupancy(
            ledger.used(self.clock()), size_bytes, ledger.capacity
        )
        return self.policy.threshold(occupancy=occupancy)

    def threshold_curve(self) -> list[float] | None:
        """Thresholds at occupancies ``k / (CURVE_POINTS - 1)`` (log10 density), for
        workers to judge each file at the occupancy it would leave; ``None`` when the
        policy judges files at the occupancy before them."""
        if self.policy.occupancy_basis is not OccupancyBasis.AFTER:
            return None
        last = CURVE_POINTS - 1
        return [self.policy.threshold(occupancy=k / last) for k in range(CURVE_POINTS)]

    def sync(
        self,
        *,
        worker: str,
        used_bytes: int,
        observations: Sequence[Sequence[float]] | None = None,
        model_version: int = 0,
        counters: Mapping[str, float] | None = None,
        want_bytes: int | None = None,
        bad_model_version: int | None = None,
        incarnation: str | None = None,
        seq: int | None = None,
        observation_seqs: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """Record a worker's report and answer with its new lease (see the module docstring).

        ``bad_model_version`` is the model version the worker could not install
        (``None``: none); that version is not shipped to it again. ``incarnation`` and
        ``seq`` number the report, and ``observation_seqs`` gives, per observation, the
        number of the report that first carried it (0: this one); see
        :mod:`placement.service.ledger`. Unnumbered reports are applied as they come.

        Returns
        -------
        dict
            ``allowance`` (bytes), ``threshold`` (log10 density at the ledger's
            occupancy), ``curve`` (:meth:`threshold_curve`), ``used`` and ``capacity``
            (the ledger's bytes), ``ttl`` (seconds), ``model_version`` and
            ``predictor`` (pickled bytes when the worker holds another version than the
            scheduler's and that version is not ``bad_model_version``, else ``None``).

        Raises
        ------
        ServiceError
            If the report is malformed (nothing is recorded then).
        WorkerRemoved
            If the report comes from a worker the scheduler removed: an unnumbered one,
            or one of the incarnation the removal retired (nothing is recorded then).
        StaleReport
            If a later report of the same worker incarnation was applied already, or the
            incarnation is that of a removed worker (nothing is recorded then).
        """
        if not isinstance(worker, str) or not worker:
            raise ServiceError(f"worker={worker!r} must be the worker's address")
        check_report_number(incarnation, seq)
        preds = _predictions(
            observations,
            observation_seqs,
            counted_up_to=self.ledger.applied_seq(worker, incarnation),
        )
        values = _counters(counters)
        if isinstance(model_version, bool) or not isinstance(model_version, int):
            raise ServiceError(f"model_version={model_version!r} must be an int")
        if want_bytes is None:
            want_bytes = 0
        if isinstance(want_bytes, bool) or not isinstance(want_bytes, int) or want_bytes < 0:
            raise ServiceError(f"want_bytes={want_bytes!r} must be None or an int >= 0 bytes")
        if bad_model_version is not None and (
            isinstance(bad_model_version, bool) or not isinstance(bad_model_version, int)
        ):
            raise ServiceError(f"bad_model_version={bad_model_version!r} must be None or an int")
        if worker in self._removed:
            if incarnation is None or self.ledger.is_retired(worker, incarnation):
                raise WorkerRemoved(
                    f"worker {worker} was removed from the cluster; its lease renewal is "
                    "refused and its SSD share stays released. Restart the worker so that it "
                    "registers with the scheduler again"
                )
            # a process the removal did not retire: a new worker at the address (a nanny's
            # restart at a fixed port), whose first renewal overtook its registration
            del self._removed[worker]
        now = self.clock()
        if not self.ledger.report(worker, used_bytes, now=now, incarnation=incarnation, seq=seq):
            self.stale_reports += 1
            if self.ledger.is_retired(worker, incarnation):
                raise StaleReport(
                    f"report {seq} of worker {worker} comes from its incarnation "
                    f"{incarnation}, which the scheduler removed (the worker left or "
                    "restarted); it is ignored"
                )
            raise StaleReport(
                f"report {seq} of worker {worker} arrived after its report "
                f"{self.ledger.applied_seq(worker, incarnation)}; it is ignored (the worker "
                "gave up waiting for it and has reported since)"
            )
        self._expire(now)
        cap = max(self.config.max_lease_bytes(len(self.ledger)), want_bytes)
        for pred, size in preds:
            self.policy.observe(pred, size)
        allowance = self.ledger.grant(
            worker, cap, now=now, ttl_s=self.config.lease_ttl_s, max_bytes=cap
        )
        rec = self._record(worker)
        rec.last_seen = self.wall_clock()
        rec.syncs += 1
        rec.model_version = model_version
        rec.bad_model_version = bad_model_version
        rec.predictions += len(preds)
        rec.counters = values
        with self._lock:
            version, payload = self._predictor.version, self._payload
        return {
            "allowance": allowance,
            "threshold": self.threshold(),
            "curve": self.threshold_curve(),
            "used": self.ledger.used(now),
            "capacity": self.ledger.capacity,
            "ttl": self.config.lease_ttl_s,
            "model_version": version,
            "predictor": (payload if version not in (model_version, bad_model_version) else None),
        }

    def _expire(self, now: float) -> None:
        """Drop lapsed requesters from the ledger, and workers silent for
        :data:`STALE_LEASES` lease lives (their removal was missed) with their records."""
        stale = self.ledger.expire(now, stale_after_s=STALE_LEASES * self.config.lease_ttl_s)
        for worker in stale:
            self.records.pop(worker, None)
            logger.warning(
                "placement ledger: worker %s has not reported for %d lease lives (%g s); "
                "its SSD share is released until it reports again",
                worker,
                STALE_LEASES,
                STALE_LEASES * self.config.lease_ttl_s,
            )

    # ------------------------------------------------------------------ batched decisions
    def decide(self, *, worker: str, requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Decide a batch of new files on the scheduler.

        Each request holds a file's creation-time facts by log-schema column name
        (``file_kind``, ``created_at``, ``pipeline``, ``stage``, ``expected_size_bytes``...)
        and optionally its relative ``name``. Returns one answer per request, in order:
        ``{"tier": "ssd" | "hdd", "log_density": float}`` or ``{"error": reason}`` for a
        refused request (bad facts, unsafe name). SSD bytes are reserved for ``worker``
        until its next report, for one lease life at most.

        It is :meth:`predict_batch` then :meth:`admit_batch`; the scheduler plugin runs the
        first (features and the model, the work that grows with the batch) in a thread for
        large batches, so the scheduler's event loop is not held for the whole batch.
        """
        return self.admit_batch(self.predict_batch(worker=worker, requests=requests))

    def predict_batch(
        self, *, worker: str, requests: Sequence[Mapping[str, Any]]
    ) -> PredictedBatch:
        """Check a batch of requests and predict their densities; changes no state, so it
        may run in another thread than :meth:`admit_batch`.

        Raises
        ------
        ServiceError
            If ``worker`` is not an address or ``requests`` not a list of at most
            :data:`MAX_BATCH` items (a bad item is answered, not raised).
        """
        if not isinstance(worker, str) or not worker:
            raise ServiceError(f"worker={worker!r} must be the requester's address")
        if not isinstance(requests, (list, tuple)) or len(requests) > MAX_BATCH:
            raise ServiceError(f"requests must be a list of at most {MAX_BATCH} mappings")
        answers: list[dict[str, Any]] = [{} for _ in requests]
        valid: list[tuple[int, FileRequest, int]] = []
        for i, raw in enumerate(requests):
            try:
                if not isinstance(raw, Mapping):
                    raise TypeError(f"request {raw!r} is not a mapping of facts")
                facts = dict(raw)
                name = facts.pop("name", None)
                if name is not None:
                    check_name(name)
                request = FileRequest(**facts)
            except UnsafePathError as exc:
                answers[i] = {"error": f"refused: {exc}"}
                continue
            except (TypeError, ValueError) as exc:
                answers[i] = {"error": f"bad request: {exc}"}
                continue
            size = request.expected_size_bytes
            valid.append((i, request, int(size) if size is not None else UNKNOWN_SIZE_BYTES))
        sizes = [s for _, _, s in valid]
        log_densities = (
            [float(p) for p in self.predictor.predict_many([r for _, r, _ in valid], sizes)]
            if valid
            else []
        )
        return PredictedBatch(
            worker=worker,
            answers=answers,
            positions=[i for i, _, _ in valid],
            sizes=sizes,
            log_densities=log_densities,
        )

    def admit_batch(self, batch: PredictedBatch) -> list[dict[str, Any]]:
        """Place a predicted batch against the threshold and the ledger, reserving SSD
        bytes for its worker (run where the ledger's other updates run)."""
        answers = batch.answers
        if batch.positions:
            worker = batch.worker
            now = self.clock()
            self._expire(now)
            rec = self._record(worker)
            for i, size, pred in zip(
                batch.positions, batch.sizes, batch.log_densities, strict=True
            ):
                tier = Tier.HDD
                if (
                    pred > -math.inf  # NaN and -inf go to HDD, +inf passes (as the policy)
                    and pred >= self.threshold(size)
                    and self.ledger.reserve(worker, size, now=now, ttl_s=self.config.lease_ttl_s)
                ):
                    tier = Tier.SSD
                self.policy.observe(pred, size)
                rec.service_decisions[tier.value] += 1
                answers[i] = {"tier": tier.value, "log_density": pred}
        return answers

    # ------------------------------------------------------------------ membership
    def add_worker(self, worker: str) -> None:
        """``worker`` joined the cluster: accept its renewals (again, if an earlier worker
        at the same address was removed)."""
        self._removed.pop(worker, None)

    def remove_worker(self, worker: str) -> None:
        """``worker`` left the cluster (or died): drop its share of the ledger, retire the
        incarnation of its last numbered report, and refuse its later renewals (one may
        still be on its way) until it is added again or a new process at its address
        renews (see :meth:`sync`)."""
        remember(self._removed, worker, MAX_REMOVED)
        share = self.ledger.remove(worker)
        if self.records.pop(worker, None) is not None or share is not None:
            self.departed += 1
            logger.info(
                "placement ledger: worker %s left, %d SSD bytes released",
                worker,
                (share.used + share.reserved) if share else 0,
            )

    def state(self) -> dict[str, Any]:
        """Ledger, threshold, model and per-worker records, JSON-ready."""
        now = self.clock()
        threshold = self.threshold()
        return {
            "ledger": self.ledger.snapshot(now),
            "threshold": threshold if math.isfinite(threshold) else str(threshold),
            "model": self.predictor.describe(),
            "reloads": self.reloads,
            "history_loading": self.history_loading,
            "departed_workers": self.departed,
            "stale_reports": self.stale_reports,
            "config": {
                "ssd_capacity_bytes": self.config.ssd_capacity_bytes,
                "model_path": self.config.model_path,
                "log_dir": self.config.log_dir,
                "lease_ttl_s": self.config.lease_ttl_s,
                "max_lease_bytes": self.config.max_lease_bytes(len(self.ledger)),
            },
            "workers": {
                name: {
                    "first_seen": rec.first_seen,
                    "last_seen": rec.last_seen,
                    "syncs": rec.syncs,
                    "model_version": rec.model_version,
                    "bad_model_version": rec.bad_model_version,
                    "predictions": rec.predictions,
                    "service_decisions": dict(rec.service_decisions),
                    **rec.counters,
                }
                for name, rec in self.records.items()
            },
        }

    def __getstate__(self) -> dict[str, Any]:
        # a lock does not pickle: the copy (e.g. the one ``client.register_plugin``
        # sends to the scheduler) gets a fresh one
        with self._lock:
            state = dict(self.__dict__)
        del state["_lock"], state["_history_done"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._history_done = threading.Event()
        # a copy made while the history was still being read reads it itself
        self._start_history()

    def __repr__(self) -> str:
        return f"<PlacementService {self.ledger!r} model v{self.predictor.version}>"
