"""Errors raised by the data plane's public face.

Every error of this package derives from :class:`DataplaneError`, so a caller
can catch one type. Messages name the bad value and how to fix it.
"""

from __future__ import annotations

import os
import sys
import warnings

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

#: Python-API spellings in messages and the options of the ``dataplane`` commands that
#: build a Loader (``iterate``, ``cache build``, ``train``, ``doctor``) that say the same.
CLI_SPELLINGS: tuple[tuple[str, str], ...] = (
    (SKIP_HINT, CLI_SKIP_HINT),
    ("device='cuda'", "--device cuda"),
    ("device='cpu'", "--device cpu"),
    ("device=None", "--device auto"),
    ("; see loader.last_epoch_stats.skipped", ""),
)


def cli_message(error: BaseException | Warning | str) -> str:
    """``error``'s message for a command line: its Python-API hints are replaced by
    the command-line options that say the same (:data:`CLI_SPELLINGS`), e.g.
    ``on_corrupt='skip'`` by ``--on-corrupt skip`` and ``device='cpu'`` by
    ``--device cpu``."""
    text = str(error)
    for api, cli in CLI_SPELLINGS:
        text = text.replace(api, cli)
    return text


#: Folders whose frames :func:`warn_user` skips: the data plane and its cache.
_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep for path in (__file__, cache.errors.__file__)
)


def warn_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` attributed to the user's line.

    The warning points at the first caller outside :mod:`dataplane` and :mod:`cache`
    (the ``for`` loop over a Loader, the ``Loader(...)`` call), however deep in the
    loader it is issued: what ``skip_file_prefixes`` does on Python 3.12, computed
    here for 3.10 and 3.11. A warning filter on the user's module applies to it.

    Parameters
    ----------
    message : str
        The warning's text.
    category : type of Warning
        :class:`CorruptSampleWarning`, :class:`CacheWarning` or :class:`MixedImageSizeWarning`.
    """
    level = 2  # warn_user's caller
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


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
    ``max_bytes`` reached, unreadable, damaged: the message names the fix); the loader
    goes on with fresh samples. Also
    issued when fewer ``variants`` than the cache holds leave records unused, and when
    a loader fills variants that another loader (or process) with fewer ``variants``
    left outside the cache's metadata."""


class EmptyClassWarning(UserWarning):
    """Class folders of an :class:`~dataplane.sources.ImageFolderSource` hold no images.

    They stay classes (labels and ``num_classes`` count them), as with torchvision's
    ``ImageFolder(allow_empty=True)``, so that a split missing some classes (e.g. a
    ``dataplane ingest --limit N`` one) keeps the labels of the others; the warning
    names the folders.
    """


class MixedImageSizeWarning(UserWarning):
    """The images probed to infer a Loader's output ``size`` differ in size.

    Issued by ``Loader(...)`` when it infers ``size`` (none given to the Loader or
    its recipe): it takes the median shorter side of the probed images and names
    their range; pass ``size=`` to choose the output side instead.
    """
