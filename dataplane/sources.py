"""Where samples come from: encoded image bytes and integer labels, by index.

A :class:`Source` is a random-access view of a labelled image dataset. It hands
out *encoded* bytes (PNG, JPEG, ...); decoding is the pipeline's job. Reading a
source never writes to the dataset.

Implementations
---------------
:class:`ImageFolderSource`
    One sub-folder per class; classes are the sorted sub-folder names (label 0 is
    the first), like torchvision's ``ImageFolder``. A class folder without images
    stays a class, with an :class:`EmptyClassWarning` naming it.
:class:`FileListSource`
    An explicit list of ``(path, label)``.
:class:`ParquetSource`
    A Parquet file, or a folder of ``*.parquet`` files, with an encoded-image
    bytes column and an integer label column.

:func:`open_source` picks one from a path.

Each source fingerprints its dataset (:meth:`Source.fingerprint`, a hash of its files
by :func:`~dataplane.fingerprint.files_identity`); :mod:`dataplane.fingerprint` holds
the fingerprint and the summary in words of any source.

A folder is one split of a dataset (``data/fmnist/train``), never a dataset's
root: a folder whose sub-folders are all split names (:data:`SPLIT_NAMES`)
holding classes or Parquet files, or one holding the manifest ``dataplane
ingest`` writes (:data:`INGEST_MANIFEST`), is refused with
:class:`~dataplane.errors.DatasetRootError` naming a split to give instead.
Read as an image folder its splits would become its classes, and read as Parquet
its splits' rows would be merged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dataplane.errors import (
    ConfigError,
    DatasetError,
    DatasetRootError,
    EmptyClassWarning,
    warn_user,
)
from dataplane.fingerprint import DatasetSummary, files_identity

#: File extensions treated as images by :class:`ImageFolderSource` (lower case).
IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp", ".jp2"}
)

#: Sub-folder names (compared in lower case) that make a folder a dataset root when
#: they are all its sub-folders (see :func:`check_not_dataset_root`).
SPLIT_NAMES = frozenset({"train", "val", "validation", "test"})

#: The manifest ``dataplane ingest`` writes at the root of the dataset it writes.
INGEST_MANIFEST = "ingest.json"


@runtime_checkable
class Source(Protocol):
    """A labelled image dataset with random access by index.

    Attributes
    ----------
    num_classes : int
        Labels lie in ``range(num_classes)``.
    """

    num_classes: int

    def __len__(self) -> int:
        """Number of samples."""
        ...

    def read(self, index: int) -> bytes:
        """Encoded bytes of sample ``index`` (raises ``DataError``/``OSError`` on failure)."""
        ...

    def label(self, index: int) -> int:
        """Label of sample ``index``, in ``range(num_classes)``."""
        ...

    def describe(self, index: int) -> str:
        """Where sample ``index`` lives: a file path, or ``file.parquet#row``."""
        ...

    def fingerprint(self) -> str:
        """Stable hash of the dataset's identity (paths, sizes, mtimes, labels)."""
        ...


def _check_labels(labels: np.ndarray, num_classes: int | None, where: str) -> int:
    """Validate integer labels; return the number of classes."""
    if labels.size == 0:
        return 0 if num_classes is None else num_classes
    if not np.issubdtype(labels.dtype, np.integer):
        raise DatasetError(f"labels of {where} must be integers, found dtype {labels.dtype}")
    low, high = int(labels.min()), int(labels.max())
    if low < 0:
        bad = int(np.flatnonzero(labels < 0)[0])
        raise DatasetError(
            f"label {low} of {where} (sample {bad}) is negative; labels must be class "
            "indices 0..num_classes-1"
        )
    if num_classes is not None and high >= num_classes:
        bad = int(np.flatnonzero(labels >= num_classes)[0])
        raise DatasetError(
            f"label {high} of {where} (sample {bad}) is out of range for num_classes="
            f"{num_classes}; fix the label or raise num_classes"
        )
    return num_classes if num_classes is not None else high + 1


