"""Errors raised by :mod:`logs_analysis`; every one derives from :class:`AnalysisError`."""

from __future__ import annotations

__all__ = [
    "AnalysisConfigError",
    "AnalysisError",
    "DependencyError",
    "EmptySelectionError",
    "FormatError",
    "InputError",
    "OutputError",
    "TruncatedStreamError",
]


class AnalysisError(Exception):
    """Base class of every error raised by :mod:`logs_analysis`."""


class AnalysisConfigError(AnalysisError, ValueError):
    """An option or argument has a bad value (a budget, a scheduler, a row count).

    The message names the option, the value and what it must be. It is a
    :class:`ValueError`, so ``except ValueError`` written for the built-in error still
    catches it.
    """


class InputError(AnalysisError, ValueError):
    """An input path is missing, empty or unreadable, or holds no usable record.

    The message names the path and what to do about it.
    """


class EmptySelectionError(InputError):
    """The inputs hold usable rows, but the filters (``--pipeline``, ``--since``,
    ``--until``) leave none of them. The message names the filter and what the rows hold
    (the pipelines, their creation times)."""


class FormatError(AnalysisError, ValueError):
    """An input's format is not recognised, not supported (e.g. a compression codec),
    or does not match the format forced with ``--format``."""


class TruncatedStreamError(FormatError):
    """A compressed stream ends before its end mark (a file cut short, or still being
    written, like Spark's in-progress ``.zstd`` event logs); what came before it decoded."""


class OutputError(AnalysisError, ValueError):
    """The report cannot go where asked (it would overwrite an input, or the HTML and the
    JSON would be one file). The message names the file and says to choose another
    ``--out``."""


class DependencyError(AnalysisError, ImportError):
    """An optional dependency (e.g. ``darshan``) needed by a reader is not installed."""
