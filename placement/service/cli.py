"""``dataplane serve``: the placement service on an embedded ``LocalCluster``.

Without ``--demo`` it starts the cluster, prints the scheduler address and the
directories, and serves until interrupted (Ctrl-C); connect with
``Client("tcp://...")``. With ``--demo`` it runs a small spill- and shuffle-heavy
pipeline under the service, checks its answer against pandas, prints where the
pipeline's temporary files went (tier, kind, files, bytes, I/O) and exits.

Directories not given (nor set in Dask config) go below a fresh temporary directory,
removed when the command ends (Ctrl-C and SIGTERM included), all of it with ``--demo``;
without ``--demo`` the I/O logs in it (when ``--log-dir`` is not given) are kept, so they can
train the next model.

SIGTERM (``kill``, a batch scheduler, a container runtime) stops the command as Ctrl-C does
(:func:`placement.signals.sigterm_raises`): the cluster is closed, the temporary directory
removed, and the exit status is 0, as after Ctrl-C: a stop is how a service ends (``dask
scheduler`` and ``dask worker`` also exit with 0 on SIGINT and SIGTERM). The worker
processes ignore Ctrl-C (:mod:`placement.local_cluster`): this process closes them.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from placement.signals import sigterm_raises
from placement.text import text_table

if TYPE_CHECKING:
    from placement.model import ModelSet


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def split_table(split: Any) -> str:
    """A plain-text table of :func:`~placement.service.demo.tier_split`."""
    headers = [
        "tier",
        "kind",
        "files",
        "bytes",
        "written",
        "read",
        "write ops",
        "read ops",
        "I/O share",
    ]
    rows: list[list[str]] = []
    for (tier, kind), r in split.iterrows():
        rows.append(
            [
                str(tier),
                str(kind),
                str(int(r["files"])),
                _fmt_bytes(r["size_bytes"]),
                _fmt_bytes(r["write_bytes"]),
                _fmt_bytes(r["read_bytes"]),
                str(int(r["write_ops"])),
                str(int(r["read_ops"])),
                f"{100 * r['io_share']:.1f}%",
            ]
        )
    return text_table(headers, rows, left=2)


@click.command("serve", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--workers",
    "n_workers",
    default=2,
    show_default=True,
    type=click.IntRange(1),
    help="Worker processes.",
)
@click.option("--threads-per-worker", default=1, show_default=True, type=click.IntRange(1))
@click.option(
    "--memory-limit",
    default="1GiB",
    show_default=True,
    help="Memory limit of each worker, as dask worker reads it: a size, a fraction of this "
    "machine's memory ('0.25'), 'auto' or 0 (no limit).",
)
@click.option(
    "--ssd-dir", type=click.Path(file_okay=False), help="SSD tier directory [placement.ssd-dir]."
)
@click.option(
    "--hdd-dir", type=click.Path(file_okay=False), help="HDD tier directory [placement.hdd-dir]."
)
@click.option(
    "--log-dir", type=click.Path(file_okay=False), help="I/O log directory [placement.log-dir]."
)
@click.option(
    "--ssd-capacity",
    help=(
        "Cluster-wide SSD budget, e.g. 20GiB "
        "[placement.ssd-capacity; default 1GiB, 24MiB with --demo]."
    ),
)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(file_okay=False),
    help="Model directory from `dataplane placement train` [placement.model].",
)
@click.option(
    "--scheduler-port",
    default=0,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="0: any free port.",
)
@click.option(
    "--dashboard-address",
    default=None,
    help="Dashboard address such as :8787 (default: no dashboard, no HTTP server).",
)
@click.option(
    "--demo",
    is_flag=True,
    help="Run a small pipeline under the service, print where its files went, exit.",
)
@click.option("--demo-partitions", default=12, show_default=True, type=click.IntRange(1))
@click.option(
    "--demo-rows",
    default=100_000,
    show_default=True,
    type=click.IntRange(1),
    help="Rows per partition.",
)
@click.option("--json", "as_json", is_flag=True, help="With --demo: print the result as JSON.")
def serve_command(
    n_workers: int,
    threads_per_worker: int,
    memory_limit: str,
    ssd_dir: str | None,
    hdd_dir: str | None,
    log_dir: str | None,
    ssd_capacity: str | None,
    model_dir: str | None,
    scheduler_port: int,
    dashboard_address: str | None,
    demo: bool,
    demo_partitions: int,
    demo_rows: int,
    as_json: bool,
) -> None:
    """Run the placement service on an embedded LocalCluster (or, with --demo, show it at work).

    Ctrl-C or SIGTERM stops it: the cluster is closed, the temporary directory is removed
    (without --demo, the I/O logs in it are kept) and the exit status is 0.
    """
    import dask

    scratch: Path | None = None
    logs: str | None = None  # None: stopped before the log directory was picked

    def pick(given: str | None, key: str, name: str) -> str:
        nonlocal scratch
        value = given or dask.config.get(key, default=None)
        if value:
            return str(value)
        if scratch is None:
            scratch = Path(tempfile.mkdtemp(prefix="dataplane-serve-"))
        return str(scratch / name)

    # SIGTERM takes Ctrl-C's way out: the cluster closed, the scratch directory removed
    with sigterm_raises(KeyboardInterrupt):
        try:
            ssd = pick(ssd_dir, "placement.ssd-dir", "ssd")
            hdd = pick(hdd_dir, "placement.hdd-dir", "hdd")
            logs = pick(log_dir, "placement.log-dir", "logs")
            _serve(
                ssd,
                hdd,
                logs,
                ssd_capacity=ssd_capacity,
                model_dir=model_dir,
                n_workers=n_workers,
                threads_per_worker=threads_per_worker,
                memory_limit=memory_limit,
                scheduler_port=scheduler_port,
                dashboard_address=dashboard_address,
                local_directory=str(scratch / "dask") if scratch is not None else None,
                demo=(demo_partitions, demo_rows) if demo else None,
                as_json=as_json,
            )
        finally:
            if scratch is not None:
                remove_scratch(scratch, keep=None if demo or logs is None else Path(logs))


def remove_scratch(scratch: Path, keep: Path | None = None) -> None:
    """Remove the temporary directory ``serve`` made for what was not given (tier, log and
    Dask directories), keeping ``keep`` (the I/O logs) if it lies inside it.

    Parameters
    ----------
    scratch : Path
        The temporary directory (``dataplane-serve-*``).
    keep : Path, optional
        A directory to keep; ``scratch`` then keeps it alone (if it is inside ``scratch``).
    """
    if keep is not None and keep.resolve().is_relative_to(scratch.resolve()) and keep.exists():
        for child in scratch.iterdir():
            if not keep.resolve().is_relative_to(child.resolve()):
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        return
    shutil.rmtree(scratch, ignore_errors=True)


def _serve(
    ssd: str,
    hdd: str,
    logs: str,
    *,
    ssd_capacity: str | None,
    model_dir: str | None,
    n_workers: int,
    threads_per_worker: int,
    memory_limit: str,
    scheduler_port: int,
    dashboard_address: str | None,
    local_directory: str | None,
    demo: tuple[int, int] | None,
    as_json: bool,
) -> None:
    """Start the cluster with the service and serve until Ctrl-C (or run the demo)."""
    import dask
    from distributed import Client

    from placement.errors import PlacementError
    from placement.service.local import ServeOptions, service_cluster, tight_memory

    capacity = (
        ssd_capacity
        or dask.config.get("placement.ssd-capacity", default=None)
        or ("24MiB" if demo else "1GiB")
    )
    model = model_dir or dask.config.get("placement.model", default=None)
    try:
        options = ServeOptions(
            ssd_dir=ssd,
            hdd_dir=hdd,
            log_dir=logs,
            ssd_capacity=capacity,
            model=str(model) if model else None,
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            memory_limit="768MiB" if demo and memory_limit == "1GiB" else memory_limit,
            scheduler_port=scheduler_port,
            dashboard_address=dashboard_address,
            local_directory=local_directory,
            config=tight_memory() if demo else {},
        )
    except PlacementError as exc:
        raise click.UsageError(str(exc)) from exc
    # loaded once: here, to refuse a bad model before any process starts, then served as is
    models = None
    if options.model is not None:
        models = _load_model(options.model, from_option=model_dir is not None)
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    try:
        with service_cluster(options, models=models) as cluster, Client(cluster) as client:
            if demo:
                _demo(client, options, *demo, as_json)
            else:
                click.echo(f"placement service on {cluster.scheduler_address}")
                click.echo(f"  SSD {ssd} (budget {capacity}), HDD {hdd}, logs {logs}")
                if cluster.dashboard_link:
                    click.echo(f"  dashboard {cluster.dashboard_link}")
                click.echo("  connect with distributed.Client(address); Ctrl-C stops it")
                while True:
                    time.sleep(3600)
    except KeyboardInterrupt:
        click.echo(
            f"stopped; the I/O logs stay in {logs} (retrain with `dataplane placement train`)"
        )
    except PlacementError as exc:
        raise click.ClickException(str(exc)) from exc


def _load_model(path: str, *, from_option: bool) -> ModelSet:
    """Load the model before any process starts, refusing one that cannot be loaded.

    The scheduler would refuse it too, but only after the cluster has started, with its own
    log line beside the error: this gives one message naming where the path came from
    (``--model`` or the ``placement.model`` config key) and exits with click's status (2 for
    an option, 1 for the config). The scheduler (in this process) serves the models loaded
    here (:func:`~placement.service.local.service_cluster`) rather than reading them again.
    """
    from placement.errors import ModelError
    from placement.model import ModelSet
    from placement.service.config import MODEL_KEY
    from placement.storage.config import env_name

    try:
        return ModelSet.load(path)
    except ModelError as exc:
        if from_option:
            raise click.BadParameter(str(exc), param_hint="'--model'") from exc
        raise click.ClickException(
            f"{MODEL_KEY}={path!r} (Dask config, or {env_name(MODEL_KEY)}) cannot be loaded: "
            f"{exc}; or unset it to serve without a model"
        ) from exc


def _demo(client: Any, options: Any, partitions: int, rows: int, as_json: bool) -> None:
    from placement.logwriter import read_logs
    from placement.service.client import service_state
    from placement.service.demo import PipelineSpec, run_pipeline, settle, tier_split
    from placement.service.worker_plugin import worker_service_state

    spec = PipelineSpec(partitions=partitions, rows=rows, n_keys=max(100, partitions * rows // 20))
    result = run_pipeline(client, spec, pipeline="serve-demo")
    settle(client)
    table = read_logs(options.log_dir).table.to_pandas()
    table = table[table["run_id"] == result.run_id]
    split = tier_split(table)
    links = client.run(worker_service_state)
    ledger = service_state(client)["ledger"]
    latency = [s["chooser"]["latency_us"] for s in links.values()]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "run_id": result.run_id,
                    "wall_s": result.wall_s,
                    "matches_pandas": result.verified,
                    "ssd_dir": options.ssd_dir,
                    "hdd_dir": options.hdd_dir,
                    "ssd_capacity": options.ssd_capacity,
                    "split": split.reset_index().to_dict(orient="records"),
                    "decision_latency_us": latency,
                    "ledger": ledger,
                },
                indent=2,
                default=str,
            )
        )
        return
    click.echo(
        f"pipeline {result.run_id}: {result.rows} rows shuffled and spilled "
        f"in {result.wall_s:.1f} s, "
        f"answer matches pandas: {result.verified}"
    )
    click.echo(f"SSD tier: {options.ssd_dir}  (budget {options.ssd_capacity})")
    click.echo(f"HDD tier: {options.hdd_dir}")
    click.echo(split_table(split))
    p50 = max((lat.get("p50", 0.0) for lat in latency), default=0.0)
    p99 = max((lat.get("p99", 0.0) for lat in latency), default=0.0)
    click.echo(
        f"decisions on the workers: p50 {p50:.1f} us, p99 {p99:.1f} us (worst worker); "
        f"SSD ledger now {ledger['used_bytes']} of {ledger['capacity_bytes']} bytes"
    )
