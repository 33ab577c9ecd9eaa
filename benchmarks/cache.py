"""The augmented-sample cache: serving rate, fill cost, raw LMDB limit, disk and memory.

For each dataset, in one run and on the same cores:

* ``opencv-doc JPEG 224``: the real JPEGs of Debian's ``opencv-doc`` (81 photos,
  repeated ``--jpeg-repeat`` times as distinct samples), ``train`` recipe at
  224x224x3;
* ``fashion-mnist PNG 28``: a ``--fmnist-limit`` subset of Fashion-MNIST's
  training set ingested as PNGs, ``train`` recipe at 28x28x1.

Measured:

``fresh``
    :class:`dataplane.Loader` without a cache (DALI CPU decode + augmentation),
    images/s of the warm passes (the first pass builds the pipeline).
``fill``
    ``Loader(..., cache=CacheConfig(variants=V))`` over epochs ``0..V-1``: every
    pass is fresh and writes its samples in the background. Fill passes and
    fresh passes alternate so that both see the same machine load; the *fill
    overhead* is ``fresh rate / fill rate - 1`` over the warm passes (medians).
    Batches the background writer dropped (it fell behind) are filled by untimed
    top-up passes afterwards (counted in the JSON).
``cached``
    A new process (it never imports DALI) serves epochs ``V..3V-1`` from the
    full cache: two rounds over all variants, every sample a hit. Images/s of
    normalized float32 batches, as a training loop receives them (median pass).
``cached uint8``
    The same epochs served with ``Loader(..., normalize=False)``: uint8 NCHW
    batches for a training step that normalizes on its own device (the GPU, or
    inside the model), each copied once out of the loader's ring.
``get_batch``
    The cache's read path alone: ``CacheStore.get_batch`` of the same random
    batches into one preallocated buffer (checksums checked), no loader.
``raw LMDB``
    The limit: the same records read in the same random batches with plain
    ``lmdb`` (``buffers=True``) and their payloads copied into a preallocated
    numpy buffer; no checksum, no loader.
``normalize``
    The CPU cost of turning uint8 batches into normalized float32 ones
    (:func:`preprocessing.normalize`), the ceiling of any CPU loader at 224.
Disk
    Bytes per sample (LMDB pages used / records) against the payload.
Memory
    The serving process's RSS after the first and the last served epoch, split
    into anonymous memory (heap: what the loader allocates) and file-backed
    pages (LMDB's memory map of the cache; page cache, reclaimable), and its
    peak while serving. The cache at 224 is several times larger than the
    loader's ring of batch buffers (``--jpeg-variants`` variants).

Goals printed beside the numbers: cached >= 10x fresh at 224; cached >= 50% of
the raw LMDB rate (for float32 and for uint8 batches); fill overhead <= 10%.
Numbers are noisy on shared machines (the cores may be busy with other work):
compare the ratios, measured side by side, and the load average printed at the
start. Never asserts on time. Writes JSON to
``benchmarks/results/cache-<time>.json`` (and ``cache-latest.json``).

Run: ``.venv/bin/python benchmarks/cache.py`` (about 2 to 3 minutes on 2
cores); ``--quick`` for a smoke run of a few seconds' work.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (  # noqa: E402
    RssSampler,
    fmnist_folder,
    format_table,
    jpeg_items,
    machine_info,
    write_results,
)

MIB = 2**20


# -- memory ------------------------------------------------------------------------------
def memory_status() -> dict[str, int]:
    """This process's RSS split into anonymous and file-backed pages, in bytes."""
    out = {"rss": 0, "rss_anon": 0, "rss_file": 0}
    names = {"VmRSS:": "rss", "RssAnon:": "rss_anon", "RssFile:": "rss_file"}
    with open("/proc/self/status") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in names:
                out[names[parts[0]]] = int(parts[1]) * 1024
    return out


# -- one pass -------------------------------------------------------------------------------
def timed_pass(loader: Any) -> tuple[int, float]:
    """Images and wall seconds of one pass over ``loader``'s current epoch."""
    start = time.perf_counter()
    images = 0
    for x, _ in loader:
        images += int(x.shape[0])
    return images, time.perf_counter() - start


