"""Benchmark of ``dataplane report`` on a 10-million-row log.

The log is made by resampling real logs (:func:`logs_analysis.resample.resample_runs`):
whole runs drawn with replacement under fresh run and file ids, written as Parquet
files of ~250k rows. The source is the workload suite's logs (``--source DIR ...``,
collections read together; default ``data/placement/logs``, from ``dataplane placement
collect``) when they exist; otherwise the records the Spark reader makes from the Spark
event logs in ``../shared/data/spark-events`` (the source used is printed and written
to the JSON).

Measured, side by side in one run (the machines are shared, so compare ratios):

* **baseline**: a raw pyarrow scan of the same files (every column, all threads):
  the rate at which the bytes can be decoded at all;
* **ingestion**: the report's read + aggregate stage (rows / seconds, from the
  report's own stage timings);
* **full report**: wall time of ``python -m logs_analysis`` from start to the HTML and
  JSON written, in a child process;
* **peak memory**: resident set of that child process and its children, sampled every
  50 ms with psutil;
* **report files**: the sizes of the HTML report and of the JSON written beside it.

Goals (issue 7): >= 1M rows/s ingestion, report <= 60 s, peak memory <= 4 GB. The
script prints whether each is met; it never asserts. Results go to
``benchmarks/results/report-<time>.json`` (and ``report-latest.json``).

Usage::

    python benchmarks/report.py [--rows 10000000] [--work-dir DIR] [--scheduler threads]
        [--source data/placement/logs data/placement/logs2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
# this folder holds scripts named like packages (placement.py): import from the repository root
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from benchmarks._common import format_table, machine_info, write_results

WORKLOAD_LOGS = REPO / "data" / "placement" / "logs"
SPARK_EVENTS = REPO.parent / "shared" / "data" / "spark-events"
GOALS = {"ingestion_rows_per_s": 1_000_000, "report_s": 60.0, "peak_bytes": 4e9}


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (no machine paths in results)."""
    full = path.resolve()
    return str(full.relative_to(REPO)) if full.is_relative_to(REPO) else str(path)


def source_table(sources: list[Path] | None = None) -> tuple[pa.Table, str]:
    """Real rows to resample, and a description of where they came from.

    ``sources``: directories (or Parquet files) of workload-suite logs, read together;
    default ``data/placement/logs`` if it holds logs, else the Spark event logs.
    """
    from logs_analysis.readers import read_table
    from placement.logwriter import log_files

    if sources:
        files = []
        for src in sources:
            try:
                found = log_files(src)
            except FileNotFoundError:
                found = []
            if not found:
                raise SystemExit(
                    f"--source {src}: no Parquet logs there; "
                    f"run `dataplane placement collect {src}`"
                )
            files += found
    else:
        files = log_files(WORKLOAD_LOGS) if WORKLOAD_LOGS.is_dir() else []
    if files:
        table, _ = read_table(files)
        return table, f"workload-suite logs ({', '.join(_shown(f) for f in files)})"
    if SPARK_EVENTS.is_dir():
        table, _ = read_table([SPARK_EVENTS])
        return table, f"Spark event logs read by logs_analysis.readers.spark ({SPARK_EVENTS})"
    raise SystemExit(
        f"no source logs: run `dataplane placement collect {WORKLOAD_LOGS}` or put the Spark "
        f"event logs at {SPARK_EVENTS}"
    )


def _plain(table: pa.Table) -> pa.Table:
    cols = [
        c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns
    ]
    return pa.Table.from_arrays(cols, names=table.column_names)


def make_log(
    out: Path, rows: int, seed: int, sources: list[Path] | None = None
) -> dict[str, Any]:
    """Write the resampled log under ``out`` (reused when it already holds the same log)."""
    from logs_analysis.resample import resample_runs

    table, description = source_table(sources)
    table = _plain(table)
    digest = hashlib.sha256(table.to_pandas().to_csv(index=False).encode()).hexdigest()[:16]
    stamp = out / "_MADE.json"  # hidden from the report (leading underscore)
    want = {"rows_requested": rows, "seed": seed, "source_sha": digest, "source": description}
    if stamp.is_file():
        made = json.loads(stamp.read_text())
        if {k: made.get(k) for k in want} == want:
            return made
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*.parquet"):
        old.unlink()
    start = time.perf_counter()
    total = 0
    for i, batch in enumerate(resample_runs(table, rows, seed=seed, batch_rows=250_000)):
        pq.write_table(batch, out / f"part-{i:05d}.parquet", row_group_size=128_000)
        total += batch.num_rows
    made = {
        **want,
        "rows": total,
        "source_rows": table.num_rows,
        "source_runs": len(set(table["run_id"].to_pylist())),
        "files": len(list(out.glob("part-*.parquet"))),
        "bytes_on_disk": sum(f.stat().st_size for f in out.glob("part-*.parquet")),
        "make_s": time.perf_counter() - start,
    }
    stamp.write_text(json.dumps(made, indent=2))
    return made


