"""The cache's metadata record and what makes a cache stale.

One JSON document is stored under key ``b"meta"`` of the ``meta`` database. It
holds the schema version, the recipe and dataset fingerprints (opaque to this
package: the caller computes them), the served sample shape/dtype/layout, the
number of samples, the variants, and the size bound.

Descriptions
------------
Beside each fingerprint the caller may store an :class:`InputDescription`: what
the recipe or dataset is, in words (its name or kind and location, and named
facts such as ``size 224`` or ``total bytes 1048576``). Descriptions are never
compared, the fingerprints decide; they only make messages readable. A stale
cache's message names the facts that changed, old and new, with the hash as a
detail::

    recipe 'train': size 28 -> 32, option randaugment None -> [2, 9]
    (fingerprint 0f3a9c1b2d4e5f60... -> 77de0a12c3b4a5f6...)

The two fields are optional in the stored document: a cache written without
them opens as before, its messages fall back to the fingerprints (a mapping
fingerprint still names its changed entries), and a writer that opens it with
descriptions adds them to its metadata.

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
#: The sample dtype and layout this code writes and serves; a cache of others is stale.
SAMPLE_DTYPE = "uint8"
SAMPLE_LAYOUT = "CHW"

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


def _short(value: Any, width: int = 40) -> str:
    text = value if isinstance(value, str) else _show(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _show(value: Any) -> str:
    """A JSON value as a Python user writes it: ``None``, ``True``, ``[2, 9]``; a string
    bare (quoted in a list, or when empty)."""
    if isinstance(value, str):
        return value or "''"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(repr(v) if isinstance(v, str) else _show(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return repr(value)


def flat_mapping(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level, keys joined with dots (``options.flip``); used for the
    facts of a recipe's description too, so both name an entry alike."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            out.update(flat_mapping(item, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = item
    return out


_ABSENT = object()


def _pairs_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"label old -> new"`` for each entry that differs (new's order, then old-only)."""
    keys = [k for k in new if old.get(k, _ABSENT) != new[k]]
    keys += [k for k in old if k not in new]
    return [
        f"{k} {_short(old.get(k, '(absent)'))} -> {_short(new.get(k, '(absent)'))}" for k in keys
    ]


