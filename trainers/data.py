"""The loaders of each schedule, built from a dataset on disk.

=========  ==========================================================  ====================
schedule   training loader(s)                                          validation loader
=========  ==========================================================  ====================
fresh      ``dataplane.Loader(train, recipe="train")``                 ``Loader(recipe="eval")``
perfect    phase 1: ``Loader(train, recipe="train",                    ``Loader(recipe="eval")``
           cache=CacheConfig(cache_dir, variants=K, max_bytes=B))``;
           phase 2: the ``fresh`` loader
torch      :class:`~trainers.torch_baseline.TorchBaselineLoader`       its eval transforms
           (PIL transforms in ``num_workers`` = cores processes)
=========  ==========================================================  ====================

``perfect`` needs the augmented-sample cache integrated into the Loader
(``dataplane.CacheConfig``); without it, building its loaders raises
:class:`~trainers.errors.TrainerConfigError` saying so.

A dataset is a folder with ``train/`` and ``val/`` and/or ``test/``
sub-folders, each an image folder (one sub-folder per class), as written by
``dataplane ingest``; ``"fmnist"`` ingests Debian's Fashion-MNIST into
``data_root`` first (once: ingest is a no-op when the output is up to date).
Validation (and so the time to the target accuracy) uses ``val/`` when the
dataset has one, so that ``test/`` stays held out; otherwise ``test/``
(Fashion-MNIST has only ``train`` and ``test``). The choice is logged and
:attr:`DatasetSplits.val_split` names it. A label is the position of its
class folder's name in sorted order, so the validation split must have the
training split's class folders: :func:`build_loaders` refuses other ones and
names the difference.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.errors import TrainerConfigError, TrainerDataError
from trainers.schedule import Schedule

if TYPE_CHECKING:
    from dataplane import OnCorrupt

logger = logging.getLogger(__name__)

#: Validation splits in order of preference: ``val/`` keeps ``test/`` held out.
VALIDATION_SPLITS = ("val", "test")

__all__ = [
    "VALIDATION_SPLITS",
    "DatasetSplits",
    "ScheduleLoaders",
    "build_loaders",
    "cache_available",
    "resolve_dataset",
]


@dataclass(frozen=True)
class DatasetSplits:
    """Image folders of a dataset's training and validation splits."""

    train: Path
    val: Path

    @property
    def val_split(self) -> str:
        """Name of the validation folder (``"val"`` or ``"test"``)."""
        return self.val.name


@dataclass
class ScheduleLoaders:
    """The loaders :func:`trainers.fit` needs for one schedule."""

    train: Any
    val: Any
    fresh: Any | None = None


