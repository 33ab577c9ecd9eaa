"""Benchmark of the placement log's write and read costs on a worker and a scheduler.

A worker writes its buffered log rows every flush interval (5 s) when it has any, and
when a stop signal ends it (:mod:`placement.storage.shutdown`); the scheduler reads the
whole log directory, one small Parquet file per flush, when it starts. This measures:

* a flush of 1, 50, 200 and 2,000 rows (:meth:`placement.logwriter.LogWriter.flush`):
  median time and file size, in a warm process (``LogWriter.prepare`` done);
* the read of a directory of many small files (:func:`placement.logwriter.read_logs`),
  per file, as the scheduler's history read does; then the same directory compacted
  (:func:`placement.compact.compact`, ``dataplane placement compact``) and read again.

It prints a table and never asserts. Results go to
``benchmarks/results/log_flush-<time>.json``.

Usage::

    python benchmarks/log_flush.py [--repeats 15] [--files 500]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# this folder holds scripts named like packages (placement.py): import from the repository root
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from benchmarks._common import format_table, machine_info, write_results  # noqa: E402
from placement.compact import compact  # noqa: E402
from placement.logwriter import LogWriter, read_logs  # noqa: E402


def _row(i: int) -> dict[str, Any]:
    """One log row of a deleted spill file (the columns a worker always fills)."""
    now = time.time()
    return {
        "file_id": f"f{i}",
        "pipeline": "bench",
        "run_id": "bench-0",
        "stage": "shuffle-transfer",
        "created_at": now,
        "file_kind": "spill",
        "deleted_at": now + 1.0,
        "size_bytes": 1 << 20,
        "read_ops": 1,
        "write_ops": 1,
        "read_bytes": 1 << 20,
        "write_bytes": 1 << 20,
        "tier": "hdd",
    }


def flush_cost(rows: int, repeats: int) -> dict[str, float]:
    """Median seconds of one flush of ``rows`` rows, and the file's size in bytes."""
    times, sizes = [], []
    with tempfile.TemporaryDirectory(prefix="log-flush-") as tmp:
        writer = LogWriter(tmp, max_rows=10**9, max_interval_s=10**9)
        writer.prepare()
        for r in range(repeats):
            for i in range(rows):
                writer.add(_row(r * rows + i))
            start = time.perf_counter()
            path = writer.flush()
            times.append(time.perf_counter() - start)
            assert path is not None
            sizes.append(path.stat().st_size)
        writer.close()
    return {"median_s": statistics.median(times), "file_bytes": statistics.median(sizes)}


def read_cost(files: int, rows_per_file: int) -> dict[str, float]:
    """Seconds to read a directory of ``files`` flushes of ``rows_per_file`` rows, to
    compact it, and to read it compacted."""
    with tempfile.TemporaryDirectory(prefix="log-read-") as tmp:
        writer = LogWriter(tmp, max_rows=10**9, max_interval_s=10**9)
        for f in range(files):
            for i in range(rows_per_file):
                writer.add(_row(f * rows_per_file + i))
            writer.flush()
        writer.close()
        start = time.perf_counter()
        logs = read_logs(tmp)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        result = compact(tmp)
        compact_s = time.perf_counter() - start
        start = time.perf_counter()
        compacted = read_logs(tmp)
        compacted_s = time.perf_counter() - start
    assert logs.table.num_rows == compacted.table.num_rows == files * rows_per_file
    return {
        "files": files,
        "seconds": seconds,
        "per_file_s": seconds / files,
        "compact_s": compact_s,
        "files_compacted": result.files_after,
        "compacted_read_s": compacted_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="flushes timed per size")
    parser.add_argument("--files", type=int, default=500, help="files in the read test")
    args = parser.parse_args()
    sizes = (1, 50, 200, 2000)
    flushes = {n: flush_cost(n, args.repeats) for n in sizes}
    print(
        format_table(
            ["rows per flush", "median ms", "file KiB"],
            [
                [n, f"{1e3 * v['median_s']:.2f}", f"{v['file_bytes'] / 1024:.1f}"]
                for n, v in flushes.items()
            ],
        )
    )
    read = read_cost(args.files, 50)
    print(
        f"\nread_logs of {args.files} files of 50 rows: {read['seconds']:.2f} s, "
        f"{1e3 * read['per_file_s']:.2f} ms per file; compacted in {read['compact_s']:.2f} s "
        f"to {read['files_compacted']} file(s), then read in {read['compacted_read_s']:.3f} s "
        f"({read['seconds'] / read['compacted_read_s']:.0f}x faster)"
    )
    path = write_results(
        "log_flush",
        {
            "machine": machine_info(),
            "flush": {str(n): v for n, v in flushes.items()},
            "read": read,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
