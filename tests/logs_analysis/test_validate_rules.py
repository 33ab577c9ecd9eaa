"""Row checks and row keys of :mod:`logs_analysis.validate` at their edges: every required
column, times that are not finite, where a dropped row of a JSON-lines log is said to be,
duplicates read from several files, and the key hash as its module documents it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logs_analysis.aggregate import AggregateConfig, aggregate
from logs_analysis.issues import MAX_EXAMPLES, ReadIssues
from logs_analysis.readers import read_table
from logs_analysis.readers.base import ChunkResult
from logs_analysis.readers.native import plan_jsonl
from logs_analysis.validate import (
    _LENGTH_MULT,
    _SEED,
    DUPLICATE_ROW,
    DuplicateRows,
    _hash_strings,
    drop_duplicates,
)
from placement.schema import REQUIRED_COLUMNS, SCHEMA
from tests.logs_analysis.test_validate import _check, _rows
from tests.placement.logtables import make_log

# ----------------------------------------------------------------------------- row checks


@pytest.mark.parametrize("name", REQUIRED_COLUMNS)
def test_a_missing_value_of_any_required_column_drops_the_row(name: str) -> None:
    """A null in any required column (the last one included) drops that row alone."""
    column = _rows(3)[name].to_pylist()
    column[1] = None
    table, issues = _check(_rows(3, **{name: column}))
    assert table["file_id"].to_pylist() == ["f0", "f2"]
    assert issues.counts == {f"null {name}": 1}
    assert [(e.location, e.detail) for e in issues.examples] == [("row 1", f"{name} is missing")]


@pytest.mark.parametrize("created", [float("nan"), float("inf"), float("-inf")])
def test_a_creation_time_that_is_not_finite_drops_the_row(created: float) -> None:
    """A creation time that is NaN or infinite is a non-finite time, whatever the deletion
    time (an infinite one is not counted as a file deleted before it was created)."""
    table, issues = _check(_rows(3, created_at=[100.0, created, 102.0]))
    assert table["file_id"].to_pylist() == ["f0", "f2"]
    assert issues.counts == {"non-finite time": 1}
    assert [e.location for e in issues.examples] == ["row 1"]


def _write_jsonl(rows: list[dict], path: Path) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_rows_dropped_from_a_json_lines_log_are_located_at_their_file_lines(
    tmp_path: Path,
) -> None:
    """A bad row and a row read before, both far into a JSON-lines log read in many blocks,
    are said to be at their lines of the file, not of their block."""
    rows = make_log(pipelines=2, runs=2, files_per_stage=10).to_pylist()  # 120 rows
    rows[89]["read_ops"] = -1  # line 90
    rows[99] = dict(rows[2])  # line 100 repeats line 3
    path = tmp_path / "log.jsonl"
    _write_jsonl(rows, path)
    chunks, _ = plan_jsonl(path, block_bytes=4096)
    assert len(chunks) > 10
    agg = aggregate(chunks, AggregateConfig(scheduler="sync"), paths=[path])
    assert agg.rows == len(rows) - 2
    assert agg.issues.counts == {"negative read_ops": 1, DUPLICATE_ROW: 1}
    located = {e.reason: (e.location, e.line, e.detail) for e in agg.issues.examples}
    assert located["negative read_ops"] == ("line 90", 90, "read_ops < 0")
    run_id, file_id = rows[2]["run_id"], rows[2]["file_id"]
    assert located[DUPLICATE_ROW] == (
        "line 100",
        100,
        f"run_id={run_id!r} file_id={file_id!r}, already read from {path}",
    )


# ----------------------------------------------------------------------------- duplicates


def test_duplicates_name_the_file_each_was_first_read_from(tmp_path: Path) -> None:
    """Rows of a third log read before, some in the first log and some in the second, are
    each said to be already read from their own file, with their own run and file ids; all
    of them are counted, the first few kept as examples."""
    rows = make_log(pipelines=1, runs=2, files_per_stage=4)  # two runs of 12 rows
    first, second = rows.slice(0, 12), rows.slice(12, 12)
    logs = tmp_path / "logs"
    logs.mkdir()
    pq.write_table(first, logs / "a.parquet")
    pq.write_table(second, logs / "b.parquet")
    # c: a row of b, then a row of a, then a new row, then six more rows of a
    again = pa.concat_tables(
        [second.slice(5, 1), first.slice(0, 1), rows.slice(0, 1), first.slice(1, 6)]
    )
    ids = again["file_id"].to_pylist()
    again = again.set_column(
        again.schema.get_field_index("file_id"),
        SCHEMA.field("file_id"),
        pa.array([*ids[:2], "new-file", *ids[3:]], pa.string()),
    )
    pq.write_table(again, logs / "c.parquet")
    table, issues = read_table([logs])
    assert table.num_rows == rows.num_rows + 1
    assert issues.counts == {DUPLICATE_ROW: 8}
    examples = [e for e in issues.examples if e.source == str(logs / "c.parquet")]
    assert len(examples) == MAX_EXAMPLES
    expected = [(0, "b"), (1, "a"), (3, "a"), (4, "a"), (5, "a")]
    assert [(e.location, e.detail) for e in examples] == [
        (
            f"row {i}",
            f"run_id={again['run_id'][i].as_py()!r} file_id={ids[i]!r}, "
            f"already read from {logs / (name + '.parquet')}",
        )
        for i, name in expected
    ]


def test_a_log_of_one_row_given_twice_is_read_once(tmp_path: Path) -> None:
    """Two logs of one row each, the same row, leave that row once; the second log's copy is
    counted as read before, in the first log."""
    row = make_log(pipelines=1, runs=1, files_per_stage=1).slice(0, 1)
    logs = tmp_path / "logs"
    logs.mkdir()
    pq.write_table(row, logs / "a.parquet")
    pq.write_table(row, logs / "b.parquet")
    table, issues = read_table([logs])
    assert table.num_rows == 1
    assert issues.counts == {DUPLICATE_ROW: 1}
    (example,) = issues.examples
    assert (example.source, example.location) == (str(logs / "b.parquet"), "row 0")
    assert example.detail.endswith(f"already read from {logs / 'a.parquet'}")


def test_duplicates_that_hold_no_row_drop_nothing() -> None:
    """Duplicates that hold no row drop nothing and count nothing."""
    table = _rows(3)
    result = ChunkResult(table, ReadIssues(), "log.parquet", first_row=0)
    none = DuplicateRows(np.zeros(0, dtype=np.int64))
    kept, issues = drop_duplicates(table, result, np.arange(3), none)
    assert kept.equals(table)
    assert not issues and issues.counts == {}


# ----------------------------------------------------------------------------- key hash

_M64 = 2**64 - 1


def _fmix64(h: int) -> int:
    """MurmurHash3's 64-bit finalizer, as published."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    h ^= h >> 33
    return h


