"""Online placement policies: SSD or HDD for each file as it is created, under an SSD budget.

Every policy follows :class:`PlacementPolicy`: :meth:`~PlacementPolicy.place` is called
when a file is created (with the model's predicted log10 density, its size in bytes and
the time) and returns a :class:`~placement.tier.Tier`; :meth:`~PlacementPolicy.release`
is called when the file is deleted. A policy keeps its own ledger of SSD bytes and never
puts a file on SSD that does not fit: *SSD full -> HDD*, never an error.

Policies
--------
:class:`AdaptiveThresholdPolicy`
    The learned policy: admit a file when its predicted density clears a threshold
    that follows the recent predictions and the SSD's occupancy (rule below) and,
    given a ``cost_model``, when SSD is worth it for that file at all (the break-even
    test below). Fed LightGBM predictions it is *the LightGBM policy*; fed the
    per-stage mean density of earlier runs it is the *stage-history heuristic*
    (:class:`StageHistoryPolicy`, the same rule, so the two differ only in their
    predictions).
:class:`AllHDDPolicy`
    Every file on HDD (the baseline the savings are measured against).
:class:`FirstFitPolicy`
    SSD while it fits, else HDD (the baseline: no ranking, no break-even test).
:class:`SmallFilesFirstPolicy`
    Smaller files are denser (a file's operation count varies much less than its
    size): with ``max_size_bytes`` it admits files up to that size while they fit;
    without it, it ranks files by size under the adaptive threshold. It has no
    density estimate to price, so no break-even test.
:class:`OraclePolicy`
    The limit: knows every file's true density and the whole future. It is the
    offline greedy for this interval-packing problem: files sorted by true saving per
    byte-second of SSD (under the default cost model, by true density), best first,
    files that would lose money skipped, each admitted if it fits in the SSD at every
    instant of its life next to those already admitted (a segment tree over time). The
    exact 0/1 optimum is NP-hard and the greedy can miss it:
    :func:`placement.bound.savings_upper_bound` bounds what any placement could save
    from above.

The adaptive threshold
----------------------
A file is admitted when it fits and its predicted log density is at or above the
size-weighted quantile ``1 - f`` of the last ``window`` predictions, where::

    f = (1 - u) ** exponent

that is, the file must rank among the densest share ``f`` of recent bytes. ``u`` is
the SSD's occupancy (used bytes / capacity, in [0, 1]) before the file
(:attr:`OccupancyBasis.BEFORE`, the default): a file on a nearly empty SSD is
admitted unless it is among the sparsest few recent bytes (idle SSD capacity saves
nothing). With :attr:`OccupancyBasis.AFTER`, ``u`` is the occupancy *with the file on
it*, ``(used + size) / capacity``, so a file pays for the free space it would take: a
file that would take most of the free bytes must be among the densest of recent
traffic. The Dask service applies the same rule on its workers; under ``AFTER`` their
leases carry the threshold at occupancies 0, 1/32, ..., 1
(:mod:`placement.service.lease`). Worked example, 100 bytes of SSD, 20 used,
``exponent=0.5``:

=============  ======================  ===============================
file size      ``u`` (AFTER)           densest share ``f`` it must be in
=============  ======================  ===============================
5 bytes        0.25                    0.87 of recent bytes
60 bytes       0.80                    0.45 of recent bytes
80 bytes       1.00                    none: HDD (would fill the SSD)
=============  ======================  ===============================

With ``BEFORE`` each of them would need only the densest 0.89. As the SSD fills, the
bar rises to the densest files only, keeping the last free bytes for them.

Why BEFORE: ``AFTER`` protects small dense files from a few large sparse ones
(spilled partitions of 5-70 MB) when the density is known, and it is the better rule
fed the true density. Fed the model's predictions, whose errors it multiplies for
large files, it is worse: by grouped validation inside the training folds of the
pipeline split (share of the oracle's savings at 5%, 4 folds x 3 seeds), the LightGBM
policy scored 0.785 with ``BEFORE`` against 0.769 with ``AFTER`` on the 132-run log
(fed the true density: 0.849 against 0.891; ``benchmarks/placement_inner.py``), and
0.804 against 0.792 on the earlier 66-run log. ``AFTER`` was the default while the
simulator told policies each file's final size.

``exponent`` (default :data:`DEFAULT_EXPONENT`, 0.5) and the occupancy rule were
re-checked together by the same inner validation on the 132-run log, on the log as
collected (one run at a time) and replayed as a shared cluster running 16 at a time
(``benchmarks/placement_inner.py [--basis after] [--overlap 16] --variants
exponent-0.25,exponent-0.5``):

==================  ===============  ===============
setting             one at a time    16 at a time
==================  ===============  ===============
BEFORE, 0.5         0.785            0.732
BEFORE, 0.25        0.793            0.711
AFTER, 0.5          0.769            0.752
AFTER, 0.25         0.791            0.731
==================  ===============  ===============

A lower exponent keeps the threshold low until the SSD is fuller, closer to first-fit,
which suits runs that seldom contend for the SSD; contention favours ``AFTER`` and 0.5
(fed the true density at 16 at a time: 0.971 for ``AFTER``, 0.950 for ``BEFORE``, 0.879
for ``BEFORE`` at 0.25). No setting wins both replays and the defaults are within 0.021
of the best in each, so they stay; a cluster that runs many pipelines at once may set
``occupancy_basis="after"``.

Until ``min_window`` predictions have been seen, files are admitted while they
fit. The sorted window is refreshed every ``refresh`` placements, so a decision costs
O(log window). A prediction of ``+inf`` ranks above every finite one: the file is
admitted whenever it fits (and passes the break-even test, which it always does). A
file without a prediction (``NaN``) or predicted at ``-inf`` goes to HDD. Only finite
predictions enter the window.

The break-even test
-------------------
The threshold ranks files; it does not ask whether a file is worth SSD at all. With
a ``cost_model`` (:class:`~placement.cost.CostModel`) an adaptive-threshold policy
also requires that the file's *predicted* saving be non-negative::

    predicted_log_density >= log10(d*(L))

with ``d*`` the break-even density of :meth:`placement.cost.CostModel.break_even_density`
(operations per byte per second), ``L`` the file's expected lifetime in seconds, and
one write and one read of each byte stored (``a = r = 1``). Everything in it is known
when the file is created: the prediction, the prices and ``L``, which comes from
``expected_lifetime`` (a function of the file id, e.g. the mean lifetime of the file's
(pipeline, stage) in earlier runs) or, where that gives none, from the policy's own
estimate: the geometric mean lifetime of the files released so far (the policy sees
each creation and deletion). Before any file was released it uses the lifetime-free
``d* = c_s / p``. A file that fails the test goes to HDD even onto an empty SSD; its
prediction still enters the threshold's window. Without optional prices (wear,
transfer) ``d*`` does not depend on ``L`` and is about ``10**-8.57``, below every file
of the placement logs (whose densities run from 10^-7.65 to 10^-0.48), so the test
changes nothing there. With SSD wear priced at $0.057 per TB written and HDD transfer
at 270 MB/s, a file written and read back once must see about one operation per 260 KB
over its life, so a large, short-lived spill file stays on HDD. Without a
``cost_model`` there is no test.

Worked example, wear at $0.057/TB and HDD transfer at 270 MB/s priced (``a = r = 1``):

===============  ===========================  =========================
expected life    ``d*`` (ops per byte per s)  ``log10 d*``
===============  ===========================  =========================
0.1 s            3.8e-5                       -4.42
1 s              3.8e-6                       -5.42
100 s            4.1e-8                       -7.39
===============  ===========================  =========================
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from placement.cost import CostModel
from placement.errors import PlacementConfigError, PlacementTypeError
from placement.schema import MIN_LIFETIME_S
from placement.tier import Tier

__all__ = [
    "DEFAULT_EXPONENT",
    "AdaptiveThresholdPolicy",
    "AllHDDPolicy",
    "FirstFitPolicy",
    "OccupancyBasis",
    "OraclePolicy",
    "PlacementPolicy",
    "SSDLedger",
    "SmallFilesFirstPolicy",
    "StageHistoryPolicy",
    "check_capacity",
    "oracle_admissions",
]


#: Default ``exponent`` of the adaptive threshold (re-checked by inner validation; module
#: docstring), shared by the policy and the Dask service.
DEFAULT_EXPONENT = 0.5


class OccupancyBasis(str, enum.Enum):
    """Which SSD occupancy the adaptive threshold of a file is taken at (module docstring)."""

    #: The occupancy with the file on the SSD, ``(used + size) / capacity``.
    AFTER = "after"
    #: The occupancy before the file, ``used / capacity``.
    BEFORE = "before"

    def __str__(self) -> str:
        return self.value

    def occupancy(self, used_bytes: int, size_bytes: int, capacity_bytes: int) -> float:
        """Occupancy, in [0, 1], a file of ``size_bytes`` is judged at on an SSD of
        ``capacity_bytes`` holding ``used_bytes`` (1.0 for a zero capacity)."""
        if capacity_bytes <= 0:
            return 1.0
        extra = max(int(size_bytes), 0) if self is OccupancyBasis.AFTER else 0
        return min((used_bytes + extra) / capacity_bytes, 1.0)


@runtime_checkable
class PlacementPolicy(Protocol):
    """Chooses a tier for each file as it is created; told when it is deleted."""

    name: str

    def place(
        self, file_id: Hashable, predicted_log_density: float, size_bytes: int, now: float
    ) -> Tier:
        """Tier of a new file.

        Parameters
        ----------
        file_id : hashable
            Unique id of the file (the simulator uses row positions, a service its file ids).
        predicted_log_density : float
            Predicted log10 I/O density (operations per byte per second); ``NaN`` if unknown.
        size_bytes : int
            Bytes the file is known to need at its creation (its declared or expected
            size; reserved on the SSD if it goes there). A policy whose class sets
            ``knows_outcome = True`` (the oracle) is told the file's final size instead.
        now : float
            Time of creation, in seconds.
        """
        ...

    def release(self, file_id: Hashable, now: float) -> None:
        """The file was deleted at ``now`` (seconds); free what it held."""
        ...

    # Optional: ``settle(file_id, tier, size_bytes)``, where the file actually went and
    # the bytes it holds there, as the storage reports them (the simulator calls it
    # after each SSD request; the live service's ledger gets the same from worker
    # reports). Ledger policies use it to keep their occupancy on real bytes.


def _log10(value: float) -> float:
    """log10 of a non-negative number, ``-inf`` for 0."""
    return math.log10(value) if value > 0 else -math.inf


def _check_occupancy(occupancy: Any) -> float:
    """``occupancy`` as a float; :class:`PlacementConfigError` if it is not finite."""
    u = float(occupancy)
    if not math.isfinite(u):
        raise PlacementConfigError(
            f"occupancy={occupancy!r} must be a finite share of the SSD in [0, 1] "
            "(used bytes / capacity; pass 1.0 for a zero capacity)"
        )
    return u


def check_capacity(ssd_capacity_bytes: Any) -> int:
    """``ssd_capacity_bytes`` as an int of bytes (shared by the ledgers, the oracle, the
    simulator's replay and the bound).

    Raises
    ------
    PlacementTypeError
        (A :class:`TypeError`.) If it is not a number (a bool is not).
    PlacementConfigError
        (A :class:`ValueError`.) If it is not finite or is negative.
    """
    if isinstance(ssd_capacity_bytes, bool) or not isinstance(
        ssd_capacity_bytes, (int, float, np.integer, np.floating)
    ):
        raise PlacementTypeError(
            f"ssd_capacity_bytes={ssd_capacity_bytes!r} must be a number of bytes >= 0"
        )
    if not math.isfinite(ssd_capacity_bytes) or ssd_capacity_bytes < 0:
        raise PlacementConfigError(
            f"ssd_capacity_bytes={ssd_capacity_bytes!r} must be a finite number of bytes >= 0"
        )
    return int(ssd_capacity_bytes)


class SSDLedger:
    """Bytes held on SSD per file, against a capacity in bytes."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = check_capacity(capacity_bytes)
        self.used = 0
        self._held: dict[Hashable, int] = {}

    def fits(self, size_bytes: int) -> bool:
        return self.used + size_bytes <= self.capacity

    def admit(self, file_id: Hashable, size_bytes: int) -> bool:
        """Reserve ``size_bytes`` (>= 0) for ``file_id`` if it fits; returns whether it did.

        Raises
        ------
        PlacementConfigError
            (A :class:`ValueError`.) If ``size_bytes`` is negative: a negative reservation
            would free bytes other files hold.
        """
        if size_bytes < 0:
            raise PlacementConfigError(
                f"size_bytes={size_bytes!r} for file {file_id!r} must be >= 0; "
                "reserve 0 for an empty file"
            )
        if file_id in self._held or not self.fits(size_bytes):
            return False
        self._held[file_id] = size_bytes
        self.used += size_bytes
        return True

    def release(self, file_id: Hashable) -> int:
        """Free what ``file_id`` held (0 if it held nothing); returns the bytes freed."""
        size = self._held.pop(file_id, 0)
        self.used -= size
        return size

    def resize(self, file_id: Hashable, size_bytes: int) -> None:
        """Set what ``file_id`` holds to ``size_bytes`` (no-op if it holds nothing); the
        ledger may then exceed its capacity until files are released."""
        if file_id in self._held:
            size = max(int(size_bytes), 0)
            self.used += size - self._held[file_id]
            self._held[file_id] = size

    @property
    def occupancy(self) -> float:
        """Used share of the capacity (1.0 for a zero capacity)."""
        return self.used / self.capacity if self.capacity else 1.0

    def __contains__(self, file_id: object) -> bool:
        return file_id in self._held

    def __len__(self) -> int:
        return len(self._held)


class _LedgerPolicy:
    """Shared ledger handling: subclasses decide ``_wants_ssd``."""

    name = "ledger"

    def __init__(self, ssd_capacity_bytes: int) -> None:
        self.ledger = SSDLedger(ssd_capacity_bytes)

    def _wants_ssd(
        self, file_id: Hashable, predicted_log_density: float, size_bytes: int, now: float
    ) -> bool:
        raise NotImplementedError

    def place(
        self, file_id: Hashable, predicted_log_density: float, size_bytes: int, now: float
    ) -> Tier:
        size = max(int(size_bytes), 0)
        if (
            self.ledger.fits(size)
            and self._wants_ssd(file_id, predicted_log_density, size, now)
            and self.ledger.admit(file_id, size)
        ):
            return Tier.SSD
        return Tier.HDD

    def release(self, file_id: Hashable, now: float) -> None:
        self.ledger.release(file_id)

    def settle(self, file_id: Hashable, tier: Tier, size_bytes: int) -> None:
        """The file went to ``tier`` holding ``size_bytes``: keep the ledger on real bytes."""
        if tier is Tier.SSD:
            self.ledger.resize(file_id, size_bytes)
        else:
            self.ledger.release(file_id)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.ledger.used}/{self.ledger.capacity} SSD bytes>"


