"""File utilities shared by the writers of ``run.json`` and ``last.pt``."""

from __future__ import annotations

import math
import os
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = ["AtomicWrite", "json_safe", "new_file_mode"]

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


class AtomicWrite:
    """Write a file atomically: to a temporary file beside it, renamed into place.

    Creating the object creates the temporary file (``OSError`` if the directory
    cannot hold one); entering opens it in ``mode`` with the mode of any new file
    (:func:`new_file_mode`) and returns it; leaving closes it and renames it onto
    ``path``. If the block, the close or the rename raises, the temporary file is
    removed and ``path`` is left as it was. Durability (``fsync``) is the caller's
    choice, inside the block.

    Examples
    --------
    >>> with AtomicWrite(path, "w", prefix=".run.", suffix=".json.tmp") as f:  # doctest: +SKIP
    ...     f.write(text)
    """

    def __init__(
        self, path: str | os.PathLike[str], mode: str, *, prefix: str, suffix: str
    ) -> None:
        self.path = Path(path)
        self._mode = mode
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=prefix, suffix=suffix)
        self._fd: int | None = fd
        self.tmp = Path(tmp)
        self._file: IO[Any] | None = None

    def __enter__(self) -> IO[Any]:
        fd, self._fd = self._fd, None
        if fd is None:
            raise RuntimeError("an AtomicWrite is entered once")
        try:
            self._file = os.fdopen(fd, self._mode)
        except BaseException:
            os.close(fd)
            self.tmp.unlink(missing_ok=True)
            raise
        try:
            os.fchmod(self._file.fileno(), new_file_mode())
        except BaseException:
            self._file.close()
            self.tmp.unlink(missing_ok=True)
            raise
        return self._file

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._file is not None
        try:
            self._file.close()
            if exc_type is None:
                os.replace(self.tmp, self.path)
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise
        if exc_type is not None:
            self.tmp.unlink(missing_ok=True)


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
