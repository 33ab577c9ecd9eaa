"""The ``dataplane train``, ``dataplane compare`` and ``dataplane doctor`` commands.

Found by the ``dataplane`` command through the ``dataplane.commands`` entry
points. ``train`` works under ``torchrun``: when ``RANK`` and ``WORLD_SIZE``
are set it initialises the default process group (``nccl`` on GPUs, ``gloo``
otherwise) and only rank 0 writes files.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from dataplane.ingest import source_dir_option
from dataplane.loader_cli import on_corrupt_option
from trainers.errors import TrainerError

__all__ = ["compare_command", "doctor_command", "train_command"]


class FiniteFloatRange(click.FloatRange):
    """A :class:`click.FloatRange` that also refuses ``nan`` and ``inf``.

    (Comparisons with NaN are false, so a plain range lets ``nan`` through.)
    """

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if isinstance(rv, float) and not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number; give one such as 0.5", param, ctx)
        return rv


_Command = TypeVar("_Command", bound=Callable[..., Any])


def _fmnist_ingest_options(command: _Command) -> _Command:
    """``--data-root``, ``--jpeg``, ``--size``, ``--limit`` and ``--source-dir`` (that of
    ``dataplane ingest``), shared by ``train`` and ``doctor`` so that doctor measures the
    ingest train reads."""
    options = (
        click.option(
            "--data-root",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("data"),
            show_default=True,
            help="Where --data fmnist is ingested.",
        ),
        click.option("--jpeg", is_flag=True, help="--data fmnist: re-encode as JPEG at ingest."),
        click.option(
            "--size",
            type=click.IntRange(min=8),
            default=None,
            help="Side of the loaders' output in pixels; --data fmnist: also the side of the "
            "ingested images.",
        ),
        click.option(
            "--limit",
            type=click.IntRange(min=1),
            default=None,
            help="--data fmnist: ingest only the first N images of each split.",
        ),
        source_dir_option(" Read by --data fmnist."),
    )
    for option in reversed(options):  # listed in --help in this order
        command = option(command)
    return command


def _dataplane_error(exc: Exception) -> click.ClickException:
    """A :class:`dataplane.DataplaneError` as a CLI error: its Python-API hint
    ``on_corrupt='skip'`` becomes ``--on-corrupt skip``."""
    from dataplane.errors import cli_message

    return click.ClickException(cli_message(exc))


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _image_shape(loader: Any) -> tuple[int, int]:
    """(channels, size) of the loader's output."""
    recipe = getattr(loader, "recipe", None)
    if recipe is not None:
        return int(recipe.channels), int(recipe.size)
    transform = getattr(loader, "transform", None)
    if transform is not None:
        return int(transform.channels), int(transform.size)
    raise click.ClickException(f"cannot tell the image shape of {type(loader).__name__}")


def _num_classes(loader: Any) -> int:
    source = getattr(loader, "source", None)
    if source is not None and getattr(source, "num_classes", None):
        return int(source.num_classes)
    dataset = getattr(loader, "dataset", None)
    if dataset is not None and getattr(dataset, "classes", None):
        return len(dataset.classes)
    raise click.ClickException(f"cannot tell the number of classes of {type(loader).__name__}")


def _num_samples(loader: Any) -> int:
    source = getattr(loader, "source", None)
    if source is not None:
        return len(source)
    dataset = getattr(loader, "dataset", None)
    if dataset is not None:
        return len(dataset)
    return len(loader) * int(getattr(loader, "batch_size", 1))


