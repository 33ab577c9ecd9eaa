"""Reading native placement logs where the edges are: files gone or damaged between
planning and reading, merged files, malformed values at the ends of their ranges, and
the sizes and estimates of the chunks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logs_analysis.issues import ReadIssues
from logs_analysis.readers import read_table
from logs_analysis.readers.native import (
    DAMAGED_FILE,
    UNREADABLE_FILE,
    UNREADABLE_JSONL,
    plan_jsonl,
    plan_parquet,
)
from placement.schema import SCHEMA_VERSION_KEY
from tests.logs_analysis.damage import damage_row_group
from tests.placement.logtables import make_log, merge_by_hand


@pytest.fixture(scope="module")
def rows() -> pa.Table:
    """15 log rows: one run, stages ``load``, ``shuffle-p2p`` and ``aggregate`` (5 rows each)."""
    return make_log(pipelines=1, runs=1, files_per_stage=5)


def _ids(table: pa.Table) -> list[str]:
    return [str(v) for v in table["file_id"].to_pylist()]


def _three_files(directory: Path, rows: pa.Table) -> list[Path]:
    """Log files ``a``, ``b``, ``c`` of 5 rows each, in row groups of 2, 2 and 1 rows."""
    paths = []
    for k, name in enumerate("abc"):
        path = directory / f"{name}.parquet"
        pq.write_table(rows.slice(5 * k, 5), path, row_group_size=2)
        paths.append(path)
    return paths


def _merge(directory: Path, sources: list[Path]) -> Path:
    """A merged file of ``sources`` in row groups of 3 rows (which straddle its parts)."""
    merged = merge_by_hand(directory, sources, "m.compacted.parquet")
    pq.write_table(pq.read_table(merged), merged, row_group_size=3)
    assert pq.ParquetFile(merged).metadata.num_row_groups == 5
    return merged


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ----------------------------------------------------------------------------- Parquet


def test_chunks_read_their_rows_from_the_merged_file_when_their_file_is_gone(
    tmp_path: Path, rows: pa.Table
) -> None:
    _, b, _ = files = _three_files(tmp_path, rows)
    chunks, issues = plan_parquet(b, chunk_rows=2)
    assert not issues
    assert [(c.first_row, c.estimated_rows) for c in chunks] == [(0, 2), (2, 2), (4, 1)]
    want = [_ids(rows.slice(5, 2)), _ids(rows.slice(7, 2)), _ids(rows.slice(9, 1))]
    _merge(tmp_path, files)
    b.unlink()  # merged and deleted after planning
    loaded = [c.load() for c in chunks]
    assert [_ids(r.table) for r in loaded] == want
    assert not any(r.issues for r in loaded)
    # planned after the deletion: the same chunks, their rows from the merged file
    chunks, issues = plan_parquet(b, chunk_rows=2)
    assert not issues
    assert [(c.first_row, c.estimated_rows, c.file_rows) for c in chunks] == [
        (0, 2, 5),
        (2, 2, 5),
        (4, 1, 5),
    ]
    loaded = [c.load() for c in chunks]
    assert [_ids(r.table) for r in loaded] == want
    assert all(pa.types.is_dictionary(r.table["stage"].type) for r in loaded)


def test_a_chunk_whose_file_is_gone_and_merged_nowhere_is_one_damaged_file(
    tmp_path: Path, rows: pa.Table
) -> None:
    _, b, _ = _three_files(tmp_path, rows)
    chunks, _ = plan_parquet(b, chunk_rows=2)
    b.unlink()
    loaded = [c.load() for c in chunks]
    assert all(r.table.num_rows == 0 for r in loaded)
    issues = ReadIssues.combine(r.issues for r in loaded)
    assert issues.counts == {DAMAGED_FILE: 1}
    assert [e.location for e in issues.examples] == ["rows 0-1", "rows 2-3", "rows 4-4"]
    assert issues.examples[0].detail.startswith("2 of the file's 5 rows: ")
    assert "No such file" in issues.examples[0].detail
    # and planned after it is gone: one unreadable file
    chunks, issues = plan_parquet(b)
    assert chunks == [] and issues.counts == {UNREADABLE_FILE: 1}


def test_a_chunk_whose_merged_file_is_damaged_says_so(tmp_path: Path, rows: pa.Table) -> None:
    _, b, _ = files = _three_files(tmp_path, rows)
    chunks, _ = plan_parquet(b, chunk_rows=2)
    merged = _merge(tmp_path, files)
    damage_row_group(merged, 1)  # merged rows 3-5: b's first row
    b.unlink()
    result = chunks[0].load()
    assert result.table.num_rows == 0
    assert result.issues.counts == {DAMAGED_FILE: 1}
    (example,) = result.issues.examples
    assert example.location == "rows 0-1"
    assert example.detail.startswith("2 of the file's 5 rows: the file is gone; its merged file: ")
    assert "thrift" in example.detail  # why the merged file did not read
    # the chunks beyond the damage still read
    assert _ids(chunks[2].load().table) == _ids(rows.slice(9, 1))


def test_a_file_replaced_by_a_directory_is_counted_not_fatal(
    tmp_path: Path, rows: pa.Table
) -> None:
    a, _, _ = _three_files(tmp_path, rows)
    (chunk,) = plan_parquet(a)[0]
    a.unlink()
    a.mkdir()  # an OSError other than "no such file"
    result = chunk.load()
    assert result.table.num_rows == 0
    assert result.issues.counts == {DAMAGED_FILE: 1}
    assert "the whole file (5 rows): " in result.issues.examples[0].detail
    assert "is a directory" in result.issues.examples[0].detail
    chunks, issues = plan_parquet(a)
    assert chunks == [] and issues.counts == {UNREADABLE_FILE: 1}


def test_a_torn_file_after_planning_is_one_damaged_file(tmp_path: Path, rows: pa.Table) -> None:
    a, _, _ = _three_files(tmp_path, rows)
    (chunk,) = plan_parquet(a)[0]
    a.write_bytes(a.read_bytes()[:50])
    result = chunk.load()
    assert result.table.num_rows == 0 and result.issues.counts == {DAMAGED_FILE: 1}


def test_damage_at_the_start_of_a_file_names_its_rows(tmp_path: Path, rows: pa.Table) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(rows, path, row_group_size=3)
    damage_row_group(path, 0)
    (chunk,) = plan_parquet(path)[0]  # one chunk of five row groups
    result = chunk.load()
    assert _ids(result.table) == _ids(rows.slice(3))
    assert result.issues.counts == {DAMAGED_FILE: 1}
    (example,) = result.issues.examples
    assert example.location == "rows 0-2"
    assert example.detail.startswith("3 of the file's 15 rows: ")
    assert [result.locate(i) for i in (0, 11)] == [("row 3", None), ("row 14", None)]
    # rows of differing dictionaries (stages) from the parts kept: one table to group
    assert result.table.group_by("stage").aggregate([("size_bytes", "sum")]).num_rows == 3


def test_a_chunk_with_every_row_group_damaged_has_one_example(
    tmp_path: Path, rows: pa.Table
) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(rows, path, row_group_size=5)
    for row_group in range(3):
        damage_row_group(path, row_group)
    (chunk,) = plan_parquet(path)[0]
    result = chunk.load()
    assert result.table.num_rows == 0
    assert [e.location for e in result.issues.examples] == ["rows 0-14"]


def test_damage_in_a_column_not_of_the_log_schema_loses_nothing(
    tmp_path: Path, rows: pa.Table
) -> None:
    path = tmp_path / "log.parquet"
    notes = pa.array([f"note {i}" * 20 for i in range(rows.num_rows)])
    pq.write_table(rows.append_column("note", notes), path, row_group_size=5)
    damage_row_group(path, 1, column="note")
    table, issues = read_table([path])
    assert not issues and table.num_rows == rows.num_rows


def test_chunks_keep_id_columns_dictionary_encoded_in_one_dictionary(
    tmp_path: Path, rows: pa.Table
) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(rows, path, row_group_size=5)  # one stage a row group
    (chunk,) = plan_parquet(path)[0]
    table = chunk.load().table
    assert pa.types.is_dictionary(table["stage"].type)
    assert not table.schema.field("run_id").nullable  # as in the log schema
    assert table.group_by("stage").aggregate([("size_bytes", "sum")]).num_rows == 3


def test_row_groups_larger_than_a_chunk_are_a_chunk_each(tmp_path: Path, rows: pa.Table) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(rows, path, row_group_size=5)
    chunks, _ = plan_parquet(path, chunk_rows=2)
    assert [c.row_groups for c in chunks] == [(0,), (1,), (2,)]
    assert [(c.first_row, c.estimated_rows, c.file_rows) for c in chunks] == [
        (0, 5, 15),
        (5, 5, 15),
        (10, 5, 15),
    ]


def test_a_schema_version_that_is_no_number_is_counted_not_fatal(
    tmp_path: Path, rows: pa.Table
) -> None:
    bad = rows.slice(0, 3).replace_schema_metadata({SCHEMA_VERSION_KEY: b"two"})
    pq.write_table(bad, tmp_path / "bad.parquet")
    pq.write_table(rows.slice(3), tmp_path / "ok.parquet")
    table, issues = read_table([tmp_path])
    assert table.num_rows == rows.num_rows - 3
    assert issues.counts == {UNREADABLE_FILE: 1}
    (example,) = issues.examples
    assert example.source == str(tmp_path / "bad.parquet")
    assert example.detail.startswith("schema version b'two' is not a whole number (3 rows); ")
    assert "rewrite the file with 'dataplane.placement.schema_version' set to" in example.detail


# ----------------------------------------------------------------------------- JSON lines


def test_jsonl_line_of_invalid_utf8_is_counted_and_the_rest_kept(
    tmp_path: Path, rows: pa.Table
) -> None:
    lines = [json.dumps(row).encode() for row in rows.slice(0, 4).to_pylist()]
    stage = json.dumps(rows["stage"][2].as_py()).encode()
    lines[2] = lines[2].replace(stage, b'"lo\xff\xfe"', 1)
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    table, issues = read_table([path])
    assert issues.counts == {"invalid JSON": 1}
    assert [e.location for e in issues.examples] == ["line 3"]
    assert "can't decode byte 0xff" in issues.examples[0].detail
    assert table["file_id"].to_pylist() == [rows["file_id"][i].as_py() for i in (0, 1, 3)]
    table.validate(full=True)  # every string kept is UTF-8


def test_jsonl_whitespace_lines_are_neither_rows_nor_issues(tmp_path: Path, rows: pa.Table) -> None:
    lines = [json.dumps(row) for row in rows.slice(0, 3).to_pylist()]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join([lines[0], "   ", lines[1], "\t", lines[2]]) + "\n")
    (chunk,) = plan_jsonl(path)[0]
    result = chunk.load()
    assert not result.issues and result.lines == 5
    assert [result.locate(i) for i in range(3)] == [("", 1), ("", 3), ("", 5)]


def test_jsonl_lines_of_json_that_is_no_object_are_counted(tmp_path: Path, rows: pa.Table) -> None:
    good = [json.dumps(row) for row in rows.slice(0, 2).to_pylist()]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join([good[0], "42", '"text"', "null", good[1]]) + "\n")
    (chunk,) = plan_jsonl(path)[0]
    result = chunk.load()
    assert result.issues.counts == {"not a JSON object": 3}
    assert [e.location for e in result.issues.examples] == ["line 2", "line 3", "line 4"]
    assert [result.locate(i) for i in range(2)] == [("", 1), ("", 5)]


def test_jsonl_values_at_and_past_the_low_end_of_their_range(
    tmp_path: Path, rows: pa.Table
) -> None:
    base = rows.slice(0, 6).to_pylist()
    base[1]["input_bytes"] = -(2**63)  # the smallest int64
    base[2]["input_bytes"] = -(2**63) - 1
    base[3]["priority"] = -(2**31)  # the smallest int32
    base[4]["priority"] = -(2**31) - 1
    (chunk,) = plan_jsonl(_jsonl(tmp_path / "log.jsonl", base))[0]
    result = chunk.load()
    assert result.issues.counts == {"value out of range": 2}
    assert sorted(e.location for e in result.issues.examples) == ["line 3", "line 5"]
    kept = {row["file_id"]: row for row in result.table.to_pylist()}
    assert kept[base[1]["file_id"]]["input_bytes"] == -(2**63)
    assert kept[base[3]["file_id"]]["priority"] == -(2**31)


def test_jsonl_numbers_converted_or_counted(tmp_path: Path, rows: pa.Table) -> None:
    base = rows.slice(0, 5).to_pylist()
    base[1]["size_bytes"] = 4096.0  # integral float of an integer column: kept
    base[2]["created_at"] = "soon"  # a float column given a string
    base[3]["deleted_at"] = 10**400  # too large for a float
    base[4]["worker"] = 7  # a number for a string column: kept as text
    (chunk,) = plan_jsonl(_jsonl(tmp_path / "log.jsonl", base))[0]
    result = chunk.load()
    assert result.issues.counts == {"value of the wrong type": 1, "value out of range": 1}
    located = {e.location: e.detail for e in result.issues.examples}
    assert located["line 3"] == "created_at='soon' is not a number"
    assert located["line 4"].startswith("deleted_at=1000")
    kept = {row["file_id"]: row for row in result.table.to_pylist()}
    assert kept[base[1]["file_id"]]["size_bytes"] == 4096
    assert kept[base[4]["file_id"]]["worker"] == "7"


def test_jsonl_chunks_cover_the_file_in_blocks_of_at_most_block_bytes(
    tmp_path: Path, rows: pa.Table
) -> None:
    path = _jsonl(tmp_path / "log.jsonl", rows.to_pylist() * 20)
    size = path.stat().st_size
    chunks, issues = plan_jsonl(path, block_bytes=4096)
    assert not issues
    assert len(chunks) == math.ceil(size / 4096)
    assert chunks[0].start == 0 and chunks[-1].end == size
    assert all(c.end - c.start <= 4096 for c in chunks)
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:], strict=False))
    # rows estimated from the first lines: near the real count, never none
    estimated = sum(c.estimated_rows for c in chunks)
    assert 300 <= estimated <= 300 + len(chunks)
    tiny, _ = plan_jsonl(path, block_bytes=100)  # blocks shorter than a line
    assert min(c.estimated_rows for c in tiny) == 1


def test_an_empty_jsonl_file_plans_no_chunk(tmp_path: Path) -> None:
    empty = tmp_path / "log.jsonl"
    empty.touch()
    assert plan_jsonl(empty) == ([], ReadIssues())


def test_a_jsonl_file_gone_after_listing_or_planning_is_counted_once(
    tmp_path: Path, rows: pa.Table
) -> None:
    path = _jsonl(tmp_path / "log.jsonl", rows.to_pylist())
    chunks, _ = plan_jsonl(path, block_bytes=1024)
    assert len(chunks) > 1
    path.unlink()
    loaded = [c.load() for c in chunks]
    assert all(r.table.num_rows == 0 and r.lines == 0 for r in loaded)
    issues = ReadIssues.combine(r.issues for r in loaded)
    assert issues.counts == {UNREADABLE_JSONL: 1}
    assert "No such file" in issues.examples[0].detail
    chunks, issues = plan_jsonl(path)
    assert chunks == [] and issues.counts == {UNREADABLE_JSONL: 1}
    path.mkdir()  # no longer a file
    chunks, issues = plan_jsonl(path)
    assert chunks == [] and issues.counts == {UNREADABLE_JSONL: 1}
