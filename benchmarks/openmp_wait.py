"""Benchmark of OpenMP's wait policy for LightGBM training on a busy machine.

``dataplane placement ...`` and ``dataplane report`` set ``OMP_WAIT_POLICY=PASSIVE``
(:mod:`placement.openmp`). This measures why: the density model is fitted on a real log
(features of every row, as ``dataplane placement train`` builds them) under libgomp's
default (no ``OMP_WAIT_POLICY``: spin 300,000 turns, then sleep) and under PASSIVE, side by
side, while 0, 1 or more other processes keep the cores busy (each a Python loop, as a
test run or a Dask worker next door would).

Each fit runs in a fresh child process, since the policy is read when the OpenMP runtime
loads; a fit that takes longer than ``--timeout`` seconds is stopped and counted as at
least that long. The script prints the median fit time per policy and load and the ratio
default / PASSIVE; it never asserts. Results go to
``benchmarks/results/openmp_wait-<time>.json``.

Usage::

    python benchmarks/openmp_wait.py [--log data/placement/logs] [--busy 0,1,3]
        [--repeats 3] [--trees 300] [--timeout 120]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
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

#: None: no OMP_WAIT_POLICY in the environment (libgomp's default).
POLICIES = ("default", "PASSIVE")

#: The child: build features of a log, fit the density model, print the fit's seconds.
_FIT = """
import sys, time
import numpy as np
from placement.features import HistoryStore, build_features, clean_table, log_density
from placement.logwriter import read_logs
from placement.model import DensityModel, ModelParams
table = read_logs([sys.argv[1]]).table
df, _ = clean_table(table)
y = log_density(df)
ok = np.isfinite(y)
x = build_features(df, HistoryStore.from_table(df))
start = time.perf_counter()
DensityModel(ModelParams(n_estimators=int(sys.argv[2]), seed=0)).fit_features(x[ok], y[ok])
print(int(ok.sum()), time.perf_counter() - start)
"""

_BUSY = "while True:\n    pass\n"


def fit_once(log: Path, policy: str, trees: int, timeout: float) -> tuple[int | None, float]:
    """Fit in a child process under ``policy``; (rows, seconds), seconds >= timeout if stopped."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    try:
        out = subprocess.run(
            [sys.executable, "-c", _FIT, str(log), str(trees)],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return None, timeout
    rows, seconds = out.stdout.split()
    return int(rows), float(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, default=REPO / "data" / "placement" / "logs")
    parser.add_argument("--busy", default="0,1,3", help="busy processes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trees", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per fit")
    args = parser.parse_args(argv)
    if not args.log.exists():
        parser.error(f"{args.log} does not exist: run `dataplane placement collect {args.log}`")
    loads = [int(b) for b in args.busy.split(",")]
    results: list[dict[str, Any]] = []
    rows_fitted = None
    for busy in loads:
        hogs = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(busy)]
        try:
            time.sleep(0.5 if busy else 0.0)
            times: dict[str, list[float]] = {p: [] for p in POLICIES}
            stopped: dict[str, int] = {p: 0 for p in POLICIES}
            for _ in range(args.repeats):
                for policy in POLICIES:  # alternated, so drift hits both alike
                    rows, seconds = fit_once(args.log, policy, args.trees, args.timeout)
                    rows_fitted = rows or rows_fitted
                    times[policy].append(seconds)
                    stopped[policy] += rows is None
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        med = {p: statistics.median(times[p]) for p in POLICIES}
        results.append(
            {
                "busy_processes": busy,
                "seconds": times,
                "stopped_at_timeout": stopped,
                "median_s": med,
                "default_over_passive": med["default"] / med["PASSIVE"],
            }
        )
        print(
            f"busy {busy}: default {med['default']:.2f} s, PASSIVE {med['PASSIVE']:.2f} s",
            flush=True,
        )
    print(
        f"\nLightGBM fit, {args.trees} trees on {rows_fitted} rows of {args.log}, "
        f"{os.cpu_count()} CPUs, median of {args.repeats}"
    )
    table = [
        [
            r["busy_processes"],
            f"{r['median_s']['default']:.2f}"
            + (" (stopped)" if r["stopped_at_timeout"]["default"] else ""),
            f"{r['median_s']['PASSIVE']:.2f}"
            + (" (stopped)" if r["stopped_at_timeout"]["PASSIVE"] else ""),
            f"{r['default_over_passive']:.2f}x",
        ]
        for r in results
    ]
    print(format_table(["busy processes", "default s", "PASSIVE s", "default / PASSIVE"], table))
    path = write_results(
        "openmp_wait",
        {
            "machine": machine_info(),
            "log": str(args.log),
            "rows": rows_fitted,
            "trees": args.trees,
            "timeout_s": args.timeout,
            "results": results,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
