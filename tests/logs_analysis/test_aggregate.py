"""The parallel pass: exact totals, histogram quantiles and skew, samples, schedulers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logs_analysis.aggregate import (
    DENSITY_GROUPINGS,
    MIN_SAMPLE_RUNS,
    SHAPE_GROUPINGS,
    AggregateConfig,
    Partial,
    _choose_sample,
    _thin_runs,
    aggregate,
    process_chunk,
)
from logs_analysis.analyses.distributions import distribution_table
from logs_analysis.analyses.skew import skew
from logs_analysis.formats import discover
from logs_analysis.histogram import Histogram, bin_of
from logs_analysis.issues import ReadIssues
from logs_analysis.readers import plan
from logs_analysis.resample import resample_runs
from placement.schema import MIN_LIFETIME_S, MIN_SIZE_BYTES, with_derived
from tests.placement.logtables import make_log


def _run(paths: list[Path], **options: object):
    sources, issues = discover(paths)
    chunks, more = plan(sources)
    issues.merge(more)
    return aggregate(chunks, AggregateConfig(**options), issues=issues, paths=paths)


@pytest.fixture(scope="module")
def many_runs(
    tmp_path_factory: pytest.TempPathFactory, real_rows: pa.Table
) -> tuple[Path, pa.Table]:
    """~6,000 rows: whole runs of the real rows drawn again (~80 runs), over four Parquet files."""
    out = tmp_path_factory.mktemp("many-runs")
    batches = list(resample_runs(real_rows, 6000, seed=1, batch_rows=1500))
    for i, batch in enumerate(batches):
        pq.write_table(batch, out / f"part-{i}.parquet", row_group_size=500)
    return out, pa.concat_tables(batches)


def test_totals_and_runs_are_exact(many_runs: tuple[Path, pa.Table]) -> None:
    path, table = many_runs
    agg = _run([path], sample_rows=1000)
    t = with_derived(table).to_pandas()
    assert agg.rows == agg.rows_read == len(t)
    assert agg.chunks == len(list(path.glob("*.parquet")))
    assert agg.totals["bytes"] == t["size_bytes"].sum()
    assert agg.totals["ops"] == (t["read_ops"] + t["write_ops"]).sum()
    assert agg.totals["read_bytes"] == t["read_bytes"].sum()
    assert agg.totals["created_min"] == t["created_at"].min()
    runs = agg.runs.set_index("run_id")
    assert runs["rows"].to_dict() == t.groupby("run_id").size().to_dict()
    assert np.allclose(
        runs["deleted_max"].sort_index(), t.groupby("run_id")["deleted_at"].max().sort_index()
    )


def test_quantiles_match_exact_within_a_bin(many_runs: tuple[Path, pa.Table]) -> None:
    path, table = many_runs
    agg = _run([path], sample_rows=1000)
    t = with_derived(table).to_pandas()
    assert (t["io_density"] == 0).any()  # Darshan files never read or written: density 0
    for grouping, column in (("pipeline", "pipeline"), ("file_kind", "file_kind")):
        for d in distribution_table(agg, "density", grouping, top=None):
            values = t.loc[t[column] == d.key[0], "io_density"]
            for q in (0.05, 0.5, 0.95):
                exact = np.quantile(values, q)
                got = d.quantiles[f"p{100 * q:g}"]
                if exact == 0:
                    assert got == 0, (d.key, q)
                    continue
                # within a couple of histogram bins (0.02 decades each), or the gap between
                # the neighbouring values the two quantile definitions interpolate between
                lo, hi = np.quantile(values, [max(q - 0.002, 0), min(q + 0.002, 1)])
                assert (
                    np.log10(min(lo, exact)) - 0.05
                    <= np.log10(got)
                    <= np.log10(max(hi, exact)) + 0.05
                ), (d.key, q)


def test_skew_matches_exact_sort(many_runs: tuple[Path, pa.Table]) -> None:
    path, table = many_runs
    agg = _run([path], sample_rows=1000)
    t = with_derived(table).to_pandas().sort_values("io_density", ascending=False)
    cum_bytes = t["size_bytes"].cumsum() / t["size_bytes"].sum()
    cum_ops = (t["read_ops"] + t["write_ops"]).cumsum() / (t["read_ops"] + t["write_ops"]).sum()
    s = skew(agg)
    for share in (0.01, 0.05):
        exact = float(np.interp(share, cum_bytes, cum_ops))
        assert s.by_bytes[f"{100 * share:g}%"] == pytest.approx(exact, abs=0.03)
    assert s.by_bytes["5%"] >= s.by_bytes["1%"] >= 0.01  # denser bytes carry more than their share


def test_sample_is_whole_runs(many_runs: tuple[Path, pa.Table]) -> None:
    path, table = many_runs
    agg = _run([path], sample_rows=1500, seed=3)
    assert agg.sample_method == "whole runs"
    sample_runs = agg.sample["run_id"].value_counts()
    assert len(sample_runs) >= MIN_SAMPLE_RUNS
    full = table.to_pandas()["run_id"].value_counts()
    assert (sample_runs == full[sample_runs.index]).all()  # every sampled run is complete
    assert 500 <= len(agg.sample) <= 2250
    again = _run([path], sample_rows=1500, seed=3)
    assert set(again.sample["run_id"]) == set(agg.sample["run_id"])  # deterministic


def test_small_input_keeps_every_row(native_dir: Path, real_rows: pa.Table) -> None:
    agg = _run([native_dir])
    assert agg.sample_method == "all rows" and len(agg.sample) == real_rows.num_rows


def test_threads_sync_and_a_real_cluster_agree(many_runs: tuple[Path, pa.Table]) -> None:
    from distributed import LocalCluster

    path, _ = many_runs
    threads = _run([path], sample_rows=1000, scheduler="threads")
    sync = _run([path], sample_rows=1000, scheduler="sync")
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        dist = _run([path], sample_rows=1000, scheduler=cluster.scheduler_address)
    for other in (sync, dist):
        assert other.totals == pytest.approx(threads.totals)
        for key, hist in threads.histograms.items():
            a = hist.frame.sort_values(["key", "bin"]).reset_index(drop=True)
            b = other.histograms[key].frame.sort_values(["key", "bin"]).reset_index(drop=True)
            assert a[["key", "bin", "n"]].equals(b[["key", "bin", "n"]]), key
        assert set(other.sample["run_id"]) == set(threads.sample["run_id"])


def test_unreachable_scheduler_is_a_clear_error(native_dir: Path) -> None:
    from logs_analysis.errors import AnalysisError

    with pytest.raises(AnalysisError, match="cannot reach the Dask scheduler.*--scheduler threads"):
        _run([native_dir], scheduler="tcp://127.0.0.1:9")


def test_jsonl_issue_lines_are_file_lines(
    real_rows: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"
    rows = real_rows.to_pylist()
    bad_lines = {40, 170, 301}
    with open(path, "w") as f:
        f.writelines(
            "{broken\n" if i in bad_lines else json.dumps(row) + "\n"
            for i, row in enumerate(rows, 1)
        )
    monkeypatch.setattr("logs_analysis.readers.native.BLOCK_BYTES", 9000)
    sources, _ = discover([path])
    chunks, _ = plan(sources)
    assert len(chunks) > 5
    agg = aggregate(chunks, AggregateConfig(), paths=[path])
    assert agg.issues.counts == {"invalid JSON": 3}
    assert sorted(e.line for e in agg.issues.examples) == sorted(bad_lines)
    assert agg.rows == len(rows) - 3


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="sample_rows"):
        AggregateConfig(sample_rows=5)
    with pytest.raises(ValueError, match="workers"):
        AggregateConfig(workers=0)
    with pytest.raises(ValueError, match=r"'thread' is not one of threads\|processes\|sync"):
        AggregateConfig(scheduler="thread")
    for ok in ("threads", "processes", "sync", "tcp://127.0.0.1:8786", "tls://host:8786"):
        assert AggregateConfig(scheduler=ok).scheduler == ok
    assert AggregateConfig(workers=1).workers == 1
    # a bool is an int to Python, but True is no count of workers; floats and strings are refused
    # as config errors, not TypeErrors from comparing them
    for bad in (True, 2.0, "2"):
        with pytest.raises(ValueError, match=rf"workers={bad!r} must be a positive int"):
            AggregateConfig(workers=bad)  # type: ignore[arg-type]
    for bad in (True, 500.0, "500"):
        with pytest.raises(ValueError, match=rf"sample_rows={bad!r} must be an int >= 100"):
            AggregateConfig(sample_rows=bad)  # type: ignore[arg-type]


@pytest.mark.timeout(120)
def test_process_scheduler_with_darshan_logs(
    darshan_log: Path, native_dir: Path, real_rows: pa.Table, darshan_rows: pa.Table
) -> None:
    # Darshan logs are parsed in a spawned child: that must also work (and exit) inside a
    # process-pool worker
    threads = _run([darshan_log, native_dir], scheduler="threads")
    procs = _run([darshan_log, native_dir], scheduler="processes", workers=2)
    # native_dir holds the Darshan log's 214 rows too (same run_id and file_id): the second
    # pass that drops them runs under both schedulers
    assert darshan_rows.num_rows == 214
    assert procs.rows == threads.rows == real_rows.num_rows
    duplicates = "duplicate row (run_id and file_id read before; dropped)"
    assert procs.issues.counts == threads.issues.counts == {duplicates: 214}
    assert procs.totals == pytest.approx(threads.totals)


def test_decades_leave_out_files_without_io(tmp_path: Path) -> None:
    """p1 and p99 of the decades are taken among the files with I/O, whatever share of
    files has none."""
    n, idle = 200, 50
    ops = np.r_[np.zeros(idle, dtype=np.int64), np.full(n - idle, 3, dtype=np.int64)]
    life = np.r_[np.full(idle, 10.0), np.logspace(0, 6, n - idle)]  # six decades of density
    rows = [
        {
            "file_id": f"f{i}",
            "pipeline": "p",
            "run_id": f"r{i % 4}",
            "stage": "s",
            "created_at": 100.0,
            "deleted_at": 100.0 + float(life[i]),
            "file_kind": "spill",
            "size_bytes": 10**6,
            "read_ops": int(ops[i]),
            "write_ops": 0,
            "read_bytes": 0,
            "write_bytes": 0,
        }
        for i in range(n)
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agg = _run([path])
    (overall,) = distribution_table(agg, "density", "overall")
    assert overall.quantiles["p1"] == 0.0  # a quarter of the files have no I/O
    density = 3 / (10**6 * life[idle:])
    want = np.log10(np.quantile(density, 0.99) / np.quantile(density, 0.01))
    assert overall.decades == pytest.approx(want, abs=0.1)
    assert overall.to_dict()["decades"] == pytest.approx(want, abs=0.1)
    # counts are integers
    assert isinstance(overall.bytes, int) and isinstance(overall.ops, int)
    assert overall.ops == int(ops.sum()) and overall.bytes == n * 10**6


def test_bad_options_raise_analysis_errors() -> None:
    from logs_analysis.errors import AnalysisConfigError, AnalysisError

    with pytest.raises(AnalysisError, match="sample_rows=5 must be an int >= 100") as info:
        AggregateConfig(sample_rows=5)
    assert isinstance(info.value, AnalysisConfigError) and isinstance(info.value, ValueError)
    with pytest.raises(AnalysisError, match="'thread' is not one of"):
        AggregateConfig(scheduler="thread")
    with pytest.raises(AnalysisError, match="n_rows=0 must be positive"):
        next(resample_runs(pa.table({"run_id": ["a"]}), 0))


def test_a_log_read_in_many_chunks_sums_its_rows_and_spans_each_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs whose rows are spread over the chunks of one file get one row each, with the
    earliest creation and latest deletion of any chunk; the file's rows are summed."""
    table = make_log(pipelines=2, runs=2, files_per_stage=10, seed=4)
    table = table.take(np.random.default_rng(0).permutation(table.num_rows))
    df = table.to_pandas()
    df.loc[:4, "read_ops"] = 0  # files with one operation...
    df.loc[5:9, ["read_ops", "write_ops"]] = 0  # ...and files with none
    table = pa.Table.from_pandas(df, schema=table.schema, preserve_index=False)
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))
    monkeypatch.setattr("logs_analysis.readers.native.BLOCK_BYTES", 4000)
    sources, _ = discover([path])
    chunks, _ = plan(sources)
    assert len(chunks) > 4
    agg = aggregate(chunks, AggregateConfig(scheduler="sync"), paths=[path])
    assert list(agg.sources.values()) == [len(df)]
    assert agg.totals["zero_ops_rows"] == ((df["read_ops"] + df["write_ops"]) == 0).sum()
    assert agg.totals["created_min"] == df["created_at"].min()
    assert agg.totals["deleted_max"] == df["deleted_at"].max()
    want = df.groupby("run_id").agg(
        pipeline=("pipeline", "first"),
        rows=("run_id", "size"),
        created_min=("created_at", "min"),
        deleted_max=("deleted_at", "max"),
    )
    got = agg.runs.set_index("run_id").sort_index()
    assert got.index.tolist() == want.index.tolist()
    for column in want.columns:
        assert got[column].tolist() == want[column].tolist(), column


