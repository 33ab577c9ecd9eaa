"""Errors raised by the augmented-sample cache.

Every error of this package derives from :class:`CacheError`; errors of the
``lmdb`` library are wrapped at the boundary (``lmdb.MapFullError`` never reaches
a caller: a full cache stops admitting instead, see :mod:`cache.store`; a damaged
file is a :class:`DamagedCacheError`).
"""

from __future__ import annotations


class CacheError(Exception):
    """Base class of every error raised by :mod:`cache`."""


class CacheConfigError(CacheError, ValueError):
    """A cache option or argument has a bad type or value (raised at construction, or by
    a record function given a key out of range or a buffer of the wrong shape)."""


class StaleCacheError(CacheError):
    """The cache was built for another recipe, dataset, sample shape or schema.

    Attributes
    ----------
    changes : tuple of str
        One line per thing that changed, e.g. ``"recipe 'train': size 28 -> 32
        (fingerprint 0f3a... -> 77de...)"``, or ``"recipe fingerprint: ... -> ..."``
        for a cache whose recipe is not described.
    """

    def __init__(self, message: str, *, changes: tuple[str, ...]) -> None:
        super().__init__(message)
        self.changes = changes


class UnreadableMetaError(CacheError):
    """The cache's metadata document cannot be parsed (a damaged cache).

    ``dataplane cache clear PATH`` deletes its records and metadata;
    ``CacheConfig(path, rebuild=True)`` rebuilds it.
    """


class DamagedCacheError(CacheError):
    """The cache's ``data.mdb`` is damaged: truncated, not a valid or complete LMDB file,
    holding a damaged page (LMDB's ``MDB_CORRUPTED``, ``MDB_PAGE_NOTFOUND``,
    ``MDB_INVALID``), or holding a key that is not a record key (of the wrong length).

    Its records cannot be trusted, and dropping records (``dataplane cache verify
    --repair``) cannot mend it. ``CacheConfig(path, rebuild=True)`` (``dataplane cache
    build --rebuild``) and ``dataplane cache clear PATH`` start it anew when its tree
    cannot be cleared, by deleting its ``data.mdb`` and ``lock.mdb`` (nothing else);
    so does deleting the directory. A loader warns (``CacheWarning``) and serves fresh
    samples.

    Attributes
    ----------
    path : str
        The cache directory.
    reason : str
        What is wrong with it, e.g. ``"its data.mdb is truncated: 1000000 bytes of
        1712128"`` or LMDB's error (``"mdb_cursor_get: MDB_CORRUPTED: ..."``).
    """

    def __init__(self, message: str, *, path: str, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class CorruptRecordError(CacheError):
    """A record failed its checksum or structural check.

    Attributes
    ----------
    index : int
        Sample index of the record.
    variant : int
        Augmentation variant of the record.
    """

    def __init__(self, message: str, *, index: int, variant: int) -> None:
        super().__init__(message)
        self.index = index
        self.variant = variant