class AllHDDPolicy:
    """Every file on HDD."""

    name = "all-hdd"

    def place(
        self, file_id: Hashable, predicted_log_density: float, size_bytes: int, now: float
    ) -> Tier:
        return Tier.HDD

    def release(self, file_id: Hashable, now: float) -> None:
        return None


class FirstFitPolicy(_LedgerPolicy):
    """SSD whenever the file fits, else HDD."""

    name = "first-fit"

    def _wants_ssd(
        self, file_id: Hashable, predicted_log_density: float, size_bytes: int, now: float
    ) -> bool:
        return True


class AdaptiveThresholdPolicy(_LedgerPolicy):
    """Admit to SSD the files whose predicted density clears an occupancy-driven threshold.

    See the module docstring for the rule.

    Parameters
    ----------
    ssd_capacity_bytes : int
        SSD budget, in bytes.
    window : int, keyword-only
        Recent predictions the threshold is a quantile of (default 4096).
    min_window : int, keyword-only
        Predictions to see before the threshold applies (default 32).
    exponent : float, keyword-only
        Admitted share of recent bytes is ``(1 - occupancy) ** exponent`` (default
        :data:`DEFAULT_EXPONENT`).
    refresh : int, keyword-only
        Placements between re-sorts of the window (default 64).
    occupancy_basis : OccupancyBasis or str, keyword-only
        Occupancy each file's threshold is taken at: ``"before"`` the file is placed
        (default) or ``"after"``.
    cost_model : CostModel or None, keyword-only
        Prices of the break-even test (module docstring): a file whose predicted
        saving on SSD is negative goes to HDD. ``None`` (default): no test.
    expected_lifetime : callable or None, keyword-only
        ``expected_lifetime(file_id)`` is the file's expected lifetime in seconds,
        known when it is created (``NaN`` if unknown); used by the break-even test
        when ``cost_model`` prices wear or transfer. ``None`` (default), or ``NaN``
        for a file: the geometric mean lifetime of the files released so far.

    Raises
    ------
    PlacementTypeError
        (A :class:`TypeError`.) If ``cost_model`` or ``expected_lifetime`` has the wrong
        type, or the capacity is not a number.
    PlacementConfigError
        (A :class:`ValueError`.) If a count (``window``, ``min_window``, ``refresh``) is
        not an int (a bool is not) in its range, ``exponent`` is not a positive finite
        number, or ``occupancy_basis`` is not one of :class:`OccupancyBasis`.
    """

    name = "adaptive-threshold"

    def __init__(
        self,
        ssd_capacity_bytes: int,
        *,
        window: int = 4096,
        min_window: int = 32,
        exponent: float = DEFAULT_EXPONENT,
        refresh: int = 64,
        occupancy_basis: OccupancyBasis | str = OccupancyBasis.BEFORE,
        cost_model: CostModel | None = None,
        expected_lifetime: Callable[[Hashable], float] | None = None,
    ) -> None:
        super().__init__(ssd_capacity_bytes)
        if cost_model is not None and not isinstance(cost_model, CostModel):
            raise PlacementTypeError(
                f"cost_model={cost_model!r} must be a placement.cost.CostModel or None"
            )
        if expected_lifetime is not None and not callable(expected_lifetime):
            raise PlacementTypeError(
                f"expected_lifetime={expected_lifetime!r} must be a callable "
                "(file id -> seconds) or None"
            )
        # bools are ints to Python, but window=True is a mistake, not a window of 1
        for name, value in (("window", window), ("min_window", min_window), ("refresh", refresh)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlacementConfigError(
                    f"{name}={value!r} must be an int (a count of predictions), not "
                    f"{type(value).__name__}"
                )
        if window < 1:
            raise PlacementConfigError(f"window={window!r} must be a positive int")
        if not 0 <= min_window <= window:
            raise PlacementConfigError(
                f"min_window={min_window!r} must be an int in [0, window={window}]"
            )
        if (
            isinstance(exponent, bool)
            or not isinstance(exponent, (int, float))
            or not (math.isfinite(exponent) and exponent > 0)
        ):
            raise PlacementConfigError(
                f"exponent={exponent!r} must be a positive finite number (not a bool)"
            )
        if refresh < 1:
            raise PlacementConfigError(f"refresh={refresh!r} must be a positive int")
        try:
            self.occupancy_basis = OccupancyBasis(occupancy_basis)
        except ValueError:
            raise PlacementConfigError(
                f"occupancy_basis={occupancy_basis!r} must be one of "
                f"{[b.value for b in OccupancyBasis]}"
            ) from None
        self.window = window
        self.min_window = min_window
        self.exponent = float(exponent)
        self.refresh = refresh
        self.cost_model = cost_model
        self.expected_lifetime = expected_lifetime
        # the break-even test: a constant unless the lifetime matters; the lifetimes of
        # released files (creation times of live ones) feed the policy's own estimate
        self._prices_lifetime = cost_model is not None and cost_model.prices_lifetime
        self._static_floor = (
            _log10(cost_model.break_even_density()) if cost_model is not None else -math.inf
        )
        self._born: dict[Hashable, float] = {}
        self._life_log_sum = 0.0
        self._life_count = 0
        # ring buffers of the last ``window`` predictions and sizes
        self._pbuf = np.empty(window)
        self._sbuf = np.empty(window)
        self._count = 0
        self._since_refresh = refresh
        self._sorted = np.empty(0)
        self._cum = np.empty(0)

    def admitted_share(self, occupancy: float | None = None) -> float:
        """Share of recent bytes (densest first) the occupancy admits.

        ``occupancy`` (used share of the SSD, in [0, 1]; values outside are clipped)
        defaults to this policy's own ledger; a service that keeps its ledger elsewhere
        passes its own.

        Raises
        ------
        PlacementConfigError
            (A :class:`ValueError`.) If ``occupancy`` is not finite (``NaN`` would
            otherwise read as an empty SSD).
        """
        u = self.ledger.occupancy if occupancy is None else _check_occupancy(occupancy)
        return (1.0 - min(max(u, 0.0), 1.0)) ** self.exponent

    def threshold(self, now: float | None = None, *, occupancy: float | None = None) -> float:
        """Current admission threshold on the predicted log10 density (``-inf``: admit all).

        ``occupancy`` overrides the policy's own ledger (see :meth:`admitted_share`);
        a non-finite one raises :class:`~placement.errors.PlacementConfigError`, even
        before the window has ``min_window`` predictions.
        """
        if occupancy is not None:
            _check_occupancy(occupancy)
        n = min(self._count, self.window)
        if n < self.min_window or n == 0:
            return -math.inf
        f = self.admitted_share(occupancy)
        if f >= 1.0:
            return -math.inf
        if f <= 0.0:
            return math.inf
        if self._since_refresh >= self.refresh:
            preds, sizes = self._pbuf[:n], self._sbuf[:n]
            order = np.argsort(-preds, kind="stable")  # densest first
            self._sorted = preds[order]
            cum = np.cumsum(sizes[order])
            self._cum = cum / cum[-1]
            self._since_refresh = 0
        k = int(np.searchsorted(self._cum, f, side="left"))
        return float(self._sorted[min(k, len(self._sorted) - 1)])

    def break_even_log_density(self, expected_lifetime_s: float | None = None) -> float:
        """log10 of the density a file needs for SSD to pay off (``-inf`` without a cost model).

        Parameters
        ----------
        expected_lifetime_s : float, optional
            The file's expected lifetime, in seconds. ``None`` or ``NaN``: the policy's
            own estimate (geometric mean lifetime of the files released so far; the
            lifetime-free break-even before any). Ignored when the cost model prices
            neither wear nor transfer.
        """
        cost_model = self.cost_model
        if cost_model is None or not self._prices_lifetime:
            return self._static_floor
        life = math.nan if expected_lifetime_s is None else float(expected_lifetime_s)
        if not (math.isfinite(life) and life > 0):
            if not self._life_count:
                return self._static_floor
            life = 10.0 ** (self._life_log_sum / self._life_count)
        return _log10(cost_model.break_even_density(max(life, MIN_LIFETIME_S)))

    def worth_ssd(self, file_id: Hashable, predicted_log_density: float) -> bool:
        """The break-even test: is the file's predicted saving on SSD non-negative?

        ``predicted_log_density`` is log10 operations per byte per second; the file's
        expected lifetime comes from ``expected_lifetime`` (see the class docstring).
        Always true without a cost model.
        """
        if self.cost_model is None:
            return True
        life = None
        if self._prices_lifetime and self.expected_lifetime is not None:
            life = self.expected_lifetime(file_id)
        return float(predicted_log_density) >= self.break_even_log_density(life)

    def place(
        self, file_id: Hashable, predicted_log_density: float, size_bytes: int, now: float
    ) -> Tier:
        size = max(int(size_bytes), 0)
        pred = float(predicted_log_density)
        if self._prices_lifetime:
            self._born[file_id] = float(now)
        if math.isnan(pred) or pred == -math.inf:  # no prediction, or the sparsest
            return Tier.HDD
        if pred == math.inf:  # the densest: admitted whenever it fits
            return Tier.SSD if self.ledger.admit(file_id, size) else Tier.HDD
        tier = Tier.HDD
        if (
            self.ledger.fits(size)
            and self.worth_ssd(file_id, pred)
            and pred >= self.threshold(now, occupancy=self.occupancy_with(size))
            and self.ledger.admit(file_id, size)
        ):
            tier = Tier.SSD
        self.observe(pred, size)
        return tier

    def release(self, file_id: Hashable, now: float) -> None:
        self.ledger.release(file_id)
        born = self._born.pop(file_id, None)
        if born is not None:
            self._life_log_sum += math.log10(max(float(now) - born, MIN_LIFETIME_S))
            self._life_count += 1

    def occupancy_with(self, size_bytes: int) -> float:
        """Occupancy a file of ``size_bytes`` bytes is judged at, by :attr:`occupancy_basis`
        (the ledger's used share, with the file's bytes added for ``AFTER``; 1.0 for a
        zero capacity)."""
        return self.occupancy_basis.occupancy(self.ledger.used, size_bytes, self.ledger.capacity)

    def observe(self, predicted_log_density: float, size_bytes: int) -> None:
        """Add one file's prediction to the window without placing it.

        A service whose files are placed elsewhere (by workers, under leases) feeds the
        predictions they report here so the threshold follows cluster-wide traffic.
        Non-finite predictions are ignored.
        """
        pred = float(predicted_log_density)
        if not math.isfinite(pred):
            return
        slot = self._count % self.window
        self._pbuf[slot] = pred
        self._sbuf[slot] = max(int(size_bytes), 1)
        self._count += 1
        self._since_refresh += 1


class StageHistoryPolicy(AdaptiveThresholdPolicy):
    """The per-stage history heuristic: the adaptive threshold fed each file's
    (pipeline, stage) mean log density of earlier runs (see
    :func:`placement.features.HistoryStore`) instead of a model's prediction. That
    mean is a density estimate, so it takes the break-even test too (``cost_model``)."""

    name = "stage-history"


class SmallFilesFirstPolicy(AdaptiveThresholdPolicy):
    """Smaller files first.

    With ``max_size_bytes``, files up to that size go to SSD while they fit. Without
    it, the file's predicted density is replaced by ``-log10(size)`` under the adaptive
    threshold, so the smallest files of recent traffic are admitted.
    """

    name = "small-files-first"

    def __init__(
        self, ssd_capacity_bytes: int, *, max_size_bytes: int | None = None, **options: Any
    ) -> None:
        if options.get("cost_model") is not None:
            raise PlacementConfigError(
                "cost_model: small-files-first ranks files by size and has no density "
                "estimate to price; leave cost_model out (use StageHistoryPolicy or "
                "AdaptiveThresholdPolicy for a break-even test)"
            )
        super().__init__(ssd_capacity_bytes, **options)
        if max_size_bytes is not None and (
            isinstance(max_size_bytes, bool)
            or not isinstance(max_size_bytes, int)
            or max_size_bytes < 0
        ):
            raise PlacementConfigError(
                f"max_size_bytes={max_size_bytes!r} must be a non-negative int of bytes "
                "(not a bool) or None"
            )
        self.max_size_bytes = max_size_bytes

    def place(
        self, file_id: Hashable, predicted_log_density: float, size_bytes: int, now: float
    ) -> Tier:
        size = max(int(size_bytes), 0)
        if self.max_size_bytes is not None:
            if size <= self.max_size_bytes and self.ledger.admit(file_id, size):
                return Tier.SSD
            return Tier.HDD
        return super().place(file_id, -math.log10(max(size, 1)), size, now)


class OraclePolicy(_LedgerPolicy):
    """Admits exactly the files of the offline greedy (:func:`oracle_admissions`).

    Parameters
    ----------
    admitted : collection of hashable
        File ids (row positions in a simulation) to put on SSD (those that still fit when
        they arrive).
    ssd_capacity_bytes : int
        SSD budget, in bytes.
    """

    name = "oracle"
    #: The oracle is the limit: it is told each file's final size, not its expected one.
    knows_outcome = True

    def __init__(self, admitted: Any, ssd_capacity_bytes: int) -> None:
        super().__init__(ssd_capacity_bytes)
        self.admitted = frozenset(admitted)

    def _wants_ssd(
        self, file_id: Hashable, predicted_log_density: float, size_bytes: int, now: float
    ) -> bool:
        return file_id in self.admitted

    @classmethod
    def for_table(cls, table: Any, ssd_capacity_bytes: int, cost_model: Any = None) -> OraclePolicy:
        """The oracle of a log table as :func:`placement.simulator.simulate` replays it
        (files named by their row position among the usable rows; ranked by true saving
        per byte-second of SSD under ``cost_model``, profitable files only)."""
        from placement.simulator import Trace

        return Trace.from_table(table).oracle(ssd_capacity_bytes, cost_model)


def oracle_admissions(
    created_at: np.ndarray,
    deleted_at: np.ndarray,
    size_bytes: np.ndarray,
    value: np.ndarray,
    ssd_capacity_bytes: int,
    *,
    min_value: float = -math.inf,
) -> np.ndarray:
    """Offline greedy packing: which files go to SSD, knowing the future.

    Files are taken in decreasing ``value`` (ties: earlier first); each is admitted if,
    at every instant of ``[created_at, deleted_at)``, the bytes already admitted plus
    its size fit in ``ssd_capacity_bytes``. Files with ``value < min_value`` are never
    admitted. Runs in O(n log n) with a lazy segment tree (range add, range max) over
    the distinct event times, in Python: about 20 s per million files.

    Returns
    -------
    numpy.ndarray of bool
        ``True`` for files admitted.
    """
    cap = check_capacity(ssd_capacity_bytes)
    created = np.asarray(created_at, np.float64)
    deleted = np.asarray(deleted_at, np.float64)
    size = np.asarray(size_bytes, np.float64)
    val = np.asarray(value, np.float64)
    n = len(created)
    out = np.zeros(n, dtype=bool)
    if n == 0:  # (with no capacity, empty files still fit)
        return out
    times = np.unique(np.concatenate([created, deleted]))
    lo = np.searchsorted(times, created)
    hi = np.searchsorted(times, deleted)  # interval [lo, hi) of elementary segments
    m = len(times)
    size_tree = 1
    while size_tree < m:
        size_tree *= 2
    mx = [0.0] * (2 * size_tree)
    lz = [0.0] * (2 * size_tree)

    def query(node: int, nl: int, nr: int, left: int, right: int) -> float:
        # max over [left, right) within node covering [nl, nr)
        if right <= nl or nr <= left:
            return -math.inf
        if left <= nl and nr <= right:
            return mx[node]
        mid = (nl + nr) // 2
        return lz[node] + max(
            query(2 * node, nl, mid, left, right), query(2 * node + 1, mid, nr, left, right)
        )

    def add(node: int, nl: int, nr: int, left: int, right: int, v: float) -> None:
        if right <= nl or nr <= left:
            return
        if left <= nl and nr <= right:
            mx[node] += v
            lz[node] += v
            return
        mid = (nl + nr) // 2
        add(2 * node, nl, mid, left, right, v)
        add(2 * node + 1, mid, nr, left, right, v)
        mx[node] = lz[node] + max(mx[2 * node], mx[2 * node + 1])

    order = np.lexsort((created, -np.nan_to_num(val, nan=-np.inf)))
    for i in order.tolist():
        if not val[i] >= min_value or size[i] > cap:
            continue
        left, right = int(lo[i]), max(int(hi[i]), int(lo[i]) + 1)
        right = min(right, m)
        if left >= right:
            continue
        if query(1, 0, size_tree, left, right) + size[i] <= cap:
            add(1, 0, size_tree, left, right, float(size[i]))
            out[i] = True
    return out


def policy_names() -> Mapping[str, type]:
    """Policy classes by name."""
    return {
        c.name: c
        for c in (
            AllHDDPolicy,
            FirstFitPolicy,
            SmallFilesFirstPolicy,
            StageHistoryPolicy,
            AdaptiveThresholdPolicy,
            OraclePolicy,
        )
    }
