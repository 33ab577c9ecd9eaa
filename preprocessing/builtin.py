"""The built-in recipes ``train`` and ``eval``, and helpers for custom recipes.

``train``
    Random resized crop (only the crop's region is decoded,
    ``fn.decoders.image_random_crop``, then ``fn.resize``) to ``size x size``,
    optional DALI RandAugment
    (:func:`nvidia.dali.auto_aug.rand_augment.rand_augment`), random horizontal
    flip, CHW uint8 output. Options: ``area`` (fraction of the image area kept,
    ``0 < lo <= hi <= 1``, default ``[0.08, 1.0]``), ``aspect_ratio`` (finite,
    ``0 < lo <= hi``, default ``[3/4, 4/3]``), ``flip``
    (default ``True``), ``randaugment`` (``None`` or ``[n, m]``: ``n`` operations of
    magnitude ``m`` in ``0..30``; on 1 channel, without RandAugment's ``color``
    operation, a saturation change, which grayscale images do not have).
``eval``
    Resize the shorter side to ``size / crop_fraction`` then center-crop
    ``size x size``, CHW uint8 output. Option: ``crop_fraction`` in [0.1, 1]
    (default 0.875, i.e. 224 out of 256). With the default, ``eval`` at the images'
    own size is not the identity: 28 px images are resized to 32 px, then their
    central 28 px are kept (a zoom by 32/28, the ImageNet convention). Pass
    ``crop_fraction=1`` for the images' own pixels (what ``ToTensor`` gives).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from preprocessing.errors import RecipeError
from preprocessing.recipe import Recipe, register_recipe

if TYPE_CHECKING:
    from nvidia.dali.data_node import DataNode

    from preprocessing.device import Device

#: Version of the built-in recipes; bump when their pixels change.
BUILTIN_VERSION = "1"

#: Smallest ``crop_fraction`` of ``eval``: the resize before the crop is at most 10x the output.
MIN_CROP_FRACTION = 0.1


def _output_type(recipe: Recipe) -> Any:
    from nvidia.dali import types

    return types.DALIImageType.RGB if recipe.channels == 3 else types.DALIImageType.GRAY


def decode(encoded: DataNode, recipe: Recipe, device: Device) -> DataNode:
    """Decode encoded images to HWC uint8 with ``recipe.channels`` channels.

    Uses the CPU decoder for :attr:`Device.CPU` and the ``"mixed"`` (GPU)
    decoder for :attr:`Device.CUDA`.
    """
    from nvidia.dali import fn

    return fn.decoders.image(
        encoded, device=device.decoder_device, output_type=_output_type(recipe)
    )


def to_chw(images: DataNode, *, mirror: DataNode | int = 0) -> DataNode:
    """HWC uint8 images to CHW uint8 (optionally mirrored), values unchanged."""
    from nvidia.dali import fn, types

    return fn.crop_mirror_normalize(
        images,
        dtype=types.DALIDataType.UINT8,
        output_layout="CHW",
        mirror=mirror,
        mean=0.0,
        std=1.0,
    )


def _pair(options: Mapping[str, Any], key: str, high: float, example: str) -> None:
    """Check that option ``key`` is ``[lo, hi]`` with ``0 < lo <= hi <= high``, both finite."""
    value = options[key]
    ok = (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        and all(math.isfinite(v) for v in value)
        and 0 < value[0] <= value[1] <= high
    )
    if not ok:
        upper = f" <= {high}" if math.isfinite(high) else ""
        raise RecipeError(
            f"train option {key}={value!r} must be two numbers [lo, hi] (finite) with "
            f"0 < lo <= hi{upper}, e.g. {key}={example}"
        )


def _validate_train(options: Mapping[str, Any]) -> None:
    _pair(options, "area", 1.0, "(0.08, 1.0)")
    _pair(options, "aspect_ratio", math.inf, "(0.75, 1.333)")
    if not isinstance(options["flip"], bool):
        raise RecipeError(f"train option flip must be True or False, not {options['flip']!r}")
    ra = options["randaugment"]
    if ra is not None:
        ok = (
            isinstance(ra, tuple | list)
            and len(ra) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in ra)
            and ra[0] >= 1
            and 0 <= ra[1] <= 30
        )
        if not ok:
            raise RecipeError(
                f"train option randaugment={ra!r} must be None or [n, m] with n >= 1 "
                "operations and magnitude 0 <= m <= 30, e.g. randaugment=(2, 9)"
            )


@register_recipe(
    "train",
    version=BUILTIN_VERSION,
    defaults={
        "area": (0.08, 1.0),
        "aspect_ratio": (3 / 4, 4 / 3),
        "flip": True,
        "randaugment": None,
    },
    conditionals=lambda recipe: recipe.option("randaugment") is not None,
    validate=_validate_train,
    _builtin=True,
)
def train(encoded: DataNode, recipe: Recipe, device: Device) -> DataNode:
    """Random resized crop, optional RandAugment, random horizontal flip."""
    from nvidia.dali import fn, types

    # Decode only the random crop's region (ROI decode), then resize it: the
    # random-resized-crop of torchvision, cheaper than decoding whole images.
    images = fn.decoders.image_random_crop(
        encoded,
        device=device.decoder_device,
        output_type=_output_type(recipe),
        random_area=list(recipe.option("area")),
        random_aspect_ratio=list(recipe.option("aspect_ratio")),
        num_attempts=10,
    )
    # fn.resize is typed for every output arity; with one input it returns one DataNode.
    images = cast(
        "DataNode",
        fn.resize(
            images,
            size=(recipe.size, recipe.size),
            interp_type=types.DALIInterpType.INTERP_LINEAR,
            antialias=True,
        ),
    )
    randaugment = recipe.option("randaugment")
    if randaugment is not None:
        from nvidia.dali.auto_aug import rand_augment

        n, m = randaugment
        # RandAugment's "color" (saturation) does nothing to grayscale images, and DALI's
        # saturation operator needs 3 channels (on one it crashes the process): left out.
        images = rand_augment.rand_augment(
            images,
            n=int(n),
            m=int(m),
            shape=(recipe.size, recipe.size),
            excluded=["color"] if recipe.channels == 1 else None,
        )
    mirror = fn.random.coin_flip(probability=0.5) if recipe.option("flip") else 0
    return to_chw(images, mirror=mirror)


def _validate_eval(options: Mapping[str, Any]) -> None:
    fraction = options["crop_fraction"]
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not MIN_CROP_FRACTION <= fraction <= 1
    ):
        raise RecipeError(
            f"eval option crop_fraction={fraction!r} must be a number in [{MIN_CROP_FRACTION}, 1] "
            "(images are resized to size / crop_fraction before the center crop), e.g. 0.875"
        )


@register_recipe(
    "eval",
    version=BUILTIN_VERSION,
    defaults={"crop_fraction": 0.875},
    validate=_validate_eval,
    _builtin=True,
)
def eval_(encoded: DataNode, recipe: Recipe, device: Device) -> DataNode:
    """Resize the shorter side to ``size / crop_fraction``, center-crop ``size``.

    With the default ``crop_fraction`` 0.875 this is not the identity even at the
    images' own size: 28 px images are resized to ``round(28 / 0.875)`` = 32 px and
    their central 28 x 28 px kept, so the pixels differ from the decoded image
    (torchvision's ``ToTensor``). ``crop_fraction=1`` resizes to ``size`` itself:
    at the images' own size (square images), the decoded pixels unchanged.
    """
    from nvidia.dali import fn, types

    images = decode(encoded, recipe, device)
    shorter = max(recipe.size, round(recipe.size / float(recipe.option("crop_fraction"))))
    images = cast(
        "DataNode",
        fn.resize(
            images,
            resize_shorter=shorter,
            interp_type=types.DALIInterpType.INTERP_LINEAR,
            antialias=True,
        ),
    )
    return fn.crop_mirror_normalize(
        images,
        crop=(recipe.size, recipe.size),
        dtype=types.DALIDataType.UINT8,
        output_layout="CHW",
        mean=0.0,
        std=1.0,
    )
