"""The ``dataplane placement`` command group.

This module defines the group and its ``collect`` and ``compact`` sub-commands. Other
placement modules add their own sub-commands without this module importing them up front:

* ``train``, ``evaluate`` and ``simulate`` are looked up lazily in
  ``placement.model_cli`` as ``train_command``, ``evaluate_command`` and
  ``simulate_command`` (each a :class:`click.Command`); a name that module does not
  define (or a missing module) is simply not offered;
* any module may also call ``placement_group.add_command(cmd)`` itself.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

#: Sub-commands imported only when used: command name -> (module, attribute).
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("placement.model_cli", "train_command"),
    "evaluate": ("placement.model_cli", "evaluate_command"),
    "simulate": ("placement.model_cli", "simulate_command"),
}


def _lazy(name: str) -> click.Command | None:
    module_name, attr = LAZY_COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise
    command = getattr(module, attr, None)
    return command if isinstance(command, click.Command) else None


class _PlacementGroup(click.Group):
    """A group whose model sub-commands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        names.update(n for n in LAZY_COMMANDS if _lazy(n) is not None)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LAZY_COMMANDS:
            command = _lazy(cmd_name)
        return command


@click.group(
    "placement", cls=_PlacementGroup, context_settings={"help_option_names": ["-h", "--help"]}
)
def placement_group() -> None:
    """Learned SSD/HDD placement of intermediate files: collect I/O logs, train, evaluate,
    simulate, compact logs."""
    from placement.openmp import prefer_passive_wait

    prefer_passive_wait()  # before LightGBM loads OpenMP (see placement.openmp)


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    return items or None


def _drop_all(record: logging.LogRecord) -> bool:
    """A logging filter that lets no record through."""
    return False


def _echo_notes(exc: BaseException) -> None:
    """Print the notes of ``exc`` (where a stopped collection kept its runs) to stderr."""
    for note in getattr(exc, "__notes__", []):
        click.echo(note, err=True)


