"""Reading IDX files (the MNIST / Fashion-MNIST container format), gzip or plain.

Layout: two zero bytes, a type code (``0x08`` = uint8), the number of
dimensions, one big-endian uint32 per dimension, then the data in C order.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from dataplane.errors import DatasetError

_DTYPES: dict[int, DTypeLike] = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}

#: Fashion-MNIST class names, in label order.
FASHION_MNIST_CLASSES = (
    "t-shirt_top",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle_boot",
)


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (``.gz`` or plain) into a numpy array.

    Raises
    ------
    DatasetError
        If the file is missing or not a valid IDX file.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"IDX file {path} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as exc:
        raise DatasetError(f"cannot read IDX file {path}: {exc}") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DatasetError(f"{path} is not an IDX file (bad magic number)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"IDX file {path} is truncated (header)")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_DTYPES[raw[2]])
    count = int(np.prod(shape)) if shape else 0
    if len(raw) - header < count * dtype.itemsize:
        raise DatasetError(
            f"IDX file {path} is truncated: expected {count * dtype.itemsize} data bytes, "
            f"found {len(raw) - header}"
        )
    return np.frombuffer(raw, dtype=dtype, count=count, offset=header).reshape(shape)
