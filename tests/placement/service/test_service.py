"""The placement service's plain classes, without a cluster: config, ledger, predictor,
scheduler-side service, worker-side leased chooser and its link (with a stand-in RPC)."""

from __future__ import annotations

import asyncio
import logging
import math
import pickle
import re
import threading
import time
from pathlib import Path

import dask
import numpy as np
import pytest

from placement.errors import ModelError
from placement.features import HistoryStore, features_from_request
from placement.model import ModelSet
from placement.service import (
    ClusterLedger,
    LeasedChooser,
    LinkConfig,
    PlacementSchedulerPlugin,
    PlacementService,
    Predictor,
    ServiceConfig,
    ServiceConfigError,
    ServiceError,
    ServiceLink,
)
from placement.service import ledger as ledger_module
from placement.service.errors import StaleReport, WorkerRemoved
from placement.service.service import STALE_LEASES
from placement.storage import FileRequest, FixedTier, TieredFileStore
from placement.tier import Tier
from tests.placement.logtables import make_log
from tests.placement.waiting import until

MiB = 2**20


class Clock:
    """A hand-driven monotonic clock (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(size: int | None = MiB, kind: str = "spill", pipeline: str = "pipe0") -> FileRequest:
    return FileRequest(
        file_kind=kind,
        created_at=time.time(),
        pipeline=pipeline,
        stage="shuffle-p2p",
        expected_size_bytes=size,
    )


# ---------------------------------------------------------------------- configuration
def test_config_requires_a_budget_and_names_the_key() -> None:
    with (
        dask.config.set({"placement.ssd-capacity": None}),
        pytest.raises(ServiceConfigError, match="placement.ssd-capacity is not set.*20GiB"),
    ):
        ServiceConfig.from_dask_config()
    with (
        dask.config.set({"placement.ssd-capacity": "lots"}),
        pytest.raises(ServiceConfigError, match="'lots' is not a size"),
    ):
        ServiceConfig.from_dask_config()


def test_config_reads_dask_keys(tmp_path: Path) -> None:
    settings = {
        "placement.ssd-capacity": "2GiB",
        "placement.model": str(tmp_path / "m"),
        "placement.log-dir": str(tmp_path / "logs"),
        "placement.service.lease-ttl": "250ms",
        "placement.service.lease-fraction": 0.5,
        "placement.service.sync-interval": "20ms",
        "placement.service.unknown-size": "1MiB",
    }
    with dask.config.set(settings):
        config = ServiceConfig.from_dask_config()
        link = LinkConfig.from_dask_config()
    assert config.ssd_capacity_bytes == 2 * 2**30 and config.lease_ttl_s == 0.25
    assert config.model_path == str(tmp_path / "m") and config.log_dir == str(tmp_path / "logs")
    assert config.max_lease_bytes(4) == 2**30
    assert link.sync_interval_s == 0.02 and link.unknown_size_bytes == MiB
    # default lease: 1 / (2 n) of the budget
    assert ServiceConfig(ssd_capacity_bytes=800).max_lease_bytes(4) == 100


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ssd_capacity_bytes": -1}, "not a size"),
        ({"ssd_capacity_bytes": 10, "lease_ttl_s": 0}, "positive duration"),
        ({"ssd_capacity_bytes": 10, "lease_fraction": 1.5}, r"must be in \(0, 1\]"),
        ({"ssd_capacity_bytes": 10, "occupancy_basis": "during"}, "occupancy_basis"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict, match: str) -> None:
    with pytest.raises(ServiceConfigError, match=match):
        ServiceConfig(**kwargs)


def test_link_config_rejects_bad_values() -> None:
    with pytest.raises(ServiceConfigError, match="sync-timeout"):
        LinkConfig(sync_timeout_s=-1)
    with pytest.raises(ServiceConfigError, match="unknown-size"):
        LinkConfig(unknown_size_bytes=-5)


@pytest.mark.parametrize(
    ("cls", "kwargs", "field", "expected"),
    [
        (ServiceConfig, {"ssd_capacity_bytes": "20GiB"}, "ssd_capacity_bytes", 20 * 2**30),
        (ServiceConfig, {"ssd_capacity_bytes": MiB, "lease_ttl_s": "2s"}, "lease_ttl_s", 2.0),
        (LinkConfig, {"sync_interval_s": "250ms"}, "sync_interval_s", 0.25),
        (LinkConfig, {"sync_timeout_s": "1s"}, "sync_timeout_s", 1.0),
        (LinkConfig, {"unknown_size_bytes": "1MiB"}, "unknown_size_bytes", MiB),
    ],
)
def test_config_strings_are_parsed_at_construction(
    cls: type, kwargs: dict, field: str, expected: float
) -> None:
    for config in (cls(**kwargs), cls.from_dask_config(**kwargs)):
        value = getattr(config, field)
        assert value == expected and type(value) is type(expected)
    assert ServiceConfig(ssd_capacity_bytes="1KiB").max_lease_bytes(2) == 256


@pytest.mark.parametrize(
    ("cls", "kwargs", "key"),
    [
        (ServiceConfig, {"ssd_capacity_bytes": "lots"}, "placement.ssd-capacity"),
        (ServiceConfig, {"ssd_capacity_bytes": 1, "lease_ttl_s": "later"}, "lease-ttl"),
        (LinkConfig, {"sync_interval_s": "soon"}, "sync-interval"),
        (LinkConfig, {"sync_timeout_s": "1 fortnight"}, "sync-timeout"),
        (LinkConfig, {"unknown_size_bytes": "big"}, "unknown-size"),
    ],
)
def test_config_refuses_strings_that_are_not_numbers(cls: type, kwargs: dict, key: str) -> None:
    with pytest.raises(ServiceConfigError, match=rf"{key}=.*(such as|bytes)"):
        cls(**kwargs)


# ---------------------------------------------------------------------- ledger
def test_ledger_never_lends_more_than_is_free_and_reconciles_on_reports() -> None:
    ledger = ClusterLedger(100)
    assert ledger.grant("a", 30, now=0, ttl_s=5, max_bytes=30) == 30
    assert ledger.grant("b", 90, now=0, ttl_s=5, max_bytes=90) == 70  # only 70 free
    assert ledger.free(0) == 0 and ledger.grant("c", 10, now=0, ttl_s=5, max_bytes=10) == 0
    ledger.report("a", 25, now=1)  # a placed 25 bytes; its new lease replaces the old one
    assert ledger.grant("a", 30, now=1, ttl_s=5, max_bytes=30) == 5
    assert ledger.used() == 25 and ledger.committed(1) == 100
    # leases expire: b's 70 bytes are free again after its ttl (a's lease runs to t=6)
    assert ledger.committed(5.5) == 25 + 5 and ledger.free(5.5) == 70
    assert ledger.free(6) == 75
    # a worker whose files outgrew its lease puts the cluster over budget: nothing is lent
    ledger.report("b", 80, now=7)
    assert ledger.grant("b", 30, now=7, ttl_s=5, max_bytes=30) == 0
    assert ledger.free(7) < 0 and ledger.occupancy(7) > 1.0
    # a worker that leaves takes its bytes with it
    share = ledger.remove("b")
    assert share is not None and share.used == 80 and "b" not in ledger
    assert ledger.used() == 25


def test_ledger_reserves_for_service_decisions_until_the_next_report() -> None:
    ledger = ClusterLedger(10)
    assert ledger.reserve("w", 6, now=0, ttl_s=5) and not ledger.reserve("w", 6, now=0, ttl_s=5)
    assert ledger.used() == 6
    ledger.report("w", 6, now=0)  # the file is in the worker's report now: counted once
    assert ledger.used() == 6 and ledger.share("w").reserved == 0
    # a requester that never reports holds its reservation for one lease life only
    assert ledger.reserve("client", 4, now=0, ttl_s=5) and ledger.free(1) == 0
    ledger.expire(1)
    assert "client" in ledger
    assert ledger.free(5) == 4 and ledger.used(5) == 6
    ledger.expire(5)
    assert "client" not in ledger and "w" in ledger
    with pytest.raises(ServiceError, match="non-negative int"):
        ledger.report("w", -1, now=0)
    with pytest.raises(ServiceError, match="address"):
        ledger.report("", 1, now=0)


def test_ledger_forgets_a_worker_that_stopped_reporting() -> None:
    ledger = ClusterLedger(100)
    ledger.report("gone", 30, now=0)
    ledger.report("live", 20, now=10)
    ledger.grant("gone", 10, now=0, ttl_s=25, max_bytes=10)
    assert ledger.expire(21, stale_after_s=20) == [] and "gone" in ledger  # its lease holds
    ledger.report("live", 20, now=21)
    assert ledger.expire(26, stale_after_s=20) == ["gone"]
    assert ledger.workers() == ["live"] and ledger.used() == 20
    assert ledger.expire(1e9) == [] and "live" in ledger  # no limit: reporters stay


def test_ledger_ignores_a_report_overtaken_by_a_later_one() -> None:
    ledger = ClusterLedger(100)
    assert ledger.report("w", 30, now=1, incarnation="i1", seq=2)
    assert ledger.grant("w", 20, now=1, ttl_s=5, max_bytes=20) == 20
    before = ledger.snapshot(3)
    # report 1 was sent before report 2 but lands after it: nothing changes
    assert not ledger.report("w", 80, now=3, incarnation="i1", seq=1)
    assert not ledger.report("w", 80, now=3, incarnation="i1", seq=2)  # a duplicate too
    assert ledger.snapshot(3) == before and ledger.share("w").last_report == 1
    assert before["workers"]["w"]["seq"] == 2 and before["workers"]["w"]["reports"] == 1
    assert ledger.is_stale("w", incarnation="i1", seq=2)
    assert not ledger.is_stale("w", incarnation="i1", seq=3)
    assert ledger.report("w", 40, now=4, incarnation="i1", seq=5)  # gaps are fine
    assert ledger.used() == 40 and ledger.applied_seq("w", "i1") == 5
    # a restarted worker at the same address numbers afresh under a new incarnation
    assert ledger.report("w", 10, now=5, incarnation="i2", seq=1)
    assert ledger.used() == 10 and ledger.applied_seq("w", "i1") == 0
    # an unnumbered report (an older worker) is applied as it comes, and keeps the number
    assert ledger.report("w", 7, now=6)
    assert ledger.used() == 7 and not ledger.report("w", 9, now=7, incarnation="i2", seq=1)
    assert ledger.applied_seq("unknown", "i1") == 0


def test_a_report_of_another_incarnation_never_locks_the_live_one_out() -> None:
    """Without a removal the ledger cannot tell which incarnation is newer: reports are
    applied as they come, and none retires another, so a late report of an old process
    (whose share was forgotten as silent) is corrected by the live one's next report."""
    ledger = ClusterLedger(100)
    assert ledger.report("w", 10, now=1, incarnation="new", seq=1)
    assert ledger.report("w", 60, now=2, incarnation="old", seq=8)  # late, applied
    assert not ledger.is_retired("w", "new") and not ledger.is_retired("w", "old")
    assert ledger.report("w", 12, now=3, incarnation="new", seq=2)
    assert ledger.used() == 12 and ledger.applied_seq("w", "new") == 2