def warn_empty_classes(
    root: Path,
    classes: Sequence[str],
    labels: Iterable[int],
    *,
    extensions: Iterable[str] = IMAGE_EXTENSIONS,
) -> None:
    """Issue an :class:`EmptyClassWarning` naming the class folders without images.

    Parameters
    ----------
    root : Path
        The image folder.
    classes : sequence of str
        Its class folder names, in label order.
    labels : iterable of int
        The label of each image found.
    extensions : iterable of str
        The file extensions looked for (named in the warning).
    """
    present = set(labels)
    empty = [(i, name) for i, name in enumerate(classes) if i not in present]
    if not empty:
        return
    shown = ", ".join(f"{name} (label {i})" for i, name in empty[:5])
    shown += f" and {len(empty) - 5} more" if len(empty) > 5 else ""
    what = (
        f"class folder {shown} of {root} holds no images; it stays a class"
        if len(empty) == 1
        else f"{len(empty)} of the {len(classes)} class folders of {root} hold no images: "
        f"{shown}; each stays a class"
    )
    warn_user(
        f"{what} without samples (its label is kept, so the labels of the other classes do "
        "not move). Remove a folder that is not a class, or add its images (looked for "
        f"{', '.join(sorted(extensions))})",
        EmptyClassWarning,
    )


def _not_integer_labels(labels: np.ndarray, column: str, where: Path) -> str:
    """Why the labels of Parquet column ``column`` cannot be used, and how to fix them."""
    found = f"found {labels.dtype}"
    first = labels[0] if labels.size else None
    if isinstance(first, (str, bytes)):
        found = f"found names such as {first!r}"
        fix = (
            "map each class name to its index 0..K-1 (e.g. its position in the sorted list "
            "of names) and write the column as int64; the names can be kept, in that order, "
            "as a JSON list under the schema metadata key 'class_names'"
        )
    elif np.issubdtype(labels.dtype, np.floating):
        fix = "write the column as int64 class indices 0..K-1"
    else:
        fix = "write the column as int64 class indices 0..K-1, one per row"
    return f"label column {column!r} of {where} must hold integer class indices, {found}; {fix}"


def _holds_class_folders(folder: Path) -> bool:
    """True when ``folder`` has a visible sub-folder and no image directly inside."""
    has_subfolder = False
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                has_subfolder = True
            elif os.path.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS:
                return False
    return has_subfolder


def _holds_parquet(folder: Path) -> bool:
    """True when ``folder`` holds a ``*.parquet`` file at any depth."""
    return next((f for f in folder.rglob("*.parquet") if f.is_file()), None) is not None


