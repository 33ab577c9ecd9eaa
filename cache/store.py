"""``CacheStore``: augmented samples in a real LMDB environment.

This module is the cache of samples: reading, writing and counting its records and
keeping its metadata current. What it reports (states, stats, info) is
:mod:`cache.info`; how much of ``max_bytes`` it uses, :mod:`cache.room`; clearing a
cache whole, :mod:`cache.maintenance`. The LMDB environment under it (one per directory
and process, fork, map size, write transactions) is :mod:`cache.env`.

Layout
------
The cache directory holds LMDB's ``data.mdb`` and ``lock.mdb`` with two named
databases: ``records`` (key and value layout in :mod:`cache.record`) and
``meta`` (one JSON document, :mod:`cache.meta`).

Processes and threads
---------------------
One writer at a time, many readers: LMDB serialises write transactions (across
processes and threads) and readers never block or see a torn write. Any number
of processes (DDP ranks, workers) may open the same cache.

* In one process all :class:`CacheStore` objects of a directory share one LMDB
  environment (LMDB forbids opening an environment twice in a process; see
  :mod:`cache.env`). Its map is sized by the first of them to open it, so a store
  opened meanwhile with a larger ``max_bytes`` writes within the first one's
  (:attr:`CacheStore.max_bytes` is the bound in force).
* After ``fork`` the child opens its own environment on first use (LMDB
  environments must not be used across ``fork``; why, and what becomes of the
  inherited handle: :mod:`cache.env`). Per-process state (locks, pending drops,
  the environment) is reset when the process id changes.
* A store pickles as its configuration and identity (``spawn`` start method);
  the unpickled copy opens the environment on first use, and never rebuilds.

Reads
-----
:meth:`CacheStore.get_batch` looks up one batch in one read transaction opened
with ``buffers=True``: each value is a read-only view into LMDB's memory map,
checked (size, header, xxh3 checksum) and copied once into the caller's
preallocated ``(n, C, H, W)`` uint8 buffer. Records of at most
``STAGED_MAX_PAYLOAD`` bytes (16 KiB) are first copied whole into a small staging
array so that headers, checksums and payload copies are handled with numpy for
the batch at once (per-record Python work, not bytes, bounds small records).
Nothing is copied into Python bytes and the process's anonymous memory does not
grow with the cache's size (its file-backed resident pages are the OS page
cache, mapped: they count in RSS as ``RssFile`` and are reclaimable).

Writes encode a batch's records with numpy (:func:`cache.record.encode_records`,
one checksum call per record) and put them in key order with one ``putmulti``.

On failure
----------
* A record failing its check is never served: it is reported missing (the
  caller produces the sample fresh), logged, counted in :attr:`CacheStore.stats`,
  and deleted by this process's next write so that the refill can take its place.
* ``max_bytes`` reached: a write that does not fit is cut to the records that do
  (in order: the longest prefixes, halved after each refusal), and once one more
  record would not fit (:func:`~cache.room.has_room`, the one definition of a full
  cache) the store's state becomes :attr:`StoreState.FULL` and it stops admitting;
  serving goes on. ``MapFullError`` never reaches the caller. So a cache is full, for the
  writers and for :meth:`CacheStore.info` alike, whatever the size of the batches
  that filled it.
* Disk full, I/O error or an unwritable directory while writing: the batch is
  not written (the transaction is aborted, what was committed stays valid),
  the state becomes :attr:`StoreState.FAILED` and :class:`CacheError` is raised
  once, from that write; later writes are not attempted. Serving goes on. LMDB
  reports a short write as an I/O error: when the disk holding the cache has
  (nearly) no space left the message says it is full, naming the free bytes
  (:func:`cache.env.disk_full`).
* A damaged ``data.mdb``: truncated (shorter than the pages LMDB's header counts),
  empty, not a valid LMDB file, a page LMDB finds damaged (``MDB_CORRUPTED``,
  ``MDB_PAGE_NOTFOUND``), or a key in the records that is not a record key (of another
  length than 8 bytes, met where keys are read: :meth:`CacheStore.counts`,
  :meth:`CacheStore.info`, :meth:`CacheStore.completed`, :func:`cache.verify`):
  :class:`~cache.errors.DamagedCacheError`, naming the file and the fix, from the open
  (before any page is read: a read past the end of a truncated file would kill the
  process with ``SIGBUS``) or from the read or write that met the damage (a write also
  makes the state ``FAILED``). Nothing is changed.
  ``rebuild=True`` clears the records as any rebuild does; when the file cannot be
  opened or its records cannot be cleared, it deletes ``data.mdb`` and ``lock.mdb``
  (nothing else) and creates the cache anew (so does ``dataplane cache clear``,
  through :func:`~cache.maintenance.remove_damaged`). A file cut short while this
  process has it open is not detected, and kills it at its next read of a page beyond
  the new end (see :mod:`cache.env`, *Damaged files*).
* An existing cache in a directory this process may not write is opened
  read-only (state :attr:`StoreState.READ_ONLY`, without LMDB's lock file, so it
  must not be written by anyone meanwhile); a new cache in such a place raises
  :class:`CacheError` naming the path.
* Another process rebuilt the cache (other recipe or dataset) while this store
  was open: its next read or write sees the new metadata, and the store stops
  serving and admitting (state :attr:`StoreState.STALE`, logged once at INFO: the
  loader warns, a ``CacheWarning``, and a direct caller reads :attr:`CacheStore.state`);
  the loader produces every sample fresh. Reopen it to use the rebuilt cache.
* Another process grew the map (a larger ``max_bytes``): reads and writes adopt
  the larger map (``MDB_MAP_RESIZED`` is handled, never an error).
* Opened with other ``variants`` (or ``max_bytes``) than its metadata records:
  the metadata takes this store's values (the latest writer's configuration). With
  fewer variants the records of the others are **kept** (another process, or the
  next run, may use the larger setting again) but never served; the store says so
  (:attr:`CacheStore.variants_change`, logged; the loader warns), :meth:`CacheStore.info`
  counts them apart as unused, and ``dataplane cache verify --repair`` (or
  :func:`cache.verify` with ``repair=True``) deletes them.
* A process killed at any point leaves only committed, complete, checksummed
  records; the next open counts them (:meth:`CacheStore.counts`) and filling
  goes on from there. The reader slot it held is freed when the cache is next
  opened, or when a write runs out of room (``Environment.reader_check``).

Size
----
``max_bytes`` bounds the pages holding records and metadata, plus
:data:`~cache.room.BOOKKEEPING_PAGES` pages for LMDB's own trees: a write that would
go beyond it is not committed. The cache is full (state ``FULL``) when the pages one
more record may add (its overflow pages plus a split at every level of the records'
tree, :attr:`CacheInfo.next_record_bytes`) would go beyond it (the accounting:
:mod:`cache.room`). The LMDB map, the hard bound of ``data.mdb``, is larger by
:func:`cache.env.map_headroom` (64 pages plus 1/512 of ``max_bytes``). LMDB reuses a
freed page only once a later transaction has committed, and it needs fresh pages to
record what a transaction frees (1/512 of the freed bytes); the headroom lets a full
cache be cleared, rebuilt or repaired and filled again. After every transaction that
frees pages (clear, rebuild, dropped records) the store commits one small transaction
so that the next fill reuses them; a write that finds the map full frees the slots of
dead readers, commits such a transaction and is tried once more before the store
declares itself ``FULL``.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import logging
import operator
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import xxhash

from cache.config import CacheConfig, FillMode
from cache.env import (
    DAMAGE_ERRORS,
    SharedEnv,
    acquire,
    damaged,
    disk_full,
    explain,
    lmdb_failure,
    release,
    remove_files,
    settle,
    write_txn,
)
from cache.errors import CacheError, CorruptRecordError, DamagedCacheError, UnreadableMetaError
from cache.info import CacheInfo, StoreState, StoreStats, VariantsChange
from cache.maintenance import drop_all
from cache.meta import META_KEY, CacheIdentity, CacheMeta
from cache.record import (
    CHECKSUM_SIZE,
    HEADER_SIZE,
    HEADER_VERSION_END,
    MAX_INDEX,
    MAX_VARIANT,
    RECORD_OVERHEAD,
    check_record,
    encode_records,
    header_prefix,
    malformed_key,
    pack_key,
    pack_keys,
    record_label,
    unpack_key,
)
from cache.room import (
    BOOKKEEPING_PAGES,
    data_limit,
    has_room,
    next_record_bytes,
    record_bytes,
    used_bytes,
)

logger = logging.getLogger(__name__)

#: Largest payload (bytes) read through a staging array (see ``_read_staged``).
STAGED_MAX_PAYLOAD = 16 << 10

_HEADER_PREFIX = header_prefix()


class _OverMaxBytes(lmdb.MapFullError):
    """A write would take the cache beyond ``max_bytes`` (raised before its commit)."""


class _Rebuilt(Exception):
    """The cache's metadata is no longer the one this store opened."""


