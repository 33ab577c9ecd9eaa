"""dataplane: a drop-in replacement for torch's DataLoader built on NVIDIA DALI.

``import dataplane`` works without a GPU; heavy imports (DALI, torch) happen
when a :class:`Loader` is built.
"""

from __future__ import annotations

from dataplane.errors import ConfigError, DataError, DataplaneError, DatasetError

__all__ = ["ConfigError", "DataError", "DataplaneError", "DatasetError"]
