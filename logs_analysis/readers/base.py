"""What every reader produces: :class:`Chunk` s that load into :class:`ChunkResult` s.

A reader splits a source into chunks (row groups of a Parquet file, byte ranges of a JSON
lines file, one Spark application, one Darshan log). A chunk is small, picklable and
loads on any Dask worker; its result is a table conformed to
:data:`placement.schema.SCHEMA` plus the :class:`~logs_analysis.issues.ReadIssues` met
while reading it. Nothing is read until :meth:`Chunk.load` is called.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from logs_analysis.issues import ReadIssues

__all__ = ["Chunk", "ChunkResult"]


@dataclasses.dataclass
class ChunkResult:
    """Rows of one chunk, in the placement log schema, and what was skipped.

    Attributes
    ----------
    table : pyarrow.Table
        Rows conformed to :data:`placement.schema.SCHEMA` (maybe none); string columns
        may come dictionary-encoded (``dictionary<int32, string>``).
    issues : ReadIssues
        Malformed lines or records skipped while reading.
    source : str
        The file the rows come from.
    first_row : int or None
        Index in ``source`` of the first row (row-oriented inputs), for locating bad rows.
    row_lines : numpy.ndarray or None
        1-based line of each row, relative to ``block_start`` (line-oriented inputs).
    block_start : int or None
        Byte offset of the block ``row_lines`` count from.
    lines : int
        Lines of the block (line-oriented inputs; 0 otherwise).
    labels : list of str or None
        A location of each row when neither rows nor lines fit (e.g. ``"stage 3 task 41"``).
    row_numbers : numpy.ndarray or None
        Index in ``source`` of each row, when the rows are not consecutive from
        ``first_row`` (rows of a damaged part of the file were left out).
    """

    table: pa.Table
    issues: ReadIssues
    source: str
    first_row: int | None = None
    row_lines: np.ndarray | None = None
    block_start: int | None = None
    lines: int = 0
    labels: list[str] | None = None
    row_numbers: np.ndarray | None = None

    def locate(self, i: int) -> tuple[str, int | None]:
        """(location text, block-relative line or None) of row ``i``."""
        if self.row_lines is not None:
            return "", int(self.row_lines[i])
        if self.labels is not None:
            return self.labels[i], None
        if self.row_numbers is not None:
            return f"row {int(self.row_numbers[i])}", None
        if self.first_row is not None:
            return f"row {self.first_row + i}", None
        return f"record {i}", None


@runtime_checkable
class Chunk(Protocol):
    """A piece of a source that loads on its own."""

    @property
    def source(self) -> str:
        """The file (or directory) the chunk reads."""
        ...

    @property
    def estimated_rows(self) -> int:
        """Rows it is expected to yield (exact for Parquet, estimated otherwise), for sampling."""
        ...

    def load(self) -> ChunkResult:
        """Read the chunk. Malformed lines or records go into ``issues``; never raises for them."""
        ...
