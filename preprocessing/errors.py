"""Errors raised by :mod:`preprocessing`.

Every error of this package derives from :class:`PreprocessingError`; messages
name the bad value and how to fix it.
"""

from __future__ import annotations


class PreprocessingError(Exception):
    """Base class of every error raised by :mod:`preprocessing`."""


class RecipeError(PreprocessingError, ValueError):
    """A recipe name, parameter or custom recipe definition is invalid."""


class PreprocessingInputError(PreprocessingError, ValueError):
    """An input does not match the recipe (for example images given to :func:`normalize`
    whose shape is not ``(N, C, H, W)`` with ``C == recipe.channels``).

    The message names the expected and the given shape. It is a :class:`ValueError`, so
    ``except ValueError`` written for the built-in error still catches it.
    """


class DeviceError(PreprocessingError, ValueError):
    """A device choice is invalid or unavailable (for example ``"cuda"`` without a GPU)."""