def _documented_hash(data: bytes) -> int:
    """The hash of a string's bytes as the module documents it: the length times the length
    multiplier, xor the seed, then each 8-byte little-endian word (the last zero-filled)
    folded in through the finalizer."""
    h = ((len(data) * int(_LENGTH_MULT)) & _M64) ^ int(_SEED)
    for k in range(0, len(data), 8):
        h = _fmix64(h ^ int.from_bytes(data[k : k + 8].ljust(8, b"\0"), "little"))
    return h


def _strings(rng: np.random.Generator) -> list[bytes]:
    """Strings of every length from 0 to 80 bytes (short and long, ASCII and not), encoded."""
    letters = np.asarray(list("abcdefghij-0123456789~"))
    strings = ["".join(rng.choice(letters, n)) for n in range(81)]
    strings += ["é", "aé€-😀0" * 3, "x" * 7 + "é", "worker-2648-d04ebb2d-1234567~8901"]
    return [s.encode() for s in strings]


@pytest.mark.parametrize(
    "kind", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()], ids=str
)
def test_string_hash_is_the_documented_one(kind: pa.DataType, rng: np.random.Generator) -> None:
    """Strings and bytes (UTF-8 or not), of one length, ragged and short, or long and not
    ASCII, hash as the module documents, with MurmurHash3's 64-bit finalizer."""
    data = _strings(rng)
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if not text:  # bytes that are no UTF-8 text
        data += [b"\xff\xfe", b"\x80" * 9, bytes(range(256))]
    one_length = [d for d in data if len(d) == 12]
    short_ascii = [d for d in data if len(d) <= 20 and d.isascii()]  # padded to one width
    for part in (data, one_length, short_ascii):
        values = [d.decode() for d in part] if text else part
        expected = np.array([_documented_hash(d) for d in part], dtype=np.uint64)
        np.testing.assert_array_equal(_hash_strings(pa.array(values, kind)), expected)


def test_a_column_without_chunks_hashes_to_nothing() -> None:
    """A column holding no chunk at all has no hashes (and no error)."""
    hashes = _hash_strings(pa.chunked_array([], pa.string()))
    assert hashes.dtype == np.uint64 and hashes.shape == (0,)
