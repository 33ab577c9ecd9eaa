"""The cache's metadata record and what makes a cache stale.

One JSON document is stored under key ``b"meta"`` of the ``meta`` database. It
holds the schema version, the recipe and dataset fingerprints (opaque to this
package: the caller computes them), the served sample shape/dtype/layout, the
number of samples, the variants, and the size bound.

Completeness
------------
Which ``(sample, variant)`` pairs are complete is **derived from the records
themselves**, not kept in the metadata: a record exists only if the
transaction that wrote it (record and checksum together) committed, and LMDB
commits are atomic. A separate bitmap would be a second copy of that fact that
could drift (a bitmap written before a crash, a record dropped as corrupt);
counting keys of one variant is a key-only range scan. See
:meth:`cache.store.CacheStore.completed` and :meth:`~cache.store.CacheStore.counts`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any

from cache.errors import CacheError, StaleCacheError, UnreadableMetaError

#: Version of the key/record/metadata layout; a cache of another version is stale.
SCHEMA_VERSION = 1
META_KEY = b"meta"

Fingerprint = str | Mapping[str, Any]


def _canonical(fingerprint: Fingerprint) -> str | dict[str, Any]:
    if isinstance(fingerprint, str):
        return fingerprint
    if isinstance(fingerprint, Mapping):
        # Round-trip through JSON: the stored form is what is compared.
        return dict(json.loads(json.dumps(dict(fingerprint), sort_keys=True, default=str)))
    raise CacheError(
        f"a fingerprint must be a str or a mapping of JSON values, not {type(fingerprint).__name__}"
    )


def _short(value: Any, width: int = 24) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def _describe(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        return "changed entries: " + ", ".join(
            f"{k} {_short(old.get(k, '<absent>'))} -> {_short(new.get(k, '<absent>'))}"
            for k in keys
        )
    return f"{_short(old)} -> {_short(new)}"


@dataclasses.dataclass(frozen=True)
class CacheIdentity:
    """What a cache's samples were produced from; a mismatch makes the cache stale.

    Parameters
    ----------
    recipe_fingerprint : str or mapping
        Fingerprint of the augmentation recipe (e.g. ``Recipe.fingerprint()``).
    dataset_fingerprint : str or mapping
        Fingerprint of the dataset (paths, sizes, mtimes or content hashes).
        A mapping lets a stale message name the entries that changed.
    sample_shape : tuple of int
        Shape of one served sample, ``(channels, height, width)``.
    num_samples : int
        Samples in the dataset (valid indices are ``0 .. num_samples - 1``).
    """

    recipe_fingerprint: Fingerprint
    dataset_fingerprint: Fingerprint
    sample_shape: tuple[int, ...]
    num_samples: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "recipe_fingerprint", _canonical(self.recipe_fingerprint))
        object.__setattr__(self, "dataset_fingerprint", _canonical(self.dataset_fingerprint))
        shape = tuple(self.sample_shape)
        if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
            raise CacheError(
                f"sample_shape must be a tuple of positive ints such as (3, 224, 224), not "
                f"{self.sample_shape!r}"
            )
        object.__setattr__(self, "sample_shape", shape)
        n = self.num_samples
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CacheError(f"num_samples must be a positive int, not {n!r}")


@dataclasses.dataclass(frozen=True)
class CacheMeta:
    """The stored metadata of a cache.

    Attributes
    ----------
    schema_version : int
        :data:`SCHEMA_VERSION` of the code that created the cache.
    identity : CacheIdentity
        Fingerprints, sample shape and number of samples.
    variants : int
        Variants per sample of the latest writer's configuration.
    max_bytes : int
        Size bound of the latest writer's configuration, in bytes.
    dtype : str
        Sample dtype (``"uint8"``).
    layout : str
        Sample layout (``"CHW"``).
    created : str
        ISO 8601 UTC time the cache was created or rebuilt.
    """

    schema_version: int
    identity: CacheIdentity
    variants: int
    max_bytes: int
    dtype: str = "uint8"
    layout: str = "CHW"
    created: str = ""

    @classmethod
    def new(cls, identity: CacheIdentity, *, variants: int, max_bytes: int) -> CacheMeta:
        """Metadata of a cache created now."""
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        return cls(SCHEMA_VERSION, identity, variants, max_bytes, created=now)

    @property
    def payload_size(self) -> int:
        """Bytes of one sample's payload."""
        size = 1
        for d in self.identity.sample_shape:
            size *= d
        return size

    def to_json(self) -> bytes:
        """The stored form."""
        ident = self.identity
        doc = {
            "schema_version": self.schema_version,
            "recipe_fingerprint": ident.recipe_fingerprint,
            "dataset_fingerprint": ident.dataset_fingerprint,
            "sample_shape": list(ident.sample_shape),
            "num_samples": ident.num_samples,
            "dtype": self.dtype,
            "layout": self.layout,
            "variants": self.variants,
            "max_bytes": self.max_bytes,
            "created": self.created,
            "key_order": "variant:u16be,index:u48be",
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, *, where: str) -> CacheMeta:
        """Parse the stored form; ``where`` names the cache in errors.

        Raises
        ------
        UnreadableMetaError
            If ``raw`` is not a metadata document.
        """
        try:
            doc = json.loads(bytes(raw))
            identity = CacheIdentity(
                doc["recipe_fingerprint"],
                doc["dataset_fingerprint"],
                tuple(doc["sample_shape"]),
                int(doc["num_samples"]),
            )
            return cls(
                int(doc["schema_version"]),
                identity,
                int(doc["variants"]),
                int(doc["max_bytes"]),
                dtype=str(doc["dtype"]),
                layout=str(doc["layout"]),
                created=str(doc.get("created", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError, CacheError) as exc:
            raise UnreadableMetaError(
                f"the metadata of cache {where} is unreadable ({exc}); delete its records and "
                f"metadata with `dataplane cache clear {where}`, or open it with rebuild=True"
            ) from exc

    def changes(self, expected: CacheIdentity) -> tuple[str, ...]:
        """What differs between this cache and ``expected`` (empty when it is fresh)."""
        out = []
        if self.schema_version != SCHEMA_VERSION:
            out.append(
                f"schema version: the cache has {self.schema_version}, this code reads "
                f"{SCHEMA_VERSION}"
            )
        have = self.identity
        if have.recipe_fingerprint != expected.recipe_fingerprint:
            out.append(
                "recipe fingerprint: "
                + _describe(have.recipe_fingerprint, expected.recipe_fingerprint)
            )
        if have.dataset_fingerprint != expected.dataset_fingerprint:
            out.append(
                "dataset fingerprint: "
                + _describe(have.dataset_fingerprint, expected.dataset_fingerprint)
            )
        if have.num_samples != expected.num_samples:
            out.append(f"number of samples: {have.num_samples} -> {expected.num_samples}")
        if have.sample_shape != expected.sample_shape:
            out.append(f"sample shape: {have.sample_shape} -> {expected.sample_shape}")
        return tuple(out)

    def check(self, expected: CacheIdentity, *, where: str) -> None:
        """Raise :class:`StaleCacheError` when the cache does not match ``expected``."""
        changes = self.changes(expected)
        if changes:
            what = "; ".join(changes)
            raise StaleCacheError(
                f"cache {where} is stale, it was built for other inputs ({what}). Its samples "
                f"are not served. Rebuild it: CacheConfig({str(where)!r}, rebuild=True), or "
                f"`dataplane cache build --rebuild ...`, or `dataplane cache clear {where}`",
                changes=changes,
            )
