"""Fixtures of the log-analysis tests: real inputs only.

* Spark event logs: ``../shared/data/spark-events`` (the ``shared_dir`` fixture skips
  when it is absent); tests copy what they corrupt into ``tmp_path``.
* The example Darshan logs shipped in the ``darshan`` wheel (skip without the optional extra).
* Placement log rows (:func:`tests.placement.logtables.make_log`: several pipelines, runs,
  stages and file kinds) beside the Darshan log's 214 records: ``real_rows``, written as
  native Parquet logs by :class:`placement.logwriter.LogWriter` in ``native_dir``. None of
  them needs the shared folder.
* Reports built once per session: one of native and Darshan logs (with a damaged JSON-lines
  log and a file of no known format), and one of the Spark logs (with a corrupted copy).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.placement.logtables import make_log

SPARK_LOGS = (
    "local-1430917381534",
    "application_1506645932520_24630151",
    "app-20200706201101-0003",
)
CHROMIUM = Path("/usr/bin/chromium")
#: Lines of the report's JSON-lines log replaced by damaged ones (0-based).
BAD_JSONL_LINES = (5, 9)


@pytest.fixture(scope="session")
def spark_dir(shared_dir: Path) -> Path:
    """The real Spark event logs (three applications and a README)."""
    path = shared_dir / "data" / "spark-events"
    if not all((path / name).is_file() for name in SPARK_LOGS):
        pytest.skip(f"Spark event logs not found under {path}")
    return path


@pytest.fixture(scope="session")
def darshan_examples() -> Path:
    """The example logs inside the ``darshan`` wheel."""
    darshan = pytest.importorskip("darshan", reason="the optional 'darshan' extra is not installed")
    path = Path(darshan.__file__).parent / "examples" / "example_logs"
    if not (path / "dxt.darshan").is_file():
        pytest.skip(f"no example Darshan logs under {path}")
    return path


@pytest.fixture(scope="session")
def darshan_log(darshan_examples: Path) -> Path:
    """A real Darshan log with 214 POSIX records (temporary files of a COMPSs run among them)."""
    return darshan_examples / "dxt.darshan"


@pytest.fixture(scope="session")
def darshan_rows(darshan_log: Path) -> pa.Table:
    """The Darshan log's 214 records in the placement schema: pipeline ``dxt``, one run,
    file kind ``other``, files never read or written among them."""
    from logs_analysis.readers import read_table

    table, issues = read_table([darshan_log])
    assert not issues
    return table


@pytest.fixture(scope="session")
def pipeline_rows() -> pa.Table:
    """Placement log rows of two pipelines (``pipe0`` and ``pipe1``), three runs each, one
    after another, of three stages (spill and shuffle files): 324 rows."""
    return make_log(pipelines=2, runs=3, files_per_stage=18)


@pytest.fixture(scope="session")
def real_rows(pipeline_rows: pa.Table, darshan_rows: pa.Table) -> pa.Table:
    """Records in the placement schema: the 324 ``pipeline_rows`` (six runs), then the
    Darshan log's 214 (pipeline ``dxt``, one run)."""
    return pa.concat_tables([pipeline_rows, darshan_rows])


@pytest.fixture(scope="session")
def native_dir(tmp_path_factory: pytest.TempPathFactory, real_rows: pa.Table) -> Path:
    """A log directory as the service writes it: several Parquet files from ``LogWriter``."""
    from placement.logwriter import LogWriter

    out = tmp_path_factory.mktemp("native-logs")
    with LogWriter(out, max_rows=100, prefix="w0") as writer:
        for row in real_rows.to_pylist():
            writer.add(row)
    return out


@pytest.fixture
def spark_copy(spark_dir: Path, tmp_path: Path) -> Path:
    """A copy of the Spark 1.4 log (110 tasks, a shuffle) in ``tmp_path``, free to corrupt."""
    dst = tmp_path / SPARK_LOGS[0]
    shutil.copyfile(spark_dir / SPARK_LOGS[0], dst)
    return dst


