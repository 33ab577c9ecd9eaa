"""Decision latency, model size and predictor memory, and a memory probe that fails."""

from __future__ import annotations

import logging
import subprocess
from typing import Any

import pandas as pd
import pytest

from placement import measure
from placement.features import HistoryStore
from placement.measure import measure_decisions
from placement.model import DensityModel, ModelParams
from tests.placement.logtables import make_log

FAST = ModelParams(n_estimators=20, num_threads=1)


@pytest.fixture(scope="module")
def fitted() -> tuple[DensityModel, pd.DataFrame, HistoryStore]:
    df = make_log(seed=3).to_pandas()
    history = HistoryStore.from_table(df)
    return DensityModel(FAST).fit(df, history), df, history


def test_measures_every_figure(fitted: tuple[DensityModel, pd.DataFrame, HistoryStore]) -> None:
    model, df, history = fitted
    d = measure_decisions(model, df, history, single=50, batch_rows=5000)
    assert d["single_samples"] == 50 and d["batched_rows"] == 5000
    # each figure is its own measurement: no ordering between the two medians is asserted
    assert d["single_model_only_us_p50"] > 0
    assert 0 < d["single_us_p50"] <= d["single_us_p99"]  # quantiles of the same samples
    assert d["batched_per_s"] > 0 and d["batched_per_s_one_thread"] > 0
    assert d["trees"] == 20 and d["model_file_bytes"] > 0
    # a fresh process loaded the model: its RSS is real and it grew
    assert d["predictor_rss_error"] is None
    assert d["predictor_rss_before_bytes"] > 10 * 2**20
    assert d["predictor_rss_delta_bytes"] >= 0
    assert d["predictor_load_python_heap_peak_bytes"] > 0


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (subprocess.TimeoutExpired("python", 120), "TimeoutExpired"),
        (subprocess.CompletedProcess([], 1, "", "Traceback\nImportError: psutil"), "exited with 1"),
        (subprocess.CompletedProcess([], 0, "oops\n", ""), "printed 'oops'"),
        (  # the error is the last line of a traceback
            subprocess.CompletedProcess([], 3, "", "Traceback\nImportError: no psutil\n"),
            "the probe process exited with 3: ImportError: no psutil",
        ),
        (subprocess.CompletedProcess([], 2, "", ""), "the probe process exited with 2: no output"),
        (FileNotFoundError(2, "No such file or directory", "python"), "FileNotFoundError: "),
    ],
)
def test_a_failed_memory_probe_is_reported_not_zero(
    fitted: tuple[DensityModel, pd.DataFrame, HistoryStore],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fault: Any,
    reason: str,
) -> None:
    model, df, history = fitted

    def run(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if isinstance(fault, Exception):
            raise fault
        return fault

    monkeypatch.setattr(measure.subprocess, "run", run)
    with caplog.at_level(logging.WARNING, logger="placement.measure"):
        d = measure_decisions(model, df, history, single=10, batch_rows=1000)
    assert d["predictor_rss_before_bytes"] is None and d["predictor_rss_delta_bytes"] is None
    assert reason in d["predictor_rss_error"]
    assert "predictor memory not measured" in caplog.text and reason in caplog.text
    # the other figures are still measured
    assert d["single_us_p50"] > 0 and d["model_file_bytes"] > 0


def test_a_log_shorter_than_the_sample_times_each_of_its_files_once(
    fitted: tuple[DensityModel, pd.DataFrame, HistoryStore],
) -> None:
    model, df, history = fitted
    d = measure_decisions(model, df.head(4), history, single=10, batch_rows=100)
    assert d["single_samples"] == 4 and d["batched_rows"] == 100
