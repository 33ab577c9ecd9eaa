"""Darshan logs read field by field, on the example logs shipped in the ``darshan`` wheel:
the names a run is given, the issues a damaged log yields, and how a cut is measured from
the log's header."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from logs_analysis.readers.darshan import (
    DAMAGED,
    missing_bytes,
    plan_darshan,
    read_darshan,
)

REPO_ROOT = Path(__file__).resolve().parents[3]

#: The header's fields (darshan-log-format.h, format 3.x): the magic number at byte 8, then
#: from byte 24 the name map and the module maps (16 in the shipped logs), each an
#: (offset, length) pair of uint64.
_MAGIC_AT, _MAPS_FROM, _MAPS_TO = 8, 24, 40 + 16 * 16


def _lengths(log: Path) -> dict[str, int]:
    """Each module's region length, as the parser reports it."""
    import darshan

    report = darshan.DarshanReport(str(log), read_all=False)
    return {name: int(info["len"]) for name, info in report.modules.items()}


def _names(log: Path) -> dict[int, str]:
    """The log's record names by record id (the parser reads them with the records)."""
    import darshan

    report = darshan.DarshanReport(str(log), read_all=False)
    report.mod_read_all_records("POSIX")
    return dict(report.name_records)


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "log, pipeline",
    [("example.darshan", "vpicio_uni"), ("ior_hdf5_example.darshan", "ior")],
)
def test_the_pipeline_is_the_base_name_of_the_executable(
    darshan_examples: Path, log: str, pipeline: str
) -> None:
    """``exe`` holds the command line: the program's path, then its arguments."""
    import darshan

    report = darshan.DarshanReport(str(darshan_examples / log), read_all=False)
    exe, job = report.metadata["exe"], report.metadata["job"]
    assert exe.split(" ", 1)[0].endswith("/" + pipeline) and " " in exe
    result = read_darshan(darshan_examples / log, isolate=False)
    assert not result.issues and result.table.num_rows > 0
    assert set(result.table["pipeline"].to_pylist()) == {pipeline}
    assert set(result.table["run_id"].to_pylist()) == {
        f"{pipeline}-{job['jobid']}-{job['start_time_sec']}"
    }


def test_each_row_is_labelled_with_its_record_rank_and_file(darshan_examples: Path) -> None:
    log = darshan_examples / "sample-badost.darshan"  # 2048 records of ranks 0 to 2047
    names = _names(log)
    result = read_darshan(log, isolate=False)
    file_ids = result.table["file_id"].to_pylist()
    assert result.labels is not None and len(result.labels) == len(file_ids) == 2048
    ranks = set()
    for file_id, label in zip(file_ids, result.labels, strict=True):
        _, rank, record = file_id.split("/")
        ranks.add(rank)
        assert label == f"record {record} rank {rank} ({names[int(record)]})"
    assert len(ranks) > 1


# ----------------------------------------------------------------------------- damaged logs


def test_a_log_without_posix_records_names_the_modules_it_holds(darshan_examples: Path) -> None:
    result = read_darshan(darshan_examples / "noposix.darshan", isolate=False)
    assert result.table.num_rows == 0
    assert result.issues.counts == {"no POSIX module records (skipped)": 1}
    assert result.issues.examples[0].detail == "modules: ['LUSTRE', 'STDIO']"


def _posix_region(log: Path) -> tuple[int, int]:
    """Offset and length of the POSIX data (module 1) in ``log``'s header."""
    return struct.unpack_from("<QQ", log.read_bytes(), 40 + 16)


