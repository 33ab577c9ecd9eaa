"""``dataplane ingest``: turn a raw dataset into an image folder or a Parquet dataset.

Fashion-MNIST comes from Debian's ``dataset-fashion-mnist`` as IDX files. Each
split becomes ``OUT/train`` and ``OUT/test``:

* ``--format folder``: one sub-folder per class (``00_t-shirt_top`` ...), one
  PNG (or JPEG with ``--jpeg``) per image, like torchvision's ImageFolder;
* ``--format parquet``: ``part-00000.parquet`` files with an ``image`` column
  (encoded bytes) and a ``label`` column (int64).

Images stay encoded; the loader decodes them with DALI. A manifest
``OUT/ingest.json`` records what was written: running the same command again is
a no-op, and a different one refuses to touch existing output unless
``--overwrite`` is given (which replaces ``OUT/train``, ``OUT/test`` and the
manifest, nothing else). Each split is written to a temporary folder and
renamed into place when complete.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import numpy as np

from dataplane.errors import DataplaneError, DatasetError, IngestConflictError
from dataplane.idx import FASHION_MNIST_CLASSES, read_idx
from dataplane.sources import INGEST_MANIFEST

#: Debian's location of the Fashion-MNIST IDX files (package ``dataset-fashion-mnist``).
DEFAULT_FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
#: Environment variable naming another folder of those files (``--source-dir``'s default).
FMNIST_DIR_ENV = "DATAPLANE_FMNIST_DIR"
MANIFEST = INGEST_MANIFEST
SPLITS = {"train": "train", "test": "t10k"}
_PARQUET_ROWS_PER_GROUP = 4096
_Command = TypeVar("_Command", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class IngestResult:
    """What :func:`ingest_fmnist` did.

    Attributes
    ----------
    out : Path
        Output folder.
    counts : dict
        Images written (or already present) per split.
    skipped : bool
        True when identical output already existed and nothing was written.
    """

    out: Path
    counts: dict[str, int]
    skipped: bool


def _fmnist_files(source_dir: Path, prefix: str) -> tuple[Path, Path]:
    images = source_dir / f"{prefix}-images-idx3-ubyte.gz"
    labels = source_dir / f"{prefix}-labels-idx1-ubyte.gz"
    missing = [p for p in (images, labels) if not p.is_file()]
    if missing:
        raise DatasetError(
            f"Fashion-MNIST IDX file(s) not found: {', '.join(map(str, missing))}. "
            "Install them with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu), "
            f"or pass --source-dir (or set {FMNIST_DIR_ENV}) to the folder holding "
            f"{images.name} and {labels.name}"
        )
    return images, labels


def _encode(image: np.ndarray, *, jpeg: bool, size: int) -> bytes:
    from PIL import Image

    pil = Image.fromarray(image, mode="L") if image.ndim == 2 else Image.fromarray(image)
    if pil.size != (size, size):
        pil = pil.resize((size, size), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    if jpeg:
        pil.save(buf, format="JPEG", quality=90)
    else:
        pil.save(buf, format="PNG")
    return buf.getvalue()


def _encoded(
    images: np.ndarray, *, jpeg: bool, size: int, desc: str, progress: bool
) -> Iterator[bytes]:
    from tqdm import tqdm

    for image in tqdm(images, desc=desc, unit="img", disable=not progress, leave=False):
        yield _encode(image, jpeg=jpeg, size=size)


def _write_folder(
    tmp: Path,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    jpeg: bool,
    size: int,
    desc: str,
    progress: bool,
) -> None:
    ext = ".jpg" if jpeg else ".png"
    class_dirs = [tmp / f"{i:02d}_{name}" for i, name in enumerate(FASHION_MNIST_CLASSES)]
    for d in class_dirs:
        d.mkdir(parents=True)
    encoded = _encoded(images, jpeg=jpeg, size=size, desc=desc, progress=progress)
    for index, (data, label) in enumerate(zip(encoded, labels, strict=True)):
        (class_dirs[int(label)] / f"{index:05d}{ext}").write_bytes(data)


def _write_parquet(
    tmp: Path,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    jpeg: bool,
    size: int,
    desc: str,
    progress: bool,
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp.mkdir(parents=True)
    schema = pa.schema([("image", pa.binary()), ("label", pa.int64())]).with_metadata(
        {"class_names": json.dumps(list(FASHION_MNIST_CLASSES))}
    )
    encoded = _encoded(images, jpeg=jpeg, size=size, desc=desc, progress=progress)
    with pq.ParquetWriter(tmp / "part-00000.parquet", schema) as writer:
        chunk: list[bytes] = []
        start = 0
        for data in encoded:
            chunk.append(data)
            if len(chunk) == _PARQUET_ROWS_PER_GROUP:
                stop = start + len(chunk)
                writer.write_table(
                    pa.table(
                        {"image": chunk, "label": labels[start:stop].astype(np.int64)},
                        schema=schema,
                    )
                )
                start, chunk = stop, []
        if chunk:
            writer.write_table(
                pa.table({"image": chunk, "label": labels[start:].astype(np.int64)}, schema=schema)
            )


def ingest_fmnist(
    out: Path,
    *,
    fmt: str = "folder",
    jpeg: bool = False,
    size: int | None = None,
    limit: int | None = None,
    source_dir: Path = DEFAULT_FMNIST_DIR,
    overwrite: bool = False,
    progress: bool = True,
) -> IngestResult:
    """Write Fashion-MNIST's train and test splits under ``out``.

    Parameters
    ----------
    out : Path
        Output folder; ``out/train`` and ``out/test`` are created.
    fmt : {"folder", "parquet"}
        Image folder (one sub-folder per class) or Parquet dataset.
    jpeg : bool
        Encode as JPEG (quality 90) instead of PNG.
    size : int, optional
        Side of the written images in pixels (default 28, the native size).
    limit : int, optional
        Keep only the first ``limit`` images of each split.
    source_dir : Path
        Folder holding the four ``*-ubyte.gz`` IDX files.
    overwrite : bool
        Replace existing ``out/train``, ``out/test`` written with other settings.
    progress : bool
        Show a tqdm progress bar.

    Raises
    ------
    DatasetError
        If the IDX files are missing.
    IngestConflictError
        If ``out`` holds other output and ``overwrite`` is false.
    """
    if fmt not in ("folder", "parquet"):
        raise DatasetError(f"unknown format {fmt!r}; use 'folder' or 'parquet'")
    if size is not None and size <= 0:
        raise DatasetError(f"--size must be a positive number of pixels, not {size}")
    if limit is not None and limit <= 0:
        raise DatasetError(f"--limit must be a positive number of images, not {limit}")
    side = 28 if size is None else int(size)
    out = Path(out)
    files = {split: _fmnist_files(Path(source_dir), prefix) for split, prefix in SPLITS.items()}
    settings = {"dataset": "fmnist", "format": fmt, "jpeg": jpeg, "size": side, "limit": limit}
    manifest_path = out / MANIFEST
    targets = [out / split for split in SPLITS]
    if manifest_path.is_file():
        try:
            previous = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            previous = {}
        if previous.get("settings") == settings and all(t.is_dir() for t in targets):
            return IngestResult(out=out, counts=dict(previous.get("counts", {})), skipped=True)
    existing = [t for t in [*targets, manifest_path] if t.exists()]
    if existing and not overwrite:
        raise IngestConflictError(
            f"{out} already holds {', '.join(p.name for p in existing)} written with other "
            "settings (or an interrupted run); pass --overwrite to replace them, or choose "
            "another output folder"
        )
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    writer = _write_folder if fmt == "folder" else _write_parquet
    for split, (images_path, labels_path) in files.items():
        images = read_idx(images_path)
        labels = read_idx(labels_path)
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise DatasetError(
                f"{images_path} and {labels_path} do not hold matching images (N, H, W) and "
                "labels (N,)"
            )
        if limit is not None:
            images, labels = images[:limit], labels[:limit]
        tmp = out / f".{split}.tmp-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        try:
            writer(tmp, images, labels, jpeg=jpeg, size=side, desc=split, progress=progress)
            target = out / split
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        counts[split] = int(len(images))
    if manifest_path.exists():
        manifest_path.unlink()
    manifest_path.write_text(json.dumps({"settings": settings, "counts": counts}, indent=2))
    return IngestResult(out=out, counts=counts, skipped=False)


def source_dir_option(more_help: str = "") -> Callable[[_Command], _Command]:
    """``--source-dir`` (env ``DATAPLANE_FMNIST_DIR``): the folder of the Fashion-MNIST
    IDX files, as a ``Path``; ``more_help`` is appended to its help.

    Taken by ``dataplane ingest`` and by the commands that ingest Fashion-MNIST
    themselves (``dataplane train`` and ``dataplane doctor`` with ``--data fmnist``),
    so that the "IDX file(s) not found" message holds for each of them.
    """
    return click.option(
        "--source-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar=FMNIST_DIR_ENV,
        default=DEFAULT_FMNIST_DIR,
        show_default=True,
        help=f"Folder of the Fashion-MNIST IDX files (env {FMNIST_DIR_ENV})." + more_help,
    )


@click.command("ingest")
@click.argument("dataset", type=click.Choice(["fmnist"]))
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["folder", "parquet"]),
    default="folder",
    show_default=True,
    help="Image folder (one sub-folder per class) or Parquet.",
)
@click.option("--jpeg", is_flag=True, help="Encode as JPEG (quality 90) instead of PNG.")
@click.option(
    "--size",
    type=click.IntRange(min=1),
    default=None,
    help="Side of the written images in pixels [default: 28, native].",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Keep only the first N images of each split.",
)
@source_dir_option()
@click.option("--overwrite", is_flag=True, help="Replace OUT/train and OUT/test if present.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
def ingest_command(
    dataset: str,
    out: Path,
    fmt: str,
    jpeg: bool,
    size: int | None,
    limit: int | None,
    source_dir: Path,
    overwrite: bool,
    progress: bool,
) -> None:
    """Write DATASET (fmnist: Debian's Fashion-MNIST IDX files) to OUT/train and OUT/test."""
    try:
        result = ingest_fmnist(
            out,
            fmt=fmt,
            jpeg=jpeg,
            size=size,
            limit=limit,
            source_dir=source_dir,
            overwrite=overwrite,
            progress=progress,
        )
    except DataplaneError as exc:
        raise click.ClickException(str(exc)) from exc
    counts = ", ".join(f"{split}: {n} images" for split, n in result.counts.items())
    if result.skipped:
        click.echo(f"{out} is already up to date ({counts}); nothing to do")
    else:
        click.echo(f"wrote {dataset} as {fmt} to {out} ({counts})")