def test_a_removed_workers_incarnation_stays_retired_when_its_address_returns() -> None:
    ledger = ClusterLedger(100)
    assert ledger.report("w", 50, now=1, incarnation="old", seq=3)
    assert not ledger.is_retired("w", "old")
    assert ledger.remove("w").used == 50
    assert ledger.is_retired("w", "old") and not ledger.is_retired("v", "old")
    # the restarted worker at the same address reports first, then the old one's last
    assert ledger.report("w", 10, now=2, incarnation="new", seq=1)
    before = ledger.snapshot(3)
    assert ledger.is_stale("w", incarnation="old", seq=4)
    assert not ledger.report("w", 60, now=3, incarnation="old", seq=4)
    assert ledger.snapshot(3) == before and ledger.share("w").incarnation == "new"
    assert ledger.report("w", 12, now=4, incarnation="new", seq=2) and ledger.used() == 12
    # an unnumbered last report leaves nothing to retire
    assert ledger.report("u", 5, now=5) and ledger.remove("u") is not None
    assert ledger.remove("unknown") is None and not ledger.is_retired("u", "old")


def test_retired_incarnations_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_module, "MAX_RETIRED", 2)
    ledger = ClusterLedger(100)
    for i in range(3):  # incarnations 0, 1 and 2 of w are removed in turn
        assert ledger.report("w", i, now=i, incarnation=f"i{i}", seq=1)
        ledger.remove("w")
    assert [ledger.is_retired("w", f"i{i}") for i in range(3)] == [False, True, True]
    # i0 was forgotten: a late report of it is taken for a new incarnation's
    assert ledger.report("w", 40, now=5, incarnation="i0", seq=2)
    assert ledger.used() == 40 and ledger.is_retired("w", "i2")


@pytest.mark.parametrize(
    ("incarnation", "seq", "match"),
    [
        ("i1", None, "seq=None must be an int >= 1"),
        (None, 1, "incarnation=None must be a non-empty string"),
        ("", 1, "incarnation='' must"),
        ("i1", 0, "seq=0 must"),
        ("i1", True, "seq=True must"),
        ("i1", 1.0, "seq=1.0 must"),
    ],
)
def test_ledger_refuses_a_malformed_report_number(
    incarnation: object, seq: object, match: str
) -> None:
    ledger = ClusterLedger(100)
    with pytest.raises(ServiceError, match=re.escape(match)):
        ledger.report("w", 1, now=0, incarnation=incarnation, seq=seq)  # type: ignore[arg-type]
    assert "w" not in ledger


# ---------------------------------------------------------------------- predictor
def test_predictor_without_a_model_ranks_smaller_files_denser() -> None:
    p = Predictor()
    assert p.kind == "size-heuristic" and p.version == 0
    assert p.predict(request(), 1000) > p.predict(request(), 10_000) == pytest.approx(-4.0)
    np.testing.assert_allclose(p.predict_many([request(), request()], [10, 100]), [-1.0, -2.0])


def test_predictor_with_a_model_matches_the_model_and_round_trips(model_dir: Path) -> None:
    models = ModelSet.load(model_dir)
    history = HistoryStore.from_table(make_log(seed=3))
    p = Predictor(models, history.snapshot(), version=3, source=str(model_dir))
    req = request()
    expected = models.global_model.predict_one(features_from_request(req, history))
    assert p.predict(req, MiB) == pytest.approx(expected)
    assert p.predict_many([req], [MiB])[0] == pytest.approx(expected)
    back = Predictor.from_bytes(p.to_bytes())
    assert back.version == 3 and back.predict(req, MiB) == pytest.approx(expected)
    assert p.describe()["trees"] == 20 and p.describe()["history_runs"] == 16
    with pytest.raises(ModelError, match="unreadable model payload"):
        Predictor.from_bytes(b"not a pickle")


def test_reserved_size_is_the_expected_size_corrected_by_history() -> None:
    log = make_log(seed=3).to_pandas()
    shuffle = log["file_kind"] == "shuffle"
    log.loc[shuffle, "expected_size_bytes"] = log.loc[shuffle, "size_bytes"] // 10  # grew 10x
    history = HistoryStore.from_table(log).snapshot()
    with_history = Predictor(history=history)
    # the request's stage is the log's shuffle stage: its files ended 10x their expected size
    assert with_history.expected_size(request(MiB, kind="shuffle")) == pytest.approx(
        10 * MiB, rel=0.01
    )
    unknown = with_history.expected_size(request(None, kind="shuffle"))
    assert unknown == pytest.approx(10 ** history.lookup("pipe0", "shuffle-p2p")["h_ps_lsize"])
    # without history: the request's own expected size, or unknown
    assert Predictor().expected_size(request(MiB)) == MiB
    assert Predictor().expected_size(request(None)) is None
    # the worker's chooser reserves that much against its lease
    chooser = LeasedChooser(unknown_size_bytes=123)
    assert chooser.estimate(request(None)) == 123
    chooser.install_predictor(with_history)
    assert chooser.estimate(request(MiB, kind="shuffle")) == pytest.approx(10 * MiB, rel=0.01)


# ---------------------------------------------------------------------- scheduler-side service
def test_sync_lends_a_lease_and_records_the_report() -> None:
    clock = Clock()
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB), clock=clock)
    reply = service.sync(
        worker="w1", used_bytes=0, observations=[[-5.0, MiB]], counters={"decisions_ssd": 3}
    )
    assert reply["allowance"] == 50 * MiB  # one worker: half the budget
    assert reply["threshold"] == -math.inf  # an empty SSD admits anything that fits
    assert reply["ttl"] == 5.0 and reply["model_version"] == 0 and reply["predictor"] is None
    state = service.state()
    assert (
        state["workers"]["w1"]["decisions_ssd"] == 3 and state["workers"]["w1"]["predictions"] == 1
    )
    assert state["ledger"]["committed_bytes"] == 50 * MiB


def test_threshold_rises_as_the_ssd_fills() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB))
    preds = [[float(x), MiB] for x in np.linspace(-9, -3, 64)]
    service.sync(worker="w", used_bytes=0, observations=preds)
    assert service.threshold() == -math.inf
    service.sync(worker="w", used_bytes=75 * MiB)  # 75% full: only the densest half of bytes
    assert service.threshold() == pytest.approx(-6.0, abs=0.2)
    service.sync(worker="w", used_bytes=100 * MiB)
    assert service.threshold() == math.inf


def service_curve_is_off_by_default() -> bool:
    """The default (BEFORE) service lends one threshold, no curve."""
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB))
    reply = service.sync(worker="w", used_bytes=0, observations=[[-5.0, MiB]] * 64)
    return reply.get("curve") is None and service.threshold_curve() is None


