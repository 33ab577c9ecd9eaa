"""The project's models: shapes, names, errors."""

from __future__ import annotations

import pytest
import torch

from trainers import MODEL_NAMES, TrainerConfigError, build_model


@pytest.mark.parametrize(
    ("name", "channels", "size"),
    [
        ("small-cnn", 1, 28),
        ("small-cnn", 3, 28),
        ("patchify-cnn", 3, 224),
        ("patchify-cnn", 1, 224),
        ("resnet18", 1, 28),
        ("resnet18", 3, 64),
    ],
)
def test_forward_gives_logits(name: str, channels: int, size: int) -> None:
    torch.manual_seed(0)
    model = build_model(name, 10, channels, image_size=size)
    out = model(torch.randn(2, channels, size, size))
    assert out.shape == (2, 10)
    out.sum().backward()  # differentiable end to end
    assert all(p.grad is not None for p in model.parameters())


def test_patchify_stem_is_kernel_equals_stride() -> None:
    model = build_model("patchify-cnn", 10, 3)
    stem = model.stem[0]
    assert stem.kernel_size == stem.stride == (16, 16)
    assert model.stem(torch.zeros(1, 3, 224, 224)).shape[-2:] == (14, 14)


def test_resnet18_stem_follows_image_size() -> None:
    small = build_model("resnet18", 10, 3, image_size=32)
    large = build_model("resnet18", 10, 3, image_size=224)
    assert small.stem[0].stride == (1, 1) and large.stem[0].stride == (2, 2)
    # ResNet-18 has 11.2M parameters with a 10-class head
    assert 11_000_000 < sum(p.numel() for p in large.parameters()) < 11_300_000


def test_names() -> None:
    assert set(MODEL_NAMES) == {"small-cnn", "patchify-cnn", "resnet18"}
    with pytest.raises(TrainerConfigError, match="unknown model 'vit'.*small-cnn"):
        build_model("vit", 10, 3)
    with pytest.raises(TrainerConfigError, match="in_channels must be 1"):
        build_model("small-cnn", 10, 4)
    with pytest.raises(TrainerConfigError, match="num_classes must be"):
        build_model("small-cnn", 1, 1)
