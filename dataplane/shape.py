"""Output image shape (size, channels) inferred from a dataset's samples.

A Loader whose recipe does not fix ``size`` or ``channels`` (``recipe="train"``,
or ``make_recipe("train", ...)`` without them) takes them from a few samples'
headers; no pixels are decoded.
"""

from __future__ import annotations

import io

import numpy as np

from dataplane.errors import DatasetError, MixedImageSizeWarning, warn_user
from dataplane.sources import Source

#: Samples :func:`infer_image_shape` opens at most, spread over the dataset (plus the
#: first sample of each of up to as many classes).
SHAPE_PROBES = 16

#: Image modes that PIL reports for one-channel (grayscale) images.
_GRAY_MODES = frozenset({"1", "L", "I", "I;16", "F"})


def probe_indices(num_samples: int, labels: np.ndarray | None = None) -> list[int]:
    """Indices of the samples :func:`infer_image_shape` opens, sorted.

    Up to :data:`SHAPE_PROBES` samples spread evenly over the dataset (the first
    and last included) and the first sample of each of up to :data:`SHAPE_PROBES`
    classes, so that a class of other images (e.g. the only colour class) is seen.
    """
    n = int(num_samples)
    if n <= 0:
        return []
    probes = set(np.linspace(0, n - 1, num=min(n, SHAPE_PROBES)).round().astype(int).tolist())
    if labels is not None and labels.size:
        probes.update(np.unique(labels, return_index=True)[1][:SHAPE_PROBES].tolist())
    return sorted(probes)


def infer_image_shape(
    source: Source, labels: np.ndarray | None = None, *, warn_mixed_sizes: bool = True
) -> tuple[int, int]:
    """(size, channels) inferred from a few samples' headers (no pixels are decoded).

    Parameters
    ----------
    source : Source
        The dataset; the samples of :func:`probe_indices` are read.
    labels : numpy.ndarray, optional
        Label of every sample, to probe the first sample of each class too.
    warn_mixed_sizes : bool
        Issue :class:`~dataplane.errors.MixedImageSizeWarning` when the probed
        images differ in size (pass False when the size is not going to be used).

    Returns
    -------
    size : int
        Output side, in pixels: the **median shorter side** of the probed images
        that can be read (with an even count, the lower of the two middle values).
        It does not depend on the order of the samples, and one outlier does not
        move it: photos whose shorter sides range from 194 to 1110 px give a typical
        size, not the largest (a batch's memory grows with the square of the side)
        nor the smallest (one thumbnail would blur every image). Being the lower
        middle value, it is a probed image's own size, and at least half of the
        probed images are at least that large (they are scaled down, not up).
    channels : {1, 3}
        3 if any probed image is in colour, else 1.

    Raises
    ------
    DatasetError
        If none of the probed samples can be read as an image.

    Warns
    -----
    MixedImageSizeWarning
        When the probed images' shorter sides differ: the message gives their range
        and the size chosen, and says to pass ``size=`` to choose another.
    """
    from PIL import Image, UnidentifiedImageError

    probes = probe_indices(len(source), labels)
    shorter_sides: list[int] = []
    channels = 1
    for index in probes:
        try:
            with Image.open(io.BytesIO(source.read(index))) as image:
                width, height = image.size
                colour = image.mode not in _GRAY_MODES
        except (OSError, UnidentifiedImageError, ValueError):
            continue
        shorter_sides.append(min(width, height))
        if colour:
            channels = 3
    if not shorter_sides:
        raise DatasetError(
            f"cannot infer the image size: none of {len(probes)} samples spread over the "
            "dataset could be read as an image; pass size= and channels= to the Loader"
        )
    shorter_sides.sort()
    size = shorter_sides[(len(shorter_sides) - 1) // 2]
    low, high = shorter_sides[0], shorter_sides[-1]
    if warn_mixed_sizes and low != high:
        warn_user(
            f"the dataset's images differ in size: the shorter sides of {len(shorter_sides)} "
            f"samples probed range from {low} to {high} px; the output size is their median, "
            f"{size} px (every image is resized to it); pass size= to the Loader to choose "
            "the output size",
            MixedImageSizeWarning,
        )
    return size, channels
