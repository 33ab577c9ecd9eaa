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
from tests.dataplane.conftest import SMALL


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


# -- the Loader's options, spelled one way in `iterate` and `cache build` ----------------
SHARED_LOADER_OPTIONS = (
    "--recipe", "--size", "--channels", "--batch-size", "--seed", "--device", "--threads",
    "--on-corrupt",
)


def _help_records(command: click.Command) -> dict[str, tuple[str, str]]:
    ctx = click.Context(command, info_name=command.name)
    records = {}
    for param in command.params:
        record = param.get_help_record(ctx)
        if record is not None:
            records[param.opts[0]] = record
    return records


def test_iterate_and_cache_build_spell_the_loaders_options_alike() -> None:
    from dataplane.cache_cli import build_command
    from dataplane.iterate import iterate_command

    iterate, build = _help_records(iterate_command), _help_records(build_command)
    for option in SHARED_LOADER_OPTIONS:  # same name, type, range, default and help
        assert iterate[option] == build[option], option
    assert "0<=x<=281474976710655" in iterate["--seed"][1]
    for records in (iterate, build):  # the old spelling works but is not listed
        assert all("--num-threads" not in spec for spec, _ in records.values())
    assert {"--last-batch", "--normalize"} <= set(iterate)
    for option in ("--variants", "--max-bytes"):  # the cache's, from one definition too
        assert iterate[option] == build[option], option


def test_cache_build_refuses_a_seed_of_2_to_the_48_before_starting(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    result = CliRunner().invoke(
        main, ["cache", "build", str(data), str(tmp_path / "c"), "--seed", str(2**48)]
    )
    assert result.exit_code == 2, result.output
    assert "'--seed'" in result.output and "0<=x<=281474976710655" in result.output
    assert not (tmp_path / "c").exists()


def test_iterate_takes_channels_threads_last_batch_and_no_normalize(fmnist_small: Path) -> None:
    runner = CliRunner()
    common = ["iterate", str(fmnist_small / "train"), "--epochs", "1", "--device", "cpu",
              "--batch-size", "64", "--channels", "3", "--last-batch", "drop", "--no-normalize"]
    for threads in (["--threads", "1"], ["--num-threads", "1"]):  # the old spelling too
        result = runner.invoke(main, [*common, *threads])
        assert result.exit_code == 0, result.output
        assert "recipe train 3x28x28, 1 DALI threads" in result.output
        assert "epoch 0: 4 batches, 256 images" in result.output  # 300 // 64 full batches


def _epoch_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("epoch")]


def test_iterate_limit_stops_each_epoch_after_n_batches(fmnist_small: Path) -> None:
    runner = CliRunner()
    common = ["iterate", str(fmnist_small / "train"), "--epochs", "2", "--device", "cpu",
              "--batch-size", "64", "--threads", "1"]
    result = runner.invoke(main, [*common, "--limit", "2"])
    assert result.exit_code == 0, result.output
    lines = _epoch_lines(result.output)
    assert len(lines) == 2
    assert all(line.startswith(f"epoch {e}: 2 batches (--limit 2 of 5), 128 images in ")
               for e, line in enumerate(lines)), lines
    whole = runner.invoke(main, [*common, "--limit", "5"])  # as many as the epoch has
    assert whole.exit_code == 0, whole.output
    assert all(", 300 images in " in line and "--limit" not in line
               for line in _epoch_lines(whole.output))
    refused = runner.invoke(main, [*common, "--limit", "0"])
    assert refused.exit_code == 2 and "'--limit'" in refused.output


def test_iterate_serves_through_the_cache(fmnist_small: Path, tmp_path: Path) -> None:
    from cache import CacheStore

    path = tmp_path / "c"
    result = CliRunner().invoke(
        main,
        ["iterate", str(fmnist_small / "train"), "--epochs", "2", "--device", "cpu",
         "--batch-size", "100", "--threads", "1", "--cache", str(path), "--variants", "1",
         "--max-bytes", "16M"],
    )
    assert result.exit_code == 0, result.output
    assert f"cache='{path}'" in result.output
    first, second = _epoch_lines(result.output)
    assert first.endswith(f"; cache variant 0: 0 hits, {SMALL} misses, {SMALL} filled")
    assert second.endswith(f"; cache variant 0: {SMALL} hits, 0 misses, 0 filled")
    with CacheStore.open_existing(path) as store:
        assert store.count() == SMALL and store.variants == 1
        assert store.info().max_bytes == 16 << 20


