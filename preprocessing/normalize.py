"""Normalization of a recipe's uint8 output, in torch, on the target device."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from preprocessing.recipe import Recipe

if TYPE_CHECKING:
    import torch


@functools.lru_cache(maxsize=32)
def _scale_shift(
    mean: tuple[float, ...], std: tuple[float, ...], device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    m = torch.tensor(mean, dtype=torch.float32)
    s = torch.tensor(std, dtype=torch.float32)
    scale = (1.0 / (255.0 * s)).view(1, -1, 1, 1).to(device)
    shift = (m / s).view(1, -1, 1, 1).to(device)
    return scale, shift


def normalize(images: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """Normalize a batch of uint8 NCHW images: ``(x / 255 - mean) / std``.

    Parameters
    ----------
    images : torch.Tensor
        uint8, shape ``(N, C, H, W)`` with ``C == recipe.channels``, on any device.
    recipe : Recipe
        Supplies ``mean`` and ``std`` (fractions of 255).

    Returns
    -------
    torch.Tensor
        float32, same shape and device.
    """
    import torch

    if images.dim() != 4 or images.shape[1] != recipe.channels:
        raise ValueError(
            f"normalize expects uint8 NCHW with C={recipe.channels}, got shape "
            f"{tuple(images.shape)}"
        )
    scale, shift = _scale_shift(recipe.mean or (), recipe.std or (), str(images.device))
    out = images.to(torch.float32)
    out.mul_(scale).sub_(shift)
    return out
