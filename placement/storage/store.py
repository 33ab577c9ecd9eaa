"""A tiered store of temporary files whose I/O is counted, one log row per file.

:class:`TieredFileStore` creates each file on the tier its
:class:`~placement.storage.chooser.TierChooser` picks, counts the file's reads and
writes (operations and bytes), its largest size and its life, and when the file is
deleted hands one row of the placement log schema (:mod:`placement.schema`) to its
:class:`RowSink` (normally a :class:`~placement.logwriter.LogWriter`).

Layout
------
Each store owns one directory per tier, ``<tier_dir>/store-<host>-<pid>-<token>``, and a
lock file beside it (``store-....lock``) that it holds (``flock``) while alive. Several
stores (one per Dask worker process) share the same tier directories safely.

What happens on failure
-----------------------
* **SSD full** (``ENOSPC``/``EDQUOT`` while writing on SSD): the file moves to HDD
  (bytes already appended are copied over) and the write is retried there; the caller
  never sees the error. The row's ``tier`` column says where the file ended.
* **Both tiers fail**: :class:`~placement.storage.errors.TierIOError`, an ``OSError``
  with the original ``errno``; nothing already stored is lost.
* **Process killed mid-write**: bytes are written to ``<name>.partial`` and renamed to
  ``<name>`` only when complete (:meth:`TieredFileStore.write`) or when the file is
  sealed for reading (:meth:`TieredFileStore.seal`), so a partial file is never read
  back. The dead store's lock is released by the kernel; the next store created on the
  same tier directories removes the dead store's directory
  (:meth:`TieredFileStore.cleanup_orphans`). The files it held never get a log row:
  the cleaner counts them (and their bytes, per dead store and tier), logs a warning
  and hands the count to its sink's ``record_unlogged`` when it has one
  (:meth:`~placement.logwriter.LogWriter.record_unlogged` keeps it beside the logs).
* **Unsafe names** (``..``, absolute paths, symlinks): refused with
  :class:`~placement.storage.errors.UnsafePathError` before anything is touched.
* **Chooser raises**: the file goes to HDD and the error is logged.
* **Sink raises**: the row is dropped with a logged error; the file is still deleted.
* **A file cannot be removed** (``unlink`` fails): the error is logged and the row is
  still emitted; :meth:`TieredFileStore.close` goes on with the other files and always
  removes the store's directories and releases its locks.

Operations are counted at the store's interface: one :meth:`~TieredFileStore.write`,
:meth:`~TieredFileStore.append`, :meth:`~TieredFileStore.read` or
:meth:`~TieredFileStore.read_range` call is one operation, whatever its size (bytes are
counted separately). Copies made when a file moves to HDD are not counted: they are the
store's work, not the application's.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from placement.errors import PlacementTypeError
from placement.storage.chooser import FixedTier, TierChooser
from placement.storage.errors import StorageConfigError, StorageError, TierIOError
from placement.storage.paths import PARTIAL_SUFFIX, resolve_within
from placement.storage.request import FileRequest
from placement.tier import Tier

logger = logging.getLogger(__name__)

Buffer = bytes | bytearray | memoryview
Data = Buffer | Sequence[Buffer] | Iterable[Buffer]

STORE_PREFIX = "store-"
LOCK_SUFFIX = ".lock"
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


#: Most file names a record of unlogged files lists (the counts cover every file).
UNLOGGED_SAMPLE = 100


class RowSink(Protocol):
    """Receives one log row (schema column -> value) per deleted file.

    A sink may also have ``record_unlogged(record)`` (as
    :class:`~placement.logwriter.LogWriter` has): it then receives the count of the files of
    dead stores that a cleanup removed without a row (:meth:`TieredFileStore.cleanup_orphans`).
    """

    def add(self, row: Mapping[str, Any]) -> None:
        """Take ``row``; must be thread-safe."""
        ...


@dataclass
class DeadStoreFiles:
    """What a cleanup found in one dead store's directory on one tier: the files that went
    without a log row (a file and its ``.partial`` count once), in bytes on disk."""

    store: str
    tier: Tier
    files: int = 0
    bytes: int = 0
    names: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "tier": self.tier.value,
            "files": self.files,
            "bytes": self.bytes,
            "names": list(self.names),
        }


@dataclass
class FileStats:
    """I/O of one file so far: operations, bytes (in bytes) and sizes (in bytes)."""

    read_ops: int = 0
    write_ops: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    size_bytes: int = 0  # largest size reached
    current_bytes: int = 0  # size now


class TempFile:
    """Handle to one temporary file of a :class:`TieredFileStore`.

    Handles are created by :meth:`TieredFileStore.create`; all I/O goes through the
    store. One handle must not be written from two threads at once.
    """

    __slots__ = (
        "deleted",
        "fell_back",
        "file_id",
        "name",
        "partial_pending",
        "path",
        "request",
        "sealed",
        "stats",
        "tier",
    )

    def __init__(
        self, file_id: str, name: str, request: FileRequest, tier: Tier, path: Path
    ) -> None:
        self.file_id = file_id
        self.name = name
        self.request = request
        self.tier = tier
        self.path = path
        self.stats = FileStats()
        self.sealed = False
        self.deleted = False
        self.fell_back = False
        #: A whole write began and has not renamed its ``.partial`` yet (it may be running,
        #: or have failed): the one time a sealed file may have a ``.partial`` beside it.
        self.partial_pending = False

    @property
    def partial_path(self) -> Path:
        """Where bytes go until the file is complete (``<path>.partial``)."""
        return self.path.with_name(self.path.name + PARTIAL_SUFFIX)

    def __repr__(self) -> str:
        return f"<TempFile {self.name!r} on {self.tier.value}, {self.stats.current_bytes} bytes>"


def _as_frames(data: Data) -> list[Buffer]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return [data]
    return list(data)


def frame_nbytes(frame: Buffer) -> int:
    """Length of one frame, in bytes."""
    return frame.nbytes if isinstance(frame, memoryview) else len(frame)


#: Most frames one ``writev`` takes (Linux's ``IOV_MAX``).
_IOV_MAX = 1024
#: Largest write, in bytes, that goes out as one gathered ``writev``; larger ones are written
#: frame by frame through a buffered file. On busy Dask workers a gathered write of a few
#: hundred kilobytes (P2P shards) took about 20 microseconds less CPU than the buffered file,
#: but one of several megabytes (spilled keys) took about 1.5 times as much.
_GATHER_MAX_BYTES = 1 << 20


def _nbytes(frame: Buffer) -> int:
    """Bytes of a frame of any buffer type (``len`` of a memoryview counts its items)."""
    if isinstance(frame, (bytes, bytearray)):
        return len(frame)
    return memoryview(frame).nbytes


def _write_frames(fd: int, frames: Sequence[Buffer]) -> None:
    """Write every frame to ``fd`` (the store's one low-level write; faults are injected here).

    Up to :data:`_GATHER_MAX_BYTES` in at most :data:`_IOV_MAX` frames: one gathered write
    (``writev``) straight from the frames, going on from the first byte not written after a
    short write. Larger writes: through a buffered file, one ``write`` per large frame.
    Errors are the ``OSError`` of the failing call.
    """
    pending = list(frames)
    sizes = [_nbytes(f) for f in pending]
    if len(pending) > _IOV_MAX or sum(sizes) > _GATHER_MAX_BYTES:
        with open(fd, "wb", closefd=False) as fh:
            fh.writelines(pending)
            fh.flush()
        return
    start = 0
    while start < len(pending):
        written = got = os.writev(fd, pending[start:])
        while start < len(pending) and written >= sizes[start]:
            written -= sizes[start]
            start += 1
        if start == len(pending):
            return
        if got == 0:
            raise OSError(errno.EIO, f"a write to descriptor {fd} made no progress")
        # a short write: resume inside the frame it stopped in
        pending[start] = memoryview(pending[start]).cast("B")[written:]
        sizes[start] -= written


class TieredFileStore:
    """Temporary files on an SSD or HDD directory, with their I/O counted and logged.

    Parameters
    ----------
    ssd_dir, hdd_dir : str or Path
        Tier directories (created if missing). They must differ.
    chooser : TierChooser, optional
        Picks each new file's tier; default ``FixedTier(Tier.HDD)``.
    sink : RowSink, optional
        Receives one schema row per deleted file; ``None`` keeps no log.
    clock : callable, optional
        Wall clock in seconds since the epoch (``time.time``); used for ``deleted_at``.
    cleanup : bool, optional
        Remove directories of dead stores on the tier directories first (default True).
    label : str, optional
        Readable prefix of this store's directory and of its file ids.

    Examples
    --------
    >>> store = TieredFileStore(ssd_dir=tmp / "ssd", hdd_dir=tmp / "hdd")   # doctest: +SKIP
    >>> f = store.create("part-0", FileRequest(file_kind="spill", created_at=time.time()))
    >>> store.write(f, b"abc"); bytes(store.read(f))
    b'abc'
    >>> row = store.delete(f)   # row["write_ops"] == 1, row["read_bytes"] == 3
    """

    def __init__(
        self,
        *,
        ssd_dir: str | os.PathLike[str],
        hdd_dir: str | os.PathLike[str],
        chooser: TierChooser | None = None,
        sink: RowSink | None = None,
        clock: Callable[[], float] = time.time,
        cleanup: bool = True,
        label: str | None = None,
    ) -> None:
        tier_dirs = {Tier.SSD: Path(ssd_dir), Tier.HDD: Path(hdd_dir)}
        for tier, directory in tier_dirs.items():
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(
                    f"cannot create the {tier.value} directory {directory}: {exc}; "
                    "point it at a writable directory"
                ) from exc
        if tier_dirs[Tier.SSD].resolve() == tier_dirs[Tier.HDD].resolve():
            raise StorageConfigError(
                f"ssd_dir and hdd_dir are the same directory ({tier_dirs[Tier.SSD]}); "
                "give each tier its own directory"
            )
        if chooser is None:
            chooser = FixedTier(Tier.HDD)
        if not callable(getattr(chooser, "choose", None)):
            raise PlacementTypeError(f"chooser={chooser!r} has no choose(request) method")
        self.tier_dirs = tier_dirs
        self.chooser = chooser
        self.sink = sink
        self.clock = clock
        self.host = socket.gethostname()
        token = uuid.uuid4().hex[:8]
        self.label = f"{label or STORE_PREFIX.rstrip('-')}-{os.getpid()}-{token}"
        self._lock = threading.Lock()
        self._live: dict[str, TempFile] = {}
        self._serial = 0
        self._closed = False
        #: Files moved from SSD to HDD because the SSD was full.
        self.fallbacks = 0
        #: Rows the sink refused.
        self.rows_dropped = 0
        #: Files of dead stores that this store's cleanups removed without a log row.
        self.orphans_unlogged = 0
        self.orphans_removed = self.cleanup_orphans() if cleanup else 0
        self._lock_fds: list[int] = []
        self.roots: dict[Tier, Path] = {}
        dirname = f"{STORE_PREFIX}{self.host}-{os.getpid()}-{token}"
        try:
            for tier, directory in tier_dirs.items():
                self._lock_fds.append(_take_lock(directory, dirname))
                self.roots[tier] = directory / dirname  # locked: released below on failure
                self.roots[tier].mkdir()
        except BaseException:  # nothing of a store that never started is left behind
            self._release()
            raise

    # ------------------------------------------------------------------ lifecycle
    def cleanup_orphans(self) -> int:
        """Remove the directories of dead stores from both tier directories.

        A store is dead when nobody holds its lock file (its process has exited or was
        killed). Live stores, including those of other processes, are left alone, and so
        are stores of other users and any whose lock file cannot be opened or locked.

        The files a dead store held when it died never got a log row. They are counted
        (:attr:`orphans_unlogged`), a warning names the count and the dead stores, and
        the count goes to the sink's ``record_unlogged`` when it has one (see
        :class:`RowSink`), so the loss is written down beside the logs.

        Returns
        -------
        int
            Number of files removed.
        """
        removed = 0
        found: list[DeadStoreFiles] = []
        for tier, directory in self.tier_dirs.items():
            removed += _remove_dead_stores(directory, tier, found)
        if removed:
            logger.info("removed %d orphaned temporary file(s) left by dead stores", removed)
        lost = [d for d in found if d.files]
        if lost:
            self._record_unlogged(lost)
        return removed

    def _record_unlogged(self, lost: list[DeadStoreFiles]) -> None:
        """Count, log and record the files of dead stores that went without a row."""
        files = sum(d.files for d in lost)
        nbytes = sum(d.bytes for d in lost)
        with self._lock:
            self.orphans_unlogged += files
        stores = sorted({d.store for d in lost})
        logger.warning(
            "%d temporary file(s) (%d bytes) of %d dead store(s) (%s) were removed without a "
            "log row: their process died without closing its store (SIGKILL, a crash)",
            files,
            nbytes,
            len(stores),
            ", ".join(stores),
        )
        record_unlogged = getattr(self.sink, "record_unlogged", None)
        if record_unlogged is None:
            return
        record = {
            "files": files,
            "bytes": nbytes,
            "recorded_at": self.clock(),
            "recorded_by": self.label,
            "host": self.host,
            "stores": [d.to_dict() for d in lost],
        }
        try:
            record_unlogged(record)
        except Exception:  # the warning above still names the loss
            logger.exception("recording %d unlogged temporary file(s) failed", files)

    def close(self) -> None:
        """Delete every live file (emitting its row), remove this store's directories.

        Idempotent and best-effort: a file that cannot be deleted is logged and the
        others are still deleted; the directories, lock files and locks are always
        released. The store cannot create files afterwards.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live = list(self._live.values())
        try:
            for handle in live:
                try:
                    self._delete(handle)
                except Exception:
                    logger.exception("deleting %r while closing %s failed", handle, self.label)
        finally:
            self._release()

    def _release(self) -> None:
        """Remove this store's directories and lock files and drop its locks."""
        for tier, root in self.roots.items():
            shutil.rmtree(root, ignore_errors=True)
            lock_path = self.tier_dirs[tier] / (root.name + LOCK_SUFFIX)
            try:
                _unlink(lock_path)
            except OSError as exc:
                logger.error("could not remove the store lock file %s: %s", lock_path, exc)
        fds, self._lock_fds = self._lock_fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError as exc:
                logger.error("could not close a lock of %s: %s", self.label, exc)

    def __enter__(self) -> TieredFileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ creation
    def create(self, name: str, request: FileRequest, *, tier: Tier | None = None) -> TempFile:
        """Register a new file called ``name`` and pick its tier (nothing is written yet).

        Parameters
        ----------
        name : str
            Relative name, unique among this store's live files (``/`` makes sub-folders).
        request : FileRequest
            Creation-time facts handed to the chooser and copied into the log row.
        tier : Tier, optional
            Force a tier instead of asking the chooser.

        Raises
        ------
        UnsafePathError
            If ``name`` would escape the tier directory.
        StorageError
            If a live file already has this name, or the store is closed.
        """
        if not isinstance(request, FileRequest):
            raise PlacementTypeError(f"request must be a FileRequest, got {type(request).__name__}")
        chosen = Tier(tier) if tier is not None else self._choose(request)
        path = resolve_within(self.roots[chosen], name)
        with self._lock:
            if self._closed:
                raise StorageError(f"the store {self.label} is closed; cannot create {name!r}")
            if name in self._live:
                raise StorageError(
                    f"a temporary file named {name!r} already exists in {self.label}"
                )
            self._serial += 1
            handle = TempFile(f"{self.label}-{self._serial}", name, request, chosen, path)
            self._live[name] = handle
        return handle

    def _choose(self, request: FileRequest) -> Tier:
        try:
            return Tier(self.chooser.choose(request))
        except Exception:  # a chooser must never fail a task: fall back to HDD
            logger.exception("tier chooser %r failed; placing the file on HDD", self.chooser)
            return Tier.HDD

    # ------------------------------------------------------------------ writing
    def write(self, handle: TempFile, data: Data) -> int:
        """Write the whole content of ``handle`` at once (replacing any), atomically.

        The bytes go to ``<name>.partial`` and are renamed to ``<name>`` when complete,
        and the file is sealed. Counts one write operation.

        Returns
        -------
        int
            Bytes written.
        """
        self._check_live(handle)
        frames = _as_frames(data)
        nbytes = sum(map(frame_nbytes, frames))
        try:
            self._write_whole(handle, frames)
        except OSError as exc:
            if handle.tier is not Tier.SSD or exc.errno not in _FULL_ERRNOS:
                raise TierIOError(
                    exc.errno, f"writing {handle.path} failed: {exc.strerror}"
                ) from exc
            self._move_to_hdd(handle, exc)
            try:
                self._write_whole(handle, frames)
            except OSError as exc2:
                raise TierIOError(
                    exc2.errno, f"writing {handle.path} failed: {exc2.strerror}"
                ) from exc2
        with self._lock:
            st = handle.stats
            st.write_ops += 1
            st.write_bytes += nbytes
            st.current_bytes = nbytes
            st.size_bytes = max(st.size_bytes, nbytes)
            handle.sealed = True
        return nbytes

    def _write_whole(self, handle: TempFile, frames: Sequence[Buffer]) -> None:
        partial = handle.partial_path
        handle.partial_pending = True  # until the .partial is renamed
        fd = _open_creating_parents(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW)
        try:
            try:
                _write_frames(fd, frames)
            finally:
                os.close(fd)
            os.replace(partial, handle.path)
        except BaseException:
            _unlink(partial)
            raise
        handle.partial_pending = False

    def append(self, handle: TempFile, data: Data) -> int:
        """Append to a file that is being built up (P2P shuffle output); one write operation.

        Bytes go to ``<name>.partial`` until :meth:`seal`.

        Raises
        ------
        StorageError
            If the file is already sealed (complete).
        """
        self._check_live(handle)
        if handle.sealed:
            raise StorageError(
                f"temporary file {handle.name!r} is sealed; it cannot be appended to"
            )
        frames = _as_frames(data)
        nbytes = sum(map(frame_nbytes, frames))
        before = handle.stats.current_bytes
        try:
            self._append(handle, frames)
        except OSError as exc:
            if handle.tier is not Tier.SSD or exc.errno not in _FULL_ERRNOS:
                _truncate(handle.partial_path, before)
                raise TierIOError(
                    exc.errno, f"appending to {handle.path} failed: {exc.strerror}"
                ) from exc
            _truncate(handle.partial_path, before)  # drop the torn tail before moving
            self._move_to_hdd(handle, exc)
            try:
                self._append(handle, frames)
            except OSError as exc2:
                _truncate(handle.partial_path, before)
                raise TierIOError(
                    exc2.errno, f"appending to {handle.path} failed: {exc2.strerror}"
                ) from exc2
        with self._lock:
            st = handle.stats
            st.write_ops += 1
            st.write_bytes += nbytes
            st.current_bytes = before + nbytes
            st.size_bytes = max(st.size_bytes, st.current_bytes)
        return nbytes

    def _append(self, handle: TempFile, frames: Sequence[Buffer]) -> None:
        partial = handle.partial_path
        fd = _open_creating_parents(partial, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW)
        try:
            _write_frames(fd, frames)
        finally:
            os.close(fd)

    def _move_to_hdd(self, handle: TempFile, cause: OSError) -> None:
        """Move ``handle`` (and any bytes it holds) from the full SSD to HDD."""
        old_partial, old_path = handle.partial_path, handle.path
        new_path = resolve_within(self.roots[Tier.HDD], handle.name)
        new_partial = new_path.with_name(new_path.name + PARTIAL_SUFFIX)
        try:
            new_path.parent.mkdir(parents=True, exist_ok=True)
            if old_partial.exists():
                shutil.copyfile(old_partial, new_partial, follow_symlinks=False)
            elif old_path.exists():
                shutil.copyfile(old_path, new_path, follow_symlinks=False)
        except OSError as exc:
            # the bytes stay on SSD, where the handle still points; drop the half copy,
            # which nothing tracks, from the HDD that is itself short of space
            _unlink(new_partial)
            _unlink(new_path)
            raise TierIOError(
                exc.errno, f"moving {handle.name!r} from SSD to HDD failed: {exc}"
            ) from exc
        _unlink(old_partial)
        _unlink(old_path)
        with self._lock:
            handle.tier = Tier.HDD
            handle.path = new_path
            handle.fell_back = True
            self.fallbacks += 1
        logger.info("SSD full (%s); %r placed on HDD instead", cause.strerror, handle.name)

    def seal(self, handle: TempFile) -> Path:
        """Mark an appended file complete (rename ``.partial`` to its name); return its path.

        Idempotent; a file never written becomes an empty file.
        """
        self._check_live(handle)
        with self._lock:
            if handle.sealed:
                return handle.path
            partial = handle.partial_path
            try:
                os.replace(partial, handle.path)
            except FileNotFoundError:
                handle.path.parent.mkdir(parents=True, exist_ok=True)
                os.close(os.open(handle.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            handle.sealed = True
            return handle.path

    # ------------------------------------------------------------------ reading
    def read(self, handle: TempFile) -> bytearray:
        """Read the whole file (sealing it first); one read operation.

        Returns
        -------
        bytearray
            The file's bytes (writable, as Dask's deserializers prefer).
        """
        path = self.seal(handle)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                size = os.fstat(fd).st_size
                buf = bytearray(size)
                with open(fd, "rb", closefd=False) as fh:
                    got = fh.readinto(buf)
            finally:
                os.close(fd)
        except OSError as exc:
            raise TierIOError(exc.errno, f"reading {path} failed: {exc.strerror}") from exc
        if got != size:
            raise TierIOError(errno.EIO, f"short read of {path}: {got} of {size} bytes")
        self.record_read(handle, size)
        return buf

    def read_range(self, handle: TempFile, offset: int, nbytes: int) -> bytearray:
        """Read ``nbytes`` bytes from byte ``offset`` (sealing the file first); one read
        operation, as a reader of records or batches would do.

        Raises
        ------
        StorageConfigError
            (A :class:`ValueError`.) If the range is negative or runs past the end of the file.
        """
        if offset < 0 or nbytes < 0:
            raise StorageConfigError(f"offset={offset} and nbytes={nbytes} must be >= 0")
        path = self.seal(handle)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                size = os.fstat(fd).st_size
                if offset + nbytes > size:
                    raise StorageConfigError(
                        f"range [{offset}, {offset + nbytes}) runs past the end of "
                        f"{handle.name!r} ({size} bytes)"
                    )
                # one pread returns at most ~2 GiB on Linux: loop until the range is read
                data = bytearray(nbytes)
                view, done = memoryview(data), 0
                while done < nbytes:
                    n = os.preadv(fd, [view[done:]], offset + done)
                    if n == 0:
                        break
                    done += n
            finally:
                os.close(fd)
        except OSError as exc:
            raise TierIOError(exc.errno, f"reading {path} failed: {exc.strerror}") from exc
        if done != nbytes:
            raise TierIOError(errno.EIO, f"short read of {path}: {done} of {nbytes} bytes")
        self.record_read(handle, nbytes)
        return data

    def read_path(self, handle: TempFile) -> Path:
        """Seal the file and return its path for a caller that reads it itself
        (e.g. memory-maps it); the caller reports the read with :meth:`record_read`."""
        return self.seal(handle)

    def record_read(self, handle: TempFile, nbytes: int, ops: int = 1) -> None:
        """Count ``ops`` read operations of ``nbytes`` bytes in total on ``handle``."""
        with self._lock:
            handle.stats.read_ops += ops
            handle.stats.read_bytes += int(nbytes)

    # ------------------------------------------------------------------ deleting
    def delete(self, handle: TempFile, *, log: bool = True) -> dict[str, Any] | None:
        """Delete the file and emit its log row; ``None`` if it was already deleted.

        ``log=False`` abandons a file that never held data (its first write failed):
        it is removed without a row. A file that cannot be removed from disk is logged
        as an error; its row is still emitted and the store's directory, removed when
        the store closes, takes it with it.
        """
        return self._delete(handle, log=log)

    def _delete(self, handle: TempFile, *, log: bool = True) -> dict[str, Any] | None:
        with self._lock:
            if handle.deleted:
                return None
            handle.deleted = True
            self._live.pop(handle.name, None)
        # A sealed file's bytes are all under its name: its .partial was renamed (unless a
        # whole write of it is running or failed), so only an unsealed one is looked for.
        if handle.sealed and not handle.partial_pending:
            paths: tuple[Path, ...] = (handle.path,)
        else:
            paths = (handle.partial_path, handle.path)
        for path in paths:
            try:
                _unlink(path)
            except OSError as exc:
                logger.error("could not remove the temporary file %s: %s", path, exc)
        row = self.row_of(handle, deleted_at=self.clock())
        if log and self.sink is not None:
            try:
                self.sink.add(row)
            except Exception:
                with self._lock:  # deletes run on several threads
                    self.rows_dropped += 1
                logger.exception("log sink %r refused the row of %r", self.sink, handle.name)
        return row

    def remove_folder(self, name: str) -> int:
        """Remove the sub-folder ``name`` (made by file names such as ``name/part-3``) on both
        tiers, once no live file lies in it: when the files of a P2P shuffle run are deleted
        (:class:`~placement.storage.shuffle.TieredDiskShardsBuffer`), its folder goes with them
        rather than staying empty until the store closes.

        A folder is removed only while it is empty and no live file of this store lies in it,
        checked under the store's lock: a file created in it from then on (whose name makes
        it live at :meth:`create`, before it is written) finds no folder and makes it again
        when written, and a file still live keeps the folder. Other folders of ``name``'s
        path, and a folder that still holds something on disk, are left.

        Parameters
        ----------
        name : str
            Relative folder name, as in the file names given to :meth:`create`.

        Returns
        -------
        int
            Tier folders removed (0, 1 or 2); 0 as well when a live file lies in the folder
            or the store is closed.

        Raises
        ------
        UnsafePathError
            If ``name`` would escape the tier directory.
        TierIOError
            If a folder cannot be removed for another reason than its absence or content.
        """
        paths = [resolve_within(root, name) for root in self.roots.values()]
        prefix = name + "/"
        removed = 0
        with self._lock:
            if self._closed or any(live.startswith(prefix) for live in self._live):
                return 0
            for path in paths:
                try:
                    os.rmdir(path)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        continue
                    raise TierIOError(
                        exc.errno, f"removing the folder {path} failed: {exc.strerror}"
                    ) from exc
                removed += 1
        return removed

    def row_of(self, handle: TempFile, *, deleted_at: float) -> dict[str, Any]:
        """The log-schema row of ``handle`` as if it were deleted at ``deleted_at``."""
        row = handle.request.to_row()
        if row.get("host") is None:
            row["host"] = self.host
        st = handle.stats
        row.update(
            file_id=handle.file_id,
            deleted_at=float(deleted_at),
            size_bytes=st.size_bytes,
            read_ops=st.read_ops,
            write_ops=st.write_ops,
            read_bytes=st.read_bytes,
            write_bytes=st.write_bytes,
            tier=handle.tier.value,
        )
        return row

    # ------------------------------------------------------------------ inspection
    def get(self, name: str) -> TempFile | None:
        """The live file called ``name``, if any."""
        with self._lock:
            return self._live.get(name)

    def live_files(self) -> list[TempFile]:
        """Files created and not yet deleted."""
        with self._lock:
            return list(self._live.values())

    def usage(self) -> dict[Tier, int]:
        """Bytes held now by live files on each tier."""
        out = {Tier.SSD: 0, Tier.HDD: 0}
        with self._lock:
            for handle in self._live.values():
                out[handle.tier] += handle.stats.current_bytes
        return out

    def _check_live(self, handle: TempFile) -> None:
        if handle.deleted:
            raise StorageError(f"temporary file {handle.name!r} was already deleted")

    def __repr__(self) -> str:
        return f"<TieredFileStore {self.label}: {len(self._live)} live files>"


# ---------------------------------------------------------------------- helpers
def _open_creating_parents(path: Path, flags: int) -> int:
    """``os.open(path, flags, 0o600)``, creating missing parent folders on the first miss."""
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o600)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _truncate(path: Path, size: int) -> None:
    try:
        os.truncate(path, size)
    except FileNotFoundError:
        pass


def _take_lock(directory: Path, dirname: str, *, attempts: int = 100) -> int:
    """Create and hold ``<directory>/<dirname>.lock``; return its descriptor.

    The lock is taken on a temporary name and renamed into place, so a cleaner never
    sees a live store's lock file unlocked. A cleaner of another store may find the
    temporary file in the instant between its creation and its lock, see it unlocked
    and remove it (or hold it while removing it): then the lock is simply taken again
    on a fresh file.

    Raises
    ------
    StorageError
        If the lock could not be taken in ``attempts`` tries.
    """
    tmp = directory / f".{dirname}{LOCK_SUFFIX}.tmp"
    final = directory / f"{dirname}{LOCK_SUFFIX}"
    for _ in range(attempts):
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.stat(tmp, follow_symlinks=False).st_ino:
                raise FileNotFoundError(tmp)  # a cleaner removed it before we locked it
            os.replace(tmp, final)
            return fd
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            time.sleep(0.001)
        except BaseException:
            os.close(fd)
            raise
    raise StorageError(
        f"could not take the store lock {final} in {attempts} attempts; another process "
        "keeps removing it - check that nothing else cleans this tier directory"
    )


def _remove_if_unlocked(path: Path) -> None:
    """Remove a stray lock file left by a process killed while taking it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _unlink(path)
    except OSError:
        pass  # locked by a live store, or not ours to remove
    finally:
        os.close(fd)


def _count_files(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def _inventory(path: Path, found: DeadStoreFiles) -> None:
    """Add the temporary files below ``path`` (a dead store's directory) to ``found``: one
    per name, a ``.partial`` with its complete file counting once; bytes as on disk."""
    names: set[str] = set()
    for root, _, files in os.walk(path):
        for name in files:
            full = Path(root) / name
            try:
                found.bytes += full.stat(follow_symlinks=False).st_size
            except OSError:
                pass  # gone meanwhile: still a file that had no row
            rel = full.relative_to(path).as_posix()
            names.add(rel.removesuffix(PARTIAL_SUFFIX))
    found.files += len(names)
    found.names.extend(sorted(names)[: max(UNLOGGED_SAMPLE - len(found.names), 0)])


def _remove_tree(path: Path) -> int:
    """Remove the directory ``path`` as far as possible; return the files actually removed."""
    before = _count_files(path)
    shutil.rmtree(path, ignore_errors=True)
    return before - _count_files(path)


def _owned_by_us(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_uid == os.getuid()
    except OSError:
        return False  # gone, or not ours to look at


def _remove_dead_stores(
    directory: Path, tier: Tier, found: list[DeadStoreFiles] | None = None
) -> int:
    """Remove ``store-*`` directories of ``directory`` (the ``tier`` directory) whose lock
    nobody holds; return the files removed.

    Entries of other users, and stores whose lock file cannot be opened or locked,
    are left alone. What each dead store held is appended to ``found``.
    """
    found = [] if found is None else found

    def remove(store_dir: Path) -> int:
        dead = DeadStoreFiles(store=store_dir.name, tier=tier)
        _inventory(store_dir, dead)
        found.append(dead)
        return _remove_tree(store_dir)

    removed = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        name = entry.name
        if not name.startswith((STORE_PREFIX, "." + STORE_PREFIX)) or not _owned_by_us(entry):
            continue
        if name.startswith("." + STORE_PREFIX) and name.endswith(LOCK_SUFFIX + ".tmp"):
            _remove_if_unlocked(directory / name)
            continue
        if not name.startswith(STORE_PREFIX):
            continue
        if name.endswith(LOCK_SUFFIX):
            store_dir = directory / name[: -len(LOCK_SUFFIX)]
            lock_path = directory / name
        elif entry.is_dir(follow_symlinks=False):
            store_dir = directory / name
            lock_path = directory / (name + LOCK_SUFFIX)
        else:
            continue
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            # A live store takes its lock before creating its directory: no lock, no owner.
            if store_dir.is_dir() and not store_dir.is_symlink():
                removed += remove(store_dir)
            continue
        except OSError:
            continue  # not ours to open (another user's store): leave it alone
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its owner is alive, or it cannot be locked: leave it alone
            if store_dir.is_dir() and not store_dir.is_symlink():
                removed += remove(store_dir)
            try:
                _unlink(lock_path)
            except OSError:
                pass  # the next cleaner tries again
        finally:
            os.close(fd)
    return removed
