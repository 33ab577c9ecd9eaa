"""Small placement logs for the analyses: rows of :func:`tests.placement.logtables.make_log`
(three pipelines, two runs each, three stages, spill and shuffle files), some of them
files never read or written, aggregated from a Parquet file as the report does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.placement.logtables import make_log


def without_io(table: pa.Table, every: int) -> pa.Table:
    """``table`` with every ``every``-th file never read or written."""
    for name in ("read_ops", "write_ops", "read_bytes", "write_bytes"):
        values = table[name].to_numpy().copy()
        values[::every] = 0
        i = table.schema.get_field_index(name)
        table = table.set_column(i, table.schema.field(name), pa.array(values))
    return table


def aggregate_table(table: pa.Table, folder: Path) -> object:
    """The aggregate of ``table`` written as one Parquet log in ``folder``."""
    from logs_analysis.aggregate import AggregateConfig, aggregate
    from logs_analysis.formats import discover
    from logs_analysis.readers import plan

    path = folder / "log.parquet"
    pq.write_table(table, path, row_group_size=64)
    sources, issues = discover([path])
    chunks, more = plan(sources)
    issues.merge(more)
    return aggregate(chunks, AggregateConfig(scheduler="sync"), issues=issues, paths=[path])


def exact_columns(table: pa.Table) -> pd.DataFrame:
    """The rows with ``ops``, ``life`` (floored), ``byte_s`` and ``density`` computed here
    from the placement schema's definition."""
    from placement.schema import MIN_LIFETIME_S, MIN_SIZE_BYTES

    df = table.to_pandas()
    df["ops"] = (df["read_ops"] + df["write_ops"]).astype(np.float64)
    df["life"] = np.maximum(df["deleted_at"] - df["created_at"], MIN_LIFETIME_S)
    df["byte_s"] = np.maximum(df["size_bytes"].astype(np.float64), MIN_SIZE_BYTES) * df["life"]
    df["density"] = df["ops"] / df["byte_s"]
    return df


@pytest.fixture(scope="module")
def log_rows() -> pa.Table:
    """270 rows of three pipelines; every 9th file has no I/O (density 0)."""
    return without_io(make_log(pipelines=3, runs=2, files_per_stage=15, seed=5), every=9)


@pytest.fixture(scope="module")
def log_aggregate(log_rows: pa.Table, tmp_path_factory: pytest.TempPathFactory) -> object:
    return aggregate_table(log_rows, tmp_path_factory.mktemp("analyses"))