def fresh_and_fill(
    data: Any, recipe: Any, cache_dir: Path, *, variants: int, batch_size: int, threads: int
) -> dict[str, Any]:
    """Alternate fill passes (epochs 0..V-1, writing the cache) with fresh passes."""
    from dataplane import CacheConfig, Loader

    common: dict[str, Any] = {
        "batch_size": batch_size,
        "recipe": recipe,
        "shuffle": True,
        "seed": 0,
        "device": "cpu",
        "num_threads": threads,
    }
    fresh = Loader(data, **common)
    fill = Loader(
        data, cache=CacheConfig(cache_dir, variants=variants, max_bytes=64 << 30), **common
    )
    fresh_passes, fill_passes, fill_stats = [], [], []
    for epoch in range(variants):
        fill.set_epoch(epoch)
        fill_passes.append(timed_pass(fill))
        fill_stats.append(fill.cache_stats)
        fresh.set_epoch(epoch)
        fresh_passes.append(timed_pass(fresh))
    # The background writer drops batches when it falls behind (offered again when the
    # variant comes round): top the cache up, untimed, so that serving is all hits.
    topups = 0
    store = fill.cache_store
    while incomplete := [v for v in range(variants) if not store.completed(v).all()]:
        if topups >= 4 * variants:
            raise click.ClickException(f"the cache at {cache_dir} could not be completed")
        for epoch in incomplete:
            fill.set_epoch(epoch)
            timed_pass(fill)
            topups += 1
    fill.close()
    fresh.close()

    def rates(passes: list[tuple[int, float]]) -> list[float]:
        return [n / s for n, s in passes]

    warm = slice(1, None) if variants > 1 else slice(0, None)
    fresh_rate = statistics.median(rates(fresh_passes)[warm])
    fill_rate = statistics.median(rates(fill_passes)[warm])
    return {
        "fresh_images_per_second": fresh_rate,
        "fill_images_per_second": fill_rate,
        "fill_overhead_percent": 100.0 * (fresh_rate / fill_rate - 1.0),
        "fresh_passes_images_per_second": rates(fresh_passes),
        "fill_passes_images_per_second": rates(fill_passes),
        "fill_stats": [vars(s) for s in fill_stats if s is not None],
        "top_up_passes": topups,
    }


