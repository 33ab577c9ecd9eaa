"""What one placement decision costs: latency (single and batched), model size, memory.

:func:`measure_decisions` times the live path a worker takes for each new file (features
from the request and the file's history, then one model call) and the batched path, and
measures the model's footprint. :func:`placement.evaluate.evaluate` calls it with
``measure=True``; ``dataplane placement evaluate`` prints it and ``benchmarks/placement.py``
tabulates it against the issue's goals.

The predictor's memory is measured in a fresh Python process (psutil), because the RSS of
the measuring process already holds the evaluation's tables and models. If that process
cannot run, the figures are ``None`` and ``predictor_rss_error`` says why: a missing
figure, never a zero that reads as "no memory".
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any

import numpy as np
import pandas as pd

from placement.features import HistoryStore, build_features, features_from_request
from placement.model import DensityModel

__all__ = ["measure_decisions"]

logger = logging.getLogger(__name__)

#: Run in a fresh interpreter: RSS (bytes) with LightGBM imported, then after loading the
#: model in argv[1] and predicting 10k rows in a batch and 1k one by one.
_RSS_PROBE = """
import sys, numpy as np, psutil, lightgbm
from placement.model import DensityModel
from placement.features import FEATURE_COLUMNS
p = psutil.Process()
before = p.memory_info().rss
m = DensityModel.load(sys.argv[1])
x = np.random.default_rng(0).normal(size=(10000, len(FEATURE_COLUMNS)))
m.predict(x)
for row in x[:1000]:
    m.predict_one(row)
print(before, p.memory_info().rss)
"""


def _fresh_process_rss(model_dir: str) -> tuple[int, int] | str:
    """RSS (bytes) of a fresh process before and after it loads and uses the model.

    Returns
    -------
    (int, int) or str
        ``(before, after)``, or why the probe failed.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RSS_PROBE, model_dir],
            capture_output=True,
            text=True,
            check=False,  # the exit status is read below, to say why
            timeout=120,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the probe process exited with {done.returncode}: {last}"
    try:
        before, after = (int(v) for v in done.stdout.split())
    except ValueError:
        return f"the probe process printed {done.stdout.strip()!r}, not two byte counts"
    return before, after


def measure_decisions(
    model: DensityModel,
    df: pd.DataFrame,
    history: HistoryStore,
    *,
    single: int = 2000,
    batch_rows: int = 200_000,
) -> dict[str, Any]:
    """Decision latency (single and batched), model file size and predictor memory.

    * single: :func:`features_from_request` + :meth:`DensityModel.predict_one` per
      file, median and p99 over ``single`` files, in microseconds; also the model call
      alone.
    * batched: :meth:`DensityModel.predict` over ``batch_rows`` feature rows (tiled),
      files per second (every thread, and one thread).
    * size: bytes of the saved model directory.
    * memory: RSS growth of a fresh process (LightGBM already imported) that loads the
      model and predicts (psutil), and the peak Python-heap allocation of loading it
      (tracemalloc), in bytes. If the fresh process fails, the RSS figures are ``None``,
      ``predictor_rss_error`` says why, and a warning is logged.
    """

    rows = df.head(single).to_dict("records")
    # single path
    lat_full: list[float] = []
    lat_model: list[float] = []
    for row in rows:
        t0 = time.perf_counter_ns()
        x = features_from_request(row, history)
        t1 = time.perf_counter_ns()
        model.predict_one(x)
        t2 = time.perf_counter_ns()
        lat_full.append((t2 - t0) / 1e3)
        lat_model.append((t2 - t1) / 1e3)
    feats = build_features(df, history).to_numpy(np.float64)
    reps = -(-batch_rows // max(len(feats), 1))  # enough copies to fill batch_rows
    big = np.tile(feats, (reps, 1))[:batch_rows]
    model.predict(big[:1000])  # warm
    s0 = time.perf_counter()
    model.predict(big)
    batch_all = len(big) / (time.perf_counter() - s0)
    s0 = time.perf_counter()
    model.predict(big, num_threads=1)
    batch_one = len(big) / (time.perf_counter() - s0)
    with tempfile.TemporaryDirectory() as tmp:
        model.save(tmp)
        size = model.file_bytes
        tracemalloc.start()
        loaded = DensityModel.load(tmp)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss = _fresh_process_rss(tmp)
    if isinstance(rss, str):
        logger.warning("predictor memory not measured: %s", rss)
    return {
        "single_us_p50": float(np.percentile(lat_full, 50)),
        "single_us_p99": float(np.percentile(lat_full, 99)),
        "single_model_only_us_p50": float(np.percentile(lat_model, 50)),
        "single_model_only_us_p99": float(np.percentile(lat_model, 99)),
        "single_samples": len(lat_full),
        "batched_per_s": batch_all,
        "batched_per_s_one_thread": batch_one,
        "batched_rows": len(big),
        "model_file_bytes": size,
        "trees": loaded.booster.num_trees(),
        "predictor_rss_before_bytes": None if isinstance(rss, str) else rss[0],
        "predictor_rss_delta_bytes": None if isinstance(rss, str) else max(0, rss[1] - rss[0]),
        "predictor_rss_error": rss if isinstance(rss, str) else None,
        "predictor_load_python_heap_peak_bytes": traced_peak,
    }
