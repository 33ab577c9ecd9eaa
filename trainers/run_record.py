"""The ``run.json`` file every training run writes (one per run directory).

:func:`trainers.fit` rewrites it atomically after every epoch, so a crashed or
interrupted run still leaves a readable record. Fields (times in seconds of
wall-clock time, accuracies as fractions in [0, 1]):

Top level
    ``schema`` (int, currently 1), ``name`` (run name, defaults to the
    schedule), ``schedule`` (``fresh``/``perfect``/``torch``), ``model``
    (class name), ``status`` (``running``, ``completed``, ``target_reached``
    when stopped early at the target, ``interrupted``, ``failed`` when an
    error ended the run), ``error`` (``"ExceptionType: message"`` of that
    error, else null), ``epochs_planned``,
    ``target_accuracy`` (or null), ``world_size`` (DDP processes),
    ``device``, ``switch_rule`` (patience, min_delta, budget_fraction),
    ``switch_epoch`` (first phase-2 epoch of ``perfect``, or null),
    ``switch_reason`` (``plateau``/``budget``/null), ``elapsed_s`` (total
    training + validation time so far), ``time_to_target_s`` (``elapsed_s``
    at the end of the first validation that reached ``target_accuracy``, or
    null), ``epoch_to_target``, ``final_accuracy`` (last validation),
    ``best_accuracy``, ``input_share`` (data-wait time over data-wait +
    compute time, all epochs), ``extra`` (free-form dict the caller passes,
    plus the training settings of :func:`trainers.fit`: its ``settings``
    argument and ``optimizer``, the optimizer's class and hyperparameters;
    ``dataplane train`` records there the data options, the validation
    split, batch size, learning rate, weight decay and seed), and ``epochs``
    (list below).
Per epoch (``epochs[i]``)
    ``epoch`` (0-based), ``phase`` (``cached``/``fresh``), ``steps``,
    ``samples`` (this process's), ``train_s`` (training loop wall time),
    ``data_wait_s`` (time blocked in ``next()`` on the loader),
    ``compute_s`` (forward, backward, optimizer step; CUDA synchronised),
    ``val_s`` (validation), ``checkpoint_s`` (checkpoint write, not counted
    in ``elapsed_s`` so runs with and without checkpoints compare),
    ``elapsed_s`` (cumulative train + validation time at the end of this
    epoch), ``input_share`` (``data_wait_s / (data_wait_s + compute_s)``),
    ``images_per_s`` (``samples / train_s``), ``train_loss`` (mean),
    ``train_accuracy``, ``val_loss``, ``val_accuracy``, ``lr`` (of the first
    parameter group during the epoch).

The file is strict JSON: a value that is not a finite number (a diverged
loss, for example) is written as ``null``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainers._files import AtomicWrite, json_safe
from trainers.errors import RunRecordError

__all__ = ["RUN_FILE", "SCHEMA_VERSION", "EpochRecord", "RunRecord"]

RUN_FILE = "run.json"
SCHEMA_VERSION = 1


@dataclass
class EpochRecord:
    """Measurements of one epoch (see the module docstring for units)."""

    epoch: int
    phase: str
    steps: int
    samples: int
    train_s: float
    data_wait_s: float
    compute_s: float
    val_s: float
    checkpoint_s: float
    elapsed_s: float
    input_share: float
    images_per_s: float
    train_loss: float
    train_accuracy: float
    val_loss: float
    val_accuracy: float
    lr: float
    train_elapsed_s: float = 0.0


@dataclass
class RunRecord:
    """The whole ``run.json`` (see the module docstring)."""

    name: str
    schedule: str
    model: str
    epochs_planned: int
    target_accuracy: float | None
    world_size: int
    device: str
    switch_rule: dict[str, Any]
    status: str = "running"
    switch_epoch: int | None = None
    switch_reason: str | None = None
    elapsed_s: float = 0.0
    train_elapsed_s: float = 0.0
    time_to_target_s: float | None = None
    train_time_to_target_s: float | None = None
    epoch_to_target: int | None = None
    final_accuracy: float | None = None
    best_accuracy: float | None = None
    input_share: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    epochs: list[EpochRecord] = field(default_factory=list)
    schema: int = SCHEMA_VERSION
    error: str | None = None

    def add_epoch(self, record: EpochRecord) -> None:
        """Append an epoch and update the run-level summary fields."""
        self.epochs.append(record)
        self.elapsed_s = record.elapsed_s
        self.train_elapsed_s = record.train_elapsed_s
        self.final_accuracy = record.val_accuracy
        self.best_accuracy = max(r.val_accuracy for r in self.epochs)
        wait = sum(r.data_wait_s for r in self.epochs)
        busy = wait + sum(r.compute_s for r in self.epochs)
        self.input_share = wait / busy if busy > 0 else 0.0
        if (
            self.time_to_target_s is None
            and self.target_accuracy is not None
            and record.val_accuracy >= self.target_accuracy
        ):
            self.time_to_target_s = record.elapsed_s
            self.train_time_to_target_s = record.train_elapsed_s
            self.epoch_to_target = record.epoch

    def retarget(self, target_accuracy: float) -> RunRecord:
        """A copy whose target and crossing times are recomputed for ``target_accuracy``."""
        copy = RunRecord.from_dict(self.to_dict())
        copy.target_accuracy = float(target_accuracy)
        first = next((e for e in copy.epochs if e.val_accuracy >= target_accuracy), None)
        copy.time_to_target_s = None if first is None else first.elapsed_s
        copy.train_time_to_target_s = None if first is None else first.train_elapsed_s
        copy.epoch_to_target = None if first is None else first.epoch
        return copy

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """Rebuild a record from :meth:`to_dict` output (or a parsed ``run.json``)."""
        data = dict(data)
        epochs = [EpochRecord(**e) for e in data.pop("epochs", [])]
        return cls(**data, epochs=epochs)

    def write(self, run_dir: str | os.PathLike[str]) -> Path:
        """Write ``run_dir/run.json`` atomically (temporary file + rename); return its path.

        Non-finite numbers are written as ``null`` (strict JSON); the file gets
        the mode of any new file (``0o666`` less the umask).
        """
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / RUN_FILE
        with AtomicWrite(path, "w", prefix=".run.", suffix=".json.tmp") as f:
            json.dump(json_safe(self.to_dict()), f, indent=2, allow_nan=False)
            f.write("\n")
        return path

    @classmethod
    def read(cls, run_dir: str | os.PathLike[str]) -> RunRecord:
        """Read ``run_dir/run.json`` (``run_dir`` may also be the file itself).

        Raises
        ------
        RunRecordError
            The file is missing, not JSON, or not a run record.
        """
        path = Path(run_dir)
        if path.is_dir():
            path = path / RUN_FILE
        if not path.is_file():
            raise RunRecordError(
                f"no {RUN_FILE} at {path}; pass a run directory written by `dataplane train` "
                "or trainers.fit(run_dir=...)"
            )
        try:
            data = json.loads(path.read_text())
            return cls.from_dict(data)
        except (json.JSONDecodeError, TypeError, KeyError) as exc:
            raise RunRecordError(
                f"{path} is not a readable run record ({exc}); re-run training"
            ) from exc
