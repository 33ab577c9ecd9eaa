"""Recipes: validation, options, registry and fingerprints."""

from __future__ import annotations

import subprocess
import sys

import pytest

from preprocessing import (
    Device,
    DeviceError,
    Recipe,
    RecipeError,
    available_recipes,
    make_recipe,
    register_recipe,
    resolve_device,
    to_chw,
)
from preprocessing.device import cuda_available


def test_builtins_are_registered_with_documented_defaults() -> None:
    assert {"train", "eval"} <= set(available_recipes())
    train = make_recipe("train")
    assert (train.size, train.channels) == (224, 3)
    assert train.mean == (0.485, 0.456, 0.406) and train.std == (0.229, 0.224, 0.225)
    assert train.option("randaugment") is None and train.option("flip") is True
    gray = make_recipe("eval", size=28, channels=1)
    assert gray.mean == (0.5,) and gray.std == (0.5,)
    assert gray.option("crop_fraction") == 0.875


def test_fingerprint_is_stable_across_processes() -> None:
    recipe = make_recipe("train", size=64, randaugment=(2, 9))
    code = (
        "from preprocessing import make_recipe;"
        "print(make_recipe('train', size=64, randaugment=(2, 9)).fingerprint())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == recipe.fingerprint()
    assert len(recipe.fingerprint()) == 32


def test_fingerprint_changes_with_every_parameter() -> None:
    base = make_recipe("train", size=64)
    variants = [
        make_recipe("train", size=65),
        make_recipe("train", size=64, channels=1),
        make_recipe("train", size=64, mean=(0.5, 0.5, 0.5)),
        make_recipe("train", size=64, std=(0.2, 0.2, 0.2)),
        make_recipe("train", size=64, randaugment=(2, 9)),
        make_recipe("train", size=64, flip=False),
        make_recipe("eval", size=64),
    ]
    prints = {v.fingerprint() for v in variants}
    assert base.fingerprint() not in prints and len(prints) == len(variants)
    assert make_recipe("train", size=64) == base and hash(make_recipe("train", size=64)) == hash(
        base
    )
    # Spelling defaults out explicitly does not change the recipe.
    assert make_recipe("train", size=64, flip=True, randaugment=None) == base


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 0}, "size must be a positive int"),
        ({"size": 2.5}, "size must be a positive int"),
        ({"channels": 2}, "channels must be 1 .* or 3"),
        ({"mean": (0.5,)}, "mean has 1 value.* channels=3"),
        ({"std": (0.2, 0.0, 0.2)}, "std must be positive"),
        ({"bogus": 1}, "has no option.* bogus; allowed: area, aspect_ratio, flip, randaugment"),
        ({"randaugment": (2, 99)}, r"randaugment=\(2, 99\) must be None or \[n, m\]"),
        ({"area": (0.9, 0.1)}, "area=.* must be two numbers"),
        ({"flip": "yes"}, "flip must be True or False"),
    ],
)
def test_bad_parameters_name_the_fix(kwargs: dict, match: str) -> None:
    with pytest.raises(RecipeError, match=match):
        make_recipe("train", **kwargs)


def test_unknown_recipe_lists_the_available_ones() -> None:
    with pytest.raises(RecipeError, match="unknown recipe 'nope'; available: .*eval.*train"):
        make_recipe("nope")
    with pytest.raises(RecipeError, match="crop_fraction"):
        make_recipe("eval", crop_fraction=1.5)


def test_custom_recipe_registration() -> None:
    @register_recipe("test-identity", version="3", defaults={"note": "x"})
    def identity(encoded, recipe, device):  # type: ignore[no-untyped-def]
        from preprocessing import decode

        return to_chw(decode(encoded, recipe, device))

    recipe = make_recipe("test-identity", size=28, channels=1)
    assert recipe.option("note") == "x"
    assert recipe.describe()["definition"]["version"] == "3"
    assert recipe.describe()["definition"]["source_hash"], "custom source text is hashed"
    with pytest.raises(RecipeError, match="already registered"):
        register_recipe("test-identity")(identity)
    register_recipe("test-identity", version="4", defaults={"note": "x"}, replace=True)(identity)
    assert make_recipe("test-identity", size=28, channels=1).fingerprint() != recipe.fingerprint()


def test_recipe_is_immutable() -> None:
    recipe = make_recipe("train")
    with pytest.raises(AttributeError):
        recipe.size = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        recipe.options["flip"] = False  # type: ignore[index]
    assert isinstance(make_recipe(recipe, size=32), Recipe)


def test_resolve_device() -> None:
    expected = Device.CUDA if cuda_available() else Device.CPU
    assert resolve_device(None) is expected
    assert resolve_device("CPU") is Device.CPU
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    with pytest.raises(DeviceError, match="not int"):
        resolve_device(0)  # type: ignore[arg-type]
    if not cuda_available():
        with pytest.raises(DeviceError, match="no CUDA device; use device='cpu'"):
            resolve_device("cuda")
