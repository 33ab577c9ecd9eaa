"""File utilities shared by the writers of ``run.json`` and ``last.pt``."""

from __future__ import annotations

import math
import os
import threading
from typing import Any

__all__ = ["json_safe", "new_file_mode"]

_umask_lock = threading.Lock()


def _umask() -> int:
    """The process's umask (read from /proc where possible, else set and restored)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode ``open()`` gives a new file: ``0o666`` less the umask.

    :func:`tempfile.mkstemp` creates files with mode ``0o600`` whatever the
    umask; a file written through it and renamed into place gets this mode
    first, so it is as readable as any other file the process writes.
    """
    return 0o666 & ~_umask()


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, infinity) replaced by ``None``.

    Strict JSON has no NaN or Infinity; ``json.dump(..., allow_nan=False)``
    then accepts the result. (Kept here because :mod:`trainers` depends on
    :mod:`dataplane` only, not on ``placement``, which has its own version.)
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
