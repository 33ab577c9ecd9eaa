"""Route Dask P2P shuffle and rechunk files through a :class:`TieredFileStore`.

Dask's P2P extension writes each output partition a worker receives to
``<local_directory>/shuffle-<id>-<run>/<partition>`` through a ``DiskShardsBuffer``
(appending shards as they arrive, reading the whole file once when the output task
runs, deleting the directory when the shuffle run closes). :class:`TieredDiskShardsBuffer`
is that buffer with three methods changed:

* ``_write_frames(frames, id)``: the first write of a partition creates a tiered file
  (``file_kind="shuffle"`` for dataframes, ``"rechunk"`` for arrays) and every write
  appends to it through the store (counted);
* the ``read`` callback: seals the file, lets Dask's own reader (Arrow stream reader,
  or ``mmap`` for arrays) read it from its tier, and counts the read;
* ``close()``: after Dask's cleanup, deletes each file through the store (one log row each)
  and the run's folder on both tiers
  (:meth:`~placement.storage.store.TieredFileStore.remove_folder`), so that a long-lived
  worker does not collect an empty folder per shuffle run.

:class:`ShuffleFileRouter` installs it for one worker.

Version dependency (checked by :func:`check_p2p_compatible`, tested with distributed
2026.8): ``distributed.shuffle._core.ShuffleRun.__init__`` builds its disk buffer as
``DiskShardsBuffer(directory=..., read=self.read, memory_limiter=...)`` from the
``distributed.shuffle._core`` module namespace, and ``DiskShardsBuffer`` has
``_write_frames(frames, id)``, ``read(id)`` (which calls ``read(path)`` with
``path.name == id``) and ``async close()``. The router replaces that one name in
``distributed.shuffle._core`` with a factory that builds tiered buffers for routed
workers and Dask's original buffer for all others, and restores it when the last
router is uninstalled. If the check fails, P2P files stay where Dask puts them (not
counted) and a warning says why.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import distributed.shuffle._core as _p2p_core
from distributed.shuffle._disk import DiskShardsBuffer

from placement.storage.context import RequestBuilder
from placement.storage.errors import StorageError
from placement.storage.request import FileKind
from placement.storage.store import TempFile, TieredFileStore

logger = logging.getLogger(__name__)

_ORIGINAL_BUFFER = DiskShardsBuffer


class TieredDiskShardsBuffer(DiskShardsBuffer):
    """Dask's ``DiskShardsBuffer`` whose files live in a :class:`TieredFileStore`.

    Parameters
    ----------
    directory, read, memory_limiter
        As Dask passes them (``read`` is the shuffle run's bound ``read(path)`` method).
    store : TieredFileStore
        Where the partition files go.
    builder : RequestBuilder
        Gathers each file's creation-time facts.
    """

    def __init__(
        self,
        directory: str | Path,
        read: Callable[[Path], tuple[Any, int]],
        memory_limiter: Any,
        *,
        store: TieredFileStore,
        builder: RequestBuilder,
    ) -> None:
        self._store = store
        self._builder = builder
        self._inner_read = read
        self._run = getattr(read, "__self__", None)
        self._files: dict[str, TempFile] = {}
        self._files_lock = threading.Lock()
        self._run_dir = Path(directory).name
        super().__init__(directory=directory, read=self._read_tiered, memory_limiter=memory_limiter)

    @property
    def file_kind(self) -> FileKind:
        """``rechunk`` for array rechunks, ``shuffle`` otherwise."""
        return (
            FileKind.RECHUNK if type(self._run).__name__ == "ArrayRechunkRun" else FileKind.SHUFFLE
        )

    def _file(self, id: str) -> TempFile:
        with self._files_lock:
            handle = self._files.get(id)
            if handle is None:
                run = self._run
                worker_for = getattr(run, "worker_for", None)
                n_out = len(worker_for) if worker_for is not None else None
                request = self._builder.p2p(self.file_kind, str(getattr(run, "id", "")), n_out)
                handle = self._store.create(f"{self._run_dir}/{id}", request)
                self._files[id] = handle
            return handle

    def _write_frames(self, frames: Iterable[Any], id: str) -> None:
        self._store.append(self._file(str(id)), list(frames))

    def _read_tiered(self, path: Path) -> tuple[Any, int]:
        with self._files_lock:
            handle = self._files.get(path.name)
        if handle is None:
            raise FileNotFoundError(path)
        data, size = self._inner_read(self._store.read_path(handle))
        self._store.record_read(handle, size)
        return data, size

    @property
    def files(self) -> list[TempFile]:
        """This buffer's live files."""
        with self._files_lock:
            return list(self._files.values())

    async def close(self) -> None:
        """Close Dask's buffer, then delete every file (one row each) and the run's folder
        on both tiers, best-effort: a file that fails to delete is logged and the others
        are still deleted (its folder then stays until the store closes).

        Dask's close is the end of the run's writes: it waits for the writes in flight
        and refuses later ones (``Already closed``), and no other run writes in this
        run's folder (``shuffle-<id>-<run id>``), so the folder can go with the files.
        """
        try:
            await super().close()
        finally:
            with self._files_lock:
                handles, self._files = list(self._files.values()), {}
            for handle in handles:
                try:
                    self._store.delete(handle)
                except Exception:
                    logger.exception("deleting the shuffle file %r failed", handle)
            try:
                self._store.remove_folder(self._run_dir)
            except Exception:
                logger.exception("removing the shuffle folder %r failed", self._run_dir)


class _Route:
    def __init__(self, store: TieredFileStore, builder: RequestBuilder) -> None:
        self.store = store
        self.builder = builder


_routes: dict[str, _Route] = {}
_routes_lock = threading.Lock()


def _buffer_factory(
    directory: str | Path, read: Callable[[Path], tuple[Any, int]], memory_limiter: Any
) -> Any:
    """Stands in for ``DiskShardsBuffer`` in ``distributed.shuffle._core``."""
    run = getattr(read, "__self__", None)
    route = _routes.get(str(getattr(run, "local_address", "")))
    if route is None:
        return _ORIGINAL_BUFFER(directory=directory, read=read, memory_limiter=memory_limiter)
    return TieredDiskShardsBuffer(
        directory, read, memory_limiter, store=route.store, builder=route.builder
    )


def check_p2p_compatible() -> None:
    """Raise :class:`StorageError` if the installed distributed lacks the hook points used here."""
    import distributed

    problems = []
    current = getattr(_p2p_core, "DiskShardsBuffer", None)
    if current is not _ORIGINAL_BUFFER and current is not _buffer_factory:
        problems.append("distributed.shuffle._core.DiskShardsBuffer is not the disk buffer class")
    params = list(inspect.signature(_ORIGINAL_BUFFER.__init__).parameters)
    if params[:4] != ["self", "directory", "read", "memory_limiter"]:
        problems.append(f"DiskShardsBuffer.__init__ takes {params}")
    for name in ("_write_frames", "read", "close"):
        if not callable(getattr(_ORIGINAL_BUFFER, name, None)):
            problems.append(f"DiskShardsBuffer has no {name}()")
    if problems:
        raise StorageError(
            f"distributed {distributed.__version__} does not offer the P2P hook points "
            f"placement.storage uses ({'; '.join(problems)}); P2P files are not routed. "
            "Supported: distributed 2026.8"
        )


class ShuffleFileRouter:
    """Routes one worker's P2P shuffle and rechunk files through ``store``.

    Parameters
    ----------
    store : TieredFileStore
        The worker's store.
    builder : RequestBuilder
        The worker's fact gatherer.
    address : str
        The worker's address (P2P runs carry it as ``local_address``).
    """

    def __init__(self, store: TieredFileStore, builder: RequestBuilder, address: str) -> None:
        self.store = store
        self.builder = builder
        self.address = str(address)
        self.installed = False

    def install(self) -> None:
        """Start routing this worker's P2P files (raises :class:`StorageError` if unsupported)."""
        check_p2p_compatible()
        with _routes_lock:
            _routes[self.address] = _Route(self.store, self.builder)
            _p2p_core.DiskShardsBuffer = _buffer_factory  # type: ignore[misc,assignment]
        self.installed = True

    def uninstall(self) -> None:
        """Stop routing; restores Dask's buffer once no worker in this process is routed."""
        with _routes_lock:
            _routes.pop(self.address, None)
            if not _routes:
                _p2p_core.DiskShardsBuffer = _ORIGINAL_BUFFER  # type: ignore[misc]
        self.installed = False
