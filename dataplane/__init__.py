"""dataplane: a drop-in replacement for torch's DataLoader built on NVIDIA DALI.

``import dataplane`` works without a GPU and without importing DALI; DALI is
imported when a :class:`Loader` starts iterating. :class:`CacheConfig` (the
options of the augmented-sample cache, ``Loader(..., cache=...)``) is
:class:`cache.CacheConfig`.
"""

from __future__ import annotations

from cache import CacheConfig
from dataplane import errors, sources
from dataplane.errors import (
    CacheWarning,
    ConfigError,
    CorruptSampleWarning,
    DataError,
    DataplaneError,
    DatasetError,
    DatasetRootError,
    EmptyClassWarning,
    IngestConflictError,
    MixedImageSizeWarning,
    PipelineError,
    StaleCacheError,
)
from dataplane.loader import Loader
from dataplane.plan import LastBatchPolicy
from dataplane.producer import OnCorrupt

__all__ = [
    "CacheConfig",
    "CacheWarning",
    "ConfigError",
    "CorruptSampleWarning",
    "DataError",
    "DataplaneError",
    "DatasetError",
    "DatasetRootError",
    "EmptyClassWarning",
    "IngestConflictError",
    "LastBatchPolicy",
    "Loader",
    "MixedImageSizeWarning",
    "OnCorrupt",
    "PipelineError",
    "StaleCacheError",
    "errors",
    "sources",
]
