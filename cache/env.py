"""The LMDB environment of a cache directory, shared by everything in one process.

:class:`~cache.store.CacheStore` is the cache of samples; this module holds what
belongs to the LMDB environment under it rather than to the cache's records:
opening it, sharing it within the process, fork, the map size, write
transactions and the small commits that make freed pages reusable.

One environment per file and process
------------------------------------
LMDB forbids opening one environment twice in a process (py-lmdb refuses, and
closing one of two handles would release the fcntl locks of both). So each
process keeps one :class:`SharedEnv` per cache directory, by real path, in
:data:`_REGISTRY`: :func:`acquire` opens it on first use (:func:`_open_env`:
read-write, else read-only when an existing cache's directory is not writable)
and counts its users; :func:`release` closes it when the last one lets go. Its
map is sized by the configuration that opened it first: a later store of the
directory in the process with a larger ``max_bytes`` writes within the first one's
(:attr:`SharedEnv.max_bytes`) until the environment is opened anew. It
holds the handles of the cache's two named databases, ``records`` and ``meta``
(their layout: :mod:`cache.store`).

Fork
----
LMDB environments must not be used across ``fork`` (parent and child would share
one reader slot, ``MDB_BAD_RSLOT``, and a writer could overwrite pages one of them
is still reading). A child that finds an environment opened by another process
opens its own on first use. The inherited handle is kept (:data:`_INHERITED`),
unused and never closed: closing it would release this process's locks and
reader slots of the file. The child's open lifts py-lmdb's check against opening
a file twice (:func:`_reopen_guard_lifted`), and the registry lock is replaced in
the child (:func:`_after_fork_in_child`), as another thread may have held it.

Map size and writes
-------------------
The LMDB map, the hard bound of ``data.mdb``, is ``max_bytes`` plus
:func:`map_headroom`. LMDB reuses a freed page only once a later transaction has
committed, and it needs fresh pages to record what a transaction frees: the
headroom lets a full cache still commit the clear, rebuild or repair that frees
it, and :func:`settle` commits that later transaction. Every write transaction
is a :func:`write_txn`, committed through :func:`_commit`, the one place data
reaches the disk.

Damaged files
-------------
LMDB maps ``data.mdb``: reading a page past the end of a truncated file kills the
process with ``SIGBUS``, which no ``except`` can catch. So :func:`_open_env` checks,
before any page is read, that the file holds every page its newest meta page
counts (``(last_pgno + 1) * psize`` bytes; a committed transaction has written
them all) and refuses a shorter one, or an empty one, or one that is not a valid
LMDB file, with a :class:`~cache.errors.DamagedCacheError` naming the fix
(:func:`damaged`); :func:`lmdb_failure` wraps LMDB's own reports of a damaged page
(:data:`DAMAGE_ERRORS`) the same way. A rebuild may then start the cache anew with
:func:`remove_files` (``data.mdb`` and ``lock.mdb``, nothing else). A creation that
fails before its ``data.mdb`` holds LMDB's two meta pages (a full disk) deletes the
file it created, so that it does not stay behind as an invalid cache.

The check runs each time a process opens the environment (a loader opens it when
it is built, and again after ``Loader.close()``; a forked child opens its own). A
file cut short *while* a process has it open (another process truncating or
copying over it) is not detected: that process dies of ``SIGBUS`` at its next read
of a page beyond the new end. Checking before every read would cost a system call
per batch and still race; delete the directory of a cache in use instead (open
processes keep the old file until they close it), or rebuild it.

Creating a cache on a full disk is refused before LMDB maps its lock file
(:func:`_check_room_to_create`): LMDB writes that file's header through the map,
and on a full disk that write, too, would be a ``SIGBUS``.

Disk full
---------
LMDB reports a short write as an I/O error (``EIO``). A write that fails with
``EIO``, ``ENOSPC`` or ``EDQUOT`` on a file system with (nearly) no space left is
reported as a full disk (:func:`disk_full`), naming the free bytes.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib
import mmap
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb

from cache.config import CacheConfig
from cache.errors import CacheError, DamagedCacheError

#: The cache's two named databases (records and metadata; see :mod:`cache.store`).
RECORDS_DB = b"records"
META_DB = b"meta"

#: Pages of the LMDB map beyond ``max_bytes`` (see :func:`map_headroom`).
HEADROOM_PAGES = 64

#: The key :func:`settle` puts and deletes in the ``meta`` database.
_SETTLE_KEY = b"~settle"

#: LMDB errors that mean ``data.mdb`` is damaged (a page of the wrong type or missing,
#: not an LMDB file, a page checksum that fails where LMDB checks them).
DAMAGE_ERRORS: tuple[type[lmdb.Error], ...] = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.InvalidError,
    *((lmdb.BadChecksumError,) if hasattr(lmdb, "BadChecksumError") else ()),
)

#: LMDB errors of an open that mean ``data.mdb`` is not a usable LMDB file.
_INVALID_FILE_ERRORS = (*DAMAGE_ERRORS, lmdb.VersionMismatchError)

#: Errors of a write that may mean the disk is full (LMDB turns a short write into EIO).
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)

#: Free bytes, beyond those of the failed write, under which a file system counts as
#: full (see :func:`disk_full`).
NEARLY_FULL_BYTES = 1 << 20


def map_headroom(max_bytes: int) -> int:
    """Bytes of the LMDB map beyond ``max_bytes``: :data:`HEADROOM_PAGES` pages plus
    1/512 of ``max_bytes`` (LMDB's list of the pages a full clear frees).

    Parameters
    ----------
    max_bytes : int
        The cache's size bound, in bytes.

    Returns
    -------
    int
        Headroom in bytes, a multiple of the OS page size.
    """
    page = max(mmap.PAGESIZE, 4096)
    extra = -(-(max_bytes // 512) // page) * page
    return HEADROOM_PAGES * page + extra


@dataclasses.dataclass
class SharedEnv:
    """One process's LMDB environment of a cache directory and its users.

    ``max_bytes`` is the size bound its map was made for: that of the
    :class:`~cache.config.CacheConfig` that opened it first in this process
    (``None`` when it was opened without one, for inspection, and the map is the
    file's own). Every store of the directory in this process writes within it,
    whatever its own ``max_bytes`` (see :attr:`cache.store.CacheStore.max_bytes`).
    """

    env: lmdb.Environment
    records: Any
    meta: Any
    owner_pid: int
    readonly: bool
    psize: int = 4096
    users: int = 0
    max_bytes: int | None = None


_REGISTRY: dict[str, SharedEnv] = {}
_REGISTRY_LOCK = threading.Lock()
# Environments inherited through fork and replaced by the child's own, by real path: kept
# referenced so that they are never closed (closing would drop this process's locks and
# reader slots); a path here has an inherited handle open in this process.
_INHERITED: dict[str, list[SharedEnv]] = {}


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()


@contextmanager
def _reopen_guard_lifted(lifted: bool) -> Iterator[None]:
    """Let this process open the files of an environment it inherited through fork.

    py-lmdb refuses to open files that an environment of this process has open,
    because closing one of two handles would release the fcntl locks of both. A
    handle inherited through fork holds no locks in the child and is never closed
    there (:data:`_INHERITED`), so the child's own open skips that check (py-lmdb
    identifies environments with ``lmdb._envid.env_keys``).
    """
    envid: Any = None
    if lifted:
        try:
            envid = importlib.import_module("lmdb._envid")
        except ImportError:  # pragma: no cover - a py-lmdb without the check
            envid = None
    if envid is None or not hasattr(envid, "env_keys"):
        yield
        return
    keys = envid.env_keys
    envid.env_keys = lambda path, subdir: ()
    try:
        yield
    finally:
        envid.env_keys = keys


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def explain(exc: BaseException) -> str:
    """What went wrong, in words: the OS's text for an :class:`OSError` with an errno
    (``"No space left on device"``), else the exception's message."""
    text = str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        text = os.strerror(exc.errno)
    return text


def damaged(path: Path, reason: str) -> DamagedCacheError:
    """The error for a damaged cache at ``path``, naming what is wrong and the fix.

    Parameters
    ----------
    path : Path
        The cache directory.
    reason : str
        What is wrong, e.g. ``"its data.mdb is truncated: 1000000 bytes of 1712128"``.
    """
    return DamagedCacheError(
        f"the cache at {path} is damaged ({reason}). Rebuild it: CacheConfig({str(path)!r}, "
        f"rebuild=True), or `dataplane cache build --rebuild ...`, or `dataplane cache clear "
        f"{path}`; or delete the directory",
        path=str(path),
        reason=reason,
    )


def lmdb_failure(path: Path, exc: lmdb.Error, doing: str) -> CacheError:
    """``exc``, an LMDB error of ``doing`` (``"reading"``, ``"clearing"``...) the cache at
    ``path``, as the :class:`CacheError` to raise: a :class:`DamagedCacheError` when it
    says the file is damaged (:data:`DAMAGE_ERRORS`)."""
    if isinstance(exc, DAMAGE_ERRORS):
        return damaged(path, str(exc))
    return CacheError(f"{doing} the cache at {path} failed: {explain(exc)}")


def _errno_of(exc: BaseException) -> int | None:
    """The errno of an OS or LMDB error (py-lmdb keeps LMDB's return code in ``code``;
    an error made without one is recognised by its text)."""
    if isinstance(exc, OSError):
        return exc.errno
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code > 0:
        return code
    if isinstance(exc, lmdb.DiskError):
        return errno.ENOSPC
    text = str(exc)
    for number in _DISK_ERRNOS:
        if os.strerror(number) in text:
            return number
    return None


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged user may still write on the file system holding ``path``
    (``os.statvfs``), or None when it cannot be asked."""
    try:
        stat = os.statvfs(path)
    except (OSError, ValueError):
        return None
    return int(stat.f_bavail) * int(stat.f_frsize)


def disk_full(path: Path, exc: BaseException, needed: int = 0) -> str | None:
    """``"the disk holding PATH is full (N bytes free; ERROR)"`` when ``exc`` is a write error
    (``ENOSPC``, ``EDQUOT``, ``EIO``) and the file system holding ``path`` has fewer than
    ``needed`` plus :data:`NEARLY_FULL_BYTES` bytes free; None otherwise (an I/O error
    with room to spare stays an I/O error).

    Parameters
    ----------
    path : Path
        The cache directory.
    exc : BaseException
        The error of the write.
    needed : int
        Bytes the failed write was to add, in bytes (0 when unknown).
    """
    if _errno_of(exc) not in _DISK_ERRNOS:
        return None
    free = free_bytes(path)
    if free is None or free >= needed + NEARLY_FULL_BYTES:
        return None
    return f"the disk holding {path} is full ({free} bytes free; {explain(exc)})"


def _remove_incomplete(data: Path) -> None:
    """Delete ``data`` (a ``data.mdb`` this process just created and failed to initialise)
    when it is shorter than LMDB's two meta pages: left there, it would be an invalid cache."""
    try:
        if data.stat().st_size < 2 * max(mmap.PAGESIZE, 4096):
            data.unlink()
    except OSError:  # best effort: the error being raised says what failed
        pass


def _check_complete(env: lmdb.Environment, path: Path) -> None:
    """Raise :class:`DamagedCacheError` when ``data.mdb`` is shorter than the pages the
    newest meta page counts; reads none of them (see the module docs, *Damaged files*).

    Every page up to ``last_pgno`` was written by the transaction that committed it
    (LMDB writes the data pages before the meta page), except pages freed within that
    same transaction, which the writes of this package never leave at the end of the
    file. The size is taken after ``last_pgno``: a writer meanwhile only adds to both.
    """
    needed = (int(env.info()["last_pgno"]) + 1) * int(env.stat()["psize"])
    try:
        size = os.path.getsize(path / "data.mdb")
    except OSError:  # pragma: no cover - deleted meanwhile: the mapped file is intact
        return
    if size < needed:
        raise damaged(path, f"its data.mdb is truncated: {size} bytes of {needed}")


def remove_files(path: Path) -> list[str]:
    """Delete the ``data.mdb`` and ``lock.mdb`` of the cache at ``path``, nothing else.

    For a damaged cache (:class:`~cache.errors.DamagedCacheError`) that a rebuild or
    ``dataplane cache clear`` starts anew. Other processes that have the cache open keep
    the old file (deleted, not truncated) until they close it.

    Parameters
    ----------
    path : Path
        The cache directory.

    Returns
    -------
    list of str
        The names of the files deleted.

    Raises
    ------
    CacheError
        If this process still has the cache open (another loader or store), or a file
        cannot be deleted.
    """
    with _REGISTRY_LOCK:
        if os.path.realpath(path) in _REGISTRY:
            raise CacheError(
                f"cannot start the cache at {path} anew: this process still has it open "
                "(another Loader or CacheStore of it); close that one first"
            )
        removed = []
        for name in ("data.mdb", "lock.mdb"):
            try:
                (path / name).unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise CacheError(
                    f"cannot delete {path / name}: {explain(exc)}; make {path} writable, or "
                    "delete the directory"
                ) from exc
            removed.append(name)
    return removed


def _check_room_to_create(path: Path, max_readers: int) -> None:
    """Refuse to create a cache on a file system with no room for LMDB's lock file.

    LMDB maps ``lock.mdb`` (a 128-byte header and 64 bytes per reader slot) and
    writes its header through the map: on a full disk the page cannot be allocated
    and the process dies of ``SIGBUS``. Its data file is written with ``pwrite``,
    whose failures are errors (see :func:`disk_full`).
    """
    page = max(mmap.PAGESIZE, 4096)
    needed = -(-(128 + 64 * max_readers) // page) * page + 2 * page  # lock file, meta pages
    free = free_bytes(path)
    if free is not None and free < needed:
        raise CacheError(
            f"cannot create the cache at {path}: the disk holding {path} is full ({free} "
            f"bytes free, {needed} needed); free disk space or choose another path (the "
            "loader keeps serving fresh samples meanwhile)"
        )


def _not_lmdb(path: Path, exc: lmdb.Error) -> DamagedCacheError:
    return damaged(path, f"its data.mdb is not a valid or complete LMDB file: {exc}")


def _no_room_at_open(path: Path, exc: lmdb.Error, *, creating: bool) -> CacheError | None:
    """The error for an open that failed for lack of disk space (:func:`disk_full`, or
    ``ENOSPC``/``EDQUOT`` with room left: a quota, a file size limit); None otherwise."""
    reason = disk_full(path, exc)
    if reason is None and _errno_of(exc) in (errno.ENOSPC, errno.EDQUOT):
        reason = explain(exc)
    if reason is None:
        return None
    return CacheError(
        f"cannot {'create' if creating else 'open'} the cache at {path}: {reason}; free disk "
        "space or choose another path (the loader keeps serving fresh samples meanwhile)"
    )


def _open_env(
    path: Path, config: CacheConfig | None, *, create: bool, inherited: bool = False
) -> SharedEnv:
    """Open the LMDB environment of ``path`` (read-write, else read-only); the caller has
    checked that ``path`` is a directory or absent. ``inherited``: this process holds an
    environment of ``path`` inherited through fork (see :func:`_reopen_guard_lifted`).

    A damaged ``data.mdb`` (empty where a cache is expected, not a valid LMDB file,
    truncated; see the module docs) raises :class:`DamagedCacheError` before any of
    its pages is read."""
    data = path / "data.mdb"
    try:
        size: int | None = data.stat().st_size if data.is_file() else None
    except OSError:
        size = None
    if not create and size is None:
        raise CacheError(f"no cache at {path} (no data.mdb there); check the path")
    empty = "its data.mdb is empty: 0 bytes, not a complete LMDB file"
    if not create and size == 0:  # (opening it read-write would make it an empty one)
        raise damaged(path, empty)
    map_size = config.max_bytes + map_headroom(config.max_bytes) if config is not None else 0
    max_readers = config.max_readers if config is not None else 1024
    if create and size is None:
        _check_room_to_create(path, max_readers)
    common: dict[str, Any] = {
        "subdir": True,
        "max_dbs": 2,
        "readahead": False,
        "meminit": False,
        "max_spare_txns": 1,
    }
    try:
        with _reopen_guard_lifted(inherited):
            env = lmdb.open(
                str(path),
                map_size=map_size,
                max_readers=max_readers,
                sync=config.durable if config is not None else True,
                metasync=False,
                create=create,
                **common,
            )
        readonly = False
    except lmdb.Error as exc:
        if create and size is None:  # a creation cut short (a full disk): not left behind
            _remove_incomplete(data)
        if isinstance(exc, lmdb.MemoryError) or getattr(exc, "errno", None) == errno.ENOMEM:
            bound = f"max_bytes={config.max_bytes}" if config is not None else "its map size"
            raise CacheError(
                f"cannot map the cache at {path} with {bound}: {os.strerror(errno.ENOMEM)}; "
                "lower max_bytes (the loader keeps serving fresh samples meanwhile)"
            ) from exc
        if isinstance(exc, _INVALID_FILE_ERRORS):
            raise _not_lmdb(path, exc) from exc
        no_room = _no_room_at_open(path, exc, creating=size is None)
        if no_room is not None:
            raise no_room from exc
        if size is None or os.access(path, os.W_OK):
            raise CacheError(
                f"cannot open or create the cache at {path}: {explain(exc)}; choose a writable "
                "directory (the loader keeps serving fresh samples meanwhile)"
            ) from exc
        if size == 0:  # an empty file in a directory we may not write: nothing to serve
            raise damaged(path, empty) from exc
        try:  # an existing cache in a directory we may not write: serve it read-only
            with _reopen_guard_lifted(inherited):
                env = lmdb.open(
                    str(path), map_size=map_size, readonly=True, lock=False, **common
                )
        except lmdb.Error as exc2:
            if isinstance(exc2, _INVALID_FILE_ERRORS):
                raise _not_lmdb(path, exc2) from exc2
            raise CacheError(f"cannot open the cache at {path} read-only: {exc2}") from exc2
        readonly = True
    try:
        _check_complete(env, path)  # before any page is read
        if readonly:  # (a handle opened inside an explicit read txn is not kept by py-lmdb)
            records = env.open_db(RECORDS_DB, create=False)
            meta = env.open_db(META_DB, create=False)
        else:
            with env.begin(write=True) as txn:
                records = env.open_db(RECORDS_DB, txn=txn)
                meta = env.open_db(META_DB, txn=txn)
    except DamagedCacheError:
        env.close()
        raise
    except lmdb.Error as exc:
        env.close()
        if isinstance(exc, DAMAGE_ERRORS):
            raise damaged(path, str(exc)) from exc
        no_room = _no_room_at_open(path, exc, creating=size is None)
        if no_room is not None:
            raise no_room from exc
        raise CacheError(f"{path} is not a readable dataplane cache ({exc})") from exc
    if not readonly:
        try:  # free the reader slots of processes that died inside a read transaction
            env.reader_check()
        except lmdb.Error:  # pragma: no cover - best effort
            pass
    return SharedEnv(
        env,
        records,
        meta,
        os.getpid(),
        readonly,
        int(env.stat()["psize"]),
        max_bytes=config.max_bytes if config is not None else None,
    )


def acquire(path: Path, config: CacheConfig | None, *, create: bool) -> SharedEnv:
    """This process's shared environment of the cache at ``path``, opened on first use
    (LMDB allows one per process and file) and counted; pair with :func:`release`.

    Parameters
    ----------
    path : Path
        The cache's directory.
    config : CacheConfig, optional
        Its options (``max_bytes`` in bytes bounds the map of a first opener).
    create : bool
        Create the cache if it does not exist.

    Raises
    ------
    CacheError
        If the cache cannot be opened (a :class:`DamagedCacheError` for a damaged file).
    """
    key = os.path.realpath(path)
    with _REGISTRY_LOCK:
        shared = _REGISTRY.get(key)
        if shared is not None and shared.owner_pid != os.getpid():
            # Inherited through fork: this process opens its own (see the module docs).
            _INHERITED.setdefault(key, []).append(shared)
            del _REGISTRY[key]
            shared = None
        if shared is None:
            shared = _open_env(path, config, create=create, inherited=key in _INHERITED)
            _REGISTRY[key] = shared
        shared.users += 1
        return shared


def release(path: Path, shared: SharedEnv) -> None:
    """Give back one :func:`acquire` of ``shared``; the last user in the process that
    opened it closes it (one inherited through ``fork`` is never closed here)."""
    key = os.path.realpath(path)
    with _REGISTRY_LOCK:
        shared.users -= 1
        if shared.users > 0:
            return
        if _REGISTRY.get(key) is shared:
            del _REGISTRY[key]
        if shared.owner_pid == os.getpid():
            shared.env.close()
        else:  # inherited through fork: never closed here, and still open in this process
            _INHERITED.setdefault(key, []).append(shared)


def _commit(txn: lmdb.Transaction) -> None:
    """Commit a write transaction (the one place data reaches the disk)."""
    txn.commit()


@contextmanager
def write_txn(shared: SharedEnv, db: Any = None) -> Iterator[lmdb.Transaction]:
    """A write transaction on ``db`` (default: the main database), committed through
    :func:`_commit` when the block ends and aborted if anything in it raises."""
    txn = shared.env.begin(write=True, db=db)
    try:
        yield txn
        _commit(txn)
    except BaseException:
        txn.abort()
        raise


def settle(shared: SharedEnv) -> bool:
    """Commit one small transaction (a key put and deleted in the ``meta`` database).

    LMDB reuses the pages a transaction freed only once a later one has committed:
    called after every transaction that frees pages, so that the next fill reuses
    them instead of needing new ones. Returns False when it could not commit.
    """
    try:
        with write_txn(shared, shared.meta) as txn:
            txn.put(_SETTLE_KEY, b"")
            txn.delete(_SETTLE_KEY)
    except lmdb.Error:
        return False
    return True
