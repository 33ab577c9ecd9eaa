"""A cheap structural check of encoded images before they reach DALI.

DALI fails a whole batch on one undecodable image, and with DALI 2.4 such a
failure on the CPU can corrupt the process's memory (observed as segmentation
faults shortly after). So the producer checks each sample's *structure* first,
without decoding pixels: Pillow identifies the format and parses the header; for
PNG it verifies every chunk's CRC (catches truncation and garbled bytes); for
JPEG the check also requires an end-of-image marker (``FF D9``) after the start
of the main image's first scan, found by hopping over the header segments
(``FF xx`` + a 2-byte length each) from the start of the file (catches
truncation). Hopping matters: an EXIF thumbnail is a whole JPEG, with its own
end-of-image marker, inside the ``APP1`` segment, so a marker found anywhere in
the file says nothing of the main image. Inside entropy-coded data ``FF`` is
always followed by ``00`` or a restart marker (``D0``-``D7``), so an ``FF D9``
after the scan starts is a real marker. Bytes after the end-of-image marker,
such as appended metadata, are allowed, as decoders ignore them. A file that
Pillow does not recognise but that starts like a PNG or JPEG is reported as a
malformed one of those, with Pillow's reason (e.g. a bad checksum of the PNG
header). A sample is checked once per loader (the result is remembered).
"""

from __future__ import annotations

import io
import struct

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_EOI = b"\xff\xd9"
#: JPEG markers without a length field after them: TEM, RST0-RST7, SOI.
_STANDALONE_MARKERS = frozenset({0x01, *range(0xD0, 0xD9)})
_SOS, _EOI_BYTE = 0xDA, 0xD9
_NO_SCAN = "truncated JPEG (no image data after its headers)"
#: What the format plugins raise on malformed input (as :func:`PIL.Image.open` catches).
_PARSE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, struct.error)
#: What they raise (or wrap in a ``SyntaxError``) when a header field is cut off.
_CUT_OFF = (struct.error, IndexError, EOFError)


def _jpeg_scan_start(data: bytes) -> int | None:
    """Offset just past the header of the main image's first scan (``FF DA``).

    Hops from marker to marker by their length fields, so the segments it
    passes over (an EXIF thumbnail in ``APP1`` among them) are not searched.
    Bytes between segments that are not a marker are skipped, as Pillow does.

    Returns
    -------
    int or None
        The offset where the first scan's entropy-coded data starts (at most
        ``len(data)`` when the file ends in the scan header), or ``None`` when
        the file has no scan (it ends, or has its end-of-image marker, first).
    """
    size = len(data)
    pos = 2  # after the start-of-image marker
    while pos + 1 < size:
        if data[pos] != 0xFF:
            pos = data.find(b"\xff", pos)
            if pos < 0:
                return None
            continue
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte before the marker
            pos += 1
        elif marker == 0x00 or marker in _STANDALONE_MARKERS:
            pos += 2
        elif marker == _EOI_BYTE or pos + 4 > size:
            return None
        else:
            length = int.from_bytes(data[pos + 2 : pos + 4], "big")
            if marker == _SOS:
                return min(pos + 2 + length, size)
            pos += 2 + max(length, 2)
    return None


def _jpeg_reason(data: bytes) -> str | None:
    """Why the JPEG ``data`` (opened by Pillow) is truncated, or ``None``."""
    scan = _jpeg_scan_start(data)
    if scan is None:
        return _NO_SCAN
    if data.rfind(_EOI) < scan:
        return "truncated JPEG (no end-of-image marker after the main image's data)"
    return None


def _unidentified_reason(data: bytes) -> str:
    """Why Pillow recognised no format in ``data``: the reason of the PNG or JPEG
    reader when ``data`` starts like one of those (Pillow only says "cannot identify")."""
    from PIL import JpegImagePlugin, PngImagePlugin

    readers = (
        (_PNG_MAGIC, "PNG", PngImagePlugin.PngImageFile),
        (_JPEG_MAGIC, "JPEG", JpegImagePlugin.JpegImageFile),
    )
    if data.startswith(_JPEG_MAGIC) and _jpeg_scan_start(data) is None:
        return _NO_SCAN
    for magic, name, reader in readers:
        if data.startswith(magic):
            try:
                reader(io.BytesIO(data)).close()
            except _PARSE_ERRORS as exc:
                if isinstance(exc, _CUT_OFF) or isinstance(exc.__cause__, _CUT_OFF):
                    return f"truncated {name} (cut off in its header)"
                return f"malformed {name}: {exc}"
            return f"malformed {name}"
    return "not a recognised image format"


def check_encoded(data: bytes) -> str | None:
    """Why ``data`` is not a well-formed encoded image, or ``None`` if it looks fine.

    Parameters
    ----------
    data : bytes
        An encoded image (PNG, JPEG, BMP, TIFF, PNM, WebP, JPEG 2000, ...).

    Returns
    -------
    str or None
        A short reason (e.g. ``"malformed PNG: broken PNG file (bad header
        checksum in b'IHDR')"``), or ``None``.

    Examples
    --------
    A JPEG cut short inside its image data, even one whose EXIF thumbnail
    (which ends in an end-of-image marker of its own) is intact, gives
    ``"truncated JPEG (no end-of-image marker after the main image's data)"``.
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
            if fmt == "JPEG":
                return _jpeg_reason(data)
            if fmt == "PNG":
                image.verify()
    except UnidentifiedImageError:
        return _unidentified_reason(data)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        if data.startswith(_JPEG_MAGIC) and _jpeg_scan_start(data) is None:
            return _NO_SCAN  # cut off in a header segment
        return f"malformed image: {exc}"
    return None
