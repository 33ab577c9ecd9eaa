"""Log-scale histograms: bins and their edges, values beyond the range, quantiles read back."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from logs_analysis.histogram import (
    BIN_WIDTH,
    LOG_LO,
    N_BINS,
    ZERO_BIN,
    Histogram,
    bin_lower,
    bin_of,
    outside_range,
    quantiles_from_counts,
)


def test_the_range_holds_its_lower_edge_but_not_its_upper_edge() -> None:
    """The range is ``[1e-30, 1e19)``: its lower edge is inside, its upper edge outside."""
    assert outside_range(np.array([1e-30])) == 0
    assert outside_range(np.array([1e19])) == 1
    assert outside_range(np.array([0.0, -1.0, 1e-30, 1e19, 1e-31, np.inf])) == 3


def test_values_beyond_the_range_go_to_the_nearest_end_bin() -> None:
    bins = bin_of(np.array([1e-31, 1e-30, 9.99e18, 1e19, 1e25, np.inf]))
    assert bins.tolist() == [0, 0, N_BINS - 1, N_BINS - 1, N_BINS - 1, N_BINS - 1]
    assert bin_of(np.array([0.0, -5.0])).tolist() == [ZERO_BIN, ZERO_BIN]


def test_bin_lower_is_the_lower_edge_of_the_bin_a_value_falls_in() -> None:
    values = np.array([1.0, 1.04, 1.05, 3e6])
    edges = bin_lower(bin_of(values))
    assert np.all(edges <= np.log10(values)) and np.all(np.log10(values) < edges + BIN_WIDTH)
    # 1.0 lies on the lower edge of bin (0 - LOG_LO) / BIN_WIDTH
    one = round(-LOG_LO / BIN_WIDTH)
    assert bin_lower(np.array([ZERO_BIN, 0, one])).tolist() == pytest.approx(
        [-math.inf, LOG_LO, 0.0]
    )


def test_a_quantile_interpolates_within_its_bin_from_the_first_bin() -> None:
    # 4 values in bin 100: the 25% quantile is a quarter of the way across it
    (q,) = quantiles_from_counts(np.array([100]), np.array([4]), [0.25])
    assert q == pytest.approx(LOG_LO + 100.25 * BIN_WIDTH)


def test_quantiles_do_not_depend_on_the_order_of_the_bins() -> None:
    # sorted: bin 100 holds 3 values, bin 200 one; the median is 2/3 across bin 100
    (q,) = quantiles_from_counts(np.array([200, 100]), np.array([1, 3]), [0.5])
    assert q == pytest.approx(LOG_LO + (100 + 2 / 3) * BIN_WIDTH)


def test_a_quantile_on_the_edge_of_two_bins_is_the_top_of_the_lower_one() -> None:
    """Half the values lie at or below the top of bin 100, so that is the median (the
    smallest value with at least half of the values at or below it)."""
    (q,) = quantiles_from_counts(np.array([100, 300]), np.array([2, 2]), [0.5])
    assert q == pytest.approx(LOG_LO + 101 * BIN_WIDTH)
    (zero,) = quantiles_from_counts(np.array([ZERO_BIN, 300]), np.array([2, 2]), [0.5])
    assert zero == -math.inf


def test_quantiles_of_an_empty_histogram_are_undefined() -> None:
    assert all(math.isnan(q) for q in quantiles_from_counts(np.array([5]), np.array([0]), [0.5]))
    assert all(math.isnan(q) for q in quantiles_from_counts(np.array([]), np.array([]), [0.5]))


def test_keys_are_listed_largest_first() -> None:
    frame = pd.DataFrame(
        {"key": ["small", "large", "middle", "large"], "bin": [1, 1, 2, 3], "n": [1, 2, 2, 1]}
    )
    assert Histogram("size", ("pipeline",), frame).keys() == ["large", "middle", "small"]
