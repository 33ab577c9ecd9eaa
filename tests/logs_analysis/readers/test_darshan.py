"""Darshan logs through PyPI ``darshan`` (an optional extra)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from logs_analysis.errors import DependencyError
from logs_analysis.formats import Container, LogFormat, discover, sniff
from logs_analysis.readers import read_table
from logs_analysis.readers.base import ChunkResult
from logs_analysis.readers.darshan import (
    DAMAGED_KEPT,
    _first_message,
    missing_bytes,
    plan_darshan,
    read_darshan,
)
from logs_analysis.validate import validate_rows


def test_posix_counters_become_rows(darshan_log: Path) -> None:
    import darshan

    report = darshan.DarshanReport(str(darshan_log), read_all=False)
    report.mod_read_all_records("POSIX")
    frames = report.records["POSIX"].to_df()
    names = dict(report.name_records)
    counters = frames["counters"]
    files = counters[[not names[int(i)].startswith("<") for i in counters["id"]]]

    result = read_darshan(darshan_log)
    t = result.table.to_pandas()
    assert len(t) == len(files) == 214 and not result.issues
    assert t["read_ops"].sum() == files["POSIX_READS"].sum()
    assert t["write_ops"].sum() == files["POSIX_WRITES"].sum()
    assert t["read_bytes"].sum() == files["POSIX_BYTES_READ"].sum()
    assert t["write_bytes"].sum() == files["POSIX_BYTES_WRITTEN"].sum()
    expected_size = np.maximum(files["POSIX_MAX_BYTE_READ"], files["POSIX_MAX_BYTE_WRITTEN"]) + 1
    assert sorted(t["size_bytes"]) == sorted(np.where(expected_size > 0, expected_size, 0))
    job = report.metadata["job"]
    assert t["created_at"].min() >= job["start_time_sec"]
    assert (t["deleted_at"] >= t["created_at"]).all()
    assert (t["deleted_at"] <= job["end_time_sec"] + 1).all()
    assert set(t["pipeline"]) == {"dxt"} and t["file_id"].is_unique
    assert (t["n_workers"] == job["nprocs"]).all()


def _records_by_file_id(darshan_log: Path) -> tuple[dict[str, dict], dict]:
    """Each POSIX record of the log as named counters, keyed ``<job id>/<rank>/<record id>``
    (standard streams left out), read one record at a time; and the job's metadata."""
    import darshan
    from darshan.backend.cffi_backend import counter_names, fcounter_names

    report = darshan.DarshanReport(str(darshan_log), read_all=False)
    report.mod_read_all_records("POSIX", dtype="numpy")
    names = dict(report.name_records)
    job = report.metadata["job"]
    ints, floats = counter_names("POSIX"), fcounter_names("POSIX")
    records = {}
    for rec in report.records["POSIX"]:
        name = names[int(rec["id"])]
        if name in ("<STDIN>", "<STDOUT>", "<STDERR>"):
            continue
        fields = dict(zip(ints, (int(v) for v in rec["counters"]), strict=True))
        fields.update(zip(floats, (float(v) for v in rec["fcounters"]), strict=True))
        fields["name"] = name
        records[f"{job['jobid']}/{int(rec['rank'])}/{int(rec['id'])}"] = fields
    return records, job


def test_each_row_carries_its_own_records_counters(darshan_log: Path) -> None:
    records, job = _records_by_file_id(darshan_log)
    start = job["start_time_sec"] + job["start_time_nsec"] * 1e-9
    end = job["end_time_sec"] + job["end_time_nsec"] * 1e-9
    rows = read_darshan(darshan_log).table.to_pylist()
    assert len(rows) == len(records) == 214
    assert {row["file_id"] for row in rows} == set(records)
    # the log's counters differ between records, so a row paired with another's shows
    assert len({r["POSIX_READS"] for r in records.values()}) > 3
    assert len({r["POSIX_MAX_BYTE_READ"] for r in records.values()}) > 10
    assert len({str(Path(r["name"]).parent) for r in records.values()}) > 5
    for row in rows:
        rec = records[row["file_id"]]
        where = f"{row['file_id']} ({rec['name']})"
        assert row["read_ops"] == rec["POSIX_READS"], where
        assert row["write_ops"] == rec["POSIX_WRITES"], where
        assert row["read_bytes"] == rec["POSIX_BYTES_READ"], where
        assert row["write_bytes"] == rec["POSIX_BYTES_WRITTEN"], where
        largest = max(rec["POSIX_MAX_BYTE_READ"], rec["POSIX_MAX_BYTE_WRITTEN"])
        assert row["size_bytes"] == (largest + 1 if largest >= 0 else 0), where
        assert row["created_at"] == pytest.approx(
            start + rec["POSIX_F_OPEN_START_TIMESTAMP"], abs=1e-6
        ), where
        closed = rec["POSIX_F_CLOSE_END_TIMESTAMP"]
        assert row["deleted_at"] == pytest.approx(
            max(start + closed if closed > 0 else end, row["created_at"]), abs=1e-6
        ), where
        assert row["stage"] == str(Path(rec["name"]).parent), where
        assert row["worker"] == row["file_id"].split("/")[1], where
        assert row["job_id"] == str(job["jobid"])
        assert row["run_id"] == f"dxt-{job['jobid']}-{int(start)}"