def test_a_chunk_samples_whole_runs_at_the_rate(tmp_path: Path) -> None:
    table = make_log(pipelines=5, runs=8, files_per_stage=2, seed=1)  # 40 runs of 6 rows
    path = tmp_path / "log.parquet"
    pq.write_table(table, path)
    sources, _ = discover([path])
    (chunk,), _ = plan(sources)
    partial = process_chunk((0, chunk), rate=0.25, seed=0)
    sampled = pd.concat(partial.run_sample)["run_id"].value_counts()
    full = table.to_pandas()["run_id"].value_counts()
    assert (sampled == full[sampled.index]).all()  # every sampled run is complete
    assert 3 <= len(sampled) <= 17  # about a quarter of the 40 runs


def test_sample_rows_must_be_at_least_100() -> None:
    with pytest.raises(ValueError, match="sample_rows=99 must be an int >= 100"):
        AggregateConfig(sample_rows=99)
    assert AggregateConfig(sample_rows=100).sample_rows == 100


def _drawn_run(table: pa.Table, tmp_path: Path) -> pd.DataFrame:
    """The sample of the one-run ``table`` read as one chunk at a rate of 0.2, for the first
    seed that draws its run (about one seed in five does)."""
    path = tmp_path / "log.parquet"
    pq.write_table(table, path)
    sources, _ = discover([path])
    (chunk,), _ = plan(sources)
    for seed in range(40):
        partial = process_chunk((0, chunk), rate=0.2, seed=seed, with_keys=False)
        if partial.run_sample:
            return partial.run_sample[0]
    pytest.fail("the run was never drawn")


