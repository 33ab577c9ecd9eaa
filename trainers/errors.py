"""Errors raised by :mod:`trainers`.

Every error of this package derives from :class:`TrainerError`, so a caller can
catch one type. Messages name the bad value and how to fix it. Errors of the
data plane (:class:`dataplane.DataplaneError`) pass through unchanged: they
already name their cause.
"""

from __future__ import annotations


class TrainerError(Exception):
    """Base class of every error raised by :mod:`trainers`."""


class TrainerConfigError(TrainerError, ValueError):
    """An argument or option has a bad type or value (raised before training starts)."""


class CheckpointError(TrainerError):
    """A checkpoint is missing, unreadable, or does not match the run being resumed."""


class RunRecordError(TrainerError):
    """A run directory has no readable ``run.json`` (for ``dataplane compare``)."""


class TrainerDataError(TrainerError):
    """A dataset folder is missing or empty, or holds an unreadable image."""
