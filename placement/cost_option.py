"""``--price NAME=VALUE``: the cost model's prices on the command line.

``dataplane placement evaluate``, ``placement simulate`` and ``dataplane report`` price
SSD and HDD with :class:`placement.cost.CostModel`, whose defaults are public list prices.
A team with its own prices passes them here, one field per ``--price`` (repeatable), in
the field's unit; the JSON outputs hold the prices used under ``cost_model``::

    dataplane placement evaluate LOGS --out eval/ \\
        --price ssd_usd_per_gb_month=0.10 --price hdd_iops_per_drive=200

Kept apart from :mod:`placement.cost` so that the cost model does not import click.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from placement.cost import FIELD_MEANINGS, CostModel, with_prices
from placement.errors import PlacementConfigError

__all__ = ["price_option"]

F = TypeVar("F", bound=Callable[..., Any])


def _parse(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> CostModel:
    try:
        return with_prices(value)
    except PlacementConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def price_option(func: F) -> F:
    """Add ``--price NAME=VALUE`` (repeatable), given to the command as ``cost_model``, a
    :class:`~placement.cost.CostModel`."""
    return click.option(
        "--price",
        "cost_model",
        multiple=True,
        metavar="NAME=VALUE",
        callback=_parse,
        help="Change one price of the cost model, in its unit (repeatable), e.g. "
        "ssd_usd_per_gb_month=0.10 or hdd_iops_per_drive=200. Fields: "
        + "; ".join(f"{name} ({unit})" for name, (_, unit) in FIELD_MEANINGS.items())
        + ". ssd_usd_per_tb_written=0 leaves wear out, hdd_bytes_per_s=none transfer time. "
        'Default: public list prices (README, "Prices").',
    )(func)