def test_a_lease_judges_each_file_at_the_occupancy_it_would_leave() -> None:
    """The lease carries the policy's threshold curve: a worker admits the same small
    files as before, but a file that would fill most of the SSD must be among the
    densest, and the bytes it placed under the lease count."""
    from placement.service.service import CURVE_POINTS

    assert service_curve_is_off_by_default()
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB, occupancy_basis="after"))
    preds = [[float(x), MiB] for x in np.linspace(-9, -3, 64)]
    reply = service.sync(worker="w", used_bytes=0, observations=preds)
    curve = reply["curve"]
    assert len(curve) == CURVE_POINTS and (reply["used"], reply["capacity"]) == (0, 100 * MiB)
    assert curve == sorted(curve) and curve[0] == -math.inf and curve[-1] == math.inf
    assert reply["threshold"] == -math.inf  # the occupancy before any file: empty
    assert service.threshold(75 * MiB) == pytest.approx(curve[24])  # 75% is point 24 of 32

    def leased(with_curve: bool) -> LeasedChooser:
        chooser = LeasedChooser(clock=Clock())
        chooser.accept(
            chooser.begin_sync(),
            allowance_bytes=100 * MiB,
            threshold=reply["threshold"],
            ttl_s=5,
            model_version=0,
            curve=curve if with_curve else None,
            used_bytes=reply["used"],
            capacity_bytes=reply["capacity"],
        )
        return chooser

    flat = leased(False)
    assert flat.choose(request(60 * MiB)) is Tier.SSD  # one threshold: -inf on an empty SSD
    judged = leased(True)
    assert judged.choose(request(MiB)) is Tier.SSD  # small: admitted as before
    assert judged.choose(request(60 * MiB)) is Tier.HDD  # would leave the SSD 61% full
    assert judged.choose(request(20 * MiB)) is Tier.SSD  # 22% full after it
    assert judged.choose(request(20 * MiB)) is Tier.SSD  # 42%
    assert judged.choose(request(20 * MiB)) is Tier.HDD  # 62%: no longer dense enough
    lease = judged.lease
    assert lease is not None and lease.threshold_for(0, 0) == curve[0]
    assert lease.threshold_for(41 * MiB, 20 * MiB) == curve[20]  # 61/100 rounds up to 20/32


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"worker": "", "used_bytes": 0}, "address"),
        ({"worker": "w", "used_bytes": -3}, "non-negative"),
        ({"worker": "w", "used_bytes": 0, "observations": [[1.0]]}, "pair"),
        ({"worker": "w", "used_bytes": 0, "observations": [["x", 1]]}, "number"),
        ({"worker": "w", "used_bytes": 0, "counters": {"a": "b"}}, "number"),
        ({"worker": "w", "used_bytes": 0, "want_bytes": -1}, "want_bytes"),
        ({"worker": "w", "used_bytes": 0, "bad_model_version": "1"}, "bad_model_version"),
        ({"worker": "w", "used_bytes": 0, "seq": 1}, "incarnation"),
        ({"worker": "w", "used_bytes": 0, "incarnation": "i", "seq": -1}, "seq"),
        (
            {"worker": "w", "used_bytes": 0, "observations": [[1.0, 1]], "observation_seqs": [-1]},
            "observation_seqs",
        ),
    ],
)
def test_malformed_reports_are_refused_and_not_recorded(message: dict, match: str) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    with pytest.raises(ServiceError, match=match):
        service.sync(**message)
    assert service.records == {} and len(service.ledger) == 0


def test_a_report_overtaken_by_a_later_one_changes_nothing() -> None:
    clock = Clock()
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB), clock=clock)
    number = {"incarnation": "i1"}
    service.sync(worker="w", used_bytes=10 * MiB, seq=2, observations=[[-5.0, MiB]], **number)
    before = (service.state(), service.threshold_curve(), service.policy.threshold(0.9))
    clock.now += 1
    with pytest.raises(StaleReport, match="report 1 of worker w arrived after its report 2"):
        service.sync(
            worker="w",
            used_bytes=70 * MiB,
            seq=1,
            observations=[[-1.0, 50 * MiB]] * 20,
            want_bytes=60 * MiB,
            counters={"decisions_ssd": 9},
            **number,
        )
    state = service.state()
    assert state["stale_reports"] == 1
    state["stale_reports"] = 0
    # neither its usage, nor a new lease, nor its predictions or counters were recorded
    assert (state, service.threshold_curve(), service.policy.threshold(0.9)) == before
    assert service.sync(worker="w", used_bytes=20 * MiB, seq=3, **number)["used"] == 20 * MiB


def test_a_prediction_sent_again_after_a_failed_renewal_is_counted_once() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB))
    number = {"worker": "w", "used_bytes": 0, "incarnation": "i1"}
    a, b, c = [-5.0, MiB], [-6.0, MiB], [-7.0, MiB]
    service.sync(seq=1, observations=[a, b], observation_seqs=[1, 1], **number)
    # report 1 was applied, but its answer was lost: report 2 carries a and b again
    service.sync(seq=2, observations=[a, b, c], observation_seqs=[1, 1, 2], **number)
    assert service.records["w"].predictions == 3
    # report 3 was lost on its way: report 4 sends its prediction, and that one counts
    service.sync(seq=4, observations=[a, c], observation_seqs=[3, 4], **number)
    assert service.records["w"].predictions == 5
    # a new incarnation (a restarted worker) has counted nothing yet
    service.sync(seq=1, observations=[a], observation_seqs=[1], **{**number, "incarnation": "i2"})
    assert service.records["w"].predictions == 6
    with pytest.raises(ServiceError, match="observation_seqs must be a list of ints >= 0, one"):
        service.sync(seq=2, observations=[a, b], observation_seqs=[1], **number)
    assert service.records["w"].predictions == 6


def test_a_worker_asks_for_a_lease_big_enough_for_a_dense_file() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB, lease_fraction=0.1))
    assert service.sync(worker="w", used_bytes=0)["allowance"] == 10 * MiB
    assert service.sync(worker="w", used_bytes=0, want_bytes=40 * MiB)["allowance"] == 40 * MiB
    assert (
        service.sync(worker="w", used_bytes=90 * MiB, want_bytes=40 * MiB)["allowance"] == 10 * MiB
    )


def test_departed_workers_release_their_share() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB))
    service.sync(worker="w1", used_bytes=30 * MiB)
    service.sync(worker="w2", used_bytes=10 * MiB)
    service.remove_worker("w1")
    state = service.state()
    assert set(state["ledger"]["workers"]) == {"w2"} and state["ledger"]["used_bytes"] == 10 * MiB
    assert state["departed_workers"] == 1 and set(state["workers"]) == {"w2"}


def test_a_removed_worker_cannot_recreate_its_share() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB), clock=Clock())
    service.sync(worker="a", used_bytes=0)
    service.sync(worker="b", used_bytes=40 * MiB)
    service.remove_worker("b")
    # a renewal that was on its way when the scheduler removed b
    with pytest.raises(WorkerRemoved, match="b was removed.*Restart the worker"):
        service.sync(worker="b", used_bytes=40 * MiB)
    assert service.ledger.workers() == ["a"] and service.ledger.used() == 0
    assert set(service.state()["workers"]) == {"a"}
    service.add_worker("b")  # a new worker at the same address is accepted
    assert service.sync(worker="b", used_bytes=MiB)["allowance"] > 0
    assert service.ledger.share("b").used == MiB


def test_a_late_renewal_of_a_restarted_workers_old_process_is_refused() -> None:
    clock = Clock()
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB), clock=clock)
    service.sync(worker="w", used_bytes=40 * MiB, incarnation="old", seq=5)
    service.remove_worker("w")
    service.add_worker("w")  # restarted at the same address
    service.sync(worker="w", used_bytes=MiB, incarnation="new", seq=1)
    before = (service.state(), service.policy.threshold(0.9))
    clock.now += 1
    with pytest.raises(StaleReport, match="incarnation old, which the scheduler removed"):
        service.sync(
            worker="w",
            used_bytes=70 * MiB,
            incarnation="old",
            seq=6,
            observations=[[-1.0, 50 * MiB]] * 20,
        )
    state = service.state()
    assert state["stale_reports"] == 1
    state["stale_reports"] = 0
    assert (state, service.policy.threshold(0.9)) == before
    assert service.ledger.used() == MiB


def test_a_new_process_at_a_removed_address_is_served_before_its_registration() -> None:
    """A nanny restarting its worker at a fixed port: the new process's first renewal can
    reach the scheduler before its registration does. Its incarnation is not the one the
    removal retired, so it is served; the old process's renewal is still refused."""
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB), clock=Clock())
    service.sync(worker="w", used_bytes=40 * MiB, incarnation="old", seq=5)
    service.remove_worker("w")
    with pytest.raises(WorkerRemoved, match="w was removed"):
        service.sync(worker="w", used_bytes=40 * MiB, incarnation="old", seq=6)
    with pytest.raises(WorkerRemoved, match="w was removed"):
        service.sync(worker="w", used_bytes=40 * MiB)  # unnumbered: cannot be told apart
    assert "w" not in service.ledger
    assert service.sync(worker="w", used_bytes=MiB, incarnation="new", seq=1)["allowance"] > 0
    assert service.ledger.share("w").used == MiB
    service.add_worker("w")  # its registration, seen after
    assert service.sync(worker="w", used_bytes=2 * MiB, incarnation="new", seq=2)["used"] == (
        2 * MiB
    )
    with pytest.raises(StaleReport, match="which the scheduler removed"):
        service.sync(worker="w", used_bytes=40 * MiB, incarnation="old", seq=7)


