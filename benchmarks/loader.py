"""Loader throughput and memory against torch's DataLoader and bare DALI, in one run.

For each dataset (real JPEGs of Debian's ``opencv-doc`` at 224x224, and
Fashion-MNIST PNGs at 28x28), on the same cores and in one process:

* ``torch``: ``torch.utils.data.DataLoader`` with ``num_workers`` = available
  cores, PIL decode and the same train transforms written in plain PIL/torch
  (random resized crop, horizontal flip, to float, normalize); torchvision's
  transforms are used instead when torchvision imports;
* ``loader``: :class:`dataplane.Loader` with the ``train`` recipe, CPU;
* ``bare DALI``: the same graph (ROI decode of the random crop, resize, flip)
  with DALI's file reader and normalization fused into ``crop_mirror_normalize``,
  iterated with DALI's own ``DALIGenericIterator`` -- what one writes by hand.

Reported per system: images/s, the median of the epochs after the first (warm-up);
ratios loader/torch and loader/bare DALI; the main process's peak RSS per epoch (plus
workers for torch) and its growth from epoch to epoch. Numbers are noisy on shared machines:
compare the ratios, measured side by side. Writes JSON to benchmarks/results/.

Run: ``.venv/bin/python benchmarks/loader.py`` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import math
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (  # noqa: E402
    EpochTiming,
    fmnist_folder,
    format_table,
    jpeg_items,
    machine_info,
    time_epochs,
    write_results,
)


# -- the torch baseline ----------------------------------------------------------------
class PilTrainDataset:
    """Map-style dataset: PIL decode + random resized crop + flip + normalize (plain torch).

    Same parameters as the ``train`` recipe: area (0.08, 1), aspect ratio (3/4, 4/3),
    10 attempts then a center crop, bilinear resize, flip with probability 0.5.
    """

    def __init__(
        self,
        items: list[tuple[str, int]],
        size: int,
        channels: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
    ) -> None:
        import torch

        self.items = items
        self.size = size
        self.mode = "RGB" if channels == 3 else "L"
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)
        self.tv = None
        try:  # torchvision's transforms when it imports (it does not beside torch 2.13)
            from torchvision import transforms as T

            self.tv = T.Compose(
                [
                    T.RandomResizedCrop(size),
                    T.RandomHorizontalFlip(),
                    T.ToTensor(),
                    T.Normalize(mean, std),
                ]
            )
        except Exception:  # noqa: BLE001 - any import failure means "not available"
            self.tv = None

    def __len__(self) -> int:
        return len(self.items)

    def _crop_box(self, width: int, height: int) -> tuple[int, int, int, int]:
        area = width * height
        for _ in range(10):
            target = area * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            w = int(round(math.sqrt(target * ratio)))
            h = int(round(math.sqrt(target / ratio)))
            if 0 < w <= width and 0 < h <= height:
                x = random.randint(0, width - w)
                y = random.randint(0, height - h)
                return x, y, x + w, y + h
        side = min(width, height)
        x, y = (width - side) // 2, (height - side) // 2
        return x, y, x + side, y + side

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import torch
        from PIL import Image

        path, label = self.items[index]
        with Image.open(path) as image:
            image = image.convert(self.mode)
            if self.tv is not None:
                return self.tv(image), label
            box = self._crop_box(*image.size)
            image = image.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = torch.from_numpy(np.array(image, dtype=np.uint8))
        pixels = pixels.permute(2, 0, 1) if pixels.dim() == 3 else pixels.unsqueeze(0)
        tensor = pixels.to(torch.float32).div_(255.0).sub_(self.mean).div_(self.std)
        return tensor, label


def run_torch(items, recipe, batch_size: int, workers: int, epochs: int) -> list[EpochTiming]:  # type: ignore[no-untyped-def]
    import torch

    dataset = PilTrainDataset(items, recipe.size, recipe.channels, recipe.mean, recipe.std)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=True,
        prefetch_factor=2,
    )
    timings = time_epochs(lambda e: loader, epochs, lambda b: len(b[0]), include_children=True)
    return timings


# -- dataplane.Loader -------------------------------------------------------------------
def run_loader(  # type: ignore[no-untyped-def]
    items, recipe, batch_size: int, threads: int, epochs: int, device: str = "cpu"
) -> list[EpochTiming]:
    from dataplane import Loader

    loader = Loader(
        items,
        recipe=recipe,
        batch_size=batch_size,
        shuffle=True,
        seed=0,
        device=device,
        num_threads=threads,
    )

    def epoch(e: int) -> Loader:
        loader.set_epoch(e)
        return loader

    return time_epochs(epoch, epochs, lambda b: len(b[0]))


# -- bare DALI with DALI's PyTorch iterator --------------------------------------------------
def run_bare_dali(  # type: ignore[no-untyped-def]
    items, recipe, batch_size: int, threads: int, epochs: int, device: str = "cpu"
) -> list[EpochTiming]:
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    files = [str(p) for p, _ in items]
    labels = [int(label) for _, label in items]

    gpu = device == "cuda"

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=0 if gpu else None, seed=0)
    def pipe():  # type: ignore[no-untyped-def]
        jpegs, label = fn.readers.file(
            files=files, labels=labels, random_shuffle=True, name="Reader"
        )
        images = fn.decoders.image_random_crop(
            jpegs,
            device="mixed" if gpu else "cpu",
            output_type=types.RGB if recipe.channels == 3 else types.GRAY,
            random_area=[0.08, 1.0],
            random_aspect_ratio=[3 / 4, 4 / 3],
            num_attempts=10,
        )
        images = fn.resize(
            images, size=(recipe.size, recipe.size), interp_type=types.INTERP_LINEAR, antialias=True
        )
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            mean=[255 * m for m in recipe.mean],
            std=[255 * s for s in recipe.std],
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return images, label

    iterator = DALIGenericIterator(
        pipe(), ["data", "label"], reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL
    )

    def epoch(e: int) -> Any:
        if e:
            iterator.reset()
        return iterator

    timings = time_epochs(epoch, epochs, lambda b: len(b[0]["data"]))
    return timings


# -- datasets ------------------------------------------------------------------------------
def fmnist_items(limit: int, workdir: Path) -> list[tuple[str, int]]:
    from dataplane.sources import ImageFolderSource

    source = ImageFolderSource(fmnist_folder(limit, workdir))
    return [(source.describe(i), source.label(i)) for i in range(len(source))]


def summary(timings: list[EpochTiming]) -> dict[str, Any]:
    # The first epoch warms up (pipeline build, page cache, first checks); the median of
    # the others is reported, less sensitive to a single noisy epoch than the last one.
    steady = timings[1:] or timings
    return {
        "images_per_second": statistics.median(t.images_per_second for t in steady),
        "epochs": [
            {
                "images": t.images,
                "seconds": t.seconds,
                "images_per_second": t.images_per_second,
                "peak_rss_bytes": t.peak_rss,
            }
            for t in timings
        ],
        "peak_rss_bytes": max(t.peak_rss for t in timings),
        "rss_growth_after_first_epoch_bytes": timings[-1].peak_rss - timings[1].peak_rss
        if len(timings) > 1
        else 0,
    }


@click.command()
@click.option(
    "--epochs",
    type=click.IntRange(min=2),
    default=3,
    show_default=True,
    help="Epochs per system; the median of all but the first (warm-up) is reported.",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option(
    "--jpeg-repeat",
    type=click.IntRange(min=1),
    default=24,
    show_default=True,
    help="Times the opencv-doc JPEG list is repeated per epoch.",
)
@click.option(
    "--fmnist-limit",
    type=click.IntRange(min=1),
    default=20000,
    show_default=True,
    help="Fashion-MNIST training images used.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="DALI threads and DataLoader workers [default: available cores].",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="Where Loader and bare DALI decode ('cuda': DALI mixed decode, CUDA tensors); "
    "the torch baseline always decodes on the CPU.",
)
def main(
    epochs: int,
    batch_size: int,
    jpeg_repeat: int,
    fmnist_limit: int,
    threads: int | None,
    device: str,
) -> None:
    """Images/s and memory of torch DataLoader vs dataplane.Loader vs bare DALI."""
    from preprocessing import make_recipe

    cores = threads or len(os.sched_getaffinity(0))
    results: dict[str, Any] = {
        "machine": machine_info(),
        "cores": cores,
        "epochs": epochs,
        "batch_size": batch_size,
        "device": device,
        "datasets": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        datasets = {
            "opencv-doc JPEG 224": (
                jpeg_items(jpeg_repeat),
                make_recipe("train", size=224, channels=3),
            ),
            "fashion-mnist PNG 28": (
                fmnist_items(fmnist_limit, Path(tmp)),
                make_recipe("train", size=28, channels=1),
            ),
        }
        # torch first: its workers fork before any DALI thread exists in this process.
        raw: dict[str, dict[str, list[EpochTiming]]] = {name: {} for name in datasets}
        for name, (items, recipe) in datasets.items():
            click.echo(f"[torch]     {name}: {len(items)} images/epoch", err=True)
            raw[name]["torch"] = run_torch(items, recipe, batch_size, cores, epochs)
        for name, (items, recipe) in datasets.items():
            click.echo(f"[loader]    {name}", err=True)
            raw[name]["loader"] = run_loader(items, recipe, batch_size, cores, epochs, device)
            click.echo(f"[bare DALI] {name}", err=True)
            raw[name]["bare_dali"] = run_bare_dali(items, recipe, batch_size, cores, epochs, device)
    rows = []
    for name, systems in raw.items():
        entry = {system: summary(t) for system, t in systems.items()}
        ips = {system: entry[system]["images_per_second"] for system in entry}
        entry["loader_over_torch"] = ips["loader"] / ips["torch"]
        entry["loader_over_bare_dali"] = ips["loader"] / ips["bare_dali"]
        entry["images_per_epoch"] = systems["loader"][-1].images
        results["datasets"][name] = entry
        mib = 2**20
        rows.append(
            [
                name,
                f"{ips['torch']:,.0f}",
                f"{ips['loader']:,.0f}",
                f"{ips['bare_dali']:,.0f}",
                f"{entry['loader_over_torch']:.2f}x",
                f"{entry['loader_over_bare_dali']:.2f}x",
                " / ".join(f"{t.peak_rss / mib:,.0f}" for t in systems["loader"]),
                f"{entry['torch']['peak_rss_bytes'] / mib:,.0f}",
            ]
        )
    headers = [
        "dataset",
        "torch img/s",
        "loader img/s",
        "bare DALI img/s",
        "loader/torch",
        "loader/DALI",
        "loader peak RSS per epoch (MiB)",
        "torch RSS incl. workers (MiB)",
    ]
    if device == "cuda":
        headers[2] = "loader (cuda) img/s"
        headers[3] = "bare DALI (mixed) img/s"
    click.echo(format_table(headers, rows))
    jpeg = results["datasets"]["opencv-doc JPEG 224"]
    growth = jpeg["loader"]["rss_growth_after_first_epoch_bytes"] / 2**20
    click.echo(
        f"\ngoals: loader >= 2.0x torch on JPEGs: {jpeg['loader_over_torch']:.2f}x; within 10% of "
        f"bare DALI: {100 * (1 - jpeg['loader_over_bare_dali']):+.1f}% slower; peak RSS at batch "
        f"{batch_size}, 224x224: {jpeg['loader']['peak_rss_bytes'] / 2**20:,.0f} MiB "
        "(goal < 2048), "
        f"growth after epoch 1: {growth:+.1f} MiB"
    )
    load = results["machine"]["load_average_1_5_15"]
    click.echo(
        f"{cores} cores; load average at start {load[0]:.2f} (shared machine: compare ratios)"
    )
    path = write_results("loader" if device == "cpu" else "loader-cuda", results)
    click.echo(f"wrote {path}")


if __name__ == "__main__":
    main()
