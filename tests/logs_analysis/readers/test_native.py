"""The service's own logs: Parquet (as LogWriter writes them) and JSON lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logs_analysis.errors import FormatError, InputError
from logs_analysis.formats import Container, LogFormat, discover, sniff
from logs_analysis.readers import read_table
from logs_analysis.readers.native import JsonlChunk, plan_jsonl, plan_parquet
from placement.schema import SCHEMA, SCHEMA_VERSION, SCHEMA_VERSION_KEY


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("file_id")


def _plain(table: pa.Table) -> pa.Table:
    """Decode dictionary columns so tables compare by value."""
    cols = [
        c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns
    ]
    return pa.Table.from_arrays(cols, schema=SCHEMA)


def _write_jsonl(table: pa.Table, path: Path) -> None:
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in table.to_pylist())


def test_parquet_directory_round_trip(native_dir: Path, real_rows: pa.Table) -> None:
    files = sorted(native_dir.glob("*.parquet"))
    assert len(files) >= 3  # LogWriter flushed several files
    assert all(sniff(f) == (LogFormat.NATIVE, Container.PARQUET) for f in files)
    table, issues = read_table([native_dir])
    assert not issues
    assert _sorted(_plain(table)).equals(_sorted(real_rows))


def test_jsonl_round_trip_across_blocks(real_rows: pa.Table, tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    _write_jsonl(real_rows, path)
    assert sniff(path) == (LogFormat.NATIVE, Container.JSONL)
    chunks, _ = plan_jsonl(path, block_bytes=4096)  # many blocks; lines straddle block edges
    assert len(chunks) > 10
    loaded = [c.load() for c in chunks]
    assert sum(r.lines for r in loaded) == real_rows.num_rows
    table = pa.concat_tables([r.table for r in loaded])
    assert _sorted(table).equals(_sorted(real_rows))


def test_jsonl_malformed_lines_keep_the_rest(
    real_rows: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"
    _write_jsonl(real_rows, path)
    lines = path.read_text().splitlines()
    bad = {
        5: lines[5][:40],  # torn line
        77: "[1, 2]",  # not an object
        150: lines[150].replace('"read_ops": ', '"read_ops": "many", "x": '),  # wrong type
        299: "",  # blank lines are not rows, nor issues
    }
    for i, text in bad.items():
        lines[i] = text
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr("logs_analysis.readers.native.BLOCK_BYTES", 8192)
    table, issues = read_table([path])
    assert issues.counts == {
        "invalid JSON": 1,
        "not a JSON object": 1,
        "value of the wrong type": 1,
    }
    assert sorted(e.location for e in issues.examples) == sorted(
        f"line {i + 1}" for i in (5, 77, 150)
    )
    assert table.num_rows == real_rows.num_rows - 4


def test_bad_rows_are_dropped_and_located(real_rows: pa.Table, tmp_path: Path) -> None:
    t = real_rows.slice(0, 50)
    created = t["created_at"].to_numpy().copy()
    deleted = t["deleted_at"].to_numpy().copy()
    deleted[7] = created[7] - 5.0
    ops = t["read_ops"].to_numpy().copy()
    ops[11] = -1
    t = t.set_column(
        t.schema.get_field_index("deleted_at"), SCHEMA.field("deleted_at"), pa.array(deleted)
    )
    t = t.set_column(t.schema.get_field_index("read_ops"), SCHEMA.field("read_ops"), pa.array(ops))
    path = tmp_path / "bad.parquet"
    pq.write_table(t, path)
    table, issues = read_table([path])
    assert table.num_rows == 48
    assert issues.counts == {"deleted before created": 1, "negative read_ops": 1}
    assert {(e.reason, e.location) for e in issues.examples} == {
        ("deleted before created", "row 7"),
        ("negative read_ops", "row 11"),
    }


def test_torn_parquet_is_skipped_not_fatal(native_dir: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(native_dir, logs)
    files = sorted(logs.glob("*.parquet"))
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])  # a crash mid-write
    good_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files[1:])
    table, issues = read_table([logs])
    assert table.num_rows == good_rows
    assert issues.counts == {"unreadable Parquet file (skipped)": 1}
    assert issues.examples[0].source == str(files[0])


def test_only_unreadable_input_is_a_clear_error(native_dir: Path, tmp_path: Path) -> None:
    src = min(native_dir.glob("*.parquet"))
    torn = tmp_path / "torn.parquet"
    torn.write_bytes(src.read_bytes()[:100])
    with pytest.raises(InputError, match=r"no usable log rows.*unreadable Parquet file"):
        read_table([torn])


def test_other_parquet_and_newer_schema_are_skipped(real_rows: pa.Table, tmp_path: Path) -> None:
    pq.write_table(pa.table({"a": [1, 2, 3]}), tmp_path / "other.parquet")
    newer = real_rows.slice(0, 10).replace_schema_metadata(
        {SCHEMA_VERSION_KEY: str(SCHEMA_VERSION + 1).encode()}
    )
    pq.write_table(newer, tmp_path / "newer.parquet")
    pq.write_table(real_rows.slice(10, 20), tmp_path / "ok.parquet")
    table, issues = read_table([tmp_path])
    assert table.num_rows == 20
    # one file each, not its rows (which the detail says); inputs not read, not malformed data
    assert issues.counts == {
        "not a placement log: missing required columns (skipped)": 1,
        "newer log schema version (skipped)": 1,
    }
    assert issues.skipped_inputs == 2 and issues.malformed == 0
    details = {Path(e.source).name: e.detail for e in issues.examples}
    assert details["other.parquet"].endswith("(3 rows)")
    assert "(10 rows); upgrade dataplane" in details["newer.parquet"]


def test_parquet_chunks_follow_row_groups(real_rows: pa.Table, tmp_path: Path) -> None:
    path = tmp_path / "big.parquet"
    pq.write_table(real_rows, path, row_group_size=40)
    chunks, _ = plan_parquet(path, chunk_rows=100)
    # whole row groups of 40 rows, at most 100 rows a chunk: two full groups a chunk; the
    # short last group (n % 40 rows) goes where it fits
    n = real_rows.num_rows
    full, short = divmod(n, 40)
    assert full >= 8 and 0 < short <= 20
    sizes = [80] * (full // 2)
    if full % 2:  # a lone full group and the short one
        sizes.append(40 + short)
    else:  # beside the last two full groups: 80 + short <= 100
        sizes[-1] += short
    assert [c.first_row for c in chunks] == [80 * i for i in range(len(sizes))]
    assert [c.estimated_rows for c in chunks] == sizes
    assert sum(c.estimated_rows for c in chunks) == real_rows.num_rows
    table = pa.concat_tables([c.load().table for c in chunks])
    assert _plain(table).equals(real_rows)


def test_missing_and_empty_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        discover([tmp_path / "nope"])
    empty = tmp_path / "empty.parquet"
    empty.touch()
    with pytest.raises(InputError, match="is empty"):
        discover([empty])
    (tmp_path / "sub").mkdir()
    with pytest.raises(InputError, match="no log files found"):
        discover([tmp_path / "sub"])
    with pytest.raises(InputError, match="no log paths"):
        discover([])


def test_unknown_file_named_explicitly(tmp_path: Path) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\n")
    with pytest.raises(FormatError, match="cannot tell the format.*--format"):
        discover([odd])
    with pytest.raises(FormatError, match="--format 'csv'"):
        discover([odd], "csv")


def test_unreadable_file(tmp_path: Path) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    secret = tmp_path / "log.parquet"
    secret.write_bytes(b"PAR1")
    secret.chmod(0)
    with pytest.raises(InputError, match="cannot read"):
        discover([secret])


def test_jsonl_chunk_edges(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    lines = [json.dumps({"file_id": f"f{i}", "k": "v" * i}) for i in range(30)]
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    for step in (1, 7, 50, 97, size):
        got = []
        for start in range(0, size, step):
            chunk = JsonlChunk(str(path), start, min(start + step, size), 1)
            got.extend(chunk._read_block().splitlines())
        assert [g.decode() for g in got if g] == lines, step
    assert np.all(np.diff([len(x) for x in lines]) > 0)


def test_special_file_named_explicitly(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"log\.fifo is not a regular file or directory"):
        discover([fifo])


def test_files_a_merged_log_file_holds_are_read_once(tmp_path: Path) -> None:
    """A compaction stopped between renaming its merged file in and deleting the files it
    merged: the report reads each row once and counts no duplicate."""
    from placement.logwriter import LogWriter
    from tests.placement.logtables import merge_by_hand
    from tests.placement.test_logwriter import row

    with LogWriter(tmp_path, prefix="w", max_rows=2) as writer:
        for i in range(8):
            writer.add(row(i, size_bytes=4096, read_bytes=4096, write_bytes=4096))
    sources = sorted(tmp_path.glob("w-*.parquet"))
    merge_by_hand(tmp_path, sources[:3], "w-000001.abcd1234.compacted.parquet")
    table, issues = read_table([tmp_path])
    assert sorted(table["file_id"].to_pylist()) == [f"f{i}" for i in range(8)]
    assert not issues  # before the rule: 6 rows counted as duplicates
    # a file planned, then merged and deleted before its chunk is read
    chunks, _ = plan_parquet(sources[3])
    merge_by_hand(tmp_path, sources[3:], "w-000004.abcd5678.compacted.parquet")
    sources[3].unlink()
    loaded = [c.load() for c in chunks]
    assert [r.table["file_id"].to_pylist() for r in loaded] == [["f6", "f7"]]
    assert not any(r.issues for r in loaded)
    # and one planned after its deletion
    chunks, issues = plan_parquet(sources[3])
    assert not issues
    assert _plain(pa.concat_tables([c.load().table for c in chunks]))["file_id"].to_pylist() == [
        "f6",
        "f7",
    ]


def _compact_during_listing(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Eight rows in four files, three merged by a real compaction, and a listing of
    ``directory`` torn by it: made while the merged file was renamed in and its parts
    deleted, it saw neither (only what was there before and after). Returns the merged file."""
    from placement.compact import compact
    from placement.compacted import COMPACTED_SUFFIX
    from placement.logwriter import LogWriter
    from tests.placement.test_logwriter import row

    with LogWriter(directory, prefix="w", max_rows=2) as writer:
        for i in range(8):
            writer.add(row(i))
    before = {p.name for p in directory.iterdir()}
    compact(directory, target_rows=6)
    after = {p.name for p in directory.iterdir()}
    (merged,) = [directory / n for n in after if n.endswith(COMPACTED_SUFFIX)]
    assert len(before - after) == 3  # the parts are gone, the merged file is on disk
    torn = [directory / n for n in sorted(before & after)]
    real_iterdir = Path.iterdir

    def iterdir(self: Path) -> Any:
        return iter(torn) if self == directory else real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    return merged


