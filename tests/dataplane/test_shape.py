"""Output size and channels taken from the images: by recipe name, by a Recipe without them,
median size over images of mixed sizes with a warning."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from dataplane import ConfigError, Loader, MixedImageSizeWarning
from tests.dataplane.helpers import cpu_loader, folder

# DALI's RandAugment uses its own deprecated operator aliases when it runs.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Fingerprint of ``make_recipe("train", size=28, channels=1)``, what ``recipe="train"``
#: resolves to on Fashion-MNIST: caches built with it must stay valid.
TRAIN_28_GRAY = "79fdac9e32703bb2b5632b96c044e14b"


def png(width: int, height: int, mode: str = "L") -> bytes:
    """A PNG of ``width x height`` px (flat grey: small to write, cheap to decode)."""
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, (width, height), 128).save(out, format="PNG")
    return out.getvalue()


def loader_of(data, **kwargs) -> Loader:  # type: ignore[no-untyped-def]
    kwargs.setdefault("batch_size", 8)
    return cpu_loader(data, **kwargs)


@pytest.fixture(scope="module")
def train_dir(fmnist_small: Path) -> Path:
    return fmnist_small / "train"


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Five images, the first the largest; shorter sides 1110, 194, 300, 480, 320 px."""
    return folder(
        tmp_path / "mixed",
        {
            "a/00.png": png(1500, 1110),
            "a/01.png": png(194, 260),
            "a/02.png": png(300, 300),
            "b/03.png": png(640, 480),
            "b/04.png": png(320, 400),
        },
    )


# -- a Recipe without size or channels, as a recipe name ---------------------------------------
def test_a_recipe_object_takes_size_and_channels_from_the_images(train_dir: Path) -> None:
    from preprocessing import make_recipe

    recipe = make_recipe("train", randaugment=(2, 9))  # on grayscale: runs on one channel
    loader = loader_of(train_dir, recipe=recipe, batch_size=16)
    images, _ = next(iter(loader))
    assert tuple(images.shape) == (16, 1, 28, 28), "28 px grayscale, as recipe='train' gives"
    assert loader.recipe.mean == (0.5,) and loader.recipe.std == (0.5,)
    assert loader.recipe == make_recipe("train", size=28, channels=1, randaugment=(2, 9))
    loader.close()
    by_name = loader_of(train_dir, recipe="train")
    by_object = loader_of(train_dir, recipe=make_recipe("train"))
    assert by_name.recipe.fingerprint() == by_object.recipe.fingerprint() == TRAIN_28_GRAY


def test_the_loader_and_the_recipe_fix_what_they_are_given(train_dir: Path) -> None:
    from preprocessing import make_recipe

    def shape(recipe, **kwargs) -> tuple[int, int]:  # type: ignore[no-untyped-def]
        r = loader_of(train_dir, recipe=recipe, **kwargs).recipe
        return r.size, r.channels

    assert shape(make_recipe("eval", size=20)) == (20, 1), "channels still from the images"
    assert shape(make_recipe("eval", channels=3)) == (28, 3), "size still from the images"
    assert shape(make_recipe("eval", size=20, channels=3), size=16) == (16, 3)
    gray = loader_of(train_dir, recipe=make_recipe("eval", channels=3), channels=1).recipe
    assert gray.channels == 1 and gray.mean == (0.5,), "the Loader's channels= wins"
    images, _ = next(iter(loader_of(train_dir, recipe=make_recipe("eval", size=20))))
    assert tuple(images.shape) == (8, 1, 20, 20)


