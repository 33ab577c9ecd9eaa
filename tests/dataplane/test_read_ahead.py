"""Read-ahead of encoded bytes: the next batch is read on a helper thread while DALI
decodes, each sample is read once per epoch, and order and content are unchanged."""

from __future__ import annotations

import gc
import threading
import time
from collections import Counter
from pathlib import Path

from dataplane import Loader
from dataplane.sources import ImageFolderSource
from tests.dataplane.helpers import batch_keys, identity_recipe


class CountingSource:
    """An image folder that records which thread read each index."""

    def __init__(self, root: Path) -> None:
        self._inner = ImageFolderSource(root)
        self.num_classes = self._inner.num_classes
        self.reads: Counter[int] = Counter()
        self.threads: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._inner)

    def read(self, index: int) -> bytes:
        with self._lock:
            self.reads[index] += 1
            self.threads[threading.current_thread().name.split("_")[0]] += 1
        return self._inner.read(index)

    def label(self, index: int) -> int:
        return self._inner.label(index)

    def labels(self):  # type: ignore[no-untyped-def]
        return self._inner.labels()

    def describe(self, index: int) -> str:
        return self._inner.describe(index)

    def fingerprint(self) -> str:
        return self._inner.fingerprint()


def test_next_batch_is_read_ahead_once_and_order_is_unchanged(fmnist_small: Path) -> None:
    data = fmnist_small / "train"
    counting = CountingSource(data)
    ahead = Loader(counting, recipe=identity_recipe(), batch_size=32, shuffle=True, seed=3,
                   device="cpu")
    plain = Loader(data, recipe=identity_recipe(), batch_size=32, shuffle=True, seed=3,
                   device="cpu")
    for epoch in range(2):
        ahead.set_epoch(epoch)
        plain.set_epoch(epoch)
        got = [batch_keys(x) for x, _ in ahead]
        assert got == [batch_keys(x) for x, _ in plain]
        assert set(counting.reads.values()) == {epoch + 1}, "each sample read once per epoch"
        assert len(counting.reads) == len(counting)
    # All batches but the first of each pass come from the read-ahead thread.
    assert counting.threads["dataplane-read-ahead"] >= 2 * (len(counting) - 32)


def test_early_break_releases_the_read_ahead_thread(fmnist_small: Path) -> None:
    loader = Loader(fmnist_small / "train", recipe=identity_recipe(), batch_size=16, device="cpu")
    for i, _ in enumerate(loader):
        if i == 2:
            break
    loader.close()
    gc.collect()
    for _ in range(100):
        if not any(t.name.startswith("dataplane-read-ahead") for t in threading.enumerate()):
            break
        time.sleep(0.05)
    assert not any(t.name.startswith("dataplane-read-ahead") for t in threading.enumerate())
