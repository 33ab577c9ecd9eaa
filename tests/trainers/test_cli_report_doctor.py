"""The train / compare / doctor commands and the report and doctor logic, on real images."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainers.cli import compare_command, doctor_command, train_command
from trainers.data import cache_available
from trainers.doctor import Verdict, amdahl_bound, estimate_record_bytes, recommend_cache
from trainers.errors import RunRecordError, TrainerConfigError
from trainers.report import compare
from trainers.run_record import RunRecord


def _train(args: list[str]):
    return CliRunner().invoke(train_command, args, catch_exceptions=False)


@pytest.fixture(scope="module")
def two_runs(png_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A torch run and a fresh (DALI) run of 2 epochs on the tiny PNG folder."""
    out = tmp_path_factory.mktemp("runs")
    runs = {}
    for schedule in ("torch", "fresh"):
        run_dir = out / schedule
        result = _train(
            [
                "--data",
                str(png_folder),
                "--schedule",
                schedule,
                "--epochs",
                "2",
                "--batch-size",
                "50",
                "--target-accuracy",
                "0.2",
                "--run-dir",
                str(run_dir),
                "--workers",
                "1",
                "--device",
                "cpu",
                "--no-progress",
                "--lr",
                "0.02",
            ]
        )
        assert result.exit_code == 0, result.output
        assert f"{schedule}: final accuracy" in result.output
        runs[schedule] = run_dir
    return runs


def test_train_writes_run_json_and_checkpoint(two_runs: dict[str, Path]) -> None:
    for schedule, run_dir in two_runs.items():
        rec = RunRecord.read(run_dir)
        assert rec.schedule == schedule and rec.status == "completed"
        assert len(rec.epochs) == 2 and rec.epochs[0].samples == 200
        assert rec.extra["model_name"] == "small-cnn"
        assert (run_dir / "checkpoints" / "last.pt").is_file()


def test_train_resume_of_a_finished_run_adds_nothing(
    two_runs: dict[str, Path], png_folder: Path
) -> None:
    run_dir = two_runs["torch"]
    before = RunRecord.read(run_dir)
    result = _train(
        [
            "--data",
            str(png_folder),
            "--schedule",
            "torch",
            "--epochs",
            "2",
            "--batch-size",
            "50",
            "--target-accuracy",
            "0.2",
            "--run-dir",
            str(run_dir),
            "--workers",
            "1",
            "--device",
            "cpu",
            "--no-progress",
            "--lr",
            "0.02",
            "--resume",
        ]
    )
    assert result.exit_code == 0, result.output
    after = RunRecord.read(run_dir)
    assert after.status == "completed"
    assert [e.val_accuracy for e in after.epochs] == [e.val_accuracy for e in before.epochs]


def test_train_perfect_needs_the_cache_or_trains(png_folder: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        train_command,
        [
            "--data",
            str(png_folder),
            "--schedule",
            "perfect",
            "--epochs",
            "2",
            "--batch-size",
            "50",
            "--run-dir",
            str(tmp_path / "p"),
            "--device",
            "cpu",
            "--no-progress",
            "--variants",
            "1",
        ],
    )
    if cache_available():
        assert result.exit_code == 0, result.output
        rec = RunRecord.read(tmp_path / "p")
        assert [e.phase for e in rec.epochs] == ["cached", "fresh"]
    else:
        assert result.exit_code == 1
        assert "needs the augmented-sample cache (dataplane.CacheConfig)" in result.output


def test_train_bad_data_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(train_command, ["--data", str(tmp_path), "--no-progress"])
    assert result.exit_code == 1
    assert "has no train/ folder" in result.output


