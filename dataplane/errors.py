"""Errors raised by the data plane's public face.

Every error of this package derives from :class:`DataplaneError`, so a caller
can catch one type. Messages name the bad value and how to fix it.
"""

from __future__ import annotations

import cache.errors


class DataplaneError(Exception):
    """Base class of every error raised by :mod:`dataplane`."""


class ConfigError(DataplaneError, ValueError):
    """An argument or option has a bad type or value (raised at construction)."""


class DatasetError(DataplaneError):
    """A dataset is missing, empty or malformed (for example, labels out of range)."""


class IngestConflictError(DatasetError):
    """``dataplane ingest`` found another ingest (other settings, or an interrupted run)
    where it would write, and ``overwrite`` was not given."""


class DatasetRootError(DatasetError):
    """A dataset *root* (``train/``, ``test/`` ... beside each other, or the output of
    ``dataplane ingest``) was given where one split was expected.

    Its split folders would otherwise be read as classes (an image folder) or their
    rows merged (Parquet). The message names a split to give instead, e.g.
    ``data/fmnist/train``.

    Attributes
    ----------
    root : str
        The folder given.
    splits : tuple of str
        Its split sub-folders, sorted.
    """

    def __init__(self, message: str, *, root: str, splits: tuple[str, ...]) -> None:
        super().__init__(message)
        self.root = root
        self.splits = splits


#: How a :class:`DataError` message says to skip corrupt samples (Python API) ...
SKIP_HINT = "pass on_corrupt='skip' to skip and count corrupt samples"
#: ... and how a command line says it (``dataplane iterate --on-corrupt skip``).
CLI_SKIP_HINT = "pass --on-corrupt skip to skip and count corrupt samples"


def cli_message(error: BaseException) -> str:
    """``error``'s message for a command line: the Python-API hint of a
    :class:`DataError` is replaced by the ``--on-corrupt skip`` option."""
    return str(error).replace(SKIP_HINT, CLI_SKIP_HINT)


class DataError(DataplaneError):
    """A sample could not be read or decoded (corrupt or truncated image).

    Attributes
    ----------
    index : int
        Index of the sample in the source.
    path : str
        File (or ``parquet-file#row``) the sample came from.
    """

    def __init__(self, message: str, *, index: int, path: str) -> None:
        super().__init__(message)
        self.index = index
        self.path = path


class PipelineError(DataplaneError):
    """The DALI pipeline failed for a reason no single sample explains, or a recipe
    produced output of the wrong shape or type."""


class CorruptSampleWarning(UserWarning):
    """Corrupt or unreadable samples were skipped in an epoch (``on_corrupt="skip"``)."""


class StaleCacheError(DataplaneError, cache.errors.StaleCacheError):
    """The loader's cache was built for another recipe, dataset or sample shape.

    Raised by ``Loader(..., cache=CacheConfig(...))`` at construction. It is
    also a :class:`cache.StaleCacheError`; its message says what changed and how
    to rebuild (``CacheConfig(path, rebuild=True)`` or ``dataplane cache build
    --rebuild``).

    Attributes
    ----------
    changes : tuple of str
        One line per thing that changed.
    """


class CacheWarning(UserWarning):
    """The loader's cache cannot serve or admit as configured (unwritable, disk full,
    ``max_bytes`` reached, unreadable); the loader goes on with fresh samples. Also
    issued when fewer ``variants`` than the cache holds leave records unused."""
