"""The training loop: :func:`fit`.

``fit`` trains any :class:`torch.nn.Module` on any loader that follows
:class:`trainers.protocols.EpochLoader`, validates after every epoch, and
records where the time goes:

- ``data_wait_s``: time blocked in ``next()`` on the training loader (the
  input stage as the model sees it);
- ``compute_s``: forward, loss, backward and optimizer step (CUDA is
  synchronised at the end of each step so the time is real);
- ``val_s``: validation.

``elapsed_s`` is the cumulative training + validation time; the time to the
target accuracy is ``elapsed_s`` at the end of the first validation that
reaches it. Checkpoint writes are timed separately (``checkpoint_s``) and
left out of ``elapsed_s``.

Schedules (see :mod:`trainers.schedule`): with ``Schedule.PERFECT`` the
epochs of phase 1 draw from ``train_loader`` (a cached loader) and, after the
automatic switch, phase 2 draws from ``fresh_loader``. ``FRESH`` and
``TORCH`` draw every epoch from ``train_loader``.

Checkpoints and resume
----------------------
With ``checkpoint_dir``, ``fit`` writes ``<checkpoint_dir>/last.pt`` after
every epoch: model, optimizer, LR scheduler, the phase controller, the epoch,
the run record and the RNG states of Python, NumPy, torch (and CUDA).
``resume=True`` continues from it: the same samples in the same order. With
loaders whose augmentation is a function of epoch and position (in-memory ones,
and epochs served from the augmented-sample cache), on CPU with deterministic
kernels, 2 epochs straight and 1 epoch + resume + 1 epoch give identical
weights. With ``dataplane.Loader`` drawing fresh augmentation the resumed
epochs draw it afresh (DALI's random state lives in a pipeline reused from
epoch to epoch and cannot be saved), so the weights differ as two seeds would.

A checkpoint also stores the run's training settings: the schedule, epoch
budget and model class, the target accuracy, the switch rule, the
optimizer's class and hyperparameters (``optimizer.defaults``: ``lr``,
``weight_decay``, ...) and the caller's ``settings`` (``dataplane train``
passes batch size, seed and the data options). A resume with any of them
changed is refused, naming each setting with its stored and new value: the
optimizer state and the run record would otherwise mix two configurations.
Options that do not change the training (progress bars, ``stop_at_target``,
``run_name``) may change. A run that stopped at its target with
``stop_at_target=True`` is finished: resuming it with ``stop_at_target=True``
again trains nothing; with ``stop_at_target=False`` it trains the remaining
epochs.

Failures. An exception other than ``KeyboardInterrupt`` during training
sets the record's ``status`` to ``"failed"`` and its ``error`` to the
exception's type and message, writes ``run.json`` and propagates. A
non-finite training loss (a diverged model) does not stop the run: ``fit``
logs one warning per run, the epoch's ``train_loss`` is written as ``null``
and the accuracies show the damage.

Ctrl-C. While ``fit`` runs in the main thread, the first SIGINT asks it to
stop after the current step: it writes a mid-epoch checkpoint (including the
loader's ``state_dict()`` after that step, so a resume yields exactly the
remaining batches) and raises :class:`KeyboardInterrupt`. A second SIGINT
interrupts at once. A ``KeyboardInterrupt`` raised while waiting for data or
during validation also leaves a mid-epoch checkpoint; one raised in the
middle of a step (possible only outside the main thread) leaves the last
epoch-end checkpoint, because the model may be half updated. Under DDP only
epoch-end checkpoints are written (a mid-epoch one would need every rank's
loader position), so an interrupt there resumes from the last finished epoch.

DDP. When a default process group is initialised (``torchrun``), the model
is wrapped in ``DistributedDataParallel``, the loaders are expected to shard
by rank with equal batch counts (``dataplane.Loader`` does), validation
counts are summed over ranks, and only rank 0 writes files.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.checkpoint import (
    CHECKPOINT_FILE,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from trainers.distributed import DistContext, unwrap
from trainers.errors import CheckpointError, TrainerConfigError
from trainers.protocols import REQUIRED_LOADER_METHODS
from trainers.run_record import EpochRecord, RunRecord
from trainers.schedule import Phase, PhaseController, Schedule, SwitchRule

__all__ = ["FitResult", "fit", "resolve_device"]

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1

LRSchedulerLike = torch.optim.lr_scheduler.LRScheduler
LRSchedulerArg = LRSchedulerLike | Callable[[torch.optim.Optimizer], LRSchedulerLike] | None


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    model : torch.nn.Module
        The trained model (unwrapped from DDP).
    record : RunRecord
        The run record (also in ``run_dir/run.json`` when ``run_dir`` is set).
    checkpoint_path : pathlib.Path | None
        The last checkpoint written, if any.
    """

    model: nn.Module
    record: RunRecord
    checkpoint_path: Path | None