def test_detection_by_content(darshan_log: Path, tmp_path: Path) -> None:
    renamed = tmp_path / "trace.bin"
    renamed.write_bytes(darshan_log.read_bytes())
    assert sniff(renamed) == (LogFormat.DARSHAN, Container.DARSHAN)


def test_example_directory(darshan_examples: Path) -> None:
    table, issues = read_table([darshan_examples])
    # noposix.darshan has no POSIX records: skipped and counted as an input not read (not as
    # malformed data), the others read
    assert issues.counts == {"no POSIX module records (skipped)": 1}
    assert issues.skipped_inputs == 1 and issues.malformed == 0
    assert table.num_rows > 2000


def test_truncated_log_is_an_issue(darshan_log: Path, tmp_path: Path) -> None:
    torn = tmp_path / "torn.darshan"
    torn.write_bytes(darshan_log.read_bytes()[:3000])
    result = read_darshan(torn)
    assert result.table.num_rows == 0
    assert list(result.issues.counts) == ["unreadable Darshan log (skipped)"]


def test_log_cut_after_its_posix_data_keeps_rows_and_counts_the_cut(
    darshan_log: Path, tmp_path: Path
) -> None:
    # dxt.darshan's last region is DXT tracing data, after POSIX: a cut there leaves every
    # POSIX record whole, and the parser says nothing
    whole = read_darshan(darshan_log)
    cut = tmp_path / "cut.darshan"
    cut.write_bytes(darshan_log.read_bytes()[:-5])
    result = read_darshan(cut)
    assert result.table.num_rows == whole.table.num_rows == 214
    assert result.issues.counts == {DAMAGED_KEPT: 1}
    assert "ends 5 byte(s) before its module data" in result.issues.examples[0].detail


def test_without_darshan_the_error_says_how_to_install(
    darshan_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "darshan", None)  # import darshan -> ImportError
    sources, _ = discover([darshan_log])  # detection needs no darshan
    assert sources[0].format is LogFormat.DARSHAN
    with pytest.raises(DependencyError, match=r"pip install 'dataplane\[darshan\]'"):
        read_table([darshan_log])


def _read_edited(
    darshan_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    job: dict[str, int] | None = None,
    names: dict[int, str] | None = None,
    fcounters: dict[int, dict[str, float]] | None = None,
) -> ChunkResult:
    """The log read in this process, its job metadata updated with ``job``, the names of
    records replaced by ``names`` and their float counters by ``fcounters`` (record id ->
    counter -> value): shapes the shipped logs lack (newer Darshan versions keep nanoseconds;
    programs' standard streams; a file left open), injected into the real parse."""
    import darshan
    from darshan.backend.cffi_backend import fcounter_names

    columns = list(fcounter_names("POSIX"))

    class Edited(darshan.DarshanReport):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.metadata["job"].update(job or {})

        def mod_read_all_records(self, *args: Any, **kwargs: Any) -> None:
            super().mod_read_all_records(*args, **kwargs)
            self.name_records.update(names or {})
            for rec in self.records["POSIX"]:
                for name, value in (fcounters or {}).get(int(rec["id"]), {}).items():
                    rec["fcounters"][columns.index(name)] = value

    monkeypatch.setattr(darshan, "DarshanReport", Edited)
    return read_darshan(darshan_log, isolate=False)


