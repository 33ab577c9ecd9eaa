"""Skew: the share of operations the densest shares of bytes (and byte-seconds) carry,
against a per-file sort of the rows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from logs_analysis.aggregate import DENSITY_GROUPINGS, Aggregate
from logs_analysis.analyses.skew import SHARES, skew, skew_by, skew_of
from logs_analysis.histogram import Histogram
from logs_analysis.issues import ReadIssues
from tests.logs_analysis.analyses.conftest import exact_columns


def _exact(df: pd.DataFrame, capacity: str, share: float) -> float:
    """Operations carried by the densest ``share`` of ``capacity``, files sorted one by one
    (a file at the boundary counted in proportion)."""
    d = df.sort_values("density", ascending=False, kind="stable")
    cap = np.r_[0.0, np.cumsum(d[capacity].to_numpy(np.float64))]
    ops = np.r_[0.0, np.cumsum(d["ops"].to_numpy(np.float64))]
    return float(np.interp(share * cap[-1], cap, ops) / ops[-1])


def test_skew_matches_a_sort_of_the_files(log_rows: pa.Table, log_aggregate: Any) -> None:
    df = exact_columns(log_rows)
    df["bytes"] = df["size_bytes"].astype(np.float64)
    s = skew(log_aggregate)
    assert set(s.by_bytes) == set(s.by_byte_seconds) == {f"{100 * x:g}%" for x in SHARES}
    for share in SHARES:
        key = f"{100 * share:g}%"
        assert s.by_bytes[key] == pytest.approx(_exact(df, "bytes", share), abs=0.02), key
        assert s.by_byte_seconds[key] == pytest.approx(_exact(df, "byte_s", share), abs=0.02), key
    # the densest bytes carry more than their share of the operations
    assert s.by_bytes["5%"] > s.by_bytes["1%"] > 0.01
    assert s.to_dict() == {"by_bytes": s.by_bytes, "by_byte_seconds": s.by_byte_seconds}


def test_curve_runs_from_nothing_to_everything(log_aggregate: Any) -> None:
    curve = skew(log_aggregate).curve
    x, y = np.asarray(curve["x"]), np.asarray(curve["y"])
    assert x[0] == y[0] == 0 and x[-1] == pytest.approx(1) and y[-1] == pytest.approx(1)
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) >= 0)
    # one point a density bin (few enough not to be thinned): the skew is read off the curve
    assert len(x) < 400
    s = skew(log_aggregate)
    for share in SHARES:
        assert float(np.interp(share, x, y)) == pytest.approx(s.by_bytes[f"{100 * share:g}%"])


def test_skew_of_each_pipeline(log_rows: pa.Table, log_aggregate: Any) -> None:
    df = exact_columns(log_rows)
    df["bytes"] = df["size_bytes"].astype(np.float64)
    by = skew_by(log_aggregate, "pipeline")
    assert sorted(by) == sorted(df["pipeline"].unique())
    for name, result in by.items():
        part = df[df["pipeline"] == name]
        for share in SHARES:
            key = f"{100 * share:g}%"
            want = _exact(part, "bytes", share)
            assert result["by_bytes"][key] == pytest.approx(want, abs=0.02), (name, key)
    assert list(skew_by(log_aggregate, "pipeline", top=2)) == list(by)[:2]


def _frame(rows: list[tuple[int, float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["bin", "bytes", "ops", "byte_s"])


def test_the_boundary_bin_is_split_in_proportion() -> None:
    # densest bin: 2% of bytes, 40% of operations; then 8% of bytes with 40%; then the rest
    frame = _frame([(1500, 2.0, 40.0, 1.0), (1400, 8.0, 40.0, 1.0), (1000, 90.0, 20.0, 98.0)])
    s = skew_of(frame)
    assert s.by_bytes["1%"] == pytest.approx(0.20)  # half of the densest bin
    assert s.by_bytes["5%"] == pytest.approx(0.40 + 0.40 * 3 / 8)
    assert s.by_byte_seconds["1%"] == pytest.approx(0.40)  # the densest bin's byte-second
    assert s.by_byte_seconds["5%"] == pytest.approx(0.80 + 0.20 * 3 / 98)
    # rows of the same bin from several chunks are one bin; the order given does not matter
    split = _frame(
        [(1000, 90.0, 20.0, 98.0), (1500, 1.0, 30.0, 0.5), (1400, 8.0, 40.0, 1.0)]
        + [(1500, 1.0, 10.0, 0.5)]
    )
    again = skew_of(split)
    assert again.by_bytes == pytest.approx(s.by_bytes)
    assert again.by_byte_seconds == pytest.approx(s.by_byte_seconds)


def test_even_io_carries_its_share() -> None:
    s = skew_of(_frame([(1200, 500.0, 50.0, 500.0)]), shares=(0.01, 0.3))
    assert s.by_bytes == pytest.approx({"1%": 0.01, "30%": 0.3})


def test_no_operations_or_no_bytes_is_undefined() -> None:
    s = skew_of(_frame([(-1, 100.0, 0.0, 10.0), (-1, 50.0, 0.0, 5.0)]))
    assert all(math.isnan(v) for v in s.by_bytes.values())
    assert s.curve["y"] == [0.0, 0.0]
    empty = skew_of(_frame([(1200, 0.0, 5.0, 0.0)]))
    assert all(math.isnan(v) for v in empty.by_bytes.values())
    assert empty.curve["x"] == [0.0]


def _aggregate_of(frame: pd.DataFrame, grouping: str) -> Aggregate:
    """An aggregate holding only the density histogram ``frame`` of ``grouping``."""
    hist = Histogram("density", DENSITY_GROUPINGS[grouping], frame)
    return Aggregate(
        histograms={("density", grouping): hist},
        totals={"rows": float(frame["n"].sum())},
        runs=pd.DataFrame(),
        sources={},
        sample=pd.DataFrame(),
        sample_method="all rows",
        issues=ReadIssues(),
        rows_read=int(frame["n"].sum()),
        chunks=1,
        wall_s=0.0,
    )


def test_skew_by_lists_the_keys_with_most_files_first() -> None:
    frame = pd.DataFrame(
        {
            "key": ["few", "most", "some", "most"],
            "bin": [1000, 1000, 1100, 1200],
            "n": [1, 3, 3, 2],
            "bytes": [10.0, 10.0, 10.0, 10.0],
            "ops": [1.0, 1.0, 1.0, 1.0],
            "byte_s": [10.0, 10.0, 10.0, 10.0],
        }
    )
    agg = _aggregate_of(frame, "pipeline")
    assert list(skew_by(agg, "pipeline")) == ["most", "some", "few"]
    assert list(skew_by(agg, "pipeline", top=1)) == ["most"]


def test_a_curve_of_many_bins_is_thinned_to_at_most_400_points() -> None:
    bins = np.arange(1000)
    frame = _frame([(int(b), 1.0, float(b + 1), 1.0) for b in bins])
    x, y = (np.asarray(v) for v in skew_of(frame).curve.values())
    assert 300 < len(x) <= 400 and len(x) == len(y)
    assert x[0] == y[0] == 0 and x[-1] == pytest.approx(1) and y[-1] == pytest.approx(1)
    assert np.all(np.diff(x) > 0) and np.all(np.diff(y) > 0)
