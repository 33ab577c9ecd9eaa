"""Cache shards: record arrays a Dask pipeline writes once and reads back many times.

A cache of augmented samples or of computed features is split into shards, one per
input partition. Each shard is a temporary file of the worker that built it (a
:class:`~placement.storage.store.TieredFileStore` file of kind ``cache_shard``, placed
and logged like spill and shuffle files), read back in record ranges (mini-batches,
chunks) by later tasks pinned to that worker, and dropped when the cache is refreshed
or no longer needed. Each range read (:meth:`ShardCache.read`, a chunk or batch) and
each record read at random (:meth:`ShardCache.take`, a sample) is one read operation in
the log.

:class:`ShardCache` is the plain class; inside a task, :func:`worker_shards` gives the
running worker's cache (the worker needs
:class:`~placement.storage.PlacementWorkerPlugin`). A :class:`ShardRef` travels back to
the driver, which pins the readers to the shard's worker::

    ref = client.submit(put_shard, "cache-0", records, stage="features").result()
    client.submit(read_chunks, ref, workers=[ref.worker], allow_other_workers=False)

Shards live on one worker: if it dies they are gone, and a read raises
:class:`~placement.storage.errors.ShardError` saying to rebuild the cache.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement.storage.context import RequestBuilder
from placement.storage.errors import ShardError, StorageConfigError, TierIOError
from placement.storage.store import TempFile, TieredFileStore

#: Folder of the store's directory that holds cache shards.
SHARD_DIR = "shards"


@dataclass(frozen=True)
class ShardRef:
    """Where a cache shard lives and how its records are laid out.

    Parameters
    ----------
    name : str
        Shard name, unique among the live shards of its worker.
    worker : str or None
        Address of the worker holding the shard (``None`` outside a Dask worker).
    dtype : numpy.dtype
        Dtype of the records (structured dtypes allowed).
    record_shape : tuple of int
        Shape of one record (``()`` for scalars).
    n_records : int
        Records in the shard.
    nbytes : int
        Size of the shard file, in bytes.
    """

    name: str
    worker: str | None
    dtype: np.dtype
    record_shape: tuple[int, ...]
    n_records: int
    nbytes: int

    @property
    def record_nbytes(self) -> int:
        """Bytes of one record."""
        return int(self.dtype.itemsize * int(np.prod(self.record_shape, dtype=np.int64)))


class ShardCache:
    """The cache shards of one store (see the module docstring).

    Parameters
    ----------
    store : TieredFileStore
        Store the shard files go to.
    builder : RequestBuilder
        Builds each shard's creation-time facts.
    worker : str, optional
        Address written into each :class:`ShardRef`.
    """

    def __init__(
        self, store: TieredFileStore, builder: RequestBuilder, *, worker: str | None = None
    ) -> None:
        self.store = store
        self.builder = builder
        self.worker = worker

    def put(
        self,
        name: str,
        records: np.ndarray,
        *,
        stage: str,
        n_shards: int | None = None,
        key: Any = None,
    ) -> ShardRef:
        """Write ``records`` (first axis: records) as shard ``name``; one write operation.

        Parameters
        ----------
        name : str
            Shard name (a safe relative name, unique among live shards).
        records : numpy.ndarray
            At least one dimension; written C-contiguous.
        stage : str
            Stage of the cache (the log's ``stage``: shards of one cache share it).
        n_shards : int, optional
            Shards the cache holds (the log's ``n_partitions_out``).
        key : Dask key, optional
            Task writing the shard (its graph position becomes the ``priority`` fact).
        """
        array = np.asarray(records)
        if array.ndim < 1 or array.dtype.hasobject:
            raise StorageConfigError(
                f"shard {name!r}: records must be an array of at least one dimension without "
                f"Python objects, got shape {array.shape} and dtype {array.dtype}"
            )
        array = np.ascontiguousarray(array)
        request = self.builder.shard(stage, int(array.nbytes), n_shards=n_shards, key=key)
        handle = self.store.create(f"{SHARD_DIR}/{name}", request)
        try:
            # bytes through a uint8 view: memoryview.cast refuses empty multi-dimensional
            # arrays, and the buffer protocol refuses datetime64 / timedelta64
            self.store.write(handle, array.reshape(-1).view(np.uint8).data)
        except BaseException:
            self.store.delete(handle, log=False)
            raise
        return ShardRef(
            name=name,
            worker=self.worker,
            dtype=array.dtype,
            record_shape=tuple(int(s) for s in array.shape[1:]),
            n_records=int(array.shape[0]),
            nbytes=int(array.nbytes),
        )

    def _handle(self, ref: ShardRef) -> TempFile:
        handle = self.store.get(f"{SHARD_DIR}/{ref.name}")
        if handle is None:
            where = f"worker {self.worker}" if self.worker else "this store"
            raise ShardError(
                f"cache shard {ref.name!r} is not on {where} (it lives on {ref.worker}); it "
                "was dropped or its worker died: rebuild the cache, and submit its readers "
                "with workers=[ref.worker], allow_other_workers=False"
            )
        return handle

    def read(self, ref: ShardRef, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Records ``start:stop`` of the shard (a new array); one read operation."""
        stop = ref.n_records if stop is None else stop
        if not 0 <= start <= stop <= ref.n_records:
            raise ShardError(
                f"records [{start}, {stop}) are outside shard {ref.name!r} "
                f"({ref.n_records} records)"
            )
        size = ref.record_nbytes
        data = self.store.read_range(self._handle(ref), start * size, (stop - start) * size)
        out = np.frombuffer(data, dtype=ref.dtype)  # a bytearray: the array is writable
        return out.reshape((stop - start, *ref.record_shape))

    def take(self, ref: ShardRef, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Records at ``indices``, read one by one: one read operation per record, as a
        map-style dataset (``__getitem__`` per sample) reads a shuffled epoch.

        The shard's file is opened once per call; each record is one ``pread``.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= ref.n_records):
            raise ShardError(
                f"record indices {idx.min()}..{idx.max()} are outside shard {ref.name!r} "
                f"({ref.n_records} records)"
            )
        handle = self._handle(ref)
        path = self.store.read_path(handle)
        size = ref.record_nbytes
        out = bytearray(size * idx.size)
        view = memoryview(out)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                for j, i in enumerate(idx.tolist()):
                    got = os.preadv(fd, [view[j * size : (j + 1) * size]], i * size)
                    if got != size:
                        raise TierIOError(
                            errno.EIO, f"short read of record {i} of {path}: {got} of {size} bytes"
                        )
            finally:
                os.close(fd)
        except TierIOError:
            raise
        except OSError as exc:
            raise TierIOError(exc.errno, f"reading {path} failed: {exc.strerror}") from exc
        self.store.record_read(handle, len(out), ops=int(idx.size))
        return np.frombuffer(out, dtype=ref.dtype).reshape((idx.size, *ref.record_shape))

    def batches(
        self, ref: ShardRef, batch_size: int, *, rng: np.random.Generator | None = None
    ) -> Iterator[np.ndarray]:
        """The shard in batches of ``batch_size`` records (shuffled batch order with
        ``rng``), one read operation each, as a training epoch reads it."""
        if batch_size < 1:
            raise StorageConfigError(f"batch_size={batch_size} must be >= 1")
        starts = np.arange(0, ref.n_records, batch_size)
        if rng is not None:
            starts = rng.permutation(starts)
        for start in starts.tolist():
            yield self.read(ref, start, min(ref.n_records, start + batch_size))

    def drop(self, ref: ShardRef) -> bool:
        """Delete the shard and log its row; ``False`` if it was already gone."""
        handle = self.store.get(f"{SHARD_DIR}/{ref.name}")
        if handle is None:
            return False
        return self.store.delete(handle) is not None


def worker_shards() -> ShardCache:
    """The cache shards of the worker running the current task.

    Raises
    ------
    StorageError
        If the worker has no placement storage plugin.
    """
    from distributed import get_worker

    from placement.storage.worker import worker_storage

    worker = get_worker()
    storage = worker_storage(worker)
    return ShardCache(storage.store, storage.builder, worker=str(worker.address))


def put_shard(
    name: str, records: np.ndarray, *, stage: str, n_shards: int | None = None
) -> ShardRef:
    """Task helper: write ``records`` as a shard of the running worker (see
    :meth:`ShardCache.put`)."""
    from distributed.worker import thread_state

    key = getattr(thread_state, "key", None)
    return worker_shards().put(name, records, stage=stage, n_shards=n_shards, key=key)


def drop_shard(ref: ShardRef) -> bool:
    """Task helper: drop ``ref`` from the running worker (see :meth:`ShardCache.drop`)."""
    return worker_shards().drop(ref)


__all__ = ["SHARD_DIR", "ShardCache", "ShardRef", "drop_shard", "put_shard", "worker_shards"]
