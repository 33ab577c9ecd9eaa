"""``dataplane iterate``: iterate a dataset with the Loader and report throughput.

Prints, per epoch, the batches and images yielded, the wall time, images per
second, and the process's peak resident memory (RSS) so far; with ``--cache``
also the pass's cache counts (variant served, hits, misses, records filled).

``--limit N`` stops each epoch after ``N`` batches, as ``itertools.islice(loader,
N)`` or Lightning's ``limit_train_batches=N`` do: batches, not samples, per epoch.
``--cache PATH`` serves through the augmented-sample cache at ``PATH``, as the
Loader's ``cache=CacheConfig(PATH, variants=..., max_bytes=...)`` does (filling it
in the background); ``--rank R --world-size W`` iterates shard ``R`` of ``W``, as
rank ``R`` of a distributed job does.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from dataplane.errors import DataplaneError, cli_message
from dataplane.loader_cli import (
    cache_options,
    check_shard,
    command_line_warnings,
    loader_options,
    shard_options,
)
from dataplane.plan import LastBatchPolicy

if TYPE_CHECKING:
    from dataplane.loader import Loader


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes (Linux ``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@click.command("iterate")
@click.argument("data", type=click.Path(exists=True, path_type=Path))
@click.option("--epochs", type=click.IntRange(min=1), default=2, show_default=True)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="BATCHES",
    help="Stop each epoch after this many batches (as itertools.islice(loader, N)) "
    "[default: whole epochs].",
)
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
@click.option(
    "--cache",
    "cache_path",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="PATH",
    help="Serve through the augmented-sample cache in this directory (created if absent; "
    "filled in the background), with --variants and --max-bytes.",
)
@cache_options
@shard_options
@click.pass_context
def iterate_command(
    ctx: click.Context,
    data: Path,
    epochs: int,
    limit: int | None,
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
    cache_path: Path | None,
    variants: int,
    max_bytes: int,
    rank: int | None,
    world_size: int | None,
) -> None:
    """Iterate DATA (image folder or Parquet) and print images/s per epoch and peak RSS."""
    from cache import CacheConfig, CacheError
    from dataplane.loader import Loader

    check_shard(rank, world_size)
    cache = None
    if cache_path is not None:
        try:
            cache = CacheConfig(cache_path, variants=variants, max_bytes=max_bytes)
        except CacheError as exc:
            raise click.BadParameter(str(exc)) from exc
    else:
        for name, option in (("variants", "--variants"), ("max_bytes", "--max-bytes")):
            if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT:
                raise click.UsageError(f"{option} applies to the cache: add --cache PATH")
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
                rank=rank,
                world_size=world_size,
                on_corrupt=on_corrupt,
                cache=cache,
                normalize=normalize,
            )
        except DataplaneError as exc:
            raise click.ClickException(cli_message(exc)) from exc
        try:
            _run(loader, epochs, limit)
        finally:
            loader.close()


def _run(loader: Loader, epochs: int, limit: int | None) -> None:
    """Iterate ``loader`` for ``epochs`` epochs of at most ``limit`` batches each (None:
    whole epochs) and print one line per epoch."""
    side = loader.recipe.size
    click.echo(
        f"{loader!r}\nrecipe {loader.recipe.name} {loader.recipe.channels}x{side}x{side}, "
        f"{loader.config.num_threads} DALI threads"
    )
    planned = len(loader)
    if limit is not None and limit >= planned:
        limit = None  # the whole epoch: it ends as a complete pass
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        start = time.perf_counter()
        images = batches = 0
        try:
            for x, _ in loader:
                images += int(x.shape[0])
                batches += 1
                if batches == limit:
                    break
        except DataplaneError as exc:
            raise click.ClickException(cli_message(exc)) from exc
        seconds = time.perf_counter() - start
        limited = f" (--limit {limit} of {planned})" if limit is not None else ""
        stats = loader.last_epoch_stats
        complete = stats is not None and stats.epoch == epoch and limit is None
        skipped = (
            f", skipped {stats.num_skipped}" if complete and stats and stats.num_skipped else ""
        )
        cached = ""
        counts = loader.cache_stats
        if counts is not None:  # counted on whole passes only (a limited one prepared more)
            cached = f"; cache variant {counts.variant}"
            if complete:
                cached += f": {counts.hits} hits, {counts.misses} misses, {counts.filled} filled"
        click.echo(
            f"epoch {epoch}: {batches} batches{limited}, {images} images in {seconds:.2f} s = "
            f"{images / seconds:,.0f} images/s, peak RSS {peak_rss_bytes() / 2**20:,.0f} MiB"
            f"{skipped}{cached}"
        )
