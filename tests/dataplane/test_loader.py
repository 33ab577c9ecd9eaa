"""The Loader's semantics on real DALI pipelines and real Fashion-MNIST PNGs."""

from __future__ import annotations

import gc
import os
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from dataplane import ConfigError, LastBatchPolicy, Loader
from dataplane.sources import ImageFolderSource
from tests.dataplane.conftest import SMALL
from tests.dataplane.helpers import batch_keys, decoded_keys, identity_recipe


@pytest.fixture(scope="module")
def train_dir(fmnist_small: Path) -> Path:
    return fmnist_small / "train"


@pytest.fixture(scope="module")
def all_keys(train_dir: Path) -> Counter[str]:
    source = ImageFolderSource(train_dir)
    return decoded_keys(source.read(i) for i in range(len(source)))


def identity_loader(data, **kwargs) -> Loader:  # type: ignore[no-untyped-def]
    kwargs.setdefault("batch_size", 64)
    kwargs.setdefault("device", "cpu")
    return Loader(data, recipe=identity_recipe(), **kwargs)


def flat(batches: list[list[str]]) -> list[str]:
    return [k for batch in batches for k in batch]


def test_default_usage_yields_normalized_float_nchw_and_int64_labels(train_dir: Path) -> None:
    loader = Loader(train_dir, batch_size=128, recipe="train", shuffle=True, seed=0, device="cpu")
    assert (loader.recipe.size, loader.recipe.channels) == (28, 1), "inferred from the PNGs"
    images, labels = next(iter(loader))
    assert images.dtype == torch.float32 and images.shape == (128, 1, 28, 28)
    assert labels.dtype == torch.int64 and labels.shape == (128,)
    assert images.device.type == "cpu"
    assert -1.0 <= float(images.min()) and float(images.max()) <= 1.0  # mean 0.5, std 0.5
    assert set(labels.tolist()) <= set(range(10))
    loader.close()


def test_normalization_is_exact(train_dir: Path) -> None:
    from PIL import Image

    from preprocessing import make_recipe

    recipe = make_recipe(identity_recipe(), mean=(0.2860,), std=(0.3530,))
    loader = Loader(train_dir, recipe=recipe, batch_size=8, device="cpu")
    images, labels = next(iter(loader))
    source = loader.source
    expected = np.stack(
        [np.asarray(Image.open(source.describe(i)), dtype=np.float64)[None] for i in range(8)]
    )
    expected = (expected / 255.0 - 0.2860) / 0.3530
    np.testing.assert_allclose(images.numpy(), expected, rtol=0, atol=1e-5)
    assert labels.tolist() == [source.label(i) for i in range(8)]


def test_normalize_false_yields_the_decoded_uint8_pixels(train_dir: Path) -> None:
    from PIL import Image

    loader = Loader(
        train_dir, recipe=identity_recipe(), batch_size=8, device="cpu", normalize=False
    )
    images, labels = next(iter(loader))
    assert images.dtype == torch.uint8 and images.shape == (8, 1, 28, 28)
    source = loader.source
    expected = np.stack([np.asarray(Image.open(source.describe(i)))[None] for i in range(8)])
    np.testing.assert_array_equal(images.numpy(), expected)
    assert labels.tolist() == [source.label(i) for i in range(8)]
    loader.close()


class _ReusingProducer:
    """Yields every batch in one reused buffer, marked ``shared`` (pixel value: index % 251)."""

    def __init__(self, context, requests) -> None:  # type: ignore[no-untyped-def]
        self.context, self.requests = context, list(requests)

    def __iter__(self):  # type: ignore[no-untyped-def]
        from dataplane.producer import ProducedBatch

        r = self.context.recipe
        buffer = torch.empty(
            (self.context.batch_size, r.channels, r.size, r.size), dtype=torch.uint8
        )
        for request in self.requests:
            n = request.indices.size
            buffer[:n] = torch.from_numpy(request.indices % 251).to(torch.uint8).view(-1, 1, 1, 1)
            yield ProducedBatch(request.position, buffer[:n], request.indices, shared=True)

    def close(self) -> None:
        pass


def test_normalize_false_copies_batches_a_producer_marks_shared(train_dir: Path) -> None:
    loader = Loader(
        train_dir, batch_size=64, recipe="train", device="cpu", normalize=False,
        producer=_ReusingProducer,
    )
    kept = [images for images, _ in loader]
    planned = list(loader.plan.batches(0, 0))
    assert len(kept) == len(planned) > 1
    for images, indices in zip(kept, planned, strict=True):
        expected = torch.from_numpy(indices % 251).to(torch.uint8)
        assert torch.equal(images[:, 0, 0, 0], expected), "each kept batch holds its own pixels"
    loader.close()