def test_a_worker_silent_for_a_few_lease_lives_loses_its_share(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    config = ServiceConfig(ssd_capacity_bytes=100 * MiB, lease_ttl_s=5.0)
    service = PlacementService(config, clock=clock)
    service.sync(worker="a", used_bytes=0)
    service.sync(worker="ghost", used_bytes=40 * MiB)  # its removal never reaches the service
    clock.now += STALE_LEASES * 5.0 - 1
    service.sync(worker="a", used_bytes=0)
    assert "ghost" in service.ledger
    clock.now += 2
    with caplog.at_level(logging.WARNING, logger="placement.service.service"):
        reply = service.sync(worker="a", used_bytes=0)
    assert service.ledger.workers() == ["a"] and set(service.state()["workers"]) == {"a"}
    assert reply["allowance"] == 50 * MiB  # the budget is one worker's again
    assert "ghost has not reported" in caplog.text


def test_a_model_a_worker_cannot_install_is_not_shipped_again(model_dir: Path) -> None:
    service = PlacementService(
        ServiceConfig(ssd_capacity_bytes=MiB), predictor=Predictor(version=1)
    )
    assert service.sync(worker="w", used_bytes=0)["predictor"] is not None
    reply = service.sync(worker="w", used_bytes=0, bad_model_version=1)
    assert reply["predictor"] is None and reply["model_version"] == 1
    assert service.state()["workers"]["w"]["bad_model_version"] == 1
    service.reload_model(str(model_dir))  # a newer model is shipped
    reply = service.sync(worker="w", used_bytes=0, bad_model_version=1)
    assert Predictor.from_bytes(reply["predictor"]).version == 2


def test_reload_model_without_restart_ships_it_once(model_dir: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    import pyarrow.parquet as pq

    pq.write_table(make_log(seed=4), logs / "part-000001.parquet")
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB, log_dir=str(logs)))
    assert service.predictor.kind == "size-heuristic"
    info = service.reload_model(str(model_dir))
    assert info["version"] == 1 and info["kind"] == "lightgbm" and info["history_runs"] == 16
    reply = service.sync(worker="w", used_bytes=0, model_version=0)
    assert Predictor.from_bytes(reply["predictor"]).version == 1
    assert service.sync(worker="w", used_bytes=0, model_version=1)["predictor"] is None
    # a bad model leaves the current one in place
    with pytest.raises(ModelError, match="no model directory"):
        service.reload_model(str(tmp_path / "missing"))
    assert service.predictor.version == 1
    with pytest.raises(ServiceError, match="placement.model"):
        PlacementService(ServiceConfig(ssd_capacity_bytes=1)).reload_model()


def test_the_configured_models_history_is_read_in_a_thread_while_the_service_answers(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history of a large log directory (many small part files) is read in a thread, not
    in the caller's (the scheduler's event loop): meanwhile the service answers as one
    without a model; then the model is installed with its history, as version 1."""
    import pyarrow.parquet as pq

    import placement.service.service as service_module

    logs = tmp_path / "logs"
    logs.mkdir()
    table = make_log(seed=4)
    for i in range(0, table.num_rows, 24):  # many small parts, as workers flush them
        pq.write_table(table.slice(i, 24), logs / f"w-{i:06d}.parquet")
    readers: list[threading.Thread] = []
    reading, release = threading.Event(), threading.Event()
    real_read_logs = service_module.read_logs

    def held_read_logs(path: object) -> object:
        readers.append(threading.current_thread())
        reading.set()
        release.wait(5)  # until the test has seen the service answer meanwhile
        return real_read_logs(path)

    monkeypatch.setattr(service_module, "read_logs", held_read_logs)
    config = ServiceConfig(ssd_capacity_bytes=MiB, model_path=str(model_dir), log_dir=str(logs))
    try:
        service = PlacementService(config)
        assert reading.wait(30)
        assert readers[0] is not threading.current_thread(), "read in another thread"
        assert service.history_loading and service.state()["history_loading"] is True
        reply = service.sync(worker="w", used_bytes=0)
        assert reply["model_version"] == 0 and reply["predictor"] is None
        (answer,) = service.decide(worker="w", requests=[{"file_kind": "spill", "created_at": 1.0}])
        assert answer["tier"] in ("ssd", "hdd"), answer
        copy = pickle.loads(pickle.dumps(service))  # as register_plugin ships it
    finally:
        release.set()
    for svc in (service, copy):
        assert svc.wait_for_history(60)
        assert not svc.state()["history_loading"]
        assert svc.predictor.version == 1 and svc.predictor.kind == "lightgbm"
        assert svc.predictor.history is not None and svc.predictor.history.n_runs == 16
    assert len(readers) == 2, "the copy read the history itself"
    reply = service.sync(worker="w", used_bytes=0, model_version=0)
    assert Predictor.from_bytes(reply["predictor"]).version == 1


def observe_model_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths :meth:`ModelSet.load` is called with from now on (it still loads them)."""
    calls: list[str] = []
    real_load = ModelSet.load.__func__  # type: ignore[attr-defined]

    def load(cls: type[ModelSet], path: object) -> ModelSet:
        calls.append(str(path))
        return real_load(cls, path)

    monkeypatch.setattr(ModelSet, "load", classmethod(load))
    return calls


def test_a_service_given_its_loaded_models_serves_them_without_reading_them_again(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = ModelSet.load(model_dir)
    loads = observe_model_loads(monkeypatch)
    config = ServiceConfig(ssd_capacity_bytes=MiB, model_path=str(model_dir))
    service = PlacementService(config, models=models)
    assert service.wait_for_history(30)
    assert loads == [], "the directory is not read again"
    assert service.predictor.version == 1 and service.predictor.source == str(model_dir)
    assert service.predictor.models is models
    with pytest.raises(ServiceError, match="config.model_path"):
        PlacementService(ServiceConfig(ssd_capacity_bytes=MiB), models=models)
    with pytest.raises(ServiceError, match="no predictor"):
        PlacementService(config, predictor=Predictor(), models=models)
    with pytest.raises(TypeError, match="ModelSet"):
        PlacementService(config, models=str(model_dir))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ModelSet"):
        PlacementSchedulerPlugin(service, models=models)


def test_a_bad_configured_model_stops_the_service_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="dataplane placement train"):
        PlacementService(ServiceConfig(ssd_capacity_bytes=1, model_path=str(tmp_path / "none")))


def test_batched_decisions_refuse_unsafe_names_and_bad_facts() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=3 * MiB))
    good = {"file_kind": "shuffle", "created_at": time.time(), "expected_size_bytes": 2 * MiB}
    answers = service.decide(
        worker="w",
        requests=[
            {**good, "name": "shuffle-1/part-0"},
            {**good, "name": "../../etc/passwd"},
            {**good, "name": "/tmp/abs"},
            {**good, "file_kind": "mystery"},
            {**good, "bogus": 1},
            good,  # no room left for a second 2 MiB file
        ],
    )
    assert answers[0]["tier"] == "ssd" and math.isfinite(answers[0]["log_density"])
    assert answers[1]["error"].startswith("refused") and ".." in answers[1]["error"]
    assert answers[2]["error"].startswith("refused") and "absolute" in answers[2]["error"]
    assert answers[3]["error"].startswith("bad request") and "file_kind" in answers[3]["error"]
    assert answers[4]["error"].startswith("bad request")
    assert answers[5]["tier"] == "hdd"
    assert service.ledger.used() == 2 * MiB
    assert service.state()["workers"]["w"]["service_decisions"] == {"ssd": 1, "hdd": 1}


class HandlerTable:
    """What the scheduler plugin touches of a scheduler: its handler table."""

    def __init__(self) -> None:
        self.handlers: dict = {}


def test_scheduler_plugin_without_a_budget_refuses_to_start() -> None:
    with (
        dask.config.set({"placement.ssd-capacity": None}),
        pytest.raises(ServiceConfigError, match="placement.ssd-capacity"),
    ):
        asyncio.run(PlacementSchedulerPlugin().start(HandlerTable()))


def test_scheduler_plugin_adds_and_removes_its_handlers() -> None:
    scheduler = HandlerTable()
    plugin = PlacementSchedulerPlugin(PlacementService(ServiceConfig(ssd_capacity_bytes=MiB)))

    async def main() -> dict:
        await plugin.start(scheduler)
        reply = await scheduler.handlers["placement_sync"](worker="w", used_bytes=0)
        state = await scheduler.handlers["placement_state"]()
        plugin.remove_worker(scheduler, "w")
        await plugin.close()
        return {"reply": reply, "state": state}

    out = asyncio.run(main())
    assert out["reply"]["allowance"] == MiB // 2 and "w" in out["state"]["workers"]
    assert scheduler.handlers == {} and len(plugin.service.ledger) == 0


def test_scheduler_plugin_refuses_renewals_of_a_removed_worker() -> None:
    scheduler = HandlerTable()
    plugin = PlacementSchedulerPlugin(PlacementService(ServiceConfig(ssd_capacity_bytes=MiB)))

    async def main() -> list[dict]:
        await plugin.start(scheduler)
        sync = scheduler.handlers["placement_sync"]
        replies = [await sync(worker="w", used_bytes=10)]
        plugin.remove_worker(scheduler, "w", stimulus_id="test")
        replies.append(await sync(worker="w", used_bytes=10))
        assert len(plugin.service.ledger) == 0  # the late renewal recreated nothing
        plugin.add_worker(scheduler, "w")
        replies.append(await sync(worker="w", used_bytes=10))
        await plugin.close()
        return replies

    first, refused, rejoined = asyncio.run(main())
    assert "allowance" in first and "allowance" in rejoined
    assert set(refused) == {"refused"} and "w was removed" in refused["refused"]
    assert plugin.service.ledger.share("w").used == 10


