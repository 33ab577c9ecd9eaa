"""A stale cache's refusal in human terms, on real DALI loaders, real LMDB caches and real
Fashion-MNIST PNGs: the recipe's name and the parameters that changed (old and new), the
dataset's kind, location and the facts that changed with what its fingerprint covers, the
hashes as a detail, and the fix. ``dataplane cache info`` and ``build`` name the inputs
the same way. A cache written without descriptions still opens and its message falls
back to what it records. Nothing stored is lost by a refusal."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cache import CacheStore
from cache.meta import META_KEY
from dataplane import CacheConfig, Loader, StaleCacheError
from dataplane.cache_cli import cache_group
from dataplane.sources import ImageFolderSource
from tests.dataplane.conftest import SMALL

COVERS = "image paths, sizes, modification times and labels"


def base_recipe(size: int = 28, **options):  # type: ignore[no-untyped-def]
    """The ``train`` recipe on 28 px grayscale, mean 0, std 1."""
    from preprocessing import make_recipe

    return make_recipe("train", size=size, channels=1, mean=(0.0,), std=(1.0,), **options)


@pytest.fixture(scope="module")
def train_dir(fmnist_small: Path) -> Path:
    return fmnist_small / "train"


def open_loader(data: Path, path: Path, *, recipe=None, **cache_options) -> Loader:  # type: ignore[no-untyped-def]
    cache_options.setdefault("max_bytes", 64 << 20)
    return Loader(
        data,
        recipe=recipe if recipe is not None else base_recipe(),
        batch_size=100,
        device="cpu",
        cache=CacheConfig(path, variants=1, fill="inline", **cache_options),
    )


def fill(data: Path, path: Path) -> None:
    """One epoch of the base recipe: every sample of variant 0 cached."""
    loader = open_loader(data, path)
    for _ in loader:
        pass
    assert loader.cache_store is not None and loader.cache_store.count() == SMALL
    loader.close()


def served_from_cache(data: Path, path: Path) -> int:
    """Cache hits of one epoch of the base recipe (the cache is used as it was)."""
    loader = open_loader(data, path)
    for _ in loader:
        pass
    assert loader.cache_stats is not None
    hits = loader.cache_stats.hits
    loader.close()
    return hits


def stored_records(path: Path) -> int:
    with CacheStore.open_existing(path) as store:
        return store.count()


def utc(mtime_ns: int) -> str:
    seconds, ns = divmod(mtime_ns, 10**9)
    stamp = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).replace(microsecond=ns // 1000)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def newest_mtime_ns(folder: Path) -> int:
    return max(p.stat().st_mtime_ns for p in folder.rglob("*.png"))


def strip_descriptions(path: Path) -> None:
    """Make the cache's metadata what a writer without descriptions leaves: fingerprints only."""
    with CacheStore.open_existing(path) as store:
        shared = store._env()
        with shared.env.begin(write=True, db=shared.meta) as txn:
            doc = json.loads(bytes(txn.get(META_KEY)))
            doc.pop("recipe_description", None)
            doc.pop("dataset_description", None)
            txn.put(META_KEY, json.dumps(doc, sort_keys=True).encode())