# -- serving (in a process that never imports DALI) ------------------------------------------
def serve(
    data: Any,
    recipe_args: tuple[str, int, int],
    cache_dir: str,
    variants: int,
    batch_size: int,
    rounds: int,
) -> dict[str, Any]:
    """Serve epochs ``V..(rounds+1)V-1`` from the full cache; then the read-path limits."""
    import lmdb

    from cache import CacheStore
    from cache.record import HEADER_SIZE, pack_keys
    from dataplane import CacheConfig, Loader
    from preprocessing import make_recipe, normalize

    name, size, channels = recipe_args
    recipe = make_recipe(name, size=size, channels=channels)

    loader = Loader(
        data, batch_size=batch_size, recipe=recipe, shuffle=True, seed=0, device="cpu",
        cache=CacheConfig(cache_dir, variants=variants, max_bytes=64 << 30),
    )
    baseline = memory_status()
    passes, memory, hits = [], [], 0
    with RssSampler(interval=0.01) as peak:
        for epoch in range(variants, variants * (rounds + 1)):
            loader.set_epoch(epoch)
            passes.append(timed_pass(loader))
            memory.append(memory_status())
            stats = loader.cache_stats
            assert stats is not None
            hits += stats.hits
            if stats.misses:
                raise click.ClickException(f"epoch {epoch} missed {stats.misses} samples")
    info = loader.cache_store.info()
    loader.close()

    # The same epochs as uint8 batches (normalize=False), one round over the variants.
    raw_loader = Loader(
        data, batch_size=batch_size, recipe=recipe, shuffle=True, seed=0, device="cpu",
        cache=CacheConfig(cache_dir, variants=variants, max_bytes=64 << 30), normalize=False,
    )
    uint8_passes = []
    for epoch in range(variants, 2 * variants):
        raw_loader.set_epoch(epoch)
        uint8_passes.append(timed_pass(raw_loader))
    raw_loader.close()
    n = info.meta.identity.num_samples
    shape = info.meta.identity.sample_shape
    size = info.meta.payload_size
    rng = np.random.default_rng(1)
    orders = [(v, rng.permutation(n)) for v in range(variants)]

    # The cache's read path alone (checksums checked), one preallocated buffer.
    store = CacheStore.open_existing(cache_dir)
    out = np.empty((batch_size, *shape), np.uint8)
    start = time.perf_counter()
    for variant, order in orders:
        for s in range(0, n, batch_size):
            b = order[s : s + batch_size]
            if not store.get_batch(b, variant, out[: b.size]).all():
                raise click.ClickException("get_batch missed a record of a full cache")
    get_batch_rate = n * variants / (time.perf_counter() - start)
    store.close()

    # The limit: plain lmdb, the same random batches, payloads into a numpy buffer.
    env = lmdb.open(cache_dir, subdir=True, readonly=True, lock=False, max_dbs=2, readahead=False)
    db = env.open_db(b"records", create=False)
    dst = out.data.cast("B")
    end = HEADER_SIZE + size
    start = time.perf_counter()
    for variant, order in orders:
        for s in range(0, n, batch_size):
            keys, _ = pack_keys(order[s : s + batch_size], variant)
            with env.begin(db=db, buffers=True) as txn:
                get = txn.get
                for i, key in enumerate(keys):
                    value = get(key)
                    assert value is not None  # a full cache
                    dst[i * size : (i + 1) * size] = value[HEADER_SIZE:end]
    raw_rate = n * variants / (time.perf_counter() - start)
    env.close()

    import torch

    batch = torch.from_numpy(out)
    reps = max(3, min(200, int(2e8) // out.nbytes))
    normalize(batch, loader.recipe)
    start = time.perf_counter()
    for _ in range(reps):
        normalize(batch, loader.recipe)
    normalize_rate = reps * batch_size / (time.perf_counter() - start)
    rates = [i / s for i, s in passes]
    return {
        "cached_images_per_second": statistics.median(rates),
        "cached_passes_images_per_second": rates,
        "cached_uint8_images_per_second": statistics.median(i / s for i, s in uint8_passes),
        "hits": hits,
        "get_batch_images_per_second": get_batch_rate,
        "raw_lmdb_images_per_second": raw_rate,
        "normalize_images_per_second": normalize_rate,
        "memory_before_serving": baseline,
        "memory_after_each_epoch": memory,
        "peak_rss_bytes": peak.peak,
        "ring_bytes": (loader.config.prefetch + 1) * batch_size * size,
        "cache": info.as_dict(),
        "dali_imported": any(m.split(".")[0] == "nvidia" for m in sys.modules),
    }


def _serve_child(queue: Any, *args: Any) -> None:
    try:
        queue.put(("ok", serve(*args)))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def serve_in_child(*args: Any) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_serve_child, args=(queue, *args), name="cache-serve")
    proc.start()
    status, payload = queue.get()
    proc.join()
    if status != "ok":
        raise click.ClickException(f"the serving process failed: {payload}")
    return payload  # type: ignore[no-any-return]


# -- the command ------------------------------------------------------------------------------
@click.command()
@click.option("--quick", is_flag=True, help="A short smoke run (tiny datasets, 2 variants).")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option(
    "--jpeg-repeat", type=click.IntRange(min=1), default=16, show_default=True,
    help="Times the 81 opencv-doc JPEGs are repeated (as distinct samples).",
)
@click.option(
    "--jpeg-variants", type=click.IntRange(min=2), default=6, show_default=True,
    help="Variants cached at 224 (the cache is samples x variants x ~148 KiB).",
)
@click.option("--fmnist-limit", type=click.IntRange(min=1), default=10000, show_default=True)
@click.option("--fmnist-variants", type=click.IntRange(min=2), default=5, show_default=True)
@click.option(
    "--rounds", type=click.IntRange(min=1), default=2, show_default=True,
    help="Rounds over all variants served from the full cache.",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="DALI threads.")
@click.option(
    "--cache-root", type=click.Path(path_type=Path), default=None,
    help="Where the caches are written [default: a temporary directory].",
)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Write the JSON here instead of benchmarks/results/.")
def main(
    quick: bool,
    batch_size: int,
    jpeg_repeat: int,
    jpeg_variants: int,
    fmnist_limit: int,
    fmnist_variants: int,
    rounds: int,
    threads: int | None,
    cache_root: Path | None,
    out_dir: Path | None,
) -> None:
    """Cached vs fresh images/s, fill overhead, raw LMDB limit, bytes and RSS."""
    from preprocessing import make_recipe

    if quick:
        jpeg_repeat, jpeg_variants, fmnist_limit, fmnist_variants = 1, 2, 2000, 2
        rounds, batch_size = 1, min(batch_size, 64)
    cores = threads or len(os.sched_getaffinity(0))
    results: dict[str, Any] = {
        "machine": machine_info(),
        "cores": cores,
        "batch_size": batch_size,
        "quick": quick,
        "datasets": {},
    }
    load = results["machine"]["load_average_1_5_15"]
    click.echo(f"{cores} cores; load average at start {load[0]:.2f}", err=True)
    with tempfile.TemporaryDirectory(dir=cache_root) as tmp:
        work = Path(tmp)
        datasets = {
            "opencv-doc JPEG 224": (
                jpeg_items(jpeg_repeat), make_recipe("train", size=224, channels=3), jpeg_variants,
            ),
            "fashion-mnist PNG 28": (
                str(fmnist_folder(fmnist_limit, work)),
                make_recipe("train", size=28, channels=1),
                fmnist_variants,
            ),
        }
        for name, (data, recipe, variants) in datasets.items():
            cache_dir = work / name.replace(" ", "-")
            count = len(data) if isinstance(data, list) else fmnist_limit
            click.echo(f"[fill+fresh] {name}: {count} samples x {variants} variants", err=True)
            entry = fresh_and_fill(
                data, recipe, cache_dir, variants=variants, batch_size=batch_size, threads=cores
            )
            click.echo(f"[serve]      {name}", err=True)
            recipe_args = (recipe.name, recipe.size, recipe.channels)
            entry.update(
                serve_in_child(data, recipe_args, str(cache_dir), variants, batch_size, rounds)
            )
            entry["variants"] = variants
            entry["cached_over_fresh"] = (
                entry["cached_images_per_second"] / entry["fresh_images_per_second"]
            )
            entry["cached_over_raw"] = (
                entry["cached_images_per_second"] / entry["raw_lmdb_images_per_second"]
            )
            entry["cached_uint8_over_raw"] = (
                entry["cached_uint8_images_per_second"] / entry["raw_lmdb_images_per_second"]
            )
            entry["get_batch_over_raw"] = (
                entry["get_batch_images_per_second"] / entry["raw_lmdb_images_per_second"]
            )
            results["datasets"][name] = entry
    rows = []
    for name, e in results["datasets"].items():
        mem = e["memory_after_each_epoch"]
        cache = e["cache"]
        rows.append(
            [
                name,
                f"{e['fresh_images_per_second']:,.0f}",
                f"{e['fill_images_per_second']:,.0f}",
                f"{e['fill_overhead_percent']:+.1f}%",
                f"{e['cached_images_per_second']:,.0f}",
                f"{e['cached_over_fresh']:.1f}x",
                f"{e['cached_uint8_images_per_second']:,.0f}",
                f"{e['get_batch_images_per_second']:,.0f}",
                f"{e['raw_lmdb_images_per_second']:,.0f}",
                f"{100 * e['cached_over_raw']:.0f}% / {100 * e['cached_uint8_over_raw']:.0f}% / "
                f"{100 * e['get_batch_over_raw']:.0f}%",
                f"{e['normalize_images_per_second']:,.0f}",
                f"{cache['bytes_per_sample']:,.0f} ({int(np.prod(cache['sample_shape'])):,})",
                f"{cache['used_bytes'] / MIB:,.0f}",
                f"{mem[0]['rss_anon'] / MIB:,.0f} -> {mem[-1]['rss_anon'] / MIB:,.0f}",
                f"{mem[0]['rss_file'] / MIB:,.0f} -> {mem[-1]['rss_file'] / MIB:,.0f}",
                f"{e['peak_rss_bytes'] / MIB:,.0f}",
            ]
        )
    headers = [
        "dataset",
        "fresh img/s",
        "fill img/s",
        "fill overhead",
        "cached img/s",
        "cached/fresh",
        "cached uint8 img/s",
        "get_batch img/s",
        "raw LMDB img/s",
        "/raw: cached, uint8, get_batch",
        "normalize img/s",
        "bytes/sample (payload)",
        "cache MiB",
        "RSS anon MiB ep1->N",
        "RSS file MiB ep1->N",
        "peak RSS MiB",
    ]
    click.echo(format_table(headers, rows))
    jpeg = results["datasets"]["opencv-doc JPEG 224"]
    fm = results["datasets"]["fashion-mnist PNG 28"]

    def drops(entry: dict[str, Any]) -> int:
        return sum(int(s["fill_dropped"]) for s in entry["fill_stats"])

    mem = jpeg["memory_after_each_epoch"]
    worst_uint8_over_raw = min(jpeg["cached_uint8_over_raw"], fm["cached_uint8_over_raw"])
    worst_fill_overhead = max(jpeg["fill_overhead_percent"], fm["fill_overhead_percent"])
    click.echo(
        "\ngoals:\n"
        f"  cached >= 10x fresh at 224:        {jpeg['cached_over_fresh']:.1f}x "
        f"({'met' if jpeg['cached_over_fresh'] >= 10 else 'MISSED'})\n"
        f"  cached >= 50% of raw LMDB, float32: 224: {100 * jpeg['cached_over_raw']:.0f}%, 28: "
        f"{100 * fm['cached_over_raw']:.0f}%"
        f" ({'met' if min(jpeg['cached_over_raw'], fm['cached_over_raw']) >= 0.5 else 'MISSED'}"
        "; at 224 the float32 normalization alone runs at "
        f"{jpeg['normalize_images_per_second']:,.0f} img/s)\n"
        f"  cached >= 50% of raw LMDB, uint8:   224: {100 * jpeg['cached_uint8_over_raw']:.0f}%, "
        f"28: {100 * fm['cached_uint8_over_raw']:.0f}% ("
        f"{'met' if worst_uint8_over_raw >= 0.5 else 'MISSED'}"
        f"; the cache's get_batch: {100 * jpeg['get_batch_over_raw']:.0f}%, "
        f"{100 * fm['get_batch_over_raw']:.0f}%)\n"
        f"  fill overhead <= 10%:              224: {jpeg['fill_overhead_percent']:+.1f}%, "
        f"28: {fm['fill_overhead_percent']:+.1f}% "
        f"({'met' if worst_fill_overhead <= 10 else 'MISSED'}"
        f"; samples the background writer dropped while timed: 224: {drops(jpeg)}, 28: "
        f"{drops(fm)}; untimed top-up passes: {jpeg['top_up_passes']}, {fm['top_up_passes']})\n"
        f"  RSS flat while serving a {jpeg['cache']['used_bytes'] / MIB:,.0f} MiB cache "
        f"({jpeg['cache']['used_bytes'] / jpeg['ring_bytes']:.0f}x the "
        f"{jpeg['ring_bytes'] / MIB:,.0f}"
        f" MiB batch ring): anonymous {mem[0]['rss_anon'] / MIB:,.0f} -> "
        f"{mem[-1]['rss_anon'] / MIB:,.0f} MiB over {len(mem)} epochs; file-backed (the "
        f"cache's memory map, page cache) {mem[0]['rss_file'] / MIB:,.0f} -> "
        f"{mem[-1]['rss_file'] / MIB:,.0f} MiB"
    )
    click.echo(
        f"{cores} cores; load average at start {load[0]:.2f}, at end "
        f"{os.getloadavg()[0]:.2f} (shared machine: compare ratios measured side by side)"
    )
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "cache-latest.json"
        path.write_text(json.dumps(results, indent=2, default=str))
    else:
        path = write_results("cache", results)
    click.echo(f"wrote {path}")


if __name__ == "__main__":
    main()
