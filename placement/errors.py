"""Errors raised by :mod:`placement`; every one derives from :class:`PlacementError`."""

from __future__ import annotations


class PlacementError(Exception):
    """Base class of every error raised by :mod:`placement`."""


class SchemaError(PlacementError, ValueError):
    """A log table does not match the placement log schema (names the columns and the fix)."""


class ModelError(PlacementError):
    """A model file is missing, unreadable or incompatible with this version."""
