"""Integration: placement storage on a real multi-process LocalCluster under tight memory."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from placement.graph_facts import graph_facts
from placement.logwriter import read_logs
from placement.storage import RunContext, flush_worker_logs, set_run_context, worker_storage_state
from tests.placement.worker_tasks import hog_memory, make_rows

pytestmark = pytest.mark.timeout(300)


def settle(client, timeout: float = 60.0) -> None:
    """Wait until every worker's temporary files are deleted (their rows logged), then flush."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(s["live_files"] == 0 for s in client.run(worker_storage_state).values()):
            break
        time.sleep(0.1)
    else:
        pytest.fail(
            f"temporary files still alive after {timeout} s: {client.run(worker_storage_state)}"
        )
    client.run(flush_worker_logs)


def run_rows(log_dir: Path, run_id: str) -> pd.DataFrame:
    logs = read_logs(log_dir)
    assert logs.bad_files == []
    table = logs.table.to_pandas()
    return table[table["run_id"] == run_id]


def data_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")]


def test_spill_and_shuffle_heavy_dataframe_matches_pandas_and_logs_every_file(
    tiered_cluster, rng
) -> None:
    import dask.dataframe as dd
    from distributed import wait

    client = tiered_cluster.client
    n = 2_000_000  # 64 MB of numbers: twice what two workers may keep in managed memory
    pdf = pd.DataFrame(
        {
            "k": rng.integers(0, 5000, n),
            "v": rng.random(n),
            "w": rng.standard_normal(n),
            "t": rng.integers(0, 10**6, n),
        }
    )
    ddf = dd.from_pandas(pdf, npartitions=16)
    shuffled = ddf.shuffle("k", shuffle_method="p2p")
    facts = graph_facts([shuffled], "shuffle")
    run_id = "it-dataframe"
    context = RunContext(
        pipeline="integration",
        run_id=run_id,
        operator="shuffle",
        input_bytes=int(pdf.memory_usage().sum()),
        n_partitions_in=16,
        n_workers=2,
        stage_tasks=facts.stage_tasks,
        shuffle_stages=facts.shuffle_stages,
        shuffle_inputs=facts.shuffle_inputs,
    )
    client.run(set_run_context, context)
    try:
        persisted = client.persist(shuffled)
        wait(persisted)
        result = persisted.groupby("k").agg({"v": "sum", "w": "max", "t": "count"}).compute()
        total = len(persisted)
        del persisted
    finally:
        client.run(set_run_context, None)
    expected = pdf.groupby("k").agg({"v": "sum", "w": "max", "t": "count"})
    pd.testing.assert_frame_equal(
        result.sort_index(), expected.sort_index(), check_exact=False, rtol=1e-9
    )
    assert total == n

    settle(client)
    rows = run_rows(tiered_cluster.log_dir, run_id)
    spill = rows[rows["file_kind"] == "spill"]
    shuffle = rows[rows["file_kind"] == "shuffle"]
    assert len(spill) > 0, "the run was meant to spill under tight memory"
    assert len(shuffle) > 0

    # shuffle files: appended as shards arrive, read once by their output task, on SSD as chosen
    assert (shuffle["tier"] == "ssd").all()
    assert (shuffle["write_ops"] >= 1).all() and (shuffle["write_ops"] <= 16).all()
    assert (shuffle["write_bytes"] == shuffle["size_bytes"]).all()
    assert (shuffle["read_ops"] == 1).all() and (
        shuffle["read_bytes"] == shuffle["size_bytes"]
    ).all()
    assert shuffle["worker"].nunique() == 2
    # the persisted shuffle was named by the driver; the groupby's own shuffle was not announced
    main = shuffle[shuffle["stage"] == "shuffle-p2p0"]
    assert list(facts.shuffle_stages.values()) == ["shuffle-p2p0"]
    assert len(main) == 16  # one file per output partition
    assert (main["n_partitions_out"] == 16).all() and (main["n_partitions_in"] == 16).all()
    assert main["size_bytes"].sum() > 0.5 * pdf.memory_usage().sum()  # every row crossed the disk
    assert set(shuffle["stage"]) <= {"shuffle-p2p0", "p2p-shuffle"}

    # spill files: written once when evicted, read back whole if the value was needed again
    assert (spill["tier"] == "hdd").all()
    assert (spill["write_ops"] == 1).all()
    assert (spill["write_bytes"] == spill["size_bytes"]).all() and (spill["size_bytes"] > 0).all()
    assert (spill["read_bytes"] == spill["read_ops"] * spill["size_bytes"]).all()
    assert spill["read_ops"].sum() > 0, "the groupby read spilled partitions back"
    assert (spill["expected_size_bytes"] == spill["size_bytes"]).all()
    # the worker knew each spilled key's task state: its readers left, and the distance to
    # the next one exactly when one is known there
    assert spill["n_dependents"].notna().all() and (spill["n_dependents"] >= 0).all()
    assert (spill["reuse_distance"].notna() == (spill["n_dependents"] > 0)).all()
    assert shuffle["n_dependents"].isna().all() and shuffle["reuse_distance"].isna().all()
    persisted_spill = spill[spill["stage"] == "p2pshuffle"]  # the kept shuffle output partitions
    assert len(persisted_spill) > 0 and (persisted_spill["n_partitions_out"] == 16).all()

    for frame in (spill, shuffle):
        assert (frame["deleted_at"] >= frame["created_at"]).all()
        assert frame["pipeline"].eq("integration").all() and frame["worker"].notna().all()
    assert data_files(tiered_cluster.ssd_dir) == [] and data_files(tiered_cluster.hdd_dir) == []


