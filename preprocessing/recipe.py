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

Size and channels from the data
-------------------------------
``make_recipe("train", randaugment=(2, 9))`` leaves ``size`` and ``channels``
(and the mean/std defaults, which depend on ``channels``) to the data: a
``Loader`` infers them from the images, exactly as for ``recipe="train"``, and
``loader.recipe`` is the resolved recipe, whose fingerprint is that of
``make_recipe("train", size=..., channels=..., randaugment=(2, 9))``. Used
without a Loader (e.g. :func:`preprocessing.build_pipeline`), a recipe needs
``size=`` and ``channels=``; an unresolved one says so.

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

The function reads ``recipe.size`` and ``recipe.channels``; given to a Loader,
``make_recipe("rotate", max_angle=5.0)`` gets them from the images.

The function's source text (when Python can read it) and ``version`` enter the
fingerprint, so editing the function invalidates samples cached with it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import types
from collections.abc import Callable, Mapping, Sequence
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


#: The fields of a :class:`Recipe`, in the order of its constructor's parameters.
RECIPE_FIELDS = ("name", "size", "channels", "mean", "std", "options")


def _stats(what: str, values: Any, channels: int | None) -> tuple[float, ...]:
    """``values`` as a tuple of finite floats, one per channel when ``channels`` is known."""
    count = "one finite number per channel" if channels is None else f"{channels} finite number(s)"
    bad = RecipeError(
        f"recipe {what} must be a sequence of {count} (fractions of 255), not {values!r}"
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
    if channels is not None and len(out) != channels:
        raise RecipeError(
            f"recipe {what} has {len(out)} value(s) but channels={channels}; "
            f"give one value per channel"
        )
    if not out:
        raise bad
    return out


class Recipe:
    """A recipe: a registered definition plus its parameters (immutable).

    ``size`` and ``channels`` may be left to the data (``None``, the default): a
    ``Loader`` given the recipe then infers them from the images, exactly as for a
    recipe given by name, and ``loader.recipe`` is the resolved recipe. Until then
    the recipe is *unresolved*: it has no :meth:`fingerprint`, and reading its
    ``size`` or ``channels`` (as building its DALI pipeline does) raises a
    :class:`RecipeError` that says to give ``size=`` and ``channels=``.

    Parameters
    ----------
    name : str
        Name of a registered definition (built-ins: ``"train"``, ``"eval"``).
    size : int, optional
        Output height and width, in pixels; ``None``: from the data.
    channels : {1, 3}, optional
        1 decodes to grayscale, 3 to RGB; ``None``: from the data.
    mean, std : sequence of float, optional
        Per-channel statistics as fractions of 255 (torchvision convention):
        finite, ``mean`` in [0, 1], ``std`` positive, one value per channel.
        ``None`` picks ImageNet's for 3 channels and 0.5/0.5 for 1 channel, once
        ``channels`` is known.
    options : Mapping, optional
        Definition-specific options, merged over the definition's defaults
        (``train``: ``randaugment``, ``area``, ``aspect_ratio``, ``flip``;
        ``eval``: ``crop_fraction``).

    Raises
    ------
    RecipeError
        On an unknown name, a size that is not a positive int, channels other than
        the ints 1 or 3, mean/std not finite or of the wrong length (the length is
        checked once ``channels`` is known), a mean outside [0, 1], a non-positive
        std, or an unknown or out-of-range option.
    """

    __slots__ = ("_channels", "_definition", "_mean", "_name", "_options", "_size", "_std")

    _name: str
    _size: int | None
    _channels: int | None
    _mean: tuple[float, ...] | None
    _std: tuple[float, ...] | None
    _options: Mapping[str, Any]
    _definition: RecipeDefinition

    def __init__(
        self,
        name: str,
        size: int | None = None,
        channels: int | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self._setup(get_definition(name), name, size, channels, mean, std, options)

    def _setup(
        self,
        definition: RecipeDefinition,
        name: str,
        size: int | None,
        channels: int | None,
        mean: Sequence[float] | None,
        std: Sequence[float] | None,
        options: Mapping[str, Any] | None,
    ) -> None:
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
            raise RecipeError(
                f"recipe size must be a positive int (pixels), not {size!r}; leave it out "
                "(None) to take it from the data"
            )
        if channels is not None and (
            isinstance(channels, bool) or not isinstance(channels, int) or channels not in (1, 3)
        ):
            raise RecipeError(
                f"recipe channels must be 1 (grayscale) or 3 (RGB), an int, not {channels!r}; "
                "leave it out (None) to take it from the data"
            )
        mean_values = None if mean is None else _stats("mean", mean, channels)
        std_values = None if std is None else _stats("std", std, channels)
        if mean_values is not None and not all(0.0 <= m <= 1.0 for m in mean_values):
            raise RecipeError(
                f"recipe mean must be fractions of 255 in [0, 1] (0.5 = 127.5), got "
                f"{mean_values}; divide 0..255 values by 255"
            )
        if std_values is not None and any(s <= 0 for s in std_values):
            raise RecipeError(
                f"recipe std must be positive, got {std_values}; give fractions of 255 "
                "(0.5 = 127.5)"
            )
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise RecipeError(f"recipe options must be a mapping, not {options!r}")
        merged = dict(options)
        if definition.defaults is not None:
            unknown = sorted(set(merged) - set(definition.defaults))
            if unknown:
                raise RecipeError(
                    f"recipe {name!r} has no option(s) {', '.join(unknown)}; "
                    f"allowed: {', '.join(sorted(definition.defaults)) or 'none'}"
                )
            merged = {**definition.defaults, **merged}
        _check_json(name, merged)
        if definition.validate is not None:
            definition.validate(merged)
        # The definition is captured now: re-registering a name later does not change
        # what an existing recipe means (or its fingerprint), nor what it resolves to.
        set_ = object.__setattr__
        set_(self, "_definition", definition)
        set_(self, "_name", name)
        set_(self, "_size", size)
        set_(self, "_channels", channels)
        set_(self, "_mean", mean_values)
        set_(self, "_std", std_values)
        set_(
            self,
            "_options",
            types.MappingProxyType({k: _freeze(merged[k]) for k in sorted(merged)}),
        )

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(
            f"a Recipe is immutable (cannot set {key!r}); make a changed copy with "
            f"make_recipe(recipe, {key.lstrip('_')}=...)"
        )

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"a Recipe is immutable (cannot delete {key!r})")

    def __copy__(self) -> Recipe:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Recipe:
        return self

    # -- fields ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """Name of the registered definition."""
        return self._name

    @property
    def size(self) -> int:
        """Output height and width, in pixels.

        Raises
        ------
        RecipeError
            If the recipe takes its size from the data and has not been resolved.
        """
        if self._size is None:
            self.require_resolved("read its size")
        return self._size  # type: ignore[return-value]  # resolved just above

    @property
    def channels(self) -> int:
        """Output channels: 1 (grayscale) or 3 (RGB).

        Raises
        ------
        RecipeError
            If the recipe takes its channels from the data and has not been resolved.
        """
        if self._channels is None:
            self.require_resolved("read its channels")
        return self._channels  # type: ignore[return-value]  # resolved just above

    @property
    def mean(self) -> tuple[float, ...]:
        """Per-channel mean, as fractions of 255 (the default for ``channels`` unless given)."""
        if self._mean is not None:
            return self._mean
        return IMAGENET_MEAN if self.channels == 3 else GRAY_MEAN

    @property
    def std(self) -> tuple[float, ...]:
        """Per-channel standard deviation, as fractions of 255 (default as for ``mean``)."""
        if self._std is not None:
            return self._std
        return IMAGENET_STD if self.channels == 3 else GRAY_STD

    @property
    def options(self) -> Mapping[str, Any]:
        """Definition-specific options, merged over the definition's defaults (read-only)."""
        return self._options

    @property
    def definition(self) -> RecipeDefinition:
        """The registered definition this recipe uses (as of its creation)."""
        return self._definition

    @property
    def unresolved(self) -> tuple[str, ...]:
        """The fields taken from the data and not known yet: ``"size"``, ``"channels"``.

        Empty for a resolved recipe (one with a :meth:`fingerprint`).
        """
        return tuple(
            name
            for name, value in (("size", self._size), ("channels", self._channels))
            if value is None
        )

    def require_resolved(self, purpose: str = "use it without a Loader") -> None:
        """Raise unless the recipe's ``size`` and ``channels`` are known.

        Parameters
        ----------
        purpose : str
            What needs them, for the message (e.g. ``"build its DALI pipeline"``).

        Raises
        ------
        RecipeError
            Naming the missing fields and the fix: give ``size=`` and/or
            ``channels=`` to :func:`make_recipe`, or give the recipe to a Loader.
        """
        missing = self.unresolved
        if not missing:
            return
        hints = {"size": "size= (pixels)", "channels": "channels= (1 or 3)"}
        give = " and ".join(hints[m] for m in missing)
        example = ", ".join(f"{m}={224 if m == 'size' else 3}" for m in missing)
        raise RecipeError(
            f"recipe {self._name!r} takes its {' and '.join(missing)} from the data, and only "
            f"a Loader reads the data (Loader(data, recipe=recipe) infers them from the "
            f"images); to {purpose} without a Loader, give {give}, e.g. "
            f"make_recipe({self._name!r}, {example}, ...) or make_recipe(recipe, {example})"
        )

    def option(self, key: str, default: Any = None) -> Any:
        """Value of option ``key`` (after merging the definition's defaults)."""
        return self._options.get(key, default)

    def replace(self, **changes: Any) -> Recipe:
        """A copy with some fields changed (validated again).

        Parameters
        ----------
        **changes
            New values of fields among :data:`RECIPE_FIELDS`. ``mean`` and ``std``
            not given explicitly (here or before) follow ``channels``; ``options``
            replace the given ones (merged over the definition's defaults again).
        """
        unknown = sorted(set(changes) - set(RECIPE_FIELDS))
        if unknown:
            raise TypeError(
                f"Recipe.replace() got unknown field(s) {', '.join(unknown)}; "
                f"fields: {', '.join(RECIPE_FIELDS)}"
            )
        fields: dict[str, Any] = {
            "name": self._name,
            "size": self._size,
            "channels": self._channels,
            "mean": self._mean,
            "std": self._std,
            "options": self._options,
            **changes,
        }
        definition = (
            self._definition if fields["name"] == self._name else get_definition(fields["name"])
        )
        new = Recipe.__new__(Recipe)
        new._setup(definition, **fields)
        return new

    # -- identity -------------------------------------------------------------------------
    def _stats_or_none(self, what: str) -> list[float] | None:
        given = self._mean if what == "mean" else self._std
        if given is None and self._channels is None:
            return None
        return list(self.mean if what == "mean" else self.std)

    def _description(self) -> dict[str, Any]:
        definition = self._definition
        return {
            "recipe_code_version": RECIPE_CODE_VERSION,
            "definition": {
                "name": definition.name,
                "version": definition.version,
                "source_hash": definition.source_hash,
            },
            "size": self._size,
            "channels": self._channels,
            "mean": self._stats_or_none("mean"),
            "std": self._stats_or_none("std"),
            "options": dict(self._options),
        }

    def describe(self) -> dict[str, Any]:
        """The recipe as plain data (what the fingerprint hashes).

        Raises
        ------
        RecipeError
            If the recipe is unresolved (see :attr:`unresolved`).
        """
        self.require_resolved("describe or fingerprint it")
        return self._description()

    def fingerprint(self) -> str:
        """Stable hash of the recipe's definition and parameters.

        Returns
        -------
        str
            32 hex digits (xxh3-128 of the canonical JSON of :meth:`describe`).
            Equal across processes, machines and Python versions for equal recipes;
            a recipe resolved by a Loader has the fingerprint of the same recipe
            made with that ``size`` and ``channels`` given.

        Raises
        ------
        RecipeError
            If the recipe is unresolved: its pixels depend on data not seen yet.
        """
        text = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return xxhash.xxh3_128_hexdigest(text.encode())

    def _key(self) -> str:
        return json.dumps(self._description(), sort_keys=True, separators=(",", ":"))

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Recipe):
            return NotImplemented
        return self._key() == other._key()

    def __repr__(self) -> str:
        mean, std = self._stats_or_none("mean"), self._stats_or_none("std")
        return (
            f"Recipe(name={self._name!r}, size={self._size!r}, channels={self._channels!r}, "
            f"mean={tuple(mean) if mean is not None else None!r}, "
            f"std={tuple(std) if std is not None else None!r}, options={dict(self._options)!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            Recipe,
            (self._name, self._size, self._channels, self._mean, self._std, dict(self._options)),
        )


