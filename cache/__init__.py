"""LMDB store of fully augmented samples keyed by (sample, variant).

Imports nothing of the other project packages; the loader plugs it in.

* :class:`CacheConfig` - validated options (path, variants, max_bytes, ...).
* :class:`CacheIdentity` - what the samples are made from (fingerprints, shape).
* :class:`InputDescription` - the recipe or dataset in words, for messages.
* :class:`CacheStore` - the LMDB store: ``get_batch`` / ``put_batch``.
* :class:`CacheFiller` - writes fresh batches without pausing training.
* :func:`verify` - checksums and counts; drop corrupt records.
"""

from __future__ import annotations

from cache.config import CacheConfig, FillMode
from cache.errors import (
    CacheConfigError,
    CacheError,
    CorruptRecordError,
    DamagedCacheError,
    StaleCacheError,
    UnreadableMetaError,
)
from cache.fill import CacheFiller, FillStats
from cache.info import CacheInfo, StoreState, StoreStats, VariantsChange
from cache.meta import SCHEMA_VERSION, CacheIdentity, CacheMeta, InputDescription
from cache.store import CacheStore
from cache.verify import VerifyReport, verify

__all__ = [
    "SCHEMA_VERSION",
    "CacheConfig",
    "CacheConfigError",
    "CacheError",
    "CacheFiller",
    "CacheIdentity",
    "CacheInfo",
    "CacheMeta",
    "CacheStore",
    "CorruptRecordError",
    "DamagedCacheError",
    "FillMode",
    "FillStats",
    "InputDescription",
    "StaleCacheError",
    "StoreState",
    "StoreStats",
    "UnreadableMetaError",
    "VariantsChange",
    "VerifyReport",
    "verify",
]