class _InterruptGuard:
    """Turns the first SIGINT into a request to stop after the current step."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        if self.requested:  # second Ctrl-C: stop at once
            raise KeyboardInterrupt
        self.requested = True
        logger.warning("interrupt received: stopping after this step and writing a checkpoint")

    def __enter__(self) -> _InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


def _check_loader(name: str, loader: object, methods: Iterable[str]) -> None:
    missing = [m for m in methods if not callable(getattr(loader, m, None))]
    if missing:
        raise TrainerConfigError(
            f"{name} ({type(loader).__name__}) lacks {', '.join(missing)}; "
            "pass a dataplane.Loader, "
            "a trainers.torch_baseline.TorchBaselineLoader, or an object with "
            f"{', '.join(REQUIRED_LOADER_METHODS)}"
        )


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch device for ``device`` (``None``: CUDA when available, else CPU).

    Raises
    ------
    TrainerConfigError
        ``device`` names no device, or asks for CUDA where there is none.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise TrainerConfigError(
            f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}"
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TrainerConfigError(
            "device='cuda' but no CUDA device is available; use device='cpu' (--device cpu)"
        )
    return dev


#: The ``dataplane train`` options of the settings ``fit`` derives itself (for error messages).
_CLI_OPTIONS = {
    "target_accuracy": "--target-accuracy",
    "switch_rule.patience": "--patience",
    "switch_rule.min_delta": "--min-delta",
    "switch_rule.budget_fraction": "--phase1-fraction",
    "optimizer.lr": "--lr",
    "optimizer.weight_decay": "--weight-decay",
}


def _plain(value: Any) -> Any:
    """``value`` as plain JSON-ready data, or ``None`` when it is not such a value."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        items = [_plain(v) for v in value]
        return None if any(v is None for v in items) else items
    return None