def test_a_custom_recipe_takes_size_and_channels_from_the_images(
    train_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import preprocessing.recipe
    from preprocessing import decode, make_recipe, register_recipe, to_chw

    # Registered for this test only (other tests list the registered names).
    registry = dict(preprocessing.recipe._REGISTRY)
    monkeypatch.setattr(preprocessing.recipe, "_REGISTRY", registry)

    @register_recipe("test-shape-decode", defaults={"note": "x"}, replace=True)
    def decoded(encoded, recipe, device):  # type: ignore[no-untyped-def]
        from nvidia.dali import fn

        images = fn.resize(decode(encoded, recipe, device), size=(recipe.size, recipe.size))
        return to_chw(images)

    for recipe in ("test-shape-decode", make_recipe("test-shape-decode", note="y")):
        loader = loader_of(train_dir, recipe=recipe, normalize=False)
        images, _ = next(iter(loader))
        assert images.dtype == torch.uint8 and tuple(images.shape) == (8, 1, 28, 28)
        loader.close()


def test_statistics_for_other_channels_name_the_inferred_channels(tmp_path: Path) -> None:
    from preprocessing import make_recipe

    recipe = make_recipe("eval", mean=(0.25,), std=(0.5,))
    colour = folder(tmp_path / "c", {"a/0.png": png(8, 8, "RGB"), "b/1.png": png(8, 8, "RGB")})
    with pytest.raises(
        ConfigError,
        match=r"mean has 1 value\(s\) but channels=3.*\(size=8, channels=3 inferred from the "
        r"images; pass size= and channels= to the Loader to choose\)",
    ):
        loader_of(colour, recipe=recipe)
    gray = folder(tmp_path / "g", {"a/0.png": png(8, 8), "b/1.png": png(8, 8)})
    assert loader_of(gray, recipe=recipe).recipe.mean == (0.25,)


# -- eval at the images' own size -------------------------------------------------------------
def test_eval_gives_the_decoded_pixels_only_with_crop_fraction_one(train_dir: Path) -> None:
    from PIL import Image

    from preprocessing import make_recipe

    exact = loader_of(train_dir, recipe=make_recipe("eval", crop_fraction=1.0), normalize=False)
    images, _ = next(iter(exact))
    source = exact.source
    decoded = np.stack([np.asarray(Image.open(source.describe(i)))[None] for i in range(8)])
    np.testing.assert_array_equal(images.numpy(), decoded)
    zoomed, _ = next(iter(loader_of(train_dir, recipe="eval", normalize=False)))
    assert zoomed.shape == images.shape
    assert not np.array_equal(zoomed.numpy(), decoded), "resized to 32 px, center 28 px kept"


# -- images of mixed sizes ---------------------------------------------------------------------
def test_mixed_sizes_give_the_median_shorter_side_and_a_warning(mixed: Path) -> None:
    with pytest.warns(
        MixedImageSizeWarning,
        match=r"shorter sides of 5 samples probed range from 194 to 1110 px; the output size is "
        r"their median, 320 px .*pass size= to the Loader",
    ) as record:
        loader = Loader(mixed, batch_size=8, recipe="eval", device="cpu", num_threads=1)
    assert record[0].filename == __file__, "the warning points at the Loader(...) call"
    assert (loader.recipe.size, loader.recipe.channels) == (320, 1)
    images, _ = next(iter(loader))
    assert tuple(images.shape) == (5, 1, 320, 320)
    # An even count: the lower of the two middle values (a probed image's own size).
    (mixed / "b" / "05.png").write_bytes(png(256, 256))
    with pytest.warns(MixedImageSizeWarning, match="median, 300 px"):
        assert loader_of(mixed).recipe.size == 300


def test_the_inferred_size_does_not_depend_on_the_order(mixed: Path) -> None:
    from dataplane.sources import ImageFolderSource

    source = ImageFolderSource(mixed)
    items = [(source.describe(i), source.label(i)) for i in range(len(source))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MixedImageSizeWarning)
        orders = (items, items[::-1], items[1:] + items[:1])
        sizes = {loader_of(order).recipe.size for order in orders}
    assert sizes == {320}


def test_no_warning_when_sizes_agree_or_the_size_is_given(mixed: Path, tmp_path: Path) -> None:
    from preprocessing import make_recipe

    same = folder(tmp_path / "same", {f"{c}/{i}.png": png(40, 30) for c in "ab" for i in range(3)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixedImageSizeWarning)
        assert loader_of(same).recipe.size == 30
        assert loader_of(mixed, size=64).recipe.size == 64
        only_channels = loader_of(mixed, recipe=make_recipe("eval", size=48)).recipe
        assert (only_channels.size, only_channels.channels) == (48, 1)
        mixed_jpegs = make_recipe("eval", size=48, channels=3)
        assert loader_of(mixed, recipe=mixed_jpegs).recipe.channels == 3


def test_real_photos_of_mixed_sizes(opencv_jpegs: list[Path]) -> None:
    """15 photos (all of them probed), the largest first."""
    from PIL import Image

    def shorter(path: Path) -> int:
        with Image.open(path) as image:
            return min(image.size)

    by_side = {shorter(p): p for p in opencv_jpegs}  # one photo per shorter side
    if len(by_side) < 15:
        pytest.skip(f"fewer than 15 sizes among {len(opencv_jpegs)} JPEGs")
    sides = sorted(by_side)
    chosen = sides[:: max(1, len(sides) // 15)][:14] + [sides[-1]]
    items = [(str(by_side[s]), i % 2) for i, s in enumerate(sorted(chosen, reverse=True))]
    median = sorted(chosen)[(len(chosen) - 1) // 2]
    assert median != max(chosen)
    with pytest.warns(
        MixedImageSizeWarning, match=rf"range from {min(chosen)} to {max(chosen)} px.* {median} px"
    ):
        loader = loader_of(items, batch_size=len(items))
    assert loader.recipe.size == median
    images, _ = next(iter(loader))
    assert tuple(images.shape) == (15, loader.recipe.channels, median, median)
