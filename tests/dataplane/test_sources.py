"""Sources: layout rules, detection, fingerprints and errors."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from dataplane import errors
from dataplane.errors import DatasetError
from dataplane.fingerprint import dataset_fingerprint, fingerprint_and_summary
from dataplane.sources import (
    EmptyClassWarning,
    FileListSource,
    ImageFolderSource,
    ParquetSource,
    Source,
    open_source,
)


def test_sources_satisfy_the_protocol(fmnist_small: Path, fmnist_parquet: Path) -> None:
    folder = open_source(fmnist_small / "train")
    parquet = open_source(fmnist_parquet / "train")
    listed = FileListSource([(folder.describe(0), 3)])
    for source in (folder, parquet, listed):
        assert isinstance(source, Source)
        assert source.read(0)[:4] == b"\x89PNG"
    assert isinstance(folder, ImageFolderSource) and isinstance(parquet, ParquetSource)
    assert listed.label(0) == 3 and listed.num_classes == 4


def test_image_folder_sorts_classes_and_ignores_other_files(
    tmp_path: Path, fmnist_small: Path
) -> None:
    src = ImageFolderSource(fmnist_small / "train")
    root = tmp_path / "ds"
    for cls, idx in (("b_cat", 0), ("a_dog", 1), ("a_dog", 2)):
        (root / cls).mkdir(parents=True, exist_ok=True)
        shutil.copy(src.describe(idx), root / cls / f"{idx}.PNG")
    (root / "a_dog" / "readme.txt").write_text("x")
    (root / ".hidden").mkdir()
    (root / "b_cat" / ".tmp.png").write_bytes(b"")
    source = ImageFolderSource(root)
    assert source.classes == ["a_dog", "b_cat"]
    assert [source.label(i) for i in range(len(source))] == [0, 0, 1]


def test_a_class_folder_without_images_is_kept_with_a_warning_naming_it(
    tmp_path: Path, fmnist_small: Path
) -> None:
    src = ImageFolderSource(fmnist_small / "train")
    root = tmp_path / "ds"
    for cls in ("a_cat", "c_dog"):
        (root / cls).mkdir(parents=True)
        shutil.copy(src.describe(0), root / cls / "0.png")
    (root / "b_empty").mkdir()
    (root / "b_empty" / "notes.txt").write_text("not an image")
    with pytest.warns(EmptyClassWarning) as caught:
        source = ImageFolderSource(root)
    message = str(caught[0].message)
    assert f"class folder b_empty (label 1) of {root} holds no images" in message
    assert "Remove a folder that is not a class, or add its images" in message
    assert caught[0].filename == __file__  # attributed to the caller's line
    assert source.classes == ["a_cat", "b_empty", "c_dog"] and source.num_classes == 3
    assert [source.label(i) for i in range(len(source))] == [0, 2]  # labels do not move
    (root / "d_empty").mkdir()
    with pytest.warns(
        EmptyClassWarning,
        match=r"2 of the 4 class folders of .* hold no images: "
        r"b_empty \(label 1\), d_empty \(label 3\); each stays a class",
    ):
        assert ImageFolderSource(root).num_classes == 4


def test_fingerprint_tracks_changes(tmp_path: Path, fmnist_small: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(fmnist_small / "train", root)
    first = dataset_fingerprint(ImageFolderSource(root))
    assert dataset_fingerprint(ImageFolderSource(root)) == first
    victim = Path(ImageFolderSource(root).describe(4))
    os.utime(victim, ns=(1, 1))
    touched = dataset_fingerprint(ImageFolderSource(root))
    assert touched != first
    victim.unlink()
    assert dataset_fingerprint(ImageFolderSource(root)) not in {first, touched}


def test_fingerprint_and_summary_in_one_pass(fmnist_small: Path, fmnist_parquet: Path) -> None:
    folder = ImageFolderSource(fmnist_small / "train")
    fingerprint, summary = fingerprint_and_summary(folder)
    # The fingerprint is the one caches already record: paths, sizes, mtimes, then labels.
    paths = [Path(folder.describe(i)) for i in range(len(folder))]
    h = xxhash.xxh3_128()
    for path in paths:
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    h.update(json.dumps(folder.labels().tolist(), sort_keys=True).encode())
    assert fingerprint == h.hexdigest() == folder.fingerprint()
    assert (summary.kind, summary.location) == ("image folder", str(fmnist_small / "train"))
    assert summary.num_classes == 10 and "modification times" in summary.covers
    assert summary.files is not None and summary.files.count == len(folder)
    assert summary.files.total_bytes == sum(p.stat().st_size for p in paths)
    assert summary.files.newest_mtime_ns == max(p.stat().st_mtime_ns for p in paths)

    parquet = ParquetSource(fmnist_parquet / "train")
    fingerprint, summary = fingerprint_and_summary(parquet)
    assert fingerprint == parquet.fingerprint()
    assert (summary.kind, summary.location) == ("Parquet", str(fmnist_parquet / "train"))
    files = sorted((fmnist_parquet / "train").rglob("*.parquet"))
    assert summary.files is not None and summary.files.count == len(files)
    assert summary.files.total_bytes == sum(p.stat().st_size for p in files)

    listed = FileListSource([(paths[0], 0), (paths[-1], 1)])
    fingerprint, summary = fingerprint_and_summary(listed)
    assert fingerprint == listed.fingerprint()
    assert summary.kind == "file list"
    assert summary.location == os.path.commonpath([str(paths[0].parent), str(paths[-1].parent)])

    class Custom:  # a source of the caller's own, with no summary of its own
        num_classes = 2

        def __len__(self) -> int:
            return 1

        def read(self, index: int) -> bytes:
            return b""

        def label(self, index: int) -> int:
            return 0

        def describe(self, index: int) -> str:
            return "mem"

        def fingerprint(self) -> str:
            return "custom-fingerprint"

    fingerprint, summary = fingerprint_and_summary(Custom())
    assert fingerprint == "custom-fingerprint"
    assert (summary.kind, summary.location, summary.files) == ("Custom", "", None)


def _parquet(path: Path, labels: list[int], images: list[bytes] | None = None) -> Path:
    images = images if images is not None else [b"x"] * len(labels)
    table = pa.table(
        {"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64())}
    )
    pq.write_table(table, path)
    return path


def test_parquet_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        ParquetSource(tmp_path / "missing.parquet")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(DatasetError, match=r"no \*\.parquet files"):
        ParquetSource(tmp_path / "empty_dir")
    bad = _parquet(tmp_path / "neg.parquet", [0, -2])
    with pytest.raises(DatasetError, match="negative"):
        ParquetSource(bad)
    good = _parquet(tmp_path / "ok.parquet", [0, 4])
    with pytest.raises(DatasetError, match="num_classes=3"):
        ParquetSource(good, num_classes=3)
    with pytest.raises(DatasetError, match="no column 'img'.*image_column="):
        ParquetSource(good, image_column="img")
    with pytest.raises(DatasetError, match="no column 'y'") as raised:
        ParquetSource(good, label_column="y")
    message = str(raised.value)
    assert "labels from column 'y': rename the file's columns to those" in message
    assert "or, from Python, name them with Loader(ParquetSource(" in message
    empty = _parquet(tmp_path / "none.parquet", [])
    with pytest.raises(DatasetError, match="no rows"):
        ParquetSource(empty)


def test_parquet_labels_that_are_not_integers_name_the_fix(tmp_path: Path) -> None:
    names = tmp_path / "names.parquet"
    pq.write_table(pa.table({"image": [b"a", b"b"], "label": ["shirt", "bag"]}), names)
    with pytest.raises(DatasetError) as raised:
        ParquetSource(names)
    message = str(raised.value)
    assert "must hold integer class indices, found names such as 'shirt'" in message
    assert "map each class name to its index 0..K-1" in message
    assert "write the column as int64" in message and "'class_names'" in message
    floats = tmp_path / "floats.parquet"
    pq.write_table(pa.table({"image": [b"a", b"b"], "label": [0.0, 1.0]}), floats)
    with pytest.raises(DatasetError, match="found float64; write the column as int64 class"):
        ParquetSource(floats)


def test_parquet_custom_columns_and_dataset_dir(tmp_path: Path) -> None:
    d = tmp_path / "ds"
    d.mkdir()
    pq.write_table(pa.table({"jpg": [b"a", b"b"], "cls": [1, 0]}), d / "part-0.parquet")
    pq.write_table(pa.table({"jpg": [b"c"], "cls": [2]}), d / "part-1.parquet")
    source = ParquetSource(d, image_column="jpg", label_column="cls")
    assert len(source) == 3 and source.num_classes == 3
    assert [source.read(i) for i in range(3)] == [b"a", b"b", b"c"]
    assert source.describe(2).endswith("part-1.parquet#0")


def test_open_source_rejects_other_files(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(DatasetError, match="not a .parquet file"):
        open_source(tmp_path / "x.csv")
    with pytest.raises(DatasetError, match="do not exist, e.g. .*nope.png; fix the paths"):
        FileListSource([(tmp_path / "nope.png", 0)])


def test_file_read_survives_short_reads(
    fmnist_small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = open_source(fmnist_small / "train")
    expected = Path(folder.describe(5)).read_bytes()
    real_read = os.read
    calls = []

    def short_read(fd: int, n: int) -> bytes:  # injected fault: at most 7 bytes per call
        calls.append(n)
        return real_read(fd, min(n, 7))

    monkeypatch.setattr("dataplane.sources.os.read", short_read)
    assert folder.read(5) == expected
    assert len(calls) >= len(expected) // 7


def test_file_read_of_a_missing_or_empty_file(tmp_path: Path) -> None:
    empty, gone = tmp_path / "empty.png", tmp_path / "gone.png"
    empty.write_bytes(b"")
    gone.write_bytes(b"x")
    listed = FileListSource([(str(empty), 0), (str(gone), 0)])
    gone.unlink()  # after the list was checked
    assert listed.read(0) == b""
    with pytest.raises(FileNotFoundError):
        listed.read(1)


def _copy_images(src: ImageFolderSource, folder: Path, indices: range) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in indices:
        shutil.copy(src.describe(i), folder / f"{i}.png")


def test_an_ingested_dataset_root_is_refused_naming_a_split(
    fmnist_small: Path, fmnist_parquet: Path
) -> None:
    # What `dataplane ingest` writes (train/, test/ and ingest.json): its splits are not
    # classes, and the rows of a Parquet root's splits are not one dataset.
    for opener in (open_source, ImageFolderSource):
        with pytest.raises(DatasetError, match="looks like a dataset root") as caught:
            opener(fmnist_small)
        message = str(caught.value)
        assert f"e.g. {fmnist_small / 'train'}" in message
        assert "ingest.json" in message and "its 2 splits would become 2 classes" in message
        assert isinstance(caught.value, errors.DatasetRootError)
        assert caught.value.splits == ("test", "train")
    for opener in (open_source, ParquetSource):
        with pytest.raises(DatasetError, match="rows of its splits would be merged") as caught:
            opener(fmnist_parquet)
        assert isinstance(caught.value, errors.DatasetRootError)
        assert f"e.g. {fmnist_parquet / 'train'}" in str(caught.value)


def test_split_folders_of_classes_are_refused_without_a_manifest(
    tmp_path: Path, fmnist_small: Path
) -> None:
    # Another tool's layout: split folders that hold class folders, no ingest.json.
    src = ImageFolderSource(fmnist_small / "train")
    root = tmp_path / "root"
    for split in ("train", "val"):
        for cls in ("a", "b"):
            _copy_images(src, root / split / cls, range(2))
    (root / ".cache").mkdir()  # hidden entries do not count
    with pytest.raises(DatasetError, match=r"sub-folders train, val are splits") as caught:
        open_source(root)
    assert f"e.g. {root / 'train'}" in str(caught.value)
    assert len(open_source(root / "val")) == 4
    only_test = tmp_path / "only-test"
    _copy_images(src, only_test / "Test" / "a", range(2))
    with pytest.raises(DatasetError, match=r"sub-folder Test is a split") as caught:
        ImageFolderSource(only_test)
    assert str(caught.value).endswith(f"e.g. {only_test / 'Test'}")


def test_image_folders_with_split_named_classes_still_open(
    tmp_path: Path, fmnist_small: Path
) -> None:
    src = ImageFolderSource(fmnist_small / "train")
    # Classes called train and test holding their images directly: a real image folder.
    direct = tmp_path / "direct"
    _copy_images(src, direct / "test", range(3))
    _copy_images(src, direct / "train", range(3, 5))
    source = open_source(direct)
    assert isinstance(source, ImageFolderSource)
    assert source.classes == ["test", "train"]
    assert [source.label(i) for i in range(5)] == [0, 0, 0, 1, 1]
    # A split name among other class names is a class like any other.
    mixed = tmp_path / "mixed"
    _copy_images(src, mixed / "train" / "nested", range(2))
    _copy_images(src, mixed / "zebra", range(2, 3))
    assert ImageFolderSource(mixed).classes == ["train", "zebra"]
    # Parquet files at the top of a folder with split-named sub-folders: one dataset.
    flat = tmp_path / "pq"
    (flat / "train").mkdir(parents=True)
    _parquet(flat / "part-0.parquet", [0, 1])
    _parquet(flat / "train" / "part-1.parquet", [1])
    assert len(ParquetSource(flat)) == 3
