"""The cache's metadata: its stored form, identity checks, staleness and descriptions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cache import CacheError, CacheIdentity, InputDescription
from cache.errors import StaleCacheError, UnreadableMetaError
from cache.meta import SCHEMA_VERSION, CacheMeta


def _identity(**descriptions: InputDescription) -> CacheIdentity:
    return CacheIdentity("recipe-v1", {"files": "f0"}, (3, 4, 4), 10, **descriptions)


def test_a_cache_of_another_schema_version_is_stale_and_says_which() -> None:
    ident = _identity()
    assert CacheMeta.new(ident, variants=2, max_bytes=1 << 20).changes(ident) == ()
    old = CacheMeta(SCHEMA_VERSION + 1, ident, 2, 1 << 20)
    expected = f"schema version: the cache has {SCHEMA_VERSION + 1}, this code reads "
    assert old.changes(ident) == (expected + str(SCHEMA_VERSION),)
    with pytest.raises(StaleCacheError, match="schema version") as info:
        old.check(ident, where="c")
    assert info.value.changes == old.changes(ident)


def test_a_sample_shape_of_bools_is_refused() -> None:
    with pytest.raises(CacheError, match="sample_shape must be a tuple of positive ints"):
        CacheIdentity("r", "d", (True, 4, 4), 10)


@pytest.mark.parametrize(
    ("field", "value"),
    [("sample_shape", [0, 4, 4]), ("num_samples", 0), ("recipe_fingerprint", 3)],
)
def test_stored_metadata_naming_an_invalid_identity_is_unreadable(
    field: str, value: object
) -> None:
    doc = json.loads(CacheMeta.new(_identity(), variants=2, max_bytes=1 << 20).to_json())
    doc[field] = value
    with pytest.raises(UnreadableMetaError, match="the metadata of cache c is unreadable"):
        CacheMeta.from_json(json.dumps(doc).encode(), where="c")


def test_a_cache_written_without_a_description_lacks_either_one_the_reader_has() -> None:
    recipe = InputDescription("'train'", {"size": 4})
    dataset = InputDescription("image folder data/x")
    bare = CacheMeta.new(_identity(), variants=2, max_bytes=1 << 20)
    assert not bare.lacks_descriptions(_identity())
    assert bare.lacks_descriptions(_identity(recipe_description=recipe))
    assert bare.lacks_descriptions(_identity(dataset_description=dataset))
    both = _identity(recipe_description=recipe, dataset_description=dataset)
    described = CacheMeta.new(both, variants=2, max_bytes=1 << 20)
    assert not described.lacks_descriptions(both)
    assert not described.lacks_descriptions(_identity())


def test_a_mapping_fingerprint_of_tuples_and_paths_reads_back_fresh() -> None:
    ident = CacheIdentity({"size": (28, 28), "root": Path("data/x")}, "d", (1, 2, 2), 4)
    meta = CacheMeta.new(ident, variants=1, max_bytes=1 << 20)
    back = CacheMeta.from_json(meta.to_json(), where="c")
    assert back.identity == ident
    assert back.changes(ident) == ()
