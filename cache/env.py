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
from cache.errors import CacheError

#: The cache's two named databases (records and metadata; see :mod:`cache.store`).
RECORDS_DB = b"records"
META_DB = b"meta"

#: Pages of the LMDB map beyond ``max_bytes`` (see :func:`map_headroom`).
HEADROOM_PAGES = 64

#: The key :func:`settle` puts and deletes in the ``meta`` database.
_SETTLE_KEY = b"~settle"


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
    text = str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        text = os.strerror(exc.errno)
    return text


def _open_env(
    path: Path, config: CacheConfig | None, *, create: bool, inherited: bool = False
) -> SharedEnv:
    """Open the LMDB environment of ``path`` (read-write, else read-only); the caller has
    checked that ``path`` is a directory or absent. ``inherited``: this process holds an
    environment of ``path`` inherited through fork (see :func:`_reopen_guard_lifted`)."""
    if not create and not (path / "data.mdb").is_file():
        raise CacheError(f"no cache at {path} (no data.mdb there); check the path")
    map_size = config.max_bytes + map_headroom(config.max_bytes) if config is not None else 0
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
                max_readers=config.max_readers if config is not None else 1024,
                sync=config.durable if config is not None else True,
                metasync=False,
                create=create,
                **common,
            )
        readonly = False
    except lmdb.Error as exc:
        if isinstance(exc, lmdb.MemoryError) or getattr(exc, "errno", None) == errno.ENOMEM:
            bound = f"max_bytes={config.max_bytes}" if config is not None else "its map size"
            raise CacheError(
                f"cannot map the cache at {path} with {bound}: {os.strerror(errno.ENOMEM)}; "
                "lower max_bytes (the loader keeps serving fresh samples meanwhile)"
            ) from exc
        if not (path / "data.mdb").is_file() or os.access(path, os.W_OK):
            raise CacheError(
                f"cannot open or create the cache at {path}: {explain(exc)}; choose a writable "
                "directory (the loader keeps serving fresh samples meanwhile)"
            ) from exc
        try:  # an existing cache in a directory we may not write: serve it read-only
            with _reopen_guard_lifted(inherited):
                env = lmdb.open(
                    str(path), map_size=map_size, readonly=True, lock=False, **common
                )
        except lmdb.Error as exc2:
            raise CacheError(f"cannot open the cache at {path} read-only: {exc2}") from exc2
        readonly = True
    try:
        if readonly:  # (a handle opened inside an explicit read txn is not kept by py-lmdb)
            records = env.open_db(RECORDS_DB, create=False)
            meta = env.open_db(META_DB, create=False)
        else:
            with env.begin(write=True) as txn:
                records = env.open_db(RECORDS_DB, txn=txn)
                meta = env.open_db(META_DB, txn=txn)
    except lmdb.Error as exc:
        env.close()
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
