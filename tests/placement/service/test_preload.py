"""``dask scheduler`` and ``dask worker`` with ``--preload placement.dask`` when the service
cannot start, and a worker whose scheduler runs no service: real processes, configured by
``DASK_PLACEMENT__*`` environment variables as on a cluster."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.placement import waiting
from tests.placement.conftest import unwritable_dir

pytestmark = pytest.mark.timeout(300)

DASK = str(Path(sys.executable).parent / "dask")
ROOT = Path(__file__).resolve().parents[3]
MiB = 2**20
#: Longest wait for a process to start or stop, in seconds (a bound, not a timing).
PATIENCE = 60.0


def dask_env(**placement: str) -> dict[str, str]:
    """The environment of a cluster process: no Dask settings but ``placement``
    (``SSD_CAPACITY="1GiB"`` -> ``DASK_PLACEMENT__SSD_CAPACITY``), this checkout's
    ``placement`` first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.update({f"DASK_PLACEMENT__{k}": v for k, v in placement.items()})
    return env


@dataclass
class Outcome:
    returncode: int | None  # None: still running when the test gave up on it
    output: str
    gave_up: str = ""


def run_until_exit(args: list[str], env: dict[str, str], log: Path, give_up_on: str) -> Outcome:
    """Run a ``dask`` command until it exits, or until its output shows ``give_up_on`` (it
    runs on where it should have stopped; then it is stopped and ``returncode`` is None)."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [DASK, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + PATIENCE
    gave_up = ""
    while proc.poll() is None:
        if give_up_on in log.read_text():
            gave_up = give_up_on
        elif time.monotonic() > deadline:
            gave_up = f"no exit within {PATIENCE} s"
        if gave_up:
            stop(proc)
            return Outcome(None, log.read_text(), gave_up)
        time.sleep(0.05)
    return Outcome(proc.returncode, log.read_text())


def stop(proc: subprocess.Popen) -> None:
    """Stop ``proc`` and its process group (a nanny's worker included)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def wait_until(check: Callable[[], object], what: str) -> None:
    waiting.wait_until(check, what, timeout=PATIENCE)


# ---------------------------------------------------------------------- the scheduler
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "placement.ssd-capacity is not set; set the cluster-wide SSD budget"),
        ({"SSD_CAPACITY": "-1"}, "placement.ssd-capacity=-1 is not a size in bytes"),
        ({"SSD_CAPACITY": "0.5"}, "placement.ssd-capacity=0.5 is 0.5 bytes, not a whole number"),
        (
            {"SSD_CAPACITY": "1GiB", "MODEL": "/nonexistent/model"},
            "placement.model='/nonexistent/model' cannot be loaded: no model directory",
        ),
        (
            {"SSD_CAPACITY": "1GiB", "SERVICE__LEASE_TTL": "0"},
            "placement.service.lease-ttl=0 is not a positive duration",
        ),
    ],
    ids=["capacity-unset", "capacity-negative", "capacity-fraction", "model-missing", "ttl"],
)
def test_a_scheduler_whose_service_cannot_start_stops_with_the_key_and_the_fix(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    """Distributed logs a failed preload and serves on; the service's scheduler must not:
    it logs one line naming the key and the fix and ``dask scheduler`` exits with status 1."""
    args = ["scheduler", "--port", "0", "--no-dashboard", "--preload", "placement.dask"]
    outcome = run_until_exit(
        args, dask_env(**env), tmp_path / "scheduler.log", give_up_on="Failed to start preload"
    )
    assert outcome.returncode == 1, (outcome.gave_up, outcome.output[-3000:])
    line = f"placement service not started: {message}"
    assert line in outcome.output, outcome.output[-3000:]
    assert "Closing scheduler. Reason: failure-to-start" in outcome.output


# ---------------------------------------------------------------------- the workers
@dataclass
class Scheduler:
    address: str
    log: Path

    def registered_workers(self) -> int:
        return self.log.read_text().count("Register worker")


@contextlib.contextmanager
def running_scheduler(tmp_path: Path, *preload: str) -> Iterator[Scheduler]:
    """``dask scheduler`` (with ``preload`` args) serving on a free port until the end."""
    log, file = tmp_path / "scheduler.log", tmp_path / "scheduler.json"
    args = [DASK, "scheduler", "--port", "0", "--no-dashboard", "--scheduler-file", str(file)]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*args, *preload],
            env=dask_env(SSD_CAPACITY="16MiB"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def address() -> str | None:
            assert proc.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(OSError, ValueError, KeyError):
                return str(json.loads(file.read_text())["address"])
            return None

        wait_until(address, "the scheduler to start")
        yield Scheduler(str(address()), log)
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def service_scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scheduler]:
    with running_scheduler(
        tmp_path_factory.mktemp("scheduler"), "--preload", "placement.dask"
    ) as scheduler:
        yield scheduler


