"""Plain-text tables for the commands' and benchmarks' output.

One helper so that every table the project prints is laid out the same way: a header,
a rule of dashes, text columns on the left, numbers on the right (``tabulate``'s
``simple`` format; cells are printed as given, never re-parsed as numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

__all__ = ["text_table"]


def text_table(head: Sequence[str], rows: Sequence[Sequence[Any]], *, left: int = 1) -> str:
    """``rows`` under ``head`` as aligned text: the first ``left`` columns left-aligned,
    the others right-aligned."""
    align = ("left",) * left + ("right",) * (len(head) - left)
    cells = [[str(c) for c in row] for row in rows]
    return tabulate(
        cells, headers=list(head), tablefmt="simple", colalign=align, disable_numparse=True
    )
