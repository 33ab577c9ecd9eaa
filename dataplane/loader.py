"""``Loader``: a drop-in replacement for ``torch.utils.data.DataLoader`` built on DALI.

Structure: :class:`~dataplane.config.LoaderConfig` (validated options) ->
:class:`~dataplane.plan.EpochPlan` (order, shard, batches) ->
:class:`~dataplane.iterator.LoaderIterator` (one pass, fed by a
:class:`~dataplane.producer.BatchProducer`: DALI, or with ``cache=`` the
cache-backed :class:`~dataplane.cached_producer.CachedBatchProducer`).
"""

from __future__ import annotations

import functools
import logging
import os
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from cache import CacheConfig
from dataplane.config import LoaderConfig, is_integral
from dataplane.errors import SKIP_HINT, ConfigError, DatasetError
from dataplane.iterator import Cursor, LoaderIterator
from dataplane.plan import EpochPlan, LastBatchPolicy
from dataplane.producer import BatchRequest, OnCorrupt, ProducerContext, ProducerFactory
from dataplane.shape import infer_image_shape
from dataplane.sources import FileListSource, Source, open_source
from dataplane.stats import CacheStats, EpochStats

if TYPE_CHECKING:
    from dataplane.cached_producer import LoaderCache
    from preprocessing import Device, Recipe

logger = logging.getLogger(__name__)

STATE_VERSION = 1


