"""A worker's service link: what a renewal sends, and what it keeps when a renewal fails."""

from __future__ import annotations

import asyncio
import logging

import pytest

from placement.service import (
    LeasedChooser,
    LinkConfig,
    PlacementService,
    ServiceConfig,
    ServiceLink,
)
from placement.storage import TieredFileStore
from placement.tier import Tier
from tests.placement.service.test_service import BadPayload, Clock, FakeScheduler, request

MiB = 2**20


def test_a_renewal_asks_for_a_lease_as_large_as_the_dense_file_that_did_not_fit(
    store: TieredFileStore,
) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=64 * MiB))
    scheduler = FakeScheduler(service)
    chooser = LeasedChooser()
    link = ServiceLink(chooser, store, scheduler, "tcp://w:1")
    assert asyncio.run(link.sync_once())
    lease = chooser.lease
    assert lease is not None and lease.allowance_bytes == 32 * MiB  # one worker: half
    assert chooser.choose(request(40 * MiB)) is Tier.HDD  # dense enough, but too large
    assert asyncio.run(link.sync_once())
    assert scheduler.messages[0]["want_bytes"] is None
    assert scheduler.messages[1]["want_bytes"] == 40 * MiB
    lease = chooser.lease
    assert lease is not None and lease.allowance_bytes == 40 * MiB
    assert chooser.choose(request(40 * MiB)) is Tier.SSD


def test_a_lease_exactly_as_long_as_the_renewal_interval_warns(
    store: TieredFileStore, caplog: pytest.LogCaptureFixture
) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB, lease_ttl_s=1.0))
    config = LinkConfig(sync_interval_s=1.0)
    link = ServiceLink(LeasedChooser(), store, FakeScheduler(service), "tcp://w:1", config=config)
    with caplog.at_level(logging.WARNING, logger="placement.service.link"):
        assert asyncio.run(link.sync_once())
    [record] = caplog.records
    assert "leases lapse between renewals" in record.getMessage()


def test_any_other_answer_ends_the_backoff_of_a_scheduler_without_the_service(
    store: TieredFileStore,
) -> None:
    class Scheduler:
        answer: dict | None = None

        async def placement_sync(self, **message: object) -> dict | None:
            return self.answer

    scheduler = Scheduler()
    config = LinkConfig(sync_interval_s=0.5, max_backoff_s=30.0)
    link = ServiceLink(LeasedChooser(), store, scheduler, "tcp://w:1", config=config)

    async def renew(n: int) -> list[bool]:
        return [await link.sync_once() for _ in range(n)]

    assert asyncio.run(renew(3)) == [False] * 3
    assert link.no_service_answers == 3 and link.next_wait_s() == 2.0  # 0.5 s doubled twice
    scheduler.answer = {"refused": "worker tcp://w:1 was removed"}  # a service answers
    assert asyncio.run(renew(1)) == [False]
    assert "refused the renewal" in str(link.last_error)
    assert link.no_service_answers == 0 and link.next_wait_s() == 0.5


def test_a_renewal_whose_lease_arrived_expired_asks_again_for_a_large_enough_lease(
    store: TieredFileStore,
) -> None:
    clock = Clock()
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=64 * MiB, lease_ttl_s=2.0))

    scheduler = FakeScheduler(service, clock)
    chooser = LeasedChooser(clock=clock)
    link = ServiceLink(chooser, store, scheduler, "tcp://w:1", clock=clock)
    assert asyncio.run(link.sync_once())
    assert chooser.choose(request(40 * MiB)) is Tier.HDD  # the 32 MiB lease is too small
    scheduler.slow = True
    assert not asyncio.run(link.sync_once())
    scheduler.slow = False
    assert asyncio.run(link.sync_once())
    assert [m["want_bytes"] for m in scheduler.messages] == [None, 40 * MiB, 40 * MiB]
    lease = chooser.lease
    assert lease is not None and lease.allowance_bytes == 40 * MiB
    assert link.syncs == 2 and link.failures == 1


def test_a_model_version_that_failed_to_install_is_not_tried_again(
    store: TieredFileStore, caplog: pytest.LogCaptureFixture
) -> None:
    link = ServiceLink(LeasedChooser(), store, BadPayload(), "tcp://w:1")  # an older scheduler

    async def renew(n: int) -> list[bool]:
        return [await link.sync_once() for _ in range(n)]

    with caplog.at_level(logging.ERROR, logger="placement.service.link"):
        assert asyncio.run(renew(3)) == [True] * 3
    assert link.model_errors == 1 and link.bad_model_version == 7
    assert len(caplog.records) == 1


def test_a_cancelled_renewal_keeps_its_predictions_for_the_next(store: TieredFileStore) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=64 * MiB))
    scheduler = FakeScheduler(service)
    chooser = LeasedChooser()
    link = ServiceLink(chooser, store, scheduler, "tcp://w:1")

    async def main() -> None:
        assert await link.sync_once()
        assert chooser.choose(request(MiB)) is Tier.SSD
        assert chooser.choose(request(2 * MiB)) is Tier.SSD
        scheduler.stall = asyncio.Event()
        renewal = asyncio.ensure_future(link.sync_once())
        await asyncio.sleep(0.01)  # the report now waits on the stalled scheduler
        assert not renewal.done()
        renewal.cancel()
        with pytest.raises(asyncio.CancelledError):
            await renewal
        scheduler.stall = None
        assert await link.sync_once()

    asyncio.run(main())
    assert service.records["tcp://w:1"].predictions == 2
