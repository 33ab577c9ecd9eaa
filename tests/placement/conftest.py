"""Fixtures of the placement tests: real multi-process Dask ``LocalCluster``s under tight memory."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: Dask config for tests: P2P shuffles, tiny managed memory so workers spill.
TIGHT_MEMORY = {
    "dataframe.shuffle.method": "p2p",
    "array.rechunk.method": "p2p",
    "distributed.worker.memory.target": 0.02,
    "distributed.worker.memory.spill": 0.7,
    "distributed.worker.memory.pause": 0.85,
    "distributed.worker.memory.terminate": 0.98,
    "distributed.scheduler.active-memory-manager.start": False,
}
MEMORY_LIMIT = "768MiB"


@dataclass
class TieredCluster:
    """A cluster whose workers use placement storage, and where its files and logs go."""

    client: Any
    ssd_dir: Path
    hdd_dir: Path
    log_dir: Path


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[Any]:
    """A plain multi-process ``LocalCluster`` (2 workers x 1 thread, small memory) and its
    client."""
    import dask
    from distributed import Client, LocalCluster

    with (
        dask.config.set(TIGHT_MEMORY),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=MEMORY_LIMIT,
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def tiered_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredCluster]:
    """A multi-process ``LocalCluster`` whose spill, shuffle and rechunk files go through
    :mod:`placement.storage`: shuffle/rechunk files on the SSD directory, spill on HDD."""
    import dask
    from distributed import Client, LocalCluster

    from placement.storage import ByKindTier, FileKind, PlacementWorkerPlugin, tiered_spill_buffer
    from placement.tier import Tier

    root = tmp_path_factory.mktemp("tiered")
    ssd, hdd, logs = root / "ssd", root / "hdd", root / "logs"
    chooser = ByKindTier({FileKind.SHUFFLE: Tier.SSD, FileKind.RECHUNK: Tier.SSD}, default=Tier.HDD)
    data = (
        tiered_spill_buffer,
        {
            "ssd_dir": str(ssd),
            "hdd_dir": str(hdd),
            "log_dir": str(logs),
            "chooser": chooser,
            "memory_limit": MEMORY_LIMIT,
        },
    )
    with (
        dask.config.set(TIGHT_MEMORY),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=MEMORY_LIMIT,
            dashboard_address=None,
            local_directory=str(root / "dask"),
            data=data,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(PlacementWorkerPlugin())
        yield TieredCluster(client, ssd, hdd, logs)


@contextlib.contextmanager
def unwritable_dir(path: Path) -> Iterator[Path]:
    """A new directory this process cannot write in: read-only mode, or for root (whom modes
    do not stop) the immutable attribute; skips the test where neither is possible."""
    path.mkdir(parents=True)
    root = os.geteuid() == 0
    if root:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
        if done.returncode:
            pytest.skip(f"cannot make a directory unwritable for root: {done.stderr!r}")
    else:
        path.chmod(0o555)
    try:
        yield path
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        else:
            path.chmod(0o755)
