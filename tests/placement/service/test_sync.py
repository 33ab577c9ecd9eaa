"""The scheduler-side service: batched decisions, lease replies, removals and report limits."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from placement.policy import OccupancyBasis
from placement.service import PlacementService, ServiceConfig, ServiceError
from placement.service.errors import WorkerRemoved
from placement.service.predictor import Predictor
from placement.service.service import (
    MAX_BATCH,
    MAX_OBSERVATIONS,
    MAX_REMOVED,
    STALE_LEASES,
    UNKNOWN_SIZE_BYTES,
)
from tests.placement.service.test_service import Clock, Constant

MiB = 2**20


def facts(size: int) -> dict:
    return {"file_kind": "shuffle", "created_at": time.time(), "expected_size_bytes": size}


def spread() -> list[list[float]]:
    """64 predictions of 1 MiB files, log10 densities -9 to -3."""
    return [[float(x), MiB] for x in np.linspace(-9, -3, 64)]


def test_a_batched_file_predicted_exactly_at_the_threshold_goes_to_ssd() -> None:
    predictor = Constant(0.0)
    config = ServiceConfig(ssd_capacity_bytes=100 * MiB, lease_fraction=0.1)
    service = PlacementService(config, predictor=predictor)
    service.sync(worker="w", used_bytes=50 * MiB, observations=spread())
    threshold = service.threshold(MiB)
    assert math.isfinite(threshold)
    predictor.value = threshold
    assert service.decide(worker="w", requests=[facts(MiB)])[0]["tier"] == "ssd"
    predictor.value = math.nextafter(threshold, -math.inf)
    assert service.decide(worker="w", requests=[facts(MiB)])[0]["tier"] == "hdd"


def test_batched_decisions_judge_a_file_at_the_occupancy_it_would_leave() -> None:
    config = ServiceConfig(
        ssd_capacity_bytes=100 * MiB, lease_fraction=0.1, occupancy_basis=OccupancyBasis.AFTER
    )
    service = PlacementService(config, predictor=Constant(-8.0))  # among the sparsest
    service.sync(worker="w", used_bytes=0, observations=spread())
    assert service.threshold() == -math.inf  # the empty SSD admits anything
    assert service.threshold(60 * MiB) > -8.0  # but not a file that would fill 60% of it
    assert service.decide(worker="c", requests=[facts(60 * MiB)])[0]["tier"] == "hdd"
    assert service.ledger.used() == 0


def test_a_batch_decision_first_releases_the_share_of_a_silent_worker() -> None:
    clock = Clock()
    config = ServiceConfig(ssd_capacity_bytes=10 * MiB, lease_ttl_s=5.0)
    service = PlacementService(config, clock=clock)
    service.sync(worker="ghost", used_bytes=10 * MiB)  # its removal never reaches the service
    clock.now += STALE_LEASES * 5.0 + 1
    assert service.decide(worker="c", requests=[facts(2 * MiB)])[0]["tier"] == "ssd"
    assert "ghost" not in service.ledger and service.ledger.used() == 2 * MiB


def test_the_most_recently_removed_workers_stay_refused() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    for i in range(MAX_REMOVED):
        service.remove_worker(f"w{i}")
    service.remove_worker("w0")  # removed again: now the most recent
    service.remove_worker("late")  # one too many: the oldest, w1, is forgotten
    assert service.sync(worker="w1", used_bytes=0)["allowance"] > 0
    for worker in ("w0", "w2", "late"):
        with pytest.raises(WorkerRemoved):
            service.sync(worker=worker, used_bytes=0)


def test_a_service_without_ssd_admits_nothing() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=0), predictor=Constant(0.0))
    assert service.threshold() == math.inf and service.state()["threshold"] == "inf"
    reply = service.sync(worker="w", used_bytes=0)
    assert reply["threshold"] == math.inf and reply["allowance"] == 0
    assert service.decide(worker="w", requests=[facts(0)])[0]["tier"] == "hdd"


def test_a_lease_reply_leaves_out_expired_reservations() -> None:
    clock = Clock()
    config = ServiceConfig(ssd_capacity_bytes=100 * MiB, lease_ttl_s=5.0)
    service = PlacementService(config, clock=clock)
    service.sync(worker="w", used_bytes=0)
    assert service.decide(worker="w", requests=[facts(10 * MiB)])[0]["tier"] == "ssd"
    assert service.sync(worker="v", used_bytes=0)["used"] == 10 * MiB
    clock.now += 6.0  # w never reported the file: its reservation lapsed after 5 s
    assert "w" in service.ledger
    assert service.sync(worker="v", used_bytes=0)["used"] == 0


def test_a_report_of_min_window_predictions_sets_the_threshold() -> None:
    """The policy needs 32 predictions before its threshold applies; one report of 32
    counts every one of them."""
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB))
    reply = service.sync(worker="w", used_bytes=50 * MiB, observations=spread()[:32])
    assert math.isfinite(reply["threshold"])


def test_batched_decisions_feed_the_threshold() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB))
    assert service.threshold() == -math.inf
    answers = service.decide(worker="w", requests=[facts(MiB)] * 32)
    assert [a["tier"] for a in answers] == ["ssd"] * 32
    assert math.isfinite(service.threshold())  # 32% full, and 32 predictions seen


def test_a_report_with_too_many_predictions_is_refused() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    with pytest.raises(ServiceError, match=f"at most {MAX_OBSERVATIONS}"):
        service.sync(worker="w", used_bytes=0, observations=[[-5.0, 1]] * (MAX_OBSERVATIONS + 1))
    assert service.records == {}
    service.sync(worker="w", used_bytes=0, observations=[[-5.0, 1]] * MAX_OBSERVATIONS)
    assert service.records["w"].predictions == MAX_OBSERVATIONS


def test_a_batched_file_of_unknown_size_reserves_the_default_size() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB))
    request = {"file_kind": "shuffle", "created_at": time.time()}
    assert service.decide(worker="c", requests=[request])[0]["tier"] == "ssd"
    assert service.ledger.used() == UNKNOWN_SIZE_BYTES


def test_a_batch_may_hold_up_to_max_batch_requests() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=MiB))
    answers = service.decide(worker="c", requests=[None] * MAX_BATCH)  # type: ignore[list-item]
    assert len(answers) == MAX_BATCH and all("error" in a for a in answers)
    with pytest.raises(ServiceError, match=f"at most {MAX_BATCH}"):
        service.decide(worker="c", requests=[None] * (MAX_BATCH + 1))  # type: ignore[list-item]


def test_the_threshold_drops_once_a_reservation_lapses() -> None:
    clock = Clock()
    config = ServiceConfig(ssd_capacity_bytes=100 * MiB, lease_ttl_s=5.0)
    service = PlacementService(config, clock=clock)
    service.sync(worker="w", used_bytes=0, observations=spread())
    assert service.decide(worker="w", requests=[facts(50 * MiB)])[0]["tier"] == "ssd"
    assert math.isfinite(service.threshold())  # half full
    clock.now += 6.0  # the file was never reported: its reservation lapsed
    assert service.threshold() == -math.inf


def test_only_finite_predictions_of_a_report_are_counted() -> None:
    service = PlacementService(ServiceConfig(ssd_capacity_bytes=100 * MiB))
    observations = [[math.nan, MiB], [math.inf, MiB], [-math.inf, MiB], [-5.0, MiB]]
    service.sync(worker="w", used_bytes=0, observations=observations)
    assert service.records["w"].predictions == 1


def test_a_worker_with_another_model_version_gets_the_schedulers_even_if_newer() -> None:
    """The scheduler's model is the one its threshold learns from."""
    service = PlacementService(
        ServiceConfig(ssd_capacity_bytes=MiB), predictor=Predictor(version=1)
    )
    reply = service.sync(worker="w", used_bytes=0, model_version=2)
    assert reply["model_version"] == 1 and Predictor.from_bytes(reply["predictor"]).version == 1
    reply = service.sync(worker="w", used_bytes=0, model_version=2, bad_model_version=1)
    assert reply["predictor"] is None
