"""The real workload suite: varied Dask pipelines whose temporary files are logged.

Each :class:`Workload` builds a real Dask pipeline (dataframe shuffle, groupby
aggregation and apply, hash-join merge, sort, set_index, array rechunk and matmul,
bag foldby and groupby, a persisted frame reused by several queries, and two caches of
shards read many times: augmented images for several training epochs, features for
k-means iterations). :data:`WORKLOADS` names the pipelines and :data:`SIZES` the sizes
they run at; the cache pipelines pin each shard's readers to the worker holding it.

This module only defines the pipelines. Running them and writing their log is
:mod:`placement.collect` (:func:`placement.collect.collect`, ``dataplane placement
collect``); what a run's task graphs say about its stages (tasks per stage, names of the
P2P shuffles) is :mod:`placement.graph_facts`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from placement.errors import PlacementError

logger = logging.getLogger(__name__)


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
    """A dataframe partition: int64 key ``k`` (uniform or Zipf-skewed), floats ``v``, ``w``,
    int ``t``."""
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
    return list(zip(keys, values, strict=True))


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


def worker_addresses(client: Any) -> set[str]:
    """Addresses of the workers the scheduler has now, asked of the scheduler itself.

    Not ``client.scheduler_info()``: it refreshes the client's cached identity and then
    returns the cache, which the client's periodic refresh (every 2 s, without per-worker
    information) may have replaced in between; then ``"workers"`` is empty although every
    worker is alive, and a run failed as if its shards' worker had left.
    """
    return set(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


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
    (``distributed.scheduler.no-workers-timeout``, set by
    :func:`placement.collect.dask_settings`).

    Raises
    ------
    ShardError
        If ``ref``'s worker is not among the workers alive.
    """
    from placement.storage.errors import ShardError

    alive = worker_addresses(client) if workers is None else workers
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
        alive = worker_addresses(client)
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
                alive = worker_addresses(client)
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
                alive = worker_addresses(client)
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


__all__ = [
    "SIZES",
    "WORKLOADS",
    "Plan",
    "Size",
    "Workload",
    "WorkloadError",
    "WorkloadSpec",
    "worker_addresses",
]