def test_compare_writes_png_and_html(two_runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.png"
    result = CliRunner().invoke(
        compare_command, [str(two_runs["torch"]), str(two_runs["fresh"]), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = out.with_suffix(".html").read_text()
    assert "data:image/png;base64," in html and "&#34;runs&#34;" in html  # JSON summary, escaped
    summary = compare([two_runs["torch"], two_runs["fresh"]], tmp_path / "b.png").summary
    names = [r["name"] for r in summary["runs"]]
    assert names == ["torch", "fresh"]
    torch_row, fresh_row = summary["runs"]
    if torch_row["time_to_target_s"] and fresh_row["time_to_target_s"]:
        assert math.isclose(
            torch_row["speedup_vs_fresh"] * fresh_row["speedup_vs_torch"], 1.0, rel_tol=1e-9
        )


def test_compare_without_run_json(tmp_path: Path) -> None:
    with pytest.raises(RunRecordError, match="no run.json"):
        compare([tmp_path], tmp_path / "x.png")
    result = CliRunner().invoke(compare_command, [str(tmp_path), "--out", str(tmp_path / "x.png")])
    assert result.exit_code == 1 and "no run.json" in result.output


@pytest.mark.parametrize("loader", ["torch", "dataplane"])
def test_doctor_json(png_folder: Path, tmp_path: Path, loader: str) -> None:
    result = CliRunner().invoke(
        doctor_command,
        [
            "--data",
            str(png_folder),
            "--batch-size",
            "32",
            "--steps",
            "3",
            "--loader",
            loader,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--device",
            "cpu",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["image_shape"] == [1, 28, 28] and d["batch_size"] == 32
    assert d["input_s_per_batch"] > 0 and d["compute_s_per_batch"] > 0
    share = d["input_s_per_batch"] / (d["input_s_per_batch"] + d["compute_s_per_batch"])
    assert math.isclose(d["input_share"], share)
    assert math.isclose(d["amdahl_bound"], 1 / (1 - share))
    assert d["verdict"] == Verdict.of(share).value
    assert d["num_samples"] == 200 and d["sample_bytes"] == 784
    assert d["recommended_variants"] == 2  # 20 epochs * 0.5 / reuse 4, plenty of disk
    assert d["recommended_max_bytes"] == 2 * 200 * d["record_bytes"]


def test_doctor_text(png_folder: Path) -> None:
    result = CliRunner().invoke(
        doctor_command,
        [
            "--data",
            str(png_folder),
            "--batch-size",
            "32",
            "--steps",
            "2",
            "--loader",
            "torch",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "input share of a step" in result.output and "Amdahl bound" in result.output


def test_amdahl_bound() -> None:
    assert amdahl_bound(0.0) == 1.0
    assert math.isclose(amdahl_bound(0.5), 2.0)
    assert math.isclose(amdahl_bound(0.5, 0.5), 1 / 0.75)
    assert amdahl_bound(1.0) == math.inf
    assert amdahl_bound(0.3, 1.0) == 1.0  # a cache as slow as fresh buys nothing
    with pytest.raises(TrainerConfigError, match="input_share must be in"):
        amdahl_bound(1.5)


def test_recommend_cache_respects_disk_and_epochs() -> None:
    rec = estimate_record_bytes(224 * 224 * 3)
    assert rec % 4096 == 0 and rec >= 224 * 224 * 3
    assert estimate_record_bytes(784) == math.ceil((784 + 64) * 1.5)
    # plenty of disk: K from the epoch budget (40 epochs * 0.5 / 4 = 5)
    k, size = recommend_cache(num_samples=1000, sample_bytes=784, free_bytes=1 << 40, epochs=40)
    assert (k, size) == (5, 5 * 1000 * estimate_record_bytes(784))
    # disk for 2 variants only (half of the free space is used)
    per_variant = 1000 * estimate_record_bytes(784)
    k, _ = recommend_cache(
        num_samples=1000, sample_bytes=784, free_bytes=4 * per_variant + 1, epochs=40
    )
    assert k == 2
    # not one variant fits
    assert recommend_cache(
        num_samples=1000, sample_bytes=784, free_bytes=per_variant, epochs=40
    ) == (0, 0)
    # a short run still gets one variant
    assert recommend_cache(num_samples=10, sample_bytes=784, free_bytes=1 << 30, epochs=3)[0] == 1


def test_compare_at_another_target(two_runs: dict[str, Path], tmp_path: Path) -> None:
    rec = RunRecord.read(two_runs["fresh"])
    level = rec.epochs[-1].val_accuracy  # reached at the last epoch at the latest
    summary = compare([two_runs["fresh"]], tmp_path / "t.png", target_accuracy=level).summary
    first = next(e for e in rec.epochs if e.val_accuracy >= level)
    assert summary["runs"][0]["time_to_target_s"] == first.elapsed_s
    assert summary["runs"][0]["target_accuracy"] == level
    never = compare([two_runs["fresh"]], tmp_path / "n.png", target_accuracy=1.0).summary
    assert never["runs"][0]["time_to_target_s"] is None
    assert RunRecord.read(two_runs["fresh"]).target_accuracy == 0.2  # the run itself is unchanged