def check_not_dataset_root(root: str | os.PathLike[str], *, parquet: bool = False) -> None:
    """Refuse a dataset's root where one split (an image folder, a Parquet folder) is expected.

    ``root`` is a dataset root when it holds :data:`INGEST_MANIFEST` (``dataplane
    ingest`` writes it beside ``train/`` and ``test/``), or when its visible
    sub-folders are all split names (:data:`SPLIT_NAMES`, at least one) and each
    holds what a split holds: class sub-folders and no images directly (an image
    folder), or ``*.parquet`` files while ``root`` holds none directly (Parquet). An
    image folder whose classes happen to be called ``train`` and ``test`` and hold
    their images directly is a legitimate image folder and passes.

    Parameters
    ----------
    root : path
        An existing folder.
    parquet : bool
        Check for a Parquet dataset instead of an image folder.

    Raises
    ------
    DatasetRootError
        If ``root`` looks like a dataset root; the message names a split to give
        instead, e.g. ``data/fmnist/train``.
    """
    root = Path(root)
    subfolders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    splits = tuple(p.name for p in subfolders if p.name.lower() in SPLIT_NAMES)
    manifest = (root / INGEST_MANIFEST).is_file()
    if not manifest:
        if not splits or len(splits) != len(subfolders):
            return
        if parquet:
            if any(f.is_file() for f in root.glob("*.parquet")):
                return
            if not all(_holds_parquet(p) for p in subfolders):
                return
        elif not all(_holds_class_folders(p) for p in subfolders):
            return
    reasons = []
    if splits:
        many = len(splits) > 1
        reasons.append(
            f"its sub-folder{'s' if many else ''} {', '.join(splits)} "
            f"{'are splits' if many else 'is a split'}"
        )
    if manifest:
        reasons.append(f"it holds {INGEST_MANIFEST} (written by `dataplane ingest`)")
    if parquet:
        effect = "; read as one Parquet dataset, the rows of its splits would be merged"
    elif subfolders:
        n = len(subfolders)
        what = "splits" if n == len(splits) else "sub-folders"
        effect = (
            f"; read as an image folder, its {n} {what} would become {n} classes"
            if n > 1
            else f"; read as an image folder, its one {what[:-1]} would become its one class"
        )
    else:
        effect = ""
    lowered = {name.lower(): name for name in splits}
    example = root / lowered.get("train", splits[0] if splits else "train")
    raise DatasetRootError(
        f"{root} looks like a dataset root, not one split: {', and '.join(reasons)}{effect}. "
        f"Give one split instead, e.g. {example}",
        root=str(root),
        splits=splits,
    )


class _FileBacked:
    """Shared part of the sources whose samples are one file each."""

    _paths: list[Path]
    _labels: np.ndarray
    num_classes: int

    def __len__(self) -> int:
        return len(self._paths)

    def read(self, index: int) -> bytes:
        # os.open/os.read instead of Path.read_bytes: no buffered file object per read,
        # about 11 us instead of 16 us per small JPEG (measured on the opencv-doc files).
        fd = os.open(self._paths[index], os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            data = os.read(fd, size)
            while len(data) < size:  # a short read (network file systems): read the rest
                more = os.read(fd, size - len(data))
                if not more:  # the file shrank meanwhile
                    break
                data += more
            return data
        finally:
            os.close(fd)

    def label(self, index: int) -> int:
        return int(self._labels[index])

    def labels(self) -> np.ndarray:
        """All labels (int64 array, a copy)."""
        return self._labels.copy()

    def describe(self, index: int) -> str:
        return str(self._paths[index])

    def _where(self) -> tuple[str, str]:
        """Kind and location, for :class:`DatasetSummary`."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        return self.fingerprint_and_summary()[0]

    def fingerprint_and_summary(self) -> tuple[str, DatasetSummary]:
        """:meth:`fingerprint` and a :class:`DatasetSummary`, in one pass over the files."""
        fingerprint, files = files_identity(self._paths, extra=self._labels.tolist())
        kind, location = self._where()
        summary = DatasetSummary(
            kind=kind,
            location=location,
            num_classes=self.num_classes,
            covers="image paths, sizes, modification times and labels",
            files=files,
        )
        return fingerprint, summary


class ImageFolderSource(_FileBacked):
    """Images stored one sub-folder per class (torchvision ``ImageFolder`` layout).

    Parameters
    ----------
    root : path
        Folder whose sub-folders are the classes. Class ``i`` is the ``i``-th
        sub-folder name in sorted order; files inside are taken in sorted order,
        recursively, if their extension is in :data:`IMAGE_EXTENSIONS`. Hidden
        entries (starting with ``.``) are ignored.

    Warns
    -----
    EmptyClassWarning
        If some class folders hold no images (others do): unlike torchvision's
        ``ImageFolder``, which raises ``FileNotFoundError`` unless
        ``allow_empty=True``, they are kept as classes without samples, so that a
        split missing some classes keeps the labels (and ``num_classes``) of the
        splits that have them all; the warning names the folders, in case they
        are not classes at all.

    Raises
    ------
    DatasetRootError
        If ``root`` is a dataset's root rather than one split (see
        :func:`check_not_dataset_root`): ``data/fmnist`` instead of
        ``data/fmnist/train``.
    DatasetError
        If ``root`` is missing, has no class sub-folders, or holds no images.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise DatasetError(
                f"dataset folder {self.root} does not exist; create it (e.g. `dataplane "
                "ingest fmnist DIR`) or fix the path"
            )
        check_not_dataset_root(self.root)
        classes = sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )
        if not classes:
            raise DatasetError(
                f"{self.root} has no class sub-folders; an image folder needs one sub-folder "
                "per class holding that class's images"
            )
        paths: list[Path] = []
        labels: list[int] = []
        for label, name in enumerate(classes):
            for dirpath, dirnames, filenames in os.walk(self.root / name):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for filename in sorted(filenames):
                    if filename.startswith("."):
                        continue
                    if os.path.splitext(filename)[1].lower() in IMAGE_EXTENSIONS:
                        paths.append(Path(dirpath) / filename)
                        labels.append(label)
        if not paths:
            raise DatasetError(
                f"no images found under {self.root} (looked for "
                f"{', '.join(sorted(IMAGE_EXTENSIONS))} in {len(classes)} class folders)"
            )
        warn_empty_classes(self.root, classes, labels)
        self.classes: list[str] = classes
        self.num_classes = len(classes)
        self._paths = paths
        self._labels = np.asarray(labels, dtype=np.int64)

    def __repr__(self) -> str:
        return (
            f"ImageFolderSource({str(self.root)!r}, {len(self)} images, {self.num_classes} classes)"
        )

    def _where(self) -> tuple[str, str]:
        return "image folder", str(self.root)


