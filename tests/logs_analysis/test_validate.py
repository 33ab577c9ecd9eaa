"""Row keys of :mod:`logs_analysis.validate`: the string hash behind :func:`key_hashes` and
the search for rows read before (:func:`duplicate_rows`)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from logs_analysis.issues import MAX_EXAMPLES, ReadIssues
from logs_analysis.readers.base import ChunkResult
from logs_analysis.validate import (
    DUPLICATE_ROW,
    _hash_strings,
    drop_duplicates,
    duplicate_rows,
    key_hashes,
    usable_rows,
    validate_rows,
)

# ----------------------------------------------------------------------------- string hash


def _ids(rng: np.random.Generator, n: int, longest: int, alphabet: str) -> list[str]:
    """``n`` strings of 0 to ``longest`` characters drawn from ``alphabet``."""
    letters = np.asarray(list(alphabet))
    return ["".join(rng.choice(letters, int(rng.integers(0, longest + 1)))) for _ in range(n)]


# ragged lengths around the 8-byte words; padded to one width, or gathered word by word
# when a string is long or the text is not ASCII
STRING_SETS = {
    "ragged": ("worker-2648-d04ebb2d-~0123456789", 40),
    "long": ("abc-0123456789", 150),
    "non-ascii": ("aé€-😀0", 30),
}


def _layouts(strings: list[str]) -> dict[str, pa.Array | pa.ChunkedArray]:
    plain = pa.array(strings, pa.string())
    large = pa.array(strings, pa.large_string())
    padded = pa.array(["x" * 13, *strings, "tail"], pa.string())
    return {
        "string": plain,
        "large_string": large,
        "dictionary": pc.dictionary_encode(plain),
        "dictionary of large_string": pc.dictionary_encode(large),
        "chunked": pa.chunked_array([plain.slice(0, 7), plain.slice(7, 0), plain.slice(7)]),
        "sliced": padded.slice(1, len(strings)),
        "string_view": plain.cast(pa.string_view()),
    }


@pytest.mark.parametrize("name", sorted(STRING_SETS))
def test_string_hash_depends_on_the_string_alone(name: str, rng: np.random.Generator) -> None:
    """A string hashes the same alone or among others, in every layout of its column."""
    alphabet, longest = STRING_SETS[name]
    strings = _ids(rng, 300, longest, alphabet) + ["", "a" * 8, "b" * 16, "c" * 64]
    alone = np.array([_hash_strings(pa.array([s]))[0] for s in strings], dtype=np.uint64)
    for layout, column in _layouts(strings).items():
        hashes = _hash_strings(column)
        assert hashes.dtype == np.uint64, layout
        np.testing.assert_array_equal(hashes, alone, err_msg=layout)


def test_string_hash_tells_strings_apart(rng: np.random.Generator) -> None:
    """Near-identical strings get distinct hashes: trailing zero bytes, one changed byte,
    swapped words, and many counter ids of the real logs' shape."""
    strings = ["a" + "\0" * k for k in range(20)]  # "a" and "a\0" differ only in length
    base = "worker-2648-d04ebb2d-1234567~8901"
    strings += [base[:i] + "X" + base[i + 1 :] for i in range(len(base))]
    strings += ["AAAAAAAABBBBBBBB", "BBBBBBBBAAAAAAAA", "AAAAAAAA", "BBBBBBBB", ""]
    workers = [f"{w:08x}" for w in rng.integers(0, 2**32, 16)]
    strings += [f"worker-2648-{workers[i % 16]}-{i}~{i % 997}" for i in range(200_000)]
    assert len(set(strings)) == len(strings)
    hashes = _hash_strings(pa.array(strings))
    assert len(np.unique(hashes)) == len(strings)
    # the same strings as one chunk of ragged ASCII: padded, not gathered
    ids = _hash_strings(pa.array(strings[-200_000:]))
    np.testing.assert_array_equal(ids, hashes[-200_000:])


def test_null_strings_share_one_hash() -> None:
    """A null hashes the same plain or dictionary-encoded, and unlike the empty string."""
    plain = pa.array(["a", None, "", None], pa.string())
    hashes = _hash_strings(plain)
    encoded = _hash_strings(pc.dictionary_encode(plain))
    np.testing.assert_array_equal(hashes, encoded)
    assert hashes[1] == hashes[3] != hashes[2]


