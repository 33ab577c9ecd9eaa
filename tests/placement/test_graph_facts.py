"""Graph facts: distinct tasks per stage, aliases counted only for stages without other
tasks, and P2P shuffles named in graph order, over one call or the phases of a run."""

from __future__ import annotations

from typing import Any

import dask
import dask.dataframe as dd
import pandas as pd
import pytest

from placement.graph_facts import StageKeys, graph_facts

PARTITIONS = 4
#: Task names as Dask makes them: stage, then a token (:func:`dask.utils.key_split`).
LOAD = "load-0123456789abcdef0123456789abcdef"
LOAD_RENAMED = "load-fedcba9876543210fedcba9876543210"
RENAMED = "renamed-00112233445566778899aabbccddeeff"


@pytest.fixture(scope="module")
def frame() -> Any:
    pdf = pd.DataFrame({"k": range(200), "v": [i % 7 for i in range(200)]})
    return dd.from_pandas(pdf, npartitions=PARTITIONS)


def shuffled(frame: Any, on: str) -> Any:
    """``frame`` shuffled by P2P on ``on`` into 2 partitions."""
    return frame.shuffle(on, npartitions=2, shuffle_method="p2p")


def shuffle_id(collection: Any) -> str:
    """The id of the only P2P shuffle in ``collection``'s graph."""
    (sid,) = graph_facts([collection], "any").shuffle_stages
    return sid


def double(part: pd.DataFrame) -> pd.DataFrame:
    return part * 2


def test_a_key_is_recorded_once_for_each_kind() -> None:
    keys = StageKeys()
    assert keys.add((LOAD, 0), alias=False)
    assert not keys.add((LOAD, 0), alias=False)
    assert keys.add((LOAD, 1), alias=False)
    assert keys.add((LOAD, 0), alias=True)  # the same key as an alias is news
    assert not keys.add((LOAD, 0), alias=True)
    assert keys.tasks == {"load": {(LOAD, 0), (LOAD, 1)}}
    assert keys.aliases == {"load": {(LOAD, 0)}}


def test_aliases_count_only_for_a_stage_without_other_tasks() -> None:
    keys = StageKeys()
    for i in range(3):
        keys.add((LOAD, i), alias=False)
    for i in range(2):
        keys.add((LOAD_RENAMED, i), alias=True)  # the same stage, part of its output renamed
    for i in range(5):
        keys.add((RENAMED, i), alias=True)
    assert keys.counts() == {"load": 3, "renamed": 5}


def test_a_p2p_shuffle_is_named_and_counts_its_input_partitions(frame: Any) -> None:
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        collection = shuffled(frame, "k")
        facts = graph_facts([collection], "groupby")
    (sid,) = facts.shuffle_stages
    assert facts.shuffle_stages == {sid: "groupby-p2p0"}
    assert facts.shuffle_inputs == {sid: PARTITIONS}
    assert facts.stage_tasks["shuffle-transfer"] == PARTITIONS
    assert facts.stage_tasks["shuffle-barrier"] == 1
    assert facts.stage_tasks["frompandas"] == PARTITIONS


def test_shuffles_are_numbered_from_first_in_the_order_of_the_collections(frame: Any) -> None:
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        by_k, by_v = shuffled(frame, "k"), shuffled(frame, "v")
        k, v = shuffle_id(by_k), shuffle_id(by_v)
        assert graph_facts([by_k, by_v], "merge").shuffle_stages == {
            k: "merge-p2p0",
            v: "merge-p2p1",
        }
        assert graph_facts([by_v, by_k], "merge").shuffle_stages == {
            v: "merge-p2p0",
            k: "merge-p2p1",
        }
        assert graph_facts([by_k], "merge", first=3).shuffle_stages == {k: "merge-p2p3"}


def test_a_later_phase_adds_its_tasks_and_names_only_its_new_shuffles(frame: Any) -> None:
    seen = StageKeys()
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        by_k, by_v = shuffled(frame, "k"), shuffled(frame, "v")
        k, v = shuffle_id(by_k), shuffle_id(by_v)
        first = graph_facts([by_k], "merge", seen=seen)
        later = graph_facts([by_k, by_v], "merge", first=1, seen=seen)
    assert first.shuffle_stages == {k: "merge-p2p0"}
    assert later.shuffle_stages == {v: "merge-p2p1"}
    assert later.shuffle_inputs == {v: PARTITIONS}
    # both shuffles' transfers, the shared input once
    assert later.stage_tasks["shuffle-transfer"] == 2 * PARTITIONS
    assert later.stage_tasks["frompandas"] == PARTITIONS


def test_a_shuffle_whose_transfers_were_counted_before_reports_no_input_count(
    frame: Any,
) -> None:
    seen = StageKeys()
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        collection = shuffled(frame, "k")
        sid = shuffle_id(collection)
        for i in range(PARTITIONS):
            seen.add((f"shuffle-transfer-{sid}", i), alias=False)
        facts = graph_facts([collection], "merge", seen=seen)
    assert facts.shuffle_stages == {sid: "merge-p2p0"}
    assert facts.shuffle_inputs == {}


def test_a_persisted_collection_counts_its_partitions_not_also_their_new_names(
    frame: Any,
) -> None:
    persisted = frame.map_partitions(double).persist(scheduler="sync")
    facts = graph_facts([persisted], "groupby")
    assert facts.stage_tasks == {"double": PARTITIONS}
    assert facts.shuffle_stages == {} and facts.shuffle_inputs == {}
