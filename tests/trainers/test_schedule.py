"""The phase-switch rule of the perfect schedule (pure logic)."""

from __future__ import annotations

import pytest

from trainers import Phase, PhaseController, Schedule, SwitchReason, SwitchRule, TrainerConfigError


def _run(controller: PhaseController, accuracies: list[float]) -> list[str]:
    """Phase of each epoch when the given validation accuracies are observed."""
    phases = []
    for epoch, acc in enumerate(accuracies):
        phases.append(controller.phase.value)
        controller.observe(epoch, acc)
    return phases


def test_plateau_switches_after_patience_epochs_without_min_delta_gain() -> None:
    c = PhaseController(Schedule.PERFECT, epochs=20, rule=SwitchRule(patience=2, min_delta=0.01))
    # 0.70 -> 0.75 improves; 0.755 and 0.759 are below +0.01: plateau after 2 stale epochs
    phases = _run(c, [0.70, 0.75, 0.755, 0.759, 0.80, 0.81])
    assert phases == ["cached"] * 4 + ["fresh"] * 2
    assert c.switch_epoch == 4 and c.switch_reason is SwitchReason.PLATEAU


def test_improvement_resets_the_patience_counter() -> None:
    c = PhaseController(Schedule.PERFECT, epochs=20, rule=SwitchRule(patience=2, min_delta=0.01))
    _run(c, [0.70, 0.705, 0.72, 0.725, 0.74])  # stale, better, stale, better
    assert c.phase is Phase.CACHED and c.stale_epochs == 0


def test_small_gains_do_not_accumulate_into_an_improvement() -> None:
    # 0.001 per epoch never reaches min_delta over the best: a plateau, although accuracy rises
    c = PhaseController(Schedule.PERFECT, epochs=20, rule=SwitchRule(patience=3, min_delta=0.002))
    _run(c, [0.80, 0.801, 0.802, 0.8015])
    assert c.switch_reason is SwitchReason.PLATEAU and c.switch_epoch == 4


def test_budget_switches_when_accuracy_keeps_improving() -> None:
    c = PhaseController(Schedule.PERFECT, epochs=10, rule=SwitchRule(budget_fraction=0.3))
    phases = _run(c, [0.5, 0.6, 0.7, 0.8, 0.9])
    assert phases == ["cached"] * 3 + ["fresh"] * 2
    assert c.switch_epoch == 3 and c.switch_reason is SwitchReason.BUDGET


def test_whichever_comes_first_plateau_before_budget() -> None:
    c = PhaseController(
        Schedule.PERFECT, epochs=10, rule=SwitchRule(patience=1, budget_fraction=0.5)
    )
    _run(c, [0.5, 0.5, 0.9])
    assert c.switch_epoch == 2 and c.switch_reason is SwitchReason.PLATEAU


@pytest.mark.parametrize(
    ("fraction", "epochs", "budget"),
    [(0.5, 10, 5), (0.5, 3, 1), (0.01, 10, 1), (1.0, 4, 4), (0.0, 9, 0)],
)
def test_budget_epochs(fraction: float, epochs: int, budget: int) -> None:
    assert SwitchRule(budget_fraction=fraction).budget_epochs(epochs) == budget


def test_zero_budget_means_no_phase_one() -> None:
    c = PhaseController(Schedule.PERFECT, epochs=5, rule=SwitchRule(budget_fraction=0.0))
    assert _run(c, [0.5, 0.6]) == ["fresh", "fresh"]
    assert c.switch_epoch is None


@pytest.mark.parametrize("schedule", [Schedule.FRESH, Schedule.TORCH])
def test_fresh_and_torch_never_use_the_cache(schedule: Schedule) -> None:
    c = PhaseController(schedule, epochs=4)
    assert _run(c, [0.5, 0.5, 0.5, 0.5]) == ["fresh"] * 4
    assert c.switch_epoch is None


def test_state_round_trip_continues_identically() -> None:
    rule = SwitchRule(patience=2, min_delta=0.01)
    a = PhaseController(Schedule.PERFECT, epochs=20, rule=rule)
    _run(a, [0.70, 0.75, 0.755])
    b = PhaseController(Schedule.PERFECT, epochs=20, rule=rule)
    b.load_state_dict(a.state_dict())
    assert a.observe(3, 0.757) is b.observe(3, 0.757) is Phase.FRESH
    assert a.state_dict() == b.state_dict()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"patience": 0}, "patience must be an integer >= 1"),
        ({"patience": 1.5}, "patience must be an integer"),
        ({"min_delta": -0.1}, "min_delta must be an accuracy gain"),
        ({"min_delta": 2}, "min_delta must be an accuracy gain"),
        ({"budget_fraction": 1.5}, "budget_fraction must be in"),
    ],
)
def test_bad_rules_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(TrainerConfigError, match=match):
        SwitchRule(**kwargs)


def test_schedule_parse() -> None:
    assert Schedule.parse("PERFECT") is Schedule.PERFECT
    with pytest.raises(TrainerConfigError, match="choose one of fresh, perfect, torch"):
        Schedule.parse("lazy")
    with pytest.raises(TrainerConfigError, match="epochs must be"):
        PhaseController(Schedule.FRESH, epochs=0)


def test_a_gain_of_exactly_min_delta_counts_despite_float_rounding() -> None:
    c = PhaseController(Schedule.PERFECT, epochs=10, rule=SwitchRule(patience=1, min_delta=0.002))
    c.observe(0, 0.811)
    c.observe(1, 0.813)  # 0.813 < 0.811 + 0.002 in floats
    assert c.switch_reason is None and c.phase is Phase.CACHED
    n = 10000
    for k in range(0, n - 20, 7):  # every accuracy k/n followed by a gain of 20/n = 0.002
        c = PhaseController(
            Schedule.PERFECT, epochs=10, rule=SwitchRule(patience=1, min_delta=0.002)
        )
        c.observe(0, k / n)
        c.observe(1, (k + 20) / n)
        assert c.switch_reason is None, (k / n, (k + 20) / n)
    assert c.best is not None
    c.observe(2, c.best + 0.0019)  # a gain below min_delta still ends phase 1
    assert c.switch_reason is SwitchReason.PLATEAU