def test_p2p_rechunk_matches_numpy_and_logs_rechunk_files(tiered_cluster) -> None:
    import dask.array as da

    client = tiered_cluster.client
    x = np.random.default_rng(3).random((1600, 1600))
    dx = da.from_array(x, chunks=(100, 1600)).rechunk((1600, 100), method="p2p")
    client.run(
        set_run_context, RunContext(pipeline="integration", run_id="it-rechunk", operator="rechunk")
    )
    try:
        got = client.compute(dx.sum(axis=0)).result()
    finally:
        client.run(set_run_context, None)
    np.testing.assert_allclose(got, x.sum(axis=0))
    settle(client)
    rows = run_rows(tiered_cluster.log_dir, "it-rechunk")
    rechunk = rows[rows["file_kind"] == "rechunk"]
    assert len(rechunk) == 16  # one file per output chunk, across both workers
    assert (rechunk["tier"] == "ssd").all()
    assert (rechunk["read_bytes"] == rechunk["size_bytes"]).all() and (
        rechunk["read_ops"] == 1
    ).all()
    assert rechunk["write_bytes"].sum() >= x.nbytes
    assert (rechunk["n_partitions_out"] == 16).all()


def test_plain_worker_without_spill_buffer_still_routes_p2p(local_cluster, tmp_path: Path) -> None:
    """A worker with Dask's own SpillBuffer gets a store from the plugin for P2P files."""
    import dask.dataframe as dd

    from placement.storage import PlacementWorkerPlugin

    client = local_cluster
    client.register_plugin(
        PlacementWorkerPlugin(
            ssd_dir=str(tmp_path / "s"), hdd_dir=str(tmp_path / "h"), log_dir=str(tmp_path / "l")
        )
    )
    try:
        pdf = pd.DataFrame({"k": np.arange(20_000) % 37, "v": np.ones(20_000)})
        out = (
            dd.from_pandas(pdf, npartitions=4)
            .shuffle("k", shuffle_method="p2p")["v"]
            .sum()
            .compute()
        )
        assert out == 20_000
        settle(client)
    finally:
        client.unregister_worker_plugin("placement-storage")
    rows = read_logs(tmp_path / "l").table.to_pandas()
    assert set(rows["file_kind"]) == {"shuffle"} and len(rows) == 4
    assert (rows["tier"] == "hdd").all() and set(rows["pipeline"]) == {"unknown"}


