"""CPU cost per record of the cache's write and scan paths, measured apart from the loader.

What ``benchmarks/cache.py`` reports as fill overhead is made of these parts. For each
sample shape (224x224x3 and 28x28x1 uint8), on random pixels, in one process:

``copy + encode (new memory)``
    What the filler did before encoding moved to ``submit``: copy the batch, then
    encode its records into a new array (``CacheStore.encode_batch`` without ``out``).
``encode (reused buffer)``
    What ``CacheFiller.submit`` does now: encode into a record buffer reused from
    batch to batch (``CacheStore.encode_batch(..., out=buffer)``).
``write (put + commit)``
    ``CacheStore.put_encoded`` of one encoded batch per transaction, durable (fsync),
    into a new cache: LMDB's copy of each record and the kernel's page writes.
``completed() scan`` / ``completed() remembered``
    ``CacheStore.completed`` of a full variant the first time (a key-range scan) and
    again (answered from memory).

CPU time is this process's (``time.process_time``), in microseconds per record; the
scan is wall time per call. Never asserts on time. Writes
``benchmarks/results/cache_costs-<time>.json`` (and ``-latest``).

Run: ``.venv/bin/python benchmarks/cache_costs.py`` (about 20 s).
"""

from __future__ import annotations

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

from benchmarks._common import format_table, machine_info, write_results  # noqa: E402

SHAPES = {"224x224x3": (3, 224, 224), "28x28x1": (1, 28, 28)}


def _cpu_us_per_record(fn: Any, batches: int, batch_size: int) -> float:
    start = time.process_time()
    for b in range(batches):
        fn(b)
    return 1e6 * (time.process_time() - start) / (batches * batch_size)


def measure(shape: tuple[int, ...], batch_size: int, batches: int, root: Path) -> dict[str, float]:
    """Microseconds per record of each part (see the module docstring)."""
    from cache import CacheConfig, CacheIdentity, CacheStore

    n = batch_size * batches
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (batch_size, *shape), dtype=np.uint8)
    labels = np.zeros(batch_size, np.int64)
    identity = CacheIdentity("bench-recipe", "bench-data", shape, n)
    store = CacheStore(CacheConfig(root / "c", variants=1, max_bytes=64 << 30), identity)
    indices = [np.arange(b * batch_size, (b + 1) * batch_size) for b in range(batches)]

    old = _cpu_us_per_record(
        lambda b: store.encode_batch(indices[b], 0, images.copy(), labels), batches, batch_size
    )
    buffer = np.empty((batch_size, store.record_size), np.uint8)
    new = _cpu_us_per_record(
        lambda b: store.encode_batch(indices[b], 0, images, labels, out=buffer),
        batches,
        batch_size,
    )
    encoded = [store.encode_batch(indices[b], 0, images, labels) for b in range(batches)]
    write = _cpu_us_per_record(lambda b: store.put_encoded([encoded[b]]), batches, batch_size)

    scans = []
    for _ in range(3):
        store._known_complete.clear()  # measure the scan itself, not the memory of it
        start = time.perf_counter()
        assert store.completed(0).all()
        scans.append(time.perf_counter() - start)
    start = time.perf_counter()
    assert store.completed(0).all()
    remembered = time.perf_counter() - start
    store.close()
    return {
        "records": n,
        "copy_and_encode_new_memory_us": old,
        "encode_reused_buffer_us": new,
        "write_put_commit_us": write,
        "completed_scan_ms": 1e3 * statistics.median(scans),
        "completed_scan_us_per_record": 1e6 * statistics.median(scans) / n,
        "completed_remembered_ms": 1e3 * remembered,
    }


@click.command()
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option(
    "--records-224", type=click.IntRange(min=1), default=5120, show_default=True,
    help="Records written at 224x224x3 (about 150 KB each).",
)
@click.option("--records-28", type=click.IntRange(min=1), default=51200, show_default=True)
def main(batch_size: int, records_224: int, records_28: int) -> None:
    """CPU per record of encoding, writing and scanning the cache."""
    results: dict[str, Any] = {"machine": machine_info(), "batch_size": batch_size, "shapes": {}}
    counts = {"224x224x3": records_224, "28x28x1": records_28}
    rows = []
    for name, shape in SHAPES.items():
        batches = max(1, counts[name] // batch_size)
        with tempfile.TemporaryDirectory() as tmp:
            r = measure(shape, batch_size, batches, Path(tmp))
        results["shapes"][name] = r
        rows.append(
            [
                name,
                f"{r['records']:,}",
                f"{r['copy_and_encode_new_memory_us']:.1f}",
                f"{r['encode_reused_buffer_us']:.1f}",
                f"{r['write_put_commit_us']:.1f}",
                f"{r['completed_scan_ms']:.2f} ({r['completed_scan_us_per_record']:.2f} us/rec)",
                f"{r['completed_remembered_ms']:.3f}",
            ]
        )
    click.echo(
        format_table(
            [
                "sample",
                "records",
                "copy+encode, new memory (us/rec)",
                "encode, reused buffer (us/rec)",
                "write: put+commit (us/rec)",
                "completed() scan (ms)",
                "completed() remembered (ms)",
            ],
            rows,
        )
    )
    click.echo(f"wrote {write_results('cache_costs', results)}")


if __name__ == "__main__":
    main()
