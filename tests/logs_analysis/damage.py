"""Damage injected into real Parquet files, for the tests of damaged logs."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

__all__ = ["damage_row_group"]


def damage_row_group(path: Path, row_group: int, column: str = "size_bytes") -> None:
    """Overwrite the pages of one column chunk of one row group, so that row group alone no
    longer decodes (pyarrow: "Couldn't deserialize thrift").

    Parameters
    ----------
    path : Path
        A Parquet file, changed in place.
    row_group : int
        Index of the row group to damage.
    column : str
        The column whose chunk in that row group is overwritten.
    """
    meta = pq.ParquetFile(path).metadata.row_group(row_group)
    chunk = next(
        meta.column(j) for j in range(meta.num_columns) if meta.column(j).path_in_schema == column
    )
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
