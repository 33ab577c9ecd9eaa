"""Deterministic samples and child-process entry points for the cache tests.

Child processes (``spawn``/subprocess) import this module, so it must stay
importable on its own and import nothing heavy beyond ``cache`` and numpy.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from cache import CacheConfig, CacheIdentity, CacheStore, FillMode

SHAPE = (3, 16, 16)
NUM_SAMPLES = 512


def identity(
    *,
    recipe: str = "recipe-v1",
    dataset: object = None,
    shape: tuple[int, ...] = SHAPE,
    num_samples: int = NUM_SAMPLES,
) -> CacheIdentity:
    """A small identity: 512 samples of 3x16x16 unless told otherwise."""
    if dataset is None:
        dataset = {"files": "f0", "sizes": "s0"}
    return CacheIdentity(recipe, dataset, shape, num_samples)  # type: ignore[arg-type]


def image(index: int, variant: int, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    """The sample written for ``(index, variant)``: seeded noise, one value per pair."""
    rng = np.random.default_rng(index * 65536 + variant)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def label(index: int) -> int:
    return index % 10


def images(indices: np.ndarray, variant: int, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    if len(indices) == 0:
        return np.empty((0, *shape), np.uint8)
    return np.stack([image(int(i), variant, shape) for i in indices])


def labels(indices: np.ndarray) -> np.ndarray:
    return np.asarray([label(int(i)) for i in indices], dtype=np.int64)


def check_batch(store: CacheStore, indices: np.ndarray, variant: int) -> int:
    """Read ``indices``; raise if a found sample differs from what was written. Returns hits."""
    out = np.zeros((len(indices), *store.sample_shape), np.uint8)
    lab = np.full(len(indices), -1, np.int64)
    found = store.get_batch(indices, variant, out, labels=lab)
    for row in np.flatnonzero(found):
        i = int(indices[row])
        if not np.array_equal(out[row], image(i, variant, store.sample_shape)):
            raise AssertionError(f"sample {i} variant {variant} served wrong bytes")
        if lab[row] != label(i):
            raise AssertionError(f"sample {i} variant {variant} served label {lab[row]}")
    return int(found.sum())


def fill_until_full(store: CacheStore, batch: int, variant: int = 0) -> int:
    """Write variant ``variant`` batch by batch until the store stops admitting (or every
    sample is written). Returns the records written."""
    shape = store.sample_shape
    written = 0
    for start in range(0, store.identity.num_samples, batch):
        idx = np.arange(start, min(start + batch, store.identity.num_samples))
        written += store.put_batch(idx, variant, images(idx, variant, shape), labels(idx))
        if not store.admitting:
            break
    return written


def fill_until_error(store: CacheStore, n: int, batch: int) -> tuple[int, str | None]:
    """Write samples ``0 .. n - 1`` of variant 0 batch by batch until a write raises
    :class:`~cache.CacheError` (a full disk, a file-size limit). Returns the records
    written and the error's message (``None`` if every batch was written)."""
    from cache import CacheError

    shape = store.sample_shape
    written = 0
    for start in range(0, n, batch):
        idx = np.arange(start, min(start + batch, n))
        try:
            written += store.put_batch(idx, 0, images(idx, 0, shape), labels(idx))
        except CacheError as exc:
            return written, str(exc)
    return written, None


# -- damaging a cache's file, as a failing disk or a careless copy would -----------------
def flip(path: Path, offset: int, length: int = 64) -> None:
    """Invert ``length`` bytes of the file ``path`` from ``offset``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(length)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


def damage_record_pages(path: Path, index: int, variant: int) -> list[int]:
    """Invert the page header (first 64 bytes) of every page of ``path/data.mdb`` holding
    the record of ``(index, variant)``: the live leaf among them, and any stale copy.

    No environment of ``path`` may be open in this process. Returns the page numbers.
    """
    import lmdb

    from cache.record import pack_key

    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=2, subdir=True)
    try:
        psize = int(env.stat()["psize"])
        records = env.open_db(b"records", create=False)
        with env.begin(db=records) as txn:
            value = bytes(txn.get(pack_key(index, variant)))
    finally:
        env.close()
    data = (path / "data.mdb").read_bytes()
    pages = set()
    start = data.find(value)
    while start >= 0:
        pages.add(start // psize)
        start = data.find(value, start + 1)
    for page in sorted(pages):
        flip(path / "data.mdb", page * psize)
    return sorted(pages)


# -- child process entry points --------------------------------------------------------
def fill_forever(path: str, batch: int, shape: tuple[int, ...]) -> None:
    """Fill variant 0 then 1 batch by batch, printing ``begin k`` / ``committed k``."""
    store = CacheStore(
        CacheConfig(path, variants=2, max_bytes=1 << 30, fill=FillMode.INLINE),
        identity(shape=shape),
    )
    k = 0
    for variant in (0, 1):
        for start in range(0, NUM_SAMPLES, batch):
            idx = np.arange(start, min(start + batch, NUM_SAMPLES))
            data = images(idx, variant, shape)
            print(f"begin {k}", flush=True)
            store.put_batch(idx, variant, data, labels(idx))
            print(f"committed {k}", flush=True)
            k += 1
    print("done", flush=True)


def writer_process(path: str, rounds: int) -> None:
    """One writer: variant 0, 64 samples per transaction."""
    store = CacheStore(CacheConfig(path, variants=2, max_bytes=64 << 20), identity())
    for r in range(rounds):
        idx = np.arange(r * 64, (r + 1) * 64) % NUM_SAMPLES
        store.put_batch(idx, 0, images(idx, 0), labels(idx))
    store.close()


def reader_process(path: str, seconds: float, result_path: str) -> None:
    """A reader: random batches of variant 0 checked against the written bytes."""
    import time

    store = CacheStore(
        CacheConfig(path, variants=2, max_bytes=64 << 20, fill=FillMode.OFF), identity()
    )
    rng = np.random.default_rng(os.getpid())
    reads = hits = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        idx = rng.choice(NUM_SAMPLES, size=32, replace=False)
        hits += check_batch(store, idx, 0)
        reads += 32
    Path(result_path).write_text(json.dumps({"reads": reads, "hits": hits}))
    store.close()


if __name__ == "__main__":  # python -m tests.cache.helpers fill PATH BATCH C H W
    if sys.argv[1] == "fill":
        fill_forever(sys.argv[2], int(sys.argv[3]), tuple(int(x) for x in sys.argv[4:7]))
