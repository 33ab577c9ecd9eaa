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
