"""Where a recipe's DALI pipeline runs: CPU-only or on a CUDA GPU.

``Device.CPU`` runs DALI in CPU-only mode (``device_id=None``, decoders on
``"cpu"``); ``Device.CUDA`` decodes with ``"mixed"`` (nvJPEG/nvImageCodec) and
runs the augmentations on the GPU. :func:`resolve_device` turns a user's choice
(``"cpu"``, ``"cuda"``, a :class:`Device` or ``None`` for "CUDA when available")
into a :class:`Device`.

CUDA counts as available only when both sides see a device: torch (the batches
become CUDA tensors) and DALI (the pipeline runs there). They can disagree: a
torch built for another CUDA release, or a driver too old for the CUDA release
DALI was built for (``nvidia-dali-cuda130`` needs a CUDA 13 driver). Asking
torch alone would pick CUDA and fail later inside DALI's pipeline build.
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


def torch_cuda_available() -> bool:
    """Whether torch sees a CUDA device."""
    import torch

    return bool(torch.cuda.is_available())


def dali_cuda_devices() -> int:
    """The number of CUDA devices DALI sees (0 without a usable driver)."""
    from nvidia.dali import backend

    try:
        return int(backend.GetCUDADeviceCount())  # type: ignore[attr-defined]  # not in the stubs
    except RuntimeError:  # DALI raises when the driver cannot be initialised
        return 0


def cuda_available() -> bool:
    """Whether CUDA is usable for a recipe: torch and DALI both see a device."""
    return torch_cuda_available() and dali_cuda_devices() > 0


def resolve_device(device: Device | str | None) -> Device:
    """Turn a user's device choice into a :class:`Device`.

    Parameters
    ----------
    device : Device, {"cpu", "cuda"} or None
        ``None`` picks :attr:`Device.CUDA` when torch and DALI both see a CUDA
        device (:func:`cuda_available`), else :attr:`Device.CPU`.

    Raises
    ------
    DeviceError
        For an unknown name, or ``"cuda"`` where torch or DALI sees no CUDA
        device (the message says which).
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
    if resolved is Device.CUDA:
        if not torch_cuda_available():
            raise DeviceError(
                "device='cuda' but torch sees no CUDA device; use device='cpu' "
                "(or device=None to pick CUDA only when available)"
            )
        if dali_cuda_devices() == 0:
            raise DeviceError(
                "device='cuda' but DALI sees no CUDA device although torch does (is the "
                "driver new enough for the CUDA release of the installed nvidia-dali "
                "package?); install the nvidia-dali package for this driver's CUDA "
                "release, or use device='cpu'"
            )
    return resolved
