"""The train / compare / doctor commands and the report and doctor logic, on real images."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tests.trainers.helpers import run_record as _record
from trainers.cli import compare_command, doctor_command, train_command
from trainers.data import cache_available, resolve_dataset
from trainers.doctor import Verdict, amdahl_bound, estimate_record_bytes, recommend_cache
from trainers.errors import RunRecordError, TrainerConfigError
from trainers.report import compare
from trainers.run_record import RunRecord
from trainers.schedule import SwitchRule


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


def test_compare_shows_a_run_without_finished_epochs(tmp_path: Path) -> None:
    _record("fresh", 0.5, [0.3, 0.6]).write(tmp_path / "done")
    _record("intr", 0.5, [], status="interrupted").write(tmp_path / "intr")
    result = CliRunner().invoke(
        compare_command,
        [str(tmp_path / "done"), str(tmp_path / "intr"), "--out", str(tmp_path / "c.png")],
    )
    assert result.exit_code == 0, result.output
    assert "intr: final -  to target -  wall -" in result.output
    assert "run intr (status interrupted) has no finished epoch" in result.stderr
    assert "has no finished epoch" in (tmp_path / "c.html").read_text()


def test_compare_gives_speedups_only_at_one_target_and_names_differences(
    tmp_path: Path,
) -> None:
    a = _record("fresh", 0.2, [0.3, 0.6])
    b = _record(
        "perfect",
        0.35,
        [0.4, 0.7],
        model="PatchifyCNN",
        extra={"batch_size": 32, "lr": 0.05, "variants": 2, "limit": 3000},
    )
    a.write(tmp_path / "a")
    b.write(tmp_path / "b")
    dirs = [tmp_path / "a", tmp_path / "b"]
    summary = compare(dirs, tmp_path / "s.png").summary
    assert not any(k.startswith("speedup_vs_") for row in summary["runs"] for k in row)
    assert summary["target_accuracy"] is None
    assert "different target accuracies (fresh: 0.2, perfect: 0.35)" in summary["speedup_note"]
    assert summary["differences"] == {
        "model": {"fresh": "SmallCNN", "perfect": "PatchifyCNN"},
        "batch_size": {"fresh": 64, "perfect": 32},
        "limit": {"fresh": None, "perfect": 3000},
    }
    result = CliRunner().invoke(
        compare_command, [*map(str, dirs), "--out", str(tmp_path / "c.png")]
    )
    assert result.exit_code == 0, result.output
    assert "as fast as" not in result.output
    assert "no speed-up: the runs were timed at different target accuracies" in result.stderr
    assert "batch_size (fresh: 64, perfect: 32)" in result.stderr
    assert "model (fresh: SmallCNN, perfect: PatchifyCNN)" in result.stderr
    assert "limit" in result.stderr and "variants" not in result.stderr
    assert "batch_size (fresh: 64, perfect: 32)" in (tmp_path / "c.html").read_text()
    # one common target: speed-ups at it (0.35: fresh reaches it at 20 s, perfect at 10 s)
    at = compare(dirs, tmp_path / "t.png", target_accuracy=0.35).summary
    assert at["target_accuracy"] == 0.35 and at["speedup_note"] is None
    assert at["runs"][0]["speedup_vs_perfect"] == 0.5 and at["runs"][1]["speedup_vs_fresh"] == 2.0
    result = CliRunner().invoke(
        compare_command,
        [*map(str, dirs), "--out", str(tmp_path / "c.png"), "--target-accuracy", "0.35"],
    )
    assert "perfect reached the target 0.35 2.00x as fast as fresh" in result.output


def test_train_records_data_options_and_validation_split(two_runs: dict[str, Path]) -> None:
    for run_dir in two_runs.values():
        extra = RunRecord.read(run_dir).extra
        assert extra["limit"] is None and extra["jpeg"] is False and extra["size"] is None
        assert extra["val_split"] == "test"
        assert extra["batch_size"] == 50 and extra["seed"] == 0
        assert extra["lr"] == 0.02 and extra["weight_decay"] == 5e-4


def test_validation_prefers_val_over_test(tmp_path: Path) -> None:
    for split in ("train", "val", "test"):
        (tmp_path / split / "a").mkdir(parents=True)
    assert resolve_dataset(tmp_path).val == tmp_path / "val"
    assert resolve_dataset(tmp_path).val_split == "val"
    (tmp_path / "val" / "a").rmdir()
    (tmp_path / "val").rmdir()
    assert resolve_dataset(tmp_path).val == tmp_path / "test"


@pytest.mark.parametrize(
    ("option", "value"),
    [("--lr", "nan"), ("--lr", "inf"), ("--weight-decay", "nan"), ("--min-delta", "nan")],
)
def test_train_refuses_non_finite_numbers(tmp_path: Path, option: str, value: str) -> None:
    result = CliRunner().invoke(
        train_command, ["--data", str(tmp_path / "none"), option, value, "--no-progress"]
    )
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in result.output
    assert "is not a finite number" in result.output


def _doctor(png_folder: Path, tmp_path: Path, *args: str):
    return CliRunner().invoke(
        doctor_command,
        [
            "--data",
            str(png_folder),
            "--loader",
            "torch",
            "--cache-dir",
            str(tmp_path),
            "--device",
            "cpu",
            *args,
        ],
    )


def test_doctor_warmup_and_steps_beyond_the_epoch(png_folder: Path, tmp_path: Path) -> None:
    # 200 images in batches of 64: 3 batches per epoch (drop_last) or 4
    result = _doctor(png_folder, tmp_path, "--batch-size", "64", "--warmup", "9", "--steps", "2")
    assert result.exit_code == 1
    assert "--warmup 9 (warmup=) asks for more batches than the loader has" in result.output
    assert "batches per epoch" in result.output and "Traceback" not in result.output
    result = _doctor(
        png_folder, tmp_path, "--batch-size", "64", "--warmup", "1", "--steps", "50", "--json"
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["input_batches_requested"] == 50 and 1 <= d["input_batches_timed"] < 50
    assert f"the loader had only {d['input_batches_timed']} batches" in result.stderr


def test_doctor_no_cache_without_phase_one(png_folder: Path, tmp_path: Path) -> None:
    assert recommend_cache(
        num_samples=1000, sample_bytes=784, free_bytes=1 << 40, epochs=20, phase1_fraction=0.0
    ) == (0, 0)
    for epochs, fraction in [(3, 0.3), (4, 0.1), (40, 0.5), (1, 0.5)]:
        k, _ = recommend_cache(
            num_samples=10,
            sample_bytes=784,
            free_bytes=1 << 40,
            epochs=epochs,
            phase1_fraction=fraction,
            reuse=1,
        )
        assert k == SwitchRule(budget_fraction=fraction).budget_epochs(epochs)
    result = _doctor(
        png_folder, tmp_path, "--batch-size", "32", "--steps", "2", "--phase1-fraction", "0"
    )
    assert result.exit_code == 0, result.output
    assert "no cache recommended: a phase-1 fraction of 0 leaves no phase-1 epoch" in result.output


def test_phase1_fraction_help_says_what_happens() -> None:
    for command in (train_command, doctor_command):
        result = CliRunner().invoke(command, ["--help"])
        assert "at least one" in " ".join(result.output.split())


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_doctor_cuda_without_cuda_is_a_clear_error(png_folder: Path, tmp_path: Path) -> None:
    result = _doctor(png_folder, tmp_path, "--batch-size", "32", "--steps", "2")
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        doctor_command,
        ["--data", str(png_folder), "--loader", "torch", "--device", "cuda", "--steps", "2"],
    )
    assert result.exit_code == 1
    assert "device='cuda' but no CUDA device is available" in result.output
