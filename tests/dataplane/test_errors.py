"""Bad input: corrupt images, missing or empty datasets, bad labels, bad options."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dataplane import ConfigError, DataError, DatasetError, Loader
from dataplane.errors import CorruptSampleWarning
from dataplane.sources import ImageFolderSource
from tests.dataplane.conftest import SMALL
from tests.dataplane.helpers import identity_recipe


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(0)
    data[8:] = rng.integers(0, 256, len(data) - 8, dtype=np.uint8).tobytes()  # keep PNG magic
    path.write_bytes(bytes(data))


def tree_digest(root: Path) -> dict[str, tuple[int, int, str]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            st = p.stat()
            out[str(p)] = (st.st_size, st.st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
    return out


def test_the_package_exports_its_errors() -> None:
    import dataplane
    from dataplane import errors

    defined = [
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, Warning | errors.DataplaneError)
        and value.__module__ == errors.__name__
    ]
    assert {"DatasetRootError", "IngestConflictError", "CorruptSampleWarning"} <= set(defined)
    for name in defined:  # every error and warning of the package, importable from its top
        assert getattr(dataplane, name) is getattr(errors, name), name
        assert name in dataplane.__all__, name
    assert dataplane.StaleCacheError is errors.StaleCacheError
    assert issubclass(dataplane.DatasetRootError, dataplane.DatasetError)
    assert dataplane.__all__ == sorted(dataplane.__all__)
    assert all(getattr(dataplane, name, None) is not None for name in dataplane.__all__)
    namespace: dict[str, object] = {}
    exec("from dataplane import *", namespace)
    assert namespace["DatasetRootError"] is errors.DatasetRootError


def test_corrupt_image_raises_data_error_naming_file_and_index(writable_copy: Path) -> None:
    source = ImageFolderSource(writable_copy)
    bad = 37
    truncate(Path(source.describe(bad)))
    loader = Loader(writable_copy, recipe="train", batch_size=32, device="cpu")
    with pytest.raises(DataError, match=r"sample 37 .*on_corrupt='skip'") as info:
        for _ in loader:
            pass
    assert info.value.index == bad
    assert info.value.path == source.describe(bad)
    assert source.describe(bad) in str(info.value)


def test_batches_before_the_corrupt_one_are_delivered(writable_copy: Path) -> None:
    source = ImageFolderSource(writable_copy)
    garble(Path(source.describe(100)))  # batch 3 of 32
    loader = Loader(writable_copy, recipe=identity_recipe(), batch_size=32, device="cpu")
    delivered = 0
    with pytest.raises(DataError) as info:
        for _ in loader:
            delivered += 1
    assert delivered == 3
    assert info.value.index == 100


def test_skip_policy_skips_counts_and_reports_at_epoch_end(writable_copy: Path) -> None:
    source = ImageFolderSource(writable_copy)
    bad = {5, 150, 151}
    truncate(Path(source.describe(5)))
    garble(Path(source.describe(150)))
    Path(source.describe(151)).write_bytes(b"")
    loader = Loader(
        writable_copy,
        recipe="train",
        batch_size=32,
        device="cpu",
        shuffle=True,
        on_corrupt="skip",
    )
    with pytest.warns(CorruptSampleWarning, match="skipped 3 corrupt"):
        total = sum(len(x) for x, _ in loader)
    assert total == SMALL - 3
    stats = loader.last_epoch_stats
    assert stats is not None and stats.complete
    assert stats.num_skipped == 3
    assert {s.index for s in stats.skipped} == bad
    assert all(s.path == source.describe(s.index) for s in stats.skipped)
    assert stats.batches == len(loader), "batch count unchanged"


SKIP_ONE = """
import sys
from dataplane import Loader
loader = Loader(sys.argv[1], batch_size=64, device="cpu", num_threads=1, on_corrupt="skip")
for images, labels in loader:  # the user's loop
    pass