def _as_source(data: Any, on_corrupt: OnCorrupt) -> Source:
    if isinstance(data, str | os.PathLike):
        return open_source(data)
    if isinstance(data, Source):
        return data
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        listed = FileListSource(data, check_files=False)
        missing = listed.missing()
        if missing and on_corrupt is OnCorrupt.RAISE:
            raise DatasetError(
                f"{len(missing)} file(s) of the file list do not exist, e.g. {missing[0]}; "
                f"fix the paths or remove those entries, or {SKIP_HINT}"
            )
        if missing:  # read as unreadable samples: skipped, counted and warned at epoch end
            logger.info(
                "%d file(s) of the file list do not exist, e.g. %s; on_corrupt='skip' skips "
                "them",
                len(missing),
                missing[0],
            )
        return listed
    raise ConfigError(
        f"data must be a dataset path, a dataplane.sources.Source or a list of (path, label), "
        f"not {type(data).__name__}"
    )


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
        ``"train"``, ``"eval"``, a custom registered name, or a Recipe (from
        :func:`preprocessing.make_recipe`). What the recipe leaves to the data
        (a name: size and channels; ``make_recipe`` without ``size=``/``channels=``:
        those) is inferred from the images, and :attr:`recipe` is the resolved recipe.
    size : int, optional
        Output side in pixels, overriding the recipe's. Default: the recipe's if it
        has one, else the median shorter side of up to 32 probed samples (16 spread
        over the dataset and the first sample of each class); a
        :class:`~dataplane.errors.MixedImageSizeWarning` names their range when they
        differ. See :func:`dataplane.shape.infer_image_shape`.
    channels : {1, 3}, optional
        Output channels, overriding the recipe's. Default: the recipe's if it has
        them, else 3 if any of the probed samples is in colour, and 1 otherwise (a
        grayscale image among colour ones is expanded to 3 channels). Pass
        ``channels=`` when colour images are rare.
    shuffle : bool
        A new order every epoch, from ``(seed, epoch)``.
    seed : int
        Seed of the order and of augmentation (same on all ranks), in
        ``0 <= seed < 2**48``. The default 0, as for torch's ``DistributedSampler``,
        keeps every rank in agreement; the order does not follow ``torch.manual_seed``
        (vary ``seed=`` for another order). The order of epoch ``e`` is a function of
        ``(seed, epoch)`` only; its random augmentation is not: the DALI pipeline, and
        its random state, is reused from pass to pass, so the pixels of epoch ``e``
        also depend on what the loader ran before (a fresh loader's ``set_epoch(3)``
        gives the order of epoch 3 of an uninterrupted run, with other crops and flips).
    last_batch : LastBatchPolicy or {"drop", "partial", "pad"}, optional
        Handling of the last incomplete batch; see :mod:`dataplane.plan`. Default
        ``"partial"`` (or as ``drop_last`` says).
    device : {"cpu", "cuda"} or None
        ``"cpu"``: DALI CPU-only, CPU tensors. ``"cuda"``: GPU decode, CUDA
        tensors on torch's current device. ``None``: CUDA when available.
    rank, world_size : int, optional
        This process's shard. Default: from ``torch.distributed`` when a process
        group is initialised, else one shard.
    num_threads : int, optional
        DALI worker threads (default: cores available to this process).
    prefetch : int, optional
        Batches prepared ahead of the training loop (bounds memory); default 2.
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
        the skipped files. A file of a list (``data`` as ``(path, label)`` pairs)
        that does not exist is refused at construction with "raise" and, with
        "skip", read as an unreadable sample: skipped and counted alike.
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
    drop_last, num_workers, prefetch_factor, pin_memory, persistent_workers
        ``torch.utils.data.DataLoader``'s options, for a one-line swap; see the table
        in the notes.
    **torch_options
        The other ``DataLoader`` options (``sampler=``, ``collate_fn=``, ...): accepted
        at torch's default value, where they have no effect, else refused with a
        ``ConfigError`` naming what to use instead. Any other name raises
        ``TypeError``, as for any function.

    Notes
    -----
    **Passes and epochs.** Each ``iter(loader)`` (a ``for`` loop) is a pass over
    the current epoch :attr:`epoch`, which starts at 0 and advances by one

    - after a complete pass, and
    - at the next ``iter(loader)`` after a pass that yielded at least one batch and
      was left unfinished (``break``, ``next(iter(loader))``, ``zip`` stopping on a
      shorter or another iterator, :meth:`close`, an error), so that, as with
      torch's ``DataLoader``, a new iterator brings a new order (and, with ``cache=``,
      the next variant) rather than a replay. A pass that yielded nothing does not
      advance the epoch.

    :meth:`set_epoch` and :meth:`load_state_dict` choose the epoch (and position)
    explicitly; the next ``iter(loader)`` then covers exactly that, whatever the pass
    before did. Under DDP every rank runs the same steps, so the epochs of all
    ranks advance alike; calling ``set_epoch(epoch)`` before each pass, as with a
    ``DistributedSampler``, makes this explicit.

    A Loader has one live iterator at a time, unlike ``torch.utils.data.DataLoader``:
    ``iter(loader)``, :meth:`set_epoch` and :meth:`load_state_dict` close the pass in
    progress, and the closed iterator's next ``__next__`` raises ``RuntimeError``
    rather than ending early without a sign. For two consumers at once (e.g.
    ``zip``), build two Loaders.

    **Coming from torch's DataLoader.** ``DataLoader(ds, batch_size=256,
    shuffle=True, num_workers=8, pin_memory=True, drop_last=True)`` becomes
    ``Loader(path, batch_size=256, shuffle=True, num_workers=8, pin_memory=True,
    drop_last=True)``. Its options map as follows:

    ===========================  =================================================================
    ``DataLoader`` option        ``Loader``
    ===========================  =================================================================
    ``dataset``                  ``data`` (a path, Source or list); :attr:`dataset` is the Source
    ``batch_size``               ``batch_size`` (keyword only)
    ``shuffle``                  ``shuffle``; the order comes from ``seed``, not torch's RNG
    ``drop_last``                ``last_batch``: True is ``"drop"``, False ``"partial"``
    ``num_workers``              ``num_threads``: DALI threads of this process, not worker
                                 processes; ``num_workers=0`` means 1 thread
    ``prefetch_factor``          ``prefetch``: batches prepared ahead in all, not per worker
    ``pin_memory``               a CPU loader pins the yielded tensors when a CUDA device is
                                 present; otherwise no effect, as in torch
    ``persistent_workers``       accepted, no effect: the DALI pipelines persist across passes
    ``sampler``                  ``shuffle``, ``seed``, ``rank``/``world_size``, :meth:`set_epoch`
    ``batch_sampler``            ``batch_size``, ``shuffle``, ``drop_last``
    ``collate_fn``               none: batches are ``(images, labels)`` tensors; post-process
                                 them in the loop, or transform samples in ``recipe=``
    ``generator``                ``seed``
    ``worker_init_fn``           none: DALI threads run no Python
    ``multiprocessing_context``  none: there are no worker processes
    ``timeout``                  none: there is no per-batch timeout
    ``in_order``                 none: batches always come in the epoch's order
    ``pin_memory_device``        none: ``pin_memory=True``, or ``device="cuda"``
    ===========================  =================================================================

    ``drop_last``, ``num_workers`` and ``prefetch_factor`` may be given together with
    their equivalent only when both agree (``drop_last=False`` agrees with
    ``"partial"`` and ``"pad"``).

    Raises
    ------
    ConfigError
        For an option of the wrong type or value (the message names the fix).
    DatasetError
        For a missing or empty dataset, labels out of range, or a file list naming a
        missing file (unless ``on_corrupt="skip"``).
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
        last_batch: LastBatchPolicy | str | None = None,
        device: Device | str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        num_threads: int | None = None,
        prefetch: int | None = None,
        on_corrupt: OnCorrupt | str = OnCorrupt.RAISE,
        producer: ProducerFactory | None = None,
        cache: CacheConfig | None = None,
        normalize: bool = True,
        drop_last: bool | None = None,
        num_workers: int | None = None,
        prefetch_factor: int | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        **torch_options: Any,
    ) -> None:
        import torch

        from preprocessing import (
            PreprocessingError,
            Recipe,
            RecipeError,
            make_recipe,
            resolve_device,
        )

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
            drop_last=drop_last,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            torch_options=torch_options,
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
        self.source: Source = _as_source(data, self.config.on_corrupt)
        n = len(self.source)
        if n == 0:
            raise DatasetError(
                f"the dataset {self.source!r} is empty; it needs at least one sample"
            )
        self._labels = self._load_labels()
        inferred: list[str] = []  # what neither the recipe nor the Loader's arguments fix
        try:
            base = make_recipe(recipe) if isinstance(recipe, str) else recipe
            given = {"size": size, "channels": channels}
            inferred = [f for f in base.unresolved if given[f] is None]
            if inferred:
                inferred_size, inferred_channels = infer_image_shape(
                    self.source, self._labels, warn_mixed_sizes="size" in inferred
                )
                size = inferred_size if "size" in inferred else size
                channels = inferred_channels if "channels" in inferred else channels
            self.recipe: Recipe = make_recipe(base, size=size, channels=channels)
            self.device: Device = resolve_device(device)
        except PreprocessingError as exc:
            note = ""
            if inferred and isinstance(exc, RecipeError):
                values = {"size": size, "channels": channels}
                note = (
                    f" ({', '.join(f'{f}={values[f]}' for f in inferred)} inferred from the "
                    f"images; pass {' and '.join(f + '=' for f in inferred)} to the Loader to "
                    "choose)"
                )
            raise ConfigError(f"{exc}{note}") from exc
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
        # torch pins only where a CUDA device could use the pages; so do we.
        self._pin_memory = (
            self.config.pin_memory and self.device.value == "cpu" and torch.cuda.is_available()
        )
        self._checked = np.zeros(n, dtype=bool)
        self._producer_state: dict[Any, Any] = {}
        self._cursor = Cursor()
        self._resume: tuple[int, int] | None = None
        # (epoch, first batch) of the last pass iter() started; None once it is complete or
        # set_epoch()/load_state_dict() chose the position since.
        self._last_pass: tuple[int, int] | None = None
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
    def dataset(self) -> Source:
        """The :class:`~dataplane.sources.Source` iterated (``len(loader.dataset)`` is
        its number of samples, as for torch's ``DataLoader``)."""
        return self.source

    @property
    def drop_last(self) -> bool:
        """Whether the last incomplete batch is dropped (``last_batch="drop"``)."""
        return self.config.last_batch is LastBatchPolicy.DROP

    def _left_unfinished(self) -> bool:
        """Whether the last pass yielded a batch and stopped before its end, so that the
        next ``iter(loader)`` starts the next epoch."""
        last = self._last_pass
        cursor = self._cursor
        return last is not None and cursor.epoch == last[0] and cursor.position > last[1]

    @property
    def epoch(self) -> int:
        """The epoch of the pass in progress, or else of the next ``iter(loader)``.

        Between passes it is one more than ``state_dict()["epoch"]`` after a pass left
        unfinished (see the class notes), and equal otherwise.
        """
        active = self._active() if self._active is not None else None
        if self._left_unfinished() and (active is None or active.closed):
            return self._cursor.epoch + 1
        return self._cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next iteration (its order when shuffling).

        Call it before each pass, as with torch's ``DistributedSampler``; ``epoch`` is
        any non-negative integer (``int`` or a numpy integer). The next
        ``iter(loader)`` covers ``epoch`` from its start, even after a pass left
        unfinished. A position loaded with :meth:`load_state_dict` is kept when
        ``epoch`` is the loaded epoch and dropped otherwise. Without calls to
        ``set_epoch`` the epoch advances by one after each complete pass and at the
        ``iter(loader)`` after a pass left unfinished (see the class notes).
        """
        if not is_integral(epoch) or epoch < 0:
            raise ConfigError(f"epoch must be a non-negative int, not {epoch!r}")
        epoch = int(epoch)
        self._close_active()
        self._last_pass = None
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

        The state describes the current or last iterator, as in torchdata's
        ``StatefulDataLoader``: after a pass left unfinished (``break``) it holds that
        pass's epoch and the batches it yielded, so a loader restored from it resumes
        that pass, while this loader's own next ``iter(loader)`` starts the next epoch
        (see the class notes; :attr:`epoch` is then one more than ``state["epoch"]``).
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
            not is_integral(epoch)
            or epoch < 0
            or not is_integral(done)
            or not 0 <= int(done) <= len(self)
        ):
            raise ConfigError(
                f"malformed loader state: epoch={epoch!r}, batches_done={done!r}; epoch must "
                f"be a non-negative int and batches_done an int in 0..{len(self)}: pass what "
                "Loader.state_dict() returned"
            )
        epoch, done = int(epoch), int(done)
        self._close_active()
        self._last_pass = None
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
        """A pass over the current epoch, from the resume position if one was loaded.

        After a pass that yielded at least one batch and was left unfinished, and with
        no :meth:`set_epoch` or :meth:`load_state_dict` since, the pass covers the next
        epoch from its start (a new order, as torch's ``DataLoader`` draws one on every
        ``iter()``); see the class notes.
        """
        from dataplane.dali_producer import DaliBatchProducer

        self._close_active()
        if self._left_unfinished():
            self._cursor.epoch += 1
            self._cursor.position = 0
        epoch = self._cursor.epoch
        if self._resume is not None and self._resume[0] == epoch:
            start = self._resume[1]
        else:
            start = 0
        self._resume = None
        self._cursor.position = start
        self._last_pass = (epoch, start)
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
            pin_memory=self._pin_memory,
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
            self._last_pass = None

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
