"""How a tier is picked for a new temporary file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from placement.storage.errors import StorageConfigError
from placement.storage.request import FileKind, FileRequest
from placement.tier import Tier


@runtime_checkable
class TierChooser(Protocol):
    """Picks the tier of a new temporary file from its creation-time facts.

    Implementations must be fast (called on every file creation, possibly from the
    worker's event loop) and must not raise: a chooser that cannot decide returns its
    fallback tier. They must be picklable when handed to Dask workers.
    """

    def choose(self, request: FileRequest) -> Tier:
        """Return the tier the file described by ``request`` should be created on."""
        ...


class FixedTier:
    """Always the same tier: the local fallback (``FixedTier(Tier.HDD)``) and the all-HDD baseline.

    Parameters
    ----------
    tier : Tier
        The tier every file goes to.
    """

    def __init__(self, tier: Tier = Tier.HDD) -> None:
        try:
            self.tier = Tier(tier)
        except ValueError:
            raise StorageConfigError(
                f"tier={tier!r} is not one of {[t.value for t in Tier]}"
            ) from None

    def choose(self, request: FileRequest) -> Tier:
        return self.tier

    def __repr__(self) -> str:
        return f"FixedTier({self.tier.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FixedTier) and other.tier is self.tier

    def __hash__(self) -> int:
        return hash(("FixedTier", self.tier))


class ByKindTier:
    """A fixed tier per file kind (a rule, e.g. shuffle files on SSD, spill on HDD).

    Parameters
    ----------
    tiers : mapping of FileKind (or its value) to Tier
        Tier of each listed kind.
    default : Tier
        Tier of every other kind.
    """

    def __init__(
        self, tiers: Mapping[FileKind | str, Tier | str], *, default: Tier = Tier.HDD
    ) -> None:
        try:
            self.tiers = {FileKind(k): Tier(v) for k, v in tiers.items()}
            self.default = Tier(default)
        except ValueError as exc:
            raise StorageConfigError(
                f"ByKindTier needs FileKind -> Tier entries ({[k.value for k in FileKind]} -> "
                f"{[t.value for t in Tier]}): {exc}"
            ) from None

    def choose(self, request: FileRequest) -> Tier:
        return self.tiers.get(request.file_kind, self.default)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k.value}={v.value}" for k, v in self.tiers.items())
        return f"ByKindTier({inner}, default={self.default.value})"
