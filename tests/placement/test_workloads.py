"""Tests of the real workload suite and the ``dataplane placement collect`` command."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dask
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from placement.cli import placement_group
from placement.collect import CollectOptions, collect, dask_settings
from placement.graph_facts import graph_facts
from placement.schema import SCHEMA, SCHEMA_VERSION_KEY, conform
from placement.workloads import (
    SAMPLE,
    SIZES,
    WORKLOADS,
    FramePart,
    ImagePart,
    Plan,
    Size,
    WorkloadError,
    WorkloadSpec,
    augment_images,
    augment_shard,
    make_frame,
    make_images,
)


def test_options_are_validated() -> None:
    with pytest.raises(WorkloadError, match="unknown pipeline.*'nope'"):
        CollectOptions(pipelines=["nope"])
    with pytest.raises(WorkloadError, match="unknown size.*'tiny'"):
        CollectOptions(sizes=["tiny"])
    with pytest.raises(WorkloadError, match="seeds"):
        CollectOptions(seeds=[-1])
    with pytest.raises(WorkloadError, match="n_workers"):
        CollectOptions(n_workers=0)
    with pytest.raises(WorkloadError, match="target_fraction"):
        CollectOptions(target_fraction=1.5)
    with pytest.raises(WorkloadError, match="memory_limit"):
        CollectOptions(memory_limit="lots")
    with pytest.raises(WorkloadError, match="tier"):
        CollectOptions(tier="tape")  # type: ignore[arg-type]
    # values that used to be accepted and failed late or changed the collection silently
    with pytest.raises(WorkloadError, match=r"settle_timeout_s='30' must be a number"):
        CollectOptions(settle_timeout_s="30")  # type: ignore[arg-type]
    with pytest.raises(WorkloadError, match=r"settle_timeout_s=-5 must be .* 0 or more"):
        CollectOptions(settle_timeout_s=-5)
    with pytest.raises(WorkloadError, match=r"seeds=\[True\] must be non-negative ints"):
        CollectOptions(seeds=[True])
    with pytest.raises(WorkloadError, match="n_workers=True must be a positive int"):
        CollectOptions(n_workers=True)
    with pytest.raises(WorkloadError, match="memory_limit='0' gives no limit"):
        CollectOptions(memory_limit="0")
    with pytest.raises(WorkloadError, match=r"pipelines='merge' must be a list.*\['merge'\]"):
        CollectOptions(pipelines="merge")
    with pytest.raises(WorkloadError, match="target_fraction='0.1' must be a number"):
        CollectOptions(target_fraction="0.1")  # type: ignore[arg-type]
    assert CollectOptions(settle_timeout_s=0).settle_timeout_s == 0
    assert CollectOptions(memory_limit="1000", target_fraction=0.5).spill_threshold_bytes == 500
    with pytest.raises(WorkloadError, match="either queries or drive"):
        Plan(None, 1, 1)
    with pytest.raises(WorkloadError, match="either queries or drive"):
        Plan(lambda _: [], 1, 1, drive=lambda client: None)
    runs = CollectOptions(pipelines=["merge", "bag_groupby"], sizes=["small"], seeds=[0, 1]).runs()
    assert runs == [
        ("merge", "small", 0),
        ("bag_groupby", "small", 0),
        ("merge", "small", 1),
        ("bag_groupby", "small", 1),
    ]


def test_generated_inputs_are_deterministic_per_seed() -> None:
    a = make_frame(FramePart(1, 3, 1000, 50, skewed=True))
    b = make_frame(FramePart(1, 3, 1000, 50, skewed=True))
    c = make_frame(FramePart(2, 3, 1000, 50, skewed=True))
    assert a.equals(b) and not a.equals(c)
    assert a["k"].between(0, 49).all()


def test_augmentation_is_a_flipped_or_plain_crop_scaled_to_one() -> None:
    images, labels = make_images(ImagePart(0, 1, 32))
    assert images.shape == (32, 28, 28) and images.dtype == np.uint8
    out = augment_images((images, labels), seed=3)
    assert out.dtype == SAMPLE and (out["y"] == labels).all()
    assert 0 <= out["x"].min() and out["x"].max() <= 1
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2)), mode="reflect")
    flipped = 0
    for i in range(len(out)):
        x = np.rint(out["x"][i].reshape(28, 28) * 255).astype(np.uint8)
        crops = [padded[i, dy : dy + 28, dx : dx + 28] for dy in range(5) for dx in range(5)]
        plain = any(np.array_equal(c, x) for c in crops)
        mirrored = any(np.array_equal(c[:, ::-1], x) for c in crops)
        assert plain or mirrored, i
        flipped += mirrored and not plain
    assert 0 < flipped < len(out)
    assert not np.array_equal(out["x"], augment_images((images, labels), seed=4)["x"])


def test_every_workload_builds_and_merge_has_two_named_shuffles() -> None:
    spec = WorkloadSpec(SIZES["small"], seed=0, n_workers=2)
    with dask.config.set(dask_settings(0.05)):
        for workload in WORKLOADS.values():
            plan = workload.plan(spec)
            assert plan.input_bytes > 0 and plan.n_partitions_in > 0, workload.name
        merge = WORKLOADS["merge"].plan(spec)
        facts = graph_facts([merge.persist], "merge")
    assert sorted(facts.shuffle_stages.values()) == ["merge-p2p0", "merge-p2p1"]
    # inputs of the two sides of the hash join: the fact table's and the dimension's partitions
    assert sorted(facts.shuffle_inputs.values()) == [
        spec.size.partitions // 2,
        spec.size.partitions,
    ]
    assert facts.stage_tasks["fact"] == spec.size.partitions
    again = graph_facts([WORKLOADS["merge"].plan(spec).persist], "merge")
    assert again.stage_tasks == facts.stage_tasks


@pytest.mark.timeout(300)
def test_collect_writes_genuine_logs_and_a_summary(tmp_path: Path) -> None:
    options = CollectOptions(
        pipelines=["df_shuffle", "array_rechunk", "persist_reuse"], sizes=["small"], seeds=[0]
    )
    seen = []
    summary = collect(tmp_path, options, progress=False, on_run=seen.append)
    assert [r.pipeline for r in seen] == ["df_shuffle", "array_rechunk", "persist_reuse"]
    assert all(r.ok for r in seen), [r.error for r in seen]

    table = pq.read_table(tmp_path / "io_log.parquet")
    assert table.schema.metadata[SCHEMA_VERSION_KEY] == SCHEMA.metadata[SCHEMA_VERSION_KEY]
    frame = conform(table).to_pandas()
    assert set(frame["pipeline"]) == {"df_shuffle", "array_rechunk", "persist_reuse"}
    assert set(frame["file_kind"]) >= {"spill", "shuffle", "rechunk"}
    assert frame["run_id"].nunique() == 3 and set(frame["run_id"]) == {r.run_id for r in seen}
    assert (frame["write_ops"] >= 1).all() and (frame["write_bytes"] == frame["size_bytes"]).all()
    assert (frame["deleted_at"] > frame["created_at"]).all()
    assert frame["input_bytes"].notna().all() and frame["n_workers"].eq(2).all()
    shuffle = frame[frame["file_kind"] == "shuffle"]
    assert set(shuffle["stage"]) == {"shuffle-p2p0"} and (shuffle["n_partitions_in"] == 12).all()
    assert (frame[frame["file_kind"] == "rechunk"]["stage"] == "rechunk-p2p0").all()
    assert (frame["tier"] == "hdd").all()

    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["total"]["rows"] == len(frame) == summary["total"]["rows"]
    assert sum(p["rows"] for p in on_disk["pipelines"].values()) == len(frame)
    assert on_disk["failed_runs"] == [] and on_disk["settings"]["tier"] == "hdd"
    spread = on_disk["total"]["io_density"]
    assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["io_log.parquet", "summary.json"]


@pytest.mark.timeout(300)
def test_cache_pipelines_write_shards_that_are_read_many_times(tmp_path: Path) -> None:
    options = CollectOptions(
        pipelines=["augment_cache", "feature_cache"], sizes=["small"], seeds=[0]
    )
    summary = collect(tmp_path, options, progress=False)
    assert summary["failed_runs"] == []
    frame = conform(pq.read_table(tmp_path / "io_log.parquet")).to_pandas()
    shards = frame[frame["file_kind"] == "cache_shard"]
    assert (shards["write_ops"] == 1).all() and (shards["operator"] == "cache").all()
    assert (shards["expected_size_bytes"] == shards["size_bytes"]).all()
    small = SIZES["small"]
    assert (shards["n_partitions_out"] == small.partitions).all()

    # seed 0 reuses each generation of augmented shards for 2 of 6 epochs: 3 generations,
    # and every epoch reads each shard once, one operation per batch of 128 samples
    images = shards[shards["pipeline"] == "augment_cache"]
    per_shard = small.records // 16
    assert set(images["stage"]) == {"augmented-shard"} and len(images) == 3 * small.partitions
    assert (images["read_ops"] == 2 * -(-per_shard // 128)).all()
    assert (images["read_bytes"] == 2 * images["size_bytes"]).all()

    # k-means reads every feature shard in 16384-row chunks once per iteration (the
    # first shard also gives the initial centroids, one more read)
    features = shards[shards["pipeline"] == "feature_cache"]
    assert set(features["stage"]) == {"feature-shard"} and len(features) == small.partitions
    chunks = -(-small.rows // 16_384)
    passes = features["read_ops"] - (features["read_ops"] % chunks)
    assert passes.nunique() == 1 and 1 <= passes.iloc[0] // chunks <= 12
    assert sorted(features["read_ops"] % chunks) == [0] * (small.partitions - 1) + [1]
    assert (frame[frame["file_kind"] == "spill"]["pipeline"].isin(options.pipelines)).all()


def test_cli_lists_workloads_and_rejects_bad_options() -> None:
    runner = CliRunner()
    listed = runner.invoke(placement_group, ["collect", "--list"])
    assert listed.exit_code == 0 and all(name in listed.output for name in WORKLOADS)
    bad = runner.invoke(placement_group, ["collect", "out", "--sizes", "tiny"])
    assert bad.exit_code == 2 and "unknown size(s) ['tiny']" in bad.output
    bad = runner.invoke(placement_group, ["collect", "out", "--seeds", "one"])
    assert bad.exit_code == 2 and "--seeds" in bad.output
    missing = runner.invoke(placement_group, ["collect"])
    assert missing.exit_code == 2 and "OUT_DIR" in missing.output
    helped = runner.invoke(placement_group, ["--help"])
    assert helped.exit_code == 0 and "collect" in helped.output


def test_dropping_shards_after_a_failed_run_does_not_hide_the_run_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from placement.storage import ShardRef
    from placement.workloads import _drop_shards, _live_shards

    class WorkerGone:  # injected fault: the shards' worker has died
        scheduler = SimpleNamespace(  # not yet removed from the cluster
            identity=lambda **kwargs: {"workers": {"tcp://w:1": {}}}
        )

        def sync(self, func: Any, *args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        def submit(self, *args: object, **kwargs: object) -> object:
            return object()

        def gather(self, futures: object) -> None:
            raise OSError("worker tcp://w:1 is gone")

    ref = ShardRef("s", "tcp://w:1", np.dtype("f4"), (), 1, 4)
    with pytest.raises(OSError, match="is gone"):
        _drop_shards(WorkerGone(), [ref])
    _drop_shards(WorkerGone(), [ref], cleanup=True)
    assert "dropping 1 cache shard(s) after a failed run failed" in caplog.text
    caplog.clear()
    with pytest.raises(ValueError, match="the run's own error"):
        with _live_shards(WorkerGone()) as refs:
            refs.append(ref)
            raise ValueError("the run's own error")
    assert "dropping 1 cache shard(s) after a failed run failed" in caplog.text


@pytest.mark.timeout(300)
def test_an_interrupted_collection_keeps_finished_runs_apart_and_loses_nothing(
    tmp_path: Path,
) -> None:
    from placement.logwriter import log_files, read_logs
    from tests.placement.logtables import make_log

    earlier = make_log(seed=1)
    pq.write_table(earlier, tmp_path / "io_log.parquet")
    options = CollectOptions(pipelines=["df_shuffle", "persist_reuse"], sizes=["small"], seeds=[0])

    def stop_after_first(result) -> None:  # the user's Ctrl-C, after one finished run
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        collect(tmp_path, options, progress=False, on_run=stop_after_first)
    # the earlier log is untouched, and readers of the directory see only it
    assert pq.read_table(tmp_path / "io_log.parquet").equals(earlier)
    assert log_files(tmp_path) == [tmp_path / "io_log.parquet"]
    assert read_logs(tmp_path).table.num_rows == earlier.num_rows
    # the finished run's logs are kept in the hidden parts directory the note names
    (parts,) = [p for p in tmp_path.iterdir() if p.name.startswith(".parts-")]
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1 and str(parts) in notes[0] and "1 run(s)" in notes[0]
    kept = read_logs(parts).table.to_pandas()
    assert set(kept["pipeline"]) == {"df_shuffle"} and kept["run_id"].nunique() == 1


def test_cli_collect_interrupted_prints_where_the_runs_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from placement import collect as collect_module

    def interrupted(*_args, **_kwargs):
        exc = KeyboardInterrupt()
        exc.add_note("the logs of the 3 run(s) finished before this are kept in X/.parts-1")
        raise exc

    monkeypatch.setattr(collect_module, "collect", interrupted)
    res = CliRunner().invoke(placement_group, ["collect", str(tmp_path), "--no-progress"])
    assert res.exit_code == 1
    assert "kept in X/.parts-1" in res.output and "Aborted!" in res.output


def test_cli_collect_refuses_to_replace_a_collection_without_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from placement import collect as collect_module

    calls: list[Path] = []

    def collected(out: Path, *_args, **_kwargs):
        calls.append(out)
        return {
            "total": {"rows": 1, "io_density": {}},
            "runs": [],
            "failed_runs": [],
            "dropped_rows": {},
            "wall_s": 1.0,
            "pipelines": {},
        }

    monkeypatch.setattr(collect_module, "collect", collected)
    (tmp_path / "io_log.parquet").write_bytes(b"minutes of runs")
    res = CliRunner().invoke(placement_group, ["collect", str(tmp_path), "--no-progress"])
    assert res.exit_code == 2 and calls == [], res.output
    assert "holds a collection already (io_log.parquet)" in res.output
    assert "--overwrite" in res.output
    assert (tmp_path / "io_log.parquet").read_bytes() == b"minutes of runs"
    args = ["collect", str(tmp_path), "--overwrite", "--no-progress"]
    res = CliRunner().invoke(placement_group, args)
    assert res.exit_code == 0 and calls == [tmp_path], res.output


def test_cli_collect_prints_the_rows_it_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The printed summary counts the rows of runs that were not whole (a failed run's
    rows are left out of io_log.parquet: see test_rows_of_a_failed_run_are_dropped...)."""
    from placement import collect as collect_module

    def with_a_failed_run(*_args, **_kwargs):
        return {
            "total": {"rows": 10, "io_density": {}},
            "runs": [{"run_id": "a"}, {"run_id": "b"}],
            "failed_runs": [{"run_id": "b"}],
            "dropped_rows": {"b": 7, "(no run)": 1},
            "wall_s": 1.0,
            "pipelines": {},
        }

    monkeypatch.setattr(collect_module, "collect", with_a_failed_run)
    res = CliRunner().invoke(placement_group, ["collect", str(tmp_path), "--no-progress"])
    assert res.exit_code == 0, res.output
    brief = json.loads(res.output)
    assert brief["failed_runs"] == 1 and brief["dropped_rows"] == 8


