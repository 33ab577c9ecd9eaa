"""Dask configuration keys read by the worker-side storage.

``placement.ssd-dir``, ``placement.hdd-dir`` and ``placement.log-dir`` name the tier and
log directories (as in ``dask.config.set({"placement.ssd-dir": "/mnt/nvme/tmp"})`` or the
``DASK_PLACEMENT__SSD_DIR`` environment variable); Dask's own
``distributed.worker.memory.*`` thresholds keep their meaning. :func:`check_storage_dirs`
checks them before a worker's storage starts.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import dask

from placement.storage.errors import StorageConfigError

SSD_DIR_KEY = "placement.ssd-dir"
HDD_DIR_KEY = "placement.hdd-dir"
LOG_DIR_KEY = "placement.log-dir"


def config_dir(key: str) -> str | None:
    """The directory configured under Dask config ``key``, or ``None`` when unset."""
    value = dask.config.get(key, default=None)
    return os.fspath(value) if value else None


def env_name(key: str) -> str:
    """The environment variable that sets Dask config ``key``
    (``placement.ssd-dir`` -> ``DASK_PLACEMENT__SSD_DIR``)."""
    return "DASK_" + key.upper().replace(".", "__").replace("-", "_")


def check_storage_dirs(ssd_dir: str, hdd_dir: str, log_dir: str | None = None) -> None:
    """Create the tier and log directories if missing and check that this process can
    write in them, so that a store never starts half way.

    Parameters
    ----------
    ssd_dir, hdd_dir : str
        Tier directories (``placement.ssd-dir``, ``placement.hdd-dir``).
    log_dir : str, optional
        Log directory (``placement.log-dir``); ``None``: no log.

    Raises
    ------
    StorageConfigError
        If the tiers are one directory, or a directory cannot be created or written; the
        message names the key to change.
    """
    if Path(ssd_dir).resolve() == Path(hdd_dir).resolve():
        raise StorageConfigError(
            f"{SSD_DIR_KEY} and {HDD_DIR_KEY} are the same directory ({ssd_dir}); give each "
            f"tier its own directory, e.g. {env_name(SSD_DIR_KEY)}=/mnt/nvme/dask "
            f"{env_name(HDD_DIR_KEY)}=/data/dask"
        )
    for key, directory in ((SSD_DIR_KEY, ssd_dir), (HDD_DIR_KEY, hdd_dir), (LOG_DIR_KEY, log_dir)):
        if directory is not None:
            _check_writable(key, os.fspath(directory))


def _check_writable(key: str, directory: str) -> None:
    fix = f"set {key} ({env_name(key)}) to a directory this process can create and write"
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise StorageConfigError(
            f"{key}={directory}: cannot create the directory ({exc.strerror or exc}); {fix}"
        ) from exc
    try:
        # a file written and removed: os.access would say yes to root in a read-only
        # (immutable) directory
        fd, probe = tempfile.mkstemp(prefix=".placement-probe-", dir=directory)
    except OSError as exc:
        raise StorageConfigError(
            f"{key}={directory} is not writable ({exc.strerror or exc}); {fix}"
        ) from exc
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


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
