"""``Loader``: a drop-in replacement for ``torch.utils.data.DataLoader`` built on DALI.

Structure: :class:`~dataplane.config.LoaderConfig` (validated options) ->
:class:`~dataplane.plan.EpochPlan` (order, shard, batches) ->
:class:`~dataplane.iterator.LoaderIterator` (one pass, fed by a
:class:`~dataplane.producer.BatchProducer`: DALI, or with ``cache=`` the
cache-backed :class:`~dataplane.cached_producer.CachedBatchProducer`).
"""

from __future__ import annotations

import functools
import io
import logging
import os
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from cache import CacheConfig
from dataplane.config import LoaderConfig
from dataplane.errors import ConfigError, DatasetError
from dataplane.iterator import Cursor, LoaderIterator
from dataplane.plan import EpochPlan, LastBatchPolicy
from dataplane.producer import BatchRequest, OnCorrupt, ProducerContext, ProducerFactory
from dataplane.sources import FileListSource, Source, open_source
from dataplane.stats import CacheStats, EpochStats

if TYPE_CHECKING:
    from dataplane.cached_producer import LoaderCache
    from preprocessing import Device, Recipe

logger = logging.getLogger(__name__)

STATE_VERSION = 1


def _as_source(data: Any) -> Source:
    if isinstance(data, str | os.PathLike):
        return open_source(data)
    if isinstance(data, Source):
        return data
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return FileListSource(data)
    raise ConfigError(
        f"data must be a dataset path, a dataplane.sources.Source or a list of (path, label), "
        f"not {type(data).__name__}"
    )


#: Samples :func:`_infer_image_shape` opens at most, spread over the dataset.
SHAPE_PROBES = 16


def _infer_image_shape(source: Source, labels: np.ndarray | None = None) -> tuple[int, int]:
    """(size, channels) inferred from a few samples' headers (no pixels are decoded).

    Size: the shorter side of the first probed sample that can be read (probes are
    tried in index order). Channels: 3 if any of the probed samples is in colour,
    else 1. Probed: up to :data:`SHAPE_PROBES` samples spread evenly over the
    dataset (the first included) and the first sample of each of up to
    :data:`SHAPE_PROBES` classes.
    """
    from PIL import Image, UnidentifiedImageError

    n = len(source)
    probes = set(np.linspace(0, n - 1, num=min(n, SHAPE_PROBES)).round().astype(int).tolist())
    if labels is not None and labels.size:
        probes.update(np.unique(labels, return_index=True)[1][:SHAPE_PROBES].tolist())
    size: int | None = None
    channels = 1
    for index in sorted(probes):
        try:
            with Image.open(io.BytesIO(source.read(index))) as image:
                width, height = image.size
                colour = image.mode not in ("1", "L", "I", "I;16", "F")
        except (OSError, UnidentifiedImageError, ValueError):
            continue
        if size is None:
            size = min(width, height)
        if colour:
            channels = 3
            break
    if size is None:
        raise DatasetError(
            f"cannot infer the image size: none of {len(probes)} samples spread over the "
            "dataset could be read as an image; pass size= and channels= to the Loader"
        )
    return size, channels


