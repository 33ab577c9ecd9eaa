"""Recipes: named, parametrised DALI augmentation graphs with a stable fingerprint.

A :class:`Recipe` is a frozen value: the name of a registered definition (a
function that builds the DALI graph) plus its parameters. Two equal recipes
produce the same kind of samples and share a :meth:`Recipe.fingerprint`, which
the augmented-sample cache uses as part of its key.

Contract of a recipe's graph: from a batch of *encoded* images it produces
**augmented uint8 images in CHW layout**, shape ``(channels, size, size)``.
Normalization (mean/std, float32) is not part of the graph; it is applied by the
consumer on the target device with :func:`preprocessing.normalize`, so that the
cached and served layout is compact uint8.

Custom recipes
--------------
Register a function ``build(encoded, recipe, device) -> DataNode``::

    from nvidia.dali import fn
    from preprocessing import decode, register_recipe, to_chw

    @register_recipe("rotate", version="1", defaults={"max_angle": 10.0})
    def rotate(encoded, recipe, device):
        images = decode(encoded, recipe, device)                # HWC uint8
        angle = fn.random.uniform(range=(-recipe.option("max_angle"), recipe.option("max_angle")))
        images = fn.rotate(images, angle=angle, keep_size=True)
        images = fn.resize(images, size=(recipe.size, recipe.size))
        return to_chw(images)                                   # CHW uint8

    recipe = make_recipe("rotate", size=64, channels=1, max_angle=5.0)

The function's source text (when Python can read it) and ``version`` enter the
fingerprint, so editing the function invalidates samples cached with it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import xxhash

from preprocessing.errors import RecipeError

if TYPE_CHECKING:
    from nvidia.dali.data_node import DataNode

    from preprocessing.device import Device

#: Version of the recipe machinery itself (graph contract, normalization, fingerprint
#: layout). Bump it when a change alters the pixels any recipe produces.
RECIPE_CODE_VERSION = "1"

#: ImageNet statistics, as fractions of 255 (torchvision convention).
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
#: Default statistics for one-channel (grayscale) images, as fractions of 255.
GRAY_MEAN: tuple[float] = (0.5,)
GRAY_STD: tuple[float] = (0.5,)

BuildFn = Callable[["DataNode", "Recipe", "Device"], "DataNode"]


@dataclasses.dataclass(frozen=True)
class RecipeDefinition:
    """A registered recipe: the graph builder and what identifies its behaviour.

    Attributes
    ----------
    name : str
        Registry name.
    build : callable
        ``build(encoded, recipe, device) -> DataNode`` returning uint8 CHW images.
    version : str
        Version string; bump it when the function's behaviour changes.
    defaults : Mapping or None
        Allowed options and their default values; ``None`` accepts any
        JSON-serialisable option.
    conditionals : bool
        Whether the graph needs DALI conditionals (``enable_conditionals=True``).
    source_hash : str
        Hash of the function's source text ("" for built-ins or when unreadable).
    """

    name: str
    build: BuildFn
    version: str
    defaults: Mapping[str, Any] | None
    conditionals: bool | Callable[[Recipe], bool] = False
    source_hash: str = ""
    validate: Callable[[Mapping[str, Any]], None] | None = None

    def needs_conditionals(self, recipe: Recipe) -> bool:
        """Whether ``recipe``'s graph needs DALI conditionals."""
        if callable(self.conditionals):
            return bool(self.conditionals(recipe))
        return bool(self.conditionals)


_REGISTRY: dict[str, RecipeDefinition] = {}


