"""The creation-time facts of a temporary file (:class:`FileRequest`): which values are
refused, which are converted or clipped to fit their log columns, and the log row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from placement.schema import SCHEMA, conform
from placement.storage import FileKind, FileRequest, StorageConfigError
from placement.storage.request import INT32_MAX


def test_file_kinds_print_as_their_log_values() -> None:
    assert [str(kind) for kind in FileKind] == [
        "spill",
        "shuffle",
        "rechunk",
        "cache_shard",
        "other",
    ]
    assert f"{FileKind.SHUFFLE}" == "shuffle"


def test_a_request_without_names_gets_the_unknown_labels() -> None:
    row = FileRequest(file_kind="spill", created_at=1.0).to_row()
    assert (row["pipeline"], row["run_id"], row["stage"]) == ("unknown", "unknown", "unknown")
    assert row["operator"] is None and row["expected_size_bytes"] is None


def test_the_log_row_holds_the_plain_kind_string_and_fits_the_schema() -> None:
    row = FileRequest(
        file_kind=FileKind.CACHE_SHARD, created_at=5.0, expected_size_bytes=10
    ).to_row()
    assert row["file_kind"] == "cache_shard" and type(row["file_kind"]) is str
    assert row["created_at"] == 5.0 and row["expected_size_bytes"] == 10
    conform(pa.Table.from_pylist([row], schema=SCHEMA))


@pytest.mark.parametrize("name", ["pipeline", "run_id", "stage"])
@pytest.mark.parametrize("value", ["", 5, None])
def test_names_must_be_non_empty_strings(name: str, value: object) -> None:
    with pytest.raises(StorageConfigError, match=f"{name}={value!r} must be a non-empty string"):
        FileRequest(file_kind="spill", created_at=1.0, **{name: value})


@pytest.mark.parametrize("value", ["1", None, float("inf")])
def test_the_creation_time_must_be_a_finite_number(value: object) -> None:
    with pytest.raises(StorageConfigError, match="must be a finite number of seconds"):
        FileRequest(file_kind="spill", created_at=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["expected_size_bytes", "n_workers", "n_dependents"])
def test_a_bool_is_not_a_count(name: str) -> None:
    with pytest.raises(StorageConfigError, match=f"{name}=True must be a non-negative int"):
        FileRequest(file_kind="spill", created_at=1.0, **{name: True})


def test_zero_is_a_count_whatever_its_integer_type() -> None:
    for zero in (0, np.int64(0), np.uint8(0)):
        req = FileRequest(
            file_kind="spill", created_at=1.0, n_dependents=zero, expected_size_bytes=zero
        )
        assert (req.n_dependents, req.expected_size_bytes) == (0, 0)
        assert type(req.n_dependents) is int


def test_plain_ints_beyond_an_int32_column_are_clipped_like_numpy_ones() -> None:
    req = FileRequest(
        file_kind="spill",
        created_at=1.0,
        n_partitions_in=2**40,
        priority=2**40,
        reuse_distance=-(2**40),
        input_bytes=2**40,  # an int64 column: kept
    )
    assert (req.n_partitions_in, req.priority) == (INT32_MAX, INT32_MAX)
    assert req.reuse_distance == -INT32_MAX and req.input_bytes == 2**40


def test_memory_pressure_is_a_non_negative_number() -> None:
    for value in (0.0, 0, 1.5):
        req = FileRequest(file_kind="spill", created_at=1.0, memory_pressure=value)
        assert req.memory_pressure == value
    for bad in (-0.01, "0.5"):
        with pytest.raises(StorageConfigError, match=r"memory_pressure=.* must be >= 0 or None"):
            FileRequest(file_kind="spill", created_at=1.0, memory_pressure=bad)  # type: ignore[arg-type]