def _optimizer_settings(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's class and the plain values of its constructor arguments."""
    out: dict[str, Any] = {"name": type(optimizer).__name__}
    for key in sorted(optimizer.defaults):
        value = _plain(optimizer.defaults[key])
        if value is not None:
            out[key] = value
    return out


def _check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    for i, group in enumerate(optimizer.param_groups):
        for key, example in (("lr", "0.05"), ("weight_decay", "5e-4")):
            if key not in group:
                continue
            value = _plain(group[key])
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                option = "--" + key.replace("_", "-")
                raise TrainerConfigError(
                    f"optimizer {key} must be a finite number >= 0, got {group[key]!r} "
                    f"(param group {i}); pass one such as {option} {example} "
                    f"(sgd_optimizer(model, {key}={example}))"
                )


def _training_settings(
    target_accuracy: float | None,
    rule: SwitchRule,
    optimizer: torch.optim.Optimizer,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The flat dict of settings a resume must match (see the module docstring)."""
    out: dict[str, Any] = dict(settings)
    out["target_accuracy"] = None if target_accuracy is None else float(target_accuracy)
    out.update({f"switch_rule.{k}": v for k, v in rule.to_dict().items()})
    out.update({f"optimizer.{k}": v for k, v in _optimizer_settings(optimizer).items()})
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


@dataclass
class _EpochTally:
    """Running sums of one epoch (kept in mid-epoch checkpoints)."""

    steps: int = 0
    samples: int = 0
    train_s: float = 0.0
    data_wait_s: float = 0.0
    compute_s: float = 0.0
    loss_sum: float = 0.0
    correct: int = 0


def _evaluate(
    model: nn.Module,
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: torch.device,
    ctx: DistContext,
) -> tuple[float, float]:
    """Validation loss (mean) and accuracy, summed over ranks."""
    net = unwrap(model)
    was_training = net.training
    net.eval()
    set_epoch = getattr(loader, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(0)
    loss_sum = 0.0
    correct = 0
    count = 0
    with torch.no_grad():
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            out = net(images)
            loss_sum += float(loss_fn(out, labels).item()) * labels.shape[0]
            correct += int((out.argmax(1) == labels).sum().item())
            count += int(labels.shape[0])
    net.train(was_training)
    loss_sum, correct_f, count_f = ctx.sum([loss_sum, float(correct), float(count)], device)
    if count_f == 0:
        raise TrainerConfigError("the validation loader yielded no samples; check val_loader")
    return loss_sum / count_f, correct_f / count_f


def sgd_optimizer(
    model: torch.nn.Module, lr: float = 0.05, weight_decay: float = 5e-4
) -> torch.optim.SGD:
    """The default optimizer of :func:`fit`: SGD with Nesterov momentum 0.9.

    Parameters
    ----------
    model : torch.nn.Module
        Whose parameters are optimized.
    lr : float
        Learning rate (peak, when a schedule anneals it).
    weight_decay : float
        L2 penalty.
    """
    return torch.optim.SGD(
        model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=weight_decay
    )


def cosine_per_epoch(epochs: int) -> Callable[[torch.optim.Optimizer], LRSchedulerLike]:
    """An ``lr_scheduler`` for :func:`fit`: cosine annealing over ``epochs`` epochs."""
    return lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)


def fit(
    model: nn.Module,
    train_loader: Any,
    val_loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    schedule: Schedule | str = Schedule.FRESH,
    fresh_loader: Any | None = None,
    target_accuracy: float | None = None,
    epochs: int = 10,
    optimizer: torch.optim.Optimizer | None = None,
    lr_scheduler: LRSchedulerArg = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    switch_rule: SwitchRule | None = None,
    device: str | torch.device | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
    run_dir: str | Path | None = None,
    run_name: str | None = None,
    stop_at_target: bool = False,
    progress: bool = False,
    extra: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
) -> FitResult:
    """Train ``model`` and record time, accuracy and phase per epoch.

    Parameters
    ----------
    model : torch.nn.Module
        Any module mapping a float32 NCHW batch to class logits. Moved to
        ``device``; wrapped in DDP when a process group is initialised.
    train_loader : EpochLoader
        Training batches ``(images, labels)``. For ``Schedule.PERFECT`` this
        is the phase-1 loader (cached variants), e.g.
        ``dataplane.Loader(..., cache=CacheConfig(path, variants=K))``.
    val_loader : iterable
        Validation batches; ``set_epoch(0)`` is called before each pass when
        it has one.
    schedule : Schedule or str
        ``"fresh"``, ``"perfect"`` or ``"torch"`` (see
        :mod:`trainers.schedule`).
    fresh_loader : EpochLoader, optional
        Phase-2 loader (fresh augmentation); required for ``PERFECT``.
    target_accuracy : float, optional
        Validation accuracy (fraction in (0, 1]) whose first crossing is
        reported as ``time_to_target_s``.
    epochs : int
        Epoch budget.
    optimizer : torch.optim.Optimizer, optional
        Defaults to SGD (lr 0.05, momentum 0.9, Nesterov, weight decay 5e-4)
        over ``model.parameters()``. Every parameter group's ``lr`` and
        ``weight_decay`` must be finite and >= 0.
    lr_scheduler : LRScheduler or callable, optional
        Stepped once per epoch. Either a scheduler built on ``optimizer`` or
        a callable ``optimizer -> scheduler``; ``None`` keeps the LR constant.
    loss_fn : callable, optional
        Defaults to :class:`torch.nn.CrossEntropyLoss`.
    switch_rule : SwitchRule, optional
        Phase-switch thresholds for ``PERFECT`` (defaults: patience 2,
        min_delta 0.002, budget_fraction 0.5).
    device : str or torch.device, optional
        Where the model runs; ``None`` picks CUDA when available.
    checkpoint_dir : path, optional
        Where ``last.pt`` is written after every epoch and on Ctrl-C.
    resume : bool
        Continue from ``checkpoint_dir/last.pt`` when it exists (a fresh
        start, logged, when it does not). The checkpoint must have been
        written with the same training settings (see the module docstring).
    run_dir : path, optional
        Where ``run.json`` is rewritten after every epoch (rank 0 only).
    run_name : str, optional
        Name of the run in ``run.json`` and plots (defaults to the schedule).
    stop_at_target : bool
        Stop after the first epoch that reaches ``target_accuracy``. A
        resumed run that already stopped there trains nothing more.
    progress : bool
        Show a tqdm progress bar per epoch (rank 0 only).
    extra : dict, optional
        JSON-ready data stored under ``extra`` in ``run.json``.
    settings : dict, optional
        JSON-ready settings that shape the training beyond ``fit``'s own
        arguments (batch size, seed, data options, ...). Stored under
        ``extra`` in ``run.json`` and in the checkpoint; ``resume=True``
        refuses a checkpoint written with other values.

    Returns
    -------
    FitResult

    Raises
    ------
    TrainerConfigError
        A bad argument (named in the message), before any training.
    CheckpointError
        ``resume=True`` with a checkpoint from a different run or model, or
        written with other training settings.
    KeyboardInterrupt
        After writing a checkpoint, when interrupted (see the module docstring).
    """
    sched = Schedule.parse(schedule)
    if not isinstance(model, nn.Module):
        raise TrainerConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise TrainerConfigError(f"epochs must be an integer >= 1, got {epochs!r}")
    if target_accuracy is not None and not (
        isinstance(target_accuracy, (int, float)) and 0.0 < target_accuracy <= 1.0
    ):
        raise TrainerConfigError(
            f"target_accuracy must be a fraction in (0, 1] (0.9 = 90%), got {target_accuracy!r}"
        )
    if stop_at_target and target_accuracy is None:
        raise TrainerConfigError("stop_at_target=True needs target_accuracy")
    _check_loader("train_loader", train_loader, REQUIRED_LOADER_METHODS)
    _check_loader("val_loader", val_loader, ("__iter__",))
    if sched is Schedule.PERFECT:
        if fresh_loader is None:
            raise TrainerConfigError(
                "schedule 'perfect' needs fresh_loader= "
                "(the phase-2 loader with fresh augmentation); "
                "train_loader is the cached phase-1 loader"
            )
        _check_loader("fresh_loader", fresh_loader, REQUIRED_LOADER_METHODS)
    elif fresh_loader is not None:
        raise TrainerConfigError(
            f"fresh_loader is only used by schedule 'perfect'; schedule {sched.value!r} trains on "
            "train_loader every epoch"
        )
    if resume and checkpoint_dir is None:
        raise TrainerConfigError("resume=True needs checkpoint_dir= (where last.pt lives)")
    if settings is not None and not isinstance(settings, dict):
        raise TrainerConfigError(
            f"settings must be a dict of JSON-ready values, got {type(settings).__name__}"
        )

    dev = resolve_device(device)
    ctx = DistContext.current()
    model = model.to(dev)
    if optimizer is None:
        optimizer = sgd_optimizer(model)
    _check_optimizer(optimizer)
    scheduler: LRSchedulerLike | None
    if lr_scheduler is None or isinstance(lr_scheduler, LRSchedulerLike):
        scheduler = lr_scheduler
    elif callable(lr_scheduler):
        scheduler = lr_scheduler(optimizer)
    else:
        raise TrainerConfigError(
            "lr_scheduler must be an LRScheduler, a callable optimizer -> LRScheduler, or None"
        )
    criterion = loss_fn if loss_fn is not None else nn.CrossEntropyLoss()
    controller = PhaseController(sched, epochs=epochs, rule=switch_rule)
    net = unwrap(model)
    training_settings = _training_settings(
        target_accuracy, controller.rule, optimizer, dict(settings or {})
    )
    record_extra = {**(extra or {}), **(settings or {})}
    record_extra.setdefault("optimizer", _optimizer_settings(optimizer))
    record = RunRecord(
        name=run_name or sched.value,
        schedule=sched.value,
        model=type(net).__name__,
        epochs_planned=epochs,
        target_accuracy=None if target_accuracy is None else float(target_accuracy),
        world_size=ctx.world_size,
        device=str(dev),
        switch_rule=controller.rule.to_dict(),
        extra=record_extra,
    )
    ckpt_path = Path(checkpoint_dir) / CHECKPOINT_FILE if checkpoint_dir is not None else None
    run_path = Path(run_dir) if run_dir is not None else None

    start_epoch = 0
    tally = _EpochTally()
    loader_state: dict[str, Any] | None = None
    if resume and ckpt_path is not None:
        if ckpt_path.is_file():
            state = load_checkpoint(ckpt_path)
            _check_compatible(state, sched, epochs, net, ckpt_path, training_settings)
            try:
                net.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
            except (RuntimeError, ValueError, KeyError) as exc:
                raise CheckpointError(
                    f"{ckpt_path} does not fit this model/optimizer ({exc}); resume with the same "
                    "model and optimizer, or delete the checkpoint to start over"
                ) from exc
            if scheduler is not None and state.get("lr_scheduler") is not None:
                scheduler.load_state_dict(state["lr_scheduler"])
            controller.load_state_dict(state["controller"])
            saved = RunRecord.from_dict(state["record"])
            start_epoch = int(state["epoch"])
            tally = _EpochTally(**state["tally"])
            if stop_at_target and saved.status == "target_reached" and tally.steps == 0:
                logger.info(
                    "the run in %s already reached its target accuracy %s at epoch %s "
                    "(stop_at_target); nothing to train. Resume without --stop-at-target "
                    "(stop_at_target=False) to train its remaining epochs",
                    ckpt_path.parent,
                    saved.target_accuracy,
                    saved.epoch_to_target,
                )
                start_epoch = epochs
            elif start_epoch < epochs:
                saved.status = "running"
                saved.error = None
            saved.world_size = ctx.world_size
            saved.extra.update(record.extra)
            record = saved
            loader_state = state.get("loader_state")
            restore_rng_state(state["rng"])
            logger.info("resumed from %s at epoch %d step %d", ckpt_path, start_epoch, tally.steps)
        else:
            logger.info("no checkpoint at %s; starting from scratch", ckpt_path)

    model = ctx.wrap(model, dev)
    model.train()
    last_ckpt: Path | None = None

    def loader_for(phase: Phase) -> Any:
        if phase is Phase.FRESH and sched is Schedule.PERFECT:
            return fresh_loader
        return train_loader

    def checkpoint(epoch: int, t: _EpochTally, lstate: dict[str, Any] | None) -> float:
        nonlocal last_ckpt
        if ckpt_path is None or not ctx.is_main:
            return 0.0
        t0 = time.perf_counter()
        last_ckpt = save_checkpoint(
            ckpt_path,
            {
                "format": CHECKPOINT_FORMAT,
                "schedule": sched.value,
                "epochs": epochs,
                "model_class": type(net).__name__,
                "settings": training_settings,
                "model": net.state_dict(),
                "optimizer": optimizer.state_dict(),
                "lr_scheduler": None if scheduler is None else scheduler.state_dict(),
                "controller": controller.state_dict(),
                "record": record.to_dict(),
                "epoch": epoch,
                "tally": vars(t).copy(),
                "loader_state": lstate,
                "rng": capture_rng_state(),
            },
        )
        return time.perf_counter() - t0

    def write_record() -> None:
        if run_path is not None and ctx.is_main:
            record.write(run_path)

    is_cuda = dev.type == "cuda"
    warned_loss = False
    epoch = start_epoch
    in_step = False
    loader: Any = None
    with _InterruptGuard() as guard:
        try:
            for epoch in range(start_epoch, epochs):
                phase = controller.phase
                loader = loader_for(phase)
                skip_pass = False
                if loader_state is not None:
                    loader.load_state_dict(loader_state)
                    loader_state = None
                elif tally.steps > 0:  # resumed after this epoch's pass: validate only
                    skip_pass = True
                else:
                    loader.set_epoch(epoch)
                lr = float(optimizer.param_groups[0]["lr"])
                bar = _progress_bar(
                    progress and ctx.is_main, len(loader), epoch, phase, tally.steps
                )
                t_epoch = time.perf_counter() - tally.train_s
                it: Iterator[tuple[torch.Tensor, torch.Tensor]] = iter(() if skip_pass else loader)
                while True:
                    t0 = time.perf_counter()
                    try:
                        images, labels = next(it)
                    except StopIteration:
                        break
                    t1 = time.perf_counter()
                    in_step = True
                    images = images.to(dev, non_blocking=True)
                    labels = labels.to(dev, non_blocking=True)
                    optimizer.zero_grad(set_to_none=True)
                    out = model(images)
                    loss = criterion(out, labels)
                    loss.backward()
                    optimizer.step()
                    if is_cuda:
                        torch.cuda.synchronize(dev)
                    t2 = time.perf_counter()
                    n = int(labels.shape[0])
                    loss_value = float(loss.detach().item())
                    if not warned_loss and not math.isfinite(loss_value):
                        warned_loss = True
                        logger.warning(
                            "training loss is %s at epoch %d step %d: the model diverged "
                            "(learning rate too high?); training goes on, run.json shows the "
                            "loss as null",
                            loss_value,
                            epoch,
                            tally.steps,
                        )
                    tally.loss_sum += loss_value * n
                    tally.correct += int((out.detach().argmax(1) == labels).sum().item())
                    tally.samples += n
                    tally.steps += 1
                    tally.data_wait_s += t1 - t0
                    tally.compute_s += t2 - t1
                    tally.train_s = time.perf_counter() - t_epoch
                    in_step = False
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(loss=f"{loss_value:.3f}", refresh=False)
                    if guard.requested:
                        raise KeyboardInterrupt
                if bar is not None:
                    bar.close()
                tally.train_s = time.perf_counter() - t_epoch
                if tally.steps == 0:
                    raise TrainerConfigError(
                        f"the training loader yielded no batches in epoch {epoch}; "
                        "check the dataset "
                        "and batch size (drop_last with fewer samples than a batch?)"
                    )
                t_val = time.perf_counter()
                val_loss, val_acc = _evaluate(model, val_loader, criterion, dev, ctx)
                val_s = time.perf_counter() - t_val
                controller.observe(epoch, val_acc)
                if scheduler is not None:
                    scheduler.step()
                busy = tally.data_wait_s + tally.compute_s
                erec = EpochRecord(
                    epoch=epoch,
                    phase=phase.value,
                    steps=tally.steps,
                    samples=tally.samples,
                    train_s=tally.train_s,
                    data_wait_s=tally.data_wait_s,
                    compute_s=tally.compute_s,
                    val_s=val_s,
                    checkpoint_s=0.0,
                    elapsed_s=record.elapsed_s + tally.train_s + val_s,
                    train_elapsed_s=record.train_elapsed_s + tally.train_s,
                    input_share=tally.data_wait_s / busy if busy > 0 else 0.0,
                    images_per_s=tally.samples / tally.train_s if tally.train_s > 0 else 0.0,
                    train_loss=tally.loss_sum / max(tally.samples, 1),
                    train_accuracy=tally.correct / max(tally.samples, 1),
                    val_loss=val_loss,
                    val_accuracy=val_acc,
                    lr=lr,
                )
                record.add_epoch(erec)
                record.switch_epoch = controller.switch_epoch
                record.switch_reason = (
                    None if controller.switch_reason is None else controller.switch_reason.value
                )
                reached = target_accuracy is not None and val_acc >= target_accuracy
                done = epoch + 1 >= epochs or (stop_at_target and reached)
                if done:
                    record.status = (
                        "target_reached" if (stop_at_target and reached) else "completed"
                    )
                tally = _EpochTally()
                erec.checkpoint_s = checkpoint(epoch + 1, tally, None)
                write_record()
                logger.info(
                    "epoch %d [%s] val_acc %.4f train %.1fs (data wait %.1fs, compute %.1fs)",
                    epoch,
                    phase.value,
                    val_acc,
                    erec.train_s,
                    erec.data_wait_s,
                    erec.compute_s,
                )
                if done:
                    break
                if guard.requested:  # Ctrl-C during validation: the epoch-end checkpoint is written
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            record.status = "interrupted"
            if in_step:
                logger.warning(
                    "interrupted in the middle of a training step; the last epoch-end checkpoint "
                    "stays the resume point"
                )
            elif ctx.enabled:
                logger.warning(
                    "interrupted under DDP; the last epoch-end checkpoint is the resume point"
                )
            elif loader is not None and tally.steps > 0:
                # After a complete pass (interrupted in validation) some loaders already point at
                # the next epoch: store no position, and resume straight into validation.
                trained = tally.steps >= len(loader)
                checkpoint(epoch, tally, None if trained else loader.state_dict())
            write_record()
            raise
        except Exception as exc:
            record.status = "failed"
            record.error = f"{type(exc).__name__}: {exc}"
            try:
                write_record()
            except (OSError, TypeError, ValueError) as write_exc:  # keep the original error
                logger.warning("could not record the failure in run.json: %s", write_exc)
            raise
    return FitResult(model=unwrap(model), record=record, checkpoint_path=last_ckpt)


def _check_compatible(
    state: dict[str, Any],
    sched: Schedule,
    epochs: int,
    net: nn.Module,
    path: Path,
    settings: dict[str, Any],
) -> None:
    problems = []
    if state.get("format") != CHECKPOINT_FORMAT:
        problems.append(f"format {state.get('format')!r} (expected {CHECKPOINT_FORMAT})")
    if state.get("schedule") != sched.value:
        problems.append(f"schedule {state.get('schedule')!r} (this run: {sched.value!r})")
    if state.get("epochs") != epochs:
        problems.append(f"epochs {state.get('epochs')!r} (this run: {epochs})")
    if state.get("model_class") != type(net).__name__:
        problems.append(f"model {state.get('model_class')!r} (this run: {type(net).__name__!r})")
    if problems:
        raise CheckpointError(
            f"{path} was written by a different run: "
            + "; ".join(problems)
            + ". Resume with the same settings, or use another checkpoint_dir to start over."
        )
    saved = state.get("settings")
    if not isinstance(saved, dict):  # written before settings were stored: nothing to compare
        return
    changed = []
    for key in sorted(set(saved) | set(settings)):
        old, new = saved.get(key), settings.get(key)
        if not _same(old, new):
            option = f" ({_CLI_OPTIONS[key]})" if key in _CLI_OPTIONS else ""
            changed.append(f"{key}{option}: {old!r} in the checkpoint, {new!r} in this run")
    if changed:
        raise CheckpointError(
            f"{path} was written with other training settings: "
            + "; ".join(changed)
            + ". Resume with the checkpoint's values, or start over in a new run directory "
            "(--run-dir) or checkpoint_dir."
        )


def _progress_bar(enabled: bool, total: int, epoch: int, phase: Phase, initial: int) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=f"epoch {epoch} [{phase.value}]",
        unit="batch",
        leave=False,
        dynamic_ncols=True,
    )
