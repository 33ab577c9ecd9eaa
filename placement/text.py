"""Plain-text tables for the commands' and benchmarks' output.

One helper so that every table the project prints is laid out the same way: a header,
a rule of dashes, text columns on the left, numbers on the right (``tabulate``'s
``simple`` format; cells are printed as given, never re-parsed as numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

__all__ = ["NOT_A_NUMBER", "number_text", "text_table"]

#: How :func:`number_text` writes a number that is undefined or unbounded.
NOT_A_NUMBER = "n/a"


def text_table(head: Sequence[str], rows: Sequence[Sequence[Any]], *, left: int = 1) -> str:
    """``rows`` under ``head`` as aligned text: the first ``left`` columns left-aligned,
    the others right-aligned."""
    align = ("left",) * left + ("right",) * (len(head) - left)
    cells = [[str(c) for c in row] for row in rows]
    return tabulate(
        cells, headers=list(head), tablefmt="simple", colalign=align, disable_numparse=True
    )


def number_text(value: float, spec: str = "", *, scale: float = 1.0, suffix: str = "") -> str:
    """``scale * value`` formatted by ``spec`` and followed by ``suffix`` (``"87.6%"``,
    ``"1.02x"``), or ``"n/a"`` when it is not finite: a ratio of nothing to nothing, or of
    something to nothing."""
    if not math.isfinite(value):
        return NOT_A_NUMBER
    return f"{scale * value:{spec}}{suffix}"