def resolve_dataset(
    data: str | os.PathLike[str],
    *,
    data_root: str | os.PathLike[str] = "data",
    jpeg: bool = False,
    size: int | None = None,
    limit: int | None = None,
    source_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> DatasetSplits:
    """Find (or, for ``"fmnist"``, create) a dataset's train and validation folders.

    Parameters
    ----------
    data : str or path
        ``"fmnist"`` or a folder holding ``train/`` and ``val/`` and/or
        ``test/``; validation uses ``val/`` when there is one, else ``test/``.
    data_root : path
        Where ``"fmnist"`` is ingested (``<data_root>/fmnist``, or
        ``fmnist-jpeg<size>`` / ``-limit<N>`` variants).
    jpeg, size, limit
        Ingest options for ``"fmnist"`` (JPEG re-encoding, side in pixels,
        images per split).
    source_dir : path, optional
        ``"fmnist"``: the folder of the IDX files; by default the folder named
        by ``DATAPLANE_FMNIST_DIR`` when set, else Debian's
        (``dataplane ingest``'s ``--source-dir`` and its default).
    progress : bool
        ``"fmnist"``: show the ingest's progress bar.

    Raises
    ------
    TrainerDataError
        The folder lacks a ``train/`` or validation split, or, for
        ``"fmnist"``, ``<data_root>/<name>`` holds an ingest written with other
        settings (the message says how to use it as it is or replace it).
    dataplane.DatasetError
        ``"fmnist"``: the IDX files are not in ``source_dir`` (the message says
        how to install them or point ``--source-dir`` at them).
    """
    if str(data) == "fmnist":
        from dataplane.errors import IngestConflictError
        from dataplane.ingest import DEFAULT_FMNIST_DIR, FMNIST_DIR_ENV, ingest_fmnist

        if source_dir is None:
            source_dir = os.environ.get(FMNIST_DIR_ENV) or DEFAULT_FMNIST_DIR

        name = "fmnist" + (f"-jpeg{size or 28}" if jpeg else (f"-{size}" if size else ""))
        name += f"-limit{limit}" if limit else ""
        out = Path(data_root) / name
        try:
            ingest_fmnist(
                out,
                fmt="folder",
                jpeg=jpeg,
                size=size,
                limit=limit,
                source_dir=Path(source_dir),
                progress=progress,
            )
        except IngestConflictError as exc:
            raise TrainerDataError(
                _other_ingest_message(out, jpeg, size, limit, Path(source_dir))
            ) from exc
        logger.info("validating on %s (Fashion-MNIST's test split)", out / "test")
        return DatasetSplits(out / "train", out / "test")
    root = Path(data)
    if not (root / "train").is_dir():
        raise TrainerDataError(
            f"{root} has no train/ folder; pass 'fmnist' or a dataset folder with train/ and test/ "
            "(e.g. written by `dataplane ingest fmnist OUT`)"
        )
    for name in VALIDATION_SPLITS:
        if (root / name).is_dir():
            logger.info("validating on %s/", root / name)
            return DatasetSplits(root / "train", root / name)
    raise TrainerDataError(f"{root} has no test/ or val/ folder to validate on")


def _other_ingest_message(
    out: Path, jpeg: bool, size: int | None, limit: int | None, source_dir: Path
) -> str:
    """Why ``--data fmnist`` cannot use ``out`` (an ingest with other settings) and what to do.

    ``dataplane ingest`` would say "pass --overwrite", an option ``train`` and
    ``doctor`` do not have: this names the commands that do the job there (with
    ``--source-dir`` when ``source_dir`` is not the folder that command reads by default).
    """
    from dataplane.ingest import DEFAULT_FMNIST_DIR, FMNIST_DIR_ENV, MANIFEST

    wanted: dict[str, Any] = {"format": "folder", "jpeg": jpeg, "size": size or 28, "limit": limit}
    try:
        previous = json.loads((out / MANIFEST).read_text()).get("settings")
    except (OSError, ValueError, AttributeError):
        previous = None
    if isinstance(previous, dict):
        diffs = [
            f"{key} {_show(previous.get(key))} there, {_show(value)} here"
            for key, value in wanted.items()
            if previous.get(key) != value
        ]
        what = f"a Fashion-MNIST ingest with other settings ({'; '.join(diffs) or 'unknown'})"
        as_is = (
            f"use it as it is with --data {out}, "
            if previous.get("format") == "folder" and (out / "train").is_dir()
            else ""
        )
    else:
        what = f"files without a readable {MANIFEST} (an interrupted or other ingest)"
        as_is = ""
    options = (" --jpeg" if jpeg else "") + (f" --size {size}" if size else "")
    options += f" --limit {limit}" if limit else ""
    if source_dir != Path(os.environ.get(FMNIST_DIR_ENV) or DEFAULT_FMNIST_DIR):
        options += f" --source-dir {source_dir}"
    return (
        f"{out} already holds {what}, so --data fmnist cannot ingest there; {as_is}replace it "
        f"with `dataplane ingest fmnist {out} --overwrite{options}` and run this again, or "
        "ingest into another folder with --data-root DIR"
    )


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def cache_available() -> bool:
    """Whether this installation's ``dataplane`` has the augmented-sample cache."""
    try:
        from dataplane import CacheConfig  # noqa: F401
    except ImportError:
        return False
    return True


def build_loaders(
    schedule: Schedule | str,
    splits: DatasetSplits,
    *,
    batch_size: int = 256,
    val_batch_size: int | None = None,
    seed: int = 0,
    size: int | None = None,
    channels: int | None = None,
    device: str | None = None,
    num_workers: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    variants: int = 2,
    max_bytes: int | None = None,
    train_data: Any | None = None,
    recipe: Any | None = None,
    eval_recipe: Any | None = None,
    transform_options: dict[str, Any] | None = None,
    on_corrupt: OnCorrupt | str = "raise",
) -> ScheduleLoaders:
    """Build the training (and phase-2) and validation loaders of ``schedule``.

    Parameters
    ----------
    schedule : Schedule or str
        ``fresh``, ``perfect`` or ``torch``.
    splits : DatasetSplits
        The dataset's folders.
    batch_size, val_batch_size : int
        Samples per training / validation batch (per rank).
    seed : int
        Order and augmentation seed.
    size, channels : int, optional
        Output side and channels (default: inferred from the dataset's images, as
        ``dataplane.Loader`` does; the ``torch`` loader: from its first image).
    device : {"cpu", "cuda"}, optional
        Where the DALI loaders run (default: CUDA when available).
    num_workers : int, optional
        Worker processes of the ``torch`` loader (default: cores).
    cache_dir : path
        ``perfect`` only: the cache's folder.
    variants : int
        ``perfect`` only: augmented variants cached per sample.
    max_bytes : int, optional
        ``perfect`` only: the cache's size bound in bytes.
    train_data : optional
        What the DALI training loaders read instead of ``splits.train`` (for
        example a list of ``(path, label)`` for a subset).
    recipe, eval_recipe : optional
        Recipes (names or ``preprocessing.Recipe``) of the DALI loaders.
    transform_options : dict, optional
        Extra :class:`~trainers.torch_baseline.Transform` fields for ``torch``.
    on_corrupt : dataplane.OnCorrupt or {"raise", "skip"}
        What the DALI loaders (training and validation) do with a corrupt
        image, as ``dataplane.Loader``'s ``on_corrupt``; ``torch`` always raises.

    Raises
    ------
    TrainerConfigError
        A bad ``on_corrupt``, ``on_corrupt="skip"`` with ``torch``, or a
        ``perfect`` schedule without a cache directory or cache support.
    TrainerDataError
        The validation split's class folders differ from the training split's
        (labels are positions in the sorted folder names, so they would not match).
    """
    from dataplane import OnCorrupt

    sched = Schedule.parse(schedule)
    val_bs = val_batch_size or batch_size
    try:
        on_corrupt = OnCorrupt(on_corrupt)
    except ValueError:
        raise TrainerConfigError(
            f"on_corrupt must be 'raise' or 'skip' (--on-corrupt), got {on_corrupt!r}"
        ) from None
    if sched is Schedule.TORCH and on_corrupt is not OnCorrupt.RAISE:
        raise TrainerConfigError(
            "on_corrupt='skip' (--on-corrupt skip) needs the dataplane loaders of the fresh "
            "and perfect schedules; the torch baseline stops at a corrupt image: remove "
            "--on-corrupt skip, or use schedule fresh"
        )
    if sched is Schedule.TORCH:
        from trainers.torch_baseline import TorchBaselineLoader

        common: dict[str, Any] = {"size": size, "channels": channels, "num_workers": num_workers}
        train = TorchBaselineLoader(
            splits.train,
            batch_size=batch_size,
            train=True,
            seed=seed,
            transform_options=transform_options,
            **common,
        )
        eval_options = {
            k: v
            for k, v in (transform_options or {}).items()
            if k in ("crop_fraction", "mean", "std")
        }
        val = TorchBaselineLoader(
            splits.val,
            batch_size=val_bs,
            train=False,
            shuffle=False,
            seed=seed,
            transform_options=eval_options,
            **common,
        )
        _check_classes(train, val, splits)
        return ScheduleLoaders(train=train, val=val)

    from dataplane import Loader

    shape: dict[str, Any] = {
        "size": size,
        "channels": channels,
        "device": device,
        "on_corrupt": on_corrupt,
    }
    source = train_data if train_data is not None else splits.train

    def fresh_loader() -> Any:
        return Loader(
            source,
            batch_size=batch_size,
            recipe=recipe or "train",
            shuffle=True,
            seed=seed,
            **shape,
        )

    val_loader: Any = Loader(
        splits.val, batch_size=val_bs, recipe=eval_recipe or "eval", shuffle=False, **shape
    )
    fresh = fresh_loader()
    _check_classes(fresh, val_loader, splits)
    if sched is Schedule.FRESH:
        return ScheduleLoaders(train=fresh, val=val_loader)
    if cache_dir is None:
        raise TrainerConfigError(
            "schedule 'perfect' needs a cache directory (--cache-dir / cache_dir=)"
        )
    if isinstance(variants, bool) or not isinstance(variants, int) or variants < 1:
        raise TrainerConfigError(f"variants must be an integer >= 1, got {variants!r}")
    try:
        from dataplane import CacheConfig
    except ImportError as exc:
        raise TrainerConfigError(
            "schedule 'perfect' needs the augmented-sample cache (dataplane.CacheConfig), "
            "which this installation of dataplane lacks; use --schedule fresh or torch, "
            "or upgrade dataplane"
        ) from exc
    cache_kwargs: dict[str, Any] = {"variants": variants}
    if max_bytes is not None:
        cache_kwargs["max_bytes"] = max_bytes
    cached = Loader(
        source,
        batch_size=batch_size,
        recipe=recipe or "train",
        shuffle=True,
        seed=seed,
        cache=CacheConfig(cache_dir, **cache_kwargs),  # type: ignore[arg-type]  # validated there
        **shape,
    )
    return ScheduleLoaders(train=cached, val=val_loader, fresh=fresh)


def _class_names(loader: Any) -> list[str] | None:
    """The class folder names of a loader's data, in label order, when it has them."""
    for holder in (getattr(loader, "source", None), getattr(loader, "dataset", None)):
        classes = getattr(holder, "classes", None)
        if classes is not None:
            return [str(c) for c in classes]
    return None


def _listed(names: list[str], most: int = 10) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" ... ({len(names) - most} more)" if len(names) > most else "")


def _check_classes(train: Any, val: Any, splits: DatasetSplits) -> None:
    """Refuse a validation split whose class folders are not the training split's.

    Raises
    ------
    TrainerDataError
        Both loaders list their classes and the lists differ.
    """
    train_classes, val_classes = _class_names(train), _class_names(val)
    if train_classes is None or val_classes is None or train_classes == val_classes:
        return
    only_val = [c for c in val_classes if c not in train_classes]
    only_train = [c for c in train_classes if c not in val_classes]
    parts = []
    if only_val:
        parts.append(f"only in {splits.val_split}/: {_listed(only_val)}")
    if only_train:
        parts.append(f"only in {splits.train.name}/: {_listed(only_train)}")
    raise TrainerDataError(
        f"the validation split {splits.val} has other class folders than the training split "
        f"{splits.train} ({'; '.join(parts)}); a label is the position of its folder's name "
        "in sorted order, so validation would score the wrong classes: give both splits the "
        "same class folders"
    )