class Loader:
    """Iterate a labelled image dataset as normalized torch batches, decoded by DALI.

    Parameters
    ----------
    data : path, Source or list of (path, label)
        An image folder (one sub-folder per class), a Parquet file or folder
        (columns ``image``, ``label``), a :class:`~dataplane.sources.Source`, or a
        list of ``(path, label)``.
    batch_size : int
        Samples per batch (per rank).
    recipe : str or preprocessing.Recipe
        ``"train"``, ``"eval"``, a custom registered name, or a Recipe.
    size : int, optional
        Output side in pixels. Default: the recipe's size for a Recipe, else the
        shorter side of the first readable image among the samples probed for
        ``channels`` (tried in index order; the first sample is one of them).
    channels : {1, 3}, optional
        Output channels. Default: the recipe's for a Recipe, else 3 if any of up to
        16 samples spread over the dataset, or the first sample of a class, is in
        colour, and 1 otherwise (a grayscale image among colour ones is expanded
        to 3 channels). Pass ``channels=`` when colour images are rare.
    shuffle : bool
        A new order every epoch, from ``(seed, epoch)``.
    seed : int
        Seed of the order and of augmentation (same on all ranks), in
        ``0 <= seed < 2**48``.
    last_batch : LastBatchPolicy or {"drop", "partial", "pad"}
        Handling of the last incomplete batch; see :mod:`dataplane.plan`.
    device : {"cpu", "cuda"} or None
        ``"cpu"``: DALI CPU-only, CPU tensors. ``"cuda"``: GPU decode, CUDA
        tensors on torch's current device. ``None``: CUDA when available.
    rank, world_size : int, optional
        This process's shard. Default: from ``torch.distributed`` when a process
        group is initialised, else one shard.
    num_threads : int, optional
        DALI worker threads (default: cores available to this process).
    prefetch : int
        Batches prepared ahead of the training loop (bounds memory).
    on_corrupt : {"raise", "skip"}
        A corrupt or unreadable image raises ``DataError`` (naming index and file)
        or is skipped, counted in :attr:`last_epoch_stats` and reported with a
        ``CorruptSampleWarning`` at epoch end. A batch with skipped samples is
        yielded shorter, never empty: a batch all of whose samples are skipped
        holds the next valid samples of the epoch on this rank instead, so
        ``len(loader)`` and the number of batches on every rank are unchanged.
        Without ``cache=`` (or once the loader stops using the cache) they are
        repeated up to the batch size if fewer remain; in a pass served through
        the cache they are not, and the batch holds only those found. If no
        valid sample is left to stand in, iterating raises ``DataError`` naming
        the skipped files.
    producer : callable, optional
        Advanced: a :data:`~dataplane.producer.ProducerFactory` replacing the
        default DALI producer (with ``cache=``, it produces the cache misses).
    cache : CacheConfig, optional
        Serve fully augmented samples from an LMDB cache
        (:class:`cache.CacheConfig`: path, ``variants``, ``max_bytes``, ...).
        Epoch ``e`` serves variant ``e % variants`` of every sample, in the
        epoch's order; samples not cached yet are produced fresh and written in
        the background, so the first ``variants`` epochs fill the cache and
        later ones read it without decoding. Counts per pass are in
        :attr:`cache_stats` and ``last_epoch_stats.cache``. See
        :mod:`dataplane.cached_producer` for what happens on failure (a full,
        unwritable or unreadable cache warns and serves fresh samples).
    normalize : bool
        True (default): float32 images, ``(x / 255 - mean) / std`` per channel,
        computed on the target device. False: the uint8 NCHW images as augmented
        (or as cached), for a training step that normalizes them itself, e.g. on
        the GPU with :func:`preprocessing.normalize` or inside the model; on a CPU
        this skips writing 4 bytes per pixel, the largest cost of serving a cache.

    Notes
    -----
    A Loader has one live iterator at a time, unlike ``torch.utils.data.DataLoader``:
    ``iter(loader)`` (a ``for`` loop), :meth:`set_epoch` and :meth:`load_state_dict`
    close the pass in progress, and the closed iterator's next ``__next__`` raises
    ``RuntimeError`` rather than ending early without a sign. A full pass, a pass
    left with ``break``, a peek with ``next(iter(loader))`` or :meth:`close` all
    leave the loader ready for the next ``iter(loader)``. For two consumers at once
    (e.g. ``zip``), build two Loaders.

    Raises
    ------
    ConfigError
        For an option of the wrong type or value (the message names the fix).
    DatasetError
        For a missing or empty dataset or labels out of range.
    StaleCacheError
        The cache was built for another recipe, dataset or sample shape; the
        message says what changed and how to rebuild (``rebuild=True``).

    Examples
    --------
    >>> train = Loader("data/fmnist/train", batch_size=256, recipe="train", shuffle=True)
    >>> for epoch in range(10):                                      # doctest: +SKIP
    ...     train.set_epoch(epoch)
    ...     for images, labels in train:   # float32 NCHW normalized, int64
    ...         ...

    With the augmented-sample cache (4 variants reused in turn)::

        train = Loader("data/fmnist/train", batch_size=256, recipe="train", seed=0,
                       cache=CacheConfig("data/cache/fmnist-train", variants=4,
                                         max_bytes=8 << 30))
    """

    def __init__(
        self,
        data: Any,
        *,
        batch_size: int = 256,
        recipe: str | Recipe = "train",
        size: int | None = None,
        channels: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        last_batch: LastBatchPolicy | str = LastBatchPolicy.PARTIAL,
        device: Device | str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        num_threads: int | None = None,
        prefetch: int = 2,
        on_corrupt: OnCorrupt | str = OnCorrupt.RAISE,
        producer: ProducerFactory | None = None,
        cache: CacheConfig | None = None,
        normalize: bool = True,
    ) -> None:
        import torch

        from preprocessing import PreprocessingError, Recipe, make_recipe, resolve_device

        self.config = LoaderConfig.create(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            last_batch=last_batch,
            rank=rank,
            world_size=world_size,
            num_threads=num_threads,
            prefetch=prefetch,
            on_corrupt=on_corrupt,
            producer=producer,
            normalize=normalize,
        )
        if not isinstance(recipe, str | Recipe):
            raise ConfigError(
                f"recipe must be a name ('train', 'eval', or a registered custom recipe) or a "
                f"preprocessing.Recipe, not {type(recipe).__name__}"
            )
        if cache is not None and not isinstance(cache, CacheConfig):
            hint = (
                f"cache=CacheConfig({str(cache)!r})"
                if isinstance(cache, str | os.PathLike)
                else "cache=CacheConfig(path, variants=4)"
            )
            raise ConfigError(
                f"cache must be a dataplane.CacheConfig or None, not {type(cache).__name__}; "
                f"pass {hint}"
            )
        for name, value in (("size", size), ("channels", channels)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{name} must be an int or None, not {value!r}")
        self.source: Source = _as_source(data)
        n = len(self.source)
        if n == 0:
            raise DatasetError(
                f"the dataset {self.source!r} is empty; it needs at least one sample"
            )
        self._labels = self._load_labels()
        try:
            if isinstance(recipe, str) and (size is None or channels is None):
                inferred_size, inferred_channels = _infer_image_shape(self.source, self._labels)
                size = inferred_size if size is None else size
                channels = inferred_channels if channels is None else channels
            self.recipe: Recipe = make_recipe(recipe, size=size, channels=channels)
            self.device: Device = resolve_device(device)
        except PreprocessingError as exc:
            raise ConfigError(str(exc)) from exc
        self.plan = EpochPlan(
            num_samples=n,
            batch_size=self.config.batch_size,
            shuffle=self.config.shuffle,
            seed=self.config.seed,
            rank=self.config.rank,
            world_size=self.config.world_size,
            last_batch=self.config.last_batch,
        )
        if self.device.value == "cuda":
            self._device_id: int | None = torch.cuda.current_device()
            self.torch_device = torch.device("cuda", self._device_id)
        else:
            self._device_id = None
            self.torch_device = torch.device("cpu")
        self._checked = np.zeros(n, dtype=bool)
        self._producer_state: dict[Any, Any] = {}
        self._cursor = Cursor()
        self._resume: tuple[int, int] | None = None
        self._active: weakref.ReferenceType[LoaderIterator] | None = None
        #: Counts of the last completed epoch (``None`` before the first).
        self.last_epoch_stats: EpochStats | None = None
        self._cache: LoaderCache | None = None
        self._cache_stats: CacheStats | None = None
        if cache is not None:
            self._cache = self._open_cache(cache)
            weakref.finalize(self, self._cache.close)

    def _open_cache(self, config: CacheConfig) -> LoaderCache:
        from dataplane.cached_producer import LoaderCache, cache_identity

        return LoaderCache(
            config,
            cache_identity(self.source, self.recipe),
            labels=self._labels,
            batch_size=self.config.batch_size,
            prefetch=self.config.prefetch,
            pinned=self.device.value == "cuda",
            own_batches=not self.config.normalize,
        )

    def _load_labels(self) -> np.ndarray:
        labels_fn = getattr(self.source, "labels", None)
        if callable(labels_fn):
            labels = np.asarray(labels_fn(), dtype=np.int64)
        else:
            labels = np.fromiter(
                (self.source.label(i) for i in range(len(self.source))),
                dtype=np.int64,
                count=len(self.source),
            )
        num_classes = int(self.source.num_classes)
        bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
        if bad.size:
            i = int(bad[0])
            raise DatasetError(
                f"label {int(labels[i])} of sample {i} ({self.source.describe(i)}) is out of "
                f"range 0..{num_classes - 1} ({bad.size} bad label(s)); fix the labels or the "
                "source's num_classes"
            )
        return labels

    @property
    def cache_stats(self) -> CacheStats | None:
        """Cache counts (hits, misses, fills) of the current or last pass; ``None``
        without ``cache=`` or when the cache is not used (see :class:`CacheStats`)."""
        return self._cache_stats

    @property
    def cache_side(self) -> LoaderCache | None:
        """The loader's cache side (:class:`~dataplane.cached_producer.LoaderCache`:
        store, filler, buffers); ``None`` without ``cache=``. Tools that fill a cache
        ahead of training (``dataplane cache build``) read its filler's counts."""
        return self._cache

    @property
    def cache_store(self) -> Any:
        """The :class:`cache.CacheStore` behind ``cache=`` (None without one, or when
        it could not be opened)."""
        return self._cache.store if self._cache is not None else None

    # -- sizes and epochs ------------------------------------------------------------
    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return len(self.plan)

    @property
    def batch_size(self) -> int:
        """Samples per batch."""
        return self.config.batch_size

    @property
    def epoch(self) -> int:
        """The epoch the next iteration covers."""
        return self._cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next iteration (its order when shuffling).

        A position loaded with :meth:`load_state_dict` is kept when ``epoch`` is
        the loaded epoch and dropped otherwise. Without calls to ``set_epoch`` the
        epoch advances by one after each complete pass.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"epoch must be a non-negative int, not {epoch!r}")
        self._close_active()
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None
        self._cursor.epoch = epoch
        self._cursor.position = self._resume[1] if self._resume is not None else 0

    # -- resume ----------------------------------------------------------------------
    def _identity(self) -> dict[str, Any]:
        return {
            "num_samples": self.plan.num_samples,
            "batch_size": self.plan.batch_size,
            "shuffle": self.plan.shuffle,
            "seed": self.plan.seed,
            "rank": self.plan.rank,
            "world_size": self.plan.world_size,
            "last_batch": self.plan.last_batch.value,
        }

    def state_dict(self) -> dict[str, Any]:
        """The loader's position: epoch and number of batches already yielded in it.

        Save it with the model checkpoint; :meth:`load_state_dict` on a loader
        with the same settings resumes with exactly the remaining batches: the same
        samples, in the same order. Their random augmentation is drawn afresh: DALI keeps
        its random state inside the pipeline, which is reused from pass to pass and cannot
        be saved, so a resumed pass draws from a new seed (a function of seed, epoch, rank
        and position) where the uninterrupted one went on drawing.
        """
        return {
            "version": STATE_VERSION,
            "epoch": self._cursor.epoch,
            "batches_done": self._cursor.position,
            **self._identity(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next iteration yields the remaining batches.

        Raises
        ------
        ConfigError
            If ``state`` is malformed or was saved by a loader with other settings
            (dataset size, batch size, shuffle, seed, shard or last-batch policy).
        """
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ConfigError(
                f"not a dataplane Loader state (version {STATE_VERSION}); pass what "
                "Loader.state_dict() returned"
            )
        for key, value in self._identity().items():
            if state.get(key) != value:
                raise ConfigError(
                    f"cannot resume: the state was saved with {key}={state.get(key)!r} but this "
                    f"loader has {key}={value!r}; build the loader with the same settings"
                )
        epoch, done = state.get("epoch"), state.get("batches_done")
        if (
            isinstance(epoch, bool)
            or not isinstance(epoch, int)
            or epoch < 0
            or isinstance(done, bool)
            or not isinstance(done, int)
            or not 0 <= done <= len(self)
        ):
            raise ConfigError(
                f"malformed loader state: epoch={epoch!r}, batches_done={done!r}; epoch must "
                f"be a non-negative int and batches_done an int in 0..{len(self)}: pass what "
                "Loader.state_dict() returned"
            )
        self._close_active()
        self._resume = (epoch, done)
        self._cursor.epoch = epoch
        self._cursor.position = done

    # -- iteration -------------------------------------------------------------------
    def _close_active(self, *, superseded: bool = True) -> None:
        """Close the live iterator; ``superseded``: a new pass or position replaces it,
        so its next ``__next__`` raises instead of ending quietly."""
        active = self._active() if self._active is not None else None
        if active is not None:
            if superseded:
                active.supersede()
            else:
                active.close()
        self._active = None

    def _augmentation_seed(self, epoch: int, start: int) -> int:
        key = f"{self.plan.seed}:{epoch}:{self.plan.rank}:{start}".encode()
        return xxhash.xxh64_intdigest(key) % (2**31 - 1)

    def __iter__(self) -> LoaderIterator:
        """A pass over the current epoch, from the resume position if one was loaded."""
        from dataplane.dali_producer import DaliBatchProducer

        self._close_active()
        epoch = self._cursor.epoch
        if self._resume is not None and self._resume[0] == epoch:
            start = self._resume[1]
        else:
            start = 0
        self._resume = None
        self._cursor.position = start
        requests = [
            BatchRequest(k, indices)
            for k, indices in enumerate(self.plan.batches(epoch, start), start)
        ]
        context = ProducerContext(
            source=self.source,
            recipe=self.recipe,
            device=self.device,
            device_id=self._device_id,
            batch_size=self.config.batch_size,
            num_threads=self.config.num_threads,
            prefetch=self.config.prefetch,
            seed=self._augmentation_seed(epoch, start),
            epoch=epoch,
            on_corrupt=self.config.on_corrupt,
            checked=self._checked,
            state=self._producer_state,
        )
        factory = self.config.producer or DaliBatchProducer
        cache_stats = None
        if self._cache is not None and self._cache.enabled:
            cache_stats = CacheStats(variant=epoch % self._cache.variants)
            factory = self._cache.producer_factory(factory, cache_stats)
        self._cache_stats = cache_stats
        iterator = LoaderIterator(
            factory(context, requests),
            cursor=self._cursor,
            recipe=self.recipe,
            labels=self._labels,
            device=self.torch_device,
            on_end=functools.partial(self._end_epoch, cache_stats=cache_stats),
            normalize=self.config.normalize,
        )
        self._active = weakref.ref(iterator)
        return iterator

    def _end_epoch(self, stats: EpochStats, cache_stats: CacheStats | None = None) -> None:
        stats.cache = cache_stats
        if self._cache is not None:
            variant = stats.epoch % self._cache.variants
            self._cache.end_pass(cache_stats or CacheStats(variant=variant))
        self.last_epoch_stats = stats
        if self._cursor.epoch == stats.epoch:
            self._cursor.epoch = stats.epoch + 1
            self._cursor.position = 0

    def close(self) -> None:
        """Stop the current pass, if any, and release its threads and kept pipelines.

        With ``cache=``: the filler writes what is queued and stops; the cache is
        released (a later pass opens it again).
        """
        self._close_active(superseded=False)
        self._producer_state.clear()
        if self._cache is not None:
            self._cache.close()

    def __repr__(self) -> str:
        return (
            f"Loader({self.source!r}, batch_size={self.batch_size}, recipe={self.recipe.name!r}, "
            f"size={self.recipe.size}, device={self.device.value!r}, "
            f"shard={self.plan.rank}/{self.plan.world_size}, batches={len(self)}"
            + (f", cache={str(self._cache.config.path)!r}" if self._cache is not None else "")
            + ")"
        )