def test_job_nanoseconds_shift_open_and_close_times(
    darshan_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, job = _records_by_file_id(darshan_log)
    assert job["start_time_nsec"] == job["end_time_nsec"] == 0  # the shipped log has none
    rows = _read_edited(
        darshan_log, monkeypatch, job={"start_time_nsec": 250_000_000, "end_time_nsec": 750_000_000}
    ).table.to_pylist()
    start = job["start_time_sec"] + 0.25
    end = job["end_time_sec"] + 0.75
    never_closed = 0
    for row in rows:
        rec = records[row["file_id"]]
        closed = rec["POSIX_F_CLOSE_END_TIMESTAMP"]
        never_closed += closed <= 0
        assert row["created_at"] == pytest.approx(
            start + rec["POSIX_F_OPEN_START_TIMESTAMP"], abs=1e-6
        )
        assert row["deleted_at"] == pytest.approx(start + closed if closed > 0 else end, abs=1e-6)
    assert never_closed > 0


def test_a_file_left_open_past_the_recorded_job_end_is_deleted_when_opened(
    darshan_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's end is kept in whole seconds: a file opened in its last second and never
    closed is deleted when it was opened, not before (which the row checks would drop)."""
    records, job = _records_by_file_id(darshan_log)
    opened_late = next(
        file_id for file_id, rec in records.items() if rec["POSIX_F_OPEN_START_TIMESTAMP"] > 1
    )
    record_id = int(opened_late.split("/")[2])
    result = _read_edited(
        darshan_log,
        monkeypatch,
        job={"end_time_sec": job["start_time_sec"]},
        fcounters={record_id: {"POSIX_F_CLOSE_END_TIMESTAMP": 0.0}},
    )
    rows = {row["file_id"]: row for row in result.table.to_pylist()}
    row = rows[opened_late]
    assert row["created_at"] == pytest.approx(
        job["start_time_sec"] + records[opened_late]["POSIX_F_OPEN_START_TIMESTAMP"], abs=1e-6
    )
    assert row["deleted_at"] == row["created_at"]
    table, issues = validate_rows(result)
    assert table.num_rows == len(rows) == 214 and not issues


def test_standard_streams_are_not_rows(darshan_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records, _ = _records_by_file_id(darshan_log)
    streams = sorted(records)[:3]
    names = {
        int(file_id.split("/")[2]): name
        for file_id, name in zip(streams, ("<STDIN>", "<STDOUT>", "<STDERR>"), strict=True)
    }
    result = _read_edited(darshan_log, monkeypatch, names=names)
    file_ids = set(result.table["file_id"].to_pylist())
    assert file_ids == set(records) - set(streams)
    assert len(result.labels or []) == result.table.num_rows == 211


def test_a_job_without_a_process_count_leaves_n_workers_null(
    darshan_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _read_edited(darshan_log, monkeypatch, job={"nprocs": 0})
    assert result.table.num_rows == 214
    assert result.table["n_workers"].null_count == 214


def test_the_parsers_first_message_is_quoted(tmp_path: Path) -> None:
    said = tmp_path / "stderr"
    said.write_text("\n   \n  Error: unable to read compressed data  \ndouble free or corruption\n")
    assert _first_message(str(said)) == "Error: unable to read compressed data"
    assert _first_message(str(tmp_path / "absent")) == ""


def test_a_log_is_planned_as_one_chunk_of_a_row_per_400_bytes(darshan_log: Path) -> None:
    chunks, issues = plan_darshan(darshan_log)
    assert not issues and [c.source for c in chunks] == [str(darshan_log)]
    assert chunks[0].estimated_rows == math.ceil(darshan_log.stat().st_size / 400)


def test_a_header_that_does_not_match_the_parsers_module_lengths_is_no_sure_cut(
    darshan_log: Path, tmp_path: Path
) -> None:
    import darshan

    report = darshan.DarshanReport(str(darshan_log), read_all=False)
    lengths = {name: int(info["len"]) for name, info in report.modules.items()}
    cut = tmp_path / "cut.darshan"
    cut.write_bytes(darshan_log.read_bytes()[:-5])
    assert missing_bytes(str(cut), lengths) == 5
    assert missing_bytes(str(cut), {name: n + 1 for name, n in lengths.items()}) == 0