def test_a_worker_terminated_by_its_nanny_for_memory_logs_its_buffered_rows_and_live_files(
    tmp_path: Path,
) -> None:
    """A worker past ``distributed.worker.memory.terminate`` gets SIGTERM from its nanny, and
    SIGKILL at the nanny's next memory check (100 ms later) if it is still alive. It used to
    die at once, losing its buffered rows and the rows of its live files: now they are in the
    log when the nanny has restarted it, and its store's directories are gone.

    The nanny's check runs every 2 s here rather than 100 ms: the save takes a few
    milliseconds on an idle machine, but a loaded test machine may not schedule the worker
    within 100 ms, and this test is about what SIGTERM does, not about that race."""
    import dask
    from distributed import Client, LocalCluster

    from placement.storage import PlacementWorkerPlugin, tiered_spill_buffer

    ssd, hdd, logs = tmp_path / "ssd", tmp_path / "hdd", tmp_path / "logs"
    data = (tiered_spill_buffer, {"ssd_dir": str(ssd), "hdd_dir": str(hdd), "log_dir": str(logs)})
    config = {
        "distributed.worker.memory.terminate": 0.7,
        "distributed.worker.memory.monitor-interval": "2s",  # SIGKILL 2 s after SIGTERM
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.target": False,
        "distributed.scheduler.allowed-failures": 0,  # the hog is not run again
    }
    with (
        dask.config.set(config),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            memory_limit="400MiB",
            dashboard_address=None,
            local_directory=str(tmp_path / "dask"),
            data=data,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(PlacementWorkerPlugin(flush_interval_s=3600))  # rows wait
        (before,) = client.run(make_rows, 7, 3).values()
        assert (before["rows_pending"], before["live_files"], before["rows_written"]) == (7, 3, 0)
        hog = client.submit(hog_memory, 350 * 2**20, pure=False)
        deadline = time.monotonic() + 120
        while True:  # the nanny terminates the worker and starts a new process
            with contextlib.suppress(Exception):
                pids = list(client.run(os.getpid).values())
                if pids and before["pid"] not in pids:
                    break
            assert time.monotonic() < deadline, "the worker was not terminated and restarted"
            time.sleep(0.2)
        hog.cancel()
        events = [event for _, event in client.get_events("worker-restart-memory")]
        assert [e["pid"] for e in events][:1] == [before["pid"]], "terminated by its nanny"
    rows = read_logs(logs).table.to_pandas()
    assert rows["file_id"].str.startswith(before["label"] + "-").sum() == 10, "7 buffered, 3 live"
    pid_token = before["label"].removeprefix("worker-")  # the store's directory ends with it
    assert [p for p in (*ssd.iterdir(), *hdd.iterdir()) if pid_token in p.name] == []


def test_a_finished_shuffle_leaves_no_empty_folder_on_a_live_worker(tiered_cluster) -> None:
    """Each P2P shuffle run writes its files in its own ``shuffle-<id>-<run>`` folder of the
    worker's store; when the run closes, the folder goes with its files on both tiers
    rather than staying, empty, for as long as the worker lives."""
    import dask.dataframe as dd

    client = tiered_cluster.client
    pdf = pd.DataFrame({"k": np.arange(40_000) % 101, "v": np.ones(40_000)})
    for _ in range(2):  # two runs, each in its own folder
        ddf = dd.from_pandas(pdf, npartitions=6).shuffle("k", shuffle_method="p2p")
        assert ddf["v"].sum().compute() == 40_000
    settle(client)
    stores = [
        p
        for tier in (tiered_cluster.ssd_dir, tiered_cluster.hdd_dir)
        for p in tier.glob("store-*")
        if p.is_dir()
    ]
    assert len(stores) == 4, "both workers' stores live on both tiers"

    def shuffle_folders() -> list[Path]:
        return [p for store in stores for p in store.glob("shuffle-*")]

    deadline = time.monotonic() + 10  # the folder goes right after the run's last file
    while shuffle_folders() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert shuffle_folders() == []
    assert all(store.is_dir() for store in stores), "the workers' stores are still there"
