"""``dataplane report``: one command from logs to a report a platform team can forward."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from placement.cost import DEFAULT_BUDGETS, CostModel, budgets_from_percents, budgets_to_percents
from placement.cost_option import price_option
from placement.jsonout import dumps
from placement.openmp import prefer_passive_wait

__all__ = ["parse_budgets", "parse_scheduler", "report_command"]

logger = logging.getLogger(__name__)


def parse_budgets(text: str) -> tuple[float, ...]:
    """``"1,2,5"`` (percent of peak live bytes) -> ``(0.01, 0.02, 0.05)``
    (:func:`placement.cost.budgets_from_percents`).

    Raises
    ------
    click.BadParameter
        If an item is not a number in (0, 100]; the message names ``--budgets``.
    """
    try:
        return budgets_from_percents(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--budgets'") from None


def parse_scheduler(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--scheduler``, checked before any input is read
    (:func:`logs_analysis.aggregate.check_scheduler`).

    Raises
    ------
    click.BadParameter
        If it is not threads, processes, sync or a scheduler address (exit status 2).
    """
    from logs_analysis.aggregate import SCHEDULER_CHOICES, check_scheduler

    try:
        return check_scheduler(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not one of {SCHEDULER_CHOICES} (the address of a running Dask "
            "scheduler, e.g. tcp://127.0.0.1:8786)",
            ctx=ctx,
            param=param,
        ) from None


def _summary_json(
    data: dict[str, Any], html_path: Path, json_path: Path, csv_path: Path | None
) -> dict[str, Any]:
    """What ``dataplane report --json`` prints: the files written and the report's summary.

    The report's JSON grows with the groups in the logs (up to 200 per grouping, with their
    quantiles, and the savings per policy and budget), so stdout gets the figures the text
    line gives, under the keys the report's JSON gives them, and the path of that JSON for
    the rest: ``jq .rows.selected`` reads the same number from either.

    Parameters
    ----------
    data : dict
        The report's JSON (:attr:`logs_analysis.report.Report.data`), after it was written.
    html_path, json_path : Path
        The HTML and JSON written, as given (``--out``).
    csv_path : Path or None
        The per-group CSV written (``--csv``), or None.

    Returns
    -------
    dict
        ``html``, ``json``, ``csv`` (paths, ``csv`` null without ``--csv``);
        ``report_version``, ``title``, ``generated_at``, ``rows``, ``filters`` and
        ``timings_s`` (seconds) as in the report's JSON; ``issues`` as there without its
        ``examples``. For example::

            {"html": "report.html", "json": "report.json", "csv": null,
             "report_version": 3, "title": "Intermediate-data I/O report: logs",
             "generated_at": "2026-11-24T10:03:23+00:00",
             "rows": {"read": 538, "usable": 538, "removed_by_filters": 324,
                      "selected": 214, "skipped_lines_records_files": 0, "chunks": 6},
             "filters": {"applied": true, "pipelines": ["dxt"], "since": null,
                         "until": null, "removed": {"pipeline": 324},
                         "unknown_pipelines": []},
             "issues": {"total": 0, "malformed": 0, "skipped_inputs": 0, "counts": {}},
             "timings_s": {"discover": 0.002, ..., "total": 4.9}}
    """
    issues = data["issues"]
    return {
        "html": str(html_path),
        "json": str(json_path),
        "csv": None if csv_path is None else str(csv_path),
        "report_version": data["report_version"],
        "title": data["title"],
        "generated_at": data["generated_at"],
        "rows": data["rows"],
        "filters": data["filters"],
        "issues": {k: v for k, v in issues.items() if k != "examples"},
        "timings_s": data["timings_s"],
    }


@click.command("report", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("logs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="HTML report to write; the JSON goes beside it with the same name (.json). It must "
    "not be an input, nor lie inside an input directory, and its folder must be writable "
    "(all checked before the analysis starts).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "native", "spark", "darshan"]),
    default="auto",
    show_default=True,
    help="Input format; auto detects each file by its content.",
)
@click.option(
    "--scheduler",
    default="threads",
    show_default=True,
    callback=parse_scheduler,
    metavar="threads|processes|sync|tcp://host:port",
    help="Dask scheduler: threads, processes, sync, or the address of a running cluster "
    "(tcp://host:8786).",
)
@click.option(
    "--budgets",
    default=budgets_to_percents(DEFAULT_BUDGETS),
    show_default=True,
    help="SSD budgets for the savings curve, percent of peak live bytes.",
)
@click.option(
    "--sample-rows",
    type=click.IntRange(min=100),
    default=50_000,
    show_default=True,
    help="Rows sampled (whole runs) for predictability.",
)
@click.option(
    "--savings-rows",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    metavar="N",
    help="Rows replayed by the simulator: at most N, as whole runs while they fit; with fewer "
    "than 5 runs, or when whole runs fill less than half of N (N smaller than the runs), N "
    "rows are drawn at random, cutting runs.",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=25,
    show_default=True,
    help="Groups shown per table and figure.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of samples and models.")
@click.option("--title", default=None, help="Report title.")
@price_option
@click.option(
    "--pipeline",
    "pipelines",
    multiple=True,
    metavar="NAME",
    help="Analyse only the files of pipeline NAME (repeatable: any of them). Spark event "
    "logs name pipelines by the application's name, Darshan logs by the executable's. A "
    "NAME no file has is a warning naming the pipelines there are (an error if no NAME "
    "matches).",
)
@click.option(
    "--since",
    metavar="TIME",
    default=None,
    help="Analyse only the files created at or after TIME: an ISO 8601 date or datetime "
    "(2026-11-24, 2026-11-24T04:20:00, 2026-11-24T05:20:00+01:00), UTC unless it gives an "
    "offset.",
)
@click.option(
    "--until",
    metavar="TIME",
    default=None,
    help="Analyse only the files created before TIME (as for --since; must be later).",
)
@click.option(
    "--csv",
    "write_csv",
    is_flag=True,
    default=False,
    help="Also write the per-group tables (density, lifetime and size by pipeline, stage, "
    "operator and file kind, with their quantiles) as one CSV beside the HTML "
    "(report.groups.csv for report.html).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    default=False,
    help="Print the summary as JSON instead of the text line: the paths written (csv null "
    "without --csv) and the rows, filters, issue counts and timings of the report's JSON, "
    "under the same keys.",
)
@click.option(
    "--progress/--no-progress",
    default=True,
    show_default=True,
    help="Progress bar over the stages (shown only when stderr is a terminal).",
)
def report_command(
    logs: tuple[Path, ...],
    out: Path,
    fmt: str,
    scheduler: str,
    budgets: str,
    sample_rows: int,
    savings_rows: int,
    top: int,
    seed: int,
    title: str | None,
    cost_model: CostModel,
    pipelines: tuple[str, ...],
    since: str | None,
    until: str | None,
    write_csv: bool,
    as_json: bool,
    progress: bool,
) -> None:
    """Analyse intermediate-data I/O logs and write a self-contained HTML report.

    LOGS are files or directories: placement logs (the Parquet files the placement service
    writes, or JSON lines with the same columns), Spark event logs (plain, compressed or
    rolling eventlog_v2_* directories) and Darshan logs, in any mix. Malformed lines and
    records, rows read twice (the same run_id and file_id) and files that are not logs are
    counted and shown in the report, never fatal. --pipeline, --since and --until select
    the files every analysis covers; the report says how many rows they removed. --json
    prints the summary as one JSON document (warnings go to stderr).
    """
    prefer_passive_wait()  # before LightGBM loads OpenMP (see placement.openmp)
    from logs_analysis.errors import AnalysisError
    from logs_analysis.report import ReportConfig, build_report, csv_path_for
    from placement.errors import PlacementError

    try:
        config = ReportConfig(
            format=fmt,
            scheduler=scheduler,
            budgets=parse_budgets(budgets),
            sample_rows=sample_rows,
            savings_rows=savings_rows,
            top=top,
            seed=seed,
            title=title,
            progress=progress,
            cost_model=cost_model,
            pipelines=pipelines,
            since=since,
            until=until,
            csv=write_csv,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    try:
        report = build_report(list(logs), config, out=out)
        html_path, json_path = report.write(out, csv=config.csv)
    except (AnalysisError, PlacementError) as exc:
        raise click.ClickException(str(exc)) from exc
    data = report.data
    csv_path = csv_path_for(html_path) if config.csv else None
    if as_json:
        click.echo(dumps(_summary_json(data, html_path, json_path, csv_path), indent=2))
        return
    issues = data["issues"]
    not_read = (
        f", {issues['skipped_inputs']:,} input(s) not read (not logs, unreadable, unsupported "
        "or given twice)"
        if issues["skipped_inputs"]
        else ""
    )
    written = f"{html_path} and {json_path}"
    if csv_path is not None:
        written = f"{html_path}, {json_path} and {csv_path}"
    filtered = (
        f" (the filters removed {data['rows']['removed_by_filters']:,} of "
        f"{data['rows']['usable']:,})"
        if data["filters"]["applied"]
        else ""
    )
    click.echo(
        f"wrote {written}: {data['rows']['selected']:,} files{filtered}, "
        f"{issues['malformed']:,} malformed or duplicate line(s)/record(s)/row(s) skipped"
        f"{not_read}, {data['timings_s']['total']:.1f} s"
    )
