"""The cluster SSD ledger: lease caps, reservations, staleness, occupancy and snapshots."""

from __future__ import annotations

from placement.service import ClusterLedger


def test_a_grant_never_exceeds_the_largest_lease() -> None:
    ledger = ClusterLedger(100)
    assert ledger.grant("a", 90, now=0, ttl_s=5, max_bytes=30) == 30  # 100 free, 30 at most
    assert ledger.committed(0) == 30 and ledger.free(0) == 70


def test_an_expired_reservation_is_not_added_to_a_new_one() -> None:
    ledger = ClusterLedger(100)
    assert ledger.reserve("client", 40, now=0, ttl_s=5)
    assert ledger.reserve("client", 10, now=6, ttl_s=5)  # the first one lapsed at t=5
    share = ledger.share("client")
    assert share is not None and share.reserved == 10
    assert ledger.used(6) == 10 and ledger.free(6) == 90


def test_a_worker_is_forgotten_only_once_its_report_is_older_than_the_limit() -> None:
    ledger = ClusterLedger(100)
    ledger.report("w", 10, now=0)
    assert ledger.expire(20, stale_after_s=20) == [] and "w" in ledger  # exactly 20 s old
    assert ledger.expire(20.5, stale_after_s=20) == ["w"] and "w" not in ledger


def test_a_ledger_without_capacity_is_full() -> None:
    ledger = ClusterLedger(0)
    assert ledger.occupancy() == 1.0 and ledger.snapshot(0)["occupancy"] == 1.0
    assert ledger.grant("w", 10, now=0, ttl_s=5, max_bytes=10) == 0


def test_a_snapshot_shows_only_the_leases_and_reservations_still_in_force() -> None:
    ledger = ClusterLedger(100)
    ledger.report("w", 5, now=0)
    ledger.grant("w", 30, now=0, ttl_s=5, max_bytes=30)
    assert ledger.reserve("w", 20, now=0, ttl_s=3)
    live = ledger.snapshot(2)["workers"]["w"]
    assert (live["used"], live["granted"], live["reserved"]) == (5, 30, 20)
    lapsed = ledger.snapshot(5)
    assert (lapsed["workers"]["w"]["granted"], lapsed["workers"]["w"]["reserved"]) == (0, 0)
    assert lapsed["committed_bytes"] == 5 and lapsed["free_bytes"] == 95


def test_each_reservation_lapses_one_lease_life_after_it_was_made() -> None:
    ledger = ClusterLedger(100)
    assert ledger.reserve("client", 40, now=0, ttl_s=5)
    assert ledger.reserve("client", 10, now=4, ttl_s=5)
    assert ledger.used(4.5) == 50
    assert ledger.used(6) == 10 and ledger.free(6) == 90  # the first lapsed at t=5
    assert ledger.used(9) == 0 and ledger.expire(9) == [] and "client" not in ledger


def test_a_client_deciding_without_pause_holds_only_its_last_lease_life() -> None:
    ledger = ClusterLedger(1000)
    for t in range(100):  # one 10-byte file a second, reservations of 5 s
        assert ledger.reserve("client", 10, now=t, ttl_s=5)
    assert ledger.used(99) == 50  # those made at t = 95..99
    share = ledger.share("client")
    assert share is not None and share.reserved == 50 and len(share.reservations) == 5
    assert ledger.report("client", 0, now=99) and ledger.used(99) == 0


def test_reservations_made_at_the_same_time_share_an_entry() -> None:
    ledger = ClusterLedger(1000)
    for size in (10, 20, 30):  # one batch
        assert ledger.reserve("client", size, now=1, ttl_s=5)
    assert ledger.reserve("client", 5, now=0.5, ttl_s=5)  # made earlier, lapses first
    share = ledger.share("client")
    assert share is not None and share.reservations == [(5.5, 5), (6.0, 60)]
    assert ledger.used(5.5) == 60 and ledger.used(6) == 0
