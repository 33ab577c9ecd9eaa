"""Mistakes made on the command line of train / compare / doctor, on real images.

Each is refused with a message naming the value and what to do *in that command*,
never a Python traceback, and before any work where the mistake is in the options.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner, Result

from tests.trainers.helpers import run_record
from trainers.cli import compare_command, doctor_command, train_command
from trainers.data import DatasetSplits, build_loaders
from trainers.errors import TrainerConfigError, TrainerDataError
from trainers.report import compare
from trainers.run_record import RunRecord

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _one_line(result: Result) -> str:
    """The command's output with click's line wrapping undone."""
    return " ".join(result.output.split())


def _refused(result: Result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # a click error
    assert "Traceback" not in result.output
    return _one_line(result)


# -- compare: --out and --html -------------------------------------------------------------


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    dirs = [tmp_path / "fresh", tmp_path / "perfect"]
    run_record("fresh", 0.5, [0.3, 0.6]).write(dirs[0])
    run_record("perfect", 0.5, [0.5, 0.7]).write(dirs[1])
    return dirs


@pytest.mark.parametrize("name", ["c.html", "c", "c.txt"])
def test_compare_refuses_an_out_matplotlib_cannot_write(
    runs: list[Path], tmp_path: Path, name: str
) -> None:
    out = tmp_path / "plots" / name
    result = CliRunner().invoke(compare_command, [*map(str, runs), "--out", str(out)])
    message = _refused(result, 2)
    assert f"--out {out}" in message and "matplotlib cannot write the plot" in message
    assert f"(e.g. --out {out.with_suffix('.png')})" in message
    assert ("--html" in message) == (name == "c.html")
    assert not (tmp_path / "plots").exists()  # refused before any work
    from trainers.report import plot_formats

    assert ".png" in message and ".svg" in message and ".pdf" in message
    assert all(f".{fmt}" in message for fmt in plot_formats())  # asked of matplotlib
    with pytest.raises(TrainerConfigError, match="matplotlib cannot write the plot"):
        compare(runs, out)


def test_compare_writes_the_plot_in_out_format_and_a_png_in_the_page(
    runs: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "c.svg"
    result = CliRunner().invoke(compare_command, [*map(str, runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "<svg" in out.read_text()
    page = out.with_suffix(".html").read_text()
    embedded = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert embedded is not None
    assert base64.b64decode(embedded.group(1))[:8] == PNG_MAGIC  # what the page says it is


def test_compare_refuses_an_html_that_replaces_the_plot_or_a_run(
    runs: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "c.png"
    result = CliRunner().invoke(
        compare_command, [*map(str, runs), "--out", str(out), "--html", str(out)]
    )
    message = _refused(result, 2)
    assert f"--html {out} (html=) is the plot's own file (--out {out})" in message
    assert f"--html {out.with_suffix('.html')}" in message
    assert not out.exists()
    record = runs[0] / "run.json"
    before = record.read_bytes()
    result = CliRunner().invoke(
        compare_command, [*map(str, runs), "--out", str(out), "--html", str(record)]
    )
    message = _refused(result, 2)
    assert f"would replace the run record {record}" in message
    assert record.read_bytes() == before and not out.exists()


# -- compare: one label per run in every warning ---------------------------------------------


def test_compare_warnings_name_each_run_by_one_label(tmp_path: Path) -> None:
    run_record("fresh", 0.7, [0.3, 0.6]).write(tmp_path / "fresh")
    run_record("perfect", 0.7, [0.4, 0.75]).write(tmp_path / "perfect")
    run_record("fresh", None, [0.3, 0.5], extra={"batch_size": 32, "lr": 0.05}).write(
        tmp_path / "e1"
    )
    dirs = [str(tmp_path / name) for name in ("fresh", "perfect", "e1")]
    result = CliRunner().invoke(compare_command, [*dirs, "--out", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2
    assert "batch_size (fresh (fresh): 64, perfect: 64, fresh (e1): 32)" in warnings[0]
    assert "target accuracies (fresh (fresh): 0.7, perfect: 0.7, fresh (e1): None)" in warnings[1]
    for warning in warnings:  # the bare name "fresh" would not say which of the two
        assert re.search(r"\bfresh: ", warning) is None


# -- --data fmnist over an ingest with other settings; doctor's ingest options ---------------


@pytest.mark.parametrize("command", ["train", "doctor"])
def test_fmnist_ingested_with_other_settings_names_what_this_command_can_do(
    fmnist_dir: Path, tmp_path: Path, command: str
) -> None:
    from dataplane.ingest import ingest_fmnist

    root = tmp_path / "data"
    ingest_fmnist(root / "fmnist", limit=50, source_dir=fmnist_dir, progress=False)
    ingest_fmnist(
        root / "fmnist-limit50", jpeg=True, limit=50, source_dir=fmnist_dir, progress=False
    )
    if command == "train":
        cmd, args = train_command, ["--no-progress", "--run-dir", str(tmp_path / "run")]
    else:
        cmd, args = doctor_command, ["--loader", "torch", "--cache-dir", str(tmp_path)]
    common = ["--data", "fmnist", "--data-root", str(root), "--device", "cpu", *args]
    common += ["--source-dir", str(fmnist_dir)]
    message = _refused(CliRunner().invoke(cmd, common), 1)
    fmnist = root / "fmnist"
    assert "pass --overwrite" not in message  # an option neither command has
    assert f"{fmnist} already holds a Fashion-MNIST ingest with other settings" in message
    assert "(limit 50 there, none here)" in message
    assert f"use it as it is with --data {fmnist}" in message
    assert f"`dataplane ingest fmnist {fmnist} --overwrite` and run this again" in message
    assert "--data-root DIR" in message
    # the options of the command go into the ingest command it suggests
    message = _refused(CliRunner().invoke(cmd, [*common, "--limit", "50"]), 1)
    assert "(jpeg yes there, no here)" in message
    assert f"`dataplane ingest fmnist {root / 'fmnist-limit50'} --overwrite --limit 50`" in message
    # a --source-dir other than the one `dataplane ingest` reads goes in too
    other = tmp_path / "idx"
    other.mkdir()
    for path in fmnist_dir.glob("*-ubyte.gz"):
        (other / path.name).symlink_to(path)
    common[-1] = str(other)
    message = _refused(CliRunner().invoke(cmd, [*common, "--limit", "50"]), 1)
    assert f"--overwrite --limit 50 --source-dir {other}` and run this again" in message
    # and the first suggestion works
    result = CliRunner().invoke(
        cmd, ["--data", str(fmnist), *common[2:], "--batch-size", "10", "--epochs", "1"]
    )
    assert result.exit_code == 0, result.output


def test_doctor_ingests_fmnist_with_trains_options(fmnist_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        doctor_command,
        [
            *("--data", "fmnist", "--data-root", str(tmp_path), "--device", "cpu"),
            *("--source-dir", str(fmnist_dir)),
            *("--jpeg", "--size", "32", "--limit", "60", "--loader", "torch"),
            *("--batch-size", "20", "--steps", "1", "--cache-dir", str(tmp_path), "--json"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "fmnist-jpeg32-limit60" / "train").is_dir()  # where train puts it
    diagnosis = json.loads(result.stdout)
    assert diagnosis["num_samples"] == 60 and diagnosis["image_shape"] == [1, 32, 32]


@pytest.mark.parametrize("command", ["train", "doctor"])
def test_fmnist_without_its_idx_files_suggests_what_this_command_takes(
    fmnist_dir: Path, tmp_path: Path, command: str
) -> None:
    empty = tmp_path / "no-idx"
    empty.mkdir()
    if command == "train":
        cmd, args = train_command, ["--no-progress", "--run-dir", str(tmp_path / "run")]
    else:
        cmd, args = doctor_command, ["--loader", "torch", "--cache-dir", str(tmp_path)]
    common = ["--data", "fmnist", "--data-root", str(tmp_path / "data"), "--device", "cpu"]
    common += ["--limit", "50", *args]
    # the environment variable is read as `dataplane ingest` reads it
    result = CliRunner().invoke(cmd, common, env={"DATAPLANE_FMNIST_DIR": str(empty)})
    message = _refused(result, 1)
    assert f"IDX file(s) not found: {empty / 'train-images-idx3-ubyte.gz'}" in message
    assert "pass --source-dir (or set DATAPLANE_FMNIST_DIR) to the folder holding" in message
    assert any("--source-dir" in param.opts for param in cmd.params)  # what it suggests
    assert not (tmp_path / "data").exists()
    # --source-dir wins over the environment, and pointing it at the files works
    result = CliRunner().invoke(
        cmd,
        [*common, "--source-dir", str(fmnist_dir), "--batch-size", "10", "--epochs", "1"],
        env={"DATAPLANE_FMNIST_DIR": str(empty)},
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "fmnist-limit50" / "train").is_dir()


# -- validation classes other than the training classes -------------------------------------


@pytest.fixture
def other_val_classes(png_folder: Path, tmp_path: Path) -> Path:
    """train/ with the 10 Fashion-MNIST class folders, test/ with two folders a/ and b/."""
    root = tmp_path / "ds"
    shutil.copytree(png_folder / "train", root / "train")
    shutil.copytree(png_folder / "test" / "00_class", root / "test" / "a")
    shutil.copytree(png_folder / "test" / "01_class", root / "test" / "b")
    return root


@pytest.mark.parametrize("schedule", ["fresh", "torch"])
def test_train_refuses_validation_classes_other_than_the_training_ones(
    other_val_classes: Path, tmp_path: Path, schedule: str
) -> None:
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        train_command,
        [
            *("--data", str(other_val_classes), "--schedule", schedule, "--epochs", "1"),
            *("--batch-size", "50", "--device", "cpu", "--workers", "0", "--no-progress"),
            *("--run-dir", str(run_dir)),
        ],
    )
    message = _refused(result, 1)
    root = other_val_classes
    assert (
        f"the validation split {root / 'test'} has other class folders than the training split "
        f"{root / 'train'} (only in test/: a, b; only in train/: 00_class, 01_class, 02_class"
    ) in message
    assert "give both splits the same class folders" in message
    assert not (run_dir / "run.json").exists()  # refused before training
    splits = DatasetSplits(root / "train", root / "test")
    with pytest.raises(TrainerDataError, match="only in test/: a, b"):
        build_loaders(schedule, splits, batch_size=50, device="cpu", num_workers=0)


def test_build_loaders_takes_on_corrupt_as_the_loaders_enum_or_its_name(tmp_path: Path) -> None:
    from dataplane import OnCorrupt
    from trainers.errors import TrainerConfigError

    splits = DatasetSplits(tmp_path / "train", tmp_path / "test")
    for value in (OnCorrupt.SKIP, "skip"):  # refused for torch before any folder is read
        with pytest.raises(TrainerConfigError, match="needs the dataplane loaders"):
            build_loaders("torch", splits, batch_size=8, on_corrupt=value)
    with pytest.raises(TrainerConfigError, match="must be 'raise' or 'skip'.*'ignore'"):
        build_loaders("fresh", splits, batch_size=8, on_corrupt="ignore")


# -- a corrupt image ---------------------------------------------------------------------


@pytest.fixture
def corrupt(png_folder: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The PNG dataset with its first training image truncated; (dataset, that image)."""
    root = tmp_path / "ds"
    shutil.copytree(png_folder, root)
    first = sorted((root / "train" / "00_class").iterdir())[0]
    first.write_bytes(first.read_bytes()[:100])
    return root, first