@pytest.fixture(scope="session")
def native_inputs(
    tmp_path_factory: pytest.TempPathFactory, pipeline_rows: pa.Table, darshan_log: Path
) -> list[Path]:
    """A log directory (Parquet files of ``pipe0`` from ``LogWriter``, the rows of ``pipe1``
    as JSON lines with two of them damaged, and a README of no known format), and the
    Darshan log."""
    from placement.logwriter import LogWriter

    logs = tmp_path_factory.mktemp("native-inputs") / "logs"
    jsonl = []
    with LogWriter(logs, max_rows=60, prefix="w1") as writer:
        for row in pipeline_rows.to_pylist():
            if row["pipeline"] == "pipe1":
                jsonl.append(json.dumps(row))
            else:
                writer.add(row)
    jsonl[BAD_JSONL_LINES[0]] = jsonl[BAD_JSONL_LINES[0]][:30]  # torn
    jsonl[BAD_JSONL_LINES[1]] = "garbage"
    (logs / "pipe1.jsonl").write_text("\n".join(jsonl) + "\n")
    (logs / "README.md").write_text("Placement logs of the pipe* pipelines.\n")
    return [logs, darshan_log]


@pytest.fixture(scope="session")
def mixed_inputs(
    tmp_path_factory: pytest.TempPathFactory, spark_dir: Path, darshan_log: Path
) -> list[Path]:
    """The real Spark logs (with their README), a Darshan log, and a Spark log with bad lines
    (a copy of one of them, renamed as another application)."""
    tmp = tmp_path_factory.mktemp("mixed")
    lines = (spark_dir / "application_1506645932520_24630151").read_text().splitlines()
    # another application (its own App ID, so run_id and file_ids), not a copy of the
    # original's rows, which would be read once as duplicates
    assert '"App ID":"application_1506645932520_24630151"' in lines[3]
    lines[3] = lines[3].replace("24630151", "24630152")
    lines[5] = lines[5][:30]
    lines[9] = "garbage"
    bad = tmp / "app-corrupted"
    bad.write_text("\n".join(lines) + "\n")
    return [spark_dir, darshan_log, bad]


def _build_report(out: Path, inputs: list[Path], title: str) -> tuple[Path, Path, str]:
    from logs_analysis.cli import report_command

    result = CliRunner().invoke(
        report_command,
        [
            *map(str, inputs),
            "--out",
            str(out),
            "--budgets",
            "2,5,20",
            "--no-progress",
            "--title",
            title,
        ],
    )
    assert result.exit_code == 0, result.output
    return out, out.with_suffix(".json"), result.output


@pytest.fixture(scope="session")
def native_report_files(
    tmp_path_factory: pytest.TempPathFactory, native_inputs: list[Path]
) -> tuple[Path, Path, str]:
    """(HTML, JSON, command output) of the report of ``native_inputs``."""
    out = tmp_path_factory.mktemp("native-report") / "sub" / "report.html"
    return _build_report(out, native_inputs, "Native logs")


@pytest.fixture(scope="session")
def spark_report_files(
    tmp_path_factory: pytest.TempPathFactory, mixed_inputs: list[Path]
) -> tuple[Path, Path, str]:
    """(HTML, JSON, command output) of the report of ``mixed_inputs``."""
    out = tmp_path_factory.mktemp("report") / "sub" / "report.html"
    return _build_report(out, mixed_inputs, "Mixed logs")


@pytest.fixture(scope="session", params=["native", "spark"])
def report_files(request: pytest.FixtureRequest) -> tuple[Path, Path, str]:
    """Each report: checks of any report run on both (the Spark one skips without the
    shared folder)."""
    return request.getfixturevalue(f"{request.param}_report_files")


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Headless Chromium (Debian ``chromium``)."""
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)")
    return CHROMIUM
