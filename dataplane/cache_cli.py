"""The ``dataplane cache`` commands: ``info``, ``verify``, ``clear``, ``build``.

Each prints human-readable text, or one JSON document with ``--json``. Errors
of the cache (:class:`cache.CacheError`) exit with status 1 and their message.
``verify`` exits with status 1 when it finds corrupt records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from cache import (
    CacheConfig,
    CacheError,
    CacheFiller,
    CacheStore,
    FillMode,
    verify,
)

if TYPE_CHECKING:
    from dataplane.producer import BatchProducer, BatchRequest, ProducedBatch, ProducerContext

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """``"8G"``, ``"512MiB"``, ``"1048576"`` -> bytes (binary multiples)."""
    match = _SIZE.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a size; write e.g. 8G, 512M or 1048576")
    value, unit = match.groups()
    return int(float(value) * (1 << (10 * " kmgt".index(unit.lower() or " "))))


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _open(path: Path) -> CacheStore:
    try:
        return CacheStore.open_existing(path)
    except CacheError as exc:
        raise click.ClickException(str(exc)) from exc


def _emit(as_json: bool, doc: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(doc, indent=2, default=str) if as_json else text)


@click.group("cache")
def cache_group() -> None:
    """Inspect, verify, clear and build augmented-sample caches."""


@cache_group.command("info")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def info_command(path: Path, as_json: bool) -> None:
    """Fingerprints, records per variant, bytes and whether the cache is full."""
    with _open(path) as store:
        info = store.info()
    doc = info.as_dict()
    ident = info.meta.identity
    lines = [
        f"cache        {info.path}",
        f"created      {info.meta.created} (schema {info.meta.schema_version})",
        f"recipe       {json.dumps(ident.recipe_fingerprint)}",
        f"dataset      {json.dumps(ident.dataset_fingerprint)}",
        f"samples      {ident.num_samples} x {info.meta.variants} variants, "
        f"{info.meta.dtype} {info.meta.layout} {tuple(ident.sample_shape)}",
    ]
    for variant, count in sorted(info.counts.items()):
        pct = 100.0 * count / ident.num_samples
        lines.append(f"variant {variant:<4} {count} / {ident.num_samples} ({pct:.1f}%)")
    lines += [
        f"records      {info.records} / {info.expected_records}",
        f"bytes        {_human(info.used_bytes)} used, {_human(info.file_bytes)} file, "
        f"max {_human(info.max_bytes)}",
        f"per sample   {_human(info.bytes_per_sample)} "
        f"(payload {_human(info.meta.payload_size)})",
        f"full         {'yes' if info.full else 'no'}",
    ]
    _emit(as_json, doc, "\n".join(lines))


@cache_group.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--repair", is_flag=True, help="Delete corrupt records (they are refilled).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def verify_command(path: Path, repair: bool, as_json: bool, progress: bool) -> None:
    """Check every record's checksum; exit status 1 when corrupt records are found."""
    from tqdm import tqdm

    with _open(path) as store:
        total = store.count()
        with tqdm(
            total=total, unit="rec", desc="verify", disable=not progress, leave=False
        ) as bar:
            try:
                report = verify(store, repair=repair, progress=bar.update)
            except CacheError as exc:
                raise click.ClickException(str(exc)) from exc
    lines = [
        f"cache      {report.path}",
        f"checked    {report.checked} records: {report.ok} ok, {len(report.corrupt)} corrupt",
        "per variant " + ", ".join(f"{v}: {n}" for v, n in sorted(report.counts.items())),
        f"complete   {report.ok} / {report.expected}",
    ]
    if report.out_of_range:
        lines.append(f"unused     {len(report.out_of_range)} records outside the metadata")
    for index, variant in report.corrupt[:20]:
        lines.append(f"corrupt    index {index} variant {variant}")
    if len(report.corrupt) > 20:
        lines.append(f"corrupt    ... and {len(report.corrupt) - 20} more (see --json)")
    if report.corrupt:
        lines.append(
            f"repaired   {report.repaired} deleted; they are refilled when next needed"
            if repair
            else "fix        run again with --repair to delete them (they are never served)"
        )
    _emit(as_json, report.as_dict(), "\n".join(lines))
    if report.corrupt:
        raise SystemExit(1)


@cache_group.command("clear")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def clear_command(path: Path, yes: bool, as_json: bool) -> None:
    """Delete every record of a cache (its metadata stays; pages are reused)."""
    with _open(path) as store:
        count = store.count()
        if not yes:
            click.confirm(f"delete all {count} records of the cache at {path}?", abort=True)
        try:
            deleted = store.clear()
        except CacheError as exc:
            raise click.ClickException(str(exc)) from exc
    _emit(
        as_json,
        {"path": str(path), "deleted": deleted},
        f"cleared {path}: {deleted} records deleted (the file keeps its size; delete the "
        "directory to free the disk space)",
    )


# -- build: fill ahead of time through the loader's fresh path ---------------------------
def _labels_of(source: Any) -> np.ndarray:
    labels_fn = getattr(source, "labels", None)
    if callable(labels_fn):
        return np.asarray(labels_fn(), dtype=np.int64)
    return np.fromiter((source.label(i) for i in range(len(source))), np.int64, len(source))


