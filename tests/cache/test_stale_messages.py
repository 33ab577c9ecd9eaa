"""What a stale cache's refusal says when the recipe and dataset are described in words,
on real LMDB caches: the facts that changed (old and new), the hashes as a detail, the
fix; a cache written without descriptions still opens, falls back to its fingerprints,
and gains the descriptions; nothing stored is lost by a refusal."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from cache import CacheError, CacheIdentity, CacheStore, InputDescription, StaleCacheError
from cache.meta import META_KEY
from tests.cache import helpers

Opener = Callable[..., CacheStore]

RECIPE_HASH = "0123456789abcdef0123456789abcdef"
DATASET_HASH = "aaaabbbbccccddddeeeeffff00001111"
COVERS = "image paths, sizes, modification times and labels"


def recipe(**facts: Any) -> InputDescription:
    """A described recipe ``'crop'``: size 16 and flip on unless told otherwise."""
    digest = facts.pop("digest", RECIPE_HASH)
    return InputDescription("'crop'", {"size": 16, "option flip": True, **facts}, digest=digest)


def dataset(digest: str = DATASET_HASH, **facts: Any) -> InputDescription:
    """A described image folder ``/data/train`` with 10 classes."""
    return InputDescription(
        "image folder /data/train",
        {"classes": 10, "total bytes": 4096, **facts},
        covers=COVERS,
        digest=digest,
    )


def described(
    *,
    recipe_fp: str = RECIPE_HASH,
    dataset_fp: str = DATASET_HASH,
    num_samples: int = helpers.NUM_SAMPLES,
    recipe_desc: InputDescription | None = None,
    dataset_desc: InputDescription | None = None,
) -> CacheIdentity:
    return CacheIdentity(
        recipe_fp,
        dataset_fp,
        helpers.SHAPE,
        num_samples,
        recipe_description=recipe_desc if recipe_desc is not None else recipe(),
        dataset_description=dataset_desc if dataset_desc is not None else dataset(),
    )


def _fill(store: CacheStore, n: int = 16) -> np.ndarray:
    idx = np.arange(n)
    assert store.put_batch(idx, 0, helpers.images(idx, 0), helpers.labels(idx)) == n
    return idx


def _stored_doc(store: CacheStore) -> dict[str, Any]:
    shared = store._env()
    with shared.env.begin(db=shared.meta) as txn:
        return dict(json.loads(bytes(txn.get(META_KEY))))


def test_descriptions_are_stored_in_order_and_never_compared(open_store: Opener) -> None:
    mine = described(recipe_desc=recipe(**{"option area": [0.08, 1.0], "mean": [0.5]}))
    store = open_store(mine)
    _fill(store)
    store.close()
    with CacheStore.open_existing(store.path) as kept:
        stored = kept.meta.identity
        assert stored.recipe_description == mine.recipe_description
        assert list(stored.recipe_description.facts) == [
            "size",
            "option flip",
            "option area",
            "mean",
        ]
        assert stored.dataset_description == dataset()
        info = kept.info().as_dict()
    assert info["recipe_description"]["title"] == "'crop'"
    assert info["dataset_description"]["covers"] == COVERS
    # Other words for the same fingerprints: the same cache, not a stale one.
    other_words = described(recipe_desc=recipe(size=99), dataset_desc=dataset(classes=3))
    assert other_words == mine
    with open_store(other_words) as again:
        assert again.count() == 16


def test_a_changed_recipe_names_its_parameters_old_and_new_with_the_hash(
    open_store: Opener,
) -> None:
    store = open_store(described())
    idx = _fill(store)
    store.close()
    new_hash = "fedcba9876543210fedcba9876543210"
    changed = described(
        recipe_fp=new_hash, recipe_desc=recipe(size=32, digest=new_hash, **{"option flip": False})
    )
    with pytest.raises(StaleCacheError) as info:
        open_store(changed)
    (change,) = info.value.changes
    assert change == (
        "recipe 'crop': size 16 -> 32, option flip True -> False "
        "(fingerprint 0123456789abcdef… -> fedcba9876543210…)"
    )
    text = str(info.value)
    assert f"is stale, it was built for other inputs: {change}. Its samples" in text
    assert "rebuild=True" in text and f"dataplane cache clear {store.path}" in text
    assert "dataset" not in text
    # refused: nothing was lost, and the original inputs are served as before
    with CacheStore.open_existing(store.path) as kept:
        assert kept.count() == 16
    with open_store(described()) as same:
        assert helpers.check_batch(same, idx, 0) == 16


def test_a_renamed_recipe_shows_both_names_and_the_options_each_lacks(
    open_store: Opener,
) -> None:
    open_store(described()).close()
    other = InputDescription(
        "'center'", {"size": 16, "option crop_fraction": 0.875}, digest="9" * 32
    )
    with pytest.raises(StaleCacheError) as info:
        open_store(described(recipe_fp="9" * 32, recipe_desc=other))
    (change,) = info.value.changes
    assert change.startswith(
        "recipe 'crop' -> 'center': option crop_fraction (absent) -> 0.875, "
        "option flip True -> (absent) (fingerprint"
    )


def test_a_dataset_changed_beyond_its_facts_names_its_source_and_what_the_hash_covers(
    open_store: Opener,
) -> None:
    store = open_store(described())
    _fill(store)
    store.close()
    new_hash = "1111222233334444aaaabbbbccccdddd"
    with pytest.raises(StaleCacheError) as info:
        open_store(described(dataset_fp=new_hash, dataset_desc=dataset(new_hash)))
    (change,) = info.value.changes
    assert change == (
        "dataset image folder /data/train (samples 512, classes 10, total bytes 4096): changed "
        f"only in what its fingerprint covers (fingerprint of {COVERS}: aaaabbbbccccdddd… -> "
        "1111222233334444…)"
    )
    with CacheStore.open_existing(store.path) as kept:
        assert kept.count() == 16


def test_a_dataset_with_other_samples_names_the_count_once(open_store: Opener) -> None:
    open_store(described()).close()
    new_hash = "5" * 32
    changed = described(
        dataset_fp=new_hash,
        num_samples=500,
        dataset_desc=dataset(new_hash, **{"total bytes": 4000}),
    )
    with pytest.raises(StaleCacheError) as info:
        open_store(changed)
    (change,) = info.value.changes
    assert change.startswith(
        "dataset image folder /data/train: samples 512 -> 500, total bytes 4096 -> 4000 "
        f"(fingerprint of {COVERS}: "
    )
    assert "number of samples" not in str(info.value)


def test_a_cache_written_without_descriptions_opens_falls_back_and_gains_them(
    open_store: Opener,
) -> None:
    # What a cache written before descriptions were stored holds: fingerprints only.
    plain = helpers.identity(recipe=RECIPE_HASH, dataset=DATASET_HASH)
    store = open_store(plain)
    idx = _fill(store)
    doc = _stored_doc(store)
    assert "recipe_description" not in doc and "dataset_description" not in doc
    created = store.meta.created
    store.close()
    with CacheStore.open_existing(store.path) as kept:
        ident = kept.meta.identity
        assert ident.recipe_description is None and ident.dataset_description is None
        assert ident.describe_dataset() == (
            f"{DATASET_HASH} (no description recorded; fingerprint only)"
        )
    # Stale: the message says what is known, old hash and new words.
    new_hash = "6" * 32
    with pytest.raises(StaleCacheError) as info:
        open_store(described(dataset_fp=new_hash, dataset_desc=dataset(new_hash)))
    (change,) = info.value.changes
    assert change == (
        "dataset now image folder /data/train (the cache records no description of the "
        f"dataset it was built for): its fingerprint of {COVERS} changed, "
        "aaaabbbbccccdddd… -> 6666666666666666…"
    )
    assert "rebuild=True" in str(info.value)
    # Same inputs: it opens, serves what it holds, and its metadata gains the descriptions.
    reader = open_store(plain)  # a store that opened it before, still in use
    with open_store(described()) as upgraded:
        assert helpers.check_batch(upgraded, idx, 0) == 16
        assert upgraded.meta.identity.recipe_description == recipe()
        assert upgraded.meta.created == created
        assert upgraded.count() == 16
    more = np.arange(16, 24)
    assert reader.put_batch(more, 0, helpers.images(more, 0), helpers.labels(more)) == 8
    assert reader.admitting, "descriptions added are not a rebuild"
    reader.close()
    with CacheStore.open_existing(store.path) as kept:
        assert kept.meta.identity.dataset_description == dataset()
        assert kept.meta.identity.describe_recipe() == (
            f"'crop': size 16, option flip True (fingerprint {RECIPE_HASH})"
        )
        assert kept.count() == 24


def test_a_mapping_fingerprint_without_description_names_nested_entries(
    open_store: Opener,
) -> None:
    old = {"definition": {"name": "crop"}, "options": {"flip": True, "area": [0.08, 1.0]}}
    open_store(helpers.identity(recipe=old)).close()  # type: ignore[arg-type]
    new = {"definition": {"name": "crop"}, "options": {"flip": False, "area": [0.08, 1.0]}}
    with pytest.raises(StaleCacheError, match=r"changed entries: options\.flip True -> False"):
        open_store(helpers.identity(recipe=new))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((3,), "title must be a str"),
        (("'a'", {"when": object()}), "facts must hold JSON values"),
        (("'a'", {1: "x"}), "mapping of str labels"),
    ],
)
def test_a_bad_description_is_refused(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(CacheError, match=match):
        InputDescription(*args)
    with pytest.raises(CacheError, match="recipe_description must be a cache.InputDescription"):
        CacheIdentity("r", "d", (1, 2, 2), 4, recipe_description="'a'")  # type: ignore[arg-type]


@pytest.mark.parametrize(("dtype", "layout"), [("float16", "CHW"), ("uint8", "HWC")])
def test_a_cache_of_another_sample_dtype_or_layout_is_stale_and_keeps_its_records(
    open_store: Opener, dtype: str, layout: str
) -> None:
    """Its payloads are not uint8 CHW samples: served, they would be other bytes."""
    store = open_store(described())
    _fill(store)
    doc = {**_stored_doc(store), "dtype": dtype, "layout": layout}
    shared = store._env()
    with shared.env.begin(write=True, db=shared.meta) as txn:
        txn.put(META_KEY, json.dumps(doc, sort_keys=True).encode())
    store.close()
    with pytest.raises(StaleCacheError) as info:
        open_store(described())
    assert info.value.changes == (
        f"sample dtype and layout: the cache has {dtype} {layout}, this code serves uint8 CHW",
    )
    assert "rebuild=True" in str(info.value)
    with CacheStore.open_existing(store.path) as kept:
        assert kept.count() == 16 and kept.info().as_dict()["dtype"] == dtype
    with open_store(described(), rebuild=True) as rebuilt:
        assert rebuilt.count() == 0 and rebuilt.meta.dtype == "uint8"