def register_recipe(
    name: str,
    *,
    version: str = "1",
    defaults: Mapping[str, Any] | None = None,
    conditionals: bool | Callable[[Recipe], bool] = False,
    validate: Callable[[Mapping[str, Any]], None] | None = None,
    replace: bool = False,
    _builtin: bool = False,
) -> Callable[[BuildFn], BuildFn]:
    """Register a recipe-building function under ``name`` (decorator).

    Parameters
    ----------
    name : str
        Name used by :func:`make_recipe` and ``Loader(recipe=name)``.
    version : str
        Enters the fingerprint; bump it when the function's behaviour changes.
    defaults : Mapping, optional
        Allowed options with their defaults. Unknown options are then rejected.
    conditionals : bool or callable
        Build the pipeline with DALI conditionals enabled (needed by ``if`` on
        DataNodes, e.g. DALI's auto-augment policies).
    replace : bool
        Allow replacing an existing registration of ``name``.

    Raises
    ------
    RecipeError
        If ``name`` is taken and ``replace`` is false, or arguments are malformed.
    """
    if not isinstance(name, str) or not name:
        raise RecipeError(f"recipe name must be a non-empty string, not {name!r}")
    if not isinstance(version, str):
        raise RecipeError(f"recipe version must be a string such as '1', not {version!r}")
    if defaults is not None:
        _check_json(name, dict(defaults))

    def decorator(build: BuildFn) -> BuildFn:
        if not callable(build):
            raise RecipeError(f"recipe {name!r}: expected a function, got {build!r}")
        if name in _REGISTRY and not replace:
            raise RecipeError(
                f"a recipe named {name!r} is already registered; choose another name "
                "or pass replace=True"
            )
        source_hash = ""
        if not _builtin:
            try:
                source_hash = xxhash.xxh3_64_hexdigest(inspect.getsource(build).encode())
            except (OSError, TypeError):
                source_hash = ""
        _REGISTRY[name] = RecipeDefinition(
            name=name,
            build=build,
            version=version,
            defaults=types.MappingProxyType(dict(defaults)) if defaults is not None else None,
            conditionals=conditionals,
            source_hash=source_hash,
            validate=validate,
        )
        return build

    return decorator


def available_recipes() -> list[str]:
    """Names of the registered recipes, sorted."""
    return sorted(_REGISTRY)


