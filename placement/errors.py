"""Errors raised by :mod:`placement`; every one derives from :class:`PlacementError`.

Bad arguments (a price, a budget, a policy option, a trace's arrays) raise
:class:`PlacementConfigError`, a :class:`ValueError`, or :class:`PlacementTypeError`, a
:class:`TypeError`, for a value of the wrong type, so ``except ValueError`` and ``except
TypeError`` written for the built-in errors still catch them.
"""

from __future__ import annotations


class PlacementError(Exception):
    """Base class of every error raised by :mod:`placement`."""


class SchemaError(PlacementError, ValueError):
    """A log table does not match the placement log schema (names the columns and the fix)."""


class ModelError(PlacementError):
    """A model file is missing, unreadable or incompatible with this version."""


class PlacementConfigError(PlacementError, ValueError):
    """An argument has a bad value (names the argument, the value and what it must be)."""


class PlacementTypeError(PlacementError, TypeError):
    """An argument has the wrong type (names the argument, the value and the type it needs)."""
