"""The real workload suite: varied Dask pipelines whose temporary files are logged.

Each :class:`Workload` builds a real Dask pipeline (dataframe shuffle, groupby
aggregation and apply, hash-join merge, sort, set_index, array rechunk and matmul,
bag foldby and groupby, a persisted frame reused by several queries, and two caches of
shards read many times: augmented images for several training epochs, features for
k-means iterations). :func:`collect` runs them at several sizes and seeds on a
multi-process ``LocalCluster`` whose workers have little managed memory, so they spill,
and use P2P shuffle and rechunk, so they write shuffle files. Every temporary file goes
through the worker-side storage (:mod:`placement.storage`), which counts its I/O and
writes one log row per file when it is deleted. Nothing about the files is drawn from a
chosen distribution: sizes, operation counts and lifetimes are what the runs did.

Before each run the driver computes the optimized task graph and tells the workers
(:class:`~placement.storage.RunContext`) the pipeline, run id, input bytes, input
partitions, number of tasks of each stage and the stage of each P2P shuffle, so each
file's creation-time facts are filled in.

Output of :func:`collect`: ``<out_dir>/io_log.parquet`` (every row of the runs that
finished whole, log schema; a failed run, or one during which a worker left, is partial
and left out) and ``<out_dir>/summary.json`` (rows, bytes, operations and density spread
per pipeline, and the rows left out per run).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from placement.errors import PlacementError
from placement.logwriter import read_logs
from placement.storage.config import spill_heavy_settings
from placement.tier import Tier

logger = logging.getLogger(__name__)

LOG_FILE = "io_log.parquet"
SUMMARY_FILE = "summary.json"


class WorkloadError(PlacementError, ValueError):
    """An unknown pipeline or size, or a bad collection setting."""


# ---------------------------------------------------------------------- sizes and specs
@dataclass(frozen=True)
class Size:
    """How big a run is.

    Parameters
    ----------
    name : str
        ``small``, ``medium`` or ``large``.
    partitions : int
        Input partitions of dataframe and bag pipelines.
    rows : int
        Rows per dataframe partition (4 numeric columns: 32 bytes a row).
    array_side : int
        Side of the square float64 array of array pipelines.
    records : int
        Records per bag partition.
    """

    name: str
    partitions: int
    rows: int
    array_side: int
    records: int


SIZES: dict[str, Size] = {
    s.name: s
    for s in (
        Size("small", partitions=12, rows=120_000, array_side=3000, records=40_000),
        Size("medium", partitions=24, rows=200_000, array_side=4800, records=60_000),
        Size("large", partitions=48, rows=350_000, array_side=8000, records=100_000),
    )
}


@dataclass(frozen=True)
class WorkloadSpec:
    """One run's parameters: size, seed and cluster width."""

    size: Size
    seed: int
    n_workers: int

    @property
    def n_keys(self) -> int:
        """Distinct join/group keys: varies with the seed so runs differ in cardinality."""
        per = (20, 5, 80)[self.seed % 3]
        return max(100, self.size.partitions * self.size.rows // per)


@dataclass
class Plan:
    """What a workload computes.

    Collection pipelines give ``queries``: ``persist`` (optional) is persisted first and
    handed to ``queries``, which returns the collections computed one after the other.
    Pipelines built on futures give ``drive`` instead, called with the client, and the
    number of tasks of each of their stages (``stage_tasks``), which the driver cannot
    read from a graph ahead of time.
    """

    queries: Callable[[Any], Sequence[Any]] | None
    input_bytes: int
    n_partitions_in: int
    persist: Any = None
    drive: Callable[[Any], None] | None = None
    stage_tasks: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.queries is None) == (self.drive is None):
            raise WorkloadError("a plan gives either queries or drive, not both or neither")


@dataclass(frozen=True)
class Workload:
    """A named pipeline of the suite."""

    name: str
    operator: str
    description: str
    plan: Callable[[WorkloadSpec], Plan]


# ---------------------------------------------------------------------- input generators
@dataclass(frozen=True)
class FramePart:
    """Recipe of one generated dataframe partition (runs on the worker)."""

    seed: int
    index: int
    rows: int
    n_keys: int
    skewed: bool


def make_frame(part: FramePart) -> pd.DataFrame:
    """A dataframe partition: int64 key ``k`` (uniform or Zipf-skewed), floats ``v``, ``w``, int ``t``."""
    rng = np.random.default_rng([part.seed, part.index])
    if part.skewed:
        k = (rng.zipf(1.3, part.rows) - 1) % part.n_keys
    else:
        k = rng.integers(0, part.n_keys, part.rows)
    return pd.DataFrame(
        {
            "k": k.astype("int64"),
            "v": rng.random(part.rows),
            "w": rng.standard_normal(part.rows),
            "t": rng.integers(0, 1_000_000, part.rows),
        }
    )


def make_dim(part: FramePart) -> pd.DataFrame:
    """A partition of the dimension table joined by ``merge``: key ``k`` and attribute ``a``."""
    rng = np.random.default_rng([part.seed, part.index, 7])
    lo = part.index * part.rows
    k = np.arange(lo, lo + part.rows, dtype="int64") % part.n_keys
    return pd.DataFrame({"k": k, "a": rng.random(part.rows)})


def make_records(part: FramePart) -> list[tuple[int, float]]:
    """A bag partition of ``(key, value)`` records."""
    rng = np.random.default_rng([part.seed, part.index, 11])
    keys = rng.integers(0, max(1, part.n_keys // 50), part.rows).tolist()
    values = rng.random(part.rows).tolist()
    return list(zip(keys, values))


def _parts(spec: WorkloadSpec, rows: int | None = None, n: int | None = None) -> list[FramePart]:
    return [
        FramePart(spec.seed, i, rows or spec.size.rows, spec.n_keys, skewed=spec.seed % 3 == 1)
        for i in range(n or spec.size.partitions)
    ]


def _frame(spec: WorkloadSpec, label: str = "input") -> tuple[Any, int]:
    import dask.dataframe as dd

    parts = _parts(spec)
    sample = make_frame(parts[0])
    nbytes = int(sample.memory_usage(deep=True).sum()) * len(parts)
    return dd.from_map(
        make_frame, parts, meta=sample.iloc[:0], label=label, enforce_metadata=False
    ), nbytes


# ---------------------------------------------------------------------- pipelines
def _top_rows(group: pd.DataFrame) -> pd.DataFrame:
    return group[["v", "w", "t"]].nlargest(2, "v")


def _group_sum(part: pd.DataFrame) -> pd.DataFrame:
    return part.groupby("k", sort=False)[["v", "w"]].sum()


def _partition_bounds(part: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"lo": [part["v"].min()], "hi": [part["v"].max()], "n": [len(part)]})


def _product_sum(part: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"x": [float((part["v"] * part["a"]).sum())]})