def test_a_huge_run_drawn_into_the_sample_is_cut_to_a_share_of_the_chunk(tmp_path: Path) -> None:
    table = make_log(pipelines=1, runs=1, files_per_stage=3400, seed=1)  # one run, 10,200 rows
    assert 0 < len(_drawn_run(table, tmp_path)) < table.num_rows


def test_a_drawn_run_of_a_small_chunk_is_kept_whole(tmp_path: Path) -> None:
    """A chunk under a thousand rows keeps a drawn run whole, even one above 4 x rate of it."""
    table = make_log(pipelines=1, runs=1, files_per_stage=100, seed=1)  # one run, 300 rows
    assert len(_drawn_run(table, tmp_path)) == table.num_rows  # more than 4 x 0.2 x 300 = 240


def _runs_frame(runs: int, rows_per_run: int) -> pd.DataFrame:
    run_ids = [f"r{i}" for i in range(runs) for _ in range(rows_per_run)]
    return pd.DataFrame({"run_id": run_ids, "size_bytes": np.arange(len(run_ids))})


def _partial(run_sample: pd.DataFrame, row_sample: pd.DataFrame) -> Partial:
    return Partial(
        hists={},
        totals={},
        runs=[],
        sources={},
        run_sample=[run_sample],
        row_sample=[row_sample],
        issues=ReadIssues(),
        block_lines={},
        rows_read=0,
        chunks=1,
    )