def test_a_renewal_from_a_newer_worker_is_served_on_the_keys_the_scheduler_knows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = HandlerTable()
    plugin = PlacementSchedulerPlugin(PlacementService(ServiceConfig(ssd_capacity_bytes=MiB)))

    async def main() -> list[dict]:
        await plugin.start(scheduler)
        sync = scheduler.handlers["placement_sync"]
        replies = [await sync(worker="w", used_bytes=10, compressed_bytes=3) for _ in range(2)]
        await plugin.close()
        return replies

    with caplog.at_level(logging.WARNING, logger="placement.service.scheduler_plugin"):
        replies = asyncio.run(main())
    assert all("allowance" in r for r in replies), replies
    assert plugin.service.ledger.share("w").used == 10
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "compressed_bytes" in warned[0], "named, once"


def test_scheduler_plugin_with_a_service_pickles_for_register_plugin() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    service.sync(worker="w", used_bytes=10)
    copy = pickle.loads(pickle.dumps(PlacementSchedulerPlugin(service)))
    assert copy.scheduler is None and copy.service is not service
    assert copy.service.ledger.share("w").used == 10  # the state travels
    assert copy.service.sync(worker="v", used_bytes=0)["allowance"] > 0
    assert copy.service.predictor.version == 0  # its lock works
    assert "v" not in service.ledger

    async def renew_from_a_newer_worker() -> dict:
        return await copy.handle_sync(worker="u", used_bytes=0, compressed_bytes=3)

    assert "allowance" in asyncio.run(renew_from_a_newer_worker()), "the copy is whole"


# ---------------------------------------------------------------------- worker-side chooser
def test_without_a_lease_every_file_takes_the_fallback() -> None:
    chooser = LeasedChooser(fallback=FixedTier(Tier.HDD))
    assert chooser.choose(request()) is Tier.HDD
    assert chooser.stats()["decisions"] == {"ssd": 0, "hdd": 1, "fallback": 1, "errors": 0}


def test_lease_admits_dense_files_that_fit_then_expires() -> None:
    clock = Clock()
    chooser = LeasedChooser(clock=clock)
    ticket = chooser.begin_sync()
    chooser.accept(ticket, allowance_bytes=3 * MiB, threshold=-6.5, ttl_s=5, model_version=0)
    assert chooser.choose(request(MiB)) is Tier.SSD  # -log10(1 MiB) = -6.02 >= -6.5
    assert chooser.choose(request(10 * MiB)) is Tier.HDD  # -7.0: not dense enough
    assert chooser.choose(request(MiB)) is Tier.SSD
    assert chooser.choose(request(2 * MiB)) is Tier.HDD  # dense enough, but 4 MiB > 3 MiB lent
    clock.now += 5.0
    assert not chooser.has_valid_lease()
    assert chooser.choose(request(1)) is Tier.HDD  # expired: fallback
    stats = chooser.stats()
    assert stats["decisions"] == {"ssd": 2, "hdd": 3, "fallback": 1, "errors": 0}
    assert stats["spent_bytes"] == 2 * MiB and stats["latency_us"]["n"] == 5
    assert chooser.begin_sync().shortfall_bytes == 2 * MiB


def test_bytes_placed_during_a_renewal_count_against_the_new_lease() -> None:
    chooser = LeasedChooser(clock=Clock())
    chooser.accept(
        chooser.begin_sync(), allowance_bytes=4 * MiB, threshold=-math.inf, ttl_s=5, model_version=0
    )
    assert chooser.choose(request(MiB)) is Tier.SSD
    ticket = chooser.begin_sync()  # the report covers the first 1 MiB
    assert chooser.choose(request(MiB)) is Tier.SSD  # placed while the renewal is in flight
    chooser.accept(ticket, allowance_bytes=MiB, threshold=-math.inf, ttl_s=5, model_version=0)
    assert chooser.stats()["spent_bytes"] == MiB
    assert chooser.choose(request(MiB)) is Tier.HDD  # the new 1 MiB lease is already spent


def test_half_a_spent_lease_asks_for_an_early_renewal_once() -> None:
    calls = []
    chooser = LeasedChooser(clock=Clock(), on_low=lambda: calls.append(1))
    chooser.accept(
        chooser.begin_sync(), allowance_bytes=4 * MiB, threshold=-math.inf, ttl_s=5, model_version=0
    )
    chooser.choose(request(MiB))
    assert calls == []
    chooser.choose(request(MiB))
    chooser.choose(request(MiB))
    assert calls == [1]


def test_a_failing_predictor_never_fails_the_decision() -> None:
    class Broken(Predictor):
        def predict(self, request: FileRequest, size_bytes: int) -> float:
            raise RuntimeError("model exploded")

    chooser = LeasedChooser(clock=Clock(), fallback=FixedTier(Tier.SSD))
    chooser.install_predictor(Broken())
    chooser.accept(
        chooser.begin_sync(), allowance_bytes=MiB, threshold=-math.inf, ttl_s=5, model_version=0
    )
    assert chooser.choose(request()) is Tier.SSD  # the fallback chooser's answer
    assert chooser.stats()["decisions"]["errors"] == 1


# -------------------------------------------------------------------- the link, with a stand-in RPC
class FakeScheduler:
    """Stands in for ``worker.scheduler``: forwards to a real PlacementService, or misbehaves."""

    def __init__(self, service: PlacementService, clock: Clock | None = None) -> None:
        self.service = service
        #: While set, each call waits for this event before it answers (a stalled scheduler).
        self.stall: asyncio.Event | None = None
        self.absent = False
        #: While true, each answer takes the whole lease life of ``clock`` (arrives expired).
        self.slow = False
        self.clock = clock
        #: Every report sent, in order.
        self.messages: list[dict] = []

    async def placement_sync(self, **message: object) -> dict | None:
        self.messages.append(message)
        if self.stall is not None:
            await self.stall.wait()
        if self.absent:
            return None  # what Dask answers for an op without a handler
        if self.slow:
            assert self.clock is not None, "a slow FakeScheduler needs the link's clock"
            self.clock.now += self.service.config.lease_ttl_s
        return self.service.sync(**message)


def test_link_installs_leases_and_models_and_falls_back_when_the_scheduler_is_slow(
    store: TieredFileStore, model_dir: Path
) -> None:
    clock = Clock()
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=64 * MiB, lease_ttl_s=2.0))
    service.reload_model(str(model_dir))
    scheduler = FakeScheduler(service)
    chooser = LeasedChooser(clock=clock)
    store.chooser = chooser
    link = ServiceLink(
        chooser, store, scheduler, "tcp://w:1", config=LinkConfig(sync_timeout_s=0.05), clock=clock
    )

    async def main() -> None:
        assert await link.sync_once()
        assert chooser.predictor.version == 1 and chooser.predictor.kind == "lightgbm"
        handle = store.create("a", request(MiB))
        assert handle.tier is Tier.SSD
        store.write(handle, b"x" * 1000)
        # the report counts the file at its expected size until it grows past it
        assert link.usage()["ssd_committed_bytes"] == MiB
        assert await link.sync_once()
        assert service.ledger.share("tcp://w:1").used == MiB

        stall = scheduler.stall = asyncio.Event()  # the scheduler stalls, and never recovers
        # the link gives up on its own (its 0.05 s timeout); the 30 s bound only guards a hang
        assert not await asyncio.wait_for(link.sync_once(), 30)
        assert not stall.is_set()  # it returned while the scheduler still stalled
        assert link.consecutive_failures == 1 and link.last_error == "no answer within 0.05 s"
        assert store.create("b", request(MiB)).tier is Tier.SSD  # the lease still holds
        clock.now += 2.0  # ... until it expires
        assert store.create("c", request(MiB)).tier is Tier.HDD
        store.delete(handle)  # the SSD file goes while the scheduler is away

        scheduler.stall, scheduler.absent = None, True  # now it has no service at all
        assert not await link.sync_once()
        assert "no placement service" in link.last_error

        scheduler.absent = False  # back: the next report reconciles the ledger
        assert await link.sync_once()
        assert service.ledger.share("tcp://w:1").used == MiB  # only "b" is on SSD now
        assert link.consecutive_failures == 0 and link.failures == 2
        assert store.create("d", request(MiB)).tier is Tier.SSD

    asyncio.run(main())
    state = link.state()
    assert state["syncs"] == 3 and state["rtt_ms"]["n"] == 3


