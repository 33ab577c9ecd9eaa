"""Real processes: Ctrl-C (SIGINT) leaves a usable checkpoint; 2-process DDP under torchrun."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parent / "scripts" / "fit_fmnist.py"
REPO = Path(__file__).resolve().parents[2]


#: Variables a Dask ``LocalCluster`` started by an earlier test leaves in this process's
#: environment; the child processes here run as if started from a shell.
_LEAKED_BY_DASK = ("__DASK_PARENT_PID", "MALLOC_TRIM_THRESHOLD_", "PYTHONHASHSEED")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LEAKED_BY_DASK}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(REPO)
    return env


def test_sigint_writes_a_checkpoint_that_resumes(fmnist_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(fmnist_dir), str(out), "--slow", "0.05"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (out / "started").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"training never started:\n{proc.communicate()[0]}")
        time.sleep(0.05)
    time.sleep(0.5)  # a few batches in
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode != 0, output
    assert "KeyboardInterrupt" in output
    state = torch.load(out / "ckpt" / "last.pt", weights_only=False)
    assert state["epoch"] == 0
    steps = state["tally"]["steps"]
    assert 0 < steps < 32  # mid-epoch, at a step boundary
    assert state["loader_state"]["position"] == steps
    assert json.loads((out / "run" / "run.json").read_text())["status"] == "interrupted"

    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(fmnist_dir), str(out), "--resume"],
        check=False,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rec = json.loads((out / "run" / "run.json").read_text())
    assert rec["status"] == "completed"
    assert [e["steps"] for e in rec["epochs"]] == [32, 32]  # the interrupted epoch completed once


@pytest.mark.skipif(
    shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
    reason="torchrun not installed",
)
def test_two_process_ddp_with_gloo(fmnist_dir: Path, tmp_path: Path) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    out = tmp_path / "ddp"
    proc = subprocess.Popen(
        [
            str(torchrun) if torchrun.exists() else "torchrun",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(SCRIPT),
            str(fmnist_dir),
            str(out),
            "--epochs",
            "1",
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so a hang can be cleaned up with the workers
    )
    try:
        output = proc.communicate(timeout=180)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"torchrun hung:\n{proc.communicate()[0]}")
    assert proc.returncode == 0, output
    ranks = json.loads((out / "ranks.json").read_text())
    assert [r["rank"] for r in ranks] == [0, 1]
    # DDP keeps the replicas identical, and validation is summed over ranks.
    assert ranks[0]["checksum"] == ranks[1]["checksum"]
    assert ranks[0]["val_accuracy"] == ranks[1]["val_accuracy"]
    assert ranks[0]["batches"] == 16  # each rank trains on its half of 2048 samples
    rec = json.loads((out / "run" / "run.json").read_text())
    assert rec["world_size"] == 2 and rec["status"] == "completed"
    assert rec["epochs"][0]["samples"] == 1024  # this rank's share
    assert (out / "ckpt" / "last.pt").is_file()
    # only rank 0 writes: one run.json, no temporary files left behind
    assert sorted(p.name for p in (out / "run").iterdir()) == ["run.json"]
