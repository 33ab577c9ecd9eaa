"""Training schedules and the rule that switches ``perfect`` from phase 1 to phase 2.

Schedules
---------
``fresh``
    Every epoch draws fresh augmentation from the DALI loader (decode and
    augment every sample, every epoch).
``perfect``
    Phase 1 pre-trains on *repetitive* data: the loader serves fully augmented
    samples from the cache, ``K`` variants reused in turn (epoch ``e`` serves
    variant ``e mod K``), so the input stage is nearly free once a variant is
    filled. Phase 2 fine-tunes on fresh augmentation until the end.
``torch``
    The baseline users come from: a plain :class:`torch.utils.data.DataLoader`
    with PIL transforms, fresh every epoch.

The switch rule (phase 1 -> phase 2)
------------------------------------
After the validation of each phase-1 epoch, :class:`PhaseController` switches
to phase 2 when **either** condition holds (whichever comes first):

1. *Plateau*: validation accuracy has not improved on the best phase-1
   accuracy by at least ``min_delta`` (default 0.002, i.e. 0.2 points) for
   ``patience`` consecutive phase-1 epochs (default 2). A gain of exactly
   ``min_delta`` counts as an improvement (compared with a tolerance of
   ``1e-9``, so that float rounding of accuracies such as 0.811 -> 0.813
   does not decide it).
2. *Budget*: ``budget_epochs(epochs)`` phase-1 epochs have run, that is
   ``max(1, floor(budget_fraction * epochs))`` with ``budget_fraction``
   defaulting to 0.5 (``budget_fraction = 0`` means no phase 1 at all).
   Rounding down keeps the share of phase 1 at or below ``budget_fraction``,
   except that any ``budget_fraction > 0`` buys at least one phase-1 epoch:
   1 epoch at 0.5 is all phase 1 (no phase 2), 4 epochs at 0.1 spend 1 epoch
   (25%) in phase 1. ``budget_fraction = 1`` puts every epoch in phase 1.

Reasoning. The cache holds only ``K`` augmented views of each sample. While
the model still learns from them, each phase-1 epoch buys accuracy at a
fraction of the input cost of a fresh epoch. A validation plateau on this
repeated data means the model has extracted what the ``K`` variants can give:
further epochs would mostly memorise them (the gap to fresh data grows, as
with any small fixed training set). Switching to fresh augmentation then
restores the diversity of an unbounded stream of views, which is what the
remaining accuracy needs. The budget cap guarantees the fine-tuning phase
always gets a share of the epochs, even when validation accuracy keeps
creeping up by more than ``min_delta`` per epoch (and bounds the damage when
validation is noisy). Both thresholds are overridable through
:class:`SwitchRule`; ``patience`` counts epochs because validation runs once
per epoch.

Schedules ``fresh`` and ``torch`` stay in :attr:`Phase.FRESH` for every epoch.
This module is pure logic (no torch, no I/O).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from trainers.errors import TrainerConfigError

#: Tolerance of accuracy comparisons (accuracies are ratios of counts; their float sums round).
ACCURACY_TOLERANCE = 1e-9

__all__ = ["Phase", "PhaseController", "Schedule", "SwitchReason", "SwitchRule"]


class Schedule(str, Enum):
    """Which data each epoch trains on (see the module docstring)."""

    FRESH = "fresh"
    PERFECT = "perfect"
    TORCH = "torch"

    @classmethod
    def parse(cls, value: Schedule | str) -> Schedule:
        """Return the schedule named ``value`` (case-insensitive).

        Raises
        ------
        TrainerConfigError
            ``value`` names no schedule.
        """
        if isinstance(value, Schedule):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            names = ", ".join(s.value for s in cls)
            raise TrainerConfigError(f"unknown schedule {value!r}; choose one of {names}") from None


class Phase(str, Enum):
    """The data an epoch trains on."""

    #: Phase 1 of ``perfect``: cached, repeated augmented variants.
    CACHED = "cached"
    #: Fresh augmentation (phase 2 of ``perfect``; every epoch of ``fresh`` and ``torch``).
    FRESH = "fresh"


class SwitchReason(str, Enum):
    """Why phase 1 ended."""

    PLATEAU = "plateau"
    BUDGET = "budget"


@dataclass(frozen=True)
class SwitchRule:
    """Thresholds of the phase-1 -> phase-2 switch (see the module docstring).

    Parameters
    ----------
    patience : int
        Consecutive phase-1 epochs without an improvement of at least
        ``min_delta`` that trigger the switch (>= 1).
    min_delta : float
        Smallest gain in validation accuracy (a fraction, 0.002 = 0.2 points)
        that counts as an improvement (>= 0).
    budget_fraction : float
        Share of the epoch budget spent in phase 1 at most, in [0, 1]: the
        phase-1 epochs are ``floor(budget_fraction * epochs)``, but at least
        one whenever ``budget_fraction > 0`` (see :meth:`budget_epochs`).
    """

    patience: int = 2
    min_delta: float = 0.002
    budget_fraction: float = 0.5

    def __post_init__(self) -> None:
        if (
            isinstance(self.patience, bool)
            or not isinstance(self.patience, int)
            or self.patience < 1
        ):
            raise TrainerConfigError(
                f"patience must be an integer >= 1 epoch, got {self.patience!r}"
            )
        if not isinstance(self.min_delta, (int, float)) or not 0.0 <= self.min_delta < 1.0:
            raise TrainerConfigError(
                f"min_delta must be an accuracy gain in [0, 1) (0.002 = 0.2 points), "
                f"got {self.min_delta!r}"
            )
        if (
            not isinstance(self.budget_fraction, (int, float))
            or not 0.0 <= self.budget_fraction <= 1.0
        ):
            raise TrainerConfigError(
                f"budget_fraction must be in [0, 1] (share of the epochs in phase 1), "
                f"got {self.budget_fraction!r}"
            )

    def budget_epochs(self, epochs: int) -> int:
        """Largest number of phase-1 epochs for a budget of ``epochs``.

        ``max(1, floor(budget_fraction * epochs))``, or 0 when
        ``budget_fraction`` is 0. For example 10 epochs at 0.5 give 5; 3 epochs
        at 0.5 give 1.
        """
        if self.budget_fraction == 0.0:
            return 0
        return max(1, math.floor(self.budget_fraction * epochs + 1e-9))

    def to_dict(self) -> dict[str, Any]:
        """The thresholds as a JSON-ready dict."""
        return asdict(self)


class PhaseController:
    """Decides the phase of every epoch of a run.

    Call :meth:`observe` once after each epoch's validation; :attr:`phase` is
    then the phase of the next epoch.

    Parameters
    ----------
    schedule : Schedule
        The run's schedule; only ``PERFECT`` has a phase 1.
    epochs : int
        The run's epoch budget (>= 1).
    rule : SwitchRule
        Thresholds of the switch.

    Examples
    --------
    >>> c = PhaseController(Schedule.PERFECT, epochs=10, rule=SwitchRule(patience=2))
    >>> [c.observe(e, acc).value for e, acc in enumerate([0.80, 0.85, 0.851, 0.8505])]
    ['cached', 'cached', 'cached', 'fresh']
    >>> c.switch_epoch, c.switch_reason.value
    (4, 'plateau')
    """

    def __init__(self, schedule: Schedule, *, epochs: int, rule: SwitchRule | None = None) -> None:
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise TrainerConfigError(f"epochs must be an integer >= 1, got {epochs!r}")
        self.schedule = Schedule.parse(schedule)
        self.rule = rule if rule is not None else SwitchRule()
        self.epochs = epochs
        self._budget = self.rule.budget_epochs(epochs)
        has_phase1 = self.schedule is Schedule.PERFECT and self._budget > 0
        self.phase: Phase = Phase.CACHED if has_phase1 else Phase.FRESH
        self.best: float | None = None
        self.stale_epochs = 0
        self.phase1_epochs = 0
        #: First epoch trained in phase 2 (``None`` while in phase 1 or without a phase 1).
        self.switch_epoch: int | None = None
        self.switch_reason: SwitchReason | None = None

    def observe(self, epoch: int, val_accuracy: float) -> Phase:
        """Record the validation accuracy of ``epoch`` and return the next epoch's phase.

        Parameters
        ----------
        epoch : int
            Index of the epoch just validated (0-based).
        val_accuracy : float
            Its validation accuracy, a fraction in [0, 1].
        """
        if self.phase is not Phase.CACHED:
            return self.phase
        self.phase1_epochs += 1
        gain_needed = self.rule.min_delta - ACCURACY_TOLERANCE
        if self.best is None or val_accuracy - self.best >= gain_needed:
            self.best = val_accuracy
            self.stale_epochs = 0
        else:
            self.stale_epochs += 1
            self.best = max(self.best, val_accuracy)
        reason: SwitchReason | None = None
        if self.stale_epochs >= self.rule.patience:
            reason = SwitchReason.PLATEAU
        elif self.phase1_epochs >= self._budget:
            reason = SwitchReason.BUDGET
        if reason is not None:
            self.phase = Phase.FRESH
            self.switch_epoch = epoch + 1
            self.switch_reason = reason
        return self.phase

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume the controller exactly."""
        return {
            "schedule": self.schedule.value,
            "epochs": self.epochs,
            "rule": self.rule.to_dict(),
            "phase": self.phase.value,
            "best": self.best,
            "stale_epochs": self.stale_epochs,
            "phase1_epochs": self.phase1_epochs,
            "switch_epoch": self.switch_epoch,
            "switch_reason": None if self.switch_reason is None else self.switch_reason.value,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state written by :meth:`state_dict` (keeps this controller's rule)."""
        self.phase = Phase(state["phase"])
        self.best = state["best"]
        self.stale_epochs = int(state["stale_epochs"])
        self.phase1_epochs = int(state["phase1_epochs"])
        self.switch_epoch = state["switch_epoch"]
        reason = state["switch_reason"]
        self.switch_reason = None if reason is None else SwitchReason(reason)
