"""Learned SSD/HDD placement on the workload-suite logs: savings, rank correlation, decision cost.

Usage::

    python benchmarks/placement.py [LOG_DIR_OR_FILES...] [--quick] [--seeds 0,1,2]
        [--overlap 4,16]

LOGS default to ``data/placement/logs`` (written by ``dataplane placement collect``).
Prints, for the pipeline split (grouped k-fold over pipelines) and the time split
(each pipeline's latest runs held out):

* TCO savings against all-HDD of every policy at SSD budgets of 1, 2, 5, 10, 20% of
  the test rows' peak live bytes, the LightGBM policy's share of the oracle's savings
  and its ratio to the best heuristic (goals at 5%: >= 85% and >= 1.5x), and the most
  any placement could save (:mod:`placement.bound`, an LP relaxation: at or above
  the greedy oracle) over the best heuristic;
* Spearman rank correlation of predicted against true density on the test rows;
* each file kind's share of the files and of the all-HDD cost (cache shards also per
  pipeline), and where each policy's savings at 5% come from, by file kind (also for
  each ``--overlap``);
* how far each file kind's final size strays from the size expected at its creation
  (what a policy is told; :func:`placement.features.size_estimate`);
* with ``--seeds``, the LightGBM policy's share of the oracle at 5% for each model seed,
  with the threshold at the occupancy before (the default) and after the file;
* with ``--overlap``, the same evaluation with the runs replayed as a shared cluster
  would see them (:func:`placement.simulator.overlap_runs`: each run keeps its own
  timing, runs start ``k`` times as often), at 5%: each policy's savings, the oracle's
  ratio to first-fit, LightGBM's share of the oracle, and the LP bound on what any
  placement could save (:mod:`placement.bound`) over the best heuristic;
* the LP bound's program size and solve time on the whole log, as collected and with
  each ``--overlap``, at 1, 5 and 20%;
* decision latency: one file through features + model (the live path) against the
  naive path (a one-row pandas DataFrame into ``Booster.predict``), side by side; and
  batched decisions per second against the 50k/s goal; the time the spill reuse facts
  add to each spill (:meth:`placement.storage.RequestBuilder.reuse_of`);
* model file size and the predictor's memory;
* simulator replay speed on a log resampled to 500k rows;
* a sensitivity run with SSD wear and HDD transfer time priced
  (:class:`placement.cost.CostModel` optional terms), replayed twice: the policies fed a
  density estimate (stage history, LightGBM, the threshold fed the true density) without
  and with the break-even test of :mod:`placement.policy` (a file whose predicted saving
  is negative stays on HDD), with the savings and SSD files of each at 5% side by side.
  In the main runs (no wear priced) the test changes nothing: every logged file is far
  above the break-even density there.

Writes ``benchmarks/results/placement-<time>.json`` (and ``-latest``) and the PNG and
JSON of each split under ``benchmarks/results/placement/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

# this file is named like the package it measures: keep its own folder off the import
# path while importing ``placement``, then add it back (at the end) for ``_common``
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
from placement.bound import savings_upper_bound
from placement.cost import CostModel
from placement.evaluate import EvaluationConfig, evaluate, savings_ratio
from placement.features import FEATURE_COLUMNS, HistoryStore, build_features, clean_table
from placement.logwriter import read_logs
from placement.model import DensityModel, ModelParams
from placement.policy import AdaptiveThresholdPolicy, FirstFitPolicy
from placement.simulator import Trace, overlap_runs, peak_live_bytes, simulate
from placement.text import number_text

sys.path.append(str(_HERE))
from _common import RESULTS_DIR, format_table, machine_info, write_results

DEFAULT_LOGS = Path(__file__).resolve().parent.parent / "data" / "placement" / "logs"


def _goal_lines(result) -> list[str]:
    five = result.goals["5%"]
    lines = [
        (
            f"  at 5%: lightgbm {100 * five['lightgbm']:.2f}% "
            f"vs oracle {100 * five['oracle']:.2f}% -> "
            f"captures {100 * five['oracle_capture']:.1f}% of the oracle (goal >= 85%: "
            f"{'met' if result.goals['goal_oracle_capture_85pct_at_5pct'] else 'MISSED'})"
        ),
        (
            f"         best heuristic {five['best_heuristic']} "
            f"{100 * five['best_heuristic_savings']:.2f}% -> "
            f"lightgbm is {five['ratio_to_best_heuristic']:.2f}x it (goal >= 1.5x: "
            f"{'met' if result.goals['goal_1_5x_best_heuristic_at_5pct'] else 'MISSED'})"
        ),
    ]
    if "per_workload" in five:
        lines.append(
            f"         per-workload models {100 * five['per_workload']:.2f}% "
            f"({100 * five['per_workload_oracle_capture']:.1f}% of the oracle)"
        )
    oracle = result.savings["oracle"]["5%"]
    thr = result.savings.get("threshold+true-density", {}).get("5%")
    if thr is not None:
        lines.append(
            f"         online threshold fed the TRUE density: {100 * thr:.2f}% "
            f"({number_text(savings_ratio(thr, oracle), '.1f', scale=100, suffix='%')} of the "
            "oracle) - the ceiling of any predictor under this policy"
        )
    if "upper_bound" in five:
        lines.append(
            f"         no placement at all saves more than {100 * five['upper_bound']:.2f}% "
            f"(LP bound): {five['upper_bound_ratio_to_best_heuristic']:.2f}x the best heuristic "
            f"at most (the oracle {five['oracle_ratio_to_best_heuristic']:.2f}x)"
        )
    return lines


def _break_even_lines(plain, tested, budget: float = 0.05) -> list[str]:
    """Savings and SSD files at ``budget`` of each policy without and with the break-even test."""
    label = f"{100 * budget:g}%"

    def ssd_files(result, name: str) -> int:
        return next(
            s["ssd_files"]
            for s in result.simulations
            if s["policy"] == name and s["budget"] == budget
        )

    lines = [f"  at {label}: savings and files on SSD, without -> with the break-even test"]
    for name in tested.savings:
        if name == "all-hdd":
            continue
        before, after = plain.savings[name][label], tested.savings[name][label]
        lines.append(
            f"    {name:24s} {100 * before:7.2f}% -> {100 * after:7.2f}%   "
            f"SSD files {ssd_files(plain, name):5d} -> {ssd_files(tested, name):5d}"
        )
    return lines


def size_growth(df: pd.DataFrame) -> list[list[str]]:
    """Per file kind: files, and the 10th/50th/90th percentiles of final over expected size."""
    expected = pd.to_numeric(df["expected_size_bytes"], errors="coerce")
    known = expected > 0
    ratio = df.loc[known, "size_bytes"] / expected[known]
    rows = []
    for kind, r in ratio.groupby(df.loc[known, "file_kind"]):
        p10, p50, p90 = np.quantile(r.to_numpy(np.float64), [0.1, 0.5, 0.9])
        rows.append([str(kind), str(len(r)), f"{p10:.3f}x", f"{p50:.3f}x", f"{p90:.3f}x"])
    rows.append(["(no expected size)", str(int((~known).sum())), "", "", ""])
    return rows


def cost_shares(df: pd.DataFrame) -> list[list[str]]:
    """Per file kind, and per (file kind, pipeline) among cache shards: share of the files
    and of the all-HDD cost (default :class:`CostModel`)."""
    _, hdd = Trace.from_clean(df).costs(CostModel())
    frame = pd.DataFrame(
        {
            "kind": df["file_kind"].astype(str).to_numpy(),
            "pipe": df["pipeline"].astype(str).to_numpy(),
            "hdd": hdd,
        }
    )
    total, n = float(hdd.sum()), len(frame)

    def row(label: str, part: pd.DataFrame) -> list[str]:
        files = f"{100 * len(part) / n:.1f}%"
        return [label, str(len(part)), files, f"{100 * part['hdd'].sum() / total:.1f}%"]

    rows = [row(str(kind), part) for kind, part in frame.groupby("kind")]
    shards = frame[frame["kind"] == "cache_shard"]
    rows += [row(f"cache_shard / {pipe}", part) for pipe, part in shards.groupby("pipe")]
    return rows


def seed_shares(df: pd.DataFrame, seeds: list[int]) -> dict[str, dict[str, list[float]]]:
    """LightGBM's share of the oracle's savings at 5%: basis -> split -> one per seed."""
    out: dict[str, dict[str, list[float]]] = {}
    for basis in ("before", "after"):
        for split in ("pipeline", "time"):
            out.setdefault(basis, {})[split] = [
                evaluate(
                    df,
                    EvaluationConfig(
                        split=split,
                        budgets=(0.05,),
                        params=ModelParams(seed=seed),
                        policy_options={"occupancy_basis": basis},
                        upper_bound=False,
                    ),
                ).goals["5%"]["oracle_capture"]
                for seed in seeds
            ]
    return out


def overlap_rows(
    df: pd.DataFrame, overlaps: list[float], names: list[str]
) -> tuple[list[list[str]], dict[str, str], dict]:
    """Savings at 5% of the policies ``names``, per split and overlap
    (:func:`placement.simulator.overlap_runs`), with the most any placement could save
    (:mod:`placement.bound`) against the best heuristic; and, per split and overlap,
    where each policy's savings come from (:meth:`EvaluationResult.kind_table`)."""
    rows, by_kind, out = [], {}, {}
    for k in overlaps:
        for split in ("pipeline", "time"):
            r = evaluate(df, EvaluationConfig(split=split, budgets=(0.05,), overlap=k))
            five = {name: r.savings[name]["5%"] for name in names}
            oracle, ff = five["oracle"], five["first-fit"]
            goal = r.goals["5%"]
            # per-workload models exist on the time split only (a pipeline must be seen)
            per_workload = r.savings.get("lightgbm-per-workload", {}).get("5%")
            rows.append(
                [f"{k:g}", split]
                + [f"{100 * v:.1f}%" for v in five.values()]
                + ["-" if per_workload is None else f"{100 * per_workload:.1f}%"]
                + [
                    number_text(savings_ratio(oracle, ff), ".2f", suffix="x"),
                    number_text(
                        savings_ratio(five["lightgbm"], oracle), ".1f", scale=100, suffix="%"
                    ),
                ]
                + [
                    f"{100 * goal['upper_bound']:.1f}%",
                    f"{goal['upper_bound_ratio_to_best_heuristic']:.2f}x",
                ]
            )
            by_kind[f"{k:g} at a time, {split} split"] = r.kind_table()
            out[f"{k:g}/{split}"] = {
                "savings_5pct": five,
                "per_workload_5pct": per_workload,
                "savings_by_kind_5pct": {n: r.savings_by_kind[n]["5%"] for n in names},
                "oracle_over_first_fit": savings_ratio(oracle, ff),
                "upper_bound_5pct": goal["upper_bound"],
                "best_heuristic": goal["best_heuristic"],
                "upper_bound_over_best_heuristic": goal["upper_bound_ratio_to_best_heuristic"],
            }
    return rows, by_kind, out


