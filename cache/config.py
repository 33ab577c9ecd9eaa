"""``CacheConfig``: the validated options of an augmented-sample cache."""

from __future__ import annotations

import dataclasses
import enum
import os
from pathlib import Path
from typing import Any

from cache.errors import CacheConfigError

#: Smallest accepted ``max_bytes`` (LMDB needs a few pages for its own trees).
MIN_MAX_BYTES = 1 << 20

#: Largest accepted ``max_readers`` (each slot costs 64 bytes of ``lock.mdb``).
MAX_READERS = 1 << 16


class FillMode(str, enum.Enum):
    """How samples produced on a cache miss are written to the cache.

    ``BACKGROUND``
        A writer thread takes batches from a bounded queue and writes them in
        batched transactions; when the queue is full the batch is dropped (not
        cached this time), training is never blocked.
    ``INLINE``
        The caller's thread writes each batch before returning (ahead-of-time
        builds: ``dataplane cache build``).
    ``OFF``
        Serve what is cached, never write.
    """

    BACKGROUND = "background"
    INLINE = "inline"
    OFF = "off"


def _positive_int(name: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CacheConfigError(f"{name} must be an int, not {type(value).__name__} ({value!r})")
    if value < minimum:
        raise CacheConfigError(f"{name} must be >= {minimum}, not {value}")
    return value


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    """Options of an augmented-sample cache (an LMDB directory).

    Parameters
    ----------
    path : str or os.PathLike
        Directory of the cache (created on first use; holds ``data.mdb`` and
        ``lock.mdb``).
    variants : int
        Augmented variants kept per sample; epoch ``e`` serves variant
        ``e % variants``. Default 4.
    max_bytes : int
        Size bound of the cache, in bytes: records, metadata and 16 pages of
        LMDB bookkeeping. When the next write would exceed it the cache stops
        admitting (state ``FULL``) and keeps serving; the loader produces the
        rest fresh. ``data.mdb`` may grow beyond it by at most the map's
        headroom (64 pages plus 1/512 of ``max_bytes``, see
        :func:`cache.env.map_headroom`), which lets a full cache be cleared,
        rebuilt or repaired and filled again. Default 8 GiB; at least 1 MiB.
    rebuild : bool
        Clear the cache when it is opened and fill it again. Use it after the
        recipe or dataset changed (a stale cache is otherwise refused). In a
        multi-process job (DDP ranks) pass it on one process only (rank 0), and
        let the others open the cache only after that process has opened it,
        behind a barrier (``torch.distributed.barrier()``): a rank that opens
        first still finds the old metadata and raises ``StaleCacheError``, and
        a store that was open before the rebuild stops using the cache (state
        ``STALE``). Neither :class:`dataplane.Loader` nor the trainers place
        that barrier.
    fill : FillMode or {"background", "inline", "off"}
        How misses are written (see :class:`FillMode`). Default background.
    fill_queue : int
        Batches waiting for the background writer before new ones are dropped.
        Default 4 (each held batch costs its uint8 size in memory).
    max_readers : int
        Size of LMDB's reader table: concurrent read transactions across all
        processes using the cache (only the first process to open it sets
        this). Default 1024; at most 65536.
    durable : bool
        Flush data to disk at every commit (``fsync``); a power loss may then
        lose at most the last transaction. ``False`` leaves flushing to the
        OS: a process crash still loses nothing committed, an OS crash may
        lose recent transactions. Default True.

    Raises
    ------
    CacheConfigError
        For an option of the wrong type or value.

    Examples
    --------
    >>> CacheConfig("cache/fmnist-train", variants=4, max_bytes=8 << 30)  # doctest: +ELLIPSIS
    CacheConfig(path=PosixPath('cache/fmnist-train'), variants=4, ...)
    """

    path: Path
    _: dataclasses.KW_ONLY
    variants: int = 4
    max_bytes: int = 8 << 30
    rebuild: bool = False
    fill: FillMode = FillMode.BACKGROUND
    fill_queue: int = 4
    max_readers: int = 1024
    durable: bool = True

    def __post_init__(self) -> None:
        path = self.path
        if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
            raise CacheConfigError(
                f"path must be a str or os.PathLike naming the cache directory, not "
                f"{type(path).__name__}"
            )
        if str(path) == "":
            raise CacheConfigError("path must name the cache directory, not ''")
        if "\0" in str(path):
            raise CacheConfigError(
                f"path {str(path)!r} contains a NUL byte; name the cache directory without it"
            )
        object.__setattr__(self, "path", Path(path))
        _positive_int("variants", self.variants)
        if self.variants > 0xFFFF:
            raise CacheConfigError(f"variants must be <= 65535, not {self.variants}")
        _positive_int("max_bytes", self.max_bytes, minimum=MIN_MAX_BYTES)
        _positive_int("fill_queue", self.fill_queue)
        _positive_int("max_readers", self.max_readers)
        if self.max_readers > MAX_READERS:
            raise CacheConfigError(
                f"max_readers must be <= {MAX_READERS} (concurrent read transactions of all "
                f"processes), not {self.max_readers}"
            )
        for name in ("rebuild", "durable"):
            if not isinstance(getattr(self, name), bool):
                raise CacheConfigError(f"{name} must be True or False, not {getattr(self, name)!r}")
        try:
            object.__setattr__(self, "fill", FillMode(self.fill))
        except ValueError:
            choices = ", ".join(repr(m.value) for m in FillMode)
            raise CacheConfigError(f"fill must be one of {choices}, not {self.fill!r}") from None