@pytest.mark.parametrize(
    "case", ["same-dir", "ssd-not-a-dir", "hdd-unwritable", "log-dir-not-a-dir", "sync-interval"]
)
def test_a_worker_whose_storage_cannot_start_never_joins(
    service_scheduler: Scheduler, tmp_path: Path, case: str
) -> None:
    """The worker logs one line naming the key and the fix, removes what it created (no
    store directory or lock on a tier that worked), never registers with the scheduler,
    and ``dask worker`` (under its nanny, the default) exits with status 1."""
    (tmp_path / "afile").write_text("not a directory")
    ssd, hdd = tmp_path / "ssd", tmp_path / "hdd"
    env = {"SSD_DIR": str(ssd), "HDD_DIR": str(hdd)}
    with contextlib.ExitStack() as stack:
        if case == "same-dir":
            env["HDD_DIR"] = str(ssd)
            message = "placement.ssd-dir and placement.hdd-dir are the same directory"
        elif case == "ssd-not-a-dir":
            env["SSD_DIR"] = str(tmp_path / "afile" / "ssd")
            message = "placement.ssd-dir=" + env["SSD_DIR"] + ": cannot create the directory"
        elif case == "hdd-unwritable":
            env["HDD_DIR"] = str(stack.enter_context(unwritable_dir(tmp_path / "ro")))
            message = "placement.hdd-dir=" + env["HDD_DIR"] + " is not writable"
        elif case == "log-dir-not-a-dir":
            env["LOG_DIR"] = str(tmp_path / "afile" / "logs")
            message = "placement.log-dir=" + env["LOG_DIR"] + ": cannot create the directory"
        else:
            env["SERVICE__SYNC_INTERVAL"] = "0"
            message = "placement.service.sync-interval=0 is not a positive duration"
        args = ["worker", service_scheduler.address, "--nthreads", "1", "--no-dashboard"]
        args += ["--memory-limit", "300MiB", "--local-directory", str(tmp_path / "dask")]
        outcome = run_until_exit(
            [*args, "--preload", "placement.dask"],
            dask_env(**env),
            tmp_path / "worker.log",
            give_up_on="Registered to",
        )
        assert outcome.returncode == 1, (outcome.gave_up, outcome.output[-3000:])
        assert re.search(
            rf"placement storage on worker \S+ not started: {re.escape(message)}", outcome.output
        ), outcome.output[-3000:]
        assert service_scheduler.registered_workers() == 0
        left = [entry for tier in (ssd, hdd) if tier.is_dir() for entry in tier.iterdir()]
        assert left == [], left


# ---------------------------------------------------------------------- no service at all
def test_without_the_service_helpers_raise_and_workers_back_off_then_resume(
    tmp_path: Path,
) -> None:
    """A scheduler started without the preload: the client helpers raise (they returned
    None), the worker warns once without claiming why the scheduler has no service, and
    its renewals back off instead of making the scheduler log a traceback every 50 ms;
    once the service is added, renewals succeed again at the normal interval."""
    from distributed import Client

    from placement.service import (
        PlacementSchedulerPlugin,
        PlacementService,
        ServiceConfig,
        ServiceUnavailable,
        decide,
        reload_model,
        service_state,
        worker_service_state,
    )

    worker_log = tmp_path / "worker.log"
    env = dask_env(
        SSD_DIR=str(tmp_path / "ssd"),
        HDD_DIR=str(tmp_path / "hdd"),
        SERVICE__SYNC_INTERVAL="50ms",
        SERVICE__MAX_BACKOFF="400ms",
    )
    with running_scheduler(tmp_path) as scheduler, worker_log.open("w") as out:
        worker = subprocess.Popen(
            [DASK, "worker", scheduler.address, "--nthreads", "1", "--no-dashboard",
             "--memory-limit", "300MiB", "--local-directory", str(tmp_path / "dask"),
             "--preload", "placement.dask"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            with Client(scheduler.address, timeout=PATIENCE) as client:
                client.wait_for_workers(1, timeout=PATIENCE)
                for call in (
                    lambda: service_state(client),
                    lambda: reload_model(client, "/models/m"),
                    lambda: decide(client, [{"file_kind": "spill", "created_at": 0.0}]),
                ):
                    with pytest.raises(ServiceUnavailable, match="runs no placement service"):
                        call()

                def link() -> dict:
                    (state,) = client.run(worker_service_state).values()
                    return state

                wait_until(lambda: link()["no_service_answers"] >= 6, "six answers")
                state = link()
                # 0.05, 0.1, 0.2, then 0.4 s (the backoff's limit) between renewals
                assert state["next_wait_s"] == 0.4 and state["syncs"] == 0
                asked = scheduler.log.read_text().count("No handler placement_sync")
                assert asked <= state["no_service_answers"] + 1

                service = PlacementService(ServiceConfig(ssd_capacity_bytes=16 * MiB))
                client.register_plugin(PlacementSchedulerPlugin(service))
                wait_until(lambda: link()["syncs"] >= 2, "renewals to succeed")
                state = link()
                assert state["consecutive_failures"] == 0 and state["next_wait_s"] == 0.05
                assert state["chooser"]["lease"]["valid"]
                assert service_state(client)["ledger"]["capacity_bytes"] == 16 * MiB
        finally:
            stop(worker)
    warnings = [line for line in worker_log.read_text().splitlines() if "runs no placement" in line]
    assert len(warnings) == 1, warnings
    assert "started without `--preload placement.dask`, or the service failed" in warnings[0]