def bound_costs(df: pd.DataFrame, overlaps: list[float]) -> list[list[str]]:
    """Size and solve time of the LP bound (:mod:`placement.bound`) on the whole log, as
    collected and replayed ``k`` runs at a time, at SSD budgets of 1, 5 and 20%."""
    rows = []
    for k in [None, *overlaps]:
        replay = df if k is None else clean_table(overlap_runs(df, k))[0]
        trace = Trace.from_clean(replay)
        peak = peak_live_bytes(trace)
        for budget in (0.01, 0.05, 0.20):
            b = savings_upper_bound(trace, int(budget * peak))
            rows.append(
                [
                    "as collected" if k is None else f"{k:g} at a time",
                    f"{100 * budget:g}%",
                    str(b.n_files),
                    str(b.n_times),
                    f"{b.wall_s:.1f} s",
                ]
            )
    return rows


def reuse_facts_us(n: int = 20_000, tasks: int = 2_000) -> float:
    """Mean microseconds of :meth:`RequestBuilder.reuse_of` for one spilled key (the
    work the spill facts add to each spill), on a real worker state of ``tasks`` tasks
    with one executing task and four dependents waiting on the key."""
    from distributed.worker_state_machine import TaskState, WorkerState

    from placement.storage.context import RequestBuilder

    state = WorkerState(threads={}, data={})

    def task(key: str, position: int, status: str) -> TaskState:
        ts = TaskState(key)
        ts.priority, ts.state = (0, 1, position), status
        state.tasks[key] = ts
        return ts

    key = task("x-0", 5, "memory")
    key.dependents = {task(f"y-{i}", 10 + i, "waiting") for i in range(4)}
    for i in range(tasks):
        task(f"z-{i}", 100 + i, "memory")
    state.executing.add(task("e-0", 9, "executing"))

    class Worker:  # what the builder reads of a distributed.Worker
        def __init__(self) -> None:
            self.address, self.state = "tcp://benchmark:0", state

    worker = Worker()  # the builder keeps a weak reference: hold it here
    builder = RequestBuilder()
    builder.bind_worker(worker)
    t0 = time.perf_counter()
    for _ in range(n):
        builder.reuse_of("x-0")
    return (time.perf_counter() - t0) / n * 1e6