def test_a_listing_torn_by_a_compaction_reads_every_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged = _compact_during_listing(tmp_path, monkeypatch)
    sources, _ = discover([tmp_path])
    assert [s.path.name for s in sources] == ["w-000004.parquet", merged.name]
    table, issues = read_table([tmp_path])
    assert sorted(table["file_id"].to_pylist()) == [f"f{i}" for i in range(8)]
    assert not issues
    # the merged file named as well (by another spelling): still read once
    monkeypatch.chdir(tmp_path)
    table, issues = read_table([Path(merged.name), tmp_path])
    assert sorted(table["file_id"].to_pylist()) == [f"f{i}" for i in range(8)]
    assert not issues


def test_a_file_named_explicitly_adds_no_merged_file_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _compact_during_listing(tmp_path, monkeypatch)
    named = tmp_path / "w-000004.parquet"
    sources, _ = discover([named])
    assert [s.path for s in sources] == [named]
    table, issues = read_table([named])
    assert table["file_id"].to_pylist() == ["f6", "f7"] and not issues


def test_a_listing_torn_by_a_compaction_in_a_subdirectory_finds_the_merged_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    merged = _compact_during_listing(sub, monkeypatch)
    for fmt in ("auto", "native"):
        sources, _ = discover([tmp_path], fmt=fmt)
        assert [s.path for s in sources] == [sub / "w-000004.parquet", merged], fmt
    table, issues = read_table([tmp_path])
    assert sorted(table["file_id"].to_pylist()) == [f"f{i}" for i in range(8)]
    assert not issues