def test_a_log_cut_inside_its_posix_data_quotes_the_parser_and_names_the_error(
    darshan_log: Path, tmp_path: Path
) -> None:
    offset, length = _posix_region(darshan_log)
    torn = tmp_path / "torn.darshan"
    torn.write_bytes(darshan_log.read_bytes()[: offset + length // 2])
    result = read_darshan(torn)
    assert result.table.num_rows == 0
    assert result.issues.counts == {"unreadable Darshan log (skipped)": 1}
    # the C library's first line, then the Python error the parse ended in
    detail = result.issues.examples[0].detail
    assert re.fullmatch(rf"{DAMAGED}: Error: [^()]+ \(\w+: .+\)", detail), detail


def test_a_log_that_kills_the_parser_is_counted_and_quotes_its_last_words(
    darshan_log: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A header whose name records run for a terabyte makes the C library abort."""
    data = bytearray(darshan_log.read_bytes())
    struct.pack_into("<Q", data, _MAPS_FROM + 8, 2**40)
    damaged = tmp_path / "damaged.darshan"
    damaged.write_bytes(bytes(data))
    result = read_darshan(damaged)
    assert result.table.num_rows == 0
    assert result.issues.counts == {"unreadable Darshan log (skipped)": 1}
    detail = result.issues.examples[0].detail
    said = re.fullmatch(rf"{DAMAGED}: the darshan parser crashed on it \((.+)\)", detail)
    assert said, detail
    assert said.group(1) not in capfd.readouterr().err  # kept off the terminal


def test_a_log_torn_in_its_header_read_in_this_process_quotes_the_parser_too(
    darshan_log: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    torn = tmp_path / "torn.darshan"
    torn.write_bytes(darshan_log.read_bytes()[:100])
    result = read_darshan(torn, isolate=False)
    assert result.issues.counts == {"unreadable Darshan log (skipped)": 1}
    detail = result.issues.examples[0].detail
    said = re.fullmatch(rf"{DAMAGED}: (Error: [^()]+) \(\w+: .+\)", detail)
    assert said, detail
    assert said.group(1) not in capfd.readouterr().err  # kept off the terminal
    print("standard error is this process's again", file=sys.stderr)
    assert "standard error is this process's again" in capfd.readouterr().err


def _zeroed_inside_posix(log: Path, at: float, into: Path) -> Path:
    """``log`` with 16 bytes zeroed at fraction ``at`` of its POSIX data, written to ``into``."""
    offset, length = _posix_region(log)
    data = bytearray(log.read_bytes())
    start = offset + int(length * at)
    data[start : start + 16] = bytes(16)
    into.write_bytes(bytes(data))
    return into


@pytest.mark.parametrize("isolate", [True, False])
@pytest.mark.parametrize("at", [0.25, 0.5, 0.9])
def test_damage_inside_the_posix_data_skips_the_log_not_reads_what_the_parser_made_of_it(
    darshan_log: Path, tmp_path: Path, isolate: bool, at: float
) -> None:
    """The parser inflates garbage there, stops at the error as if the module had ended and
    hands back what it decoded: none of it is read as rows."""
    import darshan

    damaged = _zeroed_inside_posix(darshan_log, at, tmp_path / "damaged.darshan")
    result = read_darshan(damaged, isolate=isolate)
    assert result.table.num_rows == 0
    assert result.issues.counts == {"unreadable Darshan log (skipped)": 1}
    detail = result.issues.examples[0].detail
    assert re.fullmatch(
        rf"{DAMAGED}: Error: [^()]+ \(the POSIX data ends in an error, not at its end; "
        r"the records decoded from it are not trusted\)",
        detail,
    ), detail
    # what the parser itself makes of it: records, and no exception
    report = darshan.DarshanReport(str(damaged), read_all=False)
    report.mod_read_all_records("POSIX")
    assert 0 < len(report.records["POSIX"]) < 214


_READ_EACH = """
import sys
from logs_analysis.readers.darshan import read_darshan
for path in sys.argv[1:]:
    print(read_darshan(path).table.num_rows)
"""


def test_reading_leaves_no_temporary_file_behind(darshan_log: Path, tmp_path: Path) -> None:
    private = tmp_path / "tmp"
    private.mkdir()
    torn = tmp_path / "torn.darshan"
    torn.write_bytes(darshan_log.read_bytes()[:3000])
    # the reads run in a process of their own whose temporary folder holds nothing else, so
    # that a file left behind is seen whatever else runs on the machine
    done = subprocess.run(
        [sys.executable, "-c", _READ_EACH, str(darshan_log), str(torn)],
        cwd=REPO_ROOT,
        env={**os.environ, "TMPDIR": str(private)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["214", "0"]
    assert list(private.iterdir()) == []


def test_a_log_with_bytes_after_its_module_data_is_whole(darshan_log: Path, tmp_path: Path) -> None:
    padded = tmp_path / "padded.darshan"
    padded.write_bytes(darshan_log.read_bytes() + bytes(4096))
    result = read_darshan(padded, isolate=False)
    assert result.table.num_rows == 214 and not result.issues
    assert missing_bytes(str(padded), _lengths(darshan_log)) == 0


# ----------------------------------------------------------------------------- the header


def _big_endian(head: bytes) -> bytes:
    """``head`` (a little-endian header) as a big-endian machine writes it."""
    out = bytearray(head)
    for at in [_MAGIC_AT, *range(_MAPS_FROM, _MAPS_TO, 8)]:
        out[at : at + 8] = struct.pack(">Q", struct.unpack_from("<Q", head, at)[0])
    return bytes(out)


def test_a_big_endian_header_measures_the_cut_too(darshan_log: Path, tmp_path: Path) -> None:
    data = darshan_log.read_bytes()
    cut = tmp_path / "cut.darshan"
    cut.write_bytes(_big_endian(data[:_MAPS_TO]) + data[_MAPS_TO:-5])
    assert missing_bytes(str(cut), _lengths(darshan_log)) == 5


def test_a_file_without_the_darshan_magic_number_is_no_sure_cut(
    darshan_log: Path, tmp_path: Path
) -> None:
    data = bytearray(darshan_log.read_bytes()[:-5])
    data[_MAGIC_AT : _MAGIC_AT + 8] = bytes(8)
    other = tmp_path / "other.bin"
    other.write_bytes(bytes(data))
    assert missing_bytes(str(other), _lengths(darshan_log)) == 0
    assert missing_bytes(str(other), {}) == 0


def test_a_file_shorter_than_the_maps_is_no_sure_cut(darshan_log: Path, tmp_path: Path) -> None:
    short = tmp_path / "short.darshan"
    short.write_bytes(darshan_log.read_bytes()[:30])  # the magic number, not the name map
    assert missing_bytes(str(short), _lengths(darshan_log)) == 0
    assert missing_bytes(str(short), {}) == 0


def test_without_module_data_a_cut_is_measured_by_the_name_records(
    darshan_log: Path, tmp_path: Path
) -> None:
    data = darshan_log.read_bytes()
    names_at, names_length = struct.unpack_from("<QQ", data, _MAPS_FROM)
    cut = tmp_path / "cut.darshan"
    cut.write_bytes(data[: names_at + 100])  # inside the record names
    assert missing_bytes(str(cut), {}) == names_length - 100
    assert missing_bytes(str(darshan_log), {}) == 0


def test_a_log_that_cannot_be_opened_is_no_sure_cut(darshan_log: Path, tmp_path: Path) -> None:
    lengths = _lengths(darshan_log)
    assert missing_bytes(str(tmp_path), lengths) == 0  # a directory
    assert missing_bytes(str(tmp_path / "absent.darshan"), lengths) == 0


# ----------------------------------------------------------------------------- plans


def test_an_empty_log_is_planned_as_one_row(tmp_path: Path) -> None:
    pytest.importorskip("darshan", reason="the optional 'darshan' extra is not installed")
    empty = tmp_path / "empty.darshan"
    empty.write_bytes(b"")
    chunks, issues = plan_darshan(empty)
    assert not issues and [(c.source, c.estimated_rows) for c in chunks] == [(str(empty), 1)]
