"""The worker's leased chooser: boundaries of a lease, early renewals and failed renewals."""

from __future__ import annotations

import math

from placement.service import LeasedChooser
from placement.service.lease import MAX_OBSERVATIONS, Lease, SyncTicket
from placement.tier import Tier
from tests.placement.service.test_service import Clock, Constant, request

MiB = 2**20


def leased(
    allowance: int, *, threshold: float = -math.inf, calls: list[int] | None = None
) -> LeasedChooser:
    """A chooser holding a fresh 5 s lease of ``allowance`` bytes."""
    on_low = None if calls is None else (lambda: calls.append(1))
    chooser = LeasedChooser(clock=Clock(), on_low=on_low)
    chooser.accept(
        chooser.begin_sync(),
        allowance_bytes=allowance,
        threshold=threshold,
        ttl_s=5,
        model_version=0,
    )
    return chooser


def test_a_file_predicted_exactly_at_the_threshold_goes_to_ssd() -> None:
    chooser = leased(4 * MiB, threshold=-5.0)
    chooser.install_predictor(Constant(-5.0))
    assert chooser.choose(request(MiB)) is Tier.SSD
    chooser.install_predictor(Constant(-5.0001))
    assert chooser.choose(request(MiB)) is Tier.HDD


def test_a_file_that_exactly_fills_the_allowance_goes_to_ssd() -> None:
    chooser = leased(2 * MiB)
    assert chooser.choose(request(MiB)) is Tier.SSD
    assert chooser.choose(request(MiB)) is Tier.SSD  # 2 MiB of 2 MiB
    assert chooser.choose(request(1)) is Tier.HDD


def test_the_renewal_asks_for_the_largest_dense_file_that_did_not_fit() -> None:
    chooser = leased(MiB)
    assert chooser.choose(request(4 * MiB)) is Tier.HDD
    assert chooser.choose(request(2 * MiB)) is Tier.HDD
    assert chooser.begin_sync().shortfall_bytes == 4 * MiB


def test_a_lease_runs_from_when_its_renewal_was_sent() -> None:
    clock = Clock()
    chooser = LeasedChooser(clock=clock)
    ticket = chooser.begin_sync()
    clock.now += 3.0  # the answer takes 3 s
    chooser.accept(ticket, allowance_bytes=4 * MiB, threshold=-math.inf, ttl_s=5, model_version=0)
    lease = chooser.lease
    assert lease is not None and lease.expires_at == ticket.sent_at + 5
    clock.now += 2.0  # 5 s after the request
    assert not chooser.has_valid_lease()
    assert chooser.choose(request(MiB)) is Tier.HDD


def test_exactly_half_a_spent_lease_asks_for_an_early_renewal() -> None:
    calls: list[int] = []
    chooser = leased(2 * MiB, calls=calls)
    assert chooser.choose(request(MiB)) is Tier.SSD
    assert calls == [1]


def test_each_new_lease_may_ask_for_an_early_renewal_again() -> None:
    calls: list[int] = []
    chooser = leased(2 * MiB, calls=calls)
    chooser.choose(request(MiB))
    assert calls == [1]
    chooser.accept(
        chooser.begin_sync(),
        allowance_bytes=2 * MiB,
        threshold=-math.inf,
        ttl_s=5,
        model_version=0,
    )
    chooser.choose(request(MiB))
    assert calls == [1, 1]


def test_a_dense_file_too_large_for_the_lease_asks_for_a_renewal_at_once() -> None:
    calls: list[int] = []
    chooser = leased(4 * MiB, calls=calls)
    assert chooser.choose(request(8 * MiB)) is Tier.HDD  # nothing spent yet
    assert calls == [1]


def test_a_failed_renewal_keeps_its_shortfall_for_the_next() -> None:
    chooser = leased(MiB)
    chooser.choose(request(3 * MiB))
    ticket = chooser.begin_sync()
    assert ticket.shortfall_bytes == 3 * MiB
    chooser.restore(ticket)
    assert chooser.begin_sync().shortfall_bytes == 3 * MiB


def test_a_failed_renewal_puts_back_its_newest_predictions_when_room_is_short() -> None:
    chooser = LeasedChooser(clock=Clock())
    older = [(-5.0, i) for i in range(MAX_OBSERVATIONS - 2)]
    chooser.restore(SyncTicket(sent_at=0.0, spent_before=0, observations=older, counts={}))
    failed = [(-6.0, 1), (-6.0, 2), (-6.0, 3)]
    chooser.restore(SyncTicket(sent_at=1.0, spent_before=0, observations=failed, counts={}))
    taken = chooser.begin_sync().observations
    assert len(taken) == MAX_OBSERVATIONS and taken[:2] == [(-6.0, 2), (-6.0, 3)]


def test_files_without_a_finite_prediction_are_not_reported() -> None:
    chooser = leased(4 * MiB)
    for value in (math.nan, -math.inf, math.inf):
        chooser.install_predictor(Constant(value))
        chooser.choose(request(MiB))
    chooser.install_predictor(Constant(-5.0))
    chooser.choose(request(MiB))
    assert chooser.begin_sync().observations == [(-5.0, MiB)]


def test_a_renewal_asks_for_a_missed_file_once() -> None:
    chooser = leased(MiB)
    chooser.choose(request(4 * MiB))
    ticket = chooser.begin_sync()
    assert ticket.shortfall_bytes == 4 * MiB
    chooser.accept(ticket, allowance_bytes=MiB, threshold=-math.inf, ttl_s=5, model_version=0)
    assert chooser.begin_sync().shortfall_bytes == 0


def test_a_negative_allowance_is_no_allowance() -> None:
    lease = leased(-5).lease
    assert lease is not None and lease.allowance_bytes == 0


def test_a_curve_without_a_capacity_falls_back_to_the_flat_threshold() -> None:
    lease = Lease(
        allowance_bytes=MiB,
        threshold=-1.0,
        expires_at=10.0,
        model_version=0,
        curve=(-3.0, 0.0, 3.0),
        used_bytes=0,
        capacity_bytes=0,
    )
    assert lease.threshold_for(0, MiB) == -1.0
