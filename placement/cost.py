"""Total cost of ownership (TCO) of a temporary file on SSD or on HDD.

A file of ``size`` bytes that lives ``life`` seconds and sees ``ops`` read and write
operations costs, on each tier:

* **SSD**: its capacity for its life, ``size_GB * life_months * ssd_usd_per_gb_month``.
  SSD operations are taken as free: a data-center SSD gives 10^5-10^6 IOPS, far more
  than a bay of intermediate files asks of it, so an SSD is bought for capacity.
* **HDD**: the larger of its capacity cost, ``size_GB * life_months *
  hdd_usd_per_gb_month``, and its share of drive time, ``ops * drive_usd_per_second /
  hdd_iops_per_drive`` with ``drive_usd_per_second = hdd_drive_usd /
  (hdd_amortization_months * SECONDS_PER_MONTH)``. An HDD gives only ~100-200 random
  operations per second, so a fleet that must serve dense files is sized by its
  operations, not its bytes; a file pays for whichever it uses more of (the
  ``max(capacity, IOPS)`` rule of tiering studies).

Two optional terms (off by default, so the default model is exactly the rule above):

* ``ssd_usd_per_tb_written``: SSD wear. A data-center SSD is rated for a number of
  drive writes per day over its warranty; each byte written uses up that share of its
  price. E.g. a 3.84 TB drive rated 1 drive write per day for 5 years (about 7 PB
  written; Micron 7450 PRO and Samsung PM9A3 product briefs) at about $400 costs
  ~$0.057 per TB written. Adds ``write_bytes * price`` to the SSD cost.
* ``hdd_bytes_per_s``: HDD transfer time. Adds ``(read_bytes + write_bytes) /
  hdd_bytes_per_s`` seconds of drive time to the operations' (Seagate Exos X18
  product manual: 270 MB/s sustained).

With them, the ranking that matters is the saving per byte-second of SSD, which the
oracle of :mod:`placement.policy` uses; without them it equals the density ranking.

Placing a file on SSD saves ``hdd_cost - ssd_cost``, which is positive when its I/O
density (operations per byte per second, :mod:`placement.schema`) is above
:meth:`CostModel.break_even_density`. Because the HDD's operation cost is linear in
``ops`` and the SSD's cost linear in ``size * life``, the saving per byte-second of SSD
is increasing in density: ranking files by density is ranking them by saving per unit
of the scarce SSD capacity.

The break-even density
----------------------
Divide both costs by the byte-seconds a file holds, ``size * life``. With ``d`` its
density (ops per byte per second), ``a = write_bytes / size`` and ``r = read_bytes /
size`` (bytes written and read per byte stored), and the unit prices ``c_s``, ``c_h``
(US dollars per byte-second of SSD and HDD capacity), ``p`` (US dollars per HDD
operation), ``w`` (US dollars per byte written to SSD, 0 unless wear is priced) and
``q`` (US dollars per byte the HDD transfers, ``p * hdd_iops_per_drive /
hdd_bytes_per_s``, 0 unless transfer is priced)::

    ssd_cost / (size * life) = c_s + a * w / life
    hdd_cost / (size * life) = max(c_h, d * p + (a + r) * q / life)

The file saves money on SSD exactly when its density is above::

    d* = (c_s + (a * (w - q) - r * q) / life) / p        (ops per byte per second)

and every density does (``d* = 0``) when ``c_h >= c_s + a * w / life``. Size cancels
out; lifetime does not once wear or transfer is priced: wear is paid once per byte
written, whatever the life, while capacity and operations accrue over it, so a
short-lived file must be denser to pay for its wear. Without the optional terms ``d* =
c_s / p`` (about ``2.7e-9`` with the defaults, ``10**-8.57``), for any lifetime.
A placement policy decides when the file is created, so ``life``, ``a`` and ``r`` are
estimates there: :mod:`placement.policy` uses the expected lifetime of the file's
stage in earlier runs and ``a = r = 1`` (a temporary file is written once and read
back once, the median of the placement logs), never the file's own outcome.

Defaults and their public sources (list prices, late 2024; override for your fleet):

* ``ssd_usd_per_gb_month = 0.08``: AWS EBS gp3 (general-purpose SSD) storage price,
  us-east-1, https://aws.amazon.com/ebs/pricing/ .
* ``hdd_usd_per_gb_month = 0.045``: AWS EBS st1 (throughput-optimized HDD), same page.
* ``hdd_iops_per_drive = 170``: random 4 KiB read IOPS of a 7200 rpm enterprise drive
  (Seagate Exos X18 product manual, "Random read/write 4K QD16": 170 IOPS read).
* ``hdd_drive_usd = 300`` and ``hdd_amortization_months = 60``: an 18-20 TB nearline
  drive near $0.015/GB (Backblaze, "Hard Drive Cost Per Gigabyte", 2023) written off
  over five years (Backblaze Drive Stats report drive service lives of 5+ years).
* ``hdd_drive_capacity_bytes = 18e12``: the same drive's capacity, used to size the
  HDD fleet when counting IOPS overload in the simulator.

All costs are in US dollars; sizes in bytes; times in seconds.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from placement.errors import PlacementConfigError

__all__ = [
    "DEFAULT_BUDGETS",
    "FIELD_MEANINGS",
    "FOCUS_BUDGET",
    "GB",
    "SECONDS_PER_MONTH",
    "CostModel",
    "budget_share",
    "budgets_from_percents",
    "budgets_to_percents",
    "focus_budget_index",
    "prices_changed",
    "prices_text",
    "with_prices",
]

#: Seconds in an average month (365.25 days / 12).
SECONDS_PER_MONTH = 365.25 * 86400 / 12
#: Bytes in a (decimal) gigabyte, as prices are quoted.
GB = 1e9
#: SSD budgets compared by default (:mod:`placement.evaluate`, the logs report's savings
#: curve): SSD capacity as a share of the replayed files' peak live bytes (1% to 20%).
#: Defined here, in a module that imports only numpy, so that analyses can use it
#: without importing the model (LightGBM).
DEFAULT_BUDGETS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.10, 0.20)
#: The budget that the placement goals and every one-budget summary (the evaluation's
#: by-kind table, the report's headline and by-kind chart) single out: 5% of peak live bytes.
FOCUS_BUDGET = 0.05

#: What each :class:`CostModel` field is and its unit (reports' tables, ``--price``'s help).
FIELD_MEANINGS: dict[str, tuple[str, str]] = {
    "ssd_usd_per_gb_month": ("SSD capacity", "US dollars per GB-month"),
    "hdd_usd_per_gb_month": ("HDD capacity", "US dollars per GB-month"),
    "hdd_iops_per_drive": ("random operations one HDD serves", "operations per second"),
    "hdd_drive_usd": ("price of one HDD", "US dollars"),
    "hdd_amortization_months": ("HDD written off over", "months"),
    "hdd_drive_capacity_bytes": ("capacity of one HDD", "bytes"),
    "ssd_usd_per_tb_written": ("SSD wear (0: not priced)", "US dollars per TB written"),
    "hdd_bytes_per_s": ("HDD sequential transfer rate", "bytes per second"),
}


def focus_budget_index(budgets: Sequence[float]) -> int:
    """Index in ``budgets`` of the budget a one-budget summary shows: :data:`FOCUS_BUDGET`
    if it is among them, else the middle one (the upper middle of an even count)."""
    if not budgets:
        raise PlacementConfigError("no budgets to choose from: give at least one budget")
    return list(budgets).index(FOCUS_BUDGET) if FOCUS_BUDGET in budgets else len(budgets) // 2


def budgets_from_percents(text: str) -> tuple[float, ...]:
    """``"1, 2%,5"`` (percents of peak live bytes, as CLIs take them) -> ``(0.01, 0.02, 0.05)``.

    Raises
    ------
    PlacementConfigError
        (A :class:`ValueError`.) If an item is not a number in (0, 100], or there is none.
    """
    hint = f"give percents like {budgets_to_percents(DEFAULT_BUDGETS)}"
    items = [item.strip().rstrip("%") for item in text.split(",")]
    out = [budget_share(item, hint=hint) for item in items if item]
    if not out:
        raise PlacementConfigError(f"no budget given; {hint}")
    return tuple(out)


def budget_share(text: str, *, hint: str = "give a percent such as 5") -> float:
    """One SSD budget given as a percent of peak live bytes, ``"5"`` or ``"5%"``, as a
    share of them (``0.05``).

    Parameters
    ----------
    text : str
        A number in (0, 100], percent, with or without a ``%`` sign.
    hint : str
        How to fix a bad ``text``, appended to the error message.

    Returns
    -------
    float
        The budget as a share of peak live bytes, in (0, 1].

    Raises
    ------
    PlacementConfigError
        (A :class:`ValueError`.) If ``text`` is not a number or is not in (0, 100].
    """
    item = text.strip().rstrip("%").strip()
    try:
        value = float(item)
    except ValueError:
        raise PlacementConfigError(f"{item!r} is not a number; {hint}") from None
    if not 0 < value <= 100:
        raise PlacementConfigError(f"{value:g}% is not in (0, 100]; {hint}")
    return value / 100.0


def budgets_to_percents(budgets: tuple[float, ...]) -> str:
    """Inverse of :func:`budgets_from_percents`: ``(0.01, 0.2)`` -> ``"1,20"``."""
    return ",".join(f"{100 * b:g}" for b in budgets)


def _lifetime_error(first: float, n_bad: int, n: int) -> PlacementConfigError:
    """The error for lifetimes that are not seconds > 0 (``first`` of ``n_bad`` of ``n``)."""
    return PlacementConfigError(
        f"lifetime_s={first!r} ({n_bad} of {n} lifetimes) must be "
        "seconds > 0; floor lifetimes at placement.schema.MIN_LIFETIME_S, or pass "
        "None for the long-lived limit"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CostModel:
    """Prices of SSD and HDD; see the module docstring for the rule and the sources.

    Parameters
    ----------
    ssd_usd_per_gb_month : float
        SSD capacity price, US dollars per GB-month.
    hdd_usd_per_gb_month : float
        HDD capacity price, US dollars per GB-month.
    hdd_iops_per_drive : float
        Random operations per second one HDD serves.
    hdd_drive_usd : float
        Price of one HDD, US dollars.
    hdd_amortization_months : float
        Months over which a drive's price is written off.
    hdd_drive_capacity_bytes : float
        Capacity of one HDD, bytes (sizes the fleet for the overload count).
    ssd_usd_per_tb_written : float
        SSD wear, US dollars per TB (1e12 bytes) written; 0 leaves wear out.
    hdd_bytes_per_s : float or None
        HDD sequential transfer rate, bytes per second; ``None`` leaves transfer time out.

    Raises
    ------
    PlacementConfigError
        (A :class:`ValueError`.) If a field is not a finite number, or is not > 0
        (``ssd_usd_per_tb_written``: not >= 0).
    """

    ssd_usd_per_gb_month: float = 0.08
    hdd_usd_per_gb_month: float = 0.045
    hdd_iops_per_drive: float = 170.0
    hdd_drive_usd: float = 300.0
    hdd_amortization_months: float = 60.0
    hdd_drive_capacity_bytes: float = 18e12
    ssd_usd_per_tb_written: float = 0.0
    hdd_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "hdd_bytes_per_s" and value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise PlacementConfigError(f"CostModel {f.name}={value!r} must be a finite number")
            zero_ok = f.name == "ssd_usd_per_tb_written"  # 0 leaves wear out
            if value < 0 or (value == 0 and not zero_ok):
                bound = ">= 0" if zero_ok else "> 0"
                raise PlacementConfigError(f"CostModel {f.name}={value!r} must be {bound}")

    # ---------------------------------------------------------------- unit prices
    @property
    def ssd_usd_per_byte_second(self) -> float:
        """SSD capacity price per byte-second."""
        return self.ssd_usd_per_gb_month / GB / SECONDS_PER_MONTH

    @property
    def hdd_usd_per_byte_second(self) -> float:
        """HDD capacity price per byte-second."""
        return self.hdd_usd_per_gb_month / GB / SECONDS_PER_MONTH

    @property
    def hdd_usd_per_op(self) -> float:
        """Price of one HDD operation: a drive's cost per second over the IOPS it serves."""
        drive_per_second = self.hdd_drive_usd / (self.hdd_amortization_months * SECONDS_PER_MONTH)
        return drive_per_second / self.hdd_iops_per_drive

    @property
    def hdd_usd_per_byte_transferred(self) -> float:
        """Price of the HDD drive time one byte's transfer takes (0 when transfer is not priced)."""
        if self.hdd_bytes_per_s is None:
            return 0.0
        return self.hdd_usd_per_op * self.hdd_iops_per_drive / self.hdd_bytes_per_s

    @property
    def prices_lifetime(self) -> bool:
        """Whether the break-even density depends on a file's lifetime (wear or transfer priced)."""
        return bool(self.ssd_usd_per_tb_written) or self.hdd_bytes_per_s is not None

    def break_even_density(
        self,
        lifetime_s: Any = None,
        *,
        write_bytes_per_byte: float = 1.0,
        read_bytes_per_byte: float = 1.0,
    ) -> Any:
        """Density above which a file saves money on SSD (``d*`` of the module docstring).

        Parameters
        ----------
        lifetime_s : float or array of float, optional
            The file's lifetime, in seconds (> 0; ``inf`` is the long-lived limit).
            ``None`` leaves out the terms paid once per byte (wear, transfer), which is
            exact when neither is priced and the limit of a long-lived file otherwise.
        write_bytes_per_byte : float, keyword-only
            Bytes written per byte stored (default 1: written once).
        read_bytes_per_byte : float, keyword-only
            Bytes read per byte stored (default 1: read back once).

        Returns
        -------
        float or numpy.ndarray
            Break-even density in operations per byte per second; ``0.0`` where the
            HDD's capacity alone costs more than the SSD (every file saves).

        Raises
        ------
        PlacementConfigError
            (A :class:`ValueError`.) If a lifetime is not > 0 (``NaN`` included), or a
            bytes-per-byte ratio is not a number >= 0.
        """
        for name, v in (
            ("write_bytes_per_byte", write_bytes_per_byte),
            ("read_bytes_per_byte", read_bytes_per_byte),
        ):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise PlacementConfigError(f"{name}={v!r} must be a number >= 0")
        a, r = float(write_bytes_per_byte), float(read_bytes_per_byte)
        c_s, c_h = self.ssd_usd_per_byte_second, self.hdd_usd_per_byte_second
        p = self.hdd_usd_per_op
        if lifetime_s is None:
            return c_s / p if c_h < c_s else 0.0
        life = np.asarray(lifetime_s, np.float64)
        if life.ndim == 0:  # one decision: skip the array check's cost
            if not float(life) > 0:  # NaN included
                raise _lifetime_error(float(life), 1, 1)
        else:
            bad = ~(life > 0)  # NaN included
            if bad.any():
                raise _lifetime_error(float(life[bad].flat[0]), int(bad.sum()), life.size)
        w = self.ssd_usd_per_tb_written / 1e12
        q = self.hdd_usd_per_byte_transferred
        with np.errstate(divide="ignore", invalid="ignore"):
            ssd_rate = c_s + a * w / life
            d = (c_s + (a * (w - q) - r * q) / life) / p
        out = np.where(c_h >= ssd_rate, 0.0, np.maximum(d, 0.0))
        return float(out) if out.ndim == 0 else out

    # ---------------------------------------------------------------- per file
    def ssd_cost(self, size_bytes: Any, lifetime_s: Any, write_bytes: Any = 0.0) -> np.ndarray:
        """TCO in US dollars of files on SSD: capacity for their life, plus wear if priced.

        Parameters
        ----------
        size_bytes : array_like
            Largest size of each file, in bytes.
        lifetime_s : array_like
            Seconds from creation to deletion.
        write_bytes : array_like, optional
            Bytes written to each file (priced by ``ssd_usd_per_tb_written``).

        Returns
        -------
        numpy.ndarray
            US dollars per file.
        """
        cost = (
            np.asarray(size_bytes, np.float64)
            * np.asarray(lifetime_s, np.float64)
            * self.ssd_usd_per_byte_second
        )
        if self.ssd_usd_per_tb_written:
            cost = cost + np.asarray(write_bytes, np.float64) * (self.ssd_usd_per_tb_written / 1e12)
        return cost

    def hdd_cost(
        self, size_bytes: Any, lifetime_s: Any, ops: Any, io_bytes: Any = 0.0
    ) -> np.ndarray:
        """TCO in US dollars of files on HDD: max(capacity cost, drive-time cost).

        Parameters
        ----------
        size_bytes : array_like
            Largest size of each file, in bytes.
        lifetime_s : array_like
            Seconds from creation to deletion.
        ops : array_like
            Read and write operations over each file's life (each costs one random access
            of a drive, ``hdd_usd_per_op``).
        io_bytes : array_like, optional
            Bytes read and written (their transfer time is priced when ``hdd_bytes_per_s``
            is set).

        Returns
        -------
        numpy.ndarray
            US dollars per file.
        """
        capacity = (
            np.asarray(size_bytes, np.float64)
            * np.asarray(lifetime_s, np.float64)
            * self.hdd_usd_per_byte_second
        )
        drive_time = np.asarray(ops, np.float64) * self.hdd_usd_per_op
        if self.hdd_bytes_per_s is not None:
            drive_time = drive_time + np.asarray(io_bytes, np.float64) / self.hdd_bytes_per_s * (
                self.hdd_usd_per_op * self.hdd_iops_per_drive
            )
        return np.maximum(capacity, drive_time)

    def saving(
        self,
        size_bytes: Any,
        lifetime_s: Any,
        ops: Any,
        io_bytes: Any = 0.0,
        write_bytes: Any = 0.0,
    ) -> np.ndarray:
        """US dollars saved by putting each file on SSD rather than HDD (may be negative):
        :meth:`hdd_cost` minus :meth:`ssd_cost`, whose parameters (bytes, seconds,
        operations) these are."""
        return self.hdd_cost(size_bytes, lifetime_s, ops, io_bytes) - self.ssd_cost(
            size_bytes, lifetime_s, write_bytes
        )

    def to_dict(self) -> dict[str, float]:
        """Parameters as a JSON-ready mapping."""
        return dataclasses.asdict(self)


