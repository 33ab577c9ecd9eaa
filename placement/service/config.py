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
``placement.service.max-backoff``
    Longest wait between a worker's renewals while the scheduler answers that it runs no
    placement service (default ``30s``; the wait doubles from the renewal interval).
``placement.service.occupancy-basis``
    Occupancy a file's threshold is taken at: ``before`` (default) or ``after``
    (:class:`~placement.policy.OccupancyBasis`).
``placement.service.threshold-window``
    Recent predictions the adaptive threshold ranks a file among (default ``4096``).
``placement.service.threshold-exponent``
    Exponent of the adaptive threshold's occupancy rule (default ``0.5``;
    :mod:`placement.policy`).

``placement.ssd-dir``, ``placement.hdd-dir`` and ``placement.log-dir`` are read by the
worker-side storage (:mod:`placement.storage.config`); the rest here. Any other key under
``placement`` is reported with a warning that names the known keys (:func:`check_keys`).

Sizes are whole numbers of bytes: ``"20GiB"``, ``20000000000``; ``0.5`` or ``"1.5"`` are
refused. An SSD budget below 1 MiB (``0`` turns the SSD tier off) is accepted with a
warning.
"""

from __future__ import annotations

import difflib
import logging
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dask
from dask.utils import byte_sizes, parse_timedelta

from placement.policy import DEFAULT_EXPONENT, OccupancyBasis
from placement.service.errors import ServiceConfigError
from placement.storage.config import HDD_DIR_KEY, LOG_DIR_KEY, SSD_DIR_KEY, config_dir, env_name

logger = logging.getLogger(__name__)

SSD_CAPACITY_KEY = "placement.ssd-capacity"
MODEL_KEY = "placement.model"
SYNC_INTERVAL_KEY = "placement.service.sync-interval"
SYNC_TIMEOUT_KEY = "placement.service.sync-timeout"
LEASE_TTL_KEY = "placement.service.lease-ttl"
LEASE_FRACTION_KEY = "placement.service.lease-fraction"
UNKNOWN_SIZE_KEY = "placement.service.unknown-size"
MAX_BACKOFF_KEY = "placement.service.max-backoff"
OCCUPANCY_BASIS_KEY = "placement.service.occupancy-basis"
THRESHOLD_WINDOW_KEY = "placement.service.threshold-window"
THRESHOLD_EXPONENT_KEY = "placement.service.threshold-exponent"

#: Every Dask config key the placement service and its storage read.
KNOWN_KEYS = (
    SSD_DIR_KEY,
    HDD_DIR_KEY,
    SSD_CAPACITY_KEY,
    MODEL_KEY,
    LOG_DIR_KEY,
    SYNC_INTERVAL_KEY,
    SYNC_TIMEOUT_KEY,
    LEASE_TTL_KEY,
    LEASE_FRACTION_KEY,
    UNKNOWN_SIZE_KEY,
    MAX_BACKOFF_KEY,
    OCCUPANCY_BASIS_KEY,
    THRESHOLD_WINDOW_KEY,
    THRESHOLD_EXPONENT_KEY,
)

#: SSD budgets below this many bytes are accepted with a warning (a unit was likely left out).
SMALL_CAPACITY_BYTES = 2**20


def check_keys() -> list[str]:
    """Warn about keys under ``placement`` in Dask's config that nothing reads.

    A misspelt key (``DASK_PLACEMENT__OCCUPANCY_BASIS`` for
    ``placement.service.occupancy-basis``) would otherwise be ignored in silence. Dask
    treats ``_`` and ``-`` in key names alike, and so does this check.

    Returns
    -------
    list of str
        The unknown keys, dotted and with ``-`` (empty when every key is known).
    """
    section = dask.config.get("placement", default=None)
    if not isinstance(section, Mapping):
        return []
    unknown = [key for key in _flatten("placement", section) if key not in KNOWN_KEYS]
    for key in unknown:
        close = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]} ({env_name(close[0])})? " if close else ""
        logger.warning(
            "Dask config key %s (%s) is not a placement setting and is ignored; %sknown keys: %s",
            key,
            env_name(key),
            hint,
            ", ".join(KNOWN_KEYS),
        )
    return unknown


def _flatten(prefix: str, section: Mapping[Any, Any]) -> list[str]:
    keys: list[str] = []
    for name, value in section.items():
        key = f"{prefix}.{str(name).replace('_', '-')}"
        if isinstance(value, Mapping) and key not in KNOWN_KEYS:
            keys.extend(_flatten(key, value))
        else:
            keys.append(key)
    return keys


def size_in_bytes(key: str, value: Any) -> int:
    """Config ``key``'s ``value`` (an int, a float without a fraction, or a string such as
    ``"20GiB"``) in bytes; a fraction of a byte is refused (``0.5`` and ``"1.5"`` would
    truncate to 0 and 1).

    Raises
    ------
    ServiceConfigError
        If ``value`` is not a size of whole bytes >= 0 (the message names ``key``).
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0:
        return int(value)  # exact, however large
    nbytes = _exact_bytes(value)
    if nbytes is None or not nbytes >= 0:
        raise ServiceConfigError(
            f"{key}={value!r} is not a size in bytes; give a number or a string such as '20GiB'"
        )
    if not math.isfinite(nbytes):
        raise ServiceConfigError(f"{key}={value!r} must be finite")
    whole = round(nbytes)
    # a unit may leave a rounding error ("2.01GB" is 2009999999.9999998): only refuse a
    # real fraction of a byte
    if abs(nbytes - whole) > 1e-9 * max(1.0, abs(nbytes)):
        raise ServiceConfigError(
            f"{key}={value!r} is {nbytes:g} bytes, not a whole number of bytes; give whole "
            "bytes or a unit, e.g. '100GiB' or '512MiB'"
        )
    return int(whole)