def _partition_len(part: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"n": [len(part)]})


def _plan_df_shuffle(spec: WorkloadSpec) -> Plan:
    """Shuffle on the key, keep the shuffled frame, run two queries on it."""
    df, nbytes = _frame(spec)
    meta = pd.DataFrame({"v": pd.Series(dtype="float64"), "w": pd.Series(dtype="float64")})
    meta.index.name = "k"
    shuffled = df.shuffle("k", shuffle_method="p2p")

    def queries(p: Any) -> list[Any]:
        return [p.map_partitions(_group_sum, meta=meta)["v"].sum(), p["w"].max()]

    return Plan(queries, nbytes, df.npartitions, persist=shuffled)


def _plan_groupby_agg(spec: WorkloadSpec) -> Plan:
    """Groupby aggregation with ``split_out`` (a P2P shuffle of partial aggregates)."""
    df, nbytes = _frame(spec)
    out = df.groupby("k").agg(
        {"v": ["sum", "mean"], "w": "max", "t": "count"},
        split_out=max(2, df.npartitions // 2),
        shuffle_method="p2p",
    )
    return Plan(lambda _: [out], nbytes, df.npartitions)


def _plan_groupby_apply(spec: WorkloadSpec) -> Plan:
    """Top rows of each of 256 groups (groupby-apply over a P2P shuffle)."""
    df, nbytes = _frame(spec)
    meta = make_frame(FramePart(0, 0, 2, 10, False))[["v", "w", "t"]].iloc[:0]
    out = (
        df.assign(g=df["k"] % 256)
        .groupby("g")
        .apply(_top_rows, meta=meta, shuffle_method="p2p")
        .map_partitions(_partition_len, meta={"n": "int64"})
    )
    return Plan(lambda _: [out], nbytes, df.npartitions)


def _plan_merge(spec: WorkloadSpec) -> Plan:
    """Hash join (two P2P shuffles), keep the joined frame, then a second P2P groupby on it."""
    import dask.dataframe as dd

    left, nbytes = _frame(spec, label="fact")
    dim_rows = max(1000, spec.n_keys // max(1, spec.size.partitions // 2))
    dim_parts = _parts(spec, rows=dim_rows, n=max(2, spec.size.partitions // 2))
    dim_sample = make_dim(dim_parts[0])
    right = dd.from_map(
        make_dim, dim_parts, meta=dim_sample.iloc[:0], label="dim", enforce_metadata=False
    )
    nbytes += int(dim_sample.memory_usage(deep=True).sum()) * len(dim_parts)
    joined = left.merge(right, on="k", how="inner", shuffle_method="p2p")
    joined = joined.assign(x=joined["v"] * joined["a"], b=joined["t"] % 97)

    def queries(p: Any) -> list[Any]:
        return [
            p.groupby("b")["x"].sum(split_out=4, shuffle_method="p2p"),
            p.map_partitions(_product_sum, meta={"x": "float64"}),
        ]

    return Plan(queries, nbytes, left.npartitions + right.npartitions, persist=joined)


def _plan_sort_values(spec: WorkloadSpec) -> Plan:
    """Global sort (quantiles, then a P2P shuffle), kept; then bounds, head and tail."""
    df, nbytes = _frame(spec)
    ordered = df.sort_values("v", shuffle_method="p2p")

    def queries(p: Any) -> list[Any]:
        bounds = p.map_partitions(
            _partition_bounds, meta={"lo": "float64", "hi": "float64", "n": "int64"}
        )
        return [bounds, p.head(1000, compute=False), p.tail(1000, compute=False)]

    return Plan(queries, nbytes, df.npartitions, persist=ordered)


def _plan_set_index(spec: WorkloadSpec) -> Plan:
    """set_index (quantiles, then P2P), kept, then range lookups touching a few partitions."""
    df, nbytes = _frame(spec)
    indexed = df.set_index("t", shuffle_method="p2p")

    def queries(p: Any) -> list[Any]:
        out = [p.loc[lo : lo + 50_000]["v"].sum() for lo in (100_000, 500_000, 900_000)]
        return [*out, p["w"].sum()]

    return Plan(queries, nbytes, df.npartitions, persist=indexed)


def _plan_array_rechunk(spec: WorkloadSpec) -> Plan:
    import dask.array as da

    n = spec.size.array_side
    rows = max(1, n // spec.size.partitions)
    x = da.random.default_rng(spec.seed).random((n, n), chunks=(rows, n))
    y = x.rechunk((n, rows), method="p2p")
    out = (y - y.mean(axis=0)).std(axis=0)
    return Plan(lambda _: [out], n * n * 8, x.npartitions)


def _plan_array_matmul(spec: WorkloadSpec) -> Plan:
    import dask.array as da

    n = spec.size.array_side
    c = max(100, n // 4)
    x = da.random.default_rng(spec.seed).standard_normal((n, n), chunks=(c, c))
    out = (x @ x.T).sum(axis=1)
    return Plan(lambda _: [out], n * n * 8, x.npartitions)


def _add_value(acc: float, rec: tuple[int, float]) -> float:
    return acc + rec[1]


def _add(a: float, b: float) -> float:
    return a + b


def _first(rec: tuple[int, float]) -> int:
    return rec[0]


def _group_size(kv: tuple[int, list[Any]]) -> tuple[int, int]:
    return kv[0], len(kv[1])


def _bag(spec: WorkloadSpec, records: int | None = None) -> tuple[Any, int]:
    import dask.bag as db
    from dask.sizeof import sizeof

    parts = _parts(spec, rows=records or spec.size.records)
    nbytes = int(sizeof(make_records(parts[0]))) * len(parts)
    return db.from_sequence(parts, npartitions=len(parts)).map(make_records).flatten(), nbytes


def _value(rec: tuple[int, float]) -> float:
    return rec[1]


def _plan_bag_foldby(spec: WorkloadSpec) -> Plan:
    """Records kept in memory (Python objects: they spill), then foldby and a sum."""
    bag, nbytes = _bag(spec)

    def queries(p: Any) -> list[Any]:
        return [p.foldby(_first, _add_value, 0.0, _add, 0.0), p.map(_value).sum()]

    return Plan(queries, nbytes, bag.npartitions, persist=bag)


def _plan_bag_groupby(spec: WorkloadSpec) -> Plan:
    """Group records by key through Dask's task-based shuffle (many small intermediates)."""
    bag, nbytes = _bag(spec, records=spec.size.records // 2)
    out = bag.groupby(_first, shuffle="tasks").map(_group_size)
    return Plan(lambda _: [out], nbytes, bag.npartitions)


def _plan_persist_reuse(spec: WorkloadSpec) -> Plan:
    df, nbytes = _frame(spec, label="base")

    def queries(persisted: Any) -> list[Any]:
        return [
            persisted["v"].sum(),
            persisted[persisted["w"] > 0.5]["k"].count(),
            persisted.groupby("k")["v"].mean(split_out=1).sum(),
            persisted["t"].max(),
        ]

    return Plan(queries, nbytes, df.npartitions, persist=df)


# ---------------------------------------------------------------------- cache-shard pipelines
IMAGE_SIDE = 28
N_CLASSES = 10
#: One augmented training sample of a shard: pixels scaled to [0, 1] and the label.
SAMPLE = np.dtype([("x", "<f4", (IMAGE_SIDE * IMAGE_SIDE,)), ("y", "<i8")])
#: Step size of the softmax regression trained by ``augment_cache``.
LEARNING_RATE = 0.5


#: Seconds a task may wait for a worker it may run on (a shard reader pinned to a worker
#: that has left) before the scheduler fails it (``distributed.scheduler.no-workers-timeout``).
NO_WORKERS_TIMEOUT_S = 60.0
#: Seconds :func:`_gather_shards` waits for the other shard writers once one has failed.
SHARD_WAIT_S = 2 * NO_WORKERS_TIMEOUT_S


@dataclass(frozen=True)
class ImagePart:
    """Recipe of one partition of generated grey images (runs on the worker)."""

    seed: int
    index: int
    n: int


def make_images(part: ImagePart) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 28x28 uint8 images of 10 classes (a per-seed class template plus noise) and labels."""
    templates = np.random.default_rng([part.seed, 99]).random((N_CLASSES, IMAGE_SIDE, IMAGE_SIDE))
    rng = np.random.default_rng([part.seed, part.index, 13])
    labels = rng.integers(0, N_CLASSES, part.n)
    noisy = templates[labels] * 160 + rng.normal(0, 40, (part.n, IMAGE_SIDE, IMAGE_SIDE))
    return np.clip(noisy, 0, 255).astype(np.uint8), labels.astype(np.int64)


def augment_images(raw: tuple[np.ndarray, np.ndarray], seed: int) -> np.ndarray:
    """Augmented samples (:data:`SAMPLE` records): a random 28x28 crop of the image
    padded by 2 pixels (reflected), a random horizontal flip, pixels scaled to [0, 1]."""
    images, labels = raw
    n = len(images)
    rng = np.random.default_rng(seed)
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2)), mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(
        padded, (IMAGE_SIDE, IMAGE_SIDE), axis=(1, 2)
    )
    crops = windows[np.arange(n), rng.integers(0, 5, n), rng.integers(0, 5, n)]
    flip = rng.random(n) < 0.5
    crops = np.where(flip[:, None, None], crops[:, :, ::-1], crops)
    out = np.empty(n, SAMPLE)
    out["x"] = crops.reshape(n, -1) / np.float32(255)
    out["y"] = labels
    return out


def augment_shard(raw: tuple[np.ndarray, np.ndarray], name: str, seed: int, n_shards: int) -> Any:
    """Task: augment one partition of images, shuffle the samples, and cache them as shard
    ``name`` (shuffled when written, so an epoch can read contiguous batches)."""
    from placement.storage.shards import put_shard

    samples = augment_images(raw, seed)
    samples = samples[np.random.default_rng([seed, 1]).permutation(len(samples))]
    return put_shard(name, samples, stage="augmented-shard", n_shards=n_shards)


def train_shard(ref: Any, weights: np.ndarray, batch_size: int, seed: int) -> np.ndarray:
    """Task: one epoch of mini-batch SGD of softmax regression over a cached shard,
    from ``weights`` (pixels x classes, bias last); returns the new weights.

    The shard is read in contiguous batches in a shuffled batch order (one read
    operation per batch), as record-shard formats (TFRecord, WebDataset, DALI's
    readers) are read: samples are shuffled when the shard is written.
    """
    from placement.storage.shards import worker_shards

    w = weights.copy()
    for batch in worker_shards().batches(ref, batch_size, rng=np.random.default_rng(seed)):
        x, y = batch["x"], batch["y"]
        logits = x @ w[:-1] + w[-1]
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(y)), y] -= 1.0
        w[:-1] -= LEARNING_RATE * (x.T @ p) / len(y)
        w[-1] -= LEARNING_RATE * p.mean(axis=0)
    return w


def _worker_addresses(client: Any) -> set[str]:
    """Addresses of the workers the scheduler has now."""
    return set(client.scheduler_info(n_workers=-1)["workers"])


def _pinned(
    client: Any,
    fn: Callable[..., Any],
    ref: Any,
    *args: Any,
    workers: Collection[str] | None = None,
) -> Any:
    """Submit ``fn(ref, *args)`` to the worker that holds shard ``ref``, and only there.

    A task pinned to a worker that has left never runs (a restarted worker has a new
    address), so the worker is checked first: ``workers`` are the addresses alive now
    (asked from the scheduler when not given). If the worker leaves after the task is
    submitted, the scheduler fails the task after :data:`NO_WORKERS_TIMEOUT_S` seconds
    (``distributed.scheduler.no-workers-timeout``, set by :func:`dask_settings`).

    Raises
    ------
    ShardError
        If ``ref``'s worker is not among the workers alive.
    """
    from placement.storage.errors import ShardError

    alive = _worker_addresses(client) if workers is None else workers
    if ref.worker not in alive:
        raise ShardError(
            f"cache shard {ref.name!r} lives on worker {ref.worker}, which has left the "
            f"cluster (workers now: {sorted(alive)}); its shards went with it: rebuild the "
            "cache (run the pipeline again)"
        )
    return client.submit(
        fn, ref, *args, workers=[ref.worker], allow_other_workers=False, pure=False
    )


def _gather_shards(client: Any, futures: Sequence[Any], refs: list[Any]) -> None:
    """Put the :class:`~placement.storage.ShardRef` results of ``futures`` in ``refs``.

    If a future fails, the others are waited for (up to :data:`SHARD_WAIT_S` seconds;
    not after an interrupt) and the refs of those that finished are put in ``refs``
    before the error is raised, so the caller's :func:`_live_shards` drops their shards
    instead of leaving them alive until the cluster closes.
    """
    from distributed import wait

    try:
        refs[:] = client.gather(futures)
    except BaseException as exc:
        try:
            if isinstance(exc, Exception):
                with contextlib.suppress(TimeoutError):
                    wait(futures, timeout=SHARD_WAIT_S)
            refs[:] = client.gather([f for f in futures if f.status == "finished"])
        except Exception as again:  # noqa: BLE001 - the first error is the one reported
            logger.warning("collecting the cache shards written before a failure failed: %s", again)
        raise


@contextlib.contextmanager
def _live_shards(client: Any) -> Iterator[list[Any]]:
    """A list for the refs of a driver's live shards, dropped when the block ends (after a
    failure too, without hiding its error)."""
    refs: list[Any] = []
    try:
        yield refs
    except BaseException:
        _drop_shards(client, refs, cleanup=True)
        raise
    _drop_shards(client, refs)


def _drop_shards(client: Any, refs: Sequence[Any], *, cleanup: bool = False) -> None:
    """Drop the shards ``refs`` on their workers. ``cleanup=True`` (after a failed run)
    logs a failure instead of raising it, so the run's own error is the one reported.

    Shards of a worker that has left are skipped: they are gone with it. Their files are
    not deleted by the store (no log row); the store of the worker that replaces it
    removes the dead store's directory
    (:meth:`~placement.storage.TieredFileStore.cleanup_orphans`).
    """
    from placement.storage.shards import drop_shard

    if not refs:
        return
    try:
        alive = _worker_addresses(client)
        gone = [r for r in refs if r.worker not in alive]
        if gone:
            logger.warning(
                "%d cache shard(s) were on worker(s) %s, which left the cluster; they are gone",
                len(gone),
                sorted({r.worker for r in gone}),
            )
        client.gather(
            [_pinned(client, drop_shard, r, workers=alive) for r in refs if r.worker in alive]
        )
    except Exception:
        if not cleanup:
            raise
        logger.warning("dropping %d cache shard(s) after a failed run failed", len(refs))


def _plan_augment_cache(spec: WorkloadSpec) -> Plan:
    """Augmented images cached in shards and reused for several epochs before they are
    augmented afresh (the data plane's cache-then-fresh training, on Dask).

    Epochs read each shard in batches of 128 samples. Read one sample per operation
    instead (:meth:`~placement.storage.ShardCache.take`, as a map-style dataset does),
    this pipeline's shards made 98% of the suite's all-HDD cost in one collection, and
    every policy's savings were decided by them alone.
    """
    n = spec.size.partitions
    per = spec.size.records // 16
    epochs = 6
    reuse = (2, 3, 6)[spec.seed % 3]  # epochs each generation of shards serves
    batch_size = 128
    parts = [ImagePart(spec.seed, i, per) for i in range(n)]
    generations = math.ceil(epochs / reuse)

    def drive(client: Any) -> None:
        token = uuid.uuid4().hex[:6]
        raw = client.map(make_images, parts, pure=False)
        weights = np.zeros((IMAGE_SIDE * IMAGE_SIDE + 1, N_CLASSES))
        with _live_shards(client) as refs:
            for epoch in range(epochs):
                if epoch % reuse == 0:
                    _drop_shards(client, refs)
                    names = [f"aug-{token}-e{epoch}-{i}" for i in range(n)]
                    seeds = [spec.seed * 1_000_003 + epoch * n + i for i in range(n)]
                    refs.clear()  # dropped: a failure below must not drop them again
                    _gather_shards(
                        client,
                        client.map(augment_shard, raw, names, seeds, n_shards=n, pure=False),
                        refs,
                    )
                alive = _worker_addresses(client)
                futures = [
                    _pinned(
                        client, train_shard, r, weights, batch_size, epoch * n + i, workers=alive
                    )
                    for i, r in enumerate(refs)
                ]
                weights = np.mean(client.gather(futures), axis=0)

    stage_tasks = {
        "make_images": n,
        "augment_shard": n * generations,
        "train_shard": n * epochs,
        "drop_shard": n * generations,
    }
    nbytes = n * per * (IMAGE_SIDE * IMAGE_SIDE + 8)
    return Plan(None, nbytes, n, drive=drive, stage_tasks=stage_tasks)


def feature_shard(frame: pd.DataFrame, name: str, n_keys: int, n_shards: int) -> Any:
    """Task: the frame's float32 feature matrix, cached as shard ``name``."""
    from placement.storage.shards import put_shard

    v, w, t = (frame[c].to_numpy(np.float64) for c in ("v", "w", "t"))
    k = frame["k"].to_numpy(np.float64) / max(1, n_keys)
    x = np.column_stack([v, w, t / 1e6, k, v * w, v * v, np.tanh(w), (t % 1000) / 1000])
    return put_shard(name, x.astype(np.float32), stage="feature-shard", n_shards=n_shards)


def shard_head(ref: Any, n: int) -> np.ndarray:
    """Task: the first ``n`` records of a cached shard."""
    from placement.storage.shards import worker_shards

    return worker_shards().read(ref, 0, min(n, ref.n_records))


def kmeans_partial(
    ref: Any, centroids: np.ndarray, chunk_rows: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Task: one Lloyd step over a cached shard read in chunks: per-centroid sums of the
    nearest rows, their counts, and the inertia."""
    from placement.storage.shards import worker_shards

    k = len(centroids)
    sums = np.zeros_like(centroids, dtype=np.float64)
    counts = np.zeros(k, dtype=np.int64)
    inertia = 0.0
    c = centroids.astype(np.float32)
    c_sq = (c * c).sum(axis=1)
    for x in worker_shards().batches(ref, chunk_rows):
        d = (x * x).sum(axis=1)[:, None] - 2 * (x @ c.T) + c_sq[None]  # squared distances
        nearest = d.argmin(axis=1)
        inertia += float(np.maximum(d[np.arange(len(x)), nearest], 0).sum())
        counts += np.bincount(nearest, minlength=k)
        for j in range(x.shape[1]):
            sums[:, j] += np.bincount(nearest, weights=x[:, j], minlength=k)
    return sums, counts, inertia


def _plan_feature_cache(spec: WorkloadSpec) -> Plan:
    """Features cached in shards, then k-means (Lloyd) iterations over them until the
    centroids settle: each iteration reads every shard in chunks."""
    n = spec.size.partitions
    k = (4, 8, 16)[spec.seed % 3]
    max_iter, tol, chunk_rows = 12, 1e-4, 16_384
    parts = _parts(spec)

    def drive(client: Any) -> None:
        token = uuid.uuid4().hex[:6]
        frames = client.map(make_frame, parts, pure=False)
        names = [f"feat-{token}-{i}" for i in range(n)]
        with _live_shards(client) as refs:
            _gather_shards(
                client,
                client.map(
                    feature_shard, frames, names, n_keys=spec.n_keys, n_shards=n, pure=False
                ),
                refs,
            )
            del frames
            centroids = _pinned(client, shard_head, refs[0], k).result().astype(np.float64)
            for _ in range(max_iter):
                alive = _worker_addresses(client)
                partials = client.gather(
                    [
                        _pinned(client, kmeans_partial, r, centroids, chunk_rows, workers=alive)
                        for r in refs
                    ]
                )
                sums = sum(p[0] for p in partials)
                counts = sum(p[1] for p in partials)
                moved = np.where(
                    counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centroids
                )
                shift = float(np.abs(moved - centroids).max())
                centroids = moved
                if shift < tol:
                    break

    stage_tasks = {
        "make_frame": n,
        "feature_shard": n,
        "shard_head": 1,
        "kmeans_partial": n * max_iter,  # at most: the iterations stop once settled
        "drop_shard": n,
    }
    nbytes = n * spec.size.rows * 32
    return Plan(None, nbytes, n, drive=drive, stage_tasks=stage_tasks)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "df_shuffle",
            "shuffle",
            "P2P shuffle on a key, then per-partition groupby",
            _plan_df_shuffle,
        ),
        Workload(
            "groupby_agg",
            "groupby",
            "groupby aggregation with split_out over P2P",
            _plan_groupby_agg,
        ),
        Workload(
            "groupby_apply",
            "groupby",
            "groupby-apply (top rows per key) over P2P",
            _plan_groupby_apply,
        ),
        Workload(
            "merge", "merge", "hash join of a fact and a dimension table over P2P", _plan_merge
        ),
        Workload(
            "sort_values",
            "sort",
            "global sort on a float column (quantiles + P2P)",
            _plan_sort_values,
        ),
        Workload(
            "set_index",
            "set_index",
            "set_index on an int column (quantiles + P2P)",
            _plan_set_index,
        ),
        Workload(
            "array_rechunk",
            "rechunk",
            "row-chunked to column-chunked array via P2P rechunk",
            _plan_array_rechunk,
        ),
        Workload(
            "array_matmul", "matmul", "blocked x @ x.T and a row reduction", _plan_array_matmul
        ),
        Workload(
            "bag_foldby", "bag", "bag foldby (tree reduction of per-key sums)", _plan_bag_foldby
        ),
        Workload(
            "bag_groupby", "bag", "bag groupby through a task-based shuffle", _plan_bag_groupby
        ),
        Workload(
            "persist_reuse",
            "reuse",
            "a persisted frame read back by four queries",
            _plan_persist_reuse,
        ),
        Workload(
            "augment_cache",
            "cache",
            "augmented images cached in shards, reused for 2-6 epochs of training",
            _plan_augment_cache,
        ),
        Workload(
            "feature_cache",
            "cache",
            "features cached in shards, read by k-means iterations until convergence",
            _plan_feature_cache,
        ),
    )
}


# ---------------------------------------------------------------------- graph facts
@dataclass(frozen=True)
class GraphFacts:
    """What the driver learns from a run's optimized task graphs."""

    stage_tasks: dict[str, int]
    shuffle_stages: dict[str, str]
    shuffle_inputs: dict[str, int]


_BARRIER = "shuffle-barrier-"


@dataclass
class StageKeys:
    """The task keys of each stage (:func:`dask.utils.key_split`) in a run's graphs so far.

    ``tasks`` holds the keys of tasks that compute or hold data (persisted data are
    futures), ``aliases`` those of tasks that only give another task's output a new name
    (``dask._task_spec.Alias``: a persisted collection's own keys, a layer's output name).
    """

    tasks: dict[str, set[Any]] = field(default_factory=dict)
    aliases: dict[str, set[Any]] = field(default_factory=dict)

    def add(self, key: Any, alias: bool) -> bool:
        """Record ``key``; ``False`` if it was already recorded (as the same kind)."""
        from dask.utils import key_split

        stage = key_split(key)
        keys = (self.aliases if alias else self.tasks).setdefault(stage, set())
        if key in keys:
            return False
        keys.add(key)
        return True

    def counts(self) -> dict[str, int]:
        """Tasks of each stage: its computing tasks, or its aliases if it has no other."""
        return {
            stage: len(self.tasks.get(stage, ())) or len(self.aliases.get(stage, ()))
            for stage in {**self.tasks, **self.aliases}
        }


def _is_alias(task: Any) -> bool:
    try:
        from dask._task_spec import Alias
    except ImportError:  # a Dask without task-spec aliases
        return False
    return isinstance(task, Alias)


def graph_facts(
    collections: Iterable[Any],
    operator: str,
    *,
    first: int = 0,
    seen: StageKeys | None = None,
) -> GraphFacts:
    """Count tasks per stage and name each P2P shuffle of ``collections``' optimized graphs.

    A task key is counted once however many graphs hold it: queries reading one persisted
    collection all hold its keys, and its stage has as many tasks as it has partitions.
    Aliases (tasks that only rename another task's output) count only for a stage that
    has no other task, so a stage is not counted twice for the name its output gets.
    Shuffles are named ``<operator>-p2p<i>`` in graph order starting at ``first``, so the
    same pipeline names its shuffles the same way in every run.

    Parameters
    ----------
    collections : iterable of Dask collections
        The graphs of one phase of a run (a persisted collection, or the queries on it).
    operator : str
        Operator kind of the run, the prefix of the shuffle names.
    first : int
        Index of the first shuffle named here (the number named by earlier calls).
    seen : StageKeys, optional
        Task keys counted by earlier calls for the same run; updated in place. Keys
        already in it are not counted again (nor their shuffles renamed), and
        ``stage_tasks`` then covers the stages of the earlier calls too: the later
        phase's facts add to the earlier ones instead of replacing them.

    Returns
    -------
    GraphFacts
        Distinct tasks per stage (with ``seen``: over every call of the run), and the
        names and input partitions of the shuffles first seen here.
    """
    from dask.base import collections_to_expr

    stage_keys = StageKeys() if seen is None else seen
    barriers: list[tuple[int, int, str]] = []
    transfers: Counter[str] = Counter()
    for gi, coll in enumerate(collections):
        graph = dict(collections_to_expr([coll], True).optimize().__dask_graph__())
        for position, (key, task) in enumerate(graph.items()):
            if not stage_keys.add(key, _is_alias(task)):
                continue
            name = key[0] if isinstance(key, tuple) else key
            if not isinstance(name, str):
                continue
            if name.startswith(_BARRIER):
                # graphs of the same pipeline list their layers in the same order
                barriers.append((gi, position, name[len(_BARRIER) :]))
            elif "transfer-" in name:
                transfers[name.rsplit("-", 1)[-1]] += 1
    shuffle_stages = {
        sid: f"{operator}-p2p{i}" for i, (_, _, sid) in enumerate(sorted(barriers), first)
    }
    shuffle_inputs = {sid: transfers[sid] for sid in shuffle_stages if transfers[sid]}
    return GraphFacts(stage_keys.counts(), shuffle_stages, shuffle_inputs)


# ---------------------------------------------------------------------- running
@dataclass
class RunResult:
    """Outcome of one run of one workload.

    ``ok`` is true when the pipeline finished and no worker left the cluster during the
    run (its rows are whole); otherwise ``error`` says what went wrong.
    """

    pipeline: str
    size: str
    seed: int
    run_id: str
    wall_s: float
    ok: bool
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class CollectOptions:
    """Settings of :func:`collect` (validated at construction).

    Parameters
    ----------
    pipelines : sequence of str
        Workload names (default: all of :data:`WORKLOADS`).
    sizes : sequence of str
        Size names (default ``small``, ``medium``).
    seeds : sequence of int
        Seeds (default 0 to 5: each configuration of a pipeline runs twice, seeds
        ``s`` and ``s + 3`` sharing key cardinality and skew; more runs give the history
        features and the time split more earlier runs).
    n_workers : int
        Worker processes (one thread each).
    memory_limit : str
        Memory limit of each worker (bytes, such as ``"1GiB"``; more than 0).
    target_fraction : float
        ``distributed.worker.memory.target``: managed memory fraction above which
        workers spill (small, so the runs spill): a worker spills once it holds more
        than ``memory_limit * target_fraction`` bytes.
    tier : Tier
        Tier every file is placed on while collecting (the all-HDD baseline by default).
    scratch_dir : str, optional
        Parent of the tier directories (default: a fresh temporary directory, removed after).
    settle_timeout_s : float
        Seconds (0 or more) to wait after a run for its files to be deleted.
    """

    pipelines: Sequence[str] = tuple(WORKLOADS)
    sizes: Sequence[str] = ("small", "medium")
    seeds: Sequence[int] = (0, 1, 2, 3, 4, 5)
    n_workers: int = 2
    memory_limit: str = "1GiB"
    target_fraction: float = 0.025
    tier: Tier = Tier.HDD
    scratch_dir: str | None = None
    settle_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("pipelines", "sizes", "seeds"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise WorkloadError(
                    f"{name}={value!r} must be a list of values, such as {name}=[{value!r}]"
                )
        unknown = [p for p in self.pipelines if p not in WORKLOADS]
        if unknown or not self.pipelines:
            raise WorkloadError(
                f"unknown pipeline(s) {unknown or '(none given)'}; choose from {sorted(WORKLOADS)}"
            )
        bad_sizes = [s for s in self.sizes if s not in SIZES]
        if bad_sizes or not self.sizes:
            raise WorkloadError(
                f"unknown size(s) {bad_sizes or '(none given)'}; choose from {sorted(SIZES)}"
            )
        if not self.seeds or any(not _is_int(s) or s < 0 for s in self.seeds):
            raise WorkloadError(
                f"seeds={list(self.seeds)!r} must be non-negative ints (not bools), such as [0, 1]"
            )
        if not _is_int(self.n_workers) or self.n_workers < 1:
            raise WorkloadError(
                f"n_workers={self.n_workers!r} must be a positive int (not a bool), such as 2"
            )
        if not _is_real(self.target_fraction) or not 0 < self.target_fraction < 1:
            raise WorkloadError(
                f"target_fraction={self.target_fraction!r} must be a number between 0 and 1, "
                "such as 0.025"
            )
        if (
            not _is_real(self.settle_timeout_s)
            or not math.isfinite(self.settle_timeout_s)
            or self.settle_timeout_s < 0
        ):
            raise WorkloadError(
                f"settle_timeout_s={self.settle_timeout_s!r} must be a number of seconds, 0 or "
                "more, such as 30.0"
            )
        try:
            Tier(self.tier)
        except ValueError:
            raise WorkloadError(
                f"tier={self.tier!r} must be one of {[t.value for t in Tier]}"
            ) from None
        from dask.utils import parse_bytes

        try:
            limit = parse_bytes(self.memory_limit)
        except (ValueError, TypeError):
            raise WorkloadError(
                f"memory_limit={self.memory_limit!r} is not a size such as '1GiB'"
            ) from None
        if limit <= 0:
            raise WorkloadError(
                f"memory_limit={self.memory_limit!r} gives no limit, so nothing would spill; "
                "give a size above 0, such as '1GiB'"
            )

    @property
    def spill_threshold_bytes(self) -> int:
        """Bytes a worker holds before it spills: ``memory_limit * target_fraction``."""
        from dask.utils import parse_bytes

        return int(parse_bytes(self.memory_limit) * self.target_fraction)

    def runs(self) -> list[tuple[str, str, int]]:
        """Every (pipeline, size, seed) in run order."""
        return [(p, s, seed) for s in self.sizes for seed in self.seeds for p in self.pipelines]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def dask_settings(target_fraction: float) -> dict[str, Any]:
    """Dask config of the suite: P2P shuffles and rechunks, tight managed memory."""
    return {
        **spill_heavy_settings(target_fraction),
        "distributed.admin.low-level-log-length": 100,
        # a task pinned to a worker that has left fails instead of waiting forever
        "distributed.scheduler.no-workers-timeout": f"{NO_WORKERS_TIMEOUT_S}s",
    }


def run_workload(
    client: Any, workload: Workload, spec: WorkloadSpec, *, settle_timeout_s: float = 30.0
) -> RunResult:
    """Run one workload on ``client``'s cluster with its context set on every worker.

    Waits (up to ``settle_timeout_s`` seconds) until every temporary file of the run is
    deleted, so its rows are logged, then has every worker write its buffered rows.
    Returns a :class:`RunResult`; a failing pipeline is reported (``ok=False``), not
    raised. So is a run during which a worker left the cluster (killed, or restarted by
    its nanny): the rows that worker had not yet written, and the rows of its live
    files, are lost, so the run's rows are incomplete.
    """
    from placement.storage import flush_worker_logs, set_run_context, worker_storage_state

    run_id = f"{workload.name}-{spec.size.name}-s{spec.seed}-{uuid.uuid4().hex[:6]}"
    start = time.perf_counter()
    workers = _worker_addresses(client)
    ok, error = True, None
    try:
        _execute(client, workload, spec, run_id)
    except Exception as exc:  # noqa: BLE001 - a failing pipeline is recorded, the suite goes on
        ok, error = False, f"{type(exc).__name__}: {exc}"
        logger.warning("workload %s failed: %s", run_id, error)
    deadline = time.monotonic() + settle_timeout_s
    while time.monotonic() < deadline:
        # a worker leaving during the call answers with its error: it is reported below
        states = client.run(worker_storage_state, on_error="return")
        if all(isinstance(s, dict) and s["live_files"] == 0 for s in states.values()):
            break
        time.sleep(0.1)
    else:
        logger.warning("run %s: temporary files still alive after %.0f s", run_id, settle_timeout_s)
    client.run(set_run_context, None)
    client.run(flush_worker_logs)
    left = sorted(workers - _worker_addresses(client))
    if left:
        lost = (
            f"worker(s) {', '.join(left)} left the cluster during the run; the log rows they "
            "held and those of their live files are lost, so the run's rows are incomplete"
        )
        ok, error = False, lost if error is None else f"{lost}; {error}"
        logger.warning("run %s: %s", run_id, lost)
    return RunResult(
        workload.name, spec.size.name, spec.seed, run_id, time.perf_counter() - start, ok, error
    )


def _execute(client: Any, workload: Workload, spec: WorkloadSpec, run_id: str) -> None:
    """Run the plan; every collection and future is released when this returns."""
    from distributed import wait

    from placement.storage import RunContext, set_run_context

    plan = workload.plan(spec)
    known: dict[str, str] = {}
    inputs: dict[str, int] = {}
    stage_keys = StageKeys()  # every phase's task keys: counts add up, not replace

    def tell_workers(collections: Sequence[Any]) -> None:
        if collections:
            facts = graph_facts(collections, workload.operator, first=len(known), seen=stage_keys)
        else:
            facts = GraphFacts(dict(plan.stage_tasks), {}, {})
        known.update(facts.shuffle_stages)
        inputs.update(facts.shuffle_inputs)
        context = RunContext(
            pipeline=workload.name,
            run_id=run_id,
            job_id=run_id,
            operator=workload.operator,
            input_bytes=plan.input_bytes,
            n_partitions_in=plan.n_partitions_in,
            n_workers=spec.n_workers,
            stage_tasks=facts.stage_tasks,
            shuffle_stages=dict(known),
            shuffle_inputs=dict(inputs),
        )
        client.run(set_run_context, context)

    if plan.drive is not None:
        tell_workers([])
        plan.drive(client)
        return
    assert plan.queries is not None
    persisted = None
    if plan.persist is not None:
        tell_workers([plan.persist])
        persisted = client.persist(plan.persist)
        wait(persisted)
    queries = list(plan.queries(persisted))
    tell_workers(queries)
    for query in queries:
        client.compute(query).result()


def collect(
    out_dir: str | os.PathLike[str],
    options: CollectOptions | None = None,
    *,
    progress: bool = True,
    on_run: Callable[[RunResult], None] | None = None,
) -> dict[str, Any]:
    """Run the suite and write ``io_log.parquet`` and ``summary.json`` to ``out_dir``.

    Existing files in ``out_dir`` other than those two are left alone; the two are
    replaced only once the new ones are complete. ``io_log.parquet`` holds the rows of
    the runs that finished whole (``ok``): the rows of failed runs and of runs during
    which a worker left are partial, so they are dropped, with a warning, and counted
    per run id in the summary's ``dropped_rows``.

    While the suite runs, each finished run's log rows are flushed to a hidden
    ``.parts-*`` directory of ``out_dir``, which readers of ``out_dir`` skip
    (:func:`placement.logwriter.log_files`). If the collection is interrupted (Ctrl-C,
    or SIGTERM, which raises :class:`SystemExit` while this runs in the main thread) or
    fails, that directory is kept and the exception gets a note naming it: its logs
    hold the rows of the runs that finished whole, readable by every placement command.
    The rows of the run that was stopped and of failed runs are moved to its hidden
    ``.incomplete`` subdirectory, which readers of the directory skip as well.

    Returns
    -------
    dict
        The summary also written to ``summary.json``.

    Raises
    ------
    PlacementError
        If no run that finished whole left a log row (the error says why).
    """
    options = options or CollectOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts_dir = out / f".parts-{uuid.uuid4().hex[:8]}"
    results: list[RunResult] = []
    with _sigterm_raises():
        scratch = Path(tempfile.mkdtemp(prefix="placement-collect-", dir=options.scratch_dir))
        try:
            return _collect(out, options, parts_dir, scratch, results, progress, on_run)
        except BaseException as exc:
            _note_kept_parts(exc, parts_dir, results)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _collect(
    out: Path,
    options: CollectOptions,
    parts_dir: Path,
    scratch: Path,
    results: list[RunResult],
    progress: bool,
    on_run: Callable[[RunResult], None] | None,
) -> dict[str, Any]:
    """The body of :func:`collect`; appends each finished run to ``results``."""
    import dask
    import pyarrow.parquet as pq
    from distributed import Client, LocalCluster
    from tqdm.auto import tqdm

    from placement.storage import (
        FixedTier,
        PlacementWorkerPlugin,
        tiered_spill_buffer,
    )

    started = time.perf_counter()
    spill_kwargs = {
        "ssd_dir": str(scratch / "ssd"),
        "hdd_dir": str(scratch / "hdd"),
        "log_dir": str(parts_dir),
        "chooser": FixedTier(Tier(options.tier)),
        "memory_limit": options.memory_limit,
        "log_max_interval_s": 3600.0,
        "log_max_rows": 50_000,
    }
    with (
        dask.config.set(dask_settings(options.target_fraction)),
        LocalCluster(
            n_workers=options.n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=options.memory_limit,
            dashboard_address=None,
            local_directory=str(scratch / "dask"),
            data=(tiered_spill_buffer, spill_kwargs),
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(PlacementWorkerPlugin(flush_interval_s=3600.0))
        runs = options.runs()
        bar = tqdm(runs, desc="placement collect", unit="run", disable=not progress)
        for name, size, seed in bar:
            bar.set_postfix_str(f"{name}/{size}/s{seed}")
            spec = WorkloadSpec(SIZES[size], seed, options.n_workers)
            result = run_workload(
                client, WORKLOADS[name], spec, settle_timeout_s=options.settle_timeout_s
            )
            results.append(result)
            if on_run is not None:
                on_run(result)
    logs = read_logs(parts_dir) if parts_dir.exists() else None
    table = logs.table if logs is not None else None
    dropped: Counter[str] = Counter()
    if table is not None:
        keep = _whole_run_rows(table, {r.run_id for r in results if r.ok})
        dropped = _rows_per_run(table.filter(pc.invert(keep)))
        table = table.filter(keep)
    if dropped:
        logger.warning(
            "dropped %d log row(s) of runs that failed or lost a worker (rows per run: %s); "
            "io_log.parquet holds whole runs only",
            sum(dropped.values()),
            dict(dropped),
        )
    if table is None or table.num_rows == 0:
        raise PlacementError(_no_rows_message(options, parts_dir, results, dropped))

    tmp = out / f".{LOG_FILE}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, out / LOG_FILE)
    summary = summarize(table.to_pandas(), results)
    summary["dropped_rows"] = dict(dropped)
    summary["settings"] = {
        **{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(options).items()},
        "tier": Tier(options.tier).value,
    }
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    summary["bad_log_files"] = [str(p) for p, _ in logs.bad_files] if logs else []
    tmp_json = out / f".{SUMMARY_FILE}.tmp"
    tmp_json.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp_json, out / SUMMARY_FILE)
    shutil.rmtree(parts_dir, ignore_errors=True)
    return summary


def _no_rows_message(
    options: CollectOptions, parts_dir: Path, results: Sequence[RunResult], dropped: Counter[str]
) -> str:
    """Why a collection left no log row, and what to change."""
    if results and all(r.ok for r in results):
        return (
            f"the suite produced no log rows in {parts_dir}: every run finished, but no "
            "worker wrote a temporary file. The pipelines run "
            f"({', '.join(dict.fromkeys(options.pipelines))}) wrote no shuffle, rechunk or "
            "cache-shard file, and no worker reached its spill threshold of "
            f"{options.spill_threshold_bytes} bytes (memory_limit {options.memory_limit!r} x "
            f"target_fraction {options.target_fraction}). Lower --target-fraction or "
            "--memory-limit, or add larger --sizes"
        )
    lost = f"; {sum(dropped.values())} row(s) of failed runs were dropped" if dropped else ""
    return (
        f"the suite produced no log rows of a run that finished whole in {parts_dir}{lost}; "
        "check the workers' logs (runs: "
        + ", ".join(f"{r.run_id}: {r.error or 'ok'}" for r in results)
        + ")"
    )


def _whole_run_rows(table: Any, run_ids: Collection[str]) -> Any:
    """Boolean mask of the rows of ``table`` whose ``run_id`` is one of ``run_ids``."""
    import pyarrow as pa

    inside = pc.is_in(table["run_id"], value_set=pa.array(sorted(run_ids), pa.string()))
    return pc.fill_null(inside, False)


def _rows_per_run(table: Any) -> Counter[str]:
    """Rows of ``table`` per run id (``"(no run)"`` for rows without one)."""
    return Counter("(no run)" if r is None else str(r) for r in table["run_id"].to_pylist())


#: Subdirectory of a kept ``.parts-*`` directory holding the rows of unfinished runs.
INCOMPLETE_DIR = ".incomplete"


def _set_apart_unfinished(parts_dir: Path, run_ids: Collection[str]) -> Counter[str]:
    """Move the rows of ``parts_dir``'s log files that are not of ``run_ids`` to
    ``parts_dir/.incomplete`` (which readers of ``parts_dir`` skip); return the rows
    moved per run id. Each file is rewritten atomically; unreadable files are left."""
    import pyarrow.parquet as pq

    from placement.logwriter import log_files

    moved: Counter[str] = Counter()
    for path in log_files(parts_dir):
        try:
            table = pq.read_table(path)
            keep = _whole_run_rows(table, run_ids)
            n_keep = pc.sum(keep).as_py() or 0
            if n_keep == table.num_rows:
                continue
            rest = table.filter(pc.invert(keep))
            aside = parts_dir / INCOMPLETE_DIR / path.relative_to(parts_dir)
            aside.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rest, aside.with_name(f".{aside.name}.tmp"))
            os.replace(aside.with_name(f".{aside.name}.tmp"), aside)
            if n_keep:
                tmp = path.with_name(f".{path.name}.tmp")
                pq.write_table(table.filter(keep), tmp)
                os.replace(tmp, path)
            else:
                path.unlink()
            moved.update(_rows_per_run(rest))
        except Exception as exc:  # noqa: BLE001 - the collection's own error is the one raised
            logger.warning("could not set apart the unfinished runs' rows of %s: %s", path, exc)
    return moved


def _note_kept_parts(exc: BaseException, parts_dir: Path, results: Sequence[RunResult]) -> None:
    """Keep only whole runs' rows in ``parts_dir`` (the rest go to its ``.incomplete``) and
    tell (in a note on ``exc`` and in the log) where they are."""
    if not parts_dir.is_dir() or not any(parts_dir.rglob("*.parquet")):
        return
    whole = [r for r in results if r.ok]
    moved = _set_apart_unfinished(parts_dir, {r.run_id for r in whole})
    note = (
        f"the logs of the {len(whole)} run(s) finished before this are kept in {parts_dir}; "
        f"every placement command reads that directory (dataplane placement train {parts_dir} "
        "--out model/), and readers of its parent skip it"
    )
    if moved:
        note += (
            f". The {sum(moved.values())} row(s) of runs stopped part way or failed (rows per "
            f"run: {dict(moved)}) are set apart in {parts_dir / INCOMPLETE_DIR}, which those "
            "readers skip too"
        )
    add_note = getattr(exc, "add_note", None)  # Python >= 3.11; 3.10 gets the warning alone
    if add_note is not None:
        add_note(note)
    logger.warning("collection stopped: %s", note)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the block runs, SIGTERM raises ``SystemExit(143)`` (as Ctrl-C raises
    :class:`KeyboardInterrupt`), so a collection stopped by ``kill`` or a batch scheduler
    removes its scratch directory and keeps its finished runs. Only in the main thread
    (where Python runs signal handlers); the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _spread(values: np.ndarray) -> dict[str, float | None]:
    values = values[np.isfinite(values) & (values > 0)]
    if values.size == 0:
        return {"min": None, "median": None, "max": None, "orders_of_magnitude": None}
    lo, hi = float(values.min()), float(values.max())
    return {
        "min": lo,
        "median": float(np.median(values)),
        "max": hi,
        "p05": float(np.quantile(values, 0.05)),
        "p95": float(np.quantile(values, 0.95)),
        "orders_of_magnitude": round(math.log10(hi / lo), 2),
    }


def summarize(frame: pd.DataFrame, results: Sequence[RunResult] = ()) -> dict[str, Any]:
    """Rows, runs, bytes, operations and I/O-density spread per pipeline and file kind."""
    from placement.schema import io_density

    life = frame["deleted_at"].to_numpy(float) - frame["created_at"].to_numpy(float)
    frame = frame.assign(
        io_density=io_density(frame["read_ops"], frame["write_ops"], frame["size_bytes"], life)
    )

    def block(df: pd.DataFrame) -> dict[str, Any]:
        return {
            "rows": len(df),
            "runs": int(df["run_id"].nunique()),
            "by_kind": {str(k): int(v) for k, v in df["file_kind"].value_counts().items()},
            "write_bytes": int(df["write_bytes"].sum()),
            "read_bytes": int(df["read_bytes"].sum()),
            "write_ops": int(df["write_ops"].sum()),
            "read_ops": int(df["read_ops"].sum()),
            "stages": int(df["stage"].nunique()),
            "io_density": _spread(df["io_density"].to_numpy(float)),
        }

    summary: dict[str, Any] = {"total": block(frame)}
    summary["pipelines"] = {str(p): block(df) for p, df in frame.groupby("pipeline", sort=True)}
    summary["file_kinds"] = {str(k): block(df) for k, df in frame.groupby("file_kind", sort=True)}
    summary["runs"] = [asdict(r) for r in results]
    summary["failed_runs"] = [asdict(r) for r in results if not r.ok]
    return summary


__all__ = [
    "SIZES",
    "WORKLOADS",
    "CollectOptions",
    "GraphFacts",
    "Plan",
    "RunResult",
    "Size",
    "StageKeys",
    "Workload",
    "WorkloadError",
    "WorkloadSpec",
    "collect",
    "dask_settings",
    "graph_facts",
    "run_workload",
    "summarize",
]
