"""What is known about a temporary file when it must be placed."""

from __future__ import annotations

import enum
import math
import operator
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from placement.schema import SCHEMA
from placement.storage.errors import StorageConfigError


class FileKind(str, enum.Enum):
    """Why a temporary file exists; the value is what the log's ``file_kind`` column holds."""

    SPILL = "spill"  # a task result evicted from worker memory
    SHUFFLE = "shuffle"  # one output partition of a P2P dataframe shuffle on one worker
    RECHUNK = "rechunk"  # one output chunk of a P2P array rechunk on one worker
    CACHE_SHARD = "cache_shard"  # a shard of an augmented-sample cache built by Dask
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


_OPTIONAL_INTS = (
    "expected_size_bytes",
    "n_partitions_in",
    "n_partitions_out",
    "input_bytes",
    "n_workers",
    "n_dependents",
)
#: Largest value of an int32 log column.
INT32_MAX = 2**31 - 1
#: Facts stored in int32 log columns (:data:`placement.schema.SCHEMA`): clipped to fit.
_INT32_FIELDS = frozenset(f.name for f in SCHEMA if pa.types.is_int32(f.type))
#: Every integer fact, and the least value each may take without conversion.
_INT_OK = {
    **dict.fromkeys(_OPTIONAL_INTS, 0),
    "priority": -INT32_MAX,
    "reuse_distance": -INT32_MAX,
}
_INT_FIELDS = tuple(_INT_OK)


def _as_fact(name: str, value: Any) -> int:
    """``value`` of integer fact ``name`` as a plain int, clipped to its log column."""
    if name in _OPTIONAL_INTS:
        number = as_count(name, value)
        assert number is not None
    else:
        try:
            number = operator.index(value)
        except TypeError:
            raise StorageConfigError(f"{name}={value!r} must be an int or None") from None
    if name in _INT32_FIELDS:
        number = max(-INT32_MAX, min(INT32_MAX, number))
    return number


def as_count(name: str, value: Any) -> int | None:
    """``value`` as a plain non-negative int (numpy integers included), or ``None``.

    Raises
    ------
    StorageConfigError
        (A :class:`ValueError`.) If ``value`` is not an integer (a float, a string...) or is
        negative.
    """
    if value is None:
        return None
    try:
        number = operator.index(value)
    except TypeError:
        number = -1
    if number < 0 or isinstance(value, bool):
        raise StorageConfigError(f"{name}={value!r} must be a non-negative int or None")
    return number


@dataclass(frozen=True, kw_only=True)
class FileRequest:
    """Creation-time facts of one temporary file (the log schema's id and creation columns).

    Only facts known before the file's first byte is written belong here; a placement
    decision (:class:`~placement.storage.chooser.TierChooser`) sees nothing else.
    Integer facts may be numpy integers (stored as ints); those of int32 log columns are
    clipped to the int32 range.

    Parameters
    ----------
    file_kind : FileKind
        Why the file exists (``spill``, ``shuffle``, ...).
    created_at : float
        Creation time, in seconds since the Unix epoch.
    pipeline, run_id, stage : str
        Workload name, one execution of it, and the task prefix / operator stage.
    operator : str, optional
        Operator kind (``shuffle``, ``groupby``, ``merge``, ``set_index``, ``rechunk``, ``bag``...).
    job_id, worker, host : str, optional
        Graph id within the run, worker address and host name.
    expected_size_bytes : int, optional
        Declared or estimated size of the file, in bytes.
    n_partitions_in, n_partitions_out : int, optional
        Partition counts of the stage's input and output.
    input_bytes : int, optional
        Bytes of the stage's (or pipeline's) input, when known.
    priority : int, optional
        Position of the producing task in Dask's static graph order (lower runs first).
    memory_pressure : float, optional
        Worker managed memory divided by its memory limit, at creation (dimensionless).
    n_workers : int, optional
        Workers in the cluster.
    reuse_distance : int, optional
        Spill files: graph-order positions (``dask.order``) from the task the worker is
        running now to the key's first dependent still to run on this worker, a
        forecast of how soon the spilled bytes are read back (negative when that
        dependent was ordered earlier but is not done; ``None`` when no dependent
        of the key is known to the worker).
    n_dependents : int, optional
        Spill files: dependents of the key still to run on this worker (each may read
        the spilled bytes back).
    """

    file_kind: FileKind
    created_at: float
    pipeline: str = "unknown"
    run_id: str = "unknown"
    stage: str = "unknown"
    operator: str | None = None
    job_id: str | None = None
    worker: str | None = None
    host: str | None = None
    expected_size_bytes: int | None = None
    n_partitions_in: int | None = None
    n_partitions_out: int | None = None
    input_bytes: int | None = None
    priority: int | None = None
    memory_pressure: float | None = None
    n_workers: int | None = None
    reuse_distance: int | None = None
    n_dependents: int | None = None

    def __post_init__(self) -> None:
        try:
            kind = FileKind(self.file_kind)
        except ValueError:
            raise StorageConfigError(
                f"file_kind={self.file_kind!r} is not one of {[k.value for k in FileKind]}"
            ) from None
        object.__setattr__(self, "file_kind", kind)
        if not isinstance(self.created_at, (int, float)) or not math.isfinite(self.created_at):
            raise StorageConfigError(
                f"created_at={self.created_at!r} must be a finite number of seconds"
            )
        for name in ("pipeline", "run_id", "stage"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise StorageConfigError(f"{name}={value!r} must be a non-empty string")
        # numpy integers become plain ints (a fact computed with numpy must not fail a
        # spill), and int32 columns are clipped; plain ints in range, the usual case on
        # every file creation, skip both
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if value is None or (type(value) is int and _INT_OK[name] <= value <= INT32_MAX):
                continue
            object.__setattr__(self, name, _as_fact(name, value))
        if self.memory_pressure is not None and not (
            isinstance(self.memory_pressure, (int, float)) and self.memory_pressure >= 0
        ):
            raise StorageConfigError(
                f"memory_pressure={self.memory_pressure!r} must be >= 0 or None"
            )

    def to_row(self) -> dict[str, Any]:
        """The id and creation-time columns of this file's log row."""
        row = {name: getattr(self, name) for name in _field_names()}
        row["file_kind"] = self.file_kind.value
        return row


_FIELD_NAMES: tuple[str, ...] = ()


def _field_names() -> tuple[str, ...]:
    global _FIELD_NAMES
    if not _FIELD_NAMES:
        _FIELD_NAMES = tuple(f.name for f in fields(FileRequest))
    return _FIELD_NAMES
