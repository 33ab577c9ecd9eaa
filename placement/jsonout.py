"""Strict JSON for the placement commands' output.

JSON has no ``NaN`` or ``Infinity``; Python's :mod:`json` writes them anyway unless told
not to, and most readers then refuse the file. The ``train``, ``evaluate`` and
``simulate`` commands write their JSON through :func:`dumps`, which writes every
non-finite float as ``null`` and refuses (``allow_nan=False``) anything that slipped
through. A ``null`` where a number is expected therefore means the value is undefined
(a ratio of nothing to nothing, a rank correlation of too few files) or unbounded
(something against nothing).

Each command's JSON says when it was made: :func:`utc_timestamp`.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps", "json_safe", "overlap_json", "utc_timestamp"]


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (``nan``, ``inf``, ``-inf``) as ``None``.

    Dicts, lists and tuples are copied recursively (tuples as lists); NumPy scalars and
    arrays become Python numbers and lists, enums their values, paths strings. Anything
    else is returned as it is, for :func:`json.dumps` to take or refuse.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if isinstance(value, enum.Enum):
        return json_safe(value.value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    tolist = getattr(value, "tolist", None)  # NumPy scalars and arrays
    if callable(tolist) and type(value).__module__.startswith("numpy"):
        return json_safe(tolist())
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """:func:`json.dumps` of :func:`json_safe` of ``value``, with ``allow_nan=False``.

    Keyword arguments go to :func:`json.dumps` (``indent``, ``default`` for types
    :func:`json_safe` leaves alone).

    Raises
    ------
    ValueError
        Never for non-finite floats of the standard types (they are ``null``); only if a
        ``default`` returns one.
    """
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)


def overlap_json(overlap: float | None) -> float | str | None:
    """An ``overlap`` setting (runs replayed at a time) as the JSON writes it: ``inf``
    (every run at once) as the string ``"inf"``, so it is not taken for ``null``."""
    return "inf" if overlap is not None and math.isinf(overlap) else overlap


def utc_timestamp() -> str:
    """The time now as ISO 8601 in UTC, to the second: ``"2025-01-31T12:00:00+00:00"``."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