def raw_scan(path: Path) -> tuple[int, float]:
    """Rows and seconds of a pyarrow scan of every column (all threads)."""
    start = time.perf_counter()
    rows = 0
    for batch in ds.dataset(
        sorted(str(f) for f in path.glob("part-*.parquet")), format="parquet"
    ).to_batches(use_threads=True):
        rows += batch.num_rows
    return rows, time.perf_counter() - start


def run_report(
    path: Path, out_html: Path, scheduler: str
) -> tuple[float, int, dict[str, Any], str]:
    """Run the report in a child process; (wall s, peak RSS bytes of it and its children, report
    JSON, output)."""
    cmd = [
        sys.executable,
        "-m",
        "logs_analysis",
        str(path),
        "--out",
        str(out_html),
        "--no-progress",
        "--scheduler",
        scheduler,
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
    )
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss + sum(
                c.memory_info().rss for c in ps.children(recursive=True)
            )
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.perf_counter() - start
    output = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"report failed (exit {proc.returncode}):\n{output}")
    return wall, peak, json.loads(out_html.with_suffix(".json").read_text()), output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the resampled log")
    parser.add_argument(
        "--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "dataplane-report-bench"
    )
    parser.add_argument(
        "--scheduler", default="threads", help="threads, processes or a Dask scheduler address"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--source",
        type=Path,
        nargs="+",
        help="workload-suite log directories to resample, read together "
        "(default: data/placement/logs, else the Spark event logs)",
    )
    args = parser.parse_args()

    log_dir = args.work_dir / f"log-{args.rows}"
    print(f"making a {args.rows:,}-row log in {log_dir} ...", flush=True)
    made = make_log(log_dir, args.rows, args.seed, args.source)
    print(f"  source: {made['source']} ({made['source_rows']:,} rows, {made['source_runs']} runs)")
    print(
        f"  {made['rows']:,} rows in {made['files']} Parquet files, "
        f"{made['bytes_on_disk'] / 1e6:.0f} MB"
    )

    scan_rows, scan_s = raw_scan(log_dir)
    out_html = args.work_dir / "report.html"
    wall, peak, report, output = run_report(log_dir, out_html, args.scheduler)
    rows = report["rows"]["usable"]
    ingest_s = report["timings_s"]["read + aggregate"]
    ingest_rate = rows / ingest_s
    scan_rate = scan_rows / scan_s
    # what a reader downloads: the self-contained HTML (plots inlined) and the JSON beside it
    html_bytes = out_html.stat().st_size
    json_bytes = out_html.with_suffix(".json").stat().st_size

    table = format_table(
        ["measure", "value", "goal", "met"],
        [
            ["raw pyarrow scan (baseline)", f"{scan_rate / 1e6:.2f} M rows/s", "-", "-"],
            [
                "ingestion (read + aggregate)",
                f"{ingest_rate / 1e6:.2f} M rows/s",
                ">= 1.00 M rows/s",
                ingest_rate >= GOALS["ingestion_rows_per_s"],
            ],
            ["ingestion / raw scan", f"{ingest_rate / scan_rate:.2f}x", "-", "-"],
            ["full report (child process)", f"{wall:.1f} s", "<= 60 s", wall <= GOALS["report_s"]],
            [
                "peak memory (with children)",
                f"{peak / 1e9:.2f} GB",
                "<= 4 GB",
                peak <= GOALS["peak_bytes"],
            ],
            [
                "report files: HTML, JSON",
                f"{html_bytes / 1e3:,.0f} KB, {json_bytes / 1e3:,.0f} KB",
                "-",
                "-",
            ],
        ],
    )
    stages = format_table(
        ["stage", "seconds"], [[k, f"{v:.2f}"] for k, v in report["timings_s"].items()]
    )
    print()
    print(table)
    print()
    print(stages)
    print()
    print(output.strip())
    payload = {
        "log": made,
        "scheduler": args.scheduler,
        "rows": rows,
        "baseline_scan": {"rows": scan_rows, "seconds": scan_s, "rows_per_s": scan_rate},
        "ingestion": {
            "seconds": ingest_s,
            "rows_per_s": ingest_rate,
            "ratio_to_scan": ingest_rate / scan_rate,
        },
        "report": {
            "wall_s": wall,
            "stages_s": report["timings_s"],
            "html": str(out_html),
            "html_bytes": html_bytes,
            "json_bytes": json_bytes,
        },
        "peak_rss_bytes": peak,
        "goals": {
            "ingestion_1M_rows_per_s": ingest_rate >= GOALS["ingestion_rows_per_s"],
            "report_60_s": wall <= GOALS["report_s"],
            "peak_memory_4_GB": peak <= GOALS["peak_bytes"],
        },
        "sample": report["sample"],
        "predictability_spearman": report["predictability"].get("spearman"),
        "machine": machine_info(),
    }
    path = write_results("report", payload)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
