"""OpenMP's wait policy: the training commands ask for PASSIVE before LightGBM loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from placement.openmp import WAIT_POLICY_VAR, prefer_passive_wait
from tests.conftest import REPO_ROOT


def test_passive_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WAIT_POLICY_VAR, raising=False)
    assert prefer_passive_wait() == "PASSIVE"
    assert os.environ[WAIT_POLICY_VAR] == "PASSIVE"
    monkeypatch.setenv(WAIT_POLICY_VAR, "ACTIVE")
    assert prefer_passive_wait() == "ACTIVE"
    assert os.environ[WAIT_POLICY_VAR] == "ACTIVE"


def _spin_count_lightgbm_loads_with(invoke: str, env_policy: str | None) -> int:
    """Run ``invoke`` (Python) in a child, then import LightGBM: how long its OpenMP
    runtime lets a waiting thread spin (``GOMP_SPINCOUNT``, reported as it loads under
    ``OMP_DISPLAY_ENV=VERBOSE``; 0 under PASSIVE)."""
    env = {k: v for k, v in os.environ.items() if k not in (WAIT_POLICY_VAR, "GOMP_SPINCOUNT")}
    if env_policy is not None:
        env[WAIT_POLICY_VAR] = env_policy
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    code = f"{invoke}\nimport lightgbm\n"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.strip().startswith("GOMP_SPINCOUNT")]
    assert lines, f"the OpenMP runtime did not display its environment:\n{out.stderr[-2000:]}"
    return int(lines[0].split("=", 1)[1].strip().strip("'"))


@pytest.mark.parametrize("command", ["report", "placement"])
def test_training_commands_load_openmp_passive(tmp_path: Path, command: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    if command == "report":
        invoke = (
            "from click.testing import CliRunner\n"
            "from logs_analysis.cli import report_command\n"
            f"r = CliRunner().invoke(report_command, [{str(empty)!r}, '--out', "
            f"{str(tmp_path / 'r.html')!r}])\n"
            "assert r.exit_code != 0 and 'no log files' in r.output, r.output\n"
        )
    else:  # every placement subcommand: the group's callback runs first
        invoke = (
            "from click.testing import CliRunner\n"
            "from placement.cli import placement_group\n"
            "r = CliRunner().invoke(placement_group, ['train', '--help'])\n"
            "assert r.exit_code == 0, r.output\n"
        )
    default = _spin_count_lightgbm_loads_with("import placement.cli", None)
    assert default > 0, "control: without the command, libgomp's default spins"
    assert _spin_count_lightgbm_loads_with(invoke, None) == 0, "PASSIVE: no spinning"
    assert _spin_count_lightgbm_loads_with(invoke, "ACTIVE") > default, "the user's ACTIVE kept"