def test_a_run_sample_needs_at_least_min_sample_runs_runs() -> None:
    config = AggregateConfig(sample_rows=100)
    rows = _runs_frame(1, 30)
    enough = _partial(_runs_frame(MIN_SAMPLE_RUNS, 5), rows)
    assert _choose_sample(enough, 0.5, config)[1] == "whole runs"
    too_few = _partial(_runs_frame(MIN_SAMPLE_RUNS - 1, 5), rows)
    sample, method = _choose_sample(too_few, 0.5, config)
    assert method == "rows" and len(sample) == 30


def test_all_rows_are_kept_up_to_one_and_a_half_times_sample_rows() -> None:
    config = AggregateConfig(sample_rows=100)
    at_limit = _partial(_runs_frame(15, 10), _runs_frame(0, 0))  # 150 rows
    sample, method = _choose_sample(at_limit, 1.0, config)
    assert method == "all rows" and len(sample) == 150
    # 200 rows: thinned to whole runs until 100 rows are reached (ten runs of ten)
    over = _partial(_runs_frame(20, 10), _runs_frame(0, 0))
    sample, method = _choose_sample(over, 1.0, config)
    assert method == "whole runs" and len(sample) == 100
    assert (sample["run_id"].value_counts() == 10).all()


def test_thinning_stops_at_the_run_that_fills_the_sample() -> None:
    df = _runs_frame(20, 50)
    thinned = _thin_runs(df, AggregateConfig(sample_rows=100))
    assert len(thinned) == 100  # two whole runs of 50
    assert thinned["run_id"].nunique() == 2


