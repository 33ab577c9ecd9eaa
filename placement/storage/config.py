"""Dask configuration keys read by the worker-side storage.

``placement.ssd-dir``, ``placement.hdd-dir`` and ``placement.log-dir`` name the tier and
log directories (as in ``dask.config.set({"placement.ssd-dir": "/mnt/nvme/tmp"})`` or the
``DASK_PLACEMENT__SSD_DIR`` environment variable); Dask's own
``distributed.worker.memory.*`` thresholds keep their meaning.
"""

from __future__ import annotations

import os
from typing import Any

import dask

SSD_DIR_KEY = "placement.ssd-dir"
HDD_DIR_KEY = "placement.hdd-dir"
LOG_DIR_KEY = "placement.log-dir"


def config_dir(key: str) -> str | None:
    """The directory configured under Dask config ``key``, or ``None`` when unset."""
    value = dask.config.get(key, default=None)
    return os.fspath(value) if value else None


def tier_dirs(
    local_directory: str, ssd_dir: str | None = None, hdd_dir: str | None = None
) -> tuple[str, str]:
    """SSD and HDD directories: explicit, else configured, else below ``local_directory``."""
    ssd = ssd_dir or config_dir(SSD_DIR_KEY) or os.path.join(local_directory, "placement-ssd")
    hdd = hdd_dir or config_dir(HDD_DIR_KEY) or os.path.join(local_directory, "placement-hdd")
    return os.fspath(ssd), os.fspath(hdd)


def default_target_fraction() -> float | None:
    """Dask's ``distributed.worker.memory.target`` (or ``spill`` when target is off)."""
    target = dask.config.get("distributed.worker.memory.target", default=False)
    spill = dask.config.get("distributed.worker.memory.spill", default=False)
    fraction = target or spill
    return float(fraction) if fraction else None


def spill_heavy_settings(target_fraction: float) -> dict[str, Any]:
    """Dask config for spill- and shuffle-heavy runs: P2P shuffles and rechunks, managed
    memory spilled above ``target_fraction`` of the worker's limit, no active memory
    manager (it would move keys the runs mean to spill), quiet shuffle logs."""
    return {
        "dataframe.shuffle.method": "p2p",
        "array.rechunk.method": "p2p",
        "distributed.worker.memory.target": target_fraction,
        "distributed.worker.memory.spill": 0.7,
        "distributed.worker.memory.pause": 0.85,
        "distributed.worker.memory.terminate": 0.98,
        "distributed.scheduler.active-memory-manager.start": False,
        "logging.distributed.shuffle": "error",
    }