"""


def test_skipped_samples_are_printed_once_at_the_users_loop(writable_copy: Path) -> None:
    """With logging not configured, the message reaches stderr once (as the warning,
    not also through logging's last-resort handler), and a warning filter silences it."""
    truncate(Path(ImageFolderSource(writable_copy).describe(5)))
    message = "skipped 1 corrupt or unreadable sample(s) in epoch 0"

    def stderr(*flags: str) -> str:
        done = subprocess.run(
            [sys.executable, *flags, "-c", SKIP_ONE, str(writable_copy)],
            capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    printed = stderr()
    assert printed.count(message) == 1, printed
    assert f"<string>:5: CorruptSampleWarning: {message}" in printed, "at the user's loop"
    assert message not in stderr("-W", "ignore")


def test_unreadable_file_is_a_data_error_or_skipped(writable_copy: Path) -> None:
    loader = Loader(writable_copy, recipe="train", batch_size=50, device="cpu")
    gone = Path(loader.source.describe(60))
    gone.unlink()
    with pytest.raises(DataError, match="cannot read sample 60") as info:
        for _ in loader:
            pass
    assert info.value.path == str(gone)
    skipping = Loader(
        writable_copy.parent / "train",
        recipe="train",
        batch_size=50,
        device="cpu",
        on_corrupt="skip",
        size=28,
        channels=1,
    )
    # Built after the deletion, the folder simply has one image fewer.
    assert len(skipping.source) == SMALL - 1


def _list_with_a_missing_file(folder: Path, missing: Path) -> list[tuple[str, int]]:
    """40 (path, label) pairs of ``folder``, with ``missing`` (no such file) at index 7."""
    source = ImageFolderSource(folder)
    items = [(source.describe(i), source.label(i)) for i in range(40)]
    items.insert(7, (str(missing), 0))
    return items


def test_a_missing_file_of_a_list_is_refused_or_skipped_and_counted(
    fmnist_small: Path, tmp_path: Path
) -> None:
    items = _list_with_a_missing_file(fmnist_small / "train", tmp_path / "gone.png")
    with pytest.raises(
        DatasetError,
        match=r"1 file\(s\) of the file list do not exist, e.g. .*gone.png; fix the paths or "
        r"remove those entries, or pass on_corrupt='skip'",
    ):
        Loader(items, batch_size=16, device="cpu")
    loader = Loader(items, batch_size=16, device="cpu", num_threads=1, on_corrupt="skip")
    with pytest.warns(
        CorruptSampleWarning,
        match=r"skipped 1 corrupt or unreadable sample\(s\) in epoch 0: 7 \(.*gone.png\)",
    ):
        total = sum(len(x) for x, _ in loader)
    assert total == 40
    stats = loader.last_epoch_stats
    assert stats is not None and [s.index for s in stats.skipped] == [7]
    assert stats.skipped[0].reason.startswith("unreadable")
    assert stats.batches == len(loader) == 3, "batch count unchanged"


def test_a_missing_file_of_a_list_is_skipped_through_the_cache(
    fmnist_small: Path, tmp_path: Path
) -> None:
    from dataplane import CacheConfig

    items = _list_with_a_missing_file(fmnist_small / "train", tmp_path / "gone.png")
    loader = Loader(
        items,
        batch_size=16,
        device="cpu",
        num_threads=1,
        on_corrupt="skip",
        cache=CacheConfig(tmp_path / "cache", variants=1),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptSampleWarning)
        for _ in range(2):  # fill, then serve
            assert sum(len(x) for x, _ in loader) == 40
            stats = loader.last_epoch_stats
            assert stats is not None and [s.index for s in stats.skipped] == [7]
    assert loader.cache_stats is not None and loader.cache_stats.hits == 40
    loader.close()


def test_reading_never_writes_to_the_dataset(writable_copy: Path) -> None:
    truncate(Path(ImageFolderSource(writable_copy).describe(3)))
    before = tree_digest(writable_copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptSampleWarning)
        for _ in Loader(writable_copy, batch_size=64, device="cpu", on_corrupt="skip"):
            pass
    with pytest.raises(DataError):
        for _ in Loader(writable_copy, batch_size=64, device="cpu"):
            pass
    assert tree_digest(writable_copy) == before


def test_missing_and_empty_datasets(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist.*ingest"):
        Loader(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no class sub-folders"):
        Loader(tmp_path / "empty")
    (tmp_path / "empty" / "cat").mkdir()
    (tmp_path / "empty" / "cat" / "notes.txt").write_text("not an image")
    with pytest.raises(DatasetError, match="no images found"):
        Loader(tmp_path / "empty")
    with pytest.raises(DatasetError, match="empty"):
        Loader([])


class _BadLabels:
    """A custom source whose labels exceed its class count."""

    num_classes = 10

    def __init__(self, inner: ImageFolderSource) -> None:
        self._inner = inner

    def __len__(self) -> int:
        return 20

    def read(self, index: int) -> bytes:
        return self._inner.read(index)

    def label(self, index: int) -> int:
        return 12 if index == 7 else 1

    def describe(self, index: int) -> str:
        return self._inner.describe(index)

    def fingerprint(self) -> str:
        return "x"


def test_labels_out_of_range(fmnist_small: Path) -> None:
    source = ImageFolderSource(fmnist_small / "train")
    with pytest.raises(DatasetError, match=r"label 12 of sample 7 .*out of range 0\.\.9"):
        Loader(_BadLabels(source), size=28, channels=1)
    items = [(source.describe(0), 0), (source.describe(1), 5)]
    with pytest.raises(DatasetError, match="label 5 .*num_classes=3"):
        from dataplane.sources import FileListSource

        FileListSource(items, num_classes=3)
    with pytest.raises(DatasetError, match="negative"):
        Loader([(source.describe(0), -1)])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": "256"}, r"batch_size must be an int, not str '256'"),
        ({"batch_size": 0}, r"batch_size must be >= 1"),
        ({"shuffle": "yes"}, "shuffle must be True or False"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"last_batch": "bogus"}, r"last_batch='bogus' is not valid; use one of 'drop'"),
        ({"on_corrupt": "ignore"}, r"on_corrupt='ignore' is not valid; use one of 'raise', 'skip'"),
        ({"rank": 1}, "give both rank= and world_size="),
        ({"rank": 2, "world_size": 2}, r"rank=2 must be < world_size=2"),
        ({"num_threads": 0}, "num_threads must be >= 1"),
        ({"prefetch": 1.5}, "prefetch must be an int"),
        ({"recipe": 3}, "recipe must be a name"),
        ({"recipe": "nope"}, "unknown recipe 'nope'; available: eval, train"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
        ({"size": "28"}, "size must be an int"),
        ({"channels": 2}, "channels must be 1 .* or 3"),
        ({"producer": 5}, "producer must be a factory"),
        ({"normalize": "no"}, r"normalize must be True .* or False \(uint8 images\)"),
    ],
)
def test_wrong_arguments_name_the_fix(fmnist_small: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Loader(fmnist_small / "train", **kwargs)


def test_wrong_data_type(fmnist_small: Path) -> None:
    with pytest.raises(ConfigError, match="data must be a dataset path"):
        Loader(42)


def test_file_deleted_while_read_ahead_is_skipped_in_order(writable_copy: Path) -> None:
    # Sample 130 lies in the third batch, whose bytes are read ahead while the second
    # is fed: its failure is reported with that batch, and every other sample arrives.
    loader = Loader(
        writable_copy, recipe=identity_recipe(), batch_size=50, device="cpu", on_corrupt="skip"
    )
    Path(loader.source.describe(130)).unlink()
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptSampleWarning)
        for _images, labels in loader:
            seen.append(len(labels))
    stats = loader.last_epoch_stats
    assert [s.index for s in stats.skipped] == [130]
    assert stats.skipped[0].reason.startswith("unreadable")
    assert sum(seen) == SMALL - 1 and seen[2] == 49
