"""Configuration of the placement service, read from Dask's config.

Keys (set them with ``dask.config.set``, a Dask YAML file, or environment variables
such as ``DASK_PLACEMENT__SSD_CAPACITY=20GiB``):

``placement.ssd-dir``, ``placement.hdd-dir``
    SSD and HDD tier directories of every worker (default: below the worker's local
    directory).
``placement.ssd-capacity``
    Cluster-wide SSD budget, in bytes or as ``"20GiB"``. **Required** by the scheduler.
``placement.model``
    Model directory written by ``dataplane placement train --out`` (default: none; then
    smaller files are predicted denser).
``placement.log-dir``
    Where workers write their I/O logs; the scheduler reads the model's history
    statistics from it (default: none, no log and no history).
``placement.service.sync-interval``
    Seconds between a worker's lease renewals (default ``250ms``).
``placement.service.sync-timeout``
    Longest wait for the scheduler's answer to a renewal (default ``1s``).
``placement.service.lease-ttl``
    Life of a lease, the SSD allowance a worker spends on its own (default ``5s``).
``placement.service.lease-fraction``
    Largest lease as a share of the budget (default ``1/(2n)`` for ``n`` workers).
``placement.service.unknown-size``
    Bytes reserved for a file whose size is unknown at creation (default ``4MiB``).

``placement.ssd-dir``, ``placement.hdd-dir`` and ``placement.log-dir`` are read by the
worker-side storage (:mod:`placement.storage.config`); the rest here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dask
from dask.utils import parse_bytes, parse_timedelta

from placement.policy import DEFAULT_EXPONENT, OccupancyBasis
from placement.service.errors import ServiceConfigError
from placement.storage.config import LOG_DIR_KEY, config_dir

SSD_CAPACITY_KEY = "placement.ssd-capacity"
MODEL_KEY = "placement.model"
SYNC_INTERVAL_KEY = "placement.service.sync-interval"
SYNC_TIMEOUT_KEY = "placement.service.sync-timeout"
LEASE_TTL_KEY = "placement.service.lease-ttl"
LEASE_FRACTION_KEY = "placement.service.lease-fraction"
UNKNOWN_SIZE_KEY = "placement.service.unknown-size"


def _bytes(key: str, value: Any) -> int:
    try:
        nbytes = parse_bytes(value) if isinstance(value, str) else value
    except (ValueError, TypeError):
        nbytes = None
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not nbytes >= 0:
        raise ServiceConfigError(
            f"{key}={value!r} is not a size in bytes; give a number or a string such as '20GiB'"
        )
    if not math.isfinite(nbytes):
        raise ServiceConfigError(f"{key}={value!r} must be finite")
    return int(nbytes)


def _seconds(key: str, value: Any) -> float:
    try:
        seconds = parse_timedelta(value, default="seconds")
    except (ValueError, TypeError, KeyError):
        seconds = None
    if not isinstance(seconds, (int, float)) or not (math.isfinite(seconds) and seconds > 0):
        raise ServiceConfigError(
            f"{key}={value!r} is not a positive duration; give seconds or a string such as '100ms'"
        )
    return float(seconds)


@dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    """Settings of the scheduler side of the service (validated at construction).

    Parameters
    ----------
    ssd_capacity_bytes : int
        Cluster-wide SSD budget, in bytes: the sum over workers of the bytes of live
        files on SSD never exceeds it by the service's decisions. A string such as
        ``"20GiB"`` is parsed at construction; the field holds the int.
    model_path : str, optional
        Directory of a trained model (a :class:`~placement.model.ModelSet` or a single
        :class:`~placement.model.DensityModel`); without one, smaller files are
        predicted denser (``-log10(size)``).
    log_dir : str, optional
        Log directory shared with the workers; the history features of the model are
        read from it at start and at every model reload.
    lease_ttl_s : float
        Life of a lease, in seconds; a worker that cannot renew it places new files on
        HDD once it has expired, and the scheduler re-lends its allowance then. A
        string such as ``"2s"`` is parsed at construction; the field holds the float.
    lease_fraction : float, optional
        Largest lease, as a share of ``ssd_capacity_bytes``, in (0, 1]; ``None``
        (default) lends each of ``n`` workers at most ``1 / (2 n)`` of the budget, so
        idle workers never hold more than half of it.
    window, exponent : int, float
        Options of the adaptive threshold (:class:`~placement.policy.AdaptiveThresholdPolicy`).
    occupancy_basis : OccupancyBasis or str
        Occupancy a file's threshold is taken at (``"before"``, default, or ``"after"``,
        when leases carry the threshold curve; :class:`~placement.policy.OccupancyBasis`).
    """

    ssd_capacity_bytes: int
    model_path: str | None = None
    log_dir: str | None = None
    lease_ttl_s: float = 5.0
    lease_fraction: float | None = None
    window: int = 4096
    exponent: float = DEFAULT_EXPONENT
    occupancy_basis: OccupancyBasis = OccupancyBasis.BEFORE

    def __post_init__(self) -> None:
        # store the parsed numbers: "20GiB" and "2s" become bytes and seconds here
        object.__setattr__(
            self, "ssd_capacity_bytes", _bytes(SSD_CAPACITY_KEY, self.ssd_capacity_bytes)
        )
        object.__setattr__(self, "lease_ttl_s", _seconds(LEASE_TTL_KEY, self.lease_ttl_s))
        if self.lease_fraction is not None and not (
            isinstance(self.lease_fraction, (int, float)) and 0 < self.lease_fraction <= 1
        ):
            raise ServiceConfigError(
                f"{LEASE_FRACTION_KEY}={self.lease_fraction!r} must be in (0, 1]"
            )
        if not isinstance(self.window, int) or self.window < 1:
            raise ServiceConfigError(f"window={self.window!r} must be a positive int")
        if not (isinstance(self.exponent, (int, float)) and self.exponent > 0):
            raise ServiceConfigError(f"exponent={self.exponent!r} must be a positive number")
        try:
            object.__setattr__(self, "occupancy_basis", OccupancyBasis(self.occupancy_basis))
        except ValueError:
            raise ServiceConfigError(
                f"occupancy_basis={self.occupancy_basis!r} must be one of "
                f"{[b.value for b in OccupancyBasis]}"
            ) from None

    def max_lease_bytes(self, n_workers: int = 1) -> int:
        """Largest allowance one lease carries in a cluster of ``n_workers``, in bytes."""
        fraction = self.lease_fraction
        if fraction is None:
            fraction = 1.0 / (2 * max(int(n_workers), 1))
        return int(self.ssd_capacity_bytes * fraction)

    @classmethod
    def from_dask_config(cls, **overrides: Any) -> ServiceConfig:
        """Read the ``placement.*`` keys; ``overrides`` (field names) win over them.

        Raises
        ------
        ServiceConfigError
            If ``placement.ssd-capacity`` is unset or a value is invalid.
        """
        values: dict[str, Any] = {}
        capacity = dask.config.get(SSD_CAPACITY_KEY, default=None)
        if "ssd_capacity_bytes" not in overrides:
            if capacity is None:
                raise ServiceConfigError(
                    f"{SSD_CAPACITY_KEY} is not set; set the cluster-wide SSD budget, e.g. "
                    f"dask.config.set({{'{SSD_CAPACITY_KEY}': '20GiB'}}) or the environment "
                    "variable DASK_PLACEMENT__SSD_CAPACITY=20GiB"
                )
            values["ssd_capacity_bytes"] = capacity  # parsed by __post_init__
        model = dask.config.get(MODEL_KEY, default=None)
        values["model_path"] = str(model) if model else None
        values["log_dir"] = config_dir(LOG_DIR_KEY)
        ttl = dask.config.get(LEASE_TTL_KEY, default=None)
        if ttl is not None:
            values["lease_ttl_s"] = ttl
        fraction = dask.config.get(LEASE_FRACTION_KEY, default=None)
        if fraction is not None:
            try:
                values["lease_fraction"] = float(fraction)
            except (TypeError, ValueError):
                raise ServiceConfigError(
                    f"{LEASE_FRACTION_KEY}={fraction!r} must be a number in (0, 1]"
                ) from None
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class LinkConfig:
    """Settings of a worker's link to the service (validated at construction).

    Durations and sizes may be given as strings (``"250ms"``, ``"4MiB"``); they are
    parsed at construction, so the fields hold seconds (float) and bytes (int).

    Parameters
    ----------
    sync_interval_s : float
        Seconds between lease renewals (a worker renews sooner when half its allowance
        is spent).
    sync_timeout_s : float
        Longest wait for one answer of the scheduler, in seconds; an answer that does
        not come in time counts as a failure (the worker keeps its lease until it
        expires, then places files on HDD).
    unknown_size_bytes : int
        Bytes reserved for a file whose expected size is unknown.
    """

    sync_interval_s: float = 0.25
    sync_timeout_s: float = 1.0
    unknown_size_bytes: int = 4 * 2**20

    def __post_init__(self) -> None:
        # store the parsed numbers: "250ms" and "4MiB" become seconds and bytes here
        for name, key in (
            ("sync_interval_s", SYNC_INTERVAL_KEY),
            ("sync_timeout_s", SYNC_TIMEOUT_KEY),
        ):
            object.__setattr__(self, name, _seconds(key, getattr(self, name)))
        object.__setattr__(
            self, "unknown_size_bytes", _bytes(UNKNOWN_SIZE_KEY, self.unknown_size_bytes)
        )

    @classmethod
    def from_dask_config(cls, **overrides: Any) -> LinkConfig:
        """Read the ``placement.service.*`` keys; ``overrides`` (field names) win."""
        values: dict[str, Any] = {}
        for field, key in (
            ("sync_interval_s", SYNC_INTERVAL_KEY),
            ("sync_timeout_s", SYNC_TIMEOUT_KEY),
            ("unknown_size_bytes", UNKNOWN_SIZE_KEY),
        ):
            value = dask.config.get(key, default=None)
            if value is not None:
                values[field] = value  # parsed by __post_init__
        values.update(overrides)
        return cls(**values)
