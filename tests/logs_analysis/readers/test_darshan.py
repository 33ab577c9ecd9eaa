"""Darshan logs through PyPI ``darshan`` (an optional extra)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from logs_analysis.errors import DependencyError
from logs_analysis.formats import Container, LogFormat, discover, sniff
from logs_analysis.readers import read_table
from logs_analysis.readers.darshan import DAMAGED_KEPT, read_darshan


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
