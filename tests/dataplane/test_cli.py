"""``dataplane ingest``, ``iterate`` and ``--help`` on real Fashion-MNIST."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import click
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from dataplane import cli
from dataplane.cli import main
from dataplane.idx import FASHION_MNIST_CLASSES, read_idx
from dataplane.ingest import ingest_fmnist
from dataplane.sources import ImageFolderSource, ParquetSource, open_source


def test_folder_output_matches_the_idx_files(fmnist_small: Path, fmnist_dir: Path) -> None:
    source = ImageFolderSource(fmnist_small / "train")
    assert len(source) == 300 and len(ImageFolderSource(fmnist_small / "test")) == 300
    assert source.classes == [f"{i:02d}_{n}" for i, n in enumerate(FASHION_MNIST_CLASSES)]
    images = read_idx(fmnist_dir / "train-images-idx3-ubyte.gz")[:300]
    labels = read_idx(fmnist_dir / "train-labels-idx1-ubyte.gz")[:300]
    for i in (0, 17, 299):
        path = Path(source.describe(i))
        original = int(path.stem)
        assert source.label(i) == labels[original]
        assert (np.asarray(Image.open(path)) == images[original]).all(), "PNG is lossless"


def test_parquet_output(fmnist_parquet: Path, fmnist_dir: Path) -> None:
    source = open_source(fmnist_parquet / "train")
    assert isinstance(source, ParquetSource)
    assert len(source) == 300 and source.num_classes == 10
    labels = read_idx(fmnist_dir / "train-labels-idx1-ubyte.gz")[:300]
    assert source.labels().tolist() == labels.tolist()
    assert source.describe(5).endswith("part-00000.parquet#5")
    table = pq.read_table(next((fmnist_parquet / "train").glob("*.parquet")))
    assert table.column_names == ["image", "label"]


def test_ingest_is_idempotent_and_refuses_to_clobber(tmp_path: Path, fmnist_dir: Path) -> None:
    out = tmp_path / "fm"
    first = ingest_fmnist(out, limit=20, source_dir=fmnist_dir, progress=False)
    assert not first.skipped and first.counts == {"train": 20, "test": 20}
    marker = next((out / "train").rglob("*.png"))
    mtime = marker.stat().st_mtime_ns
    again = ingest_fmnist(out, limit=20, source_dir=fmnist_dir, progress=False)
    assert again.skipped and marker.stat().st_mtime_ns == mtime
    runner = CliRunner()
    result = runner.invoke(
        main, ["ingest", "fmnist", str(out), "--limit", "30", "--source-dir", str(fmnist_dir)]
    )
    assert result.exit_code != 0 and "--overwrite" in result.output
    assert marker.exists(), "nothing already stored is lost"
    result = runner.invoke(
        main,
        [
            "ingest",
            "fmnist",
            str(out),
            "--limit",
            "30",
            "--jpeg",
            "--size",
            "32",
            "--source-dir",
            str(fmnist_dir),
            "--overwrite",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    files = sorted((out / "train").rglob("*"))
    jpegs = [f for f in files if f.suffix == ".jpg"]
    assert len(jpegs) == 30 and not any(f.suffix == ".png" for f in files)
    assert Image.open(jpegs[0]).size == (32, 32)
    assert json.loads((out / "ingest.json").read_text())["settings"]["jpeg"] is True


def test_ingest_names_the_package_when_idx_files_are_missing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["ingest", "fmnist", str(tmp_path / "o"), "--source-dir", str(tmp_path)]
    )
    assert result.exit_code != 0
    assert "apt-get install dataset-fashion-mnist" in result.output
    assert not (tmp_path / "o").exists()


def test_iterate_prints_throughput_and_peak_rss(fmnist_small: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "iterate",
            str(fmnist_small / "train"),
            "--epochs",
            "2",
            "--batch-size",
            "64",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2
    assert all("300 images" in line and "images/s" in line and "peak RSS" in line for line in lines)


def test_iterate_reports_a_missing_dataset(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["iterate", str(tmp_path / "empty")])
    assert result.exit_code != 0 and "no class sub-folders" in result.output


def test_iterate_and_cache_build_refuse_a_dataset_root(
    fmnist_small: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    cache_dir = tmp_path / "cache"
    for args in (
        ["iterate", str(fmnist_small), "--epochs", "1", "--device", "cpu"],
        ["cache", "build", str(fmnist_small), str(cache_dir), "--variants", "1", "--no-progress"],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output and result.exception is not None
        assert result.output.startswith(f"Error: {fmnist_small} looks like a dataset root")
        assert f"Give one split instead, e.g. {fmnist_small / 'train'}" in result.output
    assert not cache_dir.exists(), "no cache is made for a dataset root"


@pytest.mark.parametrize("corrupt", [b"\x00\x00\x08"])
def test_idx_reader_rejects_garbage(tmp_path: Path, corrupt: bytes) -> None:
    from dataplane.errors import DatasetError

    path = tmp_path / "bad-idx3-ubyte"
    path.write_bytes(corrupt)
    with pytest.raises(DatasetError, match="not an IDX file|truncated"):
        read_idx(path)


def _commands_section(group: click.Group, width: int) -> str:
    ctx = click.Context(group, info_name="dataplane", terminal_width=width, max_content_width=width)
    formatter = ctx.make_formatter()
    group.format_commands(ctx, formatter)
    return formatter.getvalue()


def _loaded_commands() -> dict[str, click.Command]:
    return {name: ep.load() for name, ep in cli._command_entry_points().items()}


def test_help_lists_each_command_with_its_own_short_help() -> None:
    loaded = _loaded_commands()
    assert "cache      Inspect, verify, clear and build augmented-sample caches." in (
        _commands_section(main, 80)
    )
    eager = click.Group("dataplane", commands=loaded)
    for width in (50, 80, 200):  # shortened as click shortens the loaded commands' help
        listed = _commands_section(main, width)
        assert listed == _commands_section(eager, width)
        assert "(from " not in listed
    assert set(cli.COMMAND_SUMMARIES) == set(loaded), "a summary per entry point, no more"
    for name, command in loaded.items():  # the kept summaries cannot drift from the commands
        assert cli.COMMAND_SUMMARIES[name] == command.get_short_help_str(limit=10**6), name


def test_help_imports_no_command() -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from dataplane.cli import main\n"
        "result = CliRunner().invoke(main, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'trainers', 'placement', 'logs_analysis', 'torch', 'distributed'}))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('dataplane.', 'cache.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    rooms, modules = done.stdout.splitlines()[-2:]
    assert rooms == "[]"
    for module in ("dataplane.cache_cli", "dataplane.ingest", "dataplane.iterate"):
        assert repr(module) not in modules


def test_help_imports_a_command_without_a_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    summaries = dict(cli.COMMAND_SUMMARIES)
    del summaries["iterate"]
    monkeypatch.setattr(cli, "COMMAND_SUMMARIES", summaries)
    points = dict(cli._command_entry_points())
    points["broken"] = EntryPoint("broken", "no_such_module_xyz:command", cli.ENTRY_POINT_GROUP)
    monkeypatch.setattr(cli, "_command_entry_points", lambda: points)
    listed = _commands_section(main, 200)
    assert "iterate    Iterate DATA (image folder or Parquet) and print images/s" in listed
    assert "broken     (the 'broken' command could not be imported (No module named" in listed
