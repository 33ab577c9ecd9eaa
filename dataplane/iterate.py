"""``dataplane iterate``: iterate a dataset with the Loader and report throughput.

Prints, per epoch, the batches and images yielded, the wall time, images per
second, and the process's peak resident memory (RSS) so far.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import click

from dataplane.errors import DataplaneError, cli_message
from dataplane.plan import MAX_SEED


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes (Linux ``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@click.command("iterate")
@click.argument("data", type=click.Path(exists=True, path_type=Path))
@click.option("--epochs", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--recipe", default="train", show_default=True, help="train, eval or a custom name.")
@click.option(
    "--size",
    type=click.IntRange(min=1),
    default=None,
    help="Output side in pixels [default: the images' own].",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="auto = CUDA when available.",
)
@click.option(
    "--num-threads",
    type=click.IntRange(min=1),
    default=None,
    help="DALI threads [default: available cores].",
)
@click.option("--shuffle/--no-shuffle", default=True, show_default=True)
@click.option("--seed", type=click.IntRange(min=0, max=MAX_SEED - 1), default=0, show_default=True)
@click.option(
    "--on-corrupt", type=click.Choice(["raise", "skip"]), default="raise", show_default=True
)
def iterate_command(
    data: Path,
    epochs: int,
    batch_size: int,
    recipe: str,
    size: int | None,
    device: str,
    num_threads: int | None,
    shuffle: bool,
    seed: int,
    on_corrupt: str,
) -> None:
    """Iterate DATA (image folder or Parquet) and print images/s per epoch and peak RSS."""
    from dataplane.loader import Loader

    try:
        loader = Loader(
            data,
            batch_size=batch_size,
            recipe=recipe,
            size=size,
            device=None if device == "auto" else device,
            num_threads=num_threads,
            shuffle=shuffle,
            seed=seed,
            on_corrupt=on_corrupt,
        )
    except DataplaneError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"{loader!r}\nrecipe {loader.recipe.name} {loader.recipe.channels}x{loader.recipe.size}"
        f"x{loader.recipe.size}, {loader.config.num_threads} DALI threads"
    )
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        start = time.perf_counter()
        images = batches = 0
        try:
            for x, _ in loader:
                images += int(x.shape[0])
                batches += 1
        except DataplaneError as exc:
            raise click.ClickException(cli_message(exc)) from exc
        seconds = time.perf_counter() - start
        stats = loader.last_epoch_stats
        skipped = f", skipped {stats.num_skipped}" if stats and stats.num_skipped else ""
        click.echo(
            f"epoch {epoch}: {batches} batches, {images} images in {seconds:.2f} s = "
            f"{images / seconds:,.0f} images/s, peak RSS {peak_rss_bytes() / 2**20:,.0f} MiB"
            f"{skipped}"
        )