class CountingPredictor(Predictor):
    """Expects every file at twice its declared size, counting the estimates it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.estimates = 0

    def expected_size(self, request: FileRequest) -> int | None:
        self.estimates += 1
        declared = request.expected_size_bytes
        return None if declared is None else 2 * declared


def test_renewals_estimate_each_ssd_file_once_per_predictor(store: TieredFileStore) -> None:
    chooser = LeasedChooser(unknown_size_bytes=5 * MiB)
    first = CountingPredictor()
    chooser.install_predictor(first)
    link = ServiceLink(chooser, store, None, "tcp://w:1")
    a = store.create("a", request(MiB), tier=Tier.SSD)
    b = store.create("b", request(None), tier=Tier.SSD)
    store.create("c", request(MiB), tier=Tier.HDD)  # HDD files reserve nothing
    store.write(a, b"x" * (3 * MiB))  # grown past its estimate: counts its size
    expected = 3 * MiB + 5 * MiB
    assert link.usage()["ssd_committed_bytes"] == expected
    assert first.estimates == 2
    assert link.usage()["ssd_committed_bytes"] == expected  # the next renewal asks no one
    assert first.estimates == 2
    d = store.create("d", request(MiB), tier=Tier.SSD)
    assert link.usage()["ssd_committed_bytes"] == expected + 2 * MiB
    assert first.estimates == 3  # only the new file
    store.delete(d)
    assert link.usage()["ssd_committed_bytes"] == expected
    assert list(link._estimates) == [a, b]  # deleted files are forgotten

    second = CountingPredictor()
    chooser.install_predictor(second)  # a new model estimates every file again, once
    assert link.usage()["ssd_committed_bytes"] == expected
    assert link.usage()["ssd_committed_bytes"] == expected
    assert second.estimates == 2 and first.estimates == 3
    assert link.usage()["ssd_committed_bytes"] == sum(
        max(h.stats.current_bytes, chooser.estimate(h.request)) for h in (a, b)
    )


class BadPayload:
    """A scheduler that ships the same unreadable model (version 7) at every renewal."""

    async def placement_sync(self, **message: object) -> dict:
        return {
            "allowance": MiB,
            "threshold": 0.0,
            "ttl": 5.0,
            "model_version": 7,
            "predictor": b"junk",
        }


def test_link_keeps_its_model_when_the_payload_is_bad(store: TieredFileStore) -> None:
    chooser = LeasedChooser()
    link = ServiceLink(chooser, store, BadPayload(), "tcp://w:1")
    assert asyncio.run(link.sync_once())
    assert chooser.predictor.version == 0 and link.model_errors == 1
    assert chooser.has_valid_lease()


def test_background_renewals_run_and_stop(store: TieredFileStore) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    chooser = LeasedChooser()
    link = ServiceLink(
        chooser, store, FakeScheduler(service), "tcp://w:1", config=LinkConfig(sync_interval_s=0.01)
    )

    async def main() -> None:
        link.start()
        await asyncio.sleep(0.2)
        await link.stop()

    asyncio.run(main())
    assert link.syncs >= 5 and chooser.has_valid_lease()
    assert service.state()["workers"]["tcp://w:1"]["syncs"] == link.syncs


def test_renewals_go_on_after_a_failing_predictor_or_a_malformed_answer(
    store: TieredFileStore,
) -> None:
    class Broken(Predictor):
        def expected_size(self, request: FileRequest) -> int | None:
            raise RuntimeError("history lookup failed")

    class Scheduler(FakeScheduler):
        malformed = False

        async def placement_sync(self, **message: object) -> dict | None:
            reply = await super().placement_sync(**message)
            return {"allowance": 1} if self.malformed else reply

    service = PlacementService(ServiceConfig(ssd_capacity_bytes=64 * MiB))
    scheduler = Scheduler(service)
    chooser = LeasedChooser()
    store.create("a", request(MiB), tier=Tier.SSD)  # usage() asks the predictor about it
    link = ServiceLink(
        chooser, store, scheduler, "tcp://w:1", config=LinkConfig(sync_interval_s=0.01)
    )

    async def main() -> None:
        link.start()
        await until(lambda: link.syncs >= 1, "a first renewal")
        good = chooser.predictor
        chooser.install_predictor(Broken())
        await until(lambda: link.failures >= 3, "failed renewals")
        assert link.last_error == "RuntimeError: history lookup failed"
        chooser.install_predictor(good)
        await until(lambda: link.consecutive_failures == 0, "renewals to succeed again")

        scheduler.malformed = True
        failures = link.failures
        await until(lambda: link.failures >= failures + 3, "failed renewals")
        assert "malformed placement_sync answer" in link.last_error
        assert "'threshold'" in link.last_error
        scheduler.malformed = False
        syncs = link.syncs
        await until(lambda: link.syncs > syncs, "renewals to succeed again")
        assert link._task is not None and not link._task.done()
        await link.stop()

    asyncio.run(main())
    assert link.consecutive_failures == 0


def test_the_renewal_loop_logs_an_unexpected_error_once_and_goes_on(
    store: TieredFileStore, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    chooser = LeasedChooser()
    begin_sync = chooser.begin_sync
    faults = [RuntimeError("boom")] * 3

    def faulty_begin_sync(seq: int = 0) -> object:
        if faults:
            raise faults.pop()
        return begin_sync(seq)

    monkeypatch.setattr(chooser, "begin_sync", faulty_begin_sync)
    link = ServiceLink(
        chooser, store, FakeScheduler(service), "tcp://w:1", config=LinkConfig(sync_interval_s=0.01)
    )

    async def main() -> None:
        link.start()
        await until(lambda: link.syncs >= 1, "a renewal after the errors")
        await link.stop()

    with caplog.at_level(logging.DEBUG, logger="placement.service.link"):
        asyncio.run(main())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "boom" in errors[0].getMessage()
    assert link.failures == 3 and link.last_error == "RuntimeError: boom"


def test_a_refused_renewal_counts_as_a_failure(store: TieredFileStore) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    plugin = PlacementSchedulerPlugin(service)

    class Scheduler:
        async def placement_sync(self, **message: object) -> dict:
            return await plugin.handle_sync(**message)

    link = ServiceLink(LeasedChooser(), store, Scheduler(), "tcp://w:1")
    assert asyncio.run(link.sync_once())
    plugin.remove_worker(None, "tcp://w:1", stimulus_id="test")
    assert not asyncio.run(link.sync_once())
    assert link.failures == 1 and "refused the renewal" in link.last_error
    assert "tcp://w:1" not in service.ledger


class LateScheduler:
    """Stands in for ``worker.scheduler`` over a network: a report the worker stops waiting
    for is still on its way, and is applied when :attr:`held` is released."""

    def __init__(self, plugin: PlacementSchedulerPlugin) -> None:
        self.plugin = plugin
        self.held: asyncio.Event | None = None
        #: (release event, delivery) of each report held on its way
        self.late: list[tuple[asyncio.Event, asyncio.Task]] = []

    async def placement_sync(self, **message: object) -> dict:
        async def deliver(held: asyncio.Event | None) -> dict:
            if held is not None:
                await held.wait()
            return await self.plugin.handle_sync(**message)

        task = asyncio.ensure_future(deliver(self.held))
        if self.held is not None:
            self.late.append((self.held, task))
        return await asyncio.shield(task)  # the worker's timeout cancels its wait only


def test_a_report_the_worker_gave_up_on_does_not_undo_a_later_one(
    store: TieredFileStore,
) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=64 * MiB, lease_ttl_s=30.0))
    plugin = PlacementSchedulerPlugin(service)
    scheduler = LateScheduler(plugin)
    chooser = LeasedChooser()
    store.chooser = chooser
    link = ServiceLink(
        chooser, store, scheduler, "tcp://w:1", config=LinkConfig(sync_timeout_s=0.05)
    )

    async def main() -> dict:
        assert await link.sync_once()
        assert store.create("a", request(MiB)).tier is Tier.SSD
        scheduler.held = asyncio.Event()
        assert not await link.sync_once()  # report 2 (a on SSD) is held on its way
        scheduler.held = None
        assert store.create("b", request(MiB)).tier is Tier.SSD
        assert await link.sync_once()  # report 3: a and b, and both predictions
        assert service.ledger.share("tcp://w:1").used == 2 * MiB
        assert service.records["tcp://w:1"].predictions == 2
        held, late = scheduler.late.pop()
        held.set()  # report 2 lands now
        stale = await late

        # report 4 (c's prediction) lands after the worker gave up, before report 5
        assert store.create("c", request(MiB)).tier is Tier.SSD
        scheduler.held = asyncio.Event()
        assert not await link.sync_once()
        scheduler.held = None
        held, late = scheduler.late.pop()
        held.set()
        assert "allowance" in await late  # applied, but nobody waits for the answer
        assert service.records["tcp://w:1"].predictions == 3
        assert await link.sync_once()  # report 5 sends c's prediction again
        return stale

    reply = asyncio.run(main())
    assert "report 2 of worker tcp://w:1 arrived after its report 3" in reply["refused"]
    assert service.ledger.share("tcp://w:1").used == 3 * MiB
    assert service.records["tcp://w:1"].predictions == 3  # a's and c's counted once
    assert service.records["tcp://w:1"].syncs == 4 and service.stale_reports == 1
    assert link.failures == 2 and link.syncs == 3


def test_a_bad_model_is_reported_not_resent_and_logged_once(
    store: TieredFileStore, model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = PlacementService(
        ServiceConfig(ssd_capacity_bytes=MiB), predictor=Predictor(version=1)
    )
    messages: list[dict] = []
    shipped: list[int] = []

    class Corrupting:
        corrupt = True

        async def placement_sync(self, **message: object) -> dict:
            messages.append(message)
            reply = service.sync(**message)
            if reply["predictor"] is not None:
                shipped.append(reply["model_version"])
                if self.corrupt:
                    reply["predictor"] = reply["predictor"][:-10]
            return reply

    scheduler = Corrupting()
    chooser = LeasedChooser()
    link = ServiceLink(chooser, store, scheduler, "tcp://w:1")

    async def renew(n: int) -> None:
        for _ in range(n):
            assert await link.sync_once()

    with caplog.at_level(logging.ERROR, logger="placement.service.link"):
        asyncio.run(renew(4))
    assert "bad_model_version" not in messages[0]  # none yet: the field is left out
    assert messages[-1]["bad_model_version"] == 1
    assert shipped == [1] and link.model_errors == 1 and link.bad_model_version == 1
    assert len(caplog.records) == 1 and "version 1" in caplog.records[0].getMessage()
    assert chooser.predictor.version == 0 and chooser.has_valid_lease()

    service.reload_model(str(model_dir))  # version 2: shipped and installed
    scheduler.corrupt = False
    asyncio.run(renew(2))
    assert shipped == [1, 2] and chooser.predictor.version == 2
    assert link.bad_model_version is None and "bad_model_version" not in messages[-1]


def test_leases_shorter_than_the_renewal_interval_warn_once(
    store: TieredFileStore, caplog: pytest.LogCaptureFixture
) -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB, lease_ttl_s=0.5))
    link = ServiceLink(
        LeasedChooser(),
        store,
        FakeScheduler(service),
        "tcp://w:1",
        config=LinkConfig(sync_interval_s=1.0),
    )

    async def renew() -> list[bool]:
        return [await link.sync_once() for _ in range(3)]

    with caplog.at_level(logging.WARNING, logger="placement.service.link"):
        assert asyncio.run(renew()) == [True, True, True]  # the leases are valid, if short
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "placement.service.lease-ttl" in message and "placement.service.sync-interval" in message
    assert "0.5 s" in message and "1 s" in message


def test_a_lease_that_arrives_expired_is_not_a_renewal(
    store: TieredFileStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB, lease_ttl_s=2.0))

    scheduler = FakeScheduler(service, clock)
    scheduler.slow = True  # each answer takes the whole lease life
    chooser = LeasedChooser(clock=clock)
    link = ServiceLink(chooser, store, scheduler, "tcp://w:1", clock=clock)

    async def renew() -> list[bool]:
        return [await link.sync_once() for _ in range(2)]

    with caplog.at_level(logging.WARNING, logger="placement.service.link"):
        assert asyncio.run(renew()) == [False, False]
    assert link.syncs == 0 and link.failures == 2 and chooser.lease is None
    assert "arrived expired" in link.last_error
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "placement.service.lease-ttl" in message and "placement.service.sync-interval" in message
    scheduler.slow = False
    assert asyncio.run(link.sync_once()) and chooser.has_valid_lease()


# ---------------------------------------------------------------------- the demo's tier table
def test_tier_split_table_sums_rows_by_tier_and_kind() -> None:
    import pandas as pd

    from placement.service.cli import split_table
    from placement.service.demo import tier_split

    rows = pd.DataFrame(
        {
            "tier": ["ssd", "ssd", "hdd"],
            "file_kind": ["spill", "spill", "shuffle"],
            "size_bytes": [1024, 1024, 3 * 2**30],
            "write_bytes": [1024, 1024, 3 * 2**30],
            "read_bytes": [2048, 0, 2**30],
            "write_ops": [1, 1, 40],
            "read_ops": [2, 0, 9],
        }
    )
    split = tier_split(rows)
    assert split.loc[("ssd", "spill"), "files"] == 2
    assert split["io_share"].sum() == pytest.approx(1.0)
    lines = split_table(split).splitlines()
    assert lines[0].split()[:3] == ["tier", "kind", "files"]
    assert set(lines[1]) == {"-", " "}
    hdd = next(line for line in lines if line.startswith("hdd"))
    assert hdd.split()[:3] == ["hdd", "shuffle", "1"] and hdd.endswith("%")
    assert "3.0 GiB" in hdd
    # text columns left-aligned, numbers right-aligned under their headers
    assert lines[0].index("files") + len("files") == hdd.index("1") + 1


class Constant(Predictor):
    """Predicts one value for every file (a bring-your-own model's extremes)."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def predict(self, request: FileRequest, size_bytes: int) -> float:
        return self.value

    def predict_many(self, requests: list[FileRequest], sizes: list[int]) -> np.ndarray:
        return np.full(len(requests), self.value)


class Slow(Constant):
    """Takes ``seconds`` per batch, as a large batch's features and model do."""

    def __init__(self, value: float, seconds: float) -> None:
        super().__init__(value)
        self.seconds = seconds

    def predict_many(self, requests: list[FileRequest], sizes: list[int]) -> np.ndarray:
        time.sleep(self.seconds)
        return super().predict_many(requests, sizes)


def test_a_large_decision_batch_leaves_the_schedulers_event_loop_serving() -> None:
    from placement.service.scheduler_plugin import THREADED_BATCH

    facts = {"file_kind": "shuffle", "created_at": time.time(), "expected_size_bytes": MiB}
    requests = [dict(facts) for _ in range(THREADED_BATCH)] + [{"file_kind": "nonsense"}]
    plugin = PlacementSchedulerPlugin(
        PlacementService(ServiceConfig(ssd_capacity_bytes=8 * MiB), predictor=Slow(0.0, 0.5))
    )
    twin = PlacementService(ServiceConfig(ssd_capacity_bytes=8 * MiB), predictor=Constant(0.0))

    async def main() -> tuple[list[dict], int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:  # what else the scheduler's loop serves meanwhile
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        answers = await plugin.handle_decide(worker="w", requests=requests)
        done.set()
        await task
        return answers, ticks - before

    answers, ticks = asyncio.run(main())
    assert ticks >= 5, f"the loop was held for the batch ({ticks} ticks in 0.5 s)"
    # the same answers, reservations and counts as deciding it at once
    assert answers == twin.decide(worker="w", requests=requests)
    assert [a.get("tier") for a in answers].count("ssd") == 8 and "error" in answers[-1]
    service = plugin.service
    assert service.ledger.used() == twin.ledger.used() == 8 * MiB
    assert service.records["w"].service_decisions == twin.records["w"].service_decisions


@pytest.mark.parametrize(
    ("value", "tier"), [(math.inf, Tier.SSD), (-math.inf, Tier.HDD), (math.nan, Tier.HDD)]
)
def test_infinite_and_missing_predictions_are_placed_as_the_policy_places_them(
    value: float, tier: Tier
) -> None:
    """+inf is the densest prediction (SSD when it fits); -inf and NaN go to HDD, in the
    worker's leased chooser and in the scheduler's batched decisions alike."""
    chooser = LeasedChooser(clock=Clock())
    chooser.install_predictor(Constant(value))
    chooser.accept(
        chooser.begin_sync(), allowance_bytes=4 * MiB, threshold=-5.0, ttl_s=5, model_version=0
    )
    assert chooser.choose(request(MiB)) is tier
    if tier is Tier.SSD:  # still bounded by the lease
        assert chooser.choose(request(8 * MiB)) is Tier.HDD

    service = PlacementService(ServiceConfig(ssd_capacity_bytes=3 * MiB), predictor=Constant(value))
    good = {"file_kind": "shuffle", "created_at": time.time(), "expected_size_bytes": 2 * MiB}
    answers = service.decide(worker="w", requests=[good, good])
    assert answers[0]["tier"] == tier.value
    assert answers[1]["tier"] == "hdd"  # a second 2 MiB file never fits 3 MiB
    assert service.ledger.used() == (2 * MiB if tier is Tier.SSD else 0)


def test_serve_refusing_its_options_leaves_no_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from click.testing import CliRunner

    from placement.service.cli import serve_command

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    res = CliRunner().invoke(serve_command, ["--ssd-capacity", "lots", "--log-dir", "x"])
    assert res.exit_code == 2 and "ssd_capacity='lots'" in res.output
    assert "memory_limit" not in res.output, "only the bad value is named"
    assert list(tmp_path.iterdir()) == []


def test_serve_refuses_a_model_it_cannot_load_before_starting_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from click.testing import CliRunner

    from placement.service.cli import serve_command

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    missing = tmp_path / "no-model"
    res = CliRunner().invoke(serve_command, ["--demo", "--model", str(missing)])
    # the option is named, once, and no cluster started (its log line would say "not started")
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--model'" in res.output and str(missing) in res.output
    assert res.output.count("no model directory") == 1
    assert "not started" not in res.output
    assert list(scratch.iterdir()) == []
    # from Dask config: the key and its environment variable are named instead
    with dask.config.set({"placement.model": str(missing)}):
        res = CliRunner().invoke(serve_command, ["--demo"])
    assert res.exit_code == 1, res.output
    assert "placement.model=" in res.output and "DASK_PLACEMENT__MODEL" in res.output
    assert "--model" not in res.output
    assert list(scratch.iterdir()) == []


def test_serve_loads_its_model_once(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` loads the model to refuse a bad one before its cluster starts; its scheduler
    (in the same process) serves those models rather than loading the directory again."""
    import json
    import tempfile

    from click.testing import CliRunner

    from placement.service.cli import serve_command

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    loads = observe_model_loads(monkeypatch)
    args = ["--demo", "--json", "--workers", "1", "--demo-partitions", "2", "--demo-rows", "2000"]
    res = CliRunner().invoke(serve_command, [*args, "--model", str(model_dir)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output[res.output.index("{") :])["matches_pandas"] is True
    assert loads == [str(model_dir)], "loaded once"


def test_serve_removes_its_temporary_directory_but_the_logs_in_it(tmp_path: Path) -> None:
    from placement.service.cli import remove_scratch

    for name in ("ssd", "hdd", "dask", "logs/run"):
        (tmp_path / "scratch" / name).mkdir(parents=True)
        (tmp_path / "scratch" / name / "f").write_text("x")
    remove_scratch(tmp_path / "scratch", keep=tmp_path / "scratch" / "logs")
    assert [p.name for p in (tmp_path / "scratch").iterdir()] == ["logs"]
    assert (tmp_path / "scratch" / "logs" / "run" / "f").is_file()
    (tmp_path / "mylogs").mkdir()
    remove_scratch(tmp_path / "scratch", keep=tmp_path / "mylogs")  # logs given elsewhere
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mylogs"]


# ------------------------------------------------------- what operators set and get wrong
def env_config(**env: str) -> dict:
    """Dask config as ``DASK_PLACEMENT__...`` environment variables would give it."""
    return dask.config.collect_env({f"DASK_PLACEMENT__{k}": v for k, v in env.items()})


def test_policy_options_are_dask_config_keys() -> None:
    from placement.policy import OccupancyBasis

    env = env_config(
        SSD_CAPACITY="1GiB",
        SERVICE__OCCUPANCY_BASIS="after",
        SERVICE__THRESHOLD_WINDOW="512",
        SERVICE__THRESHOLD_EXPONENT="0.25",
        SERVICE__MAX_BACKOFF="5s",
    )
    with dask.config.set(env):
        config = ServiceConfig.from_dask_config()
        link = LinkConfig.from_dask_config()
    assert config.occupancy_basis is OccupancyBasis.AFTER
    assert config.window == 512 and config.exponent == 0.25
    assert link.max_backoff_s == 5.0
    assert PlacementService(config).threshold_curve() is not None  # leases carry the curve


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"SERVICE__OCCUPANCY_BASIS": "during"}, "placement.service.occupancy-basis"),
        ({"SERVICE__THRESHOLD_WINDOW": "many"}, "placement.service.threshold-window='many'"),
        ({"SERVICE__THRESHOLD_WINDOW": "0.5"}, "placement.service.threshold-window=0.5"),
        ({"SERVICE__THRESHOLD_EXPONENT": "0"}, "placement.service.threshold-exponent=0"),
        ({"SERVICE__MAX_BACKOFF": "-1"}, "placement.service.max-backoff=-1"),
    ],
)
def test_bad_policy_options_name_their_key(env: dict, match: str) -> None:
    with (
        dask.config.set(env_config(SSD_CAPACITY="1GiB", **env)),
        pytest.raises(ServiceConfigError, match=match),
    ):
        ServiceConfig.from_dask_config()
        LinkConfig.from_dask_config()


def test_unknown_placement_keys_are_named_with_the_known_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = env_config(SSD_CAPACITY="1GiB", OCCUPANCY_BASIS="after", SERVICE__SYNC_INTERVALL="1s")
    with dask.config.set(env), caplog.at_level(logging.WARNING, "placement.service.config"):
        ServiceConfig.from_dask_config()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "placement.occupancy-basis (DASK_PLACEMENT__OCCUPANCY_BASIS)" in text
    assert "did you mean placement.service.occupancy-basis" in text
    assert "placement.service.sync-intervall" in text
    assert "known keys: placement.ssd-dir" in text and len(caplog.records) == 2
    caplog.clear()
    with dask.config.set(env_config(SSD_CAPACITY="1GiB", SERVICE__LEASE_TTL="2s")):
        with caplog.at_level(logging.WARNING, "placement.service.config"):
            ServiceConfig.from_dask_config()
    assert caplog.records == []


@pytest.mark.parametrize("value", [0.5, 2.5, "1.5", "1.5B", "0.5 B"])
def test_a_fraction_of_a_byte_is_refused(value: object) -> None:
    """``0.5`` was 0 bytes (the SSD off) and ``"1.5"`` 1 byte, in silence; a fraction with
    a unit larger than a byte stays a size."""
    with pytest.raises(ServiceConfigError, match=r"placement.ssd-capacity=.*whole number.*GiB"):
        ServiceConfig(ssd_capacity_bytes=value)  # type: ignore[arg-type]
    with (
        dask.config.set({"placement.ssd-capacity": value}),
        pytest.raises(ServiceConfigError, match="whole number of bytes"),
    ):
        ServiceConfig.from_dask_config()
    sizes = [("1.5KiB", 1536), ("0.3GB", 300_000_000), (1e9, 10**9), ("10 GiB", 10 * 2**30)]
    for size, expected in sizes:
        assert ServiceConfig(ssd_capacity_bytes=size).ssd_capacity_bytes == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (0, r"placement.ssd-capacity=0: the SSD tier is off.*100GiB"),
        (1000, r"placement.ssd-capacity=1000 is 1000 bytes, less than 1 MiB.*'100GiB'"),
        ("512KiB", r"placement.ssd-capacity='512KiB' is 524288 bytes"),
    ],
)
def test_an_ssd_budget_below_a_mebibyte_is_accepted_with_a_warning(
    value: object, match: str, caplog: pytest.LogCaptureFixture
) -> None:
    for capacity in (value, "100GiB"):
        caplog.clear()
        with (
            dask.config.set({"placement.ssd-capacity": capacity}),
            caplog.at_level(logging.WARNING, "placement.service.config"),
        ):
            ServiceConfig.from_dask_config()
        warnings = [r.getMessage() for r in caplog.records]
        if capacity == "100GiB":
            assert warnings == []
        else:
            assert len(warnings) == 1 and re.search(match, warnings[0]), warnings


def test_a_bad_configured_model_names_the_key_and_the_fix(
    tmp_path: Path, model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for path, match in [
        (tmp_path / "none", r"placement.model='.*none' cannot be loaded: no model directory"),
        (model_dir / "models.json", r"models.json is a file; give the model directory .*, not"),
    ]:
        assert path.name != "models.json" or path.is_file()
        with (
            dask.config.set({"placement.ssd-capacity": "1GiB", "placement.model": str(path)}),
            caplog.at_level(logging.ERROR, "placement.service.scheduler_plugin"),
            pytest.raises(ModelError, match=match) as info,
        ):
            asyncio.run(PlacementSchedulerPlugin().start(HandlerTable()))
        assert "DASK_PLACEMENT__MODEL" in str(info.value) and "unset it" in str(info.value)
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2 and all(m.startswith("placement service not started: ") for m in logged)


def test_a_relative_model_path_is_read_by_the_scheduler_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plugin = PlacementSchedulerPlugin(PlacementService(ServiceConfig(ssd_capacity_bytes=MiB)))
    answer = asyncio.run(plugin.handle_reload_model("model/"))
    assert re.search(rf"relative path 'model/' .*directory {tmp_path}", answer["refused"])


def test_a_refused_reload_is_one_log_line_on_the_scheduler(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The client raises it as a ModelError (test_client.py)."""
    plugin = PlacementSchedulerPlugin(PlacementService(ServiceConfig(ssd_capacity_bytes=MiB)))
    missing = str(tmp_path / "missing")
    with caplog.at_level(logging.WARNING, "placement.service.scheduler_plugin"):
        answer = asyncio.run(plugin.handle_reload_model(missing))
    assert "no model directory" in answer["refused"]
    [record] = caplog.records
    assert record.exc_info is None and "the current one stays" in record.getMessage()


def test_worker_helpers_name_both_ways_to_run_placement_storage() -> None:
    from placement.service import worker_service_state
    from placement.storage import PlacementWorkerPlugin

    class Worker:
        address = "tcp://w:1"
        plugins: dict = {}

    with pytest.raises(
        ServiceError, match=r"tcp://w:1 runs no placement service: .*--preload placement.dask"
    ):
        worker_service_state(Worker())
    storage_only = PlacementWorkerPlugin()
    storage_only.storage = object()  # type: ignore[assignment]
    Worker.plugins = {storage_only.name: storage_only}
    with pytest.raises(ServiceError, match="storage without the service.*--preload"):
        worker_service_state(Worker())


def test_renewals_back_off_while_the_scheduler_runs_no_service_and_resume_when_it_does(
    store: TieredFileStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A scheduler without the service logs a traceback for every renewal it has no handler
    for: the worker warns once and waits twice as long after each such answer (up to
    ``max_backoff_s``), then renews at the normal interval as soon as the service answers."""
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    scheduler = FakeScheduler(service)
    scheduler.absent = True
    chooser = LeasedChooser()
    config = LinkConfig(sync_interval_s=0.01, max_backoff_s=0.08)
    link = ServiceLink(chooser, store, scheduler, "tcp://w:1", config=config)

    async def main() -> float:
        link.start()
        await until(lambda: link.no_service_answers >= 1, "a first answer")
        start = time.perf_counter()
        await until(lambda: link.no_service_answers >= 6, "more answers")
        took = time.perf_counter() - start
        assert link.next_wait_s() == 0.08 and link.syncs == 0
        scheduler.absent = False  # the service is added
        await until(lambda: link.syncs >= 2, "renewals to succeed again")
        await link.stop()
        return took

    with caplog.at_level(logging.DEBUG, logger="placement.service.link"):
        took = asyncio.run(main())
    # answers 2..6 came after waits of 0.01, 0.02, 0.04, 0.08 and 0.08 s (not 5 x 0.01 s)
    assert took >= 0.2, took
    assert link.no_service_answers == 0 and link.next_wait_s() == 0.01
    assert link.consecutive_failures == 0 and chooser.has_valid_lease()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "runs no placement service" in warnings[0]
    assert "or the service failed to start there" in warnings[0]
    assert "placement.service.max-backoff" in warnings[0]
