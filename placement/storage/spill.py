"""Dask worker spill that writes each spilled key through a :class:`TieredFileStore`.

:class:`TieredSpillBuffer` is Dask's own :class:`distributed.spill.SpillBuffer` - the
same LRU of in-memory values, the same ``target`` threshold, the same ``evict()`` the
worker memory manager calls at the ``spill`` threshold, the same pause behaviour - with
one change: the directory mapping under its slow store (a ``zict.File`` in Dask) is
replaced by :class:`SpillFiles`, which creates one file per spilled key on the tier the
store's chooser picks (``file_kind="spill"``, ``stage=key_split(key)``), counts its
reads and writes and logs one row when the key leaves the disk.

Give it to workers through the worker ``data=`` argument::

    LocalCluster(..., data=(tiered_spill_buffer, {"ssd_dir": ..., "hdd_dir": ...,
                                                  "log_dir": ..., "memory_limit": ...}))

Version dependency: relies on ``SpillBuffer._slow_uncached`` returning the
``distributed.spill.Slow`` (a ``zict.Func``) whose ``d`` attribute is the file mapping,
as in distributed 2023.x-2026.8. :func:`check_spill_compatible` verifies this.

What happens on failure: a spilled key whose write fails on both tiers raises
``OSError`` (:class:`~placement.storage.errors.TierIOError`) inside ``SpillBuffer``,
which keeps the value in memory and logs the error, exactly as with Dask's own files.
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import threading
from collections.abc import Hashable, Iterator, MutableMapping
from typing import Any, Literal, cast

import dask
from dask.utils import parse_bytes
from distributed.spill import SpillBuffer

from placement.logwriter import FlushMode, LogWriter
from placement.storage.chooser import TierChooser
from placement.storage.config import (
    LOG_DIR_KEY,
    check_storage_dirs,
    config_dir,
    default_target_fraction,
    tier_dirs,
)
from placement.storage.context import RequestBuilder
from placement.storage.errors import StorageConfigError, StorageError
from placement.storage.paths import name_for_key
from placement.storage.store import TempFile, TieredFileStore, frame_nbytes


class SpillFiles(MutableMapping[Hashable, Any]):
    """Key -> pickled frames, one tiered temporary file per key.

    Stands in for the ``zict.File`` under Dask's spill ``Slow`` store: ``__setitem__``
    receives the list of frames Dask serialized, ``__getitem__`` returns a ``bytearray``.
    """

    def __init__(self, store: TieredFileStore, builder: RequestBuilder) -> None:
        self.store = store
        self.builder = builder
        self._files: dict[Hashable, TempFile] = {}
        self._serial = itertools.count()
        self._lock = threading.Lock()

    def __setitem__(self, key: Hashable, frames: Any) -> None:
        if isinstance(frames, (bytes, bytearray, memoryview)):
            frames = [frames]
        else:
            frames = list(frames)
        if key in self:
            del self[key]
        size = sum(map(frame_nbytes, frames))
        request = self.builder.spill(key, size)
        handle = self.store.create(name_for_key(key, next(self._serial)), request)
        try:
            self.store.write(handle, frames)
        except BaseException:
            self.store.delete(handle, log=False)
            raise
        with self._lock:
            self._files[key] = handle

    def __getitem__(self, key: Hashable) -> bytearray:
        with self._lock:
            handle = self._files[key]
        return self.store.read(handle)

    def __delitem__(self, key: Hashable) -> None:
        with self._lock:
            handle = self._files.pop(key)
        self.store.delete(handle)

    def __contains__(self, key: object) -> bool:
        return key in self._files

    def __iter__(self) -> Iterator[Hashable]:
        with self._lock:
            return iter(list(self._files))

    def __len__(self) -> int:
        return len(self._files)

    def handle(self, key: Hashable) -> TempFile:
        """The temporary file holding ``key`` (for inspection)."""
        return self._files[key]


def check_spill_compatible() -> None:
    """Raise :class:`StorageError` if distributed's ``SpillBuffer`` lacks the hook used here."""
    with tempfile.TemporaryDirectory() as scratch:
        probe = SpillBuffer(scratch, target=1)
        slow = getattr(probe, "_slow_uncached", None)
        if slow is None or not isinstance(getattr(slow, "d", None), MutableMapping):
            import distributed

            raise StorageError(
                f"distributed {distributed.__version__}'s SpillBuffer has no Slow store with a "
                "'d' file mapping; placement.storage's spill hook supports distributed 2023-2026.8"
            )


