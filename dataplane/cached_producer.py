"""Serving augmented samples from the cache: :class:`CachedBatchProducer`.

``Loader(..., cache=CacheConfig(path, variants=K))`` plugs this producer into
the loader's producer seam (:mod:`dataplane.producer`). Epoch ``e`` serves
variant ``v = e % K`` of every sample, in the epoch's planned order.

One pass
--------
1. At the start of the pass the cache's completed records of ``v`` are listed
   (a key-only range scan, :meth:`cache.CacheStore.completed`). The samples
   missing from it are the *planned misses*; if there are any, one fresh
   producer (DALI, :class:`~dataplane.dali_producer.DaliBatchProducer`, or the
   loader's ``producer=``) is started over the requests restricted to them, so
   fresh production runs ahead concurrently with serving. A pass over a fully
   cached variant starts no fresh producer at all: nothing is read from the
   source and DALI is neither imported nor run.
2. For each request, in order, a worker thread (``dataplane-cache``) takes a
   free buffer of the loader's ring (``prefetch + 1`` preallocated uint8 arrays
   of ``(batch_size, C, H, W)``), reads the batch with
   :meth:`cache.CacheStore.get_batch` (one read transaction, each record
   checksummed and copied once, straight into the buffer), and fills the rows
   that missed from the fresh producer's output (with numpy on the host for a
   CPU loader, with torch on the GPU for a CUDA one). A batch none of whose
   samples was cached skips the lookup and is the fresh batch itself (no
   copy). A sample that was expected in the cache but is not served (its
   record failed its checksum, or another process dropped it) is produced on
   the spot by a one-batch fresh producer.
3. Fresh samples that missed are handed to the loader's
   :class:`cache.CacheFiller` (background writer by default: training never
   waits for the disk; a full queue drops the batch, offered again next time).
4. The batch is wrapped with ``torch.from_numpy`` (no copy) on the CPU, or
   copied once from pinned memory to the GPU; the loader's iterator normalizes
   it on the target device. With ``normalize=False`` on the CPU, each batch is
   read into a new array instead of a ring buffer and handed on as it is.
5. At the end of a complete pass the worker waits for the filler to commit what
   the pass queued, so the pass's counts (:class:`~dataplane.stats.CacheStats`)
   are final.

Buffers: on the CPU the tensor handed to the consumer is a view of a ring
buffer, valid until the consumer asks for the next batch (the loader's
iterator normalizes it into a new tensor before that; such batches are marked
``ProducedBatch.shared``). At most ``prefetch`` batches are prepared ahead;
serving allocates no batch-sized memory beyond the ring (merging fresh rows and
leaving out skipped samples aside), except with ``normalize=False``, where each
batch is the consumer's own array.

On failure
----------
* Stale cache (recipe, dataset, sample shape or schema changed): the loader
  raises :class:`~dataplane.errors.StaleCacheError` at construction, naming
  what changed in words (the recipe's name and the parameters that differ, old
  and new; the dataset's kind, location and what changed in it, with what its
  fingerprint covers; the hashes as a detail, see :func:`cache_identity`) and
  how to rebuild (``rebuild=True`` / ``--rebuild``). Nothing stored is touched.
* The cache cannot be opened or created (unwritable path, not a directory):
  a :class:`~dataplane.errors.CacheWarning`, and the loader serves fresh.
* Fewer ``variants`` than the cache was built with: the records of the other
  variants are kept, unused (a :class:`~dataplane.errors.CacheWarning` at
  construction says how many, and that ``dataplane cache verify --repair``
  deletes them); ``dataplane cache info`` counts them apart. A loader whose cache
  another loader (or process) opened since with fewer variants goes on serving and
  filling its own; the first pass that fills a variant outside the cache's metadata
  warns once, naming both counts.
* ``max_bytes`` reached: the cache stops admitting (``lmdb.MapFullError`` never
  escapes the store), serves what it holds; the rest is produced fresh every
  epoch. One ``CacheWarning`` per loader, naming the bound in force: with two
  loaders of one cache in a process, the ``max_bytes`` of the first to open it
  when it is the smaller (the process maps the cache once; see
  :attr:`cache.CacheStore.max_bytes`).
* Disk full or I/O error while filling: filling stops (the filler logs it),
  serving goes on, one ``CacheWarning`` per loader.
* A read of the cache fails, or another process rebuilds or clears the cache
  during the pass (the store turns :attr:`cache.StoreState.STALE`): the rest
  of the pass is produced fresh by one producer, a ``CacheWarning`` is issued and
  the loader stops using the cache.
* A damaged cache (:class:`cache.DamagedCacheError`: ``data.mdb`` truncated, empty
  or not a valid LMDB file, or a page LMDB finds damaged): found when the cache is
  opened (checked before any page is read) or read, it is a ``CacheWarning`` naming
  the fix (``rebuild=True`` starts the cache anew), and the loader serves fresh
  samples, as above. A ``data.mdb`` cut short by another process while this one
  has it open is not detected: LMDB maps the file, and this process dies of
  ``SIGBUS`` at its next read beyond the new end (see :mod:`cache.env`).
* A corrupt record is never served: it counts as a miss, is produced fresh and
  refilled (the store drops the bad record in its next write).
* A batch all of whose samples are skipped (corrupt sources, ``on_corrupt="skip"``)
  is made of the next samples of the pass instead, produced fresh, as without a
  cache (:mod:`dataplane.dali_producer`), but not repeated up to the batch size when
  fewer are found; it is yielded empty only if none can be produced.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import queue
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cache import (
    CacheConfig,
    CacheError,
    CacheFiller,
    CacheIdentity,
    CacheStore,
    DamagedCacheError,
    InputDescription,
    StoreState,
)
from cache import StaleCacheError as _CacheStaleError
from cache.meta import flat_mapping
from dataplane.background import BackgroundProducer
from dataplane.errors import CacheWarning, StaleCacheError, warn_user
from dataplane.fingerprint import DatasetSummary, fingerprint_and_summary
from dataplane.producer import (
    BatchProducer,
    BatchRequest,
    ProducedBatch,
    ProducerContext,
    ProducerFactory,
    SkippedSample,
    following_indices,
)
from dataplane.stats import CacheStats

if TYPE_CHECKING:
    import torch

    from dataplane.sources import Source
    from preprocessing import Recipe

logger = logging.getLogger(__name__)

#: Seconds the end of a pass waits for the filler to commit the pass's batches.
FLUSH_TIMEOUT_S = 120.0


def cache_identity(source: Source, recipe: Recipe) -> CacheIdentity:
    """What a cache of ``source`` augmented by ``recipe`` is made from.

    The one definition shared by the loader and ``dataplane cache build``, so a
    cache built ahead of time is served by a loader with the same dataset and
    recipe.

    Parameters
    ----------
    source : Source
        The dataset; its :meth:`~dataplane.sources.Source.fingerprint` (paths,
        sizes, mtimes, labels) and length are recorded, with a description: its
        kind and location, classes, and for the built-in sources the total size
        and newest modification time of its files (taken in the same pass).
    recipe : Recipe
        The augmentation; its full description (what
        :meth:`~preprocessing.Recipe.fingerprint` hashes) is recorded, so a
        stale cache's message names the entries that changed, with a
        description: its name, size, channels, statistics and options.

    Returns
    -------
    CacheIdentity
        Samples are uint8 ``(recipe.channels, recipe.size, recipe.size)``.
    """
    fingerprint, summary = fingerprint_and_summary(source)
    return CacheIdentity(
        recipe_fingerprint=recipe.describe(),
        dataset_fingerprint=fingerprint,
        sample_shape=(recipe.channels, recipe.size, recipe.size),
        num_samples=len(source),
        recipe_description=recipe_description(recipe),
        dataset_description=dataset_description(fingerprint, summary),
    )


#: Labels of :meth:`~preprocessing.Recipe.describe`'s other entries in a recipe's description.
_RECIPE_LABELS = {
    "definition.version": "definition version",
    "definition.source_hash": "definition code",
    "recipe_code_version": "recipe code version",
}


def recipe_description(recipe: Recipe) -> InputDescription:
    """``recipe`` in words, as its fingerprint covers it.

    Returns
    -------
    cache.InputDescription
        Title ``'train'`` (the recipe's name); facts ``size``, ``channels``,
        ``mean``, ``std``, one ``option NAME`` per option, then the definition's
        version (and code hash, for a custom definition) and the recipe machinery's
        version; digest ``recipe.fingerprint()``.
    """
    described = flat_mapping(recipe.describe())
    facts: dict[str, Any] = {}
    for key in ("size", "channels", "mean", "std"):
        facts[key] = described.pop(key, None)
    for key in [k for k in described if k.startswith("options.")]:
        facts[f"option {key.removeprefix('options.')}"] = described.pop(key)
    described.pop("definition.name", None)  # the title
    if not described.get("definition.source_hash"):  # built-in definitions have none
        described.pop("definition.source_hash", None)
    for key in sorted(described, key=lambda k: (not k.startswith("definition."), k)):
        facts[_RECIPE_LABELS.get(key, key)] = described[key]
    return InputDescription(repr(recipe.name), facts, digest=recipe.fingerprint())


def dataset_description(fingerprint: str, summary: DatasetSummary) -> InputDescription:
    """A dataset in words: its kind and location, classes and file totals.

    The number of samples is not among the facts: the cache's metadata holds it
    and shows it with them.

    Parameters
    ----------
    fingerprint : str
        The dataset's fingerprint (its digest).
    summary : DatasetSummary
        From :func:`~dataplane.fingerprint.fingerprint_and_summary`.

    Returns
    -------
    cache.InputDescription
        Title ``image folder data/fmnist/train``; facts ``classes``, ``files``
        (Parquet), ``total bytes`` and ``newest file modified`` (UTC).
    """
    title = f"{summary.kind} {summary.location}" if summary.location else summary.kind
    facts: dict[str, Any] = {"classes": summary.num_classes}
    files = summary.files
    if files is not None:
        if summary.kind == "Parquet":  # one file per sample otherwise: the samples say it
            facts["files"] = files.count
        facts["total bytes"] = files.total_bytes
        if files.count:
            seconds, ns = divmod(files.newest_mtime_ns, 10**9)
            newest = _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).replace(
                microsecond=ns // 1000
            )
            facts["newest file modified"] = newest.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    return InputDescription(title, facts, covers=summary.covers, digest=fingerprint)


class LoaderCache:
    """The cache side of one loader: store, filler, batch buffers and warnings.

    Parameters
    ----------
    config : CacheConfig
        Where and how.
    identity : CacheIdentity
        From :func:`cache_identity`.
    labels : numpy.ndarray
        Label of every source index (int64), stored with each record.
    batch_size : int
        Largest batch, in samples (the ring buffers' first dimension).
    prefetch : int
        Batches prepared ahead; the ring has ``prefetch + 1`` buffers.
    pinned : bool
        Allocate the ring in page-locked memory (CUDA loaders).
    own_batches : bool
        CPU loaders that hand uint8 batches on (``normalize=False``): read each
        batch into a new array the consumer keeps, instead of into a ring buffer
        the consumer would have to copy (one copy per sample instead of two).

    Raises
    ------
    StaleCacheError
        The cache was built for other inputs (message: what changed, how to
        rebuild).

    Notes
    -----
    Any other failure to open the cache is a :class:`CacheWarning`; the loader
    then serves fresh samples (:attr:`enabled` is False).
    """

    def __init__(
        self,
        config: CacheConfig,
        identity: CacheIdentity,
        *,
        labels: np.ndarray,
        batch_size: int,
        prefetch: int,
        pinned: bool = False,
        own_batches: bool = False,
    ) -> None:
        self.config = config
        self.identity = identity
        self.labels = labels
        self.batch_size = batch_size
        self.prefetch = prefetch
        self.pinned = pinned
        self.own_batches = own_batches
        self.store: CacheStore | None = None
        self._filler: CacheFiller | None = None
        self._ring: list[np.ndarray] | None = None
        self._ring_owners: list[Any] = []
        self._warned: set[str] = set()
        self._pending: list[str] = []
        #: Why the cache is not used (None while it is).
        self.disabled: str | None = None
        try:
            self.store = CacheStore(config, identity)
        except _CacheStaleError as exc:
            raise StaleCacheError(str(exc), changes=exc.changes) from exc
        except CacheError as exc:
            self.disable(f"the cache is not used: {exc}")
            self.issue_warnings()
            return
        change = self.store.variants_change
        if change is not None and change.unused:
            # In the user's thread, from Loader(...), pointing at that call; the store
            # logged it at INFO.
            warn_user(change.message, CacheWarning)

    # -- state -------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """True while passes are served through the cache."""
        return self.store is not None and self.disabled is None

    @property
    def variants(self) -> int:
        """Variants per sample; epoch ``e`` serves ``e % variants``."""
        return self.config.variants

    @property
    def filler(self) -> CacheFiller:
        """The filler (created again after :meth:`close`)."""
        assert self.store is not None
        if self._filler is None:
            self._filler = CacheFiller(self.store)
        return self._filler

    def ring(self) -> list[np.ndarray]:
        """The ``prefetch + 1`` preallocated uint8 batch buffers (allocated once)."""
        if self._ring is None:
            shape = (self.batch_size, *self.identity.sample_shape)
            if self.pinned:
                import torch

                tensors = [
                    torch.empty(shape, dtype=torch.uint8).pin_memory()
                    for _ in range(self.prefetch + 1)
                ]
                self._ring_owners = tensors
                self._ring = [t.numpy() for t in tensors]
            else:
                self._ring = [np.empty(shape, dtype=np.uint8) for _ in range(self.prefetch + 1)]
        return self._ring

    def disable(self, reason: str) -> None:
        """Stop using the cache (warned once); the loader goes on with fresh samples."""
        if self.disabled is None:
            self.disabled = reason
            self.warn("disabled", reason)

    def warn(self, key: str, message: str) -> None:
        """Issue ``message`` as a :class:`CacheWarning` from the consumer's thread
        (:meth:`issue_warnings`), once per loader and ``key``; logged now at DEBUG only
        (a WARNING record would be printed a second time where logging is not set up)."""
        if key in self._warned:
            return
        self._warned.add(key)
        logger.debug("%s", message)
        self._pending.append(message)

    def issue_warnings(self) -> None:
        """``warnings.warn`` what :meth:`warn` collected (call from the user's thread),
        pointing at the user's line (the ``for`` loop, the ``Loader(...)`` call)."""
        pending, self._pending = self._pending, []
        for message in pending:
            warn_user(message, CacheWarning)

    def end_pass(self, stats: CacheStats) -> None:
        """Warn (once each) about a cache that stopped admitting or serving during the pass."""
        store = self.store
        if store is None:
            self.issue_warnings()
            return
        if self._filler is not None and self._filler.error is not None:
            self.warn(
                "fill-failed",
                f"filling the cache at {store.path} stopped: {self._filler.error}; samples not "
                "cached are produced fresh",
            )
        if store.state.value == "full":
            self.warn("full", self._full_message(store, stats))
        if store.state is StoreState.STALE:  # found by a write, where no read met it
            self.disable(
                f"the cache at {store.path} was rebuilt or cleared by another process; the "
                "loader goes on with fresh samples"
            )
        if stats.filled and "variants-outside" not in self._warned:
            try:
                stored = store.stored_variants()
            except CacheError:  # an unreadable cache is warned about where it is read
                stored = self.variants
            if stats.variant >= stored:
                self.warn("variants-outside", self._outside_message(store, stats, stored))
        self.issue_warnings()

    def _outside_message(self, store: CacheStore, stats: CacheStats, stored: int) -> str:
        """This loader fills variants beyond those the cache's metadata keeps (``stored``,
        set since by another loader or process with fewer variants)."""
        mine = self.variants
        span = f"variant {stored}" if stored == mine - 1 else f"variants {stored}..{mine - 1}"
        return (
            f"the cache at {store.path} keeps variants={stored} since another loader (or "
            f"process) opened it with variants={stored}, and this loader has variants={mine}: "
            f"the records it fills for {span} ({stats.filled} of variant {stats.variant} this "
            f"pass) are outside the cache's metadata. This loader serves them, but a loader "
            f"with variants={stored} never does, `dataplane cache info` counts them unused and "
            f"`dataplane cache verify --repair {store.path}` deletes them. Give every Loader of "
            f"this cache the same variants (variants={mine} keeps them in use)"
        )

    def _full_message(self, store: CacheStore, stats: CacheStats) -> str:
        """Why the cache stopped admitting: the bound in force, and how to raise it."""
        bound = store.max_bytes
        head = (
            f"the cache at {store.path} reached max_bytes={bound} bytes and stops admitting; "
            f"it serves the samples it holds and the rest are produced fresh every epoch "
            f"(this pass: {stats.hits} hits, {stats.misses} misses). "
        )
        if bound >= self.config.max_bytes:
            return head + "Raise max_bytes to cache every variant (the records it holds are kept)"
        return head + (
            f"That bound is not this loader's max_bytes={self.config.max_bytes}: in this "
            f"process another loader (or cache store) opened the cache first, with "
            f"max_bytes={bound}, and a process maps a cache once, at the size its first "
            "opener asked for, until all its users have closed it. Give every Loader of this "
            "cache the same max_bytes, or close the others (Loader.close()) before building "
            "this one (the records it holds are kept)"
        )

    def producer_factory(self, fresh: ProducerFactory, stats: CacheStats) -> ProducerFactory:
        """A factory of cache-backed producers for one pass, counting into ``stats``."""

        def factory(context: ProducerContext, requests: Sequence[BatchRequest]) -> BatchProducer:
            return CachedBatchProducer(context, requests, cache=self, fresh=fresh, stats=stats)

        return factory

    def close(self) -> None:
        """Write what is queued, stop the filler's thread and release the store
        (idempotent; the next pass opens them again)."""
        filler, self._filler = self._filler, None
        if filler is not None:
            filler.close()
        if self.store is not None:
            self.store.close()


class CachedBatchProducer(BackgroundProducer):
    """Serves one pass from the cache, fresh samples on misses (see module docs).

    Parameters
    ----------
    context : ProducerContext
        The pass (epoch gives the variant; prefetch bounds the work ahead).
    requests : sequence of BatchRequest
        The batches, in order.
    cache : LoaderCache
        The loader's store, filler and ring buffers.
    fresh : ProducerFactory
        Produces samples the cache does not hold (DALI by default).
    stats : CacheStats
        Counts of this pass (updated while serving).
    """

    def __init__(
        self,
        context: ProducerContext,
        requests: Sequence[BatchRequest],
        *,
        cache: LoaderCache,
        fresh: ProducerFactory,
        stats: CacheStats,
    ) -> None:
        self._ctx = context
        self._requests = list(requests)
        self._cache = cache
        self._fresh_factory = fresh
        self.stats = stats
        self._variant = context.epoch % cache.variants
        self._ring = cache.ring()
        self._free: queue.Queue[int] = queue.Queue()
        for slot in range(len(self._ring)):
            self._free.put(slot)
        super().__init__(prefetch=context.prefetch, thread_name="dataplane-cache")
        self._fresh: BatchProducer | None = None
        self._fresh_iter: Iterator[ProducedBatch] | None = None
        self._written_before = 0
        if context.device_id is not None:
            import torch

            self._device: torch.device | None = torch.device("cuda", context.device_id)
        else:
            self._device = None
        # A new array per batch (see LoaderCache.own_batches); the ring then only paces.
        self._own_batches = cache.own_batches and self._device is None

    # -- the worker (see dataplane.background) --------------------------------------
    def _deliver(self, item: tuple[ProducedBatch, int | None]) -> ProducedBatch:
        return item[0]

    def _release(self, item: tuple[ProducedBatch, int | None]) -> None:
        # The consumer asked for the next batch: it is done with this buffer.
        if item[1] is not None:
            self._free.put(item[1])

    def _run(self) -> bool:
        finished = self._serve()
        if finished:
            self._finish_pass()
        return finished

    def _cleanup(self) -> None:
        self._close_fresh()

    def _take_slot(self) -> int | None:
        """A free ring buffer; None if asked to stop meanwhile."""
        while not self.stopping:
            try:
                return self._free.get(timeout=0.05)
            except queue.Empty:
                continue
        return None

    def _close_fresh(self) -> None:
        """Close the fresh producer from the worker thread (the one iterating it)."""
        it, self._fresh_iter = self._fresh_iter, None
        producer, self._fresh = self._fresh, None
        if it is not None:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        if producer is not None:
            producer.close()

    def _start_fresh(self, requests: list[BatchRequest]) -> None:
        self._close_fresh()
        if requests:
            self._fresh = self._fresh_factory(self._ctx, requests)
            self._fresh_iter = iter(self._fresh)

    def _next_fresh(self, position: int) -> ProducedBatch:
        assert self._fresh_iter is not None
        produced = next(self._fresh_iter)
        if produced.position != position:  # pragma: no cover - a broken producer
            raise RuntimeError(
                f"the fresh producer yielded batch {produced.position} where {position} was due"
            )
        return produced

    def _serve(self) -> bool:
        """Serve every request (worker thread); False if stopped early."""
        cache = self._cache
        store = cache.store
        assert store is not None
        try:
            done = store.completed(self._variant)
        except CacheError as exc:
            return self._serve_fresh(0, _read_failure(store, exc))
        self._written_before = cache.filler.stats.written
        planned: dict[int, np.ndarray] = {}  # request number -> rows planned as misses
        fresh_requests = []
        for k, request in enumerate(self._requests):
            rows = np.flatnonzero(~done[request.indices])
            if rows.size:
                planned[k] = rows
                fresh_requests.append(BatchRequest(request.position, request.indices[rows]))
        self._start_fresh(fresh_requests)
        for k, request in enumerate(self._requests):
            if self.stopping:
                return False
            slot = self._take_slot()
            if slot is None:
                return False
            buffer = self._ring[slot]
            if self._own_batches:
                buffer = np.empty_like(buffer)
            idx = request.indices
            corrupt_before = store.stats.corrupt
            if k in planned and planned[k].size == idx.size:
                found = np.zeros(idx.size, dtype=bool)  # none was cached: no lookup
            else:
                try:
                    found = store.get_batch(idx, self._variant, buffer)
                except CacheError as exc:
                    self._free.put(slot)
                    return self._serve_fresh(k, _read_failure(store, exc))
                if store.state is StoreState.STALE:  # every sample reported missing
                    self._free.put(slot)
                    return self._serve_fresh(
                        k, f"the cache at {store.path} was rebuilt or cleared by another process"
                    )
            self.stats.corrupt += store.stats.corrupt - corrupt_before
            fresh = self._next_fresh(request.position) if k in planned else None
            batch, held = self._assemble(request, buffer, found, planned.get(k), fresh)
            if batch.indices.size == 0 and batch.skipped:
                batch, held = self._replace_empty(k, batch), False
            held = held and not self._own_batches
            if held:
                batch = dataclasses.replace(batch, shared=True)
            else:  # the batch does not view the buffer (fresh, or copied to the GPU)
                self._free.put(slot)
            if not self._put((batch, slot if held else None)):
                return False
        return True

    def _serve_fresh(self, start: int, reason: str) -> bool:
        """The cache became unreadable: produce requests ``start..`` fresh, stop using it."""
        self._cache.disable(f"{reason}; the loader goes on with fresh samples")
        self._start_fresh(self._requests[start:])
        for request in self._requests[start:]:
            if self.stopping:
                return False
            produced = self._next_fresh(request.position)
            self.stats.misses += int(request.indices.size)
            self.stats.fresh += int(produced.indices.size)
            if not self._put((produced, None)):
                return False
        return True

    def _wrap(self, host: np.ndarray) -> tuple[torch.Tensor, bool]:
        """``host`` rows as a tensor on the target device, and whether it views ``host``."""
        import torch

        images = torch.from_numpy(host)  # no copy
        if self._device is None:
            return images, True
        return images.to(self._device), False  # from pinned memory; complete on return

    def _assemble(
        self,
        request: BatchRequest,
        buffer: np.ndarray,
        found: np.ndarray,
        planned_rows: np.ndarray | None,
        fresh: ProducedBatch | None,
    ) -> tuple[ProducedBatch, bool]:
        """The batch of ``request`` (cached rows, fresh rows merged in), and whether it
        views ``buffer`` (which then stays taken until the consumer moves on).

        Rows are merged on the host with numpy for a CPU loader (torch's CPU kernels
        would start an OpenMP team competing with the loader's threads), on the GPU
        with torch for a CUDA loader.
        """
        idx = request.indices
        n = int(idx.size)
        hits = int(found.sum())
        self.stats.hits += hits
        self.stats.misses += n - hits
        if hits == n:
            images, held = self._wrap(buffer[:n])
            return ProducedBatch(request.position, images, idx), held
        if (
            hits == 0
            and fresh is not None
            and fresh.indices.size == n
            and np.array_equal(fresh.indices, idx)
        ):  # nothing cached: the fresh batch is the batch (no copy)
            self.stats.fresh += n
            self._submit(idx, fresh.images, None)
            return ProducedBatch(request.position, fresh.images, idx, fresh.skipped), False
        keep = np.ones(n, dtype=bool)
        skipped: list[SkippedSample] = []
        parts: list[tuple[np.ndarray, torch.Tensor, np.ndarray]] = []  # (rows, images, src)
        covered = found.copy()
        if fresh is not None and planned_rows is not None:
            skipped.extend(fresh.skipped)
            self.stats.fresh += int(fresh.indices.size)
            rows, src = _match(idx, planned_rows, fresh.indices)
            absent = np.setdiff1d(planned_rows, rows, assume_unique=True)
            take = ~found[rows]
            parts.append((rows[take], fresh.images, src[take]))
            covered[rows] = True
            # Planned rows absent from the fresh output were skipped (corrupt sources).
            keep[absent[~found[absent]]] = False
            covered[absent] = True
        unplanned = np.flatnonzero(~covered)
        if unplanned.size:  # expected in the cache but not served (corrupt, dropped)
            extra = self._produce_now(BatchRequest(request.position, idx[unplanned]))
            skipped.extend(extra.skipped)
            self.stats.fresh += int(extra.indices.size)
            rows, src = _match(idx, unplanned, extra.indices)
            parts.append((rows, extra.images, src))
            keep[np.setdiff1d(unplanned, rows, assume_unique=True)] = False
        parts = [part for part in parts if part[0].size]
        if self._device is None:
            host = buffer[:n]
            for rows, source, src in parts:
                host[rows] = source.numpy()[src]
                self._submit(idx[rows], source, src)
            if not keep.all():
                host, idx = host[keep], idx[keep]  # a copy: the buffer is free again
                images, held = self._wrap(host)
                return ProducedBatch(request.position, images, idx, tuple(skipped)), False
            images, held = self._wrap(host)
            return ProducedBatch(request.position, images, idx, tuple(skipped)), held
        import torch

        images, held = self._wrap(buffer[:n])
        for rows, source, src in parts:
            images[torch.from_numpy(rows).to(images.device)] = source[
                torch.from_numpy(src).to(source.device)
            ].to(images.device)
            self._submit(idx[rows], source, src)
        if not keep.all():
            images = images[torch.from_numpy(keep).to(images.device)]
            idx = idx[keep]
        return ProducedBatch(request.position, images, idx, tuple(skipped)), held

    def _replace_empty(self, k: int, batch: ProducedBatch) -> ProducedBatch:
        """Request ``k`` lost every sample (corrupt sources): like the DALI producer, make
        the batch of the next samples of the pass (:func:`following_indices`, this
        batch's skipped samples excluded), produced fresh, at most the request's size
        and never repeated to fill it; ``batch`` unchanged (empty) if none can be
        produced."""
        skipped = {s.index for s in batch.skipped}
        want = int(self._requests[k].indices.size)
        chosen: list[int] = []
        for i in following_indices(self._requests, k, skipped):
            chosen.append(i)
            if len(chosen) == want:
                break
        if not chosen:
            return batch
        produced = self._produce_now(
            BatchRequest(batch.position, np.asarray(chosen, dtype=np.int64))
        )
        if produced.indices.size == 0:
            return batch
        self.stats.fresh += int(produced.indices.size)
        return ProducedBatch(batch.position, produced.images, produced.indices, batch.skipped)

    def _produce_now(self, request: BatchRequest) -> ProducedBatch:
        """Produce one batch fresh at once (samples the cache was expected to hold)."""
        seed = (self._ctx.seed + 1_000_003 * (request.position + 1)) % (2**31 - 1)
        context = dataclasses.replace(self._ctx, prefetch=1, seed=seed, state=None)
        producer = self._fresh_factory(context, [request])
        try:
            for produced in producer:
                return produced
        finally:
            producer.close()
        raise RuntimeError("the fresh producer yielded no batch")  # pragma: no cover

    def _submit(
        self, indices: np.ndarray, images: torch.Tensor, src: np.ndarray | None
    ) -> None:
        """Offer fresh rows ``src`` (all when None) of ``images`` (samples ``indices``)
        to the filler, which encodes them before returning (see :mod:`cache.fill`)."""
        filler = self._cache.filler
        n = int(indices.size)
        if not filler.admitting:
            self.stats.fill_dropped += n
            return
        pixels = images.cpu().numpy()
        if src is not None:
            pixels = pixels[src]  # a new array
        if filler.submit(indices, self._variant, pixels, self._cache.labels[indices]):
            self.stats.fill_queued += n
        else:
            self.stats.fill_dropped += n

    def _finish_pass(self) -> None:
        """Wait for the pass's queued writes; final counts."""
        cache = self._cache
        if cache._filler is not None and cache.enabled:
            if not cache._filler.flush(timeout=FLUSH_TIMEOUT_S):
                logger.warning(
                    "the cache filler did not finish writing within %.0f s; the pass ends anyway",
                    FLUSH_TIMEOUT_S,
                )
            self.stats.filled = cache._filler.stats.written - self._written_before
        if cache.store is not None:
            self.stats.state = cache.store.state.value


def _read_failure(store: CacheStore, exc: CacheError) -> str:
    """Why reading ``store`` failed: the store's message, which names the cache (a damaged
    file: with the fix), else one that does."""
    text = str(exc)
    if isinstance(exc, DamagedCacheError) or text.startswith("reading the cache at "):
        return text
    return f"reading the cache at {store.path} failed: {text}"


def _match(
    idx: np.ndarray, rows: np.ndarray, produced: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pair the batch ``rows`` asked of a producer with the rows it produced.

    A producer yields the asked samples in order, minus skipped ones. Returns
    ``(matched rows, their row in the produced batch)``.
    """
    got = np.empty(min(rows.size, produced.size), dtype=np.int64)
    src = np.empty_like(got)
    m = j = 0
    produced_list = produced.tolist()
    for r in rows.tolist():
        if j < len(produced_list) and produced_list[j] == int(idx[r]):
            got[m], src[m] = r, j
            m += 1
            j += 1
    return got[:m], src[:m]


__all__ = [
    "CachedBatchProducer",
    "LoaderCache",
    "cache_identity",
    "dataset_description",
    "recipe_description",
]