def _describe(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        return "changed entries: " + ", ".join(_pairs_changed(flat_mapping(old), flat_mapping(new)))
    return f"{_short(old, 24)} -> {_short(new, 24)}"


def _digest(value: str, width: int = 16) -> str:
    return value if len(value) <= width else value[:width] + "…"


@dataclasses.dataclass(frozen=True)
class InputDescription:
    """What one input of a cache (its recipe or its dataset) is, in words.

    Stored in the metadata beside the input's fingerprint and shown by stale-cache
    messages and ``dataplane cache info``; never compared (the fingerprint decides
    whether a cache is stale).

    Parameters
    ----------
    title : str
        What the input is: a recipe's name (``"'train'"``), a dataset's kind and
        location (``"image folder data/fmnist/train"``).
    facts : mapping of str to JSON value
        Named properties, in display order (``{"size": 224, "option flip": True}``).
        A stale cache's message lists those that differ, old and new.
    covers : str
        What the fingerprint covers, in words (``"image paths, sizes, modification
        times and labels"``); empty when the facts say it all.
    digest : str
        The input's hash, shown as a detail (a dataset's fingerprint, a recipe's
        ``Recipe.fingerprint()``); empty if there is none.

    Raises
    ------
    CacheError
        If a field has the wrong type or a fact is not a JSON value.
    """

    title: str
    facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    covers: str = ""
    digest: str = ""

    def __post_init__(self) -> None:
        for name in ("title", "covers", "digest"):
            if not isinstance(getattr(self, name), str):
                raise CacheError(
                    f"InputDescription.{name} must be a str, not "
                    f"{type(getattr(self, name)).__name__}"
                )
        if not isinstance(self.facts, Mapping) or not all(isinstance(k, str) for k in self.facts):
            raise CacheError(
                "InputDescription.facts must be a mapping of str labels to JSON values, not "
                f"{self.facts!r}"
            )
        try:  # the stored form is what is shown: round-trip through JSON, order kept
            facts = json.loads(json.dumps(dict(self.facts)))
        except (TypeError, ValueError) as exc:
            raise CacheError(f"InputDescription.facts must hold JSON values ({exc})") from exc
        object.__setattr__(self, "facts", facts)

    def to_doc(self) -> dict[str, Any]:
        """The stored form (facts as ``[label, value]`` pairs, so their order is kept)."""
        return {
            "title": self.title,
            "facts": [[k, v] for k, v in self.facts.items()],
            "covers": self.covers,
            "digest": self.digest,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> InputDescription:
        """Parse :meth:`to_doc`'s form (raises ``KeyError``/``TypeError``/``CacheError``)."""
        facts = doc.get("facts", [])
        pairs = facts.items() if isinstance(facts, Mapping) else facts
        return cls(
            doc["title"],
            {k: v for k, v in pairs},
            covers=doc.get("covers", ""),
            digest=doc.get("digest", ""),
        )

    def summary(self, *, extra: Mapping[str, Any] | None = None) -> str:
        """``title: label value, ... (fingerprint of covers: digest)`` in full (``info``)."""
        facts = {**(extra or {}), **self.facts}
        text = self.title
        if facts:
            text += ": " + ", ".join(f"{k} {_show(v)}" for k, v in facts.items())
        return text + _fingerprint_note(self.covers, self.digest)


def _fingerprint_note(covers: str, digests: str) -> str:
    """`` (fingerprint of COVERS: DIGESTS)``; the parts that are empty left out."""
    if covers:
        what = f"fingerprint of {covers}"
        return f" ({what}: {digests})" if digests else f" ({what})"
    return f" (fingerprint {digests})" if digests else ""


def _digests(old: str, new: str) -> str:
    """``OLD… -> NEW…`` (``?`` for an unknown side; empty when both are)."""
    if not old and not new:
        return ""
    return f"{_digest(old) if old else '?'} -> {_digest(new) if new else '?'}"


def _plain_digest(fingerprint: Any) -> str:
    return fingerprint if isinstance(fingerprint, str) else ""


def _input_change(
    role: str,
    old_fp: Any,
    new_fp: Any,
    old: InputDescription | None,
    new: InputDescription | None,
    *,
    old_extra: Mapping[str, Any] | None = None,
    new_extra: Mapping[str, Any] | None = None,
) -> str:
    """One line of a stale message: what changed in the recipe or the dataset."""
    if old is None and new is None:  # neither side described: the fingerprints
        return f"{role} fingerprint: {_describe(old_fp, new_fp)}"
    if old is not None and new is not None:
        head = f"{role} {old.title}"
        if new.title != old.title:
            head += f" -> {new.title}"
        old_facts = {**(old_extra or {}), **old.facts}
        new_facts = {**(new_extra or {}), **new.facts}
        changed = _pairs_changed(old_facts, new_facts)
        if changed:
            body = ": " + ", ".join(changed)
        else:
            shown = ", ".join(f"{k} {_short(v)}" for k, v in new_facts.items())
            body = f" ({shown})" if shown else ""
            body += ": changed only in what its fingerprint covers"
        covers = new.covers or old.covers
        old_digest = old.digest or _plain_digest(old_fp)
        new_digest = new.digest or _plain_digest(new_fp)
        return head + body + _fingerprint_note(covers, _digests(old_digest, new_digest))
    if new is not None:  # a cache written before descriptions were stored
        head = (
            f"{role} now {new.title} (the cache records no description of the {role} it was "
            "built for)"
        )
        new_digest = new.digest or _plain_digest(new_fp)
        if isinstance(old_fp, dict) and isinstance(new_fp, dict):
            now = f" (fingerprint now {_digest(new_digest)})" if new_digest else ""
            return f"{head}: {_describe(old_fp, new_fp)}{now}"
        what = f"its fingerprint of {new.covers}" if new.covers else "its fingerprint"
        if isinstance(old_fp, str) and isinstance(new_fp, str):
            return f"{head}: {what} changed, {_digest(old_fp)} -> {_digest(new_fp)}"
        return f"{head}: {what} changed, {_describe(old_fp, new_fp)}"
    assert old is not None
    return f"{role} {old.title} -> another one (not described): {_describe(old_fp, new_fp)}"


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
    recipe_description, dataset_description : InputDescription, optional
        The recipe and the dataset in words, stored beside their fingerprints so
        that messages name what changed in human terms. Not compared: two
        identities with equal fingerprints, shape and number of samples are equal.
    """

    recipe_fingerprint: Fingerprint
    dataset_fingerprint: Fingerprint
    sample_shape: tuple[int, ...]
    num_samples: int
    recipe_description: InputDescription | None = dataclasses.field(default=None, compare=False)
    dataset_description: InputDescription | None = dataclasses.field(default=None, compare=False)

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
        for name in ("recipe_description", "dataset_description"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, InputDescription):
                raise CacheError(
                    f"{name} must be a cache.InputDescription or None, not {type(value).__name__}"
                )

    def describe_recipe(self) -> str:
        """The recipe in words (``dataplane cache info``): its description, else its
        fingerprint."""
        if self.recipe_description is not None:
            return self.recipe_description.summary()
        return _fingerprint_text(self.recipe_fingerprint)

    def describe_dataset(self) -> str:
        """The dataset in words (``dataplane cache info``): its description with the
        number of samples, else its fingerprint."""
        if self.dataset_description is not None:
            return self.dataset_description.summary(extra={"samples": self.num_samples})
        return _fingerprint_text(self.dataset_fingerprint)


def _fingerprint_text(fingerprint: Any) -> str:
    if isinstance(fingerprint, dict):
        text = ", ".join(f"{k} {_show(v)}" for k, v in flat_mapping(fingerprint).items())
    else:
        text = str(fingerprint)
    return f"{text} (no description recorded; fingerprint only)"


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
    dtype: str = SAMPLE_DTYPE
    layout: str = SAMPLE_LAYOUT
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
        # Written only when known: a cache without them reads the same as before.
        if ident.recipe_description is not None:
            doc["recipe_description"] = ident.recipe_description.to_doc()
        if ident.dataset_description is not None:
            doc["dataset_description"] = ident.dataset_description.to_doc()
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
            recipe_doc = doc.get("recipe_description")
            dataset_doc = doc.get("dataset_description")
            identity = CacheIdentity(
                doc["recipe_fingerprint"],
                doc["dataset_fingerprint"],
                tuple(doc["sample_shape"]),
                int(doc["num_samples"]),
                recipe_description=(
                    InputDescription.from_doc(recipe_doc) if recipe_doc is not None else None
                ),
                dataset_description=(
                    InputDescription.from_doc(dataset_doc) if dataset_doc is not None else None
                ),
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

    def lacks_descriptions(self, expected: CacheIdentity) -> bool:
        """True when ``expected`` describes an input this metadata does not (a cache
        written without descriptions): a writer then stores them."""
        have = self.identity
        return (have.recipe_description is None and expected.recipe_description is not None) or (
            have.dataset_description is None and expected.dataset_description is not None
        )

    def changes(self, expected: CacheIdentity) -> tuple[str, ...]:
        """What differs between this cache and ``expected`` (empty when it is fresh).

        One line per input that changed, in words where the inputs are described
        (:class:`InputDescription`): the recipe's name and the parameters that
        differ, old and new; the dataset's kind and location and the facts that
        differ (the number of samples among them), with what its fingerprint
        covers. The fingerprints' hashes follow as a detail. Without descriptions
        the fingerprints themselves are compared. A schema version, sample dtype or
        layout other than this code's is a change too.
        """
        out = []
        if self.schema_version != SCHEMA_VERSION:
            out.append(
                f"schema version: the cache has {self.schema_version}, this code reads "
                f"{SCHEMA_VERSION}"
            )
        have = self.identity
        if have.recipe_fingerprint != expected.recipe_fingerprint:
            out.append(
                _input_change(
                    "recipe",
                    have.recipe_fingerprint,
                    expected.recipe_fingerprint,
                    have.recipe_description,
                    expected.recipe_description,
                )
            )
        samples_told = False
        if have.dataset_fingerprint != expected.dataset_fingerprint:
            both = have.dataset_description is not None and (
                expected.dataset_description is not None
            )
            # Described on both sides, the number of samples is one of the dataset's facts.
            samples_told = both
            out.append(
                _input_change(
                    "dataset",
                    have.dataset_fingerprint,
                    expected.dataset_fingerprint,
                    have.dataset_description,
                    expected.dataset_description,
                    old_extra={"samples": have.num_samples} if both else None,
                    new_extra={"samples": expected.num_samples} if both else None,
                )
            )
        if have.num_samples != expected.num_samples and not samples_told:
            out.append(f"number of samples: {have.num_samples} -> {expected.num_samples}")
        if have.sample_shape != expected.sample_shape:
            out.append(f"sample shape: {have.sample_shape} -> {expected.sample_shape}")
        if (self.dtype, self.layout) != (SAMPLE_DTYPE, SAMPLE_LAYOUT):
            # Its payloads would be read as uint8 CHW bytes they are not.
            out.append(
                f"sample dtype and layout: the cache has {self.dtype} {self.layout}, this "
                f"code serves {SAMPLE_DTYPE} {SAMPLE_LAYOUT}"
            )
        return tuple(out)

    def check(self, expected: CacheIdentity, *, where: str) -> None:
        """Raise :class:`StaleCacheError` when the cache does not match ``expected``."""
        changes = self.changes(expected)
        if changes:
            what = "; ".join(changes)
            raise StaleCacheError(
                f"cache {where} is stale, it was built for other inputs: {what}. Its samples "
                f"are not served. Rebuild it: CacheConfig({str(where)!r}, rebuild=True), or "
                f"`dataplane cache build --rebuild ...`, or `dataplane cache clear {where}`",
                changes=changes,
            )