def test_every_histogram_is_an_exact_group_by_of_its_rows(tmp_path: Path) -> None:
    """Each histogram's (key, bin) counts and weights are those of the rows, for every
    grouping: keys of two columns, and a null operator as its own "(none)" group."""
    df = make_log(pipelines=2, runs=3, files_per_stage=7, seed=2).to_pandas()
    df.loc[::5, "operator"] = None
    df["read_bytes"] = df["size_bytes"] * (1 + np.arange(len(df)) % 4)  # reads differ from writes
    table = pa.Table.from_pandas(df, preserve_index=False)
    for i, part in enumerate((table.slice(0, 60), table.slice(60))):  # two chunks
        pq.write_table(part, tmp_path / f"part-{i}.parquet")
    agg = _run([tmp_path])
    assert agg.chunks == 2
    life = np.maximum(df["deleted_at"] - df["created_at"], MIN_LIFETIME_S)
    ops = df["read_ops"] + df["write_ops"]
    byte_s = np.maximum(df["size_bytes"], MIN_SIZE_BYTES) * life
    rows = df.assign(
        ops=ops,
        byte_s=byte_s,
        io_bytes=df["read_bytes"] + df["write_bytes"],
        bytes=df["size_bytes"],
        density=ops / byte_s,
        lifetime=life,
        size=df["size_bytes"],
    ).fillna({"operator": "(none)"})
    weights = {"density": ["bytes", "ops", "byte_s", "io_bytes"], "lifetime": ["bytes"]}
    groupings = {"density": DENSITY_GROUPINGS, "lifetime": SHAPE_GROUPINGS, "size": SHAPE_GROUPINGS}
    assert set(agg.histograms) == {(v, g) for v, gs in groupings.items() for g in gs}
    for (variable, grouping), hist in agg.histograms.items():
        columns = list(groupings[variable][grouping])
        key = rows[columns].agg(Histogram.KEY_SEP.join, axis=1) if columns else ""
        w = weights.get(variable, ["bytes"])
        want = (
            rows.assign(key=key, bin=bin_of(rows[variable].to_numpy()))
            .groupby(["key", "bin"])
            .agg(n=("bytes", "size"), **{c: (c, "sum") for c in w})
        )
        got = hist.frame.set_index(["key", "bin"]).sort_index()
        assert got.index.tolist() == want.index.tolist(), (variable, grouping)
        assert got["n"].tolist() == want["n"].tolist(), (variable, grouping)
        for c in w:
            assert np.allclose(got[c], want[c], rtol=1e-12), (variable, grouping, c)
    assert "pipe1" + Histogram.KEY_SEP + "shuffle-p2p" in agg.histogram("density", "stage").keys()


def test_a_chunk_without_usable_rows_is_counted_with_its_issues(tmp_path: Path) -> None:
    table = make_log(pipelines=1, runs=2, files_per_stage=5, seed=3)
    pq.write_table(table, tmp_path / "good.parquet")
    df = table.to_pandas()
    df["pipeline"] = None  # every row of the second file lacks a required column
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "bad.parquet")
    agg = _run([tmp_path])
    assert agg.chunks == 2 and agg.rows_read == 2 * table.num_rows
    assert agg.rows == table.num_rows
    assert agg.issues.counts == {"null pipeline": table.num_rows}
    assert agg.sources == {str(tmp_path / "good.parquet"): table.num_rows}


def test_runs_are_drawn_alike_in_every_chunk_whatever_their_order(tmp_path: Path) -> None:
    """The run sample is whole runs because every chunk draws the same runs: a run's draw
    depends on its run_id and the seed alone, not on where the chunk holds it."""
    table = make_log(pipelines=5, runs=8, files_per_stage=2, seed=1)  # 40 runs of 6 rows
    df = table.to_pandas()
    first = df.groupby("run_id").head(3)
    second = df.drop(first.index).iloc[::-1]  # the other rows, the runs in reverse order
    for name, part in (("a", first), ("b", second)):
        pq.write_table(
            pa.Table.from_pandas(part, preserve_index=False), tmp_path / f"{name}.parquet"
        )
    sources, _ = discover([tmp_path])
    chunks, _ = plan(sources)
    drawn = []
    for i, chunk in enumerate(chunks):
        partial = process_chunk((i, chunk), rate=0.3, seed=5, with_keys=False)
        drawn.append(set(pd.concat(partial.run_sample)["run_id"]) if partial.run_sample else set())
    assert len(drawn) == 2 and drawn[0] and drawn[0] == drawn[1]