def with_prices(items: Iterable[str], base: CostModel | None = None) -> CostModel:
    """``base`` (default :class:`CostModel()`) with some prices changed, given as
    ``"name=value"`` items, as command lines take them.

    Parameters
    ----------
    items : iterable of str
        ``"ssd_usd_per_gb_month=0.10"``: a :class:`CostModel` field (dashes may stand
        for underscores) and a number in its unit; ``hdd_bytes_per_s=none`` leaves
        transfer time out. A later item for the same field wins.
    base : CostModel or None
        The prices the items change.

    Returns
    -------
    CostModel

    Raises
    ------
    PlacementConfigError
        (A :class:`ValueError`.) If an item is not ``name=value``, names no field (the
        closest names are suggested), or its value is not a number the field accepts.
    """
    fields = [f.name for f in dataclasses.fields(CostModel)]
    changes: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise PlacementConfigError(
                f"price {item!r} is not NAME=VALUE; e.g. ssd_usd_per_gb_month=0.10"
            )
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise PlacementConfigError(
                f"price {name!r} is not a cost-model field; {hint}the fields are "
                + ", ".join(fields)
            )
        text = text.strip()
        if name == "hdd_bytes_per_s" and text.lower() in {"none", ""}:
            changes[name] = None
            continue
        try:
            changes[name] = float(text)
        except ValueError:
            unit = FIELD_MEANINGS[name][1] if name in FIELD_MEANINGS else "the field's unit"
            raise PlacementConfigError(
                f"price {name}={text!r} is not a number; give it in {unit}, e.g. "
                f"{name}={getattr(CostModel(), name)}"
            ) from None
    return dataclasses.replace(base or CostModel(), **changes)


def prices_changed(model: CostModel) -> dict[str, float | None]:
    """The fields of ``model`` that differ from the defaults, in field order."""
    default = CostModel()
    return {
        f.name: getattr(model, f.name)
        for f in dataclasses.fields(model)
        if getattr(model, f.name) != getattr(default, f.name)
    }


def prices_text(model: CostModel) -> str:
    """One line naming the prices used: ``"prices: defaults ..."`` or the changed fields."""
    changed = prices_changed(model)
    if not changed:
        return "prices: defaults (list prices, placement.cost)"
    items = [f"{k}={'none' if v is None else f'{v:g}'}" for k, v in changed.items()]
    return "prices: " + ", ".join(items) + "; the rest defaults"
