"""A process killed with SIGKILL while filling leaves only complete, checksummed records.

A real child process (``python -m tests.cache.helpers fill``) fills a real LMDB
cache batch by batch, one transaction per batch, printing ``begin k`` before and
``committed k`` after each. The parent kills it with SIGKILL right after a
``begin`` line (the child is then encoding or writing a transaction), several
times over, then lets a last child run to completion.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from cache import CacheStore, verify
from tests.cache import helpers

REPO = Path(__file__).resolve().parents[2]
SHAPE = (3, 64, 64)  # 12 KiB samples: a 64-sample transaction writes 768 KiB
BATCH = 64


def _start(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.cache.helpers",
            "fill",
            str(path),
            str(BATCH),
            *map(str, SHAPE),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill_mid_fill(
    path: Path, after_commits: int, delay: float
) -> tuple[list[int], int | None]:
    """Run a filler; SIGKILL it ``delay`` seconds after the first ``begin`` that follows
    ``after_commits`` commits (the child is then encoding, writing or committing).

    Returns the batches it reported committed, and the batch it was killed in.
    """
    proc = _start(path)
    committed: list[int] = []
    killed_in = None
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            word, _, number = line.strip().partition(" ")
            if word == "committed":
                committed.append(int(number))
            elif word == "begin" and len(committed) >= after_commits:
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
                killed_in = int(number)
                proc.wait(timeout=30)
                assert proc.returncode == -signal.SIGKILL
                break
            elif word == "done":
                break
    finally:
        proc.kill()
        proc.wait(timeout=30)
    return committed, killed_in


def _check(path: Path) -> tuple[int, dict[int, int]]:
    """Open the cache as a new process would; everything in it must be complete and valid."""
    with CacheStore.open_existing(path) as store:
        report = verify(store)
        assert report.clean, f"corrupt records after SIGKILL: {report.corrupt[:5]}"
        assert report.ok == report.checked == store.count()
        counts = store.counts()
        for variant, n in counts.items():
            # One transaction per batch: a killed transaction leaves nothing of its batch.
            assert n % BATCH == 0, f"variant {variant} holds a partial batch ({n} records)"
            done = store.completed(variant)
            assert int(done.sum()) == n
            assert helpers.check_batch(store, np.flatnonzero(done), variant) == n
        return report.ok, counts


def test_sigkill_mid_fill_leaves_only_complete_records_and_filling_goes_on(tmp_path: Path) -> None:
    started = time.monotonic()
    path = tmp_path / "cache"
    batches_per_variant = helpers.NUM_SAMPLES // BATCH
    previous = 0
    for after, delay in ((2, 0.0), (5, 0.002), (9, 0.005)):
        committed, killed_in = _kill_mid_fill(path, after, delay)
        assert killed_in is not None, "the child was killed while filling"
        ok, counts = _check(path)
        assert ok >= previous, "nothing committed is ever lost"
        with CacheStore.open_existing(path) as store:
            done = {v: store.completed(v) for v in counts}
        for k in committed:  # every batch reported committed is there
            variant, start = divmod(k, batches_per_variant)
            assert done[variant][start * BATCH : (start + 1) * BATCH].all()
        # The batch it was killed in is there entirely (the commit had completed) or
        # not at all.
        variant, start = divmod(killed_in, batches_per_variant)
        assert done[variant][start * BATCH : (start + 1) * BATCH].sum() in (0, BATCH)
        previous = ok
    # The next open counts what is there; a new filler goes on to completion.
    assert 0 < previous < 2 * helpers.NUM_SAMPLES
    proc = _start(path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip().splitlines()[-1] == "done"
    ok, counts = _check(path)
    assert ok == 2 * helpers.NUM_SAMPLES
    assert counts == {0: helpers.NUM_SAMPLES, 1: helpers.NUM_SAMPLES}
    assert time.monotonic() - started < 60