class TieredSpillBuffer(SpillBuffer):
    """Dask's ``SpillBuffer`` whose spilled keys live in a :class:`TieredFileStore`.

    Parameters
    ----------
    store : TieredFileStore
        Where spilled keys go; shared with the P2P hooks of the same worker.
    target : int
        Managed memory, in bytes, above which least-recently-used keys are spilled.
    max_spill : int or False, optional
        Most bytes spilled to disk at once (``False``: no limit).
    builder : RequestBuilder, optional
        Gathers each file's creation-time facts; a new one by default.
    memory_limit : int, optional
        Worker memory limit in bytes, for the ``memory_pressure`` fact.
    log_writer : LogWriter, optional
        The log writer fed by ``store`` (kept here so the worker plugin can flush it).
    explicit_target : bool, optional
        Whether ``target`` was chosen by the caller (default True). When False it is a
        placeholder default, and the worker plugin sets it from the worker's memory
        limit; an explicit target is kept.
    """

    def __init__(
        self,
        store: TieredFileStore,
        *,
        target: int,
        max_spill: int | Literal[False] = False,
        builder: RequestBuilder | None = None,
        memory_limit: int | None = None,
        log_writer: LogWriter | None = None,
        explicit_target: bool = True,
    ) -> None:
        if not isinstance(target, int) or target < 0:
            raise StorageConfigError(f"target={target!r} must be a non-negative number of bytes")
        # Slow() insists on a directory for its zict.File; the mapping is replaced below,
        # so nothing is ever written there.
        with tempfile.TemporaryDirectory(prefix="placement-unused-") as scratch:
            super().__init__(scratch, target=target, max_spill=max_spill)
        self.store = store
        self.builder = builder or RequestBuilder()
        self.memory_limit = memory_limit
        self.log_writer = log_writer
        #: Whether ``target`` was chosen by the caller rather than defaulted.
        self.explicit_target = explicit_target
        self.builder.memory_pressure = self._memory_pressure
        self.files = SpillFiles(store, self.builder)
        self._slow_uncached.d = cast(Any, self.files)

    def _memory_pressure(self) -> float | None:
        if not self.memory_limit:
            return None
        return float(cast(Any, self.fast).total_weight) / float(self.memory_limit)

    def set_memory_limit(self, memory_limit: int, target_fraction: float | None) -> None:
        """Adopt the worker's memory limit (bytes) and, if given, set ``target`` from it."""
        self.memory_limit = int(memory_limit)
        if target_fraction:
            cast(Any, self).n = int(memory_limit * target_fraction)

    def close(self) -> None:
        """Delete every spill file (logging its row), flush and close the log writer."""
        if "store" not in self.__dict__:
            # refused in __init__ (zict's __del__ still calls close): the store given
            # stays its caller's to close
            return
        self.store.close()
        if self.log_writer is not None:
            self.log_writer.close()


def tiered_spill_buffer(
    worker_local_directory: str,
    *,
    ssd_dir: str | os.PathLike[str] | None = None,
    hdd_dir: str | os.PathLike[str] | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    chooser: TierChooser | None = None,
    memory_limit: int | str | None = None,
    target: int | str | None = None,
    max_spill: int | str | Literal[False] | None = None,
    log_max_rows: int = 2000,
    log_max_interval_s: float = 30.0,
) -> TieredSpillBuffer:
    """Build a worker's :class:`TieredSpillBuffer` (use as ``data=(tiered_spill_buffer, kwargs)``).

    Parameters
    ----------
    worker_local_directory : str
        Filled in by Dask; default tier directories go below it.
    ssd_dir, hdd_dir : path, optional
        Tier directories; default Dask config ``placement.ssd-dir`` / ``placement.hdd-dir``,
        else ``<worker_local_directory>/placement-{ssd,hdd}``.
    log_dir : path, optional
        Where log files go; default Dask config ``placement.log-dir``; ``None``: no log.
    chooser : TierChooser, optional
        Tier chooser; default ``FixedTier(Tier.HDD)``.
    memory_limit : int or str, optional
        Worker memory limit (bytes or ``"2GiB"``); ``target`` defaults to it times
        ``distributed.worker.memory.target``. Without it (and without ``target``), the
        worker plugin sets the target from the worker's own limit when it starts.
    target : int or str, optional
        Explicit spill target in bytes; kept as given (the worker plugin does not
        replace it).
    max_spill : int, str or False, optional
        Default Dask config ``distributed.worker.memory.max-spill``.
    log_max_rows, log_max_interval_s
        Flush policy of the log writer (rows; seconds).

    Raises
    ------
    StorageConfigError
        If the tier directories are one, or a directory cannot be created or written
        (:func:`~placement.storage.config.check_storage_dirs`), or ``target`` is negative;
        nothing is left behind.
    """
    ssd, hdd = tier_dirs(
        worker_local_directory,
        os.fspath(ssd_dir) if ssd_dir else None,
        os.fspath(hdd_dir) if hdd_dir else None,
    )
    logs = log_dir or config_dir(LOG_DIR_KEY)
    check_storage_dirs(ssd, hdd, os.fspath(logs) if logs else None)
    limit = parse_bytes(memory_limit) if isinstance(memory_limit, str) else memory_limit
    if target is not None:
        target_bytes = parse_bytes(target) if isinstance(target, str) else int(target)
    elif limit:
        fraction = default_target_fraction()
        target_bytes = int(limit * fraction) if fraction else sys.maxsize
    else:
        target_bytes = sys.maxsize
    if max_spill is None:
        max_spill = dask.config.get("distributed.worker.memory.max-spill", default=False)
    spill_limit: int | Literal[False] = (
        False
        if max_spill is False
        else (parse_bytes(max_spill) if isinstance(max_spill, str) else int(max_spill))
    )
    # spilling and deleting keys run on the worker's event loop as well as in its threads:
    # the flushes their rows make due are written by the writer's own thread
    writer = (
        LogWriter(
            logs,
            max_rows=log_max_rows,
            max_interval_s=log_max_interval_s,
            flush_mode=FlushMode.BACKGROUND,
        )
        if logs
        else None
    )
    store = TieredFileStore(ssd_dir=ssd, hdd_dir=hdd, chooser=chooser, sink=writer, label="worker")
    try:
        return TieredSpillBuffer(
            store,
            target=target_bytes,
            max_spill=spill_limit,
            memory_limit=limit,
            log_writer=writer,
            explicit_target=target is not None,
        )
    except BaseException:  # a refused target: release the store's folders and locks
        store.close()
        if writer is not None:
            writer.close()
        raise
