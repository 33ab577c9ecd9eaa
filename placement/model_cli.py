"""``dataplane placement train | evaluate | simulate``: the model's command-line face.

The ``placement`` group (:mod:`placement.cli`) finds these commands lazily by name.

Bad input never stops a run: unreadable files, files that do not fit the log schema
and unusable rows are skipped, counted, and reported (the first few by name) in the
output. A log file named more than once (a directory and a file in it) is read once and
counted in ``files_repeated``; a row whose ``(run_id, file_id)`` was read before (the same
log copied under another name) is dropped and counted in ``rows_repeated``. A missing or
incompatible model file is an error that names the file and the fix
(:class:`~placement.errors.ModelError`).

``--json`` prints strict JSON (:mod:`placement.jsonout`): a number that is undefined (a
ratio of nothing to nothing) or unbounded (something against nothing) is ``null``, and
``overlap`` is ``null`` for the runs as logged, ``"inf"`` for every run at once.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from placement.cost import (
    DEFAULT_BUDGETS,
    CostModel,
    budget_share,
    budgets_from_percents,
    budgets_to_percents,
    prices_text,
)
from placement.cost_option import price_option
from placement.errors import ModelError, PlacementConfigError, PlacementError
from placement.jsonout import dumps, overlap_json, utc_timestamp
from placement.text import text_table

if TYPE_CHECKING:
    from placement.features import RowIssues

logger = logging.getLogger(__name__)

_BAD_SHOWN = 5


def _kept_parts_hint(kept: Sequence[Path]) -> str:
    """How to read the logs in ``kept``, the ``.parts-*`` directories interrupted collections
    kept (hidden, so the directories they are in read as holding none)."""
    if len(kept) == 1:
        skip = "its parent skip: give that directory itself"
    else:
        skip = "their parents skip: give those directories themselves"
    return (
        "the logs of an interrupted `dataplane placement collect` are kept in the hidden "
        f"{', '.join(str(d) for d in kept)}, which readers of {skip} as LOGS"
    )


def _check_paths(paths: Sequence[str]) -> None:
    """Refuse a log path that does not exist (a typo would train or evaluate on less data
    without a word), before any output directory is made."""
    for p in paths:
        if not os.path.lexists(p):
            raise click.ClickException(f"log path {p} does not exist; check the path")


def _read(paths: Sequence[str], progress: bool) -> tuple[Any, dict[str, Any], RowIssues]:
    """Log rows of ``paths`` (files or directories), a report of what was skipped, and the
    bad rows :func:`placement.features.clean_table` dropped.

    A file found more than once (its directory and the file itself given, or two paths to
    it) is read once; the report counts the repeats in ``files_repeated``. A usable row
    whose ``(run_id, file_id)`` an earlier row has (a copy of a log under another name, a
    row written twice) is dropped, the first kept; the report counts them in
    ``rows_repeated`` (``rows_usable`` counts the rows kept). The commands check that
    ``paths`` exist first (:func:`_check_paths`), before making any output directory.
    """
    from placement.features import clean_table
    from placement.logwriter import kept_parts_dirs, log_files, read_logs

    files: list[Path] = []
    kept: list[Path] = []  # .parts-* directories of interrupted collections, in paths given
    seen: set[str] = set()
    repeated = 0
    bad: list[tuple[str, str]] = []
    for p in paths:
        unreadable: list[tuple[Path, str]] = []
        try:
            found = log_files(p, unreadable=unreadable)
        except (FileNotFoundError, OSError) as exc:
            bad.append((str(p), f"{type(exc).__name__}: {exc}"))
            continue
        bad.extend((str(d), reason) for d, reason in unreadable)
        if not found:
            in_p = kept_parts_dirs(p)
            kept.extend(in_p)
            reason = "no *.parquet log files there"
            bad.append((str(p), f"{reason}; {_kept_parts_hint(in_p)}" if in_p else reason))
        for f in found:
            key = os.path.normcase(str(f.resolve()))
            if key in seen:
                repeated += 1
                logger.info("log file %s given more than once: read once", f)
                continue
            seen.add(key)
            files.append(f)
    tables = []
    good = 0
    iterator: Any = files
    if progress and len(files) > 1:
        from tqdm import tqdm

        iterator = tqdm(files, desc="read logs", unit="file", file=sys.stderr, disable=None)
    for f in iterator:
        logset = read_logs([f])
        bad.extend((str(p), reason) for p, reason in logset.bad_files)
        if logset.files:
            good += 1
            tables.append(logset.table)
    import pyarrow as pa

    from placement.schema import empty_table

    table = pa.concat_tables(tables) if tables else empty_table()
    df, issues = clean_table(table)
    # a file is one row: the same (run_id, file_id) twice is the same file read twice
    repeated_rows = df.duplicated(["run_id", "file_id"], keep="first").to_numpy()
    n_repeated_rows = int(repeated_rows.sum())
    if n_repeated_rows:
        logger.info(
            "%d row(s) repeat the (run_id, file_id) of an earlier row: dropped", n_repeated_rows
        )
        df = df.loc[~repeated_rows].reset_index(drop=True)
    report = {
        "files_read": good,
        "files_repeated": repeated,
        "bad_files": len(bad),
        "bad_files_first": [{"path": p, "reason": r} for p, r in bad[:_BAD_SHOWN]],
        "rows_read": issues.total_rows,
        "rows_dropped": issues.n_dropped,
        "rows_dropped_by_reason": dict(issues.dropped),
        "rows_repeated": n_repeated_rows,
        "rows_usable": len(df),
    }
    for p, r in bad:
        logger.info("skipped log file %s: %s", p, r)
    if len(df) == 0 and kept:
        raise click.ClickException(
            f"no usable log rows in {list(paths)} ({len(bad)} bad file(s), {issues.n_dropped} "
            f"bad row(s)): {_kept_parts_hint(kept)}"
        )
    if len(df) == 0:
        raise click.ClickException(
            f"no usable log rows in {list(paths)} ({len(bad)} bad file(s)"
            + (f", first: {bad[0][0]}: {bad[0][1]}" if bad else "")
            + f", {issues.n_dropped} bad row(s)); give placement logs written by "
            "`dataplane placement collect` or the placement service"
        )
    return df, report, issues


def _emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    """Print ``payload`` as strict JSON (non-finite numbers as ``null``) or ``text``."""
    if as_json:
        click.echo(dumps(payload, indent=2, default=str))
    else:
        click.echo(text)


def _input_text(report: dict[str, Any]) -> str:
    text = (
        f"input: {report['files_read']} file(s), {report['rows_usable']} usable rows "
        f"({report['rows_dropped']} bad rows dropped, "
        + (
            f"{report['rows_repeated']} duplicate rows dropped, "
            if report.get("rows_repeated")
            else ""
        )
        + f"{report['bad_files']} bad file(s) skipped"
        + (
            f", {report['files_repeated']} file(s) given more than once read once"
            if report.get("files_repeated")
            else ""
        )
        + ")"
    )
    for item in report["bad_files_first"]:
        text += f"\n  skipped {item['path']}: {item['reason']}"
    for reason, n in report["rows_dropped_by_reason"].items():
        text += f"\n  dropped {n} row(s): {reason}"
    return text


#: The default is placement.model.MIN_PIPELINE_ROWS, written out so that ``--help`` need not
#: import the model module (pandas, pyarrow); a test holds the two equal.
_min_rows_option = click.option(
    "--min-rows",
    default=100,
    show_default=True,
    type=click.IntRange(1),
    help="Fewest training rows a pipeline needs for its own model (evaluate: the "
    "per-workload policy of the time split).",
)

#: Choices of placement.model.Combine, written out for the same reason.
_combine_option = click.option(
    "--combine",
    type=click.Choice(["mean", "own"]),
    default="mean",
    show_default=True,
    help="A pipeline with its own model gets the mean of it and the global model, or it alone.",
)


# ---------------------------------------------------------------------------- train
@click.command("train")
@click.argument("logs", nargs=-1, required=True)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the model set (models.json and the models it names).",
)
@click.option(
    "--per-workload/--global-only",
    default=False,
    show_default=True,
    help="Also train one model per pipeline with at least --min-rows rows.",
)
@_min_rows_option
@_combine_option
@click.option(
    "--trees", default=300, show_default=True, type=click.IntRange(1), help="Boosting rounds."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--no-progress", is_flag=True, help="Hide progress bars (shown only when stderr is a terminal)."
)
def train_command(
    logs: tuple[str, ...],
    out_dir: Path,
    per_workload: bool,
    min_rows: int,
    combine: str,
    trees: int,
    as_json: bool,
    no_progress: bool,
) -> None:
    """Train the LightGBM density model(s) on LOGS (Parquet files or directories) into --out."""
    from placement.features import HistoryStore
    from placement.model import ModelParams, ModelSet

    _check_paths(logs)
    _check_writable(out_dir)  # before the training, not after it
    df, report, _ = _read(logs, not no_progress)
    try:
        models = ModelSet.fit(
            df,
            HistoryStore.from_table(df),
            per_workload=per_workload,
            min_rows=min_rows,
            params=ModelParams(n_estimators=trees),
            combine=combine,
        )
        models.save(out_dir)
    except PlacementError as exc:
        raise click.ClickException(str(exc)) from exc
    top = dict(list(models.global_model.feature_importances().items())[:10])
    payload = {
        "model_dir": str(out_dir),
        "input": report,
        "trained_rows": models.global_model.metadata.get("trained_rows"),
        "per_pipeline_models": sorted(models.per_pipeline),
        "combine": models.combine.value,
        "feature_importances_gain_top10": top,
    }
    text = (
        _input_text(report)
        + f"\nsaved global model ({payload['trained_rows']} rows) and {len(models.per_pipeline)} "
        f"per-pipeline model(s) to {out_dir}\ntop features (gain): "
        + ", ".join(f"{k}={v:.0f}" for k, v in list(top.items())[:5])
    )
    _emit(payload, as_json, text)


# ---------------------------------------------------------------------------- evaluate
def _bound_option(at: str) -> Any:
    """``--bound/--no-bound`` of evaluate and simulate (:mod:`placement.bound`), bounding
    the savings ``at`` its budget(s)."""
    return click.option(
        "--bound/--no-bound",
        default=True,
        show_default=True,
        help=f"Also bound what any placement could save {at} (a linear program, seconds).",
    )


def _overlap(_ctx: click.Context, _param: click.Parameter, value: float | None) -> float | None:
    from placement.simulator import check_overlap

    try:
        return None if value is None else check_overlap(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_overlap_option = click.option(
    "--overlap",
    type=float,
    callback=_overlap,
    default=None,
    metavar="K",
    help="Replay the runs K at a time, as a shared cluster would: each run keeps its own "
    "timing, runs start K times as often (default: as logged).",
)


def _budgets(value: str) -> tuple[float, ...]:
    try:
        budgets = budgets_from_percents(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--budgets") from None
    labels = budgets_to_percents(budgets).split(",")
    repeated = sorted({label for label in labels if labels.count(label) > 1}, key=float)
    if repeated:  # results are told apart by their labels
        raise click.BadParameter(
            f"{', '.join(f'{label}%' for label in repeated)} given more than once; give each "
            "budget once",
            param_hint="--budgets",
        )
    return budgets


@click.command("evaluate")
@click.argument("logs", nargs=-1, required=True)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for placement-eval.json, .txt and .png.",
)
@click.option(
    "--split",
    type=click.Choice(["pipeline", "time"]),
    default="pipeline",
    show_default=True,
    help="Hold out whole pipelines (k-fold) or each pipeline's latest runs.",
)
@click.option(
    "--budgets",
    default=budgets_to_percents(DEFAULT_BUDGETS),
    show_default=True,
    help="SSD budgets, percent of the test rows' peak live bytes.",
)
@click.option(
    "--folds",
    default=4,
    show_default=True,
    type=click.IntRange(2),
    help="Folds of the pipeline split.",
)
@click.option(
    "--measure/--no-measure",
    default=True,
    show_default=True,
    help="Measure decision latency, model size and predictor memory.",
)
@_min_rows_option
@_combine_option
@_bound_option("at each budget")
@_overlap_option
@price_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--no-progress", is_flag=True, help="Hide progress bars (shown only when stderr is a terminal)."
)
def evaluate_command(
    logs: tuple[str, ...],
    out_dir: Path,
    split: str,
    budgets: str,
    folds: int,
    min_rows: int,
    combine: str,
    measure: bool,
    bound: bool,
    overlap: float | None,
    cost_model: CostModel,
    as_json: bool,
    no_progress: bool,
) -> None:
    """Evaluate every placement policy on held-out LOGS; write a table, a PNG and JSON to --out.

    Existing placement-eval.json, .txt and .png in --out are replaced (and said so).
    """
    from placement.evaluate import EvaluationConfig, Split, evaluate, output_paths
    from placement.model import Combine

    try:
        config = EvaluationConfig(
            split=Split(split),
            budgets=_budgets(budgets),
            folds=folds,
            min_rows=min_rows,
            combine=Combine(combine),
            upper_bound=bound,
            overlap=overlap,
            cost_model=cost_model,
        )
    except PlacementError as exc:
        raise click.UsageError(str(exc)) from exc
    _check_paths(logs)
    _check_writable(out_dir)
    df, report, issues = _read(logs, not no_progress)
    try:
        result = evaluate(
            df, config, progress=not no_progress, measure=measure, log=logger.info, inputs=logs
        )
    except PlacementError as exc:
        raise click.ClickException(str(exc)) from exc
    # evaluate() saw the rows _read had already cleaned: count the input's rows instead
    result.rows["total"] = issues.total_rows
    result.rows["dropped"] = issues.to_dict()
    result.rows["input"] = report
    replaced = [p for p in output_paths(out_dir).values() if p.exists()]
    input_summary = _input_text(report)
    try:
        paths = result.write(out_dir, input_summary=input_summary)
    except OSError as exc:
        raise click.ClickException(f"cannot write to {out_dir}: {exc}") from exc
    payload = result.to_json_dict()
    payload.pop("simulations")
    payload["files"] = {k: str(v) for k, v in paths.items()}
    payload["files_replaced"] = [str(p) for p in replaced]
    _emit(payload, as_json, result.text(input_summary) + "\n" + _wrote_text(paths, replaced))


def _wrote_text(paths: dict[str, Path], replaced: Sequence[Path]) -> str:
    """The line naming the files a command wrote and those of them it replaced."""
    text = f"wrote {', '.join(str(p) for p in paths.values())}"
    if replaced:
        text += f" (replaced existing {', '.join(p.name for p in replaced)})"
    return text


def _check_writable(directory: Path) -> None:
    """Create ``directory`` (and its parents) and make sure a file can be written there,
    before any work whose output would go there.

    Raises
    ------
    click.ClickException
        ``cannot write to <directory>: <reason>``.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise click.ClickException(
            f"cannot write to {directory}: {exc.strerror or exc}; give --out a directory "
            "that can be created and written"
        ) from exc