def test_a_changed_recipe_option_is_named_with_its_old_and_new_value(
    train_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "c"
    fill(train_dir, path)
    base, changed = base_recipe(), base_recipe(randaugment=(2, 9))
    with pytest.raises(StaleCacheError) as info:
        open_loader(train_dir, path, recipe=changed)
    (change,) = info.value.changes
    assert change == (
        f"recipe 'train': option randaugment None -> [2, 9] (fingerprint "
        f"{base.fingerprint()[:16]}… -> {changed.fingerprint()[:16]}…)"
    )
    text = str(info.value)
    assert '{"area"' not in text, "no raw JSON of the recipe"
    assert f"CacheConfig({str(path)!r}, rebuild=True)" in text
    assert f"`dataplane cache clear {path}`" in text and "--rebuild" in text
    # Refused: nothing stored is lost, and the original recipe is served from the cache.
    assert stored_records(path) == SMALL
    assert served_from_cache(train_dir, path) == SMALL


def test_another_recipe_and_size_name_both_names_and_each_parameter(
    train_dir: Path, tmp_path: Path
) -> None:
    from preprocessing import make_recipe

    path = tmp_path / "c"
    open_loader(train_dir, path).close()
    other = make_recipe("eval", size=32, channels=1, mean=(0.0,), std=(1.0,))
    with pytest.raises(StaleCacheError) as info:
        open_loader(train_dir, path, recipe=other)
    recipe_line, shape_line = info.value.changes
    assert recipe_line.startswith("recipe 'train' -> 'eval': size 28 -> 32, ")
    for part in (
        "option crop_fraction (absent) -> 0.875",
        "option flip True -> (absent)",
        "option area [0.08, 1.0] -> (absent)",
    ):
        assert part in recipe_line
    assert shape_line == "sample shape: (1, 28, 28) -> (1, 32, 32)"


def test_a_touched_file_names_the_dataset_its_newest_change_and_what_the_hash_covers(
    writable_copy: Path, tmp_path: Path
) -> None:
    path = tmp_path / "c"
    fill(writable_copy, path)
    before = ImageFolderSource(writable_copy).fingerprint()
    old_newest = newest_mtime_ns(writable_copy)
    victim = min(writable_copy.rglob("*.png"))
    new_newest = old_newest + 5 * 10**9
    os.utime(victim, ns=(victim.stat().st_atime_ns, new_newest))
    after = ImageFolderSource(writable_copy).fingerprint()
    with pytest.raises(StaleCacheError) as info:
        open_loader(writable_copy, path)
    (change,) = info.value.changes
    assert change == (
        f"dataset image folder {writable_copy}: newest file modified {utc(old_newest)} -> "
        f"{utc(new_newest)} (fingerprint of {COVERS}: {before[:16]}… -> {after[:16]}…)"
    )
    assert "rebuild=True" in str(info.value)
    assert stored_records(path) == SMALL, "nothing stored is lost"


def test_an_added_image_is_named_with_the_folders_measured_facts(
    writable_copy: Path, tmp_path: Path
) -> None:
    # (That the count is named once, in the dataset's line, is the cache's message building:
    # tests/cache/test_stale_messages.py.) Here: each fact is measured from the folder.
    path = tmp_path / "c"
    open_loader(writable_copy, path).close()
    source = ImageFolderSource(writable_copy)
    before = source.fingerprint()
    first = Path(source.describe(0))
    before_bytes = sum(p.stat().st_size for p in writable_copy.rglob("*.png"))
    old_newest = newest_mtime_ns(writable_copy)
    added = first.with_name("extra-" + first.name)
    shutil.copy(first, added)
    new_newest = old_newest + 10**9
    os.utime(added, ns=(added.stat().st_atime_ns, new_newest))
    after = ImageFolderSource(writable_copy).fingerprint()
    with pytest.raises(StaleCacheError) as info:
        open_loader(writable_copy, path)
    (change,) = info.value.changes
    assert change == (
        f"dataset image folder {writable_copy}: samples {SMALL} -> {SMALL + 1}, total bytes "
        f"{before_bytes} -> {before_bytes + first.stat().st_size}, newest file modified "
        f"{utc(old_newest)} -> {utc(new_newest)} "
        f"(fingerprint of {COVERS}: {before[:16]}… -> {after[:16]}…)"
    )


def test_info_and_build_name_the_inputs_as_the_refusal_does(
    train_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "c"
    runner = CliRunner()

    def build(size: int) -> list[str]:
        return ["build", str(train_dir), str(path), "--channels", "1", "--size", str(size)] + [
            "--variants",
            "1",
            "--device",
            "cpu",
            "--batch-size",
            "100",
            "--no-progress",
        ]

    built = runner.invoke(cache_group, build(28))
    assert built.exit_code == 0, built.output
    shown = runner.invoke(cache_group, ["info", str(path)])
    assert shown.exit_code == 0, shown.output

    def line(output: str, label: str) -> str:
        (found,) = [x for x in output.splitlines() if x.split(" ", 1)[0] == label]
        return found.split(" ", 1)[1].strip()

    recipe = line(shown.output, "recipe")
    dataset = line(shown.output, "dataset")
    assert (line(built.output, "recipe"), line(built.output, "dataset")) == (recipe, dataset)
    assert recipe.startswith("'train': size 28, channels 1, mean [0.5], std [0.5], option area")
    assert "option randaugment None" in recipe and "{" not in recipe
    newest = utc(newest_mtime_ns(train_dir))
    assert dataset.startswith(
        f"image folder {train_dir}: samples {SMALL}, classes 10, total bytes "
    )
    assert dataset.endswith(
        f"newest file modified {newest} (fingerprint of {COVERS}: "
        f"{ImageFolderSource(train_dir).fingerprint()})"
    )
    doc = json.loads(runner.invoke(cache_group, ["info", "--json", str(path)]).output)
    assert doc["recipe_description"]["title"] == "'train'"
    assert doc["dataset_description"]["title"] == f"image folder {train_dir}"

    # Building for another size is refused with the loader's message, nothing lost.
    refused = runner.invoke(cache_group, build(32))
    assert refused.exit_code == 1
    from preprocessing import make_recipe

    with pytest.raises(StaleCacheError) as info:
        Loader(
            train_dir,
            recipe=make_recipe("train", size=32, channels=1),
            device="cpu",
            cache=CacheConfig(path, variants=1),
        )
    assert f"Error: {info.value}" in refused.output
    assert "recipe 'train': size 28 -> 32 (fingerprint " in refused.output
    assert stored_records(path) == SMALL


def test_a_cache_written_without_descriptions_opens_and_falls_back(
    writable_copy: Path, tmp_path: Path
) -> None:
    path = tmp_path / "c"
    fill(writable_copy, path)
    strip_descriptions(path)
    runner = CliRunner()
    shown = runner.invoke(cache_group, ["info", str(path)]).output
    fingerprint = ImageFolderSource(writable_copy).fingerprint()
    assert f"dataset      {fingerprint} (no description recorded; fingerprint only)" in shown
    assert "recipe       channels 1, definition.name train, " in shown
    # Another recipe: the changed entry of the recorded recipe, with the new name.
    with pytest.raises(StaleCacheError) as info:
        open_loader(writable_copy, path, recipe=base_recipe(randaugment=(2, 9)))
    (change,) = info.value.changes
    assert change.startswith(
        "recipe now 'train' (the cache records no description of the recipe it was built "
        "for): changed entries: options.randaugment None -> [2, 9] (fingerprint now "
    )
    assert "rebuild=True" in str(info.value)
    assert stored_records(path) == SMALL
    # The same inputs: served from the cache, and its metadata gains the descriptions.
    assert served_from_cache(writable_copy, path) == SMALL
    shown = runner.invoke(cache_group, ["info", str(path)]).output
    assert "recipe       'train': size 28, channels 1, mean [0.0], std [1.0]" in shown
    assert f"dataset      image folder {writable_copy}: samples {SMALL}, classes 10" in shown
    # A changed dataset is then named in words.
    victim = min(writable_copy.rglob("*.png"))
    os.utime(victim, ns=(victim.stat().st_atime_ns, newest_mtime_ns(writable_copy) + 10**9))
    with pytest.raises(StaleCacheError, match=r"dataset image folder .*: newest file modified"):
        open_loader(writable_copy, path)
    assert stored_records(path) == SMALL


def test_a_parquet_dataset_is_described_with_its_files(fmnist_parquet: Path) -> None:
    from dataplane.cached_producer import cache_identity
    from dataplane.sources import ParquetSource

    source = ParquetSource(fmnist_parquet / "train")
    identity = cache_identity(source, base_recipe())
    described = identity.dataset_description
    assert described is not None
    assert described.title == f"Parquet {fmnist_parquet / 'train'}"
    assert list(described.facts)[:3] == ["classes", "files", "total bytes"]
    assert described.facts["files"] == len(list((fmnist_parquet / "train").rglob("*.parquet")))
    assert described.digest == identity.dataset_fingerprint == source.fingerprint()
    assert identity.describe_dataset().startswith(
        f"Parquet {fmnist_parquet / 'train'}: samples {SMALL}, classes 10, files "
    )
