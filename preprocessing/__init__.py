"""DALI preprocessing recipes (train/eval), device choice and recipe fingerprints.

A recipe's DALI pipeline turns encoded images into augmented **uint8 CHW**
images; :func:`normalize` turns those into float32 on the target device.
"""

from __future__ import annotations

from preprocessing import builtin as _builtin  # noqa: F401  (registers train/eval)
from preprocessing.builtin import decode, to_chw
from preprocessing.device import Device, resolve_device
from preprocessing.errors import (
    DeviceError,
    PreprocessingError,
    PreprocessingInputError,
    RecipeError,
)
from preprocessing.normalize import normalize
from preprocessing.pipeline import INPUT_NAME, build_pipeline
from preprocessing.recipe import (
    RECIPE_CODE_VERSION,
    Recipe,
    RecipeDefinition,
    available_recipes,
    get_definition,
    make_recipe,
    register_recipe,
)

__all__ = [
    "INPUT_NAME",
    "RECIPE_CODE_VERSION",
    "Device",
    "DeviceError",
    "PreprocessingError",
    "PreprocessingInputError",
    "Recipe",
    "RecipeDefinition",
    "RecipeError",
    "available_recipes",
    "build_pipeline",
    "decode",
    "get_definition",
    "make_recipe",
    "normalize",
    "register_recipe",
    "resolve_device",
    "to_chw",
]