BatchTuple = tuple[np.ndarray, int, np.ndarray, np.ndarray]


@dataclasses.dataclass(frozen=True)
class EncodedBatch:
    """One batch's records, ready to write (see :meth:`CacheStore.encode_batch`).

    Attributes
    ----------
    items : list of (bytes, memoryview)
        ``(key, value)`` of each record; each value views one row of ``buffer``.
    buffer : numpy.ndarray or None
        The uint8 array holding the records (``None`` for an empty batch); the
        caller may reuse it once the batch is written.
    """

    items: list[tuple[bytes, memoryview]]
    buffer: np.ndarray | None


class CacheStore:
    """An LMDB cache of augmented uint8 samples keyed by ``(index, variant)``.

    Parameters
    ----------
    config : CacheConfig
        Where and how (see :class:`~cache.config.CacheConfig`).
    identity : CacheIdentity
        What the samples are made from. A new cache records it; an existing
        one must match it (else :class:`~cache.errors.StaleCacheError`) unless
        ``config.rebuild``, which clears the cache first.

    Raises
    ------
    StaleCacheError
        The cache was built for another recipe, dataset or sample shape.
    DamagedCacheError
        Its ``data.mdb`` is truncated, empty or not a valid LMDB file, or LMDB finds a
        damaged page (unless ``config.rebuild``, which then starts the cache anew).
    CacheError
        The path cannot be opened or created, or holds no readable cache.

    Examples
    --------
    >>> store = CacheStore(CacheConfig(path), identity)             # doctest: +SKIP
    >>> out = np.empty((len(idx), 3, 224, 224), np.uint8)           # reused every batch
    >>> found = store.get_batch(idx, variant=epoch % store.variants, out=out)
    >>> images = torch.from_numpy(out)                             # no copy
    """

    def __init__(self, config: CacheConfig, identity: CacheIdentity) -> None:
        if not isinstance(config, CacheConfig):
            raise CacheError(f"config must be a cache.CacheConfig, not {type(config).__name__}")
        if not isinstance(identity, CacheIdentity):
            raise CacheError(
                f"identity must be a cache.CacheIdentity, not {type(identity).__name__}"
            )
        self.config = config
        self.identity = identity
        self.stats = StoreStats()
        self._init_process_state()
        self._shared: SharedEnv | None = None
        self._meta: CacheMeta | None = None
        self._meta_raw: bytes | None = None
        self._state = (
            StoreState.ADMITTING if config.fill is not FillMode.OFF else StoreState.READ_ONLY
        )
        self._rebuild = config.rebuild
        self._existing_only = False
        #: Set when opening rewrote the metadata's number of variants (None otherwise).
        self.variants_change: VariantsChange | None = None
        self._stored_variants = config.variants  # the metadata's, once opened
        self._open()
        self._find_full()

    @classmethod
    def open_existing(cls, path: str | os.PathLike[str]) -> CacheStore:
        """Open an existing cache without knowing its inputs (inspection: CLI ``info``,
        ``verify``, ``clear``). Its stored identity is taken as the expected one.

        Raises
        ------
        DamagedCacheError
            If the cache's ``data.mdb`` is damaged (see :class:`CacheStore`).
        CacheError
            If there is no readable cache at ``path``.
        """
        self = cls.__new__(cls)
        # CacheConfig takes any str or PathLike and validates it (its field is typed as the
        # Path it stores); converting here would turn '' into '.' before that check.
        self.config = CacheConfig(path, fill=FillMode.INLINE)  # type: ignore[arg-type]
        self.stats = StoreStats()
        self._init_process_state()
        self._shared = None
        self._meta = None
        self._meta_raw = None
        self._state = StoreState.ADMITTING
        self._rebuild = False
        self._existing_only = True
        self.variants_change = None
        self._stored_variants = 1  # the metadata's, set by _open
        self._open()
        assert self._meta is not None  # set by _open
        self.identity = self._meta.identity
        self.config = dataclasses.replace(
            self.config, variants=self._meta.variants, max_bytes=self._meta.max_bytes
        )
        self._find_full()
        return self

    # -- process-local state ----------------------------------------------------------
    def _init_process_state(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pending_drop: set[bytes] = set()
        # Variants found complete by completed(); forgotten on any sign of a record
        # leaving (see completed()).
        self._known_complete: set[int] = set()

    def _check_process(self) -> None:
        if self._pid != os.getpid():  # forked: the lock may have been held by a parent thread
            pending = set(self._pending_drop)
            self._init_process_state()
            self._pending_drop |= pending
            # The parent's environment is never used (nor closed) here: _env() acquires
            # this process's own.
            self._shared = None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "config": dataclasses.replace(self.config, rebuild=False),
            "identity": getattr(self, "identity", None),
            "state": self._state,
            "existing_only": self._existing_only,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = state["config"]
        self.identity = state["identity"]
        self.stats = StoreStats()
        self._init_process_state()
        self._shared = None
        self._meta = None
        self._meta_raw = None
        self._state = state["state"]
        self._rebuild = False
        self._existing_only = state["existing_only"]
        self.variants_change = None
        self._stored_variants = self.config.variants  # the metadata's, once opened

    # -- opening ----------------------------------------------------------------------
    def _env(self) -> SharedEnv:
        self._check_process()
        if self._shared is None:
            if self._meta is None:
                self._open()
            else:  # opened before a fork: the same cache, through this process's environment
                config = None if self._existing_only else self.config
                shared = acquire(self.path, config, create=False)
                self._shared = shared
                if shared.readonly and self._state is not StoreState.STALE:
                    self._state = StoreState.READ_ONLY
        assert self._shared is not None
        return self._shared

    @property
    def path(self) -> Path:
        """The cache directory."""
        return self.config.path

    def _open(self) -> None:
        path = self.config.path
        create = not self._existing_only
        if path.exists() and not path.is_dir():
            raise CacheError(
                f"cache path {path} exists and is not a directory; choose another path"
            )
        if create:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except (OSError, ValueError) as exc:
                raise CacheError(
                    f"cannot create the cache directory {path}: {explain(exc)}; choose a "
                    "writable path (the loader keeps serving fresh samples meanwhile)"
                ) from exc
        config = None if self._existing_only else self.config
        rebuild = self._rebuild and create
        shared: SharedEnv | None = None
        try:
            try:
                shared = acquire(path, config, create=create)
                self._meta = self._load_meta(shared)
            except DamagedCacheError as exc:
                if not rebuild:
                    raise
                if shared is not None:
                    release(path, shared)
                    shared = None
                shared = self._start_anew(exc)
                self._meta = self._load_meta(shared)
            self._stored_variants = self._meta.variants
        except BaseException:
            if shared is not None:
                release(path, shared)
            raise
        self._shared = shared
        if shared.readonly:
            self._state = StoreState.READ_ONLY

    def _start_anew(self, damage: DamagedCacheError) -> SharedEnv:
        """A rebuild of a damaged cache that cannot be opened or cleared: delete its
        ``data.mdb`` and ``lock.mdb`` (nothing else) and create it again."""
        removed = remove_files(self.path)
        logger.warning(
            "the cache at %s is damaged (%s); rebuilding it: %s deleted",
            self.path,
            damage.reason,
            " and ".join(removed) or "nothing",
        )
        return acquire(self.path, self.config, create=True)

    def _find_full(self) -> None:
        """An admitting store whose cache is full already (:func:`~cache.room.has_room`) is
        ``FULL`` from the start: no batch is encoded or queued for it."""
        shared = self._env()
        if self._state is StoreState.ADMITTING:
            try:
                with shared.env.begin() as txn:
                    full = not self._has_room(txn, shared)
            except lmdb.Error as exc:
                raise lmdb_failure(self.path, exc, "reading") from exc
            if full:
                self._state = StoreState.FULL

    def _load_meta(self, shared: SharedEnv) -> CacheMeta:
        where = str(self.config.path)
        try:
            with shared.env.begin(db=shared.meta) as txn:
                raw = txn.get(META_KEY)
                raw = bytes(raw) if raw is not None else None
        except lmdb.Error as exc:
            raise lmdb_failure(self.config.path, exc, "reading") from exc
        try:
            meta = CacheMeta.from_json(raw, where=where) if raw is not None else None
        except UnreadableMetaError:
            if not self._rebuild or self._existing_only or shared.readonly:
                raise
            logger.warning("the metadata of cache %s is unreadable; rebuilding the cache", where)
            meta = None
        self._meta_raw = raw
        if self._existing_only:
            if meta is None:
                raise CacheError(
                    f"{where} holds no dataplane cache metadata (its metadata was cleared, or "
                    "its creation did not finish, or it is another program's LMDB file); check "
                    f"the path, or fill it again: `dataplane cache build DATA {where}`"
                )
            return meta
        if meta is not None and not self._rebuild:
            meta.check(self.identity, where=where)
            if (
                meta.variants == self.config.variants
                and meta.max_bytes == self.config.max_bytes
                and not meta.lacks_descriptions(self.identity)
            ):
                return meta
            # Otherwise the metadata is written again below (same identity, same creation
            # time): the new variants or size bound, or the descriptions of the recipe and
            # dataset that a cache written without them gains.
        if shared.readonly:
            if meta is None:
                raise CacheError(f"{where} holds no cache and is not writable; choose another path")
            if self._rebuild:
                raise CacheError(
                    f"cannot rebuild the cache at {where}: the directory is not writable"
                )
            return meta
        new = CacheMeta.new(
            self.identity, variants=self.config.variants, max_bytes=self.config.max_bytes
        )
        rebuild = self._rebuild
        self._rebuild = False  # once per store: an unpickled or reopened store never rebuilds
        previous: int | None = None
        try:
            with write_txn(shared) as txn:
                current = txn.get(META_KEY, db=shared.meta)
                if current is not None and not rebuild:
                    # Another process may have created it meanwhile: keep its creation time.
                    stored = CacheMeta.from_json(bytes(current), where=where)
                    stored.check(self.identity, where=where)
                    new = dataclasses.replace(new, created=stored.created)
                    previous = stored.variants
                if rebuild:
                    self._known_complete.clear()
                    txn.drop(shared.records, delete=False)
                    logger.info("cache %s cleared for a rebuild", where)
                raw = new.to_json()
                txn.put(META_KEY, raw, db=shared.meta)
            self._meta_raw = raw
            if rebuild:
                settle(shared)
        except lmdb.MapFullError:
            if rebuild:
                raise CacheError(
                    f"cannot rebuild the cache at {where}: its max_bytes is too small"
                ) from None
            self._state = StoreState.FULL
            return meta if meta is not None else new
        except lmdb.Error as exc:
            if isinstance(exc, DAMAGE_ERRORS):
                raise damaged(self.config.path, str(exc)) from exc
            full = disk_full(self.config.path, exc)
            reason = full if full is not None else explain(exc)
            raise CacheError(
                f"cannot write the metadata of the cache at {where}: {reason}; free disk "
                "space or choose a writable path"
            ) from exc
        if previous is not None and previous != new.variants:
            try:
                unused = (
                    self._count_from_variant(shared, new.variants) if previous > new.variants else 0
                )
            except lmdb.Error as exc:
                raise lmdb_failure(self.config.path, exc, "reading") from exc
            change = VariantsChange(where, previous, new.variants, unused)
            self.variants_change = change
            # INFO: the loader warns (CacheWarning) and the CLI prints it; a direct caller
            # reads variants_change.
            logger.info("%s", change.message)
        return new

    @staticmethod
    def _count_from_variant(shared: SharedEnv, variant: int) -> int:
        """Records of variants ``>= variant`` (a key-only scan of their range)."""
        if variant > MAX_VARIANT:
            return 0
        with shared.env.begin(db=shared.records) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(pack_key(0, variant)):
                return 0
            return sum(1 for _ in cursor.iternext(keys=True, values=False))

    @property
    def meta(self) -> CacheMeta:
        """The stored metadata (as of opening)."""
        self._env()
        assert self._meta is not None
        return self._meta

    def stored_variants(self) -> int:
        """Variants the cache's metadata keeps now (one read of the metadata).

        This store's ``variants`` once it has opened the cache (it writes them there),
        unless another store, of this process or another, opened the cache since with
        other ``variants`` and rewrote the metadata. With fewer, the records of variants
        ``stored_variants() .. variants - 1`` are outside the metadata: this store still
        serves and fills them, but stores with that many variants never serve them,
        :meth:`info` counts them unused and :func:`cache.verify` with ``repair=True``
        deletes them.

        Raises
        ------
        CacheError
            If LMDB fails to read.
        """
        with self._read(self._env().meta) as txn:
            if self._state is not StoreState.STALE:
                self._meta_current(txn)
        return self._stored_variants

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one sample, ``(C, H, W)``."""
        return self.identity.sample_shape

    @property
    def variants(self) -> int:
        """Variants per sample."""
        return self.config.variants

    @property
    def state(self) -> StoreState:
        """Whether this store still admits records."""
        return self._state

    @property
    def admitting(self) -> bool:
        """True while writes are attempted."""
        return self._state is StoreState.ADMITTING

    def _payload_size(self) -> int:
        return int(np.prod(self.identity.sample_shape, dtype=np.int64))

    def _meta_current(self, txn: lmdb.Transaction) -> bool:
        """Whether the stored metadata is still the one this store opened (one ``get``
        in ``txn``); when not, the store becomes :attr:`StoreState.STALE` (logged)."""
        raw = txn.get(META_KEY, db=self._env().meta)
        if raw is not None:
            raw = bytes(raw)
        if raw == self._meta_raw:
            return True
        mine = self._meta
        try:
            stored = CacheMeta.from_json(raw, where=str(self.path)) if raw is not None else None
        except CacheError:
            stored = None
        if (
            stored is not None
            and mine is not None
            and stored.identity == mine.identity
            and stored.created == mine.created
        ):  # rewritten by another store (its variants or max_bytes), not rebuilt
            self._meta_raw = raw
            self._stored_variants = stored.variants
            return True
        self._become_stale()
        return False

    def _become_stale(self) -> None:
        with self._lock:
            if self._state is StoreState.STALE:
                return
            self._state = StoreState.STALE
            self._known_complete.clear()
        # INFO: the loader warns (CacheWarning) and a direct caller reads the state; a
        # WARNING record would be printed a second time where logging is not set up.
        logger.info(
            "the cache at %s was rebuilt or cleared by another process since this one opened "
            "it; this process stops using it and serves fresh samples (reopen the cache to "
            "use the rebuilt one)",
            self.path,
        )

    @contextmanager
    def _read(self, db: Any = None) -> Iterator[lmdb.Transaction]:
        """A read transaction (``buffers=True``) on ``db`` (default: the records); an LMDB
        error in it is raised as :class:`CacheError` (:func:`~cache.env.lmdb_failure`: a
        :class:`DamagedCacheError` for a damaged page)."""
        shared = self._env()
        try:
            try:
                txn = shared.env.begin(db=db if db is not None else shared.records, buffers=True)
            except lmdb.MapResizedError:  # another process grew the map: adopt its size
                shared.env.set_mapsize(0)
                txn = shared.env.begin(db=db if db is not None else shared.records, buffers=True)
        except lmdb.Error as exc:
            raise lmdb_failure(self.path, exc, "reading") from exc
        try:
            yield txn
        except lmdb.Error as exc:
            raise lmdb_failure(self.path, exc, "reading") from exc
        finally:
            txn.abort()

    # -- serving ----------------------------------------------------------------------
    def get_batch(
        self,
        indices: Sequence[int] | np.ndarray,
        variant: int,
        out: np.ndarray,
        *,
        labels: np.ndarray | None = None,
    ) -> np.ndarray:
        """Copy the cached samples of ``indices`` (one variant) into ``out``.

        Parameters
        ----------
        indices : sequence of int
            Sample indices, in batch order.
        variant : int
            The variant to read (``epoch % variants``).
        out : numpy.ndarray
            Preallocated C-contiguous uint8 array of shape at least
            ``(len(indices), *sample_shape)``; row ``i`` receives sample
            ``indices[i]`` where found. Rows of missing samples are left as they
            were. ``torch.from_numpy(out)`` then wraps it without a copy.
        labels : numpy.ndarray, optional
            int64 array of length ``len(indices)`` receiving stored labels.

        Returns
        -------
        numpy.ndarray
            bool mask, True where the sample was found and passed its check.

        Raises
        ------
        CacheError
            If ``out`` has the wrong shape/dtype, or LMDB fails to read.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = idx.size
        shape = self.identity.sample_shape
        if (
            not isinstance(out, np.ndarray)
            or out.dtype != np.uint8
            or not out.flags.c_contiguous
            or out.shape[1:] != shape
            or out.shape[0] < n
        ):
            raise CacheError(
                f"out must be a C-contiguous uint8 array of shape "
                f"({n}, {', '.join(map(str, shape))}) "
                f"or longer, not {getattr(out, 'dtype', type(out).__name__)} "
                f"{getattr(out, 'shape', '')}"
            )
        if labels is not None and (labels.shape[0] < n or labels.dtype != np.int64):
            raise CacheError(f"labels must be an int64 array of length >= {n}")
        self._check_variant(variant)
        size = self._payload_size()
        keys, ints = pack_keys(idx, variant)
        corrupt: list[tuple[bytes, CorruptRecordError]] = []
        with self._read() as txn:  # (LMDB errors raised as CacheError)
            if self._state is StoreState.STALE or not self._meta_current(txn):
                found = np.zeros(n, dtype=bool)
            elif n == 0:
                found = np.zeros(0, dtype=bool)
            elif size <= STAGED_MAX_PAYLOAD:
                found = self._read_staged(txn, keys, ints, out, labels, corrupt)
            else:
                found = self._read_direct(txn, keys, ints, out, labels, corrupt)
        hits = int(found.sum())
        self.stats.hits += hits
        self.stats.misses += n - hits
        if hits < n:
            self._known_complete.discard(variant)
        if corrupt:
            self.stats.corrupt += len(corrupt)
            with self._lock:
                self._pending_drop.update(key for key, _ in corrupt)
            for _, err in corrupt:
                logger.warning("%s (cache %s)", err, self.path)
        return found

    def _read_direct(
        self,
        txn: lmdb.Transaction,
        keys: list[bytes],
        ints: np.ndarray,
        out: np.ndarray,
        labels: np.ndarray | None,
        corrupt: list[tuple[bytes, CorruptRecordError]],
    ) -> np.ndarray:
        """Large records: check each in LMDB's map, copy its payload once into ``out``."""
        size = self._payload_size()
        end = HEADER_SIZE + size
        dst = out.data.cast("B")  # row i is bytes [i * size, (i + 1) * size)
        found = np.zeros(len(keys), dtype=bool)
        get = txn.get
        for i, seed in enumerate(ints.tolist()):
            value = get(keys[i])
            if value is None:
                continue
            label = record_label(value, seed, size)
            if label is None:
                self._corrupt(keys[i], value, size, corrupt)
                continue
            dst[i * size : (i + 1) * size] = value[HEADER_SIZE:end]
            if labels is not None:
                labels[i] = label
            found[i] = True
        return found

    def _read_staged(
        self,
        txn: lmdb.Transaction,
        keys: list[bytes],
        ints: np.ndarray,
        out: np.ndarray,
        labels: np.ndarray | None,
        corrupt: list[tuple[bytes, CorruptRecordError]],
    ) -> np.ndarray:
        """Small records: copy each whole record into a staging array and hash it (two
        Python-level operations per record), then check headers and checksums and
        copy the payloads into ``out`` with numpy, for the whole batch at once.

        Per-record Python work, not bytes, bounds small records; the second copy is
        cheap at these sizes (at most ``STAGED_MAX_PAYLOAD`` bytes).
        """
        size = self._payload_size()
        end = HEADER_SIZE + size
        record = end + CHECKSUM_SIZE
        n = len(keys)
        stage = np.empty((n, record), dtype=np.uint8)
        flat = stage.data.cast("B")
        computed = [0] * n  # xxh3 of each record's header and payload
        present: list[int] = []
        digest = xxhash.xxh3_64_intdigest
        seeds = ints.tolist()
        get = txn.get
        values = [get(key) for key in keys]
        for i, value in enumerate(values):
            if value is not None and len(value) == record:
                flat[i * record : (i + 1) * record] = value
                computed[i] = digest(value[:end], seed=seeds[i])
                present.append(i)
        ok = np.zeros(n, dtype=bool)
        ok[present] = True
        ok &= np.array(computed, dtype=np.uint64) == stage[:, end:].copy().view("<u8").ravel()
        ok &= (stage[:, :HEADER_VERSION_END] == _HEADER_PREFIX).all(axis=1)
        ok &= stage[:, 16:HEADER_SIZE].copy().view("<u8").ravel() == size
        for i in np.flatnonzero(~ok).tolist():
            if values[i] is not None:
                self._corrupt(keys[i], values[i], size, corrupt)
        rows = out.reshape(out.shape[0], size)
        if ok.all():
            rows[:n] = stage[:, HEADER_SIZE:end]
        elif ok.any():
            rows[np.flatnonzero(ok)] = stage[ok, HEADER_SIZE:end]
        if labels is not None and ok.any():
            labels[:n][ok] = stage[ok, 8:16].copy().view("<i8").ravel()
        return ok

    def _corrupt(
        self,
        key: bytes,
        value: Any,
        size: int,
        corrupt: list[tuple[bytes, CorruptRecordError]],
    ) -> None:
        index, variant = unpack_key(key)
        try:
            check_record(value, index, variant, size)
        except CorruptRecordError as exc:
            corrupt.append((bytes(key), exc))

    def _check_variant(self, variant: int) -> None:
        if isinstance(variant, bool) or not isinstance(variant, int | np.integer):
            raise CacheError(f"variant must be an int, not {variant!r}")
        if not 0 <= int(variant) < self.config.variants:
            raise CacheError(
                f"variant {variant} is out of range 0..{self.config.variants - 1} "
                f"(the cache keeps {self.config.variants} variants)"
            )

    # -- filling ----------------------------------------------------------------------
    def put_batch(
        self,
        indices: Sequence[int] | np.ndarray,
        variant: int,
        images: np.ndarray,
        labels: Sequence[int] | np.ndarray,
    ) -> int:
        """Write one batch of augmented samples in one transaction.

        Parameters
        ----------
        indices : sequence of int
            Sample indices of the rows of ``images``.
        variant : int
            Their variant.
        images : numpy.ndarray
            uint8 array ``(n, *sample_shape)`` (CHW samples).
        labels : sequence of int
            Their labels.

        Returns
        -------
        int
            Records written. Records already present are kept (a sample's
            variant is fixed once cached); 0 when the store does not admit.

        Raises
        ------
        CacheError
            On bad shapes, or once when a write fails for a reason other than
            ``max_bytes`` (disk full, I/O error); see the module docs.
        """
        return self.put_batches([(np.asarray(indices), variant, images, np.asarray(labels))])

    def put_batches(self, batches: Iterable[BatchTuple]) -> int:
        """Write several ``(indices, variant, images, labels)`` batches in one transaction.

        See :meth:`put_batch`. When the whole transaction would exceed
        ``max_bytes``, the records are written in order, as many as fit (see
        :meth:`put_encoded`): a cache near its bound is filled up to one record
        short of it, not left short by a batch because the writer wrote large ones.
        """
        if self._state is not StoreState.ADMITTING:
            return 0
        return self.put_encoded([self.encode_batch(*batch) for batch in batches])

    def put_encoded(self, batches: Sequence[EncodedBatch]) -> int:
        """Write batches made by :meth:`encode_batch` in one transaction (see
        :meth:`put_batches`, whose rules apply); returns the records written.

        Records that would take the cache beyond ``max_bytes`` are cut: the longest
        prefixes that fit are written, one transaction each (the chunk is halved after
        each refusal), so the cache fills record by record up to where one more
        record would not fit (:func:`~cache.room.has_room`); then the store is ``FULL``.
        """
        shared = self._env()
        if self._state is not StoreState.ADMITTING:
            return 0
        items = [item for batch in batches for item in batch.items]
        with self._lock:
            pending = self._pending_drop
            self._pending_drop = set()
        written = 0
        start, chunk = 0, len(items)
        try:
            while True:
                try:
                    w, d, room = self._write(shared, pending, items[start : start + chunk])
                except lmdb.MapFullError:  # beyond max_bytes, or LMDB's map is full
                    if chunk <= 1:  # not even one record fits
                        room = False
                        break
                    chunk //= 2
                    continue
                pending = set()  # dropped by the committed transaction
                written += w
                self.stats.written += w
                self.stats.dropped += d
                start += chunk
                if start >= len(items) or not room:
                    break
        except _Rebuilt:
            with self._lock:
                self._pending_drop.clear()
            self._become_stale()
            return written
        except (lmdb.Error, OSError) as exc:
            with self._lock:
                self._pending_drop |= pending
                self._state = StoreState.FAILED
            if isinstance(exc, DAMAGE_ERRORS):
                raise damaged(self.path, str(exc)) from exc
            needed = sum(len(value) for _, value in items[start : start + chunk])
            full = disk_full(self.path, exc, needed=needed)
            reason = f": {full}" if full is not None else f" ({explain(exc)})"
            hint = (
                "free disk space"
                if full is not None
                or isinstance(exc, OSError)
                and exc.errno == errno.ENOSPC
                or "space" in str(exc)
                else "check the disk and permissions"
            )
            raise CacheError(
                f"writing to the cache at {self.path} failed{reason}; it stops admitting new "
                f"samples and keeps serving the {self._committed_hint()} it holds; {hint}, then "
                "reopen it to fill again"
            ) from exc
        if not room:
            with self._lock:
                self._pending_drop |= pending
                self._state = StoreState.FULL
            logger.info(
                "cache %s reached max_bytes=%d; it stops admitting and keeps serving",
                self.path,
                self._max_bytes(shared),
            )
        return written

    def encode_batch(
        self,
        indices: Any,
        variant: int,
        images: Any,
        labels: Any,
        out: np.ndarray | None = None,
    ) -> EncodedBatch:
        """Check one batch and encode its records (:func:`~cache.record.encode_records`).

        Parameters
        ----------
        indices, variant, images, labels
            As for :meth:`put_batch`.
        out : numpy.ndarray, optional
            uint8 ``(m, record_size)`` with ``m >= len(indices)`` to encode into
            (reused from batch to batch by :class:`~cache.fill.CacheFiller`);
            ``record_size`` is :attr:`record_size`. Default: a new array.

        Raises
        ------
        CacheError
            On bad shapes, a bad variant or an index out of range.
        """
        size = self._payload_size()
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        self._check_variant(variant)
        arr = np.asarray(images)
        if arr.dtype != np.uint8 or arr.shape != (idx.size, *self.identity.sample_shape):
            raise CacheError(
                f"images must be uint8 of shape ({idx.size}, "
                f"{', '.join(map(str, self.identity.sample_shape))}) (CHW samples), not "
                f"{arr.dtype} {arr.shape}"
            )
        lab = np.asarray(labels, dtype=np.int64).reshape(-1)
        if lab.size != idx.size:
            raise CacheError(f"got {lab.size} labels for {idx.size} samples")
        if idx.size and int(idx.max()) >= self.identity.num_samples:
            raise CacheError(
                f"sample index {int(idx.max())} is out of range for a cache of "
                f"{self.identity.num_samples} samples"
            )
        if idx.size == 0:
            return EncodedBatch([], None)
        records = encode_records(idx, int(variant), lab, arr.reshape(idx.size, size), out=out)
        keys, _ = pack_keys(idx, int(variant))
        record = records.shape[1]
        flat = records.data.cast("B")
        items = [(key, flat[i * record : (i + 1) * record]) for i, key in enumerate(keys)]
        return EncodedBatch(items, records if out is None else out)

    @property
    def record_size(self) -> int:
        """Bytes of one stored record (payload plus header and checksum)."""
        return self._payload_size() + RECORD_OVERHEAD

    def _write(
        self, shared: SharedEnv, pending: set[bytes], items: list[tuple[bytes, Any]]
    ) -> tuple[int, int, bool]:
        """One write transaction (see :meth:`_write_once`), tried once more when another
        process grew the map (``MDB_MAP_RESIZED``: adopt its size) or when the map is full
        (free dead readers' slots, commit a small transaction so that freed pages become
        reusable). Returns ``(written, dropped, room)`` as :meth:`_write_once`; lmdb errors,
        :class:`_OverMaxBytes` and :class:`_Rebuilt` propagate."""
        resized = made_room = False
        while True:
            try:
                return self._write_once(shared, pending, items)
            except _OverMaxBytes:
                raise
            except lmdb.MapResizedError:
                if resized:
                    raise
                resized = True
                shared.env.set_mapsize(0)
            except lmdb.MapFullError:
                if made_room:
                    raise
                made_room = True
                try:
                    shared.env.reader_check()
                except lmdb.Error:  # pragma: no cover - best effort
                    pass
                if not settle(shared):
                    raise

    def _write_once(
        self, shared: SharedEnv, pending: set[bytes], items: list[tuple[bytes, Any]]
    ) -> tuple[int, int, bool]:
        """One write transaction: check that the cache was not rebuilt meanwhile, drop the
        pending corrupt keys, put ``items`` (never overwriting; nothing when the cache is
        full, :func:`~cache.room.has_room`), and commit unless that takes the cache beyond
        ``max_bytes``. Returns ``(written, dropped, room)``: ``room`` is whether one more
        record fits after the commit."""
        size = self._payload_size()
        dropped = 0
        with write_txn(shared, shared.records) as txn:
            if not self._meta_current(txn):
                raise _Rebuilt
            for key in pending:
                value = txn.get(key)
                if value is not None and not self._valid(key, value, size):
                    txn.delete(key)
                    dropped += 1
            written = 0
            if items and self._has_room(txn, shared):
                # In key order: neighbouring keys share leaf pages, fewer page copies.
                _, written = txn.cursor().putmulti(
                    sorted(items, key=operator.itemgetter(0)), overwrite=False
                )
                if written and used_bytes(txn, shared) > self._data_limit(shared):
                    raise _OverMaxBytes(
                        f"the write would exceed max_bytes={self._max_bytes(shared)}"
                    )
            room = self._has_room(txn, shared)
        if dropped:
            settle(shared)
        return int(written), dropped, room

    def _data_limit(self, shared: SharedEnv) -> int:
        """What records and metadata may fill: :attr:`max_bytes` less the bookkeeping pages
        (:func:`~cache.room.data_limit`)."""
        return data_limit(self._max_bytes(shared), shared.psize)

    def _max_bytes(self, shared: SharedEnv) -> int:
        bound = self.config.max_bytes
        return bound if shared.max_bytes is None else min(bound, shared.max_bytes)

    @property
    def max_bytes(self) -> int:
        """The size bound in force for this store's writes, in bytes.

        ``config.max_bytes``, or less when the cache's LMDB environment, shared by
        every store of the directory in this process, was opened with a smaller
        ``max_bytes`` (by another store, e.g. another loader's, still open): its map
        is sized once, by its first opener (see :mod:`cache.env`). Writes stop there,
        as the first store's do; the larger bound applies to a store opened after
        every store of the directory in this process has been closed.
        """
        return self._max_bytes(self._env())

    def _has_room(self, txn: lmdb.Transaction, shared: SharedEnv) -> bool:
        """Whether one more record fits, as ``txn`` sees the cache
        (:func:`~cache.room.has_room`)."""
        return has_room(
            used_bytes(txn, shared),
            next_record_bytes(txn, shared, self.record_size),
            self._data_limit(shared),
        )

    def _committed_hint(self) -> str:
        try:
            return f"{self.count()} records"
        except CacheError:
            return "records"

    @staticmethod
    def _valid(key: bytes, value: Any, size: int) -> bool:
        index, variant = unpack_key(key)
        try:
            check_record(value, index, variant, size)
        except CorruptRecordError:
            return False
        return True

    def drop(self, pairs: Iterable[tuple[int, int]]) -> int:
        """Delete the records of ``(index, variant)`` pairs; returns how many existed.

        Raises
        ------
        CacheError
            If the cache cannot be written.
        """
        shared = self._env()
        if shared.readonly:
            raise CacheError(f"cannot drop records: the cache at {self.path} is read-only")
        keys = [pack_keys(np.array([i]), v)[0][0] for i, v in pairs]
        self._known_complete.clear()
        deleted = 0
        try:
            with write_txn(shared, shared.records) as txn:
                for key in keys:
                    deleted += bool(txn.delete(key))
        except lmdb.Error as exc:
            raise lmdb_failure(self.path, exc, "dropping records from") from exc
        if deleted:
            settle(shared)
        self.stats.dropped += deleted
        return deleted

    def clear(self) -> int:
        """Delete every record (the metadata stays); returns how many there were.

        The data file keeps its size: its pages are reused by the next fill (a
        small transaction is committed after the clear so that they can be).
        Delete the directory to give the disk space back.
        """
        shared = self._env()
        self._known_complete.clear()
        count = drop_all(shared, self.path, metadata=False)
        if self._state is StoreState.FULL:
            self._state = StoreState.ADMITTING
        return count

    # -- inspection -------------------------------------------------------------------
    def count(self) -> int:
        """Records in the cache (all variants); O(1)."""
        with self._read() as txn:
            return int(txn.stat(self._env().records)["entries"])

    def counts(self) -> dict[int, int]:
        """Complete records per variant in use, ``0 .. variants - 1`` (those without
        records included as 0). Records outside the metadata are not counted here:
        see :meth:`unused_counts`."""
        return self._scan_counts()[0]

    def unused_counts(self) -> dict[int, int]:
        """Records outside the metadata per variant: variants ``>= variants`` (left from
        a configuration with more variants) or indices ``>= num_samples``. They are
        never served; ``dataplane cache verify --repair`` deletes them."""
        return self._scan_counts()[1]

    def _scan_counts(self, chunk: int = 1 << 16) -> tuple[dict[int, int], dict[int, int]]:
        """``(counts, unused_counts)`` from one key-only scan; a key that is not a record
        key raises :class:`DamagedCacheError` (:meth:`_check_keys`)."""
        variants = self.config.variants
        num_samples = self.identity.num_samples
        used = np.zeros(variants, dtype=np.int64)
        unused: dict[int, int] = {}
        with self._read() as txn:
            keys = txn.cursor().iternext(keys=True, values=False)
            while batch := list(itertools.islice(keys, chunk)):
                self._check_keys(batch)
                ints = np.frombuffer(b"".join(batch), dtype=">u8").astype(np.uint64)
                variant = (ints >> np.uint64(48)).astype(np.int64)
                index = (ints & np.uint64(MAX_INDEX)).astype(np.int64)
                inside = (variant < variants) & (index < num_samples)
                used += np.bincount(variant[inside], minlength=variants)
                for v, n in zip(*np.unique(variant[~inside], return_counts=True), strict=True):
                    unused[int(v)] = unused.get(int(v), 0) + int(n)
        return dict(enumerate(used.tolist())), dict(sorted(unused.items()))

    def _check_keys(self, keys: Sequence[Any]) -> None:
        """Raise :class:`DamagedCacheError` if one of ``keys``, read from the records, is
        not a record key (:func:`~cache.record.malformed_key`): the file is damaged."""
        why = malformed_key(keys)
        if why is not None:
            raise damaged(self.path, why)

    def completed(self, variant: int) -> np.ndarray:
        """bool mask over sample indices: True where ``(index, variant)`` is cached.

        Presence is completeness (see :mod:`cache.meta`); checksums are checked
        when served or verified.

        A variant found complete is remembered, and later calls return at once
        instead of scanning its keys again (the scan costs 1-2 us per record,
        ``benchmarks/cache_costs.py``, against about 3 us per record served at
        28x28). Records are only ever added, except
        by :meth:`drop`, :meth:`clear`, a rebuild, or the drop of a corrupt one;
        each of these in this store forgets what it remembered, and so does a
        :meth:`get_batch` of the variant that misses a sample (records dropped by
        another process: the caller produces that sample fresh, and the next call
        scans again).
        """
        self._check_variant(variant)
        n = self.identity.num_samples
        if self._state is StoreState.STALE:
            return np.zeros(n, dtype=bool)
        if variant in self._known_complete:
            return np.ones(n, dtype=bool)
        mask = np.zeros(n, dtype=bool)
        start, _ = pack_keys(np.array([0]), variant)
        keys: list[Any] = []
        raw = b""
        with self._read() as txn:
            cursor = txn.cursor()
            if cursor.set_range(start[0]):
                # The variant's keys are one contiguous range of at most n keys: read
                # them in C (islice), decode them at once with numpy.
                keys = list(itertools.islice(cursor.iternext(keys=True, values=False), n))
                self._check_keys(keys)
                raw = b"".join(keys)
        ints = np.frombuffer(raw, dtype=">u8").astype(np.uint64)
        index = (ints & np.uint64(MAX_INDEX)).astype(np.int64)
        mine = (ints >> np.uint64(48)) == variant
        index = index[mine & (index < n)]
        mask[index] = True
        if mask.all():
            self._known_complete.add(variant)
        return mask

    def visit(
        self,
        fn: Callable[[bytes, memoryview], None],
        *,
        chunk: int = 1024,
    ) -> int:
        """Call ``fn(key, value)`` for every record, in key order; returns the count.

        ``value`` is a read-only view into LMDB's map, valid only during the
        call. Records are read in read transactions of ``chunk`` records, so a
        long scan does not pin old pages while a writer fills.
        """
        visited = 0
        start: bytes | None = b""
        while start is not None:
            with self._read() as txn:
                cursor = txn.cursor()
                if not cursor.set_range(start):
                    break
                n = 0
                start = None
                for key, value in cursor.iternext():
                    if n == chunk:
                        start = bytes(key)
                        break
                    fn(bytes(key), memoryview(value))  # a view of the view: no copy
                    n += 1
                visited += n
        return visited

    def info(self) -> CacheInfo:
        """Counts, sizes and state (see :class:`CacheInfo`)."""
        shared = self._env()
        counts, unused = self._scan_counts()
        env_info = shared.env.info()
        psize = shared.psize
        with self._read() as txn:
            used = used_bytes(txn, shared)
            next_record = next_record_bytes(txn, shared, self.record_size)
        if self._state is StoreState.ADMITTING and not has_room(
            used, next_record, self._data_limit(shared)
        ):
            with self._lock:  # found full: it stops admitting, as a write would find
                self._state = StoreState.FULL
        try:
            file_bytes = (self.path / "data.mdb").stat().st_size
        except OSError:
            file_bytes = 0
        return CacheInfo(
            path=str(self.path),
            meta=self.meta,
            state=self._state,
            counts=counts,
            records=sum(counts.values()),
            file_bytes=int(file_bytes),
            used_bytes=used,
            max_bytes=int(self._max_bytes(shared)),
            record_bytes=int(record_bytes(self.record_size, psize)),
            map_bytes=int(env_info["map_size"]),
            bookkeeping_bytes=BOOKKEEPING_PAGES * psize,
            unused=unused,
            next_record_bytes=next_record,
        )

    # -- lifecycle --------------------------------------------------------------------
    def close(self) -> None:
        """Release this store's share of the environment (idempotent)."""
        shared, self._shared = self._shared, None
        if shared is not None:
            if self._pid != os.getpid():
                return  # inherited through fork: never close
            release(self.path, shared)

    def __enter__(self) -> CacheStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"CacheStore({str(self.path)!r}, variants={self.config.variants}, "
            f"shape={self.identity.sample_shape if hasattr(self, 'identity') else '?'}, "
            f"state={self._state.value!r})"
        )