@pytest.mark.parametrize(
    ("policy", "batch_size", "expected_len", "last"),
    [
        (LastBatchPolicy.DROP, 64, SMALL // 64, 64),
        (LastBatchPolicy.PARTIAL, 64, -(-SMALL // 64), SMALL % 64),
        (LastBatchPolicy.PAD, 64, -(-SMALL // 64), 64),
        ("partial", 100, 3, 100),
    ],
)
def test_len_and_last_batch_policy(
    train_dir: Path, policy: LastBatchPolicy | str, batch_size: int, expected_len: int, last: int
) -> None:
    loader = identity_loader(train_dir, batch_size=batch_size, last_batch=policy)
    sizes = [len(x) for x, _ in loader]
    assert len(loader) == expected_len == len(sizes)
    assert sizes[-1] == last
    assert all(s == batch_size for s in sizes[:-1])


def test_every_sample_exactly_once_and_order_by_seed_and_epoch(
    train_dir: Path, all_keys: Counter[str], keys_of
) -> None:  # type: ignore[no-untyped-def]
    loader = identity_loader(train_dir, shuffle=True, seed=3)
    epoch0 = flat(keys_of(loader))
    assert Counter(epoch0) == all_keys
    epoch1 = flat(keys_of(loader))  # the epoch advances by itself after a full pass
    assert Counter(epoch1) == all_keys
    assert epoch1 != epoch0, "a different order each epoch"
    loader.set_epoch(0)
    assert flat(keys_of(loader)) == epoch0, "same seed and epoch: same order"
    other = identity_loader(train_dir, shuffle=True, seed=4)
    assert flat(keys_of(other)) != epoch0, "another seed: another order"
    unshuffled = identity_loader(train_dir, shuffle=False)
    source = ImageFolderSource(train_dir)
    first = decoded_keys([source.read(0)])
    assert flat(keys_of(unshuffled))[0] in first


def test_explicit_shards_are_disjoint_complete_and_equal_length(
    train_dir: Path, all_keys: Counter[str], keys_of
) -> None:  # type: ignore[no-untyped-def]
    shards = [
        identity_loader(train_dir, batch_size=32, shuffle=True, seed=1, rank=r, world_size=3)
        for r in range(3)
    ]
    assert len({len(s) for s in shards}) == 1
    per_rank = [keys_of(s) for s in shards]
    assert all(len(batches) == len(shards[0]) for batches in per_rank)
    together = Counter(k for batches in per_rank for k in flat(batches))
    assert together == all_keys, "disjoint and complete (300 = 3 ranks x 100)"


def test_state_dict_resumes_with_exactly_the_remaining_batches(train_dir: Path, keys_of) -> None:  # type: ignore[no-untyped-def]
    reference = identity_loader(train_dir, batch_size=32, shuffle=True, seed=7)
    reference.set_epoch(2)
    full = keys_of(reference)

    loader = identity_loader(train_dir, batch_size=32, shuffle=True, seed=7)
    loader.set_epoch(2)
    it = iter(loader)
    seen = [batch_keys(next(it)[0]) for _ in range(4)]
    state = loader.state_dict()
    assert (state["epoch"], state["batches_done"]) == (2, 4)
    it.close()

    resumed = identity_loader(train_dir, batch_size=32, shuffle=True, seed=7)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # a training loop calls set_epoch again: the position is kept
    rest = keys_of(resumed)
    assert seen == full[:4]
    assert rest == full[4:]
    assert resumed.state_dict()["epoch"] == 3 and resumed.state_dict()["batches_done"] == 0


def test_load_state_dict_rejects_other_settings(train_dir: Path) -> None:
    state = identity_loader(train_dir, batch_size=32, shuffle=True).state_dict()
    other = identity_loader(train_dir, batch_size=64, shuffle=True)
    with pytest.raises(ConfigError, match="batch_size=32.*batch_size=64"):
        other.load_state_dict(state)
    with pytest.raises(ConfigError, match="state_dict"):
        other.load_state_dict({"epoch": 1})


def _native_threads() -> int:
    return psutil.Process().num_threads()


def test_breaking_out_of_the_loop_stops_cleanly(train_dir: Path) -> None:
    loader = identity_loader(train_dir, batch_size=16, prefetch=2)
    for _ in loader:  # warm up: torch/DALI create their lasting pools once
        pass
    loader.close()  # also releases the pipeline kept for the next epoch
    gc.collect()
    python_threads = set(threading.enumerate())
    native_threads = _native_threads()
    for i, _ in enumerate(loader):
        if i == 2:
            break
    during = iter(loader)
    next(during)
    assert _native_threads() > native_threads, "DALI workers run while iterating"
    assert any(t.name == "dataplane-producer" for t in threading.enumerate())
    del during
    gc.collect()
    assert set(threading.enumerate()) == python_threads
    assert _native_threads() == native_threads, "no DALI worker thread left behind"
    assert loader.state_dict()["batches_done"] == 1
    # The loader is still usable after an early stop.
    assert sum(len(x) for x, _ in loader) == SMALL


def test_completed_epochs_reuse_one_pipeline(train_dir: Path) -> None:
    loader = identity_loader(train_dir, batch_size=64)
    list(loader)
    gc.collect()
    after_one = (_native_threads(), set(threading.enumerate()))
    list(loader)
    list(loader)
    gc.collect()
    assert (_native_threads(), set(threading.enumerate())) == after_one


def test_num_threads_defaults_to_available_cores(train_dir: Path) -> None:
    loader = identity_loader(train_dir)
    assert loader.config.num_threads == len(os.sched_getaffinity(0))
    assert identity_loader(train_dir, num_threads=1).config.num_threads == 1


def test_parquet_dataset_yields_the_same_samples(
    fmnist_parquet: Path, all_keys: Counter[str], keys_of
) -> None:  # type: ignore[no-untyped-def]
    loader = identity_loader(fmnist_parquet / "train", shuffle=True)
    assert Counter(flat(keys_of(loader))) == all_keys


def test_file_list_input(train_dir: Path) -> None:
    source = ImageFolderSource(train_dir)
    items = [(source.describe(i), source.label(i)) for i in range(40)]
    loader = identity_loader(items, batch_size=16)
    labels = torch.cat([y for _, y in loader])
    assert labels.tolist() == [label for _, label in items]


def test_set_epoch_rejects_bad_values(train_dir: Path) -> None:
    loader = identity_loader(train_dir)
    with pytest.raises(ConfigError, match="epoch"):
        loader.set_epoch(-1)
