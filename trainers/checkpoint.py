"""Checkpoint files: atomic writes, reads with clear errors, RNG state capture.

A checkpoint is one ``torch.save`` file (``<checkpoint_dir>/last.pt``) written
to a temporary name and renamed into place, so a crash or Ctrl-C while
writing leaves the previous checkpoint intact. :func:`trainers.fit` decides
what goes in it (model, optimizer, LR scheduler, loader state, phase, epoch,
step, RNG states, the run record so far). Checkpoints hold pickled Python
objects (loader states, RNG states): load only files you wrote.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainers._files import AtomicWrite
from trainers.errors import CheckpointError

__all__ = [
    "CHECKPOINT_FILE",
    "capture_rng_state",
    "load_checkpoint",
    "restore_rng_state",
    "save_checkpoint",
]

CHECKPOINT_FILE = "last.pt"


def capture_rng_state() -> dict[str, Any]:
    """The state of Python's, NumPy's, torch's and (if present) CUDA's generators."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore generators captured by :func:`capture_rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename).

    The file gets the mode of any new file (``0o666`` less the umask).

    Raises
    ------
    CheckpointError
        The directory cannot be created or written (the previous checkpoint,
        if any, is left untouched).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = AtomicWrite(path, "wb", prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CheckpointError(
            f"cannot write a checkpoint in {path.parent} ({exc}); pass a writable checkpoint_dir"
        ) from exc
    try:
        with writer as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise CheckpointError(
            f"writing checkpoint {path} failed ({exc}); the previous checkpoint is unchanged"
        ) from exc
    return path


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (onto the CPU).

    Raises
    ------
    CheckpointError
        The file is missing or is not a readable checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; train without resume first")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, ValueError) as exc:
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({exc}); delete it to start over"
        ) from exc
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(f"{path} is not a trainers checkpoint; delete it to start over")
    return state
