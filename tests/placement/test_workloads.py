"""Tests of the real workload suite and the ``dataplane placement collect`` command."""

from __future__ import annotations

import json
from pathlib import Path

import dask
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from placement.cli import placement_group
from placement.schema import SCHEMA, SCHEMA_VERSION_KEY, conform
from placement.workloads import (
    SIZES,
    WORKLOADS,
    CollectOptions,
    SAMPLE,
    FramePart,
    ImagePart,
    Plan,
    WorkloadError,
    WorkloadSpec,
    collect,
    dask_settings,
    augment_images,
    graph_facts,
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
    import placement.workloads as workloads

    def interrupted(*_args, **_kwargs):
        exc = KeyboardInterrupt()
        exc.add_note("the logs of the 3 run(s) finished before this are kept in X/.parts-1")
        raise exc

    monkeypatch.setattr(workloads, "collect", interrupted)
    res = CliRunner().invoke(placement_group, ["collect", str(tmp_path), "--no-progress"])
    assert res.exit_code == 1
    assert "kept in X/.parts-1" in res.output and "Aborted!" in res.output
