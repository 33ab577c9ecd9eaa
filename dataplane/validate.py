"""A cheap structural check of encoded images before they reach DALI.

DALI fails a whole batch on one undecodable image, and with DALI 2.4 such a
failure on the CPU can corrupt the process's memory (observed as segmentation
faults shortly after). So the producer checks each sample's *structure* first,
without decoding pixels: Pillow identifies the format and parses the header; for
PNG it verifies every chunk's CRC (catches truncation and garbled bytes); for
JPEG it also requires an end-of-image marker after the start-of-image one
(catches truncation; bytes after it, such as appended metadata, are allowed, as
decoders ignore them). A sample is checked once per loader (the result is
remembered).
"""

from __future__ import annotations

import io


def check_encoded(data: bytes) -> str | None:
    """Why ``data`` is not a well-formed encoded image, or ``None`` if it looks fine.

    Parameters
    ----------
    data : bytes
        An encoded image (PNG, JPEG, BMP, TIFF, PNM, WebP, JPEG 2000, ...).

    Returns
    -------
    str or None
        A short reason (e.g. ``"truncated PNG: ..."``), or ``None``.
    """
    from PIL import Image, UnidentifiedImageError

    if not data:
        return "empty file"
    try:
        with Image.open(io.BytesIO(data)) as image:
            fmt = image.format or "image"
            width, height = image.size
            if width <= 0 or height <= 0:
                return f"{fmt} with no pixels ({width}x{height})"
            if fmt == "JPEG" and data.rfind(b"\xff\xd9") <= 2:
                return "truncated JPEG (no end-of-image marker)"
            if fmt == "PNG":
                image.verify()
    except UnidentifiedImageError:
        return "not a recognised image format"
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        return f"malformed image: {exc}"
    return None
