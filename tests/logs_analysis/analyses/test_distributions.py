"""Distributions of density, lifetime and size read back from the aggregate's histograms,
against the exact values of the rows."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from logs_analysis.aggregate import Aggregate
from logs_analysis.analyses.distributions import (
    QUANTILES,
    distribution_table,
    histogram_series,
)
from logs_analysis.histogram import BIN_WIDTH, LOG_LO, ZERO_BIN, Histogram
from logs_analysis.issues import ReadIssues
from tests.logs_analysis.analyses.conftest import aggregate_table, exact_columns, without_io
from tests.placement.logtables import make_log

#: A quantile read back from the histogram is within a bin (0.02 decades) of the exact one;
#: where neighbouring values are far apart, within the values around it.
SLACK = 0.05


def _within_a_bin(values: np.ndarray, q: float, got: float) -> bool:
    exact = float(np.quantile(values, q))
    if exact == 0:
        return got == 0
    lo, hi = np.quantile(values, [max(q - 0.01, 0.0), min(q + 0.01, 1.0)])
    lo, hi = min(lo, exact), max(hi, exact)
    if lo <= 0:
        return got == 0 or math.log10(got) <= math.log10(hi) + SLACK
    return math.log10(lo) - SLACK <= math.log10(got) <= math.log10(hi) + SLACK


@pytest.mark.parametrize(
    ("variable", "column"),
    [("density", "density"), ("lifetime", "life"), ("size", "size_bytes")],
)
def test_quantiles_of_each_pipeline_match_the_rows(
    log_rows: pa.Table, log_aggregate: Any, variable: str, column: str
) -> None:
    df = exact_columns(log_rows)
    table = distribution_table(log_aggregate, variable, "pipeline", top=None)
    assert sorted(d.key[0] for d in table) == sorted(df["pipeline"].unique())
    for d in table:
        values = df.loc[df["pipeline"] == d.key[0], column].to_numpy(np.float64)
        assert set(d.quantiles) == {f"p{100 * q:g}" for q in QUANTILES}
        for q in QUANTILES:
            got = d.quantiles[f"p{100 * q:g}"]
            assert _within_a_bin(values, q, got), (variable, d.key, q, got)
        assert list(d.quantiles.values()) == sorted(d.quantiles.values())


def test_counts_and_shares_are_exact(log_rows: pa.Table, log_aggregate: Any) -> None:
    df = exact_columns(log_rows)
    table = distribution_table(log_aggregate, "density", "stage", top=None)
    groups = df.groupby(["pipeline", "stage"])
    assert len(table) == groups.ngroups == 9
    for d in table:
        part = groups.get_group(tuple(d.key))
        assert d.rows == len(part)
        assert d.bytes == part["size_bytes"].sum()
        assert d.ops == part["ops"].sum()
        assert d.share_rows == pytest.approx(len(part) / len(df))
        assert d.share_bytes == pytest.approx(part["size_bytes"].sum() / df["size_bytes"].sum())
        assert d.share_ops == pytest.approx(part["ops"].sum() / df["ops"].sum())
    assert sum(d.share_rows for d in table) == pytest.approx(1.0)
    # shape variables carry no operations
    (size,) = distribution_table(log_aggregate, "size", "overall")
    assert size.ops is None and size.share_ops is None and size.rows == len(df)


def test_largest_keys_first_and_top(tmp_path: Path) -> None:
    rows = make_log(pipelines=3, runs=1, files_per_stage=6, seed=2)
    # pipe1 gets the most files: its rows again under other file ids
    extra = rows.filter(pa.compute.equal(rows["pipeline"], "pipe1"))
    ids = pa.array([f"{f}-again" for f in extra["file_id"].to_pylist()])
    extra = extra.set_column(0, rows.schema.field("file_id"), ids)
    agg = aggregate_table(pa.concat_tables([rows, extra]), tmp_path)
    table = distribution_table(agg, "size", "pipeline", top=None)
    assert [d.key for d in table][0] == ["pipe1"] and table[0].rows == 2 * extra.num_rows
    assert [d.rows for d in table] == sorted((d.rows for d in table), reverse=True)
    assert [d.key for d in distribution_table(agg, "size", "pipeline", top=1)] == [["pipe1"]]
    (overall,) = distribution_table(agg, "size", "overall")
    assert overall.key == [] and overall.share_rows == 1.0


def test_decades_span_the_files_with_io(log_rows: pa.Table, log_aggregate: Any) -> None:
    df = exact_columns(log_rows)
    (overall,) = distribution_table(log_aggregate, "density", "overall")
    assert (df["density"] == 0).mean() > 0.1  # the files without I/O
    assert overall.quantiles["p1"] == 0.0  # among them
    positive = df.loc[df["density"] > 0, "density"].to_numpy()
    want = math.log10(np.quantile(positive, 0.99) / np.quantile(positive, 0.01))
    assert overall.decades == pytest.approx(want, abs=0.1)
    # with the files without I/O counted, p1 would be 0 and the span infinite
    assert math.isfinite(overall.decades) and overall.decades > 1


def test_decades_undefined_with_fewer_than_two_files_with_io(tmp_path: Path) -> None:
    rows = make_log(pipelines=1, runs=1, files_per_stage=4, seed=3)
    rows = without_io(rows, every=1)  # no file read or written...
    ops = rows["read_ops"].to_numpy().copy()
    ops[5] = 3  # ...but one
    rows = rows.set_column(rows.schema.get_field_index("read_ops"), "read_ops", pa.array(ops))
    agg = aggregate_table(rows, tmp_path)
    (overall,) = distribution_table(agg, "density", "overall")
    assert math.isnan(overall.decades)
    assert overall.to_dict()["decades"] is None  # strict JSON
    assert overall.quantiles["p50"] == 0.0 and overall.quantiles["p99"] > 0
    assert overall.ops == 3


def test_histogram_series_holds_the_files_with_a_value(
    log_rows: pa.Table, log_aggregate: Any
) -> None:
    df = exact_columns(log_rows)
    edges, counts = histogram_series(log_aggregate, "density", "overall")
    assert counts.sum() == (df["density"] > 0).sum()  # the zero bin is left out
    assert np.all(np.diff(edges) > 0)
    # each file's log10 density falls in a bin whose lower edge is listed
    logs = np.log10(df.loc[df["density"] > 0, "density"].to_numpy())
    found = np.searchsorted(edges, logs, side="right") - 1
    assert np.all(found >= 0) and np.all(logs - edges[found] < 0.02 + 1e-9)
    assert np.bincount(found, minlength=len(edges)).tolist() == counts.astype(int).tolist()
    edges_b, bytes_ = histogram_series(log_aggregate, "size", "pipeline", "pipe0", weight="bytes")
    sizes = df.loc[df["pipeline"] == "pipe0", "size_bytes"]
    assert bytes_.sum() == sizes.sum()
    assert edges_b[0] <= math.log10(sizes.min()) < edges_b[0] + 0.02


def test_to_dict_leaves_out_infinite_spans() -> None:
    from logs_analysis.analyses.distributions import GroupDistribution

    d = GroupDistribution(["a"], 1, 10, None, {"p50": 1.0}, math.inf, 1.0, 1.0, None)
    assert d.to_dict() == {
        "key": ["a"],
        "rows": 1,
        "bytes": 10,
        "ops": None,
        "quantiles": {"p50": 1.0},
        "decades": None,
        "share_rows": 1.0,
        "share_bytes": 1.0,
        "share_ops": None,
    }


def test_histogram_series_keeps_the_lowest_bin_and_leaves_out_zeros() -> None:
    """Bin 0 holds the values at the bottom of the range (clipped ones too); only the zero
    bin is left out."""
    frame = pd.DataFrame(
        {"key": [""] * 3, "bin": [ZERO_BIN, 0, 7], "n": [4, 2, 1], "bytes": [1.0, 2.0, 3.0]}
    )
    agg = Aggregate(
        histograms={("density", "overall"): Histogram("density", (), frame)},
        totals={"rows": 7.0},
        runs=pd.DataFrame(),
        sources={},
        sample=pd.DataFrame(),
        sample_method="all rows",
        issues=ReadIssues(),
        rows_read=7,
        chunks=1,
        wall_s=0.0,
    )
    edges, counts = histogram_series(agg, "density", "overall")
    assert edges.tolist() == pytest.approx([LOG_LO, LOG_LO + 7 * BIN_WIDTH])
    assert counts.tolist() == [2.0, 1.0]
