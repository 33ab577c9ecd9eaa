"""The structural check of encoded images (``dataplane.validate.check_encoded``):
truncated JPEGs whose EXIF thumbnail is intact, real JPEGs with and without
trailing bytes, and PNG headers with a bad checksum."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from dataplane import DataError
from dataplane.validate import check_encoded
from tests.dataplane.helpers import cpu_loader, folder

EOI = b"\xff\xd9"
SOS = b"\xff\xda"
TRUNCATED = "truncated JPEG (no end-of-image marker after the main image's data)"


def jpeg(side: int, seed: int = 0) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def with_exif_thumbnail(main: bytes, thumbnail: bytes) -> bytes:
    """``main`` with an APP1 (EXIF) segment holding ``thumbnail`` after its SOI marker.

    The EXIF data is an empty big-endian TIFF directory followed by the thumbnail,
    a whole JPEG with its own SOI ... SOS ... EOI, as cameras write them.
    """
    tiff = b"MM\x00\x2a\x00\x00\x00\x08" + b"\x00\x00" + b"\x00\x00\x00\x00"
    payload = b"Exif\x00\x00" + tiff + thumbnail
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    return main[:2] + app1 + main[2:]


def has_thumbnail(data: bytes) -> bool:
    """Whether an end-of-image marker comes before the file's last one (an embedded JPEG)."""
    return data.find(EOI) < len(data) - 2


# -- JPEG -----------------------------------------------------------------------------------


def test_a_jpeg_cut_in_its_image_data_is_truncated_even_with_an_intact_thumbnail() -> None:
    data = with_exif_thumbnail(jpeg(64), jpeg(8, seed=1))
    assert check_encoded(data) is None
    assert has_thumbnail(data)
    thumbnail_end = data.find(EOI) + 2
    main_scan = data.rfind(SOS)
    assert thumbnail_end < main_scan
    scan_data = main_scan + 2 + int.from_bytes(data[main_scan + 2 : main_scan + 4], "big")
    for cut in range(scan_data, len(data) - 1, 97):
        assert check_encoded(data[:cut]) == TRUNCATED, cut
    assert check_encoded(data[:-1]) == TRUNCATED


def test_a_jpeg_cut_before_its_image_data_says_so() -> None:
    data = with_exif_thumbnail(jpeg(64), jpeg(8, seed=1))
    thumbnail_end = data.find(EOI) + 2
    assert check_encoded(data[: thumbnail_end + 4]) == (
        "truncated JPEG (no image data after its headers)"
    )
    main = jpeg(16)
    assert check_encoded(main[:40]) == "truncated JPEG (no image data after its headers)"


def test_bytes_after_the_end_of_image_marker_are_accepted() -> None:
    data = with_exif_thumbnail(jpeg(32), jpeg(8, seed=1))
    for trailer in (b"\0\0appended metadata\n", SOS + b"\x00\x0c not a scan", SOS, b"\xff"):
        assert check_encoded(data + trailer) is None, trailer


def test_real_jpegs_pass_and_their_truncations_do_not(opencv_jpegs: list[Path]) -> None:
    thumbnails = []
    for path in opencv_jpegs:
        data = path.read_bytes()
        assert check_encoded(data) is None, path
        assert check_encoded(data + b"\0\0" + SOS + b"trailing bytes") is None, path
        if data[:2] == b"\xff\xd8" and has_thumbnail(data):
            thumbnails.append(data)
    if not thumbnails:
        pytest.skip("no JPEG with an embedded thumbnail among the real photos")
    for data in thumbnails:
        for fraction in (0.5, 0.9, 0.999):
            cut = data[: int(len(data) * fraction)]
            if cut.rfind(SOS) > cut.find(EOI):  # cut inside the main image's data
                assert check_encoded(cut) == TRUNCATED


def test_the_loader_reports_a_truncated_jpeg_with_a_thumbnail_before_dali_sees_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    data = with_exif_thumbnail(jpeg(32), jpeg(8, seed=1))
    root = folder(tmp_path / "d", {"a/0.jpg": data, "b/1.jpg": data[: len(data) - 300]})
    loader = cpu_loader(root, batch_size=2, size=16, channels=3)
    with pytest.raises(DataError, match=r"cannot decode sample 1 .*1\.jpg.*: truncated JPEG \(no"):
        list(loader)
    assert "Premature end of JPEG" not in capfd.readouterr().err


# -- PNG --------------------------------------------------------------------------------------


def png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8)).save(out, format="PNG")
    return out.getvalue()


def test_a_png_header_with_a_bad_checksum_is_a_malformed_png() -> None:
    data = bytearray(png())
    assert data[12:16] == b"IHDR"
    data[29] ^= 0xFF  # the first byte of IHDR's CRC
    reason = check_encoded(bytes(data))
    assert reason is not None and reason.startswith("malformed PNG: ")
    assert "bad header checksum in b'IHDR'" in reason


def test_a_file_of_no_known_format_is_still_named_so() -> None:
    assert check_encoded(b"GIF87 not quite") == "not a recognised image format"
    assert check_encoded(b"plain text, no image\n" * 4) == "not a recognised image format"