def _init_distributed(device: str | None) -> bool:
    """Initialise the default process group when launched by torchrun; return whether it did."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return False
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    use_cuda = torch.cuda.is_available() and device != "cpu"
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return True


@click.command("train")
@click.option(
    "--data",
    required=True,
    help="'fmnist' or a folder with train/ and val/ and/or test/ image folders (validation "
    "uses val/ when there is one, else test/).",
)
@click.option(
    "--model",
    "model_name",
    default="small-cnn",
    show_default=True,
    type=click.Choice(["small-cnn", "patchify-cnn", "resnet18"]),
)
@click.option(
    "--schedule",
    default="perfect",
    show_default=True,
    type=click.Choice(["fresh", "perfect", "torch"]),
)
@click.option(
    "--target-accuracy",
    type=FiniteFloatRange(0, 1, min_open=True),
    default=None,
    help="Validation accuracy whose first crossing is timed (fraction, 0.9 = 90%).",
)
@click.option("--epochs", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option(
    "--lr",
    type=FiniteFloatRange(min=0, min_open=True),
    default=0.05,
    show_default=True,
    help="Peak learning rate of SGD (Nesterov momentum 0.9), cosine-annealed per epoch.",
)
@click.option("--weight-decay", type=FiniteFloatRange(min=0), default=5e-4, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default=None,
    help="Where to train and decode [default: cuda when available].",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="perfect: the augmented-sample cache [default: RUN_DIR/cache].",
)
@click.option(
    "--variants",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="perfect: augmented variants cached per sample (epoch e serves e mod K).",
)
@click.option(
    "--max-cache-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="perfect: size bound of the cache in bytes.",
)
@click.option(
    "--patience",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="perfect: phase-1 epochs without a --min-delta gain that end phase 1.",
)
@click.option("--min-delta", type=FiniteFloatRange(0, 1), default=0.002, show_default=True)
@click.option(
    "--phase1-fraction",
    type=FiniteFloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="perfect: share of the epochs spent in phase 1 at most, rounded down, but at least one "
    "epoch when above 0 (1 epoch at 0.5 is all phase 1; 0: no phase 1).",
)
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where run.json goes [default: runs/SCHEDULE].",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where last.pt goes [default: RUN_DIR/checkpoints].",
)
@click.option("--resume", is_flag=True, help="Continue from the checkpoint if there is one.")
@click.option("--stop-at-target", is_flag=True, help="Stop once --target-accuracy is reached.")
@_fmnist_ingest_options
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="torch: DataLoader worker processes [default: cores].",
)
@on_corrupt_option(
    " The torch loader always stops. Applies to the training and validation loaders."
)
@click.option("--progress/--no-progress", default=True, help="A progress bar per epoch.")
def train_command(
    data: str,
    model_name: str,
    schedule: str,
    target_accuracy: float | None,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    seed: int,
    device: str | None,
    cache_dir: Path | None,
    variants: int,
    max_cache_bytes: int | None,
    patience: int,
    min_delta: float,
    phase1_fraction: float,
    run_dir: Path | None,
    checkpoint_dir: Path | None,
    resume: bool,
    stop_at_target: bool,
    data_root: Path,
    jpeg: bool,
    size: int | None,
    limit: int | None,
    source_dir: Path,
    workers: int | None,
    on_corrupt: str,
    progress: bool,
) -> None:
    """Train a model with a schedule (fresh | perfect | torch) and write RUN_DIR/run.json."""
    import torch

    from trainers.data import build_loaders, resolve_dataset
    from trainers.fit import cosine_per_epoch, fit, resolve_device, sgd_optimizer
    from trainers.models import build_model
    from trainers.schedule import SwitchRule

    if schedule == "torch" and on_corrupt == "skip":
        raise click.BadParameter(
            "skip needs the dataplane loaders of --schedule fresh or perfect; the torch "
            "baseline stops at a corrupt image (leave --on-corrupt out, or use --schedule fresh)",
            param_hint="'--on-corrupt'",
        )
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started_group = _init_distributed(device)
    try:
        run_dir = run_dir or Path("runs") / schedule
        try:
            resolve_device(device)  # before any ingest or loader work
            splits = resolve_dataset(
                data,
                data_root=data_root,
                jpeg=jpeg,
                size=size,
                limit=limit,
                source_dir=source_dir,
                progress=progress,
            )
            loaders = build_loaders(
                schedule,
                splits,
                batch_size=batch_size,
                seed=seed,
                size=size,
                device=device,
                num_workers=workers,
                cache_dir=cache_dir or run_dir / "cache",
                variants=variants,
                max_bytes=max_cache_bytes,
                on_corrupt=on_corrupt,
            )
            channels, side = _image_shape(loaders.train)
            torch.manual_seed(seed)
            model = build_model(model_name, _num_classes(loaders.train), channels, image_size=side)
            result = fit(
                model,
                loaders.train,
                loaders.val,
                schedule=schedule,
                fresh_loader=loaders.fresh,
                target_accuracy=target_accuracy,
                epochs=epochs,
                optimizer=sgd_optimizer(model, lr=lr, weight_decay=weight_decay),
                lr_scheduler=cosine_per_epoch(epochs),
                switch_rule=SwitchRule(
                    patience=patience, min_delta=min_delta, budget_fraction=phase1_fraction
                ),
                device=device,
                checkpoint_dir=checkpoint_dir or run_dir / "checkpoints",
                resume=resume,
                run_dir=run_dir,
                run_name=schedule,
                stop_at_target=stop_at_target,
                progress=progress,
                extra={
                    "lr": lr,
                    "weight_decay": weight_decay,
                    "workers": workers,
                    "on_corrupt": on_corrupt,
                },
                settings={
                    "data": str(data),
                    "jpeg": jpeg,
                    "size": size,
                    "limit": limit,
                    "val_split": splits.val_split,
                    "model_name": model_name,
                    "batch_size": batch_size,
                    "seed": seed,
                    "variants": variants if schedule == "perfect" else None,
                    "max_cache_bytes": max_cache_bytes if schedule == "perfect" else None,
                },
            )
        except TrainerError as exc:
            raise click.ClickException(str(exc)) from exc
        except Exception as exc:
            from dataplane import DataplaneError

            if isinstance(exc, DataplaneError):
                raise _dataplane_error(exc) from exc
            raise
        rec = result.record
        ttt = "not reached" if rec.time_to_target_s is None else f"{rec.time_to_target_s:.1f} s"
        click.echo(
            f"{rec.schedule}: final accuracy {_fmt(rec.final_accuracy, '.4f')}, "
            f"wall time {rec.elapsed_s:.1f} s, "
            f"time to target {ttt}, input share {_fmt(rec.input_share, '.1%')}"
            + (
                f", switched to fresh at epoch {rec.switch_epoch} ({rec.switch_reason})"
                if rec.switch_epoch is not None
                else ""
            )
        )
        click.echo(f"run record: {run_dir / 'run.json'}")
    finally:
        if started_group:
            import torch.distributed as dist

            dist.destroy_process_group()


@click.command("compare")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("compare.png"),
    show_default=True,
    help="The plot; its suffix picks the format (.png, .svg, .pdf, ...: any matplotlib writes).",
)
@click.option(
    "--html",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The HTML page, with the plot as a PNG [default: OUT with .html].",
)
@click.option("--title", default=None, help="Title of the plot and page.")
@click.option(
    "--target-accuracy",
    type=FiniteFloatRange(0, 1, min_open=True),
    default=None,
    help="Compare at this target instead of each run's own (recomputed from the epochs); "
    "speed-ups need one common target.",
)
def compare_command(
    run_dirs: tuple[Path, ...],
    out: Path,
    html: Path | None,
    title: str | None,
    target_accuracy: float | None,
) -> None:
    """Plot validation accuracy against wall time for RUN_DIRS, one line per run.

    Speed-ups are printed only when the runs share one target accuracy (or
    --target-accuracy is given); warnings name the settings that differ
    between the runs and the runs that did not finish.
    """
    from trainers.report import check_outputs, compare

    try:  # before reading any run: a bad --out or --html is a usage error
        check_outputs(run_dirs, out, html)
    except TrainerError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        result = compare(
            list(run_dirs), out, html=html, title=title, target_accuracy=target_accuracy
        )
    except TrainerError as exc:
        raise click.ClickException(str(exc)) from exc
    summary = result.summary
    for warning in summary["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    for row in summary["runs"]:
        ttt = row["time_to_target_s"]
        wall = row["elapsed_s"] if row["epochs"] else None
        click.echo(
            f"{row['name']:>12}: final {_fmt(row['final_accuracy'], '.4f')}  "
            f"to target {'-' if ttt is None else f'{ttt:.1f} s'}  "
            f"wall {'-' if wall is None else f'{wall:.1f} s'}"
        )
    for row in summary["runs"]:
        for key, value in row.items():
            if key.startswith("speedup_vs_"):
                click.echo(
                    f"{row['name']} reached the target {summary['target_accuracy']:g} "
                    f"{value:.2f}x as fast as {key[11:]}"
                )
    click.echo(f"wrote {result.png} and {result.html}")


@click.command("doctor")
@click.option(
    "--data",
    required=True,
    help="'fmnist', a dataset folder with train/, or an image folder of classes.",
)
@click.option(
    "--model",
    "model_name",
    default="small-cnn",
    show_default=True,
    type=click.Choice(["small-cnn", "patchify-cnn", "resnet18"]),
)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Timed batches of each stage (well above the loader's prefetch depth).",
)
@click.option("--warmup", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None)
@click.option(
    "--loader",
    "loader_kind",
    type=click.Choice(["dataplane", "torch"]),
    default="dataplane",
    show_default=True,
    help="Which input stage to measure.",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Where the cache would live (its disk's free space counts).",
)
@click.option(
    "--epochs",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Planned epoch budget (for the number of variants).",
)
@click.option(
    "--phase1-fraction",
    type=FiniteFloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Share of the epochs in phase 1 at most, at least one epoch when above 0 (as train); "
    "0: no phase 1, no cache.",
)
@click.option(
    "--cached-cost",
    type=FiniteFloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Cost of a cached batch over a fresh one (0: free, the ceiling).",
)
@_fmnist_ingest_options
@on_corrupt_option(" The torch loader always stops.")
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis as JSON.")
def doctor_command(
    data: str,
    model_name: str,
    batch_size: int,
    steps: int,
    warmup: int,
    size: int | None,
    jpeg: bool,
    limit: int | None,
    device: str | None,
    loader_kind: str,
    cache_dir: Path,
    epochs: int,
    phase1_fraction: float,
    cached_cost: float,
    data_root: Path,
    source_dir: Path,
    on_corrupt: str,
    as_json: bool,
) -> None:
    """Measure the input stage against the compute stage and recommend a cache."""
    import torch

    from trainers.data import resolve_dataset
    from trainers.doctor import diagnose
    from trainers.fit import resolve_device
    from trainers.models import build_model

    if loader_kind == "torch" and on_corrupt == "skip":
        raise click.BadParameter(
            "skip needs --loader dataplane; the torch loader stops at a corrupt image (leave "
            "--on-corrupt out, or use --loader dataplane)",
            param_hint="'--on-corrupt'",
        )
    try:
        dev = resolve_device(device)  # as train does: refuse CUDA where there is none
        if data == "fmnist":  # ingested as train does (same folder for the same options)
            train_dir = resolve_dataset(
                data, data_root=data_root, jpeg=jpeg, size=size, limit=limit, source_dir=source_dir
            ).train
        elif (Path(data) / "train").is_dir():
            train_dir = Path(data) / "train"
        else:
            train_dir = Path(data)  # an image folder of classes itself
        if loader_kind == "torch":
            from trainers.torch_baseline import TorchBaselineLoader

            loader: Any = TorchBaselineLoader(train_dir, batch_size=batch_size, size=size, seed=0)
        else:
            from dataplane import Loader

            loader = Loader(
                train_dir,
                batch_size=batch_size,
                recipe="train",
                shuffle=True,
                size=size,
                device=device,  # as train's loaders: None lets the Loader pick (DALI must see CUDA)
                on_corrupt=on_corrupt,
            )
        channels, side = _image_shape(loader)
        num_classes = _num_classes(loader)
        torch.manual_seed(0)
        model = build_model(model_name, num_classes, channels, image_size=side)
        diagnosis = diagnose(
            loader,
            model,
            num_classes=num_classes,
            num_samples=_num_samples(loader),
            steps=steps,
            warmup=warmup,
            device=dev,
            cache_dir=cache_dir,
            epochs=epochs,
            phase1_fraction=phase1_fraction,
            cached_cost_ratio=cached_cost,
        )
    except TrainerError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:
        from dataplane import DataplaneError

        if isinstance(exc, DataplaneError):
            raise _dataplane_error(exc) from exc
        raise
    if diagnosis.input_batches_timed < steps:
        click.echo(
            f"warning: --steps {steps}: the loader had only {diagnosis.input_batches_timed} "
            f"batches after the {warmup} warm-up ones; timed those (lower --batch-size or "
            "--steps for a full measurement)",
            err=True,
        )
    if as_json:
        click.echo(json.dumps(diagnosis.to_dict(), indent=2))
    else:
        click.echo(diagnosis.text())
