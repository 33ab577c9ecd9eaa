"""dataplane: a drop-in replacement for torch's DataLoader built on NVIDIA DALI.

``import dataplane`` works without a GPU and without importing DALI; DALI is
imported when a :class:`Loader` starts iterating.
"""

from __future__ import annotations

from dataplane import errors, sources
from dataplane.errors import ConfigError, DataError, DataplaneError, DatasetError
from dataplane.loader import Loader
from dataplane.plan import LastBatchPolicy
from dataplane.producer import OnCorrupt

__all__ = [
    "ConfigError",
    "DataError",
    "DataplaneError",
    "DatasetError",
    "LastBatchPolicy",
    "Loader",
    "OnCorrupt",
    "errors",
    "sources",
]
