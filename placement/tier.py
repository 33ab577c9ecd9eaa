"""Storage tiers a temporary file can be placed on."""

from __future__ import annotations

import enum


class Tier(str, enum.Enum):
    """Where a temporary file lives.

    ``SSD`` is the fast, expensive-per-byte tier; ``HDD`` the slow, cheap one.
    The string values are what logs and JSON carry.
    """

    SSD = "ssd"
    HDD = "hdd"

    def __str__(self) -> str:
        return self.value
