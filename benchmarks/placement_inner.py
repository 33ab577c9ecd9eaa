"""Inner validation of the placement settings: the numbers they were chosen by.

Usage::

    python benchmarks/placement_inner.py [LOG_DIR_OR_FILES...] [--basis before|after]
        [--variants default,kind-slope-0.5,stage-slope-0] [--seeds 0,1,2] [--overlap K]
        [--split pipeline|time]

For each outer fold of the pipeline split (exactly the folds of
:func:`placement.evaluate.evaluate`), only that fold's *training* rows are evaluated
again with a grouped k-fold over their own pipelines (4 inner folds), so the held-out
pipelines never inform a setting. Printed per variant: the LightGBM policy's share of
the oracle's savings at a 5% SSD budget, and that of the same threshold fed the true
density, each the mean over outer folds and model seeds.

With ``--split time`` the outer split is the time split instead, and its training runs
are split again by time (each pipeline's latest third held out); the per-pipeline
models' share is printed too (combined with the global model as the variant says).

With ``--overlap K`` the log is first replayed with ``K`` runs at a time
(:func:`placement.simulator.overlap_runs`), as on a shared cluster.

Variants (each with the threshold at ``--basis``):

* ``default``: the shipped settings;
* ``kind-slope-0.5``: the history prior's size slope at the file-kind levels 0.5
  instead of :data:`placement.features.PRIOR_KIND_SIZE_SLOPE`;
* ``stage-slope-0``: the size slope at the stage levels 0 instead of
  :data:`placement.features.PRIOR_SIZE_SLOPE`;
* ``no-reuse-facts``: the spill facts ``reuse_distance`` and ``n_dependents`` (log
  schema 2) blanked, as if the worker had not reported them;
* ``exponent-X``: the adaptive threshold's ``exponent`` X (0.125, 0.25, 0.5, 1.0)
  instead of the policy's default (the admitted share of recent bytes is
  ``(1 - occupancy) ** exponent``);
* ``combine-own``: per-pipeline models used alone instead of averaged with the global
  model (:class:`placement.model.Combine`; ``--split time`` only).

The slope variants change :data:`placement.features.PRIOR_SIZE_SLOPES` in this
process only. About 1.5-2 minutes per variant on 2 cores for 20,321 rows and 3 seeds.
Writes ``benchmarks/results/placement_inner-<time>.json`` (and ``-latest``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# keep this folder off the import path while importing ``placement`` (see placement.py)
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
import placement.features as features
from placement.evaluate import EvaluationConfig, evaluate, split_masks
from placement.features import clean_table
from placement.logwriter import read_logs
from placement.model import ModelParams
from placement.simulator import overlap_runs

sys.path.append(str(_HERE))
from _common import format_table, machine_info, write_results

DEFAULT_LOGS = _HERE.parent / "data" / "placement" / "logs"
@dataclass(frozen=True)
class Variant:
    """What a variant changes against the shipped settings."""

    #: History-prior size slopes it sets (level -> slope).
    slopes: dict[str, float] = field(default_factory=dict)
    #: Log columns it blanks.
    blanked: tuple[str, ...] = ()
    #: Options of the threshold policies it sets.
    options: dict[str, float] = field(default_factory=dict)
    #: How per-pipeline models combine with the global one (time split).
    combine: str = "mean"


VARIANTS: dict[str, Variant] = {
    "default": Variant(),
    "kind-slope-0.5": Variant(slopes={"ko": 0.5, "k": 0.5}),
    "stage-slope-0": Variant(slopes={"ps": 0.0, "s": 0.0}),
    "no-reuse-facts": Variant(blanked=("reuse_distance", "n_dependents")),
    **{f"exponent-{x:g}": Variant(options={"exponent": x}) for x in (0.125, 0.25, 0.5, 1.0)},
    "combine-own": Variant(combine="own"),
}


def inner_scores(
    df,
    basis: str,
    seeds: list[int],
    options: dict | None = None,
    *,
    split: str = "pipeline",
    combine: str = "mean",
) -> tuple[float, float, float]:
    """Mean (LightGBM, true-density, per-pipeline models) share of the oracle at 5% over
    outer folds and seeds (the last ``NaN`` on the pipeline split)."""
    lgbm, true, per_workload = [], [], []
    for train, _held in split_masks(df, EvaluationConfig(split=split)):
        inner = df.loc[train].reset_index(drop=True)
        for seed in seeds:
            r = evaluate(
                inner,
                EvaluationConfig(
                    split=split,
                    folds=4,
                    budgets=(0.05,),
                    params=ModelParams(seed=seed),
                    policy_options={"occupancy_basis": basis, **(options or {})},
                    upper_bound=False,
                    combine=combine,
                ),
            )
            oracle = r.goals["5%"]["oracle"]
            lgbm.append(r.goals["5%"]["oracle_capture"])
            true.append(r.savings["threshold+true-density"]["5%"] / oracle)
            per_workload.append(r.goals["5%"].get("per_workload_oracle_capture", np.nan))
    return float(np.mean(lgbm)), float(np.mean(true)), float(np.mean(per_workload))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="*", type=Path, default=[DEFAULT_LOGS])
    ap.add_argument("--basis", choices=("before", "after"), default="before")
    ap.add_argument("--variants", default="default", help=f"comma-separated, of {list(VARIANTS)}")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated model seeds")
    ap.add_argument(
        "--overlap", type=float, default=None, help="replay K runs at a time (shared cluster)"
    )
    ap.add_argument("--split", choices=("pipeline", "time"), default="pipeline")
    args = ap.parse_args(argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    if not any(p.exists() for p in args.logs):
        print(f"no logs at {[str(p) for p in args.logs]}; run `dataplane placement collect` first")
        return 1
    seeds = [int(s) for s in args.seeds.split(",")]
    df, _ = clean_table(read_logs(args.logs).table)
    if args.overlap is not None:
        df = overlap_runs(df, args.overlap)
    shipped = dict(features.PRIOR_SIZE_SLOPES)
    rows, payload = [], {
        "machine": machine_info(),
        "basis": args.basis,
        "seeds": seeds,
        "overlap": args.overlap,
        "split": args.split,
    }
    for name in names:
        features.PRIOR_SIZE_SLOPES.update(shipped)
        variant = VARIANTS[name]
        features.PRIOR_SIZE_SLOPES.update(variant.slopes)
        blank = {c: np.nan for c in variant.blanked}
        lgbm, true, pw = inner_scores(
            df.assign(**blank),
            args.basis,
            seeds,
            variant.options,
            split=args.split,
            combine=variant.combine,
        )
        rows.append([name, f"{lgbm:.4f}", f"{pw:.4f}", f"{true:.4f}"])
        payload[name] = {"lightgbm": lgbm, "per_workload": pw, "true_density": true}
        print(
            f"{name}: lightgbm {lgbm:.4f}, per-pipeline models {pw:.4f}, "
            f"threshold fed the true density {true:.4f}",
            flush=True,
        )
    features.PRIOR_SIZE_SLOPES.update(shipped)
    overlap = f", {args.overlap:g} runs at a time" if args.overlap is not None else ""
    print(
        f"\n== inner validation ({args.split} split), threshold at the occupancy {args.basis} "
        f"the file, seeds {seeds}{overlap}"
    )
    head = ["variant", "LightGBM share", "per-pipeline share", "true-density share"]
    print(format_table(head, rows))
    print(f"\nwrote {write_results('placement_inner', payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