def get_definition(name: str) -> RecipeDefinition:
    """The registered definition of recipe ``name``.

    Raises
    ------
    RecipeError
        If no recipe of that name is registered.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise RecipeError(
            f"unknown recipe {name!r}; available: {', '.join(available_recipes())} "
            "(register a custom one with preprocessing.register_recipe)"
        ) from None


def _check_json(name: str, options: dict[str, Any]) -> None:
    try:
        json.dumps(options, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise RecipeError(
            f"recipe {name!r}: options must be JSON-serialisable (numbers, strings, "
            f"lists, None): {exc}"
        ) from None


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True, eq=True)
class Recipe:
    """A recipe: a registered definition plus its parameters (immutable).

    Parameters
    ----------
    name : str
        Name of a registered definition (built-ins: ``"train"``, ``"eval"``).
    size : int
        Output height and width, in pixels.
    channels : {1, 3}
        1 decodes to grayscale, 3 to RGB.
    mean, std : tuple of float
        Per-channel statistics as fractions of 255 (torchvision convention):
        finite, ``mean`` in [0, 1], ``std`` positive; ``None`` picks
        ImageNet's for 3 channels and 0.5/0.5 for 1 channel.
    options : Mapping
        Definition-specific options, merged over the definition's defaults
        (``train``: ``randaugment``, ``area``, ``aspect_ratio``, ``flip``;
        ``eval``: ``crop_fraction``).

    Raises
    ------
    RecipeError
        On an unknown name, a non-positive size, channels other than the ints 1
        or 3, mean/std of the wrong length or not finite, a mean outside [0, 1],
        a non-positive std, or an unknown or out-of-range option.
    """

    name: str
    size: int = 224
    channels: int = 3
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        definition = get_definition(self.name)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size <= 0:
            raise RecipeError(f"recipe size must be a positive int (pixels), not {self.size!r}")
        if (
            isinstance(self.channels, bool)
            or not isinstance(self.channels, int)
            or self.channels not in (1, 3)
        ):
            raise RecipeError(
                f"recipe channels must be 1 (grayscale) or 3 (RGB), an int, not {self.channels!r}"
            )
        mean = self.mean
        std = self.std
        if mean is None:
            mean = IMAGENET_MEAN if self.channels == 3 else GRAY_MEAN
        if std is None:
            std = IMAGENET_STD if self.channels == 3 else GRAY_STD
        mean = self._stats("mean", mean)
        std = self._stats("std", std)
        if not all(0.0 <= m <= 1.0 for m in mean):
            raise RecipeError(
                f"recipe mean must be fractions of 255 in [0, 1] (0.5 = 127.5), got {mean}; "
                "divide 0..255 values by 255"
            )
        if any(s <= 0 for s in std):
            raise RecipeError(
                f"recipe std must be positive, got {std}; give fractions of 255 (0.5 = 127.5)"
            )
        if not isinstance(self.options, Mapping):
            raise RecipeError(f"recipe options must be a mapping, not {self.options!r}")
        options = dict(self.options)
        if definition.defaults is not None:
            unknown = sorted(set(options) - set(definition.defaults))
            if unknown:
                raise RecipeError(
                    f"recipe {self.name!r} has no option(s) {', '.join(unknown)}; "
                    f"allowed: {', '.join(sorted(definition.defaults)) or 'none'}"
                )
            options = {**definition.defaults, **options}
        _check_json(self.name, options)
        if definition.validate is not None:
            definition.validate(options)
        # The definition is captured now: re-registering a name later does not change
        # what an existing recipe means (or its fingerprint).
        object.__setattr__(self, "_definition", definition)
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        object.__setattr__(
            self,
            "options",
            types.MappingProxyType({k: _freeze(options[k]) for k in sorted(options)}),
        )

    def _stats(self, what: str, values: Any) -> tuple[float, ...]:
        bad = RecipeError(
            f"recipe {what} must be a sequence of {self.channels} finite number(s) (fractions of "
            f"255), not {values!r}"
        )
        if isinstance(values, str | bytes):
            raise bad
        try:
            out = tuple(float(v) for v in values)
        except (TypeError, ValueError):
            raise bad from None
        if any(isinstance(v, str | bytes | bool) for v in values) or not all(
            math.isfinite(v) for v in out
        ):
            raise bad
        if len(out) != self.channels:
            raise RecipeError(
                f"recipe {what} has {len(out)} value(s) but channels={self.channels}; "
                f"give one value per channel"
            )
        return out

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Recipe):
            return NotImplemented
        return self.fingerprint() == other.fingerprint()

    @property
    def definition(self) -> RecipeDefinition:
        """The registered definition this recipe uses (as of its creation)."""
        return self._definition  # type: ignore[attr-defined,no-any-return]

    def option(self, key: str, default: Any = None) -> Any:
        """Value of option ``key`` (after merging the definition's defaults)."""
        return self.options.get(key, default)

    def replace(self, **changes: Any) -> Recipe:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def describe(self) -> dict[str, Any]:
        """The recipe as plain data (what the fingerprint hashes)."""
        definition = self.definition
        return {
            "recipe_code_version": RECIPE_CODE_VERSION,
            "definition": {
                "name": definition.name,
                "version": definition.version,
                "source_hash": definition.source_hash,
            },
            "size": self.size,
            "channels": self.channels,
            "mean": list(self.mean or ()),
            "std": list(self.std or ()),
            "options": dict(self.options),
        }

    def fingerprint(self) -> str:
        """Stable hash of the recipe's definition and parameters.

        Returns
        -------
        str
            32 hex digits (xxh3-128 of the canonical JSON of :meth:`describe`).
            Equal across processes, machines and Python versions for equal recipes.
        """
        text = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return xxhash.xxh3_128_hexdigest(text.encode())


def make_recipe(
    name: str | Recipe,
    *,
    size: int | None = None,
    channels: int | None = None,
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    **options: Any,
) -> Recipe:
    """Build a :class:`Recipe` by name, or adjust an existing one.

    Parameters
    ----------
    name : str or Recipe
        Registered name (``"train"``, ``"eval"``, or a custom one), or a recipe
        whose fields given here are replaced.
    size : int, optional
        Output side in pixels (default 224 for a new recipe).
    channels : {1, 3}, optional
        Output channels (default 3 for a new recipe).
    mean, std : tuple of float, optional
        Per-channel statistics as fractions of 255.
    **options
        Definition-specific options, e.g. ``randaugment=(2, 9)`` for ``train``.

    Returns
    -------
    Recipe
    """
    if isinstance(name, Recipe):
        base = name
        changes: dict[str, Any] = {}
        if size is not None:
            changes["size"] = size
        if channels is not None:
            changes["channels"] = channels
            if channels != base.channels:
                changes.setdefault("mean", None)
                changes.setdefault("std", None)
        if mean is not None:
            changes["mean"] = mean
        if std is not None:
            changes["std"] = std
        if options:
            changes["options"] = {**base.options, **options}
        return base.replace(**changes) if changes else base
    if not isinstance(name, str):
        raise RecipeError(f"recipe must be a name (str) or a Recipe, not {type(name).__name__}")
    return Recipe(
        name=name,
        size=224 if size is None else size,
        channels=3 if channels is None else channels,
        mean=mean,
        std=std,
        options=options,
    )
