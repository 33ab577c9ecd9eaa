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
    train = make_recipe("train", size=224, channels=3)
    assert (train.size, train.channels) == (224, 3)
    assert train.mean == (0.485, 0.456, 0.406) and train.std == (0.229, 0.224, 0.225)
    assert train.option("randaugment") is None and train.option("flip") is True
    gray = make_recipe("eval", size=28, channels=1)
    assert gray.mean == (0.5,) and gray.std == (0.5,)
    assert gray.option("crop_fraction") == 0.875


def test_fingerprint_is_stable_across_processes() -> None:
    recipe = make_recipe("train", size=64, channels=3, randaugment=(2, 9))
    code = (
        "from preprocessing import make_recipe;"
        "print(make_recipe('train', size=64, channels=3, randaugment=(2, 9)).fingerprint())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == recipe.fingerprint()
    assert len(recipe.fingerprint()) == 32


def test_fingerprint_changes_with_every_parameter() -> None:
    base = make_recipe("train", size=64, channels=3)
    variants = [
        make_recipe("train", size=65, channels=3),
        make_recipe("train", size=64, channels=1),
        make_recipe("train", size=64, channels=3, mean=(0.5, 0.5, 0.5)),
        make_recipe("train", size=64, channels=3, std=(0.2, 0.2, 0.2)),
        make_recipe("train", size=64, channels=3, randaugment=(2, 9)),
        make_recipe("train", size=64, channels=3, flip=False),
        make_recipe("eval", size=64, channels=3),
    ]
    prints = {v.fingerprint() for v in variants}
    assert base.fingerprint() not in prints and len(prints) == len(variants)
    again = make_recipe("train", size=64, channels=3)
    assert again == base and hash(again) == hash(base)
    # Spelling defaults out explicitly does not change the recipe.
    assert make_recipe("train", size=64, channels=3, flip=True, randaugment=None) == base


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 0}, "size must be a positive int"),
        ({"size": 2.5}, "size must be a positive int"),
        ({"channels": 2}, "channels must be 1 .* or 3"),
        ({"channels": 3, "mean": (0.5,)}, "mean has 1 value.* channels=3"),
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


def test_resolve_device_needs_dali_to_see_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch sees a GPU but DALI does not (driver too old for its CUDA release): CPU, not a
    failure later inside DALI's pipeline build. Both answers are injected faults."""
    from nvidia.dali import backend

    import preprocessing.device as device_module

    monkeypatch.setattr(device_module, "torch_cuda_available", lambda: True)
    monkeypatch.setattr(backend, "GetCUDADeviceCount", lambda: 0)
    assert resolve_device(None) is Device.CPU
    with pytest.raises(DeviceError, match="DALI sees no CUDA device although torch does"):
        resolve_device("cuda")

    def no_driver() -> int:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(backend, "GetCUDADeviceCount", no_driver)
    assert device_module.dali_cuda_devices() == 0
    assert resolve_device(None) is Device.CPU

    monkeypatch.setattr(backend, "GetCUDADeviceCount", lambda: 2)
    assert resolve_device(None) is Device.CUDA
    assert resolve_device("cuda") is Device.CUDA


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("train", {"channels": 3.0}, "channels must be 1 .* or 3 .*an int, not 3.0"),
        ("train", {"channels": 1, "std": (float("nan"),)}, "std must be .*finite"),
        ("train", {"channels": 1, "std": (float("inf"),)}, "std must be .*finite"),
        ("train", {"channels": 1, "mean": (float("nan"),)}, "mean must be .*finite"),
        ("train", {"channels": 1, "mean": (128,)}, r"mean must be fractions of 255 in \[0, 1\]"),
        ("train", {"channels": 1, "mean": "5"}, "mean must be a sequence of 1 finite"),
        ("train", {"area": (0, 0)}, r"area=\(0, 0\) must be two numbers .*0 < lo"),
        ("train", {"aspect_ratio": (0, 0)}, r"aspect_ratio=\(0, 0\) must be two numbers"),
        ("train", {"aspect_ratio": (1, float("inf"))}, "aspect_ratio=.* must be .*finite"),
        ("eval", {"crop_fraction": 1e-6}, r"crop_fraction=1e-06 must be a number in \[0.1, 1\]"),
    ],
)
def test_out_of_range_statistics_and_options_are_refused(
    name: str, kwargs: dict, match: str
) -> None:
    with pytest.raises(RecipeError, match=match):
        make_recipe(name, size=28, **kwargs)


