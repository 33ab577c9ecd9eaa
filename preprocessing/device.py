"""Where a recipe's DALI pipeline runs: CPU-only or on a CUDA GPU.

``Device.CPU`` runs DALI in CPU-only mode (``device_id=None``, decoders on
``"cpu"``); ``Device.CUDA`` decodes with ``"mixed"`` (nvJPEG/nvImageCodec) and
runs the augmentations on the GPU. :func:`resolve_device` turns a user's choice
(``"cpu"``, ``"cuda"``, a :class:`Device` or ``None`` for "CUDA when available")
into a :class:`Device`.
"""

from __future__ import annotations

import enum

from preprocessing.errors import DeviceError


class Device(str, enum.Enum):
    """Execution device of a recipe pipeline."""

    CPU = "cpu"
    CUDA = "cuda"

    @property
    def decoder_device(self) -> str:
        """DALI ``device`` argument of the image decoder (``"cpu"`` or ``"mixed"``)."""
        return "cpu" if self is Device.CPU else "mixed"


def cuda_available() -> bool:
    """Whether torch sees a CUDA device."""
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(device: Device | str | None) -> Device:
    """Turn a user's device choice into a :class:`Device`.

    Parameters
    ----------
    device : Device, {"cpu", "cuda"} or None
        ``None`` picks :attr:`Device.CUDA` when ``torch.cuda.is_available()``,
        else :attr:`Device.CPU`.

    Raises
    ------
    DeviceError
        For an unknown name, or ``"cuda"`` on a machine without CUDA.
    """
    if device is None:
        return Device.CUDA if cuda_available() else Device.CPU
    if isinstance(device, Device):
        resolved = device
    elif isinstance(device, str):
        try:
            resolved = Device(device.lower())
        except ValueError:
            raise DeviceError(
                f"unknown device {device!r}; use 'cpu', 'cuda' or None (CUDA when available)"
            ) from None
    else:
        raise DeviceError(
            f"device must be 'cpu', 'cuda', a preprocessing.Device or None, "
            f"not {type(device).__name__} {device!r}"
        )
    if resolved is Device.CUDA and not cuda_available():
        raise DeviceError(
            "device='cuda' but torch sees no CUDA device; use device='cpu' "
            "(or device=None to pick CUDA only when available)"
        )
    return resolved
