"""What the service predicts for a new file (:class:`Predictor`): the size it reserves, the
density from a pipeline's own model or the size heuristic, and what it reports."""

from __future__ import annotations

import pickle
import time

import numpy as np
import pandas as pd
import pytest

from placement.errors import ModelError
from placement.features import HistorySnapshot, HistoryStore, features_from_request
from placement.model import ModelParams, ModelSet
from placement.service import Predictor, ServiceConfigError
from placement.storage import FileRequest
from tests.placement.logtables import make_log


def request(
    size: int | None,
    *,
    kind: str = "shuffle",
    pipeline: str = "pipe0",
    stage: str = "shuffle-p2p",
    operator: str | None = None,
) -> FileRequest:
    return FileRequest(
        file_kind=kind,
        created_at=time.time(),
        pipeline=pipeline,
        stage=stage,
        operator=operator,
        expected_size_bytes=size,
    )


def history_of(log: pd.DataFrame) -> HistorySnapshot:
    return HistoryStore.from_table(log).snapshot()


@pytest.fixture(scope="module")
def grown_tenfold() -> HistorySnapshot:
    """History in which every shuffle file ended 10x its expected size."""
    log = make_log(seed=3).to_pandas()
    shuffle = log["file_kind"] == "shuffle"
    log.loc[shuffle, "expected_size_bytes"] = log.loc[shuffle, "size_bytes"] // 10
    return history_of(log)


@pytest.fixture(scope="module")
def per_pipeline() -> tuple[ModelSet, HistorySnapshot]:
    """Models with one of their own for each of the log's pipelines, and its history."""
    table = make_log(seed=3)
    models = ModelSet.fit(table, params=ModelParams(n_estimators=20, num_threads=1))
    return models, HistoryStore.from_table(table).snapshot()


def test_the_version_is_a_whole_number() -> None:
    with pytest.raises(ServiceConfigError, match=r"version=1.5 must be an int >= 0"):
        Predictor(version=1.5)  # type: ignore[arg-type]
    assert Predictor(version=2).version == 2


def test_an_unseen_stage_reserves_what_its_file_kind_grew_to(
    grown_tenfold: HistorySnapshot,
) -> None:
    predictor = Predictor(history=grown_tenfold)
    new = request(1000, pipeline="new", stage="never-seen", operator="merge")
    assert predictor.expected_size(new) == pytest.approx(10_000, rel=0.01)
    spill = request(1000, kind="spill", pipeline="new", stage="never-seen", operator="merge")
    assert predictor.expected_size(spill) == pytest.approx(1000, rel=0.05), "kept their size"


def test_an_empty_file_reserves_its_history_growth(grown_tenfold: HistorySnapshot) -> None:
    assert Predictor(history=grown_tenfold).expected_size(request(0)) == 10


def test_a_file_whose_kind_never_grew_reserves_exactly_its_expected_size() -> None:
    log = make_log(seed=3).to_pandas()
    log["expected_size_bytes"] = log["size_bytes"]
    predictor = Predictor(history=history_of(log))
    sizes = [1000, 3, 10**9, 123_456_789]
    assert [predictor.expected_size(request(n)) for n in sizes] == sizes


def test_a_file_nothing_is_known_about_has_no_expected_size(
    grown_tenfold: HistorySnapshot,
) -> None:
    unknown = request(None, kind="rechunk", pipeline="new", stage="never-seen")
    assert Predictor(history=grown_tenfold).expected_size(unknown) is None


def test_the_size_heuristic_takes_an_empty_file_as_one_byte() -> None:
    predictor = Predictor()
    assert predictor.predict(request(0), 0) == 0.0
    np.testing.assert_array_equal(predictor.predict_many([request(0)] * 2, [0, 10]), [0.0, -1.0])


def test_a_batch_needs_one_size_per_request() -> None:
    with pytest.raises(ServiceConfigError, match="2 requests but 1 sizes"):
        Predictor().predict_many([request(1), request(2)], [1])


def test_an_empty_batch_predicts_nothing(per_pipeline: tuple[ModelSet, HistorySnapshot]) -> None:
    models, history = per_pipeline
    for predictor in (Predictor(), Predictor(models, history)):
        assert predictor.predict_many([], []).shape == (0,)


def test_each_file_is_predicted_by_its_own_pipelines_models(
    per_pipeline: tuple[ModelSet, HistorySnapshot],
) -> None:
    models, history = per_pipeline
    assert set(models.per_pipeline) == {"pipe0", "pipe1", "pipe2", "pipe3"}
    predictor = Predictor(models, history)
    batch = [request(2**20, pipeline=p) for p in ("pipe1", "pipe3", "pipe0", "elsewhere")]
    one_by_one = [predictor.predict(r, 2**20) for r in batch]
    for req, got in zip(batch, one_by_one, strict=True):
        row = features_from_request(req, history)
        assert got == pytest.approx(models.predict_one(row, req.pipeline))
    assert len(set(one_by_one)) == 4, "the pipelines' models differ"
    np.testing.assert_allclose(predictor.predict_many(batch, [2**20] * 4), one_by_one)


def test_a_payload_that_is_not_a_predictor_is_refused() -> None:
    with pytest.raises(ModelError, match="sent a dict, not a placement Predictor"):
        Predictor.from_bytes(pickle.dumps({"version": 1}))


def test_the_description_lists_pipelines_in_order_and_the_history_size(
    per_pipeline: tuple[ModelSet, HistorySnapshot],
) -> None:
    fitted, history = per_pipeline
    models = ModelSet(
        fitted.global_model, {"zeta": fitted.global_model, "alpha": fitted.global_model}
    )
    described = Predictor(models, history, version=4, source="/m").describe()
    assert described["pipelines"] == ["alpha", "zeta"]
    assert (described["version"], described["kind"], described["source"]) == (4, "lightgbm", "/m")
    assert described["history_runs"] == history.n_runs == 16
    assert described["history_keys"] == history.n_keys != history.n_runs
    assert Predictor().describe() == {"version": 0, "kind": "size-heuristic", "source": None}


def test_the_repr_names_version_and_kind() -> None:
    assert repr(Predictor(version=3)) == "<Predictor v3 size-heuristic>"