#: Fingerprints of valid recipes as computed before the stricter validation: caches keyed by
#: them stay valid, so they must never change (short of a deliberate version bump).
_KNOWN_FINGERPRINTS = [
    ("train", {"size": 224, "channels": 3}, "0ab8defe82b7d700ca5c081cac2fc354"),
    ("eval", {"size": 224, "channels": 3}, "79e9068e98140c8a40b42c0b3f3d3054"),
    ("train", {"size": 28, "channels": 1}, "79fdac9e32703bb2b5632b96c044e14b"),
    ("eval", {"size": 28, "channels": 1}, "180aad66f3bd4866ce93fd64a7f1954a"),
    (
        "train",
        {"size": 64, "channels": 3, "randaugment": (2, 9)},
        "e994697db609c945c1bef4c52ea5b177",
    ),
    (
        "train",
        {"size": 224, "channels": 3, "flip": False, "area": (0.25, 1.0)},
        "712369bdc0f3299b30562accf2b4e2cc",
    ),
    (
        "train",
        {
            "size": 32,
            "channels": 3,
            "mean": (0.4914, 0.4822, 0.4465),
            "std": (0.247, 0.243, 0.261),
            "aspect_ratio": (0.5, 2.0),
        },
        "9856900d0e6827ed09af206f0ea8db98",
    ),
    (
        "eval",
        {"size": 28, "channels": 1, "mean": (0.0,), "std": (1.0,), "crop_fraction": 1.0},
        "a8376d6174530eaa9a9312bfe1a50383",
    ),
    (
        "eval",
        {"size": 224, "channels": 3, "crop_fraction": 0.95},
        "fe3121e96657d1d0c16fc927033e9130",
    ),
    (
        "train",
        {"size": 28, "channels": 1, "mean": (0.25,), "std": (0.5,)},
        "89f4b0d754054ee02d2723909d170b17",
    ),
    (
        "eval",
        {"size": 4, "channels": 3, "mean": (0.1, 0.2, 0.3), "std": (0.5, 0.25, 2.0)},
        "bd52923d416eeae967e80727a18070e6",
    ),
]


@pytest.mark.parametrize(("name", "kwargs", "fingerprint"), _KNOWN_FINGERPRINTS)
def test_fingerprints_of_valid_recipes_never_change(
    name: str, kwargs: dict, fingerprint: str
) -> None:
    assert make_recipe(name, **kwargs).fingerprint() == fingerprint


# -- size and channels from the data ---------------------------------------------------------
def test_a_new_recipe_leaves_size_and_channels_to_the_data() -> None:
    recipe = make_recipe("train", randaugment=(2, 9))
    assert recipe.unresolved == ("size", "channels")
    assert make_recipe("train", size=28).unresolved == ("channels",)
    assert make_recipe("train", channels=1).unresolved == ("size",)
    gray = make_recipe(recipe, size=28, channels=1)
    assert gray.unresolved == () and (gray.size, gray.channels) == (28, 1)
    assert gray.mean == (0.5,) and gray.std == (0.5,), "the defaults follow the channels"
    assert gray == make_recipe("train", size=28, channels=1, randaugment=(2, 9))
    colour = make_recipe(recipe, size=32, channels=3)
    assert colour.mean == (0.485, 0.456, 0.406) and colour.std == (0.229, 0.224, 0.225)
    assert recipe != gray and recipe == make_recipe("train", randaugment=(2, 9))
    assert hash(recipe) == hash(make_recipe("train", randaugment=(2, 9)))
    # Statistics given without channels wait for them, and must then fit.
    stats = make_recipe("train", mean=(0.286,), std=(0.353,))
    assert stats.mean == (0.286,)
    assert make_recipe(stats, size=28, channels=1).std == (0.353,)
    with pytest.raises(RecipeError, match=r"mean has 1 value\(s\) but channels=3"):
        make_recipe(stats, size=28, channels=3)
    with pytest.raises(RecipeError, match=r"mean must be fractions of 255 in \[0, 1\]"):
        make_recipe("train", mean=(128,))
    with pytest.raises(RecipeError, match="size must be a positive int .*leave it out"):
        make_recipe("train", size=0)


@pytest.mark.parametrize(("name", "kwargs", "fingerprint"), _KNOWN_FINGERPRINTS)
def test_a_recipe_resolved_later_has_the_known_fingerprint(
    name: str, kwargs: dict, fingerprint: str
) -> None:
    """A Loader resolves size and channels from the data; caches are keyed by the fingerprint
    of the resolved recipe, which must be that of the recipe made with them given."""
    rest = {k: v for k, v in kwargs.items() if k not in ("size", "channels")}
    later = make_recipe(name, **rest)
    assert later.unresolved == ("size", "channels")
    resolved = make_recipe(later, size=kwargs["size"], channels=kwargs["channels"])
    assert resolved.fingerprint() == fingerprint
    size_first = make_recipe(name, size=kwargs["size"], **rest)
    assert make_recipe(size_first, channels=kwargs["channels"]).fingerprint() == fingerprint


def test_an_unresolved_recipe_names_size_and_channels_outside_a_loader() -> None:
    import torch

    from preprocessing import build_pipeline, normalize

    recipe = make_recipe("eval", crop_fraction=1.0)
    both = r"takes its size and channels from the data.*give size= \(pixels\) and channels= \(1"
    for use in (lambda: recipe.size, lambda: recipe.mean, recipe.fingerprint, recipe.describe):
        with pytest.raises(RecipeError, match=both):
            use()
    with pytest.raises(RecipeError, match="to build its DALI pipeline without a Loader, give size"):
        build_pipeline(recipe, device=Device.CPU, batch_size=1, num_threads=1, seed=0)
    only_channels = make_recipe("eval", size=4)
    with pytest.raises(RecipeError, match=r"takes its channels .*give channels= \(1 or 3\), e\.g"):
        normalize(torch.zeros((1, 1, 4, 4), dtype=torch.uint8), only_channels)
    assert "size=None, channels=None" in repr(recipe)


def test_recipes_copy_and_pickle_as_values() -> None:
    import copy
    import pickle

    later, now = make_recipe("train", randaugment=(2, 9)), make_recipe("eval", size=28, channels=1)
    for recipe in (later, now):
        assert copy.copy(recipe) is recipe and copy.deepcopy(recipe) is recipe
        clone = pickle.loads(pickle.dumps(recipe))
        assert clone == recipe and clone.unresolved == recipe.unresolved