class FileListSource(_FileBacked):
    """An explicit list of ``(path, label)`` pairs.

    Parameters
    ----------
    items : sequence of (path, int)
        Image files and their labels.
    num_classes : int, optional
        Number of classes; labels must be below it. Default: largest label + 1.
    check_files : bool
        Check at construction that every file exists (one ``stat`` per file).
        With False a missing file fails when it is read, as an unreadable
        sample: a :class:`~dataplane.Loader` with ``on_corrupt="skip"`` skips and
        counts it (the Loader builds its own file list that way when given a list
        and ``on_corrupt="skip"``).

    Raises
    ------
    DatasetError
        If the list is empty, a file is missing (with ``check_files``), or a label
        is negative or ``>= num_classes``.
    """

    def __init__(
        self,
        items: Sequence[tuple[str | os.PathLike[str], int]],
        *,
        num_classes: int | None = None,
        check_files: bool = True,
    ) -> None:
        try:
            pairs = [(Path(p), lab) for p, lab in items]
        except (TypeError, ValueError):
            raise ConfigError(
                "a file list must be a sequence of (path, label) pairs, e.g. "
                "[('img/0.png', 3), ...]"
            ) from None
        if not pairs:
            raise DatasetError("the file list is empty; give at least one (path, label) pair")
        for path, lab in pairs:
            if isinstance(lab, bool) or not isinstance(lab, int | np.integer):
                raise DatasetError(f"label of {path} must be an int, not {lab!r}")
        labels = np.asarray([int(lab) for _, lab in pairs], dtype=np.int64)
        if num_classes is not None and (
            isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1
        ):
            raise ConfigError(f"num_classes must be a positive int, not {num_classes!r}")
        self.num_classes = _check_labels(labels, num_classes, "the file list")
        self._paths = [p for p, _ in pairs]
        self._labels = labels
        if check_files:
            missing = self.missing()
            if missing:
                raise DatasetError(
                    f"{len(missing)} file(s) of the file list do not exist, e.g. {missing[0]}; "
                    "fix the paths or remove those entries (or pass check_files=False and "
                    "give the Loader on_corrupt='skip' to skip and count them)"
                )

    def missing(self) -> list[Path]:
        """The listed paths that are not files (missing), in list order (one ``stat`` each)."""
        return [p for p in self._paths if not p.is_file()]

    def __repr__(self) -> str:
        return f"FileListSource({len(self)} images, {self.num_classes} classes)"

    def _where(self) -> tuple[str, str]:
        try:
            folder = os.path.commonpath([os.fspath(p.parent) for p in self._paths])
        except ValueError:  # absolute and relative paths mixed
            folder = ""
        return "file list", folder