def naive_single_latency(model: DensityModel, feats: pd.DataFrame, n: int = 500) -> float:
    """Median microseconds of one decision through a one-row DataFrame (the naive path)."""
    out = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        model.booster.predict(feats.iloc[[i % len(feats)]])
        out.append((time.perf_counter_ns() - t0) / 1e3)
    return float(np.median(out))


def resample(df: pd.DataFrame, rows: int, rng: np.random.Generator) -> pd.DataFrame:
    """``rows`` rows made of whole copies of the log, shifted in time one after another."""
    span = float(df["deleted_at"].max() - df["created_at"].min()) + 1.0
    copies = -(-rows // len(df))
    parts = []
    for k in range(copies):
        part = df.copy()
        part["created_at"] += k * span
        part["deleted_at"] += k * span
        part["file_id"] = part["file_id"].astype(str) + f"-{k}"
        part["run_id"] = part["run_id"].astype(str) + f"-{k}"
        parts.append(part)
    return pd.concat(parts, ignore_index=True).head(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="*", type=Path, default=[DEFAULT_LOGS])
    ap.add_argument(
        "--quick", action="store_true", help="skip the sensitivity run and the replay-speed run"
    )
    ap.add_argument(
        "--seeds",
        default="",
        help="comma-separated model seeds: also report LightGBM's share of the oracle at 5%% "
        "per seed, with the threshold at the occupancy before and after the file",
    )
    ap.add_argument(
        "--overlap",
        default="",
        help="comma-separated runs at a time (e.g. 4,16): also replay the runs overlapped, "
        "as a shared cluster would run them",
    )
    args = ap.parse_args(argv)
    if not any(p.exists() for p in args.logs):
        print(
            f"no logs at {[str(p) for p in args.logs]}; "
            f"run `dataplane placement collect {DEFAULT_LOGS}` first"
        )
        return 1
    logset = read_logs(args.logs)
    df, issues = clean_table(logset.table)
    print(
        f"logs: {len(logset.files)} file(s), {issues.total_rows} rows, "
        f"{issues.n_dropped} bad rows dropped, "
        f"{len(logset.bad_files)} bad file(s); {df['pipeline'].nunique()} pipelines, "
        f"{df['run_id'].nunique()} runs"
    )
    out_dir = RESULTS_DIR / "placement"
    payload: dict = {
        "machine": machine_info(),
        "input": {
            "files": len(logset.files),
            **issues.to_dict(),
            "bad_files": [str(p) for p, _ in logset.bad_files],
            "pipelines": int(df["pipeline"].nunique()),
            "runs": int(df["run_id"].nunique()),
        },
    }
    print("\n== final size over the size expected at creation, per file kind")
    growth = size_growth(df)
    print(format_table(["file kind", "files", "p10", "p50", "p90"], growth))
    payload["size_growth"] = growth
    print("\n== share of the files and of the all-HDD cost, per file kind")
    shares = cost_shares(df)
    print(format_table(["file kind", "files", "of files", "of all-HDD cost"], shares))
    payload["cost_shares"] = shares
    results = {}
    for split in ("pipeline", "time"):
        t0 = time.perf_counter()
        result = evaluate(df, EvaluationConfig(split=split), measure=(split == "time"))
        paths = result.write(out_dir, stem=f"placement-{split}")
        results[split] = result
        print(
            f"\n== {split} split: {result.rows['test']} test files "
            f"in {result.rows['test_runs']} runs "
            f"({time.perf_counter() - t0:.1f} s) - TCO savings vs all-HDD"
        )
        print(result.table())
        print("\n".join(_goal_lines(result)))
        print(
            "  Spearman (predicted vs true density, test rows): "
            + ", ".join(f"{k} {v:.3f}" for k, v in result.spearman.items())
        )
        print("  where the savings at 5% come from (points of the all-HDD TCO, by file kind):")
        print(result.kind_table())
        print(f"  wrote {paths['png']}")
        payload[split] = {k: v for k, v in result.to_dict().items() if k != "simulations"}
        payload[split]["simulations"] = result.simulations

    # decision cost, side by side with the naive path
    d = results["time"].decisions
    history = HistoryStore.from_table(df)
    feats = build_features(df, history)
    model = DensityModel().fit_features(feats, _target(df))
    naive = naive_single_latency(model, feats)
    reuse_us = reuse_facts_us()
    print("\n== decisions (model of the time split; 2-core machine, shared)")
    print(
        format_table(
            ["measure", "value", "goal / baseline"],
            [
                [
                    "single decision p50 (features + model)",
                    f"{d['single_us_p50']:.1f} us",
                    "< 1000 us",
                ],
                ["single decision p99", f"{d['single_us_p99']:.1f} us", "< 1000 us"],
                [
                    "model call alone p50",
                    f"{d['single_model_only_us_p50']:.1f} us",
                    f"naive 1-row DataFrame: {naive:.1f} us "
                    f"({naive / d['single_model_only_us_p50']:.1f}x slower)",
                ],
                ["batched, all threads", f"{d['batched_per_s']:,.0f} /s", ">= 50,000 /s"],
                ["batched, one thread", f"{d['batched_per_s_one_thread']:,.0f} /s", ">= 50,000 /s"],
                [
                    "spill reuse facts (reuse_of), per spilled key",
                    f"{reuse_us:.1f} us",
                    "worker state of 2,000 tasks",
                ],
                [
                    "model files (model.txt + model.json)",
                    f"{d['model_file_bytes'] / 1024:.0f} KiB",
                    f"{d['trees']} trees",
                ],
                [
                    "predictor RSS growth (load + predict 10k)",
                    f"{d['predictor_rss_delta_bytes'] / 2**20:.1f} MiB"
                    if d["predictor_rss_delta_bytes"] is not None
                    else "not measured",
                    d["predictor_rss_error"] or "",
                ],
                [
                    "predictor load, Python heap peak",
                    f"{d['predictor_load_python_heap_peak_bytes'] / 2**10:.0f} KiB",
                    "",
                ],
            ],
        )
    )
    payload["decisions"] = {
        **d,
        "naive_single_model_us_p50": naive,
        "reuse_facts_us_mean": reuse_us,
        "feature_count": len(FEATURE_COLUMNS),
    }
    imp = list(results["time"].feature_importances.items())[:8]
    print("  top features (gain): " + ", ".join(f"{k} {v:.0f}" for k, v in imp))

    if not args.quick:
        rng = np.random.default_rng(0)
        big = resample(df, 500_000, rng)
        trace = Trace.from_clean(big)
        pred = np.random.default_rng(1).normal(-5, 1, len(big))
        t0 = time.perf_counter()
        r_ff = simulate(trace, FirstFitPolicy(10**9), CostModel(), 10**9)
        ff_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        r_ad = simulate(trace, AdaptiveThresholdPolicy(10**9), CostModel(), 10**9, predictions=pred)
        ad_s = time.perf_counter() - t0
        print(
            f"\n== simulator replay of {len(big):,} rows: first-fit {len(big) / ff_s:,.0f} rows/s, "
            f"adaptive threshold {len(big) / ad_s:,.0f} rows/s"
        )
        payload["simulator_speed"] = {
            "rows": len(big),
            "first_fit_rows_per_s": len(big) / ff_s,
            "adaptive_rows_per_s": len(big) / ad_s,
            "ssd_files": [r_ff.ssd_files, r_ad.ssd_files],
        }

        full = CostModel(ssd_usd_per_tb_written=0.057, hdd_bytes_per_s=270e6)
        plain = evaluate(
            df,
            EvaluationConfig(split="time", cost_model=full, break_even=False, upper_bound=False),
        )
        sens = evaluate(df, EvaluationConfig(split="time", cost_model=full))
        sens.write(out_dir, stem="placement-time-wear")
        title = "time split with SSD wear ($0.057/TB written) and HDD transfer (270 MB/s) priced"
        print(f"\n== sensitivity: {title}, WITHOUT the break-even test")
        print(plain.table())
        print(
            f"\n== sensitivity: {title}, WITH the break-even test "
            "(stage-history, lightgbm*, threshold+true-density)"
        )
        print(sens.table())
        print("\n".join(_break_even_lines(plain, sens)))
        payload["sensitivity_wear_transfer"] = {
            k: v for k, v in sens.to_dict().items() if k != "simulations"
        }
        payload["sensitivity_wear_transfer_no_break_even"] = {
            k: v for k, v in plain.to_dict().items() if k != "simulations"
        }

    if args.seeds:
        seeds = [int(s) for s in args.seeds.split(",")]
        shares = seed_shares(df, seeds)
        print(f"\n== LightGBM share of the oracle at 5%, model seeds {seeds}")
        rows = [
            [basis, split, " ".join(f"{100 * v:.1f}%" for v in vals), f"{100 * np.mean(vals):.1f}%"]
            for basis, by_split in shares.items()
            for split, vals in by_split.items()
        ]
        print(format_table(["occupancy", "split", "per seed", "mean"], rows))
        payload["seed_shares"] = {"seeds": seeds, **shares}

    overlaps = [float(k) for k in args.overlap.split(",")] if args.overlap else []
    print("\n== LP bound: program size and solve time (whole log)")
    costs = bound_costs(df, overlaps)
    print(format_table(["replay", "budget", "files", "event times", "solve"], costs))
    payload["bound_costs"] = costs

    if overlaps:
        names = [n for n in results["pipeline"].savings if n != "all-hdd"]
        rows, by_kind, payload["overlap"] = overlap_rows(df, overlaps, names)
        print("\n== runs replayed overlapped (k runs at a time), TCO savings vs all-HDD at 5%")
        header = [
            "k",
            "split",
            *names,
            "lightgbm-per-workload",
            "oracle / first-fit",
            "lightgbm / oracle",
            "LP bound",
            "bound / best heuristic",
        ]
        print(format_table(header, rows))
        for replay, text in by_kind.items():
            print(f"\n== {replay}: where the savings come from (points of the all-HDD TCO)")
            print(text)

    path = write_results("placement", payload)
    print(f"\nwrote {path}")
    return 0


def _target(df: pd.DataFrame) -> np.ndarray:
    from placement.features import log_density

    return log_density(df)


if __name__ == "__main__":
    raise SystemExit(main())
