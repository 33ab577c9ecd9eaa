"""``dataplane ingest`` and ``dataplane iterate`` on real Fashion-MNIST."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

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


@pytest.mark.parametrize("corrupt", [b"\x00\x00\x08"])
def test_idx_reader_rejects_garbage(tmp_path: Path, corrupt: bytes) -> None:
    from dataplane.errors import DatasetError

    path = tmp_path / "bad-idx3-ubyte"
    path.write_bytes(corrupt)
    with pytest.raises(DatasetError, match="not an IDX file|truncated"):
        read_idx(path)