def test_key_hashes_of_parquet_and_plain_chunks_agree() -> None:
    """A row's key hash is the same whether its chunk came dictionary-encoded or plain."""
    runs = ["merge-medium-s3-1732000001", "merge-medium-s3-1732000002"]
    table = pa.table(
        {
            "run_id": pa.array([runs[i % 2] for i in range(50)]),
            "file_id": pa.array([f"worker-1-ab12cd34-{i}" for i in range(50)]),
        }
    )
    encoded = table.set_column(0, "run_id", pc.dictionary_encode(table["run_id"]))
    hashes = key_hashes(table)
    np.testing.assert_array_equal(hashes, key_hashes(encoded))
    swapped = table.rename_columns(["file_id", "run_id"]).select(["run_id", "file_id"])
    assert len(np.unique(np.r_[hashes, key_hashes(swapped)])) == 100


# ----------------------------------------------------------------------------- duplicates


def _reference(
    hashes: list[np.ndarray], sources: list[str]
) -> dict[int, tuple[list[int], tuple[str, ...]]]:
    """:func:`duplicate_rows`, row by row with a dict."""
    first: dict[int, int] = {}
    out: dict[int, tuple[list[int], tuple[str, ...]]] = {}
    for chunk, values in enumerate(hashes):
        for row, value in enumerate(values.tolist()):
            if value not in first:
                first[value] = chunk
                continue
            rows, firsts = out.setdefault(chunk, ([], ()))
            rows.append(row)
            if len(firsts) < MAX_EXAMPLES:
                out[chunk] = (rows, (*firsts, sources[first[value]]))
    return out


def test_duplicate_rows_keep_the_first_occurrence(rng: np.random.Generator) -> None:
    """Later occurrences of a key are found in input order, then row order, with the file of
    its first occurrence for the first few; empty chunks and repeats within a chunk too."""
    for _ in range(200):
        chunks = int(rng.integers(1, 8))
        distinct = int(rng.integers(1, 80))
        hashes = [
            rng.integers(0, distinct, int(rng.integers(0, 40))).astype(np.uint64) << np.uint64(40)
            for _ in range(chunks)
        ]
        sources = [f"log-{k % 3}.parquet" for k in range(chunks)]
        found = duplicate_rows(hashes, sources)
        expected = _reference(hashes, sources)
        assert sorted(found) == sorted(expected)
        for chunk, (rows, firsts) in expected.items():
            np.testing.assert_array_equal(found[chunk].positions, rows)
            assert found[chunk].first_sources == firsts
    distinct_only = [np.arange(10, dtype=np.uint64), np.arange(10, 20, dtype=np.uint64)]
    assert duplicate_rows(distinct_only, ["a", "b"]) == {}
    assert duplicate_rows([], []) == {}


