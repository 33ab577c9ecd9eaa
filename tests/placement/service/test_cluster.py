"""The placement service on real multi-process ``LocalCluster``s, started through the
``placement.dask`` preload, with its faults injected: slow or absent scheduler, full SSD,
a worker killed mid-write, unsafe names, TLS; and retraining from its own logs."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from placement.errors import ModelError
from placement.logwriter import read_logs
from placement.service import reload_model, service_state, worker_service_state
from placement.service.demo import PipelineSpec, run_pipeline, settle
from placement.service.errors import StaleReport
from placement.service.local import ServeOptions, service_cluster
from placement.service.scheduler_plugin import PLUGIN_NAME as SCHEDULER_PLUGIN
from placement.service.service import STALE_LEASES
from placement.service.worker_plugin import worker_link
from placement.storage import worker_storage_state
from placement.workloads import worker_addresses
from tests.placement.conftest import MEMORY_LIMIT, TIGHT_MEMORY
from tests.placement.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

MiB = 2**20
CAPACITY = 24 * MiB
SMALL = PipelineSpec(partitions=8, rows=60_000, n_keys=5_000, seed=1)
#: Short leases and timeouts so the fault tests see expiry quickly, and a short backoff so
#: renewals resume soon after a removed service handler comes back.
FAST_LEASES = {
    "placement.service.lease-ttl": "2s",
    "placement.service.sync-timeout": "250ms",
    "placement.service.sync-interval": "50ms",
    "placement.service.max-backoff": "500ms",
}


@dataclass
class Service:
    client: Any
    cluster: Any
    root: Path
    options: ServeOptions

    @property
    def log_dir(self) -> Path:
        return Path(self.options.log_dir)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    from distributed import Client

    root = tmp_path_factory.mktemp("service")
    options = ServeOptions(
        ssd_dir=str(root / "ssd"),
        hdd_dir=str(root / "hdd"),
        log_dir=str(root / "logs"),
        ssd_capacity=CAPACITY,
        n_workers=2,
        memory_limit=MEMORY_LIMIT,
        local_directory=str(root / "dask"),
        config={**TIGHT_MEMORY, **FAST_LEASES, "logging.distributed.shuffle": "error"},
    )
    with service_cluster(options) as cluster, Client(cluster) as client:
        yield Service(client, cluster, root, options)


# ---------------------------------------------------------------------- helpers
def run_rows(log_dir: Path, run_id: str) -> pd.DataFrame:
    logs = read_logs(log_dir)
    assert logs.bad_files == []
    table = logs.table.to_pandas()
    return table[table["run_id"] == run_id]


def totals(client: Any) -> dict[str, int]:
    """Decisions and store fallbacks summed over the workers."""
    out = {"ssd": 0, "hdd": 0, "fallback": 0, "store_fallbacks": 0}
    for state in client.run(worker_service_state).values():
        for k in ("ssd", "hdd", "fallback"):
            out[k] += state["chooser"]["decisions"][k]
    for state in client.run(worker_storage_state).values():
        out["store_fallbacks"] += state["fallbacks"]
    return out


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def live_ssd_files_other_than_spill(dask_worker: Any) -> int:
    """Files on SSD other than spilled keys (shuffle files wait for the shuffle's cleanup)."""
    from placement.storage import FileKind, worker_storage
    from placement.tier import Tier

    live = worker_storage(dask_worker).store.live_files()
    return sum(h.tier is Tier.SSD and h.request.file_kind is not FileKind.SPILL for h in live)


def ledger_matches_workers(client: Any) -> bool:
    """The scheduler's ledger holds exactly the workers and bytes the workers report now."""
    states = client.run(worker_service_state)
    ledger = service_state(client)["ledger"]
    alive = set(client.scheduler_info()["workers"])
    reported = {a: s["usage"]["ssd_committed_bytes"] for a, s in states.items()}
    return set(ledger["workers"]) == alive and all(
        ledger["workers"][a]["used"] == reported[a] for a in alive
    )


def peak_live_bytes(rows: pd.DataFrame) -> int:
    """Largest total size of files alive at the same time."""
    events = sorted(
        [(t, s) for t, s in zip(rows["created_at"], rows["size_bytes"], strict=True)]
        + [(t, -s) for t, s in zip(rows["deleted_at"], rows["size_bytes"], strict=True)],
        key=lambda e: (e[0], e[1]),
    )
    live = peak = 0
    for _, change in events:
        live += change
        peak = max(peak, live)
    return peak


def data_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")]


# ---------------------------------------------------------------------- faults injected on workers
def inject_ssd_full(ssd_dir: str) -> None:
    """Every write landing on the SSD directory fails with ENOSPC after a torn byte."""
    import placement.storage.store as store_module

    real = getattr(store_module._write_frames, "real", store_module._write_frames)
    prefix = os.path.realpath(ssd_dir)

    def write(fd: int, frames: list) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
            os.write(fd, bytes(frames[0])[:1])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, frames)

    write.real = real  # type: ignore[attr-defined]
    store_module._write_frames = write