def _train_on(root: Path, tmp_path: Path, *args: str) -> Result:
    return CliRunner().invoke(
        train_command,
        [
            *("--data", str(root), "--epochs", "1", "--batch-size", "50", "--device", "cpu"),
            *("--no-progress", "--run-dir", str(tmp_path / "run"), *args),
        ],
    )


def test_train_on_corrupt_skip(corrupt: tuple[Path, Path], tmp_path: Path) -> None:
    from dataplane.errors import CorruptSampleWarning

    root, bad = corrupt
    result = _train_on(root, tmp_path, "--schedule", "fresh")
    assert result.exit_code == 1 and "Traceback" not in result.output
    message = _one_line(result)
    assert str(bad) in message and "pass --on-corrupt skip" in message
    assert "on_corrupt=" not in message  # the Python API's spelling
    with pytest.warns(CorruptSampleWarning, match="skipped 1 corrupt"):
        result = _train_on(root, tmp_path, "--schedule", "fresh", "--on-corrupt", "skip")
    assert result.exit_code == 0, result.output
    rec = RunRecord.read(tmp_path / "run")
    assert rec.extra["on_corrupt"] == "skip"
    assert rec.epochs[0].samples == 199  # 200 images, one skipped


def test_train_torch_schedule_corrupt_image(corrupt: tuple[Path, Path], tmp_path: Path) -> None:
    root, bad = corrupt
    result = _train_on(root, tmp_path, "--schedule", "torch", "--workers", "1")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "worker process" not in result.output
    assert f"cannot read image 0 ({bad}): " in result.output
    assert "fix or remove the file" in result.output
    result = _train_on(root, tmp_path, "--schedule", "torch", "--on-corrupt", "skip")
    message = _refused(result, 2)
    assert "Invalid value for '--on-corrupt': skip needs the dataplane loaders" in message