def test_a_parquet_chunk_takes_row_groups_up_to_exactly_chunk_rows(
    real_rows: pa.Table, tmp_path: Path
) -> None:
    path = tmp_path / "even.parquet"
    pq.write_table(real_rows.slice(0, 400), path, row_group_size=50)
    chunks, issues = plan_parquet(path, chunk_rows=100)
    # two row groups of 50 fill a chunk of 100 rows exactly
    assert not issues
    assert [c.row_groups for c in chunks] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [(c.first_row, c.estimated_rows) for c in chunks] == [(i * 100, 100) for i in range(4)]


def test_jsonl_line_holding_two_objects_is_invalid_and_the_rest_keep_their_lines(
    real_rows: pa.Table, tmp_path: Path
) -> None:
    rows = [json.dumps(row) for row in real_rows.slice(0, 4).to_pylist()]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join([rows[0], rows[1] + " " + rows[2], rows[3]]) + "\n")
    (chunk,) = plan_jsonl(path)[0]
    result = chunk.load()
    assert result.issues.counts == {"invalid JSON": 1}
    assert [e.location for e in result.issues.examples] == ["line 2"]
    assert result.table["file_id"].to_pylist() == [
        real_rows["file_id"][0].as_py(),
        real_rows["file_id"][3].as_py(),
    ]
    assert [result.locate(i) for i in range(2)] == [("", 1), ("", 3)]


