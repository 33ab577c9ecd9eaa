"""Cross-validated density prediction on small placement logs whose density follows a
known rule (stage sets the lifetime, shuffle files have more operations)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from scipy.stats import spearmanr

from logs_analysis.analyses import Unavailable
from logs_analysis.analyses.predictability import (
    MIN_ROWS,
    PredictabilityConfig,
    PredictabilityResult,
    predictability,
)
from logs_analysis.errors import AnalysisConfigError
from tests.logs_analysis.analyses.conftest import without_io
from tests.placement.logtables import make_log

FAST = PredictabilityConfig(n_estimators=40)


def _log_density(df: pd.DataFrame) -> np.ndarray:
    """log10 operations per byte per second; files without I/O at the schema's floor."""
    from placement.schema import LOG_DENSITY_FLOOR, MIN_LIFETIME_S, MIN_SIZE_BYTES

    ops = (df["read_ops"] + df["write_ops"]).to_numpy(np.float64)
    size = np.maximum(df["size_bytes"].to_numpy(np.float64), MIN_SIZE_BYTES)
    life = np.maximum((df["deleted_at"] - df["created_at"]).to_numpy(np.float64), MIN_LIFETIME_S)
    with np.errstate(divide="ignore"):
        return np.maximum(np.log10(ops / (size * life)), LOG_DENSITY_FLOOR)


def _rank(a: np.ndarray, b: np.ndarray) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[ok], b[ok]).statistic)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    """Three pipelines of three runs (405 files), every 10th never read or written."""
    return without_io(make_log(pipelines=3, runs=3, files_per_stage=15, seed=7), 10).to_pandas()


@pytest.fixture(scope="module")
def result(rows: pd.DataFrame) -> PredictabilityResult:
    out = predictability(rows, FAST)
    assert isinstance(out, PredictabilityResult), out
    return out


def test_pipelines_are_held_out_and_every_row_predicted(
    rows: pd.DataFrame, result: PredictabilityResult
) -> None:
    assert result.split == "pipeline" and result.folds == 3
    assert result.rows == len(result.table) == len(rows)
    assert np.isfinite(result.predictions).all()
    # the target is the placement schema's density, recomputed here
    truth = _log_density(result.table)
    np.testing.assert_allclose(result.true_log_density, truth)
    # files without I/O rank below every other, at the floor
    from placement.schema import LOG_DENSITY_FLOOR

    table = result.table
    idle = (table["read_ops"] + table["write_ops"]).to_numpy() == 0
    assert idle.sum() == len(rows) // 10 + 1
    assert (result.true_log_density[idle] == LOG_DENSITY_FLOOR).all()
    assert (result.true_log_density[~idle] > LOG_DENSITY_FLOOR).all()


def test_rank_correlations_are_those_of_the_predictions(result: PredictabilityResult) -> None:
    table = result.table
    t = _log_density(table)
    learned = _rank(result.predictions, t)
    assert result.spearman["lightgbm"] == pytest.approx(learned, abs=1e-9)
    # the rule is learnable from another pipeline's files: far above chance
    assert learned > 0.4
    # smaller files first: the sizes the logs declare at creation
    declared = -np.log10(table["expected_size_bytes"].to_numpy(np.float64))
    assert result.spearman["small-files-first"] == pytest.approx(_rank(declared, t), abs=1e-9)
    assert result.spearman["stage-history"] == pytest.approx(
        _rank(result.stage_history, t), abs=1e-9
    )
    assert result.notes == []
    for name in ("pipe0", "pipe1", "pipe2"):
        mine = (table["pipeline"] == name).to_numpy()
        assert result.spearman_by_pipeline[name] == pytest.approx(
            _rank(result.predictions[mine], t[mine]), abs=1e-9
        )


def test_importances_are_shares(result: PredictabilityResult) -> None:
    shares = list(result.feature_importances.values())
    assert sum(shares) == pytest.approx(1.0)
    assert shares == sorted(shares, reverse=True) and min(shares) >= 0
    d = result.to_dict()
    assert d["rows"] == result.rows and d["split"] == "pipeline"
    assert set(d["spearman"]) == {"lightgbm", "stage-history", "small-files-first"}


def test_seeded_and_repeatable(rows: pd.DataFrame, result: PredictabilityResult) -> None:
    again = predictability(rows, FAST)
    assert isinstance(again, PredictabilityResult)
    np.testing.assert_array_equal(again.predictions, result.predictions)


def test_one_pipeline_holds_out_runs_and_one_run_rows() -> None:
    one = make_log(pipelines=1, runs=3, files_per_stage=20, seed=1)
    out = predictability(one.to_pandas(), FAST)
    assert isinstance(out, PredictabilityResult)
    assert out.split == "run" and out.folds == 3
    run = one.filter(pc.equal(one["run_id"], "pipe0-run0")).to_pandas()
    out = predictability(run, FAST)
    assert isinstance(out, PredictabilityResult)
    assert out.split == "row" and out.folds == FAST.folds and out.rows == len(run)


def test_without_declared_sizes_the_baseline_uses_final_sizes() -> None:
    table = make_log(pipelines=2, runs=2, files_per_stage=15, seed=4)
    i = table.schema.get_field_index("expected_size_bytes")
    table = table.set_column(i, table.schema.field(i), pa.nulls(table.num_rows, pa.int64()))
    out = predictability(table.to_pandas(), FAST)
    assert isinstance(out, PredictabilityResult)
    final = -np.log10(out.table["size_bytes"].to_numpy(np.float64))
    want = _rank(final, _log_density(out.table))
    assert out.spearman["small-files-first"] == pytest.approx(want, abs=1e-9)
    assert any("final size" in note for note in out.notes)


def test_too_few_rows_or_nothing_to_rank_is_unavailable() -> None:
    small = make_log(pipelines=1, runs=1, files_per_stage=4).to_pandas()  # 12 rows
    out = predictability(small, FAST)
    assert isinstance(out, Unavailable)
    assert f"only 12 usable rows; cross-validation needs at least {MIN_ROWS}" == out.reason
    idle = without_io(make_log(pipelines=2, runs=2, files_per_stage=10), every=1).to_pandas()
    out = predictability(idle, FAST)
    assert isinstance(out, Unavailable) and "nothing to rank" in out.reason


def test_a_fold_without_training_rows_makes_it_unavailable() -> None:
    """One pipeline, two runs, one of them tiny: the fold that holds out the large run trains
    on the tiny one's 6 rows, too few, so its rows get no prediction."""
    big = make_log(pipelines=1, runs=1, files_per_stage=30, seed=2)
    tiny = make_log(pipelines=1, runs=1, files_per_stage=2, seed=3, start=1_700_001_000.0)
    tiny = tiny.set_column(
        tiny.schema.get_field_index("run_id"),
        tiny.schema.field("run_id"),
        pa.array(["pipe0-run9"] * tiny.num_rows),
    )
    out = predictability(pa.concat_tables([big, tiny]).to_pandas(), FAST)
    assert isinstance(out, Unavailable)
    assert f"only {tiny.num_rows} of {big.num_rows + tiny.num_rows} rows got" in out.reason
    assert "split by run" in out.reason and f"other {big.num_rows} rows" in out.reason


def test_config_is_checked() -> None:
    with pytest.raises(AnalysisConfigError, match="folds=1 must be an int >= 2"):
        PredictabilityConfig(folds=1)
    with pytest.raises(AnalysisConfigError, match="n_estimators=0 must be a positive int"):
        PredictabilityConfig(n_estimators=0)
