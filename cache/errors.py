"""Errors raised by the augmented-sample cache.

Every error of this package derives from :class:`CacheError`; errors of the
``lmdb`` library are wrapped at the boundary (``lmdb.MapFullError`` never reaches
a caller: a full cache stops admitting instead, see :mod:`cache.store`).
"""

from __future__ import annotations


class CacheError(Exception):
    """Base class of every error raised by :mod:`cache`."""


class CacheConfigError(CacheError, ValueError):
    """A cache option has a bad type or value (raised at construction)."""


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