def make_recipe(
    name: str | Recipe,
    *,
    size: int | None = None,
    channels: int | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    **options: Any,
) -> Recipe:
    """Build a :class:`Recipe` by name, or adjust an existing one.

    Parameters
    ----------
    name : str or Recipe
        Registered name (``"train"``, ``"eval"``, or a custom one), or a recipe
        whose fields given here are replaced.
    size : int, optional
        Output side in pixels. A new recipe without it takes it from the data: a
        ``Loader`` infers it from the images, as for ``recipe="train"``. Give it to
        use the recipe without a Loader (e.g. :func:`preprocessing.build_pipeline`).
    channels : {1, 3}, optional
        Output channels; a new recipe without it takes it from the data, like ``size``.
    mean, std : sequence of float, optional
        Per-channel statistics as fractions of 255. Default: ImageNet's for 3
        channels, 0.5/0.5 for 1, so they follow ``channels`` (also when it comes
        from the data). Changing the ``channels`` of a recipe drops statistics given
        for the old count.
    **options
        Definition-specific options, e.g. ``randaugment=(2, 9)`` for ``train``.

    Returns
    -------
    Recipe
        Unresolved (see :class:`Recipe`) unless ``size`` and ``channels`` are known.

    Examples
    --------
    >>> make_recipe("train", randaugment=(2, 9)).unresolved     # a Loader fills them in
    ('size', 'channels')
    >>> make_recipe("train", size=28, channels=1).size
    28
    """
    if isinstance(name, Recipe):
        base = name
        changes: dict[str, Any] = {}
        if size is not None:
            changes["size"] = size
        if channels is not None:
            changes["channels"] = channels
            if "channels" not in base.unresolved and channels != base.channels:
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
    return Recipe(name, size=size, channels=channels, mean=mean, std=std, options=options)