def test_doctor_on_corrupt(corrupt: tuple[Path, Path], tmp_path: Path) -> None:
    root, bad = corrupt
    args = ["--data", str(root), "--device", "cpu", "--batch-size", "20", "--steps", "1"]
    args += ["--cache-dir", str(tmp_path), "--json"]
    result = CliRunner().invoke(doctor_command, args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert str(bad) in _one_line(result) and "pass --on-corrupt skip" in _one_line(result)
    result = CliRunner().invoke(doctor_command, [*args, "--on-corrupt", "skip"])
    assert result.exit_code == 0, result.output
    assert "input_share" in result.stdout
    result = CliRunner().invoke(
        doctor_command, [*args, "--on-corrupt", "skip", "--loader", "torch"]
    )
    assert "Invalid value for '--on-corrupt': skip needs --loader dataplane" in _refused(result, 2)


# -- devices ---------------------------------------------------------------------------


def test_doctor_lets_the_loader_pick_its_device_as_train_does(
    png_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --device, train gives the Loader device=None (CUDA only where DALI sees it
    too); doctor did the same choice with torch alone, and failed where DALI sees none."""
    import dataplane

    real = dataplane.Loader
    devices: list[str | None] = []

    def spy(*args: object, **kwargs: object) -> object:
        devices.append(kwargs.get("device"))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dataplane, "Loader", spy)
    args = ["--data", str(png_folder), "--batch-size", "20", "--steps", "1"]
    args += ["--cache-dir", str(tmp_path), "--json"]
    for extra, expected in (([], None), (["--device", "cpu"], "cpu")):
        result = CliRunner().invoke(doctor_command, [*args, *extra])
        assert result.exit_code == 0, result.output
        assert devices.pop() == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_reads_the_same_in_train_and_doctor(png_folder: Path) -> None:
    said = set()
    for command, extra in ((train_command, "--no-progress"), (doctor_command, "--json")):
        result = CliRunner().invoke(command, ["--data", str(png_folder), "--device", "cuda", extra])
        assert result.exit_code == 1 and "Traceback" not in result.output
        said.add(result.output.strip())
    assert said == {
        "Error: device='cuda' but no CUDA device is available; use device='cpu' (--device cpu)"
    }
