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
from dataplane.loader_cli import command_line_warnings, loader_options
from dataplane.plan import LastBatchPolicy


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes (Linux ``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@click.command("iterate")
@click.argument("data", type=click.Path(exists=True, path_type=Path))
@click.option("--epochs", type=click.IntRange(min=1), default=2, show_default=True)
@loader_options
@click.option("--shuffle/--no-shuffle", default=True, show_default=True)
@click.option(
    "--last-batch",
    type=click.Choice([policy.value for policy in LastBatchPolicy]),
    default=LastBatchPolicy.PARTIAL.value,
    show_default=True,
    help="The samples that do not fill a last batch: drop them, yield a shorter batch, or "
    "fill it up with the epoch's first samples again.",
)
@click.option(
    "--normalize/--no-normalize",
    default=True,
    show_default=True,
    help="Float32 normalized images, or the uint8 images as augmented.",
)
def iterate_command(
    data: Path,
    epochs: int,
    recipe: str,
    size: int | None,
    channels: int | None,
    batch_size: int,
    seed: int,
    device: str | None,
    threads: int | None,
    on_corrupt: str,
    shuffle: bool,
    last_batch: str,
    normalize: bool,
) -> None:
    """Iterate DATA (image folder or Parquet) and print images/s per epoch and peak RSS."""
    from dataplane.loader import Loader

    with command_line_warnings():  # printed once each, in the command's words
        try:
            loader = Loader(
                data,
                batch_size=batch_size,
                recipe=recipe,
                size=size,
                channels=channels,
                device=device,
                num_threads=threads,
                shuffle=shuffle,
                seed=seed,
                last_batch=last_batch,
                on_corrupt=on_corrupt,
                normalize=normalize,
            )
        except DataplaneError as exc:
            raise click.ClickException(cli_message(exc)) from exc
        side = loader.recipe.size
        click.echo(
            f"{loader!r}\nrecipe {loader.recipe.name} {loader.recipe.channels}x{side}x{side}, "
            f"{loader.config.num_threads} DALI threads"
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
