"""Models defined in the project (no hub downloads).

Three families, each built by :func:`build_model` from a name:

``small-cnn``
    Four 3x3 convolutions (two stages with max-pooling) for 28x28 inputs such
    as Fashion-MNIST; trains at a few thousand images per second on two CPU
    cores.
``patchify-cnn``
    A stem convolution with ``kernel = stride = patch`` (16 by default) that
    turns a 224x224 image into a 14x14 grid of patch embeddings, then a few
    cheap residual blocks (depthwise 3x3 + pointwise 1x1, as in ConvMixer).
    Most of its cost is in the stem, so at 224x224 the input stage (JPEG
    decode and augmentation) is a large share of a training step.
``resnet18``
    A ResNet-18-style network (basic blocks, layers 2-2-2-2). For inputs of 64
    pixels or fewer the stem is a stride-1 3x3 convolution without max-pooling
    (the CIFAR variant); otherwise the 7x7 stride-2 stem with max-pooling.

Every model ends with global average pooling, so it accepts any input size at
least as large as its total stride. :func:`trainers.fit` works with any
:class:`torch.nn.Module`; these are conveniences.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from trainers.errors import TrainerConfigError

__all__ = ["MODEL_NAMES", "PatchifyCNN", "ResNet18", "SmallCNN", "build_model"]


def _conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    return [
        nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    ]


class SmallCNN(nn.Module):
    """A small CNN for 28x28 images (1 or 3 channels).

    Parameters
    ----------
    num_classes : int
        Number of output logits.
    in_channels : int
        Channels of the input images (1 for grayscale, 3 for RGB).
    width : int
        Channels of the first stage; the second stage has ``2 * width``.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, *, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *_conv_bn_relu(in_channels, width),
            *_conv_bn_relu(width, width),
            nn.MaxPool2d(2),
            *_conv_bn_relu(width, 2 * width),
            *_conv_bn_relu(2 * width, 2 * width),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class _MixerBlock(nn.Module):
    """Depthwise 3x3 (spatial mixing, residual) then pointwise 1x1 (channel mixing)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.spatial = nn.Sequential(
            nn.Conv2d(width, width, kernel_size=3, padding=1, groups=width, bias=False),
            nn.BatchNorm2d(width),
            nn.GELU(),
        )
        self.channel = nn.Sequential(
            nn.Conv2d(width, width, kernel_size=1, bias=False), nn.BatchNorm2d(width), nn.GELU()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.channel(x + self.spatial(x))


class PatchifyCNN(nn.Module):
    """A patchify-stem CNN for 224x224 images.

    Parameters
    ----------
    num_classes : int
        Number of output logits.
    in_channels : int
        Channels of the input images.
    patch : int
        Kernel size and stride of the stem convolution, in pixels (224 / 16 =
        a 14x14 grid).
    width : int
        Channels of the patch embeddings.
    depth : int
        Number of mixer blocks after the stem.
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        *,
        patch: int = 16,
        width: int = 64,
        depth: int = 3,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, kernel_size=patch, stride=patch, bias=False),
            nn.BatchNorm2d(width),
            nn.GELU(),
        )
        self.blocks = nn.Sequential(*[_MixerBlock(width) for _ in range(depth)])
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class _BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """A ResNet-18-style network (basic blocks, layers 2-2-2-2, widths 64-512).

    Parameters
    ----------
    num_classes : int
        Number of output logits.
    in_channels : int
        Channels of the input images.
    small_input : bool
        Use the stride-1 3x3 stem without max-pooling (for inputs of 64 pixels
        or fewer, such as 28x28 or 32x32); otherwise the 7x7 stride-2 stem and
        a 3x3 stride-2 max-pool (for 224x224).
    """

    def __init__(
        self, num_classes: int = 10, in_channels: int = 3, *, small_input: bool = False
    ) -> None:
        super().__init__()
        if small_input:
            stem: list[nn.Module] = [nn.Conv2d(in_channels, 64, 3, padding=1, bias=False)]
        else:
            stem = [nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)]
        stem += [nn.BatchNorm2d(64), nn.ReLU(inplace=True)]
        if not small_input:
            stem.append(nn.MaxPool2d(3, stride=2, padding=1))
        self.stem = nn.Sequential(*stem)
        layers: list[nn.Module] = []
        c_in = 64
        for i, c_out in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            layers += [_BasicBlock(c_in, c_out, stride), _BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.stem(x)))


_BUILDERS: dict[str, Callable[[int, int, int | None], nn.Module]] = {
    "small-cnn": lambda n, c, size: SmallCNN(n, c),
    "patchify-cnn": lambda n, c, size: PatchifyCNN(n, c),
    "resnet18": lambda n, c, size: ResNet18(n, c, small_input=size is not None and size <= 64),
}

#: Names accepted by :func:`build_model`.
MODEL_NAMES: tuple[str, ...] = tuple(_BUILDERS)


def build_model(
    name: str, num_classes: int, in_channels: int, *, image_size: int | None = None
) -> nn.Module:
    """Build one of the project's models by name.

    Parameters
    ----------
    name : str
        One of :data:`MODEL_NAMES` (``"small-cnn"``, ``"patchify-cnn"``,
        ``"resnet18"``).
    num_classes : int
        Number of output logits (at least 2).
    in_channels : int
        Channels of the input images (1 or 3).
    image_size : int, optional
        Side of the (square) input, in pixels; ``resnet18`` uses it to choose
        its stem (small inputs keep full resolution). Ignored by the others.

    Returns
    -------
    torch.nn.Module
        A freshly initialised model (seed torch first for reproducible weights).

    Raises
    ------
    TrainerConfigError
        Unknown name, or a class/channel count out of range.
    """
    if name not in _BUILDERS:
        raise TrainerConfigError(
            f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)} "
            "(or pass any torch.nn.Module to trainers.fit)"
        )
    if not isinstance(num_classes, int) or num_classes < 2:
        raise TrainerConfigError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if in_channels not in (1, 3):
        raise TrainerConfigError(
            f"in_channels must be 1 (grayscale) or 3 (RGB), got {in_channels!r}"
        )
    if image_size is not None and (not isinstance(image_size, int) or image_size < 1):
        raise TrainerConfigError(
            f"image_size must be a positive number of pixels, got {image_size!r}"
        )
    return _BUILDERS[name](num_classes, in_channels, image_size)