def _exact_bytes(value: Any) -> float | None:
    """The bytes ``value`` names, fraction included (``dask.utils.parse_bytes`` truncates)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if not isinstance(value, str):
        return None
    text = value.replace(" ", "")
    if not text:
        return None
    number = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = text[len(number) :].lower()
    try:
        count = float(number) if number else 1.0
        return count * byte_sizes[unit]
    except (ValueError, KeyError):
        return None


def _seconds(key: str, value: Any) -> float:
    try:
        seconds = parse_timedelta(value, default="seconds")
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError):
        seconds = None
    if not isinstance(seconds, (int, float)) or not (math.isfinite(seconds) and seconds > 0):
        raise ServiceConfigError(
            f"{key}={value!r} is not a positive duration; give seconds or a string such as '100ms'"
        )
    return float(seconds)


def _positive_int(key: str, value: Any) -> int:
    number: Any = value
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ServiceConfigError(f"{key}={value!r} must be a positive whole number")
    return number


def _positive_float(key: str, value: Any) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ServiceConfigError(f"{key}={value!r} must be a positive number")
    return number


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
    window : int
        Recent predictions the adaptive threshold ranks a file among
        (:class:`~placement.policy.AdaptiveThresholdPolicy`; key
        ``placement.service.threshold-window``).
    exponent : float
        Exponent of the threshold's occupancy rule (key
        ``placement.service.threshold-exponent``).
    occupancy_basis : OccupancyBasis or str
        Occupancy a file's threshold is taken at (``"before"``, default, or ``"after"``,
        when leases carry the threshold curve; :class:`~placement.policy.OccupancyBasis`;
        key ``placement.service.occupancy-basis``).
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
            self, "ssd_capacity_bytes", size_in_bytes(SSD_CAPACITY_KEY, self.ssd_capacity_bytes)
        )
        object.__setattr__(self, "lease_ttl_s", _seconds(LEASE_TTL_KEY, self.lease_ttl_s))
        if self.lease_fraction is not None and not (
            isinstance(self.lease_fraction, (int, float))
            and not isinstance(self.lease_fraction, bool)
            and 0 < self.lease_fraction <= 1
        ):
            raise ServiceConfigError(
                f"{LEASE_FRACTION_KEY}={self.lease_fraction!r} must be in (0, 1]"
            )
        object.__setattr__(self, "window", _positive_int(THRESHOLD_WINDOW_KEY, self.window))
        object.__setattr__(
            self, "exponent", _positive_float(THRESHOLD_EXPONENT_KEY, self.exponent)
        )
        basis = self.occupancy_basis
        try:
            basis = OccupancyBasis(basis.strip().lower() if isinstance(basis, str) else basis)
        except ValueError:
            raise ServiceConfigError(
                f"occupancy_basis={self.occupancy_basis!r} ({OCCUPANCY_BASIS_KEY}) must be one "
                f"of {[b.value for b in OccupancyBasis]}"
            ) from None
        object.__setattr__(self, "occupancy_basis", basis)

    def max_lease_bytes(self, n_workers: int = 1) -> int:
        """Largest allowance one lease carries in a cluster of ``n_workers``, in bytes."""
        fraction = self.lease_fraction
        if fraction is None:
            fraction = 1.0 / (2 * max(int(n_workers), 1))
        return int(self.ssd_capacity_bytes * fraction)

    @classmethod
    def from_dask_config(cls, **overrides: Any) -> ServiceConfig:
        """Read the ``placement.*`` keys; ``overrides`` (field names) win over them.

        Unknown ``placement.*`` keys, and an SSD budget below 1 MiB (0: the SSD tier is
        off), are logged as warnings.

        Raises
        ------
        ServiceConfigError
            If ``placement.ssd-capacity`` is unset or a value is invalid.
        """
        check_keys()
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
        for field, key in (
            ("occupancy_basis", OCCUPANCY_BASIS_KEY),
            ("window", THRESHOLD_WINDOW_KEY),
            ("exponent", THRESHOLD_EXPONENT_KEY),
        ):
            value = dask.config.get(key, default=None)
            if value is not None:
                values[field] = value  # parsed by __post_init__
        values.update(overrides)
        config = cls(**values)
        if "ssd_capacity_bytes" not in overrides:
            _warn_small_capacity(capacity, config.ssd_capacity_bytes)
        return config


def _warn_small_capacity(value: Any, nbytes: int) -> None:
    """Log a warning for a configured SSD budget that leaves the SSD tier (almost) unused."""
    if nbytes == 0:
        logger.warning(
            "%s=%r: the SSD tier is off, every file goes to HDD; set a budget such as "
            "'100GiB' (%s=100GiB) to use the SSD",
            SSD_CAPACITY_KEY,
            value,
            env_name(SSD_CAPACITY_KEY),
        )
    elif nbytes < SMALL_CAPACITY_BYTES:
        logger.warning(
            "%s=%r is %d bytes, less than 1 MiB: the SSD tier holds almost nothing; a bare "
            "number counts bytes, give a unit, e.g. '100GiB'",
            SSD_CAPACITY_KEY,
            value,
            nbytes,
        )


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
    max_backoff_s : float
        Longest wait between renewals, in seconds, while the scheduler answers that it
        runs no placement service; the wait doubles from ``sync_interval_s`` after each
        such answer and is ``sync_interval_s`` again once the service answers.
    """

    sync_interval_s: float = 0.25
    sync_timeout_s: float = 1.0
    unknown_size_bytes: int = 4 * 2**20
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        # store the parsed numbers: "250ms" and "4MiB" become seconds and bytes here
        for name, key in (
            ("sync_interval_s", SYNC_INTERVAL_KEY),
            ("sync_timeout_s", SYNC_TIMEOUT_KEY),
            ("max_backoff_s", MAX_BACKOFF_KEY),
        ):
            object.__setattr__(self, name, _seconds(key, getattr(self, name)))
        object.__setattr__(
            self, "unknown_size_bytes", size_in_bytes(UNKNOWN_SIZE_KEY, self.unknown_size_bytes)
        )

    @classmethod
    def from_dask_config(cls, **overrides: Any) -> LinkConfig:
        """Read the ``placement.service.*`` keys; ``overrides`` (field names) win.

        Unknown ``placement.*`` keys are logged as warnings (:func:`check_keys`).
        """
        check_keys()
        values: dict[str, Any] = {}
        for field, key in _LINK_KEYS:
            value = dask.config.get(key, default=None)
            if value is not None:
                values[field] = value  # parsed by __post_init__
        values.update(overrides)
        return cls(**values)

    def dask_config(self) -> dict[str, float | int]:
        """These settings as the ``placement.service.*`` keys :meth:`from_dask_config` reads."""
        return {key: getattr(self, field) for field, key in _LINK_KEYS}


#: Each :class:`LinkConfig` field and the Dask config key it is read from.
_LINK_KEYS = (
    ("sync_interval_s", SYNC_INTERVAL_KEY),
    ("sync_timeout_s", SYNC_TIMEOUT_KEY),
    ("unknown_size_bytes", UNKNOWN_SIZE_KEY),
    ("max_backoff_s", MAX_BACKOFF_KEY),
)