# ---------------------------------------------------------------------------- simulate
def _model_facts(models: Any, model_dir: Path | None, df: Any) -> dict[str, Any]:
    """Which model ``simulate`` replayed: its directory, training rows, per-pipeline
    models, and how many of the replayed runs it was trained on (``None``: a model
    saved without its run ids)."""
    meta = models.global_model.metadata
    trained = meta.get("run_ids")
    return {
        "dir": str(model_dir),
        "trained_rows": meta.get("trained_rows"),
        "trained_at": meta.get("trained_at"),
        "per_pipeline_models": sorted(models.per_pipeline),
        "combine": models.combine.value,
        "runs_trained_on_here": (
            len(set(trained) & set(df["run_id"].astype(str))) if trained is not None else None
        ),
    }


#: a size with its unit: ``2GiB``, ``500MB``, ``1.5g``, ``4096B`` (a bare number is a percent)
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b?|b)\s*$", re.IGNORECASE)
_UNITS = {
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "kib": 2**10,
    "m": 1e6,
    "mb": 1e6,
    "mib": 2**20,
    "g": 1e9,
    "gb": 1e9,
    "gib": 2**30,
    "t": 1e12,
    "tb": 1e12,
    "tib": 2**40,
}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_budget(value: str, peak_bytes: int) -> int:
    """SSD budget in bytes from a percent of ``peak_bytes`` or a size with a unit.

    Parameters
    ----------
    value : str
        A percent in (0, 100], with or without a ``%`` sign (``5``, ``5%``, ``0.5``), as
        ``evaluate --budgets`` takes it; or a positive size with its unit (``2GiB``,
        ``500MB``, ``1000000B``). A budget of 0 is refused, as ``evaluate`` refuses it,
        and so is a percent so small that it is 0 bytes of ``peak_bytes``.
    peak_bytes : int
        Peak live bytes of the replayed logs, in bytes: what a percent is a share of.

    Returns
    -------
    int
        The budget, in bytes.

    Raises
    ------
    click.BadParameter
        If ``value`` is neither, or is not positive, or is a percent above 100, or is a
        percent of ``peak_bytes`` that is 0 bytes.
    """
    v = value.strip()
    hint = "give a percent such as 5 or 5%, or a size with its unit such as 2GiB or 1000000B"
    if _is_number(v.rstrip("%").strip()):
        try:
            share = budget_share(v, hint=hint)
        except PlacementConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--budget") from None
        size = int(share * peak_bytes)
        if size < 1:
            fix = "a larger percent, or " if peak_bytes > 0 else ""
            raise click.BadParameter(
                f"{value!r} of peak live bytes {peak_bytes:,} is 0 bytes; give {fix}"
                "a size with its unit such as 1000000B",
                param_hint="--budget",
            )
        return size
    m = _SIZE.match(v)
    if not m or m.group(2).lower() not in _UNITS:
        raise click.BadParameter(
            f"{value!r} is neither a percent (5 or 5%) nor a size with its unit (2GiB)",
            param_hint="--budget",
        )
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if size < 1:
        raise click.BadParameter(
            f"{value!r} is not a positive size (it is {size} bytes); {hint}",
            param_hint="--budget",
        )
    return size


