"""Errors raised by :mod:`placement.storage`."""

from __future__ import annotations

from placement.errors import PlacementError


class StorageError(PlacementError):
    """A temporary file could not be created, written, read or deleted.

    Raised only where no fallback exists (both tiers failed, a file used after it was
    deleted); an SSD that is full falls back to HDD instead of raising.
    """


class UnsafePathError(StorageError, ValueError):
    """A file name would escape its tier directory (``..``, an absolute path, a symlink)."""


class TierIOError(StorageError, OSError):
    """Reading or writing a temporary file failed on every tier it could use.

    It is an :class:`OSError` carrying the original ``errno``, so callers that already
    handle disk errors (Dask's ``SpillBuffer`` keeps the value in memory, P2P shuffle
    reports ``ENOSPC`` as out of disk) keep doing so.
    """


class ShardError(StorageError, LookupError):
    """A cache shard is not in this worker's store (dropped, or read on another worker),
    or a read asks for records it does not hold."""


class StorageConfigError(StorageError, ValueError):
    """A tier or log directory cannot be used as configured (names the ``placement.*-dir``
    key, the directory and the fix), or a storage option or argument has a bad value (names
    the argument, the value and what it must be)."""
