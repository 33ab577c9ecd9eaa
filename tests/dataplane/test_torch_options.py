"""torch ``DataLoader`` options on a Loader: mapped where the meaning carries over, refused with
the equivalent named where it does not, ``TypeError`` for any other name."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

from dataplane import ConfigError, LastBatchPolicy, Loader
from tests.dataplane.helpers import tiny_folder


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return tiny_folder(tmp_path / "tiny")  # 12 images


def loader_of(data: Path, **kwargs: Any) -> Loader:
    kwargs.setdefault("batch_size", 5)
    return Loader(data, recipe="eval", device="cpu", **kwargs)


def test_a_torch_one_line_swap_works(tiny: Path) -> None:
    loader = loader_of(
        tiny,
        shuffle=True,
        num_workers=2,
        pin_memory=True,
        drop_last=True,
        prefetch_factor=3,
        persistent_workers=True,
    )
    assert (loader.config.num_threads, loader.config.prefetch) == (2, 3)
    assert loader.config.last_batch is LastBatchPolicy.DROP and loader.drop_last
    assert len(loader) == 2
    assert [len(y) for _, y in loader] == [5, 5]
    assert len(loader.dataset) == 12 and loader.dataset is loader.source


@pytest.mark.parametrize(
    ("options", "policy"),
    [
        ({"drop_last": True}, LastBatchPolicy.DROP),
        ({"drop_last": False}, LastBatchPolicy.PARTIAL),
        ({}, LastBatchPolicy.PARTIAL),
        ({"drop_last": True, "last_batch": "drop"}, LastBatchPolicy.DROP),
        ({"drop_last": False, "last_batch": "pad"}, LastBatchPolicy.PAD),
    ],
)
def test_drop_last_maps_to_last_batch(
    tiny: Path, options: dict[str, Any], policy: LastBatchPolicy
) -> None:
    loader = loader_of(tiny, **options)
    assert loader.config.last_batch is policy
    assert loader.drop_last is (policy is LastBatchPolicy.DROP)


def test_drop_last_conflicting_with_last_batch_is_refused(tiny: Path) -> None:
    with pytest.raises(ConfigError, match=r"drop_last=True conflicts with last_batch='partial'"):
        loader_of(tiny, drop_last=True, last_batch="partial")
    with pytest.raises(ConfigError, match=r"drop_last=False conflicts with last_batch='drop'"):
        loader_of(tiny, drop_last=False, last_batch=LastBatchPolicy.DROP)
    with pytest.raises(ConfigError, match="drop_last must be True, False or None"):
        loader_of(tiny, drop_last=1)


def test_num_workers_sets_the_dali_threads(tiny: Path) -> None:
    assert loader_of(tiny, num_workers=3).config.num_threads == 3
    assert loader_of(tiny, num_workers=0).config.num_threads == 1, "0 workers: 1 thread"
    assert loader_of(tiny, num_workers=2, num_threads=2).config.num_threads == 2
    with pytest.raises(ConfigError, match="num_workers=4 conflicts with num_threads=2"):
        loader_of(tiny, num_workers=4, num_threads=2)
    with pytest.raises(ConfigError, match="num_workers must be >= 0"):
        loader_of(tiny, num_workers=-1)


def test_prefetch_factor_sets_prefetch(tiny: Path) -> None:
    assert loader_of(tiny).config.prefetch == 2
    assert loader_of(tiny, prefetch_factor=4).config.prefetch == 4
    with pytest.raises(ConfigError, match="prefetch_factor=4 conflicts with prefetch=1"):
        loader_of(tiny, prefetch_factor=4, prefetch=1)


def test_pin_memory_and_persistent_workers_are_checked(tiny: Path) -> None:
    with pytest.raises(ConfigError, match="pin_memory must be True or False"):
        loader_of(tiny, pin_memory="yes")
    with pytest.raises(ConfigError, match="persistent_workers.*pipelines already persist"):
        loader_of(tiny, persistent_workers=1)


def test_pin_memory_pins_cpu_batches_when_cuda_is_present(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned: list[torch.Tensor] = []

    def fake_pin(tensor: torch.Tensor) -> torch.Tensor:  # pinning needs a real CUDA device
        out = tensor.clone()
        pinned.append(out)
        return out

    no_cuda = loader_of(tiny, pin_memory=True)
    assert sum(len(y) for _, y in no_cuda) == 12, "without CUDA: no effect, as in torch"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    loader = loader_of(tiny, pin_memory=True)
    batches = list(loader)
    assert len(batches) == 3
    assert [id(t) for batch in batches for t in batch] == [id(t) for t in pinned]
    unpinned = loader_of(tiny)
    list(unpinned)
    assert len(pinned) == 6, "only pin_memory=True pins"


@pytest.mark.gpu
def test_pin_memory_yields_pinned_tensors_on_a_cuda_machine(tiny: Path) -> None:
    images, labels = next(iter(loader_of(tiny, pin_memory=True)))
    assert images.device.type == "cpu" and images.is_pinned() and labels.is_pinned()


@pytest.mark.parametrize(
    ("name", "value", "instead"),
    [
        ("sampler", [0, 1, 2], r"shuffle= and seed=.*rank= and world_size=.*set_epoch"),
        ("batch_sampler", [[0, 1]], r"batch_size=, shuffle= and drop_last="),
        ("collate_fn", lambda batch: batch, r"\(images, labels\) tensors.*training loop"),
        ("worker_init_fn", print, r"DALI threads"),
        ("generator", torch.Generator(), r"pass seed="),
        ("timeout", 5.0, r"no per-batch timeout"),
        ("multiprocessing_context", "spawn", r"num_threads= \(or num_workers=\)"),
        ("in_order", False, r"epoch's order"),
        ("pin_memory_device", "cuda", r"pin_memory=True"),
    ],
)
def test_torch_only_options_are_refused_naming_the_equivalent(
    tiny: Path, name: str, value: Any, instead: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^{name}= of torch's DataLoader has no.*; .*{instead}"):
        loader_of(tiny, **{name: value})


def test_every_dataloader_option_at_torchs_default_is_accepted(tiny: Path) -> None:
    parameters = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    defaults = {
        name: p.default
        for name, p in parameters.items()
        if name not in ("self", "dataset", "shuffle")  # torch's shuffle=None is no bool
    }
    assert {"sampler", "collate_fn", "timeout", "num_workers", "drop_last"} <= set(defaults)
    loader = loader_of(tiny, **defaults)
    assert (loader.batch_size, loader.config.num_threads, loader.drop_last) == (1, 1, False)
    assert sum(len(y) for _, y in loader) == 12
    loader_of(tiny, timeout=0.0)


def test_other_unknown_keywords_raise_type_error(tiny: Path) -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'bogus'") as info:
        loader_of(tiny, bogus=1)
    assert not isinstance(info.value, ConfigError)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'batchsize'"):
        loader_of(tiny, batchsize=4, sampler=[0])