@pytest.mark.parametrize(("copied", "bytes_per_row"), [(0, 12), (20_000, 24)])
def test_duplicate_rows_memory_is_a_few_bytes_a_row(
    copied: int, bytes_per_row: int, rng: np.random.Generator
) -> None:
    """Beside its inputs, the search holds about one sorted copy of the hashes (8 bytes a
    row); when keys repeat, one more array of row indices (8 bytes a row)."""
    n = 400_000
    hashes = [rng.integers(0, 2**63, n // 4).astype(np.uint64) for _ in range(4)]
    hashes[3][:copied] = hashes[0][:copied]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        found = duplicate_rows(hashes, ["a", "b", "c", "d"])
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert sum(len(d.positions) for d in found.values()) == copied
    assert peak <= bytes_per_row * n, f"{peak / n:.1f} bytes a row"


# ----------------------------------------------------------------------------- row checks


def _rows(n: int, **columns: list) -> pa.Table:
    """``n`` good rows in the placement log schema, with ``columns`` replaced."""
    from placement.schema import SCHEMA

    values: dict[str, list] = {
        "file_id": [f"f{i}" for i in range(n)],
        "pipeline": ["p"] * n,
        "run_id": ["r"] * n,
        "stage": ["s"] * n,
        "created_at": [100.0 + i for i in range(n)],
        "file_kind": ["spill"] * n,
        "deleted_at": [110.0 + i for i in range(n)],
        "size_bytes": [1000] * n,
        "read_ops": [1] * n,
        "write_ops": [1] * n,
        "read_bytes": [1000] * n,
        "write_bytes": [1000] * n,
    }
    values.update(columns)
    fields = [pa.field(f.name, f.type) for f in SCHEMA if f.name in values]
    return pa.table({f.name: pa.array(values[f.name], f.type) for f in fields})


def _check(table: pa.Table) -> tuple[pa.Table, ReadIssues]:
    return validate_rows(ChunkResult(table, ReadIssues(), "log.parquet", first_row=0))


def test_a_file_deleted_when_it_was_created_is_kept() -> None:
    table, issues = _check(_rows(3, deleted_at=[100.0, 105.0, 102.0]))
    assert table.num_rows == 3 and not issues


def test_a_deletion_time_that_is_not_a_number_drops_the_row() -> None:
    table, issues = _check(_rows(3, deleted_at=[110.0, float("nan"), 112.0]))
    assert table["file_id"].to_pylist() == ["f0", "f2"]
    assert issues.counts == {"non-finite time": 1}
    assert [e.location for e in issues.examples] == ["row 1"]


def test_one_missing_run_id_drops_that_row() -> None:
    table, issues = _check(_rows(4, run_id=["r", "r", None, "r"]))
    assert table["file_id"].to_pylist() == ["f0", "f1", "f3"]
    assert issues.counts == {"null run_id": 1}
    assert [(e.reason, e.location) for e in issues.examples] == [("null run_id", "row 2")]


def test_a_row_with_several_faults_is_counted_under_the_first() -> None:
    table, issues = _check(_rows(3, file_id=["f0", None, "f2"], size_bytes=[1000, -1, 1000]))
    assert table["file_id"].to_pylist() == ["f0", "f2"]
    assert issues.counts == {"null file_id": 1}
    assert issues.total == 1 and len(issues.examples) == 1


def test_many_bad_rows_are_all_counted_and_a_few_kept_as_examples() -> None:
    table, issues = _check(_rows(10, read_ops=[-1] * 7 + [1] * 3))
    assert table["file_id"].to_pylist() == ["f7", "f8", "f9"]
    assert issues.counts == {"negative read_ops": 7}
    assert [e.location for e in issues.examples] == [f"row {i}" for i in range(MAX_EXAMPLES)]
    assert MAX_EXAMPLES == 5


@pytest.mark.parametrize(
    "name", ["size_bytes", "read_ops", "write_ops", "read_bytes", "write_bytes"]
)
def test_a_negative_size_or_count_drops_the_row(name: str) -> None:
    table, issues = _check(_rows(3, **{name: [0, -1, 5]}))
    assert table["file_id"].to_pylist() == ["f0", "f2"]
    assert issues.counts == {f"negative {name}": 1}


def test_a_duplicate_is_located_at_its_row_in_the_file_past_dropped_rows() -> None:
    """Rows dropped by the row checks before a duplicate do not shift where it is said to be."""
    first = ChunkResult(_rows(4), ReadIssues(), "a.parquet", first_row=0)
    again = _rows(5, file_id=["g0", "f1", "g2", "f3", "g4"], read_ops=[-1, 1, -1, 1, 1])
    second = ChunkResult(again, ReadIssues(), "b.parquet", first_row=0)
    table_a = usable_rows(first)[0]
    table_b, dropped, kept_b = usable_rows(second)
    assert dropped.counts == {"negative read_ops": 2}
    np.testing.assert_array_equal(kept_b, [1, 3, 4])
    found = duplicate_rows([key_hashes(table_a), key_hashes(table_b)], ["a.parquet", "b.parquet"])
    assert list(found) == [1]
    table, issues = drop_duplicates(table_b, second, kept_b, found[1])
    assert table["file_id"].to_pylist() == ["g4"]
    assert issues.counts == {DUPLICATE_ROW: 2}
    assert [e.location for e in issues.examples] == ["row 1", "row 3"]
    assert all("already read from a.parquet" in e.detail for e in issues.examples)
