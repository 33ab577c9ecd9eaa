"""Corrupt-only batches, JPEG trailers, inferred channels, seeds, resume states,
Parquet detection and error messages, on tiny datasets."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest

from dataplane import CacheConfig, ConfigError, DataError, DatasetError, Loader
from dataplane.errors import CorruptSampleWarning
from dataplane.plan import EpochPlan
from dataplane.sources import ParquetSource, open_source
from dataplane.validate import check_encoded
from tests.dataplane.helpers import cpu_loader, folder


def encode(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def grey(seed: int, side: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (side, side), dtype=np.uint8)


def colour(seed: int, side: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)


def loader_of(data, **kwargs) -> Loader:  # type: ignore[no-untyped-def]
    kwargs.setdefault("batch_size", 2)
    return cpu_loader(data, **kwargs)


# -- JPEG with bytes after its end-of-image marker ------------------------------------
def test_jpeg_with_trailing_bytes_is_accepted_and_truncated_jpeg_is_not() -> None:
    jpeg = encode(colour(0, 64), "JPEG")
    assert check_encoded(jpeg) is None
    assert check_encoded(jpeg + b"\0\0appended metadata\n") is None
    assert check_encoded(jpeg[: len(jpeg) * 9 // 10]) == (
        "truncated JPEG (no end-of-image marker after the main image's data)"
    )


def test_loader_reads_a_jpeg_with_trailing_bytes(tmp_path: Path) -> None:
    data = encode(colour(0, 16), "JPEG") + b"\0\0appended metadata\n"
    root = folder(tmp_path / "d", {"a/0.jpg": data, "b/1.jpg": data})
    assert sum(len(x) for x, _ in loader_of(root)) == 2


# -- on_corrupt="skip": no batch is ever empty ---------------------------------------
def corrupt_second_batch(root: Path) -> Path:
    """Six samples (a/0..2, b/3..5); samples 2 and 3 (the second batch of 2) are corrupt."""
    files = {f"a/{i}.png": encode(grey(i)) for i in range(3)}
    files.update({f"b/{i}.png": encode(grey(i)) for i in range(3, 6)})
    files["a/2.png"] = b""
    files["b/3.png"] = encode(grey(3))[:40]
    return folder(root, files)


def test_a_batch_of_corrupt_samples_holds_other_samples_instead(tmp_path: Path) -> None:
    loader = loader_of(corrupt_second_batch(tmp_path / "d"), on_corrupt="skip")
    with pytest.warns(CorruptSampleWarning, match="skipped 2"):
        batches = [(len(x), y.tolist()) for x, y in loader]
    assert len(batches) == len(loader) == 3
    assert [n for n, _ in batches] == [2, 2, 2], "never empty, same size"
    assert batches[1][1] == [1, 1], "the next valid samples of the pass (4 and 5, class b)"
    assert loader.last_epoch_stats.num_skipped == 2


def test_ranks_stay_in_lockstep_with_a_corrupt_batch(tmp_path: Path) -> None:
    root = corrupt_second_batch(tmp_path / "d")
    sizes = []
    for rank in range(2):
        loader = loader_of(root, on_corrupt="skip", batch_size=1, rank=rank, world_size=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CorruptSampleWarning)
            sizes.append([len(x) for x, _ in loader])
    assert sizes == [[1, 1, 1], [1, 1, 1]]


def test_a_corrupt_batch_is_replaced_when_served_from_the_cache(tmp_path: Path) -> None:
    root = corrupt_second_batch(tmp_path / "d")
    loader = loader_of(root, on_corrupt="skip", cache=CacheConfig(tmp_path / "cache", variants=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptSampleWarning)
        for _ in range(2):  # fill, then serve (the corrupt samples stay misses)
            batches = [(len(x), y.tolist()) for x, y in loader]
            assert [n for n, _ in batches] == [2, 2, 2]
            assert batches[1][1] == [1, 1]
    assert loader.cache_stats is not None and loader.cache_stats.hits == 4
    loader.close()


def test_no_valid_sample_left_raises_naming_the_files(tmp_path: Path) -> None:
    root = folder(tmp_path / "d", {"a/0.png": b"", "b/1.png": b"not an image"})
    loader = loader_of(root, on_corrupt="skip", size=8, channels=1)
    with pytest.raises(DataError, match=r"every sample of batch 0 .*0\.png.*fix or remove"):
        next(iter(loader))


# -- channels inferred from several samples -------------------------------------------
def test_channels_are_inferred_from_several_samples(tmp_path: Path) -> None:
    files = {"a/0.png": encode(grey(0))}
    files.update({f"a/{i}.png": encode(colour(i)) for i in range(1, 4)})
    files.update({f"b/{i}.png": encode(colour(i)) for i in range(4, 6)})
    loader = loader_of(folder(tmp_path / "d", files), batch_size=6)
    assert (loader.recipe.size, loader.recipe.channels) == (8, 3)
    images, _ = next(iter(loader))
    assert tuple(images.shape) == (6, 3, 8, 8)
    greys = {f"{c}/{i}.png": encode(grey(i)) for c, i in (("a", 0), ("b", 1))}
    assert loader_of(folder(tmp_path / "g", greys)).recipe.channels == 1


# -- seeds -----------------------------------------------------------------------------
def test_seeds_beyond_48_bits_are_refused_and_orders_are_unchanged(tmp_path: Path) -> None:
    root = folder(tmp_path / "d", {"a/0.png": encode(grey(0)), "b/1.png": encode(grey(1))})
    with pytest.raises(ConfigError, match=r"seed must be < 2\*\*48 .*got 281474976710656"):
        loader_of(root, seed=2**48)
    assert loader_of(root, seed=2**48 - 1).plan.seed == 2**48 - 1
    with pytest.raises(ValueError, match="seed"):
        EpochPlan(num_samples=10, batch_size=4, shuffle=True, seed=12345 + 7 * 2**50)
    order = EpochPlan(num_samples=10, batch_size=4, shuffle=True, seed=12345).order(3)
    expected = np.random.default_rng([12345, 3]).permutation(10)
    np.testing.assert_array_equal(order, expected)  # saved positions stay valid


# -- load_state_dict ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad", [{"epoch": -1}, {"epoch": True}, {"batches_done": True}, {"epoch": 1.0}]
)
def test_load_state_dict_rejects_bad_epoch_and_position(tmp_path: Path, bad: dict) -> None:
    root = folder(tmp_path / "d", {"a/0.png": encode(grey(0)), "b/1.png": encode(grey(1))})
    loader = loader_of(root, shuffle=True)
    with pytest.raises(ConfigError, match="malformed loader state.*non-negative int"):
        loader.load_state_dict({**loader.state_dict(), **bad})
    assert loader.state_dict()["epoch"] == 0


# -- Parquet ---------------------------------------------------------------------------
def write_parquet(path: Path, images: list, labels: list) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"image": images, "label": labels}), path)


def test_parquet_files_deeper_than_one_folder_are_detected(tmp_path: Path) -> None:
    png = encode(grey(0))
    write_parquet(tmp_path / "d" / "split=train" / "shard=0" / "p.parquet", [png] * 4, [0, 1] * 2)
    assert isinstance(open_source(tmp_path / "d"), ParquetSource)
    assert len(loader_of(tmp_path / "d")) == 2


def test_parquet_messages_name_the_fix(tmp_path: Path) -> None:
    png = encode(grey(0))
    write_parquet(tmp_path / "nulls" / "p.parquet", [png] * 3, [0, None, None])
    with pytest.raises(DatasetError, match=r"2 null value\(s\) \(first at row 1\)"):
        ParquetSource(tmp_path / "nulls")
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "cols").mkdir()
    pq.write_table(pa.table({"img": [png], "y": [0]}), tmp_path / "cols" / "p.parquet")
    with pytest.raises(
        DatasetError, match=r"Loader\(ParquetSource\(path, image_column=\.\.\., label_column"
    ):
        Loader(tmp_path / "cols")


def test_iterate_names_what_it_can_do_about_parquet_column_names(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from dataplane.iterate import iterate_command

    (tmp_path / "cols").mkdir()
    pq.write_table(pa.table({"img": [encode(grey(0))], "y": [0]}), tmp_path / "cols" / "p.parquet")
    args = [str(tmp_path / "cols"), "--epochs", "1", "--device", "cpu"]
    result = CliRunner().invoke(iterate_command, args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    output = " ".join(result.output.split())
    assert "has no column 'image' (columns: img, y)" in output
    assert "rename the file's columns to those" in output  # what works for the command
    assert "or, from Python, name them with Loader(ParquetSource(" in output


# -- DALI-detected corrupt samples and the command line ----------------------------------
def test_a_corrupt_bmp_found_by_dali_names_the_decoder_failure(tmp_path: Path) -> None:
    bmp = encode(colour(0, 16), "BMP")
    root = folder(tmp_path / "d", {"a/0.bmp": bmp, "b/1.bmp": bmp[: len(bmp) // 2]})
    assert check_encoded(bmp[: len(bmp) // 2]) is None, "only DALI finds it"
    with pytest.raises(DataError, match=r"sample 1 .*: Failed to decode sample \(in nvidia"):
        list(loader_of(root))


def test_iterate_command_names_its_own_option(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dataplane.iterate import iterate_command

    files = {"a/0.png": encode(grey(0)), "b/1.png": encode(grey(1))[:40]}
    root = folder(tmp_path / "d", files)
    args = [str(root), "--epochs", "1", "--batch-size", "2", "--device", "cpu"]
    result = CliRunner().invoke(iterate_command, [*args, "--num-threads", "1"])
    assert result.exit_code == 1
    assert "pass --on-corrupt skip" in result.output
    assert "on_corrupt=" not in result.output