@placement_group.command("collect")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path), required=False)
@click.option("--pipelines", help="Comma-separated workload names (default: all). See --list.")
@click.option(
    "--sizes",
    default="small,medium",
    show_default=True,
    help="Comma-separated sizes: small, medium, large.",
)
@click.option(
    "--seeds",
    default="0,1,2,3,4,5",
    show_default=True,
    help="Comma-separated non-negative int seeds.",
)
@click.option(
    "--workers",
    "n_workers",
    default=2,
    show_default=True,
    type=int,
    help="Worker processes (1 thread each).",
)
@click.option(
    "--memory-limit", default="1GiB", show_default=True, help="Memory limit of each worker."
)
@click.option(
    "--target-fraction",
    default=0.025,
    show_default=True,
    type=float,
    help="distributed.worker.memory.target: managed-memory fraction above which workers spill.",
)
@click.option(
    "--tier",
    type=click.Choice(["hdd", "ssd"]),
    default="hdd",
    show_default=True,
    help="Tier all files go to while collecting.",
)
@click.option(
    "--scratch-dir",
    type=click.Path(file_okay=False),
    help="Parent of the temporary tier directories.",
)
@click.option("--list", "list_only", is_flag=True, help="List the workloads and sizes, then exit.")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace the collection OUT_DIR holds already (refused without it).",
)
@click.option(
    "--no-progress",
    is_flag=True,
    help="Hide the progress bar (shown only when stderr is a terminal).",
)
def collect_command(
    out_dir: Path | None,
    pipelines: str | None,
    sizes: str,
    seeds: str,
    n_workers: int,
    memory_limit: str,
    target_fraction: float,
    tier: str,
    scratch_dir: str | None,
    list_only: bool,
    overwrite: bool,
    no_progress: bool,
) -> None:
    """Run the real Dask workload suite and write OUT_DIR/io_log.parquet and OUT_DIR/summary.json.

    Every spill, P2P shuffle, rechunk and cache-shard file the runs create is counted
    and logged (one row per file). Prints the summary as JSON.
    """
    from placement.collect import KEPT_PARTS_LOGGER, LOG_FILE, CollectOptions, collect
    from placement.errors import PlacementError
    from placement.tier import Tier
    from placement.workloads import SIZES, WORKLOADS, WorkloadError

    if list_only:
        for w in WORKLOADS.values():
            click.echo(f"{w.name:15s} {w.operator:10s} {w.description}")
        for s in SIZES.values():
            click.echo(
                f"size {s.name}: {s.partitions} partitions x {s.rows} rows; array {s.array_side}^2"
            )
        return
    if out_dir is None:
        raise click.UsageError("give OUT_DIR, the directory for io_log.parquet and summary.json")
    if (Path(out_dir) / LOG_FILE).exists() and not overwrite:  # minutes of runs, or a shared log
        raise click.UsageError(
            f"{out_dir} holds a collection already ({LOG_FILE}); give another OUT_DIR, or "
            "--overwrite to replace it"
        )
    try:
        seed_list = [int(s) for s in _csv(seeds) or []]
    except ValueError:
        raise click.BadParameter(
            f"{seeds!r} is not a comma-separated list of ints", param_hint="--seeds"
        ) from None
    try:
        options = CollectOptions(
            pipelines=tuple(_csv(pipelines) or WORKLOADS),
            sizes=tuple(_csv(sizes) or ()),
            seeds=tuple(seed_list),
            n_workers=n_workers,
            memory_limit=memory_limit,
            target_fraction=target_fraction,
            tier=Tier(tier),
            scratch_dir=scratch_dir,
        )
    except WorkloadError as exc:
        raise click.UsageError(str(exc)) from exc
    # P2P logs a warning for every shuffle it starts; the suite starts hundreds
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    # the note saying where a stopped collection's finished runs are is printed here, once:
    # collect also logs it, for callers that do not print it
    kept_parts = logging.getLogger(KEPT_PARTS_LOGGER)
    kept_parts.addFilter(_drop_all)
    try:
        summary = collect(out_dir, options, progress=not no_progress)
    except KeyboardInterrupt as exc:
        # click's "Aborted!" would drop the note saying where the finished runs' logs are
        _echo_notes(exc)
        raise click.Abort() from None
    except SystemExit as exc:  # SIGTERM stops a collection so
        _echo_notes(exc)
        raise
    except PlacementError as exc:
        raise click.ClickException("\n".join([str(exc), *getattr(exc, "__notes__", [])])) from None
    except Exception as exc:  # a bug: its traceback, which shows the note (from Python 3.11)
        if sys.version_info < (3, 11):
            _echo_notes(exc)
        raise
    finally:
        kept_parts.removeFilter(_drop_all)
    brief = {
        "out_dir": str(out_dir),
        "rows": summary["total"]["rows"],
        "runs": len(summary["runs"]),
        "failed_runs": len(summary["failed_runs"]),
        "dropped_rows": sum(summary["dropped_rows"].values()),  # of runs not whole
        "wall_s": summary["wall_s"],
        "pipelines": {p: b["rows"] for p, b in summary["pipelines"].items()},
        "io_density": summary["total"]["io_density"],
    }
    click.echo(json.dumps(brief, indent=2))


@placement_group.command("compact")
@click.argument("log_dir", type=click.Path(path_type=Path))
@click.option(
    "--target-rows",
    default=1_000_000,
    show_default=True,
    type=int,
    help="Most rows of a merged file.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--no-progress",
    is_flag=True,
    help="Hide the progress bar (shown only when stderr is a terminal).",
)
def compact_command(
    log_dir: Path, target_rows: int, dry_run: bool, as_json: bool, no_progress: bool
) -> None:
    """Merge the small log files of LOG_DIR into files of about --target-rows rows.

    Safe while workers write to LOG_DIR and readers read it: only complete files are
    merged, and readers skip the files a merged file holds until they are deleted. Files
    of another schema version, or unreadable, are left alone and listed. Exits 1 when
    LOG_DIR cannot be compacted (missing, not writable, disk full): nothing is lost then.
    """
    from placement.compact import CompactError, compact
    from placement.errors import PlacementConfigError
    from placement.jsonout import dumps, utc_timestamp

    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if no_progress or total < 2:
            return
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, desc="compact", unit="file", file=sys.stderr, disable=None)
        bar.update(done - bar.n)

    try:
        result = compact(log_dir, target_rows=target_rows, dry_run=dry_run, progress=progress)
    except PlacementConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--target-rows") from None
    except CompactError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        click.echo(dumps({**result.to_json_dict(), "created": utc_timestamp()}, indent=2))
    else:
        click.echo(result.text())