class ParquetSource:
    """Encoded images and labels stored in Parquet (a file or a folder of files).

    Parameters
    ----------
    path : path
        A ``.parquet`` file, or a folder whose ``*.parquet`` files (recursively,
        sorted) form the dataset.
    image_column : str
        Column of encoded image bytes (``binary``).
    label_column : str
        Column of integer labels.
    num_classes : int, optional
        Number of classes; default: ``class_names`` in the schema metadata when
        present, else largest label + 1.

    Notes
    -----
    Labels are read at construction; the bytes column of a file is read on first
    access and kept in memory (it is the dataset's encoded, compressed size).

    Raises
    ------
    DatasetRootError
        If ``path`` is a dataset's root rather than one split (see
        :func:`check_not_dataset_root`).
    DatasetError
        If the path is missing, holds no rows, lacks a column, or a label is out
        of range.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        image_column: str = "image",
        label_column: str = "label",
        num_classes: int | None = None,
    ) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path = Path(path)
        if self.path.is_file():
            files = [self.path]
        elif self.path.is_dir():
            check_not_dataset_root(self.path, parquet=True)
            files = sorted(p for p in self.path.rglob("*.parquet") if p.is_file())
        else:
            raise DatasetError(
                f"Parquet dataset {self.path} does not exist; create it (e.g. `dataplane "
                "ingest fmnist DIR --format parquet`) or fix the path"
            )
        if not files:
            raise DatasetError(f"no *.parquet files under {self.path}")
        self.image_column = image_column
        self.label_column = label_column
        self._files = files
        self._offsets = [0]
        label_parts: list[np.ndarray] = []
        meta_classes: int | None = None
        for file in files:
            try:
                pf = pq.ParquetFile(file)
            except (OSError, pa.ArrowException) as exc:
                raise DatasetError(f"cannot read Parquet file {file}: {exc}") from exc
            names = pf.schema_arrow.names
            for column in (image_column, label_column):
                if column not in names:
                    raise DatasetError(
                        f"Parquet file {file} has no column {column!r} (columns: "
                        f"{', '.join(names)}); encoded images are read from column "
                        f"{image_column!r} and labels from column {label_column!r}: rename the "
                        "file's columns to those (e.g. with pyarrow's Table.rename_columns, then "
                        "write the file again), or, from Python, name them with "
                        "Loader(ParquetSource(path, image_column=..., label_column=...))"
                    )
            if not pa.types.is_binary(pf.schema_arrow.field(image_column).type) and not (
                pa.types.is_large_binary(pf.schema_arrow.field(image_column).type)
            ):
                raise DatasetError(
                    f"column {image_column!r} of {file} must hold encoded image bytes "
                    f"(binary), found {pf.schema_arrow.field(image_column).type}"
                )
            column_data = pf.read(columns=[label_column]).column(0)
            if column_data.null_count:
                first = int(np.flatnonzero(column_data.is_null().to_numpy(zero_copy_only=False))[0])
                raise DatasetError(
                    f"label column {label_column!r} of {file} has {column_data.null_count} null "
                    f"value(s) (first at row {first}); every row needs an integer label: fill "
                    "or drop the rows without one"
                )
            labels = column_data.to_numpy()
            label_parts.append(np.asarray(labels))
            self._offsets.append(self._offsets[-1] + len(labels))
            metadata = pf.schema_arrow.metadata or {}
            if b"class_names" in metadata and meta_classes is None:
                try:
                    meta_classes = len(json.loads(metadata[b"class_names"]))
                except ValueError:
                    meta_classes = None
        if self._offsets[-1] == 0:
            raise DatasetError(f"Parquet dataset {self.path} has no rows")
        all_labels = np.concatenate(label_parts)
        if not np.issubdtype(all_labels.dtype, np.integer):
            raise DatasetError(_not_integer_labels(all_labels, label_column, self.path))
        self._labels = all_labels.astype(np.int64)
        self.num_classes = _check_labels(
            self._labels, num_classes if num_classes is not None else meta_classes, str(self.path)
        )
        self._images: dict[int, Any] = {}

    def __len__(self) -> int:
        return self._offsets[-1]

    def __repr__(self) -> str:
        return f"ParquetSource({str(self.path)!r}, {len(self)} rows, {self.num_classes} classes)"

    def _locate(self, index: int) -> tuple[int, int]:
        if not 0 <= index < len(self):
            raise IndexError(f"sample index {index} out of range for {len(self)} rows")
        file_no = int(np.searchsorted(self._offsets, index, side="right")) - 1
        return file_no, index - self._offsets[file_no]

    def read(self, index: int) -> bytes:
        import pyarrow.parquet as pq

        file_no, row = self._locate(index)
        column = self._images.get(file_no)
        if column is None:
            column = pq.read_table(self._files[file_no], columns=[self.image_column]).column(0)
            self._images[file_no] = column
        value = column[row].as_py()
        return b"" if value is None else value

    def label(self, index: int) -> int:
        return int(self._labels[index])

    def labels(self) -> np.ndarray:
        """All labels (int64 array, a copy)."""
        return self._labels.copy()

    def describe(self, index: int) -> str:
        file_no, row = self._locate(index)
        return f"{self._files[file_no]}#{row}"

    def fingerprint(self) -> str:
        return self.fingerprint_and_summary()[0]

    def fingerprint_and_summary(self) -> tuple[str, DatasetSummary]:
        """:meth:`fingerprint` and a :class:`DatasetSummary`, in one pass over the files."""
        fingerprint, files = files_identity(
            self._files, extra={"image_column": self.image_column, "label": self.label_column}
        )
        summary = DatasetSummary(
            kind="Parquet",
            location=str(self.path),
            num_classes=self.num_classes,
            covers="Parquet file paths, sizes and modification times, and column names",
            files=files,
        )
        return fingerprint, summary


def open_source(path: str | os.PathLike[str]) -> Source:
    """Open the dataset at ``path``, detecting its kind.

    A ``.parquet`` file, or a folder holding ``*.parquet`` files (at any depth)
    and no class sub-folders of images, opens as :class:`ParquetSource`; any other
    folder as :class:`ImageFolderSource`.

    Raises
    ------
    DatasetRootError
        If ``path`` is a dataset's root (``train/``, ``test/`` ... or the output of
        ``dataplane ingest``) rather than one split.
    DatasetError
        If ``path`` does not exist or holds no recognisable dataset.
    """
    p = Path(path)
    if not p.exists():
        raise DatasetError(
            f"dataset {p} does not exist; create it (e.g. `dataplane ingest fmnist DIR`) or "
            "fix the path"
        )
    if p.is_file():
        if p.suffix == ".parquet":
            return ParquetSource(p)
        raise DatasetError(
            f"{p} is a file but not a .parquet file; give an image folder (one sub-folder per "
            "class), a Parquet file or folder, or a FileListSource"
        )
    has_images_in_subdirs = any(
        child.is_dir()
        and not child.name.startswith(".")
        and any(f.suffix.lower() in IMAGE_EXTENSIONS for f in child.iterdir())
        for child in p.iterdir()
    )
    if has_images_in_subdirs:
        return ImageFolderSource(p)
    # At any depth (e.g. hive-partitioned ``split=train/shard=0/part-0.parquet``), as
    # ParquetSource reads them; the walk stops at the first file found.
    if next((f for f in p.rglob("*.parquet") if f.is_file()), None) is not None:
        return ParquetSource(p)
    return ImageFolderSource(p)