def kill_on_write(n: int) -> int:
    """The ``n``-th file write of this worker process writes half a frame, then the process is
    killed."""
    import placement.storage.store as store_module

    real = store_module._write_frames
    calls = [0]

    def write(fd: int, frames: list) -> None:
        calls[0] += 1
        if calls[0] == n:
            first = bytes(frames[0])
            os.write(fd, first[: max(1, len(first) // 2)])
            os.kill(os.getpid(), signal.SIGKILL)
        return real(fd, frames)

    store_module._write_frames = write
    return os.getpid()


def clear_faults() -> None:
    import placement.storage.store as store_module

    store_module._write_frames = getattr(
        store_module._write_frames, "real", store_module._write_frames
    )


# ----------------------------------------------------------------- faults injected on the scheduler
def make_sync_slow(dask_scheduler: Any, delay_s: float) -> None:
    plugin = dask_scheduler.plugins["placement-service"]
    plugin.slow_syncs_pending = 0

    async def slow_sync(**message: Any) -> dict:
        plugin.slow_syncs_pending += 1
        try:
            await asyncio.sleep(delay_s)
            return plugin.service.sync(**message)
        finally:
            plugin.slow_syncs_pending -= 1

    dask_scheduler.handlers["placement_sync"] = slow_sync


def slow_syncs_pending(dask_scheduler: Any) -> int:
    """Reports a slow handler took and has not applied yet: each lands ``delay_s`` after it
    was sent, with the bytes of that moment, even after the handler is restored."""
    return getattr(dask_scheduler.plugins["placement-service"], "slow_syncs_pending", 0)


def remove_sync_handler(dask_scheduler: Any) -> None:
    del dask_scheduler.handlers["placement_sync"]


def restore_sync_handler(dask_scheduler: Any) -> None:
    plugin = dask_scheduler.plugins["placement-service"]
    dask_scheduler.handlers["placement_sync"] = plugin.handle_sync


# ---------------------------------------------------------------------- tests
def test_a_service_without_a_dashboard_address_serves_no_dashboard(
    service: Service, tmp_path: Path
) -> None:
    """No dashboard address: no HTTP server on the scheduler (distributed starts one on port
    8787 even with ``dashboard_address=None``), and the address given starts one."""
    from distributed import Client

    assert service.options.dashboard_address is None
    assert "dashboard" not in service.cluster.scheduler.services
    assert service.cluster.dashboard_link == ""
    assert service.client.scheduler_info()["services"] == {}
    options = ServeOptions(
        ssd_dir=str(tmp_path / "ssd"),
        hdd_dir=str(tmp_path / "hdd"),
        ssd_capacity=CAPACITY,
        n_workers=1,
        memory_limit=MEMORY_LIMIT,
        dashboard_address="127.0.0.1:0",
    )
    with service_cluster(options) as cluster, Client(cluster) as client:
        port = client.scheduler_info()["services"]["dashboard"]
        assert port > 0 and cluster.dashboard_link == f"http://127.0.0.1:{port}/status"


def test_pipeline_matches_pandas_and_files_land_on_both_tiers_as_decided(service: Service) -> None:
    client = service.client
    wait_until(
        lambda: len(service_state(client)["ledger"]["workers"]) == 2,
        what="both workers' first lease",
    )
    before = totals(client)
    spec = PipelineSpec(partitions=12, rows=100_000, n_keys=20_000)
    result = run_pipeline(client, spec, pipeline="it-service")  # raises unless it matches pandas
    assert result.verified and result.rows == 1_200_000
    settle(client)
    made = delta(totals(client), before)
    rows = run_rows(service.log_dir, result.run_id)
    by_tier = rows["tier"].value_counts().to_dict()
    assert set(rows["file_kind"]) == {"spill", "shuffle"}
    assert by_tier.get("ssd", 0) > 0 and by_tier.get("hdd", 0) > 0, by_tier
    # every file is where its decision put it (or on HDD if the SSD write failed)
    assert by_tier["ssd"] == made["ssd"] - made["store_fallbacks"]
    assert by_tier["hdd"] == made["hdd"] + made["store_fallbacks"]
    # under this load a renewal may be late (short test leases): a few files then take HDD
    assert made["fallback"] <= 0.05 * (made["ssd"] + made["hdd"]), made
    # the service kept the SSD within its budget (leases count expected sizes)
    ssd = rows[rows["tier"] == "ssd"]
    assert peak_live_bytes(ssd) <= CAPACITY
    # the ledger follows the workers, and empties with them
    wait_until(lambda: service_state(client)["ledger"]["used_bytes"] == 0, what="an empty ledger")
    assert ledger_matches_workers(client)
    assert data_files(Path(service.options.ssd_dir)) == []
    assert data_files(Path(service.options.hdd_dir)) == []
    for state in client.run(worker_service_state).values():
        assert state["syncs"] > 0 and state["chooser"]["latency_us"]["p99"] < 50_000


def test_unsafe_names_are_refused(service: Service, tmp_path: Path) -> None:
    from placement.service import decide

    client = service.client
    facts = {"file_kind": "cache_shard", "created_at": time.time(), "expected_size_bytes": 1024}
    answers = decide(
        client,
        [
            {**facts, "name": "../../escape"},
            {**facts, "name": "/etc/passwd"},
            {**facts, "name": "shard-0"},
        ],
    )
    assert [a.get("error", "")[:7] for a in answers[:2]] == ["refused", "refused"]
    assert answers[2]["tier"] in ("ssd", "hdd")

    outside = tmp_path / "outside"
    outside.mkdir()

    def create_on_worker(name: str, link_to: str | None = None) -> str:
        from distributed import get_worker

        from placement.storage import FileRequest, UnsafePathError, worker_storage

        store = worker_storage(get_worker()).store
        if link_to is not None:
            for root in store.roots.values():
                (root / "trap").symlink_to(link_to)
        try:
            handle = store.create(
                name, FileRequest(file_kind="cache_shard", created_at=time.time())
            )
        except UnsafePathError as exc:
            return f"refused: {exc}"
        store.delete(handle, log=False)
        return "created"

    assert client.submit(create_on_worker, "../escape", pure=False).result().startswith("refused")
    assert client.submit(create_on_worker, "/tmp/x", pure=False).result().startswith("refused")
    got = client.submit(create_on_worker, "trap/shard", str(outside), pure=False).result()
    assert got.startswith("refused") and "symbolic link" in got
    assert list(outside.iterdir()) == []
    assert client.submit(create_on_worker, "shards/shard-1", pure=False).result() == "created"


def test_ssd_full_sends_files_to_hdd_and_no_task_fails(service: Service) -> None:
    client = service.client
    before = totals(client)
    client.run(inject_ssd_full, service.options.ssd_dir)
    try:
        result = run_pipeline(client, SMALL, pipeline="it-enospc")
        settle(client)
    finally:
        client.run(clear_faults)
    made = delta(totals(client), before)
    rows = run_rows(service.log_dir, result.run_id)
    assert result.verified
    assert made["ssd"] > 0, "the service did decide SSD for some files"
    assert made["store_fallbacks"] == made["ssd"], "each of them moved to HDD when the SSD was full"
    assert (rows["tier"] == "hdd").all()
    assert data_files(Path(service.options.ssd_dir)) == []


@pytest.mark.parametrize("fault", ["slow", "absent"])
def test_unreachable_scheduler_falls_back_to_hdd_and_the_ledger_reconciles(
    service: Service, fault: str
) -> None:
    import dask.dataframe as dd
    from distributed import wait

    from placement.workloads import make_frame

    client = service.client
    # some spill files live on SSD while the scheduler goes away
    parts = PipelineSpec(partitions=12, rows=100_000, seed=5).parts
    held = client.persist(
        dd.from_map(make_frame, parts, enforce_metadata=False).shuffle("k", shuffle_method="p2p")
    )
    wait(held)
    # the shuffle's own SSD files go once it is cleaned up: only then is what the ledger
    # holds the spilled keys, which stay while the scheduler cannot hear of changes
    wait_until(
        lambda: (
            not any(client.run(live_ssd_files_other_than_spill).values())
            and ledger_matches_workers(client)
        ),
        what="the shuffle's files to go and the ledger to match the workers",
    )
    held_bytes = service_state(client)["ledger"]["used_bytes"]
    assert held_bytes > 0, "spilled keys are held on SSD"

    if fault == "slow":
        client.run_on_scheduler(make_sync_slow, delay_s=3.0)
    else:
        client.run_on_scheduler(remove_sync_handler)
    cut_off = time.perf_counter()
    workers_at_cut = worker_addresses(client)
    try:
        # leases run out (2 s) and nothing renews them
        wait_until(
            lambda: all(
                s["chooser"]["lease"] is None or not s["chooser"]["lease"]["valid"]
                for s in client.run(worker_service_state).values()
            ),
            timeout=5,
            what="leases to expire",
        )
        before = totals(client)
        result = run_pipeline(client, SMALL, pipeline=f"it-{fault}")
        made = delta(totals(client), before)
        del held  # SSD files go while the ledger cannot hear of it
        settle(client)
        states = client.run(worker_service_state)
        ledger = service_state(client)["ledger"]
        stale = ledger["used_bytes"]
        unheard_s = time.perf_counter() - cut_off
        workers_now = worker_addresses(client)
    finally:
        client.run_on_scheduler(restore_sync_handler)
    assert result.verified
    rows = run_rows(service.log_dir, result.run_id)
    assert (rows["tier"] == "hdd").all() and len(rows) > 0
    assert made["fallback"] == made["ssd"] + made["hdd"] > 0 and made["ssd"] == 0
    for state in states.values():
        assert state["consecutive_failures"] > 0
        assert state["chooser"]["latency_us"]["p99"] < 50_000, "no decision waited on the scheduler"
        if fault == "absent":
            assert "no placement service" in state["last_error"]
        else:
            assert "no answer within" in state["last_error"]
    if fault == "absent":
        assert all(s["usage"]["ssd_committed_bytes"] == 0 for s in states.values())
        # the ledger still counts the files the workers have deleted, unless its safety net
        # forgot workers unheard of for STALE_LEASES lease lives (a slow machine gets there;
        # it runs on the next decision the scheduler takes, so it is not asserted), or a
        # worker left the cluster (a nanny restarting it for memory on a loaded machine),
        # which takes its share out of the ledger with it
        if unheard_s < STALE_LEASES * 2.0 - 1.0 and workers_now == workers_at_cut:
            assert stale > 0, (
                f"deleted files no longer counted {unheard_s:.1f} s after the cut: {ledger}"
            )
    # the scheduler is back: renewals succeed and the ledger matches the workers again
    wait_until(
        lambda: all(
            s["consecutive_failures"] == 0 for s in client.run(worker_service_state).values()
        ),
        what="renewals to succeed again",
    )
    # late reports of the slow handler would overwrite the ledger with older bytes, here or
    # in the next test's cut: wait for them before checking it
    wait_until(
        lambda: client.run_on_scheduler(slow_syncs_pending) == 0, what="slow reports to land"
    )
    wait_until(lambda: ledger_matches_workers(client), what="the ledger to be reconciled")
    assert service_state(client)["ledger"]["used_bytes"] == 0


def test_retrain_on_the_services_logs_and_reload_without_restart(
    service: Service, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from placement.model_cli import train_command

    client = service.client
    run_pipeline(client, SMALL, pipeline="it-before-training", verify=False)  # logs to learn from
    settle(client)
    model_dir = tmp_path / "model"
    out = CliRunner().invoke(
        train_command,
        [str(service.log_dir), "--out", str(model_dir), "--trees", "30", "--no-progress", "--json"],
    )
    assert out.exit_code == 0, out.output
    trained = json.loads(out.output)
    assert trained["trained_rows"] >= 10 and trained["input"]["files_read"] >= 1

    with pytest.raises(ModelError, match="no model directory"):
        reload_model(client, tmp_path / "missing")
    old = service_state(client)["model"]["version"]
    info = reload_model(client, model_dir)
    assert info["version"] == old + 1 and info["kind"] == "lightgbm" and info["history_runs"] > 0

    def workers_have_it() -> bool:
        return all(
            s["chooser"]["model_version"] == info["version"]
            and s["chooser"]["predictor"] == "lightgbm"
            for s in client.run(worker_service_state).values()
        )

    wait_until(workers_have_it, what="workers to install the new model")
    result = run_pipeline(client, SMALL, pipeline="it-retrained")
    settle(client)
    assert result.verified
    assert len(run_rows(service.log_dir, result.run_id)) > 0


def test_worker_killed_mid_write_loses_nothing_and_the_ledger_follows(service: Service) -> None:
    client = service.client
    victim = min(client.scheduler_info()["workers"])
    pid = client.run(kill_on_write, 4, workers=[victim])[victim]
    result = run_pipeline(client, SMALL, pipeline="it-killed")  # matches pandas, or raises
    assert result.verified
    client.wait_for_workers(2, timeout=60)
    wait_until(lambda: victim not in client.scheduler_info()["workers"], what="the victim to go")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    settle(client)
    states = client.run(worker_storage_state)
    assert sum(s["orphans_removed"] for s in states.values()) >= 1, (
        "the dead store's files were removed"
    )
    for tier_dir in (service.options.ssd_dir, service.options.hdd_dir):
        assert [p for p in Path(tier_dir).rglob("*.partial")] == []
        stores = [p for p in Path(tier_dir).iterdir() if p.is_dir()]
        assert len(stores) == 2, f"only the live workers' stores remain: {stores}"
    wait_until(lambda: ledger_matches_workers(client), what="the ledger to drop the dead worker")
    assert victim not in service_state(client)["ledger"]["workers"]


# ---------------------------------------------------------------------- TLS and the command line
def _self_signed(tmp: Path) -> tuple[str, str]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return str(cert), str(key)


@pytest.mark.skipif(
    subprocess.run(["which", "openssl"], check=False, capture_output=True).returncode != 0,
    reason="needs the openssl command to make a certificate",
)
def test_the_service_talks_over_the_clusters_tls(tmp_path: Path) -> None:
    from distributed import Client
    from distributed.security import Security

    cert, key = _self_signed(tmp_path)
    security = Security(
        tls_ca_file=cert,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        require_encryption=True,
    )
    options = ServeOptions(
        ssd_dir=str(tmp_path / "ssd"),
        hdd_dir=str(tmp_path / "hdd"),
        log_dir=str(tmp_path / "logs"),
        ssd_capacity="8MiB",
        n_workers=1,
        memory_limit=MEMORY_LIMIT,
        config={**TIGHT_MEMORY, **FAST_LEASES},
    )
    with (
        service_cluster(options, security=security, protocol="tls://") as cluster,
        Client(cluster, security=security) as client,
    ):
        assert cluster.scheduler_address.startswith("tls://")
        result = run_pipeline(client, PipelineSpec(partitions=4, rows=20_000, n_keys=500))
        assert result.verified
        (state,) = client.run(worker_service_state).values()
        assert state["syncs"] > 0 and state["failures"] == 0
        assert service_state(client)["ledger"]["workers"]


def test_serve_demo_prints_where_the_files_went() -> None:
    exe = Path(sys.executable).with_name("dataplane")
    proc = subprocess.run(
        [str(exe), "serve", "--demo", "--json", "--demo-partitions", "8", "--demo-rows", "60000"],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["matches_pandas"] is True
    tiers = {row["tier"] for row in out["split"]}
    kinds = {row["file_kind"] for row in out["split"]}
    assert kinds == {"spill", "shuffle"} and tiers <= {"ssd", "hdd"} and tiers
    assert not Path(out["ssd_dir"]).exists(), "the demo removes its temporary directories"
    assert np.all([lat["p99"] > 0 for lat in out["decision_latency_us"]])


@contextlib.contextmanager
def running_serve(tmp_path: Path, logs: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """``dataplane serve --log-dir LOGS`` in its own process group (as a terminal's foreground
    job), up and serving, with its temporary directory below ``tmp_path``; killed if still
    running when the block ends."""
    exe = Path(sys.executable).with_name("dataplane")
    proc = subprocess.Popen(
        [str(exe), "serve", "--workers", "1", "--memory-limit", MEMORY_LIMIT,
         "--log-dir", str(logs)],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        # a shell that ran pytest in the background leaves SIGINT ignored: restore it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "Ctrl-C stops it" in line:
                break
        (scratch,) = [p for p in tmp_path.iterdir() if p.name.startswith("dataplane-serve-")]
        assert (scratch / "ssd").is_dir() or (scratch / "dask").is_dir(), "".join(seen)
        yield proc, scratch
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_serve_stopped_by_ctrl_c_removes_its_temporary_directory_without_tracebacks(
    tmp_path: Path,
) -> None:
    """``serve --log-dir DIR``: Ctrl-C (SIGINT to the terminal's process group, the worker
    processes included) leaves the log directory and no ``dataplane-serve-*`` directory (tiers
    and Dask scratch), and no traceback: the worker processes leave the interrupt to serve,
    which closes them (they used to die of it, each printing a traceback, and their nanny
    logged the loss)."""
    logs = tmp_path / "mylogs"
    with running_serve(tmp_path, logs) as (proc, scratch):
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    assert f"stopped; the I/O logs stay in {logs}" in out, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert proc.returncode == 0
    assert not scratch.exists()
    assert logs.is_dir()


def test_serve_stopped_by_sigterm_cleans_up_as_after_ctrl_c(tmp_path: Path) -> None:
    """``kill <pid>`` (SIGTERM to serve alone) stops serve as Ctrl-C does: cluster closed,
    ``dataplane-serve-*`` directory removed, log directory kept, exit status 0."""
    logs = tmp_path / "mylogs"
    with running_serve(tmp_path, logs) as (proc, scratch):
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    assert not scratch.exists(), (proc.returncode, out[-3000:])
    assert logs.is_dir()
    assert proc.returncode == 0, (proc.returncode, out[-3000:])
    assert f"stopped; the I/O logs stay in {logs}" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]


def _stop(proc: subprocess.Popen | None, *, group: bool = False) -> None:
    """Stop a ``dask`` process (its whole process group with ``group``), SIGKILL after 30 s."""
    if proc is None or proc.poll() is not None:
        return
    if group:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


@contextlib.contextmanager
def preload_cluster(
    tmp_path: Path, env: dict[str, str], *, worker_args: Sequence[str] = (), **worker_popen: Any
) -> Iterator[tuple[Path, subprocess.Popen]]:
    """``dask scheduler`` and one ``dask worker``, both ``--preload placement.dask``, in
    ``tmp_path`` with the placement directories there and a 16 MiB SSD budget (``env`` adds
    to or overrides the environment); yields the scheduler file and the worker process.
    ``worker_args`` are more ``dask worker`` options; ``worker_popen`` goes to the worker's
    ``subprocess.Popen``."""
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "DASK_PLACEMENT__SSD_DIR": str(tmp_path / "ssd"),
        "DASK_PLACEMENT__HDD_DIR": str(tmp_path / "hdd"),
        "DASK_PLACEMENT__LOG_DIR": str(tmp_path / "logs"),
        "DASK_PLACEMENT__SSD_CAPACITY": "16MiB",
        **env,
    }
    scheduler_file = tmp_path / "scheduler.json"
    common = ["--preload", "placement.dask"]
    scheduler = subprocess.Popen(
        [str(bin_dir / "dask"), "scheduler", "--scheduler-file", str(scheduler_file),
         "--port", "0", "--no-dashboard", *common],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = None
    group = bool(worker_popen.get("start_new_session"))
    try:
        wait_until(scheduler_file.exists, timeout=60, what="the scheduler to start")
        worker = subprocess.Popen(
            [str(bin_dir / "dask"), "worker", "--scheduler-file", str(scheduler_file),
             "--nthreads", "1", "--memory-limit", MEMORY_LIMIT, "--no-dashboard",
             "--local-directory", str(tmp_path / "dask"), *common, *worker_args],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **worker_popen,
        )  # fmt: skip
        yield scheduler_file, worker
    finally:
        _stop(worker, group=group)
        _stop(scheduler)


def test_dask_scheduler_and_worker_commands_with_the_preload(tmp_path: Path) -> None:
    """The real-cluster path: ``dask scheduler --preload placement.dask`` and
    ``dask worker --preload placement.dask``, configured by environment variables."""
    from distributed import Client

    env = {
        "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "0.02",
        "DASK_DATAFRAME__SHUFFLE__METHOD": "p2p",
    }
    with (
        preload_cluster(tmp_path, env) as (scheduler_file, _),
        Client(scheduler_file=str(scheduler_file), timeout=60) as client,
    ):
        client.wait_for_workers(1, timeout=60)
        result = run_pipeline(client, PipelineSpec(partitions=6, rows=40_000, n_keys=800))
        settle(client)
        (state,) = client.run(worker_service_state).values()
        ledger = service_state(client)["ledger"]
    assert result.verified and state["syncs"] > 0 and state["failures"] == 0
    assert ledger["capacity_bytes"] == 16 * MiB and len(ledger["workers"]) == 1
    rows = run_rows(tmp_path / "logs", result.run_id)
    assert set(rows["file_kind"]) >= {"shuffle"} and len(rows) > 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_worker_restarted_at_its_address_retires_its_old_process(tmp_path: Path) -> None:
    """A nanny restarts its worker at the same fixed port: the scheduler removes the old
    worker before the new one registers, so the old process's link is retired, a late
    renewal of it is refused, and the new process's renewals are served."""
    from distributed import Client

    def ledger_call(method: str, *args: Any, dask_scheduler: Any) -> Any:
        ledger = dask_scheduler.plugins[SCHEDULER_PLUGIN].service.ledger
        return getattr(ledger, method)(*args)

    def incarnation(dask_worker: Any) -> str:
        return worker_link(dask_worker).incarnation

    def late_renewal(worker: str, old: str, *, dask_scheduler: Any) -> str:
        try:
            dask_scheduler.plugins[SCHEDULER_PLUGIN].service.sync(
                worker=worker, used_bytes=15 * MiB, incarnation=old, seq=10**6
            )
        except StaleReport as exc:
            return str(exc)
        return "applied"

    port = free_port()
    with (
        preload_cluster(
            tmp_path, {}, worker_args=["--host", "127.0.0.1", "--worker-port", str(port)],
        ) as (scheduler_file, _),
        Client(scheduler_file=str(scheduler_file), timeout=60) as client,
    ):  # fmt: skip
        client.wait_for_workers(1, timeout=60)
        ((address, old),) = client.run(incarnation).items()
        assert address == f"tcp://127.0.0.1:{port}"
        wait_until(
            lambda: client.run_on_scheduler(ledger_call, "applied_seq", address, old) > 0,
            timeout=30, what="the first renewal",
        )  # fmt: skip
        client.restart(timeout=120)
        ((again, new),) = client.run(incarnation).items()
        assert again == address and new != old
        assert client.run_on_scheduler(ledger_call, "is_retired", address, old)
        wait_until(
            lambda: client.run_on_scheduler(ledger_call, "applied_seq", address, new) > 0,
            timeout=30, what="the restarted worker's renewal",
        )  # fmt: skip
        refused = client.run_on_scheduler(late_renewal, address, old)
        assert "which the scheduler removed" in refused
        (state,) = client.run(worker_service_state).values()
        ledger = service_state(client)["ledger"]
    assert state["syncs"] > 0 and state["failures"] == 0, state["last_error"]
    assert ledger["workers"][address]["used"] < 15 * MiB


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_dask_worker_stopped_with_its_process_group_logs_every_row(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """systemd stops ``dask worker`` by SIGTERM to its whole process group, a terminal's
    Ctrl-C sends SIGINT to it: the worker process gets the signal at the same time as the
    nanny, and used to die with its buffered rows and its live files' rows unlogged. Now
    every row is in the log (before the nanny, past its close timeout, would kill it)."""
    from distributed import Client

    from tests.placement.worker_tasks import make_rows

    env = {  # the worker runs make_rows, which it imports from this repository's tests
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH")) if p
        ),
    }
    with preload_cluster(
        tmp_path,
        env,
        start_new_session=True,  # its own process group, as a service or a terminal job
        # a shell that ran pytest in the background leaves SIGINT ignored: restore it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as (scheduler_file, worker):
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
            (before,) = client.run(make_rows, 7, 3).values()
        assert before["live_files"] == 3 and before["rows_pending"] + before["rows_written"] == 7
        os.killpg(worker.pid, sig)

        def logged() -> int:
            rows = read_logs(tmp_path / "logs").table.to_pandas()
            return int(rows["file_id"].str.startswith(before["label"] + "-").sum())

        deadline = time.monotonic() + 30
        while logged() < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert logged() == 10, "7 deleted files and 3 live ones, each logged once"


def test_the_preload_refuses_other_servers() -> None:
    from placement.dask import dask_setup
    from placement.service import ServiceConfigError

    with pytest.raises(ServiceConfigError, match="preload it into the scheduler and the workers"):
        asyncio.run(dask_setup(object()))