class _TeeProducer:
    """Yields the fresh producer's batches and hands each to the cache filler."""

    def __init__(
        self,
        inner: BatchProducer,
        filler: CacheFiller,
        variant: int,
        labels: np.ndarray,
        done: np.ndarray,
        bar: Any,
    ) -> None:
        self.inner, self.filler, self.variant = inner, filler, variant
        self.labels, self.done, self.bar = labels, done, bar

    def __iter__(self) -> Iterator[ProducedBatch]:
        for batch in self.inner:
            idx = np.asarray(batch.indices, dtype=np.int64)
            todo = ~self.done[idx]
            if todo.any():
                images = batch.images.cpu().numpy()
                self.filler.submit(
                    idx[todo], self.variant, images[todo], self.labels[idx[todo]], copy=False
                )
            self.bar.update(int(idx.size))
            yield batch

    def close(self) -> None:
        self.inner.close()


@cache_group.command("build")
@click.argument("data", type=click.Path(exists=True, path_type=Path))
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--recipe", default="train", show_default=True, help="train, eval or a custom name.")
@click.option("--size", type=click.IntRange(min=1), default=None, help="Output side in pixels.")
@click.option("--channels", type=click.Choice(["1", "3"]), default=None)
@click.option("--variants", type=click.IntRange(min=1, max=65535), default=4, show_default=True)
@click.option("--max-bytes", default="8G", show_default=True, help="Size bound, e.g. 8G, 512M.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="DALI threads.")
@click.option("--rebuild", is_flag=True, help="Clear a stale or existing cache first.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def build_command(
    data: Path,
    path: Path,
    recipe: str,
    size: int | None,
    channels: str | None,
    variants: int,
    max_bytes: str,
    batch_size: int,
    seed: int,
    device: str,
    threads: int | None,
    rebuild: bool,
    as_json: bool,
    progress: bool,
) -> None:
    """Fill the cache of DATA ahead of time: every variant of every sample.

    Runs the loader's fresh path (DALI) for epochs 0..variants-1 (variant v is
    what epoch v serves) and writes each batch. Variants already complete are
    skipped; a partly filled one is produced again and only its missing
    samples are written (after a crash, build again to finish).
    """
    import time

    from tqdm import tqdm

    from dataplane import DataplaneError, Loader
    from dataplane.cached_producer import cache_identity
    from dataplane.dali_producer import DaliBatchProducer

    config_kwargs = dict(variants=variants, max_bytes=parse_bytes(max_bytes), rebuild=rebuild)
    try:
        config = CacheConfig(path, fill=FillMode.INLINE, **config_kwargs)  # type: ignore[arg-type]
    except CacheError as exc:
        raise click.BadParameter(str(exc)) from exc
    state: dict[str, Any] = {}

    def factory(context: ProducerContext, requests: Sequence[BatchRequest]) -> BatchProducer:
        variant = context.epoch % variants
        return _TeeProducer(
            DaliBatchProducer(context, requests),
            state["filler"],
            variant,
            state["labels"],
            state["done"][variant],
            state["bar"],
        )

    try:
        loader = Loader(
            data,
            batch_size=batch_size,
            recipe=recipe,
            size=size,
            channels=int(channels) if channels else None,
            shuffle=False,
            seed=seed,
            device=None if device == "auto" else device,
            num_threads=threads,
            producer=factory,
        )
    except DataplaneError as exc:
        raise click.ClickException(str(exc)) from exc
    identity = cache_identity(loader.source, loader.recipe)  # the same as Loader(cache=...)
    try:
        store = CacheStore(config, identity)
    except CacheError as exc:
        raise click.ClickException(str(exc)) from exc
    n = identity.num_samples
    state["labels"] = _labels_of(loader.source)
    state["done"] = {v: store.completed(v) for v in range(variants)}
    todo = [v for v in range(variants) if not state["done"][v].all()]
    filler = CacheFiller(store, mode=FillMode.INLINE)
    state["filler"] = filler
    start = time.perf_counter()
    with tqdm(
        total=n * len(todo), unit="img", desc="build", disable=not progress or as_json
    ) as bar:
        state["bar"] = bar
        try:
            for variant in todo:
                if not filler.admitting:
                    break
                loader.set_epoch(variant)
                for _ in loader:
                    if not filler.admitting:
                        break
        except DataplaneError as exc:
            raise click.ClickException(str(exc)) from exc
        finally:
            loader.close()
    seconds = time.perf_counter() - start
    info = store.info()
    store.close()
    doc = {
        **info.as_dict(),
        "built_variants": todo,
        "written": filler.stats.written,
        "seconds": seconds,
        "images_per_second": (n * len(todo)) / seconds if seconds > 0 else 0.0,
        "error": str(filler.error) if filler.error else None,
    }
    lines = [
        f"built {path}: {filler.stats.written} records written in {seconds:.1f} s "
        f"({doc['images_per_second']:.0f} images/s produced)",
        f"records {info.records} / {info.expected_records}, {_human(info.used_bytes)} used"
        + (" (full: the rest is served fresh)" if info.full else ""),
    ]
    if filler.error is not None:
        lines.append(f"stopped: {filler.error}")
    _emit(as_json, doc, "\n".join(lines))
    if filler.error is not None:
        raise SystemExit(1)