def budget_text(value: str) -> str:
    """A ``--budget`` as the user meant it: ``"5%"`` for a percent (``5``, ``5%``, ``5 %``),
    else the size as given (``"2GiB"``); ``value`` as :func:`parse_budget` accepts it."""
    v = value.strip()
    number = v.rstrip("%").strip()
    return f"{float(number):g}%" if _is_number(number) else v


#: Version of ``simulate``'s JSON (``simulation_version``); raised when a key changes meaning
#: or goes away, not when one is added.
SIMULATION_VERSION = 1
#: Name (without suffix) of the files ``simulate --out`` writes.
SIMULATE_STEM = "placement-simulate"

POLICY_CHOICES = (
    "lightgbm",
    "stage-history",
    "small-files-first",
    "first-fit",
    "oracle",
    "all-hdd",
)


@click.command("simulate")
@click.argument("logs", nargs=-1, required=True)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(path_type=Path),
    help="Model directory from `train` (needed by the lightgbm policy).",
)
@click.option(
    "--budget",
    default="5%",
    show_default=True,
    help="SSD budget: percent of the logs' peak live bytes (5 or 5%, as evaluate's "
    "--budgets), or a size with its unit such as 2GiB, 500MB or 1000000B.",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Choice(POLICY_CHOICES + ("all",)),
    default=("all",),
    show_default=True,
    help="Policies to replay (repeatable).",
)
@_bound_option("at the budget")
@_overlap_option
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Also write {SIMULATE_STEM}.json and .txt (what is printed) to this directory.",
)
@price_option
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--no-progress", is_flag=True, help="Hide progress bars (shown only when stderr is a terminal)."
)
def simulate_command(
    logs: tuple[str, ...],
    model_dir: Path | None,
    budget: str,
    policies: tuple[str, ...],
    bound: bool,
    overlap: float | None,
    out_dir: Path | None,
    cost_model: CostModel,
    as_json: bool,
    no_progress: bool,
) -> None:
    """Replay LOGS through placement policies at an SSD budget and report TCO and savings.

    With --out, existing placement-simulate.json and .txt there are replaced (and said so).
    """
    import numpy as np

    from placement.bound import savings_upper_bound
    from placement.evaluate import (
        UPPER_BOUND,
        output_paths,
        stage_history_prediction,
        write_outputs,
    )
    from placement.features import HistoryStore, build_features, estimated_sizes
    from placement.model import ModelSet
    from placement.simulator import Trace, overlap_runs, peak_live_bytes, policy_roster, simulate

    names = list(POLICY_CHOICES) if "all" in policies else list(dict.fromkeys(policies))
    models = None
    notes: list[str] = []
    if "lightgbm" in names:
        if model_dir is None:
            if "lightgbm" in policies:
                raise click.UsageError(
                    "--policy lightgbm needs --model DIR (a model directory from "
                    "`dataplane placement train`); give --model or leave lightgbm out"
                )
            names.remove("lightgbm")
            notes.append("lightgbm skipped: give --model DIR")
        else:
            try:
                models = ModelSet.load(model_dir)
            except ModelError as exc:
                raise click.ClickException(str(exc)) from exc
    _check_paths(logs)
    if out_dir is not None:
        _check_writable(out_dir)
    df, report, _ = _read(logs, not no_progress)
    if overlap is not None:
        df = overlap_runs(df, overlap)
    history = HistoryStore.from_table(df)
    trace = Trace.from_clean(df, known_size=estimated_sizes(df, history))
    peak = peak_live_bytes(trace)
    cap = parse_budget(budget, peak)
    cost = cost_model
    features = build_features(df, history)
    # the policies exactly as evaluate builds them (options, break-even test), by name
    nothing = np.full(len(trace), np.nan)
    roster = policy_roster(
        trace,
        cost,
        stage_history=(stage_history_prediction(features) if "stage-history" in names else nothing),
        lightgbm=(
            models.predict(features, df["pipeline"].astype(str).to_numpy())
            if models is not None
            else nothing
        ),
    )
    makers = {name: (make, pred) for name, make, pred in roster}
    results: list[dict[str, Any]] = []
    for name in names:
        make, pred = makers[name]
        sim = simulate(trace, make(cap), cost, cap, predictions=pred, progress=not no_progress)
        sim.policy = name
        results.append(sim.to_dict())
    payload: dict[str, Any] = {
        "simulation_version": SIMULATION_VERSION,
        "generated_at": utc_timestamp(),
        "inputs": list(logs),
        "input": report,
        "peak_live_bytes": peak,
        "budget": budget_text(budget),
        "ssd_capacity_bytes": cap,
        "overlap": overlap_json(overlap),
        "cost_model": cost.to_dict(),
        "results": results,
    }
    if models is not None:
        payload["model"] = _model_facts(models, model_dir, df)
        seen = payload["model"]["runs_trained_on_here"]
        if seen:
            notes.append(
                f"lightgbm is in-sample: its model was trained on {seen} of the "
                f"{df['run_id'].nunique()} runs replayed here; `dataplane placement evaluate` "
                "gives held-out figures"
            )
    if notes:
        payload["notes"] = notes
    if bound:
        try:
            payload["upper_bound"] = savings_upper_bound(trace, cap, cost).to_dict()
        except PlacementError as exc:
            raise click.ClickException(str(exc)) from exc
    replayed = "" if overlap is None else f"; runs replayed {overlap:g} at a time"
    of_peak = " of" if payload["budget"].endswith("%") else ";"
    model_line = (
        [f"model: {model_dir} ({payload['model']['trained_rows']} training rows)"]
        if models is not None
        else []
    )
    lines = [
        f"logs: {', '.join(logs)}",
        *model_line,
        _input_text(report),
        f"SSD budget {cap:,} bytes ({payload['budget']}{of_peak} peak live bytes {peak:,}"
        f"{replayed})",
        prices_text(cost),
    ]
    rows = [
        [
            r["policy"],
            f"{100 * r['savings_fraction']:.2f}%",
            f"{100 * r['ssd_io_share']:.1f}%",
            str(r["ssd_files"]),
            f"{r['hdd_overload_s']:.2f}",
        ]
        for r in results
    ]
    if bound:
        saved = 100 * payload["upper_bound"]["savings_fraction"]
        rows.append([UPPER_BOUND, f"{saved:.2f}%", "", "", ""])
    lines.append(text_table(["policy", "savings", "SSD I/O", "SSD files", "HDD overload s"], rows))
    if bound:
        lines.append(f"{UPPER_BOUND}: no placement of these files saves more")
    lines.extend(notes)
    if out_dir is not None:
        stale = output_paths(out_dir, SIMULATE_STEM, png=False).values()
        replaced = [p for p in stale if p.exists()]
        try:
            paths = write_outputs(out_dir, SIMULATE_STEM, data=payload, text="\n".join(lines))
        except OSError as exc:
            raise click.ClickException(f"cannot write to {out_dir}: {exc}") from exc
        payload = {
            **payload,
            "files": {k: str(v) for k, v in paths.items()},
            "files_replaced": [str(p) for p in replaced],
        }
        lines.append(_wrote_text(paths, replaced))
    _emit(payload, as_json, "\n".join(lines))