def test_jsonl_integers_at_the_ends_of_their_column_range_are_kept(
    real_rows: pa.Table, tmp_path: Path
) -> None:
    rows = real_rows.slice(0, 6).to_pylist()
    rows[1]["size_bytes"] = 2**63 - 1  # the largest int64
    rows[2]["size_bytes"] = 2**63  # one past it
    rows[3]["n_workers"] = 2**31 - 1  # the largest int32
    rows[4]["n_workers"] = 2**31
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    table, issues = read_table([path])
    assert issues.counts == {"value out of range": 2}
    assert sorted(e.location for e in issues.examples) == ["line 3", "line 5"]
    kept = {row["file_id"]: row for row in table.to_pylist()}
    assert kept[rows[1]["file_id"]]["size_bytes"] == 2**63 - 1
    assert kept[rows[3]["file_id"]]["n_workers"] == 2**31 - 1
    assert len(kept) == 4


def test_jsonl_booleans_and_fractions_are_wrong_types(real_rows: pa.Table, tmp_path: Path) -> None:
    rows = real_rows.slice(0, 6).to_pylist()
    rows[1]["read_ops"] = True  # an integer column
    rows[2]["write_ops"] = 1.5
    rows[3]["created_at"] = False  # a float column
    rows[4]["stage"] = True  # a string column
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    table, issues = read_table([path])
    assert issues.counts == {"value of the wrong type": 4}
    assert sorted(e.location for e in issues.examples) == [f"line {i}" for i in (2, 3, 4, 5)]
    assert table["file_id"].to_pylist() == [rows[0]["file_id"], rows[5]["file_id"]]