# ---------------------------------------------------------------------- failure handling
#: A size far below "small", so runs on in-process clusters take a second or two.
TINY = Size("tiny", partitions=4, rows=2_000, array_side=200, records=800)


@pytest.fixture
def inproc(tmp_path: Path) -> Iterator[Any]:
    """An in-process cluster of two one-thread workers with placement storage (shard
    files and their log rows; P2P files are not routed, so nothing is patched here)."""
    from distributed import Client, LocalCluster

    from placement.storage import PlacementWorkerPlugin

    with (
        dask.config.set(dask_settings(0.5)),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(
            PlacementWorkerPlugin(
                ssd_dir=str(tmp_path / "ssd"),
                hdd_dir=str(tmp_path / "hdd"),
                log_dir=str(tmp_path / "logs"),
                route_p2p=False,
                flush_interval_s=3600.0,
            )
        )
        yield client


def test_a_persisted_stage_keeps_its_task_count_while_queries_read_it() -> None:
    from distributed import Client

    from placement.collect import _execute
    from placement.storage import RunContext

    class Recording:  # the client, keeping each run context the driver sends the workers
        def __init__(self, client: Any) -> None:
            self.client, self.contexts = client, []

        def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
            if args and isinstance(args[0], RunContext):
                self.contexts.append(args[0])
            return self.client.run(fn, *args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.client, name)

    spec = WorkloadSpec(TINY, seed=0, n_workers=1)
    with (
        dask.config.set(dask_settings(0.5)),
        Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as c,
    ):
        # (workload, stage of its persisted partitions): one read by two queries, one by
        # four, and one whose queries' graphs do not name it at all
        for name, stage in (
            ("df_shuffle", "p2pshuffle"),
            ("persist_reuse", "to_string_dtype"),
            ("bag_foldby", "flatten"),
        ):
            client = Recording(c)
            _execute(client, WORKLOADS[name], spec, f"{name}-run")
            persist_phase, query_phase = (ctx.stage_tasks for ctx in client.contexts)
            assert persist_phase[stage] == query_phase[stage] == TINY.partitions, name
            # the query phase adds its stages to those of the persist phase
            assert set(persist_phase) <= set(query_phase), name


def test_a_shard_of_a_worker_that_left_raises_or_is_skipped_instead_of_hanging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from placement.storage import ShardError, ShardRef
    from placement.workloads import _drop_shards, _pinned, shard_head

    class Restarted:  # the shard's worker died; its nanny started one at a new address
        def __init__(self) -> None:
            self.submitted: list[tuple[Any, ...]] = []

        scheduler = SimpleNamespace(
            identity=lambda **kwargs: {"workers": {"tcp://w:2": {}, "tcp://v:1": {}}}
        )

        def sync(self, func: Any, *args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        def submit(self, *args: Any, **kwargs: Any) -> object:
            self.submitted.append(args)
            return object()

        def gather(self, futures: list[Any]) -> list[bool]:
            return [True] * len(futures)

    gone = ShardRef("feat-0", "tcp://w:1", np.dtype("f4"), (), 1, 4)
    alive = ShardRef("feat-1", "tcp://v:1", np.dtype("f4"), (), 1, 4)
    client = Restarted()
    with pytest.raises(ShardError, match=r"'feat-0' lives on worker tcp://w:1, which has left"):
        _pinned(client, shard_head, gone, 5)
    assert client.submitted == []
    _drop_shards(client, [gone, alive])
    assert [args[1].name for args in client.submitted] == ["feat-1"]
    assert "were on worker(s) ['tcp://w:1'], which left the cluster" in caplog.text
    # a reader pinned to a worker that leaves after it was submitted fails, not waits forever
    timeout = dask_settings(0.5).get("distributed.scheduler.no-workers-timeout")
    assert timeout is not None and 0 < dask.utils.parse_timedelta(timeout) <= 120


def _fail_one_shard(raw: Any, name: str, seed: int, n_shards: int) -> Any:
    if name.endswith("-e0-2"):
        raise RuntimeError(f"injected failure writing shard {name}")
    return augment_shard(raw, name, seed, n_shards)


@pytest.mark.timeout(120)
def test_shards_written_before_a_failed_write_are_dropped(
    inproc: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from placement import workloads
    from placement.logwriter import read_logs
    from placement.storage import flush_worker_logs, worker_storage_state

    monkeypatch.setattr(workloads, "augment_shard", _fail_one_shard)
    plan = WORKLOADS["augment_cache"].plan(WorkloadSpec(TINY, seed=0, n_workers=2))
    assert plan.drive is not None
    with pytest.raises(RuntimeError, match="injected failure writing shard aug-.*-e0-2"):
        plan.drive(inproc)
    # the three shards written are dropped (and logged), none left alive on a worker
    states = inproc.run(worker_storage_state)
    assert [s["live_files"] for s in states.values()] == [0, 0]
    inproc.run(flush_worker_logs)
    rows = read_logs(tmp_path / "logs").table.to_pandas()
    assert sorted(rows["file_kind"]) == ["cache_shard"] * (TINY.partitions - 1)


def test_worker_addresses_are_asked_of_the_scheduler_not_the_clients_cache(
    inproc: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's periodic refresh caches its identity without workers; when it lands
    between ``scheduler_info``'s own refresh and its return, ``scheduler_info()`` says
    there are none (seen in a collection: a run failed as if its worker had left)."""
    from distributed.objects import SchedulerInfo

    from placement.workloads import worker_addresses

    update = inproc._update_scheduler_info

    async def refreshed_then_overwritten(n_workers: int = 0) -> None:
        await update(n_workers=n_workers)
        await update(n_workers=0)  # the periodic refresh, in between (injected)

    monkeypatch.setattr(inproc, "_update_scheduler_info", refreshed_then_overwritten)
    assert inproc.scheduler_info(n_workers=-1)["workers"] == {}, "the race, reproduced"
    assert isinstance(inproc._scheduler_identity, SchedulerInfo)
    assert len(worker_addresses(inproc)) == 2


def _leave(client: Any) -> None:
    """A pipeline during which a worker leaves the cluster."""
    (address, *_) = sorted(client.scheduler_info()["workers"])
    client.retire_workers([address], close_workers=True)


@pytest.mark.timeout(120)
def test_a_run_during_which_a_worker_leaves_is_not_ok(inproc: Any) -> None:
    from placement.collect import run_workload
    from placement.workloads import Workload

    (first, _) = sorted(inproc.scheduler_info()["workers"])
    leaving = Workload("leaving", "test", "a worker leaves", _drive_plan(_leave))
    result = run_workload(inproc, leaving, WorkloadSpec(TINY, 0, 2), settle_timeout_s=5)
    assert not result.ok
    assert result.error is not None and f"worker(s) {first} left the cluster" in result.error
    assert "rows are incomplete" in result.error


# ---------------------------------------------------------------------- collect on one worker
def _drive_plan(drive: Any) -> Any:
    def plan(spec: WorkloadSpec) -> Plan:
        return Plan(None, 1000, 1, drive=drive, stage_tasks={"one_shard": 1})

    return plan


def _one_shard_then(outcome: BaseException | None) -> Any:
    """A pipeline that writes, reads and drops one cache shard (one log row), then
    raises ``outcome`` (if given)."""

    def drive(client: Any) -> None:
        def one_shard(name: str) -> int:
            from placement.storage import drop_shard, put_shard, worker_shards

            ref = put_shard(name, np.arange(1000, dtype="f8"), stage="one-shard")
            worker_shards().read(ref)
            return int(drop_shard(ref))

        assert client.submit(one_shard, "s", pure=False).result() == 1
        if outcome is not None:
            raise outcome

    return _drive_plan(drive)


@pytest.fixture
def test_workloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipelines of one shard each, and the tiny size, known to the collector."""
    from placement.workloads import Workload

    monkeypatch.setitem(SIZES, "tiny", TINY)
    for name, drive in (
        ("one_shard", _one_shard_then(None)),
        ("one_shard_fails", _one_shard_then(RuntimeError("stopped half way"))),
        ("one_shard_interrupted", _one_shard_then(KeyboardInterrupt())),
        ("nothing", _drive_plan(lambda client: None)),
    ):
        monkeypatch.setitem(WORKLOADS, name, Workload(name, "cache", name, drive))


def _options(tmp_path: Path, *pipelines: str) -> CollectOptions:
    return CollectOptions(
        pipelines=pipelines,
        sizes=["tiny"],
        seeds=[0],
        n_workers=1,
        memory_limit="512MiB",
        scratch_dir=str(tmp_path),
        settle_timeout_s=5,
    )


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("test_workloads")
def test_rows_of_a_failed_run_are_dropped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out"
    summary = collect(out, _options(tmp_path, "one_shard", "one_shard_fails"), progress=False)
    (failed,) = summary["failed_runs"]
    assert failed["pipeline"] == "one_shard_fails" and "stopped half way" in failed["error"]
    frame = conform(pq.read_table(out / "io_log.parquet")).to_pandas()
    assert list(frame["pipeline"]) == ["one_shard"]
    assert summary["dropped_rows"] == {failed["run_id"]: 1} and summary["total"]["runs"] == 1
    assert "dropped 1 log row(s) of runs that failed" in caplog.text
    assert failed["run_id"] in caplog.text
    assert list(tmp_path.iterdir()) == [out]  # the scratch directory is gone


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("test_workloads")
def test_an_interrupted_run_s_rows_are_set_apart_from_the_kept_finished_runs(
    tmp_path: Path,
) -> None:
    from placement.logwriter import read_logs

    out = tmp_path / "out"
    options = _options(tmp_path, "one_shard", "one_shard_fails", "one_shard_interrupted")
    with pytest.raises(KeyboardInterrupt) as info:
        collect(out, options, progress=False)
    (parts,) = [p for p in out.iterdir() if p.name.startswith(".parts-")]
    kept = read_logs(parts).table.to_pandas()
    assert list(kept["pipeline"]) == ["one_shard"]  # the whole run only
    aside = read_logs(parts / ".incomplete").table.to_pandas()
    assert sorted(aside["pipeline"]) == ["one_shard_fails", "one_shard_interrupted"]
    (note,) = info.value.__notes__
    assert "1 run(s) finished" in note and str(parts) in note
    assert "2 row(s) of runs stopped part way or failed" in note
    assert str(parts / ".incomplete") in note


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("test_workloads")
def test_cli_collect_interrupted_says_where_the_runs_are_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The note naming the kept ``.parts-*`` directory is printed once, not also logged
    (the user saw it twice: from the log, then from the command)."""
    out = tmp_path / "out"
    args = ["collect", str(out), "--pipelines", "one_shard,one_shard_interrupted"]
    args += ["--sizes", "tiny", "--seeds", "0", "--workers", "1", "--memory-limit", "512MiB"]
    res = CliRunner().invoke(
        placement_group, [*args, "--scratch-dir", str(tmp_path), "--no-progress"]
    )
    assert res.exit_code == 1 and "Aborted!" in res.output
    (parts,) = [p for p in out.iterdir() if p.name.startswith(".parts-")]
    told = f"kept in {parts};"
    assert res.output.count(told) == 1, res.output
    assert told not in caplog.text
    # a library caller still gets the warning (and the note on the exception)
    with pytest.raises(KeyboardInterrupt) as info:
        collect(tmp_path / "lib", _options(tmp_path, "one_shard", "one_shard_interrupted"))
    assert "collection stopped" in caplog.text and "kept in" in info.value.__notes__[0]


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("test_workloads")
def test_cli_collect_without_rows_says_why_without_a_traceback(tmp_path: Path) -> None:
    args = ["collect", str(tmp_path / "out"), "--pipelines", "nothing", "--sizes", "tiny"]
    args += ["--seeds", "0", "--workers", "1", "--memory-limit", "512MiB", "--no-progress"]
    res = CliRunner().invoke(placement_group, [*args, "--scratch-dir", str(tmp_path)])
    assert res.exit_code == 1 and res.exception is not None
    assert isinstance(res.exception, SystemExit), res.exception  # click's error, not a crash
    assert "Error: the suite produced no log rows" in res.output
    assert "Lower --target-fraction" in res.output


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("test_workloads")
def test_sigterm_stops_a_collection_like_an_interrupt(tmp_path: Path) -> None:
    import os
    import signal

    received: list[int] = []

    def previous(signum: int, frame: object) -> None:
        received.append(signum)

    def terminated(result: object) -> None:  # `kill <pid>` after the first run
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.signal(signal.SIGTERM, previous)
    try:
        with pytest.raises(SystemExit) as info:
            collect(
                tmp_path / "out",
                _options(tmp_path, "one_shard", "one_shard"),
                progress=False,
                on_run=terminated,
            )
        assert signal.getsignal(signal.SIGTERM) is previous  # restored
    finally:
        signal.signal(signal.SIGTERM, before)
    assert info.value.code == 128 + signal.SIGTERM and received == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no scratch left
    (note,) = info.value.__notes__
    assert "1 run(s) finished" in note


def _listening_ports() -> set[int]:
    """Ports this process listens on."""
    import psutil

    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("test_workloads")
def test_the_collection_s_cluster_starts_no_http_server(tmp_path: Path) -> None:
    """Nothing listens but the scheduler and the nanny: ``distributed`` starts the scheduler's
    HTTP server (on port 8787 of every interface, or another port if that one is taken) even
    with ``dashboard_address=None``, and the collection's cluster stops it."""
    from distributed import default_client

    before = _listening_ports()
    seen: dict[str, Any] = {}

    def look(result: object) -> None:  # while the cluster runs
        client = default_client()
        seen["services"] = client.scheduler_info()["services"]
        seen["on_the_scheduler"] = sorted(client.cluster.scheduler.services)
        seen["link"] = client.cluster.dashboard_link
        seen["ours"] = {client.cluster.scheduler.port}
        seen["ours"] |= {nanny.port for nanny in client.cluster.workers.values()}
        seen["opened"] = _listening_ports() - before

    collect(tmp_path / "out", _options(tmp_path, "one_shard"), progress=False, on_run=look)
    assert seen["services"] == {} and seen["on_the_scheduler"] == [], seen
    assert seen["link"] == ""
    assert seen["opened"] == seen["ours"], seen


#: ``dataplane placement collect`` running a pipeline that waits to be interrupted.
_WAITS_FOR_CTRL_C = """
import sys, time
from placement.cli import placement_group
from placement.workloads import SIZES, WORKLOADS, Plan, Size, Workload

def wait(client):
    print("running", flush=True)
    time.sleep(300)

SIZES["tiny"] = Size("tiny", partitions=4, rows=2_000, array_side=200, records=800)
plan = lambda spec: Plan(None, 1000, 1, drive=wait, stage_tasks={"wait": 1})
WORKLOADS["waits"] = Workload("waits", "cache", "waits to be interrupted", plan)
placement_group.main(sys.argv[1:], prog_name="dataplane placement")
"""


@pytest.mark.timeout(180)
def test_cli_collect_stopped_by_ctrl_c_prints_no_worker_traceback(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the terminal's process group, the worker process included): the
    collection stops ("Aborted!", scratch removed) and no traceback is printed: the worker
    process leaves the interrupt to the command, which closes it (it used to die of it,
    printing a traceback, and its nanny logged the loss)."""
    import os
    import signal
    import subprocess
    import sys

    args = ["collect", str(tmp_path / "out"), "--pipelines", "waits", "--sizes", "tiny"]
    args += ["--seeds", "0", "--workers", "1", "--memory-limit", "512MiB", "--no-progress"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _WAITS_FOR_CTRL_C, *args, "--scratch-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        # a shell that ran pytest in the background leaves SIGINT ignored: restore it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.strip() == "running":
                break
        assert seen and seen[-1].strip() == "running", "".join(seen)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1 and "Aborted!" in out, (proc.returncode, out[-3000:])
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no scratch left


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("test_workloads")
def test_no_rows_from_whole_runs_names_the_spill_threshold(tmp_path: Path) -> None:
    from placement.errors import PlacementError

    with pytest.raises(PlacementError) as info:
        collect(tmp_path / "out", _options(tmp_path, "nothing"), progress=False)
    message = str(info.value)
    assert "every run finished" in message
    assert f"spill threshold of {int(512 * 2**20 * 0.025)} bytes" in message
    assert "Lower --target-fraction or --memory-limit, or add larger --sizes" in message


def _kill_a_worker_then_read_its_shard(client: Any) -> None:
    """A pipeline whose shard's worker is killed (SIGKILL, as the OOM killer does) and
    restarted by its nanny before a reader is pinned to it."""
    import os
    import signal
    import time

    from placement.workloads import _pinned, shard_head

    def put(name: str) -> Any:
        from placement.storage import put_shard

        return put_shard(name, np.arange(1000, dtype="f8"), stage="killed-shard")

    workers = sorted(client.scheduler_info()["workers"])
    refs = [
        client.submit(put, f"killed-{i}", workers=[w], pure=False).result()
        for i, w in enumerate(workers)
    ]
    victim = refs[0].worker
    os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = client.scheduler_info()["workers"]
        if victim not in now and len(now) == len(workers):
            break
        time.sleep(0.2)
    _KILLED["files"] = [str(p) for p in Path(_KILLED["scratch"]).rglob("killed-0")]
    _pinned(client, shard_head, refs[0], 5).result()


_KILLED: dict[str, Any] = {}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("test_workloads")
def test_a_killed_worker_fails_its_run_and_a_reader_of_its_shard_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from placement.workloads import Workload

    name = "killed_worker"
    monkeypatch.setitem(
        WORKLOADS,
        name,
        Workload(name, "cache", name, _drive_plan(_kill_a_worker_then_read_its_shard)),
    )
    _KILLED["scratch"] = tmp_path
    options = dataclasses.replace(_options(tmp_path, "one_shard", name), n_workers=2)
    summary = collect(tmp_path / "out", options, progress=False)
    (failed,) = summary["failed_runs"]
    assert failed["pipeline"] == name
    assert "left the cluster during the run" in failed["error"]
    assert "ShardError" in failed["error"] and "'killed-0' lives on worker" in failed["error"]
    # the surviving worker's shard, left alive by the failed run, is logged and dropped
    assert summary["dropped_rows"] == {failed["run_id"]: 1}
    frame = conform(pq.read_table(tmp_path / "out" / "io_log.parquet")).to_pandas()
    assert set(frame["pipeline"]) == {"one_shard"}
    # the dead worker's shard file went with its store: the replacement removed it
    assert _KILLED["files"] == []
