"""Fixtures of the log-analysis tests: real inputs only.

* Spark event logs: ``../shared/data/spark-events`` (the ``shared_dir`` fixture skips
  when it is absent); tests copy what they corrupt into ``tmp_path``.
* A Darshan log shipped in the ``darshan`` wheel (skips without the optional extra).
* A report of all of them (with a corrupted Spark log), built once per session.
* Native Parquet logs written by :class:`placement.logwriter.LogWriter` from the rows
  the Spark and Darshan readers produce (real records in the placement schema).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

SPARK_LOGS = (
    "local-1430917381534",
    "application_1506645932520_24630151",
    "app-20200706201101-0003",
)
CHROMIUM = Path("/usr/bin/chromium")


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
def real_rows(spark_dir: Path, darshan_log: Path) -> pa.Table:
    """Real records in the placement schema: 108 from Spark, 214 from Darshan."""
    from logs_analysis.readers import read_table

    spark, _ = read_table([spark_dir / name for name in SPARK_LOGS[:2]])
    darshan, _ = read_table([darshan_log])
    return pa.concat_tables([spark, darshan])


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


@pytest.fixture(scope="session")
def report_files(
    tmp_path_factory: pytest.TempPathFactory, mixed_inputs: list[Path]
) -> tuple[Path, Path, str]:
    from logs_analysis.cli import report_command

    out = tmp_path_factory.mktemp("report") / "sub" / "report.html"
    result = CliRunner().invoke(
        report_command,
        [
            *map(str, mixed_inputs),
            "--out",
            str(out),
            "--budgets",
            "2,5,20",
            "--no-progress",
            "--title",
            "Mixed logs",
        ],
    )
    assert result.exit_code == 0, result.output
    return out, out.with_suffix(".json"), result.output


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Headless Chromium (Debian ``chromium``)."""
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)")
    return CHROMIUM