def test_iterate_takes_one_shard_as_a_rank_would(fmnist_small: Path) -> None:
    runner = CliRunner()
    common = ["iterate", str(fmnist_small / "train"), "--epochs", "1", "--device", "cpu",
              "--batch-size", "50", "--threads", "1"]
    result = runner.invoke(main, [*common, "--rank", "1", "--world-size", "2"])
    assert result.exit_code == 0, result.output
    assert "shard=1/2, batches=3" in result.output
    assert _epoch_lines(result.output) and ", 150 images in " in _epoch_lines(result.output)[0]
    for args, message in (
        (["--rank", "1"], "give both --rank and --world-size"),
        (["--world-size", "2"], "give both --rank and --world-size"),
        (["--rank", "2", "--world-size", "2"], "--rank 2 must be below --world-size 2"),
        (["--variants", "2"], "--variants applies to the cache: add --cache PATH"),
        (["--max-bytes", "1G"], "--max-bytes applies to the cache: add --cache PATH"),
    ):
        refused = runner.invoke(main, [*common, *args])
        assert refused.exit_code == 2, refused.output
        assert message in refused.output, refused.output


def test_iterate_names_the_device_option_when_cuda_is_missing(
    fmnist_small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import preprocessing.device

    monkeypatch.setattr(preprocessing.device, "torch_cuda_available", lambda: False)
    result = CliRunner().invoke(
        main, ["iterate", str(fmnist_small / "train"), "--epochs", "1", "--device", "cuda"]
    )
    assert result.exit_code == 1, result.output
    assert "--device cuda but torch sees no CUDA device; use --device cpu" in result.output
    assert "device='" not in result.output and "device=None" not in result.output


def _corrupt_one(folder: Path) -> Path:
    bad = sorted(folder.rglob("*.png"))[7]
    bad.write_bytes(bad.read_bytes()[:60])  # truncated PNG
    return bad


def test_cache_build_takes_on_corrupt_and_names_the_option(
    writable_copy: Path, tmp_path: Path
) -> None:
    bad = _corrupt_one(writable_copy)
    runner = CliRunner()
    build = ["cache", "build", str(writable_copy), str(tmp_path / "c"), "--variants", "1",
             "--max-bytes", "16M", "--device", "cpu", "--no-progress"]
    stopped = runner.invoke(main, build)
    assert stopped.exit_code == 1, stopped.output
    assert str(bad) in stopped.output
    assert "pass --on-corrupt skip to skip and count corrupt samples" in stopped.output
    assert "on_corrupt=" not in stopped.output
    skipped = runner.invoke(main, [*build, "--on-corrupt", "skip"])
    assert skipped.exit_code == 0, skipped.output
    assert f"records {SMALL - 1} / {SMALL}" in skipped.output
    assert skipped.output.count("Warning: skipped 1 corrupt or unreadable sample(s)") == 1
    assert str(bad) in skipped.output


def test_iterate_prints_skipped_samples_once_without_python_source(writable_copy: Path) -> None:
    bad = _corrupt_one(writable_copy)
    result = CliRunner().invoke(
        main,
        ["iterate", str(writable_copy), "--epochs", "2", "--device", "cpu", "--on-corrupt",
         "skip", "--batch-size", "64"],
    )
    assert result.exit_code == 0, result.output
    for epoch in (0, 1):
        line = f"Warning: skipped 1 corrupt or unreadable sample(s) in epoch {epoch}: "
        assert result.output.count(line) == 1, result.output
    assert result.output.count(str(bad)) == 2
    assert "CorruptSampleWarning" not in result.output and ".py:" not in result.output
    assert "last_epoch_stats" not in result.output, "the Python API is not the CLI's"


def test_iterate_prints_an_empty_class_folder_as_a_warning(writable_copy: Path) -> None:
    (writable_copy / "zz_empty").mkdir()
    result = CliRunner().invoke(
        main, ["iterate", str(writable_copy), "--epochs", "1", "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("Warning: class folder zz_empty") == 1, result.output
    assert "EmptyClassWarning" not in result.output and ".py:" not in result.output


def test_cache_info_says_full_when_the_writers_stopped_admitting(tmp_path: Path) -> None:
    from cache import CacheConfig, CacheStore, FillMode
    from tests.cache import helpers

    path = tmp_path / "c"
    shape = (3, 96, 96)  # 28 KiB records, written 16 at a time: 1 MiB holds about 33
    with CacheStore(
        CacheConfig(path, variants=1, max_bytes=1 << 20, fill=FillMode.INLINE),
        helpers.identity(shape=shape),
    ) as store:
        written = helpers.fill_until_full(store, 16)
        assert not store.admitting
    runner = CliRunner()
    doc = json.loads(runner.invoke(main, ["cache", "info", "--json", str(path)]).output)
    assert (doc["records"], doc["full"], doc["state"]) == (written, True, "full")
    text = runner.invoke(main, ["cache", "info", str(path)]).output
    assert "full         yes" in text
