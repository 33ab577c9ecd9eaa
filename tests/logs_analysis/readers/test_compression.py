"""Event-log codecs (:mod:`logs_analysis.readers.compression`) on streams built byte by byte:
how each codec's headers, concatenated streams, corrupt bytes and cuts are read."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest
import xxhash

from logs_analysis.errors import FormatError, TruncatedStreamError
from logs_analysis.readers.compression import (
    LZ4_BLOCK_MAGIC,
    LZ4_BLOCK_SEED,
    SNAPPY_JAVA_MAGIC,
    Codec,
    iter_lines,
    open_decompressed,
    sniff_codec,
)

DATA = b"".join(b'{"Event": "SparkListenerTaskEnd", "n": %d}\n' % i for i in range(1500))
RAW, LZ4 = 0x10, 0x20  # lz4-java's block methods


def _lz4_header(method: int, clen: int, dlen: int, check: int, level: int = 4) -> bytes:
    return LZ4_BLOCK_MAGIC + struct.pack("<BiiI", method | level, clen, dlen, check)


def _lz4_block(raw: bytes, method: int = LZ4) -> bytes:
    body = pa.compress(raw, codec="lz4_raw", asbytes=True) if method == LZ4 else raw
    check = xxhash.xxh32_intdigest(raw, seed=LZ4_BLOCK_SEED) & 0x0FFFFFFF
    return _lz4_header(method, len(body), len(raw), check) + body


LZ4_END = _lz4_header(RAW, 0, 0, 0, level=0)


def _lz4_stream(data: bytes, method: int = LZ4, block: int = 4096) -> bytes:
    blocks = (_lz4_block(data[i : i + block], method) for i in range(0, len(data), block))
    return b"".join(blocks) + LZ4_END


def _snappy_stream(data: bytes, block: int = 8192) -> bytes:
    out = bytearray(SNAPPY_JAVA_MAGIC + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block):
        comp = pa.compress(data[start : start + block], codec="snappy", asbytes=True)
        out += struct.pack(">i", len(comp)) + comp
    return bytes(out)


def _decode(path: Path) -> tuple[bytes, Exception | None]:
    """The bytes decoded from ``path`` and the error that stopped the decoding (or None)."""
    _, chunks = open_decompressed(path)
    out = bytearray()
    try:
        for chunk in chunks:
            out += chunk
    except FormatError as exc:
        return bytes(out), exc
    return bytes(out), None


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "head, name, codec",
    [
        (b"\x28\xb5\x2f\xfd\x00", "app", Codec.ZSTD),
        (LZ4_BLOCK_MAGIC + b"\x24", "app", Codec.LZ4),
        (SNAPPY_JAVA_MAGIC, "app", Codec.SNAPPY),
        (b"\x1f\x8b\x08", "app", Codec.GZIP),
        (b"ZV\x00\x10xx", "app", Codec.LZF),  # LZF's magic and a binary byte
        (b"ZV\x00\x10xx", "app.inprogress", Codec.LZF),  # an extension of no codec
        (b"ZVersion 2\n", "app", Codec.NONE),  # text that starts like LZF's magic
        (b"ZV2, 3\n", "app", Codec.NONE),
        (b'{"Event": "SparkListenerLogStart"}', "app", Codec.NONE),
    ],
)
def test_a_codec_is_known_by_its_leading_bytes(head: bytes, name: str, codec: Codec) -> None:
    assert sniff_codec(head, name) is codec
    assert str(codec) == codec.value


def test_lz4_raw_and_compressed_blocks_and_concatenated_streams_decode(tmp_path: Path) -> None:
    half = len(DATA) // 2
    # a raw stream then a compressed one, as lz4-java writes when blocks do not compress
    stream = _lz4_stream(DATA[:half], RAW) + _lz4_stream(DATA[half:], LZ4)
    assert _decode(_write(tmp_path, "app.lz4", stream)) == (DATA, None)


@pytest.mark.parametrize(
    "method, clen, dlen, level",
    [
        (LZ4, -1, 100, 4),  # a negative length
        (LZ4, 100, -1, 4),
        (LZ4, 0, 100, 4),  # one length 0 and the other not
        (LZ4, 100, 0, 4),
        (RAW, 0, 100, 4),
        (LZ4, 100, 2048, 0),  # more than the 1 KiB block its token declares
        (RAW, 100, 99, 4),  # a raw block is stored as is: both lengths are equal
    ],
)
def test_a_corrupt_lz4_header_is_refused_before_its_lengths_are_used(
    tmp_path: Path, method: int, clen: int, dlen: int, level: int
) -> None:
    block = _lz4_block(DATA[:4096])
    path = _write(tmp_path, "app.lz4", block + _lz4_header(method, clen, dlen, 0, level) + block)
    data, error = _decode(path)
    assert data == DATA[:4096]  # the block before is kept
    assert type(error) is FormatError  # corrupt, not cut short
    assert f"{path}: corrupt LZ4Block header" in str(error)
    assert f"compressed length {clen}, length {dlen}" in str(error)


def test_an_lz4_end_mark_with_a_checksum_is_corrupt(tmp_path: Path) -> None:
    stream = _lz4_block(DATA[:4096]) + _lz4_header(RAW, 0, 0, 12345, level=0)
    data, error = _decode(_write(tmp_path, "app.lz4", stream))
    assert data == DATA[:4096]
    assert type(error) is FormatError and "checksum mismatch" in str(error)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:21] + b"\xff" * (len(b) - 21), "corrupt LZ4 block: "),  # undecodable
        (lambda b: b[:17] + b"\x00\x00\x00\x00" + b[21:], "checksum mismatch"),
        (lambda b: b[:8] + b"\x34" + b[9:], "method 0x30 is not known"),
        (lambda b: b"LZ4Blox!" + b[8:], "bad block magic b'LZ4Blox!'"),
    ],
)
def test_a_corrupt_lz4_block_is_named_after_the_blocks_before(
    tmp_path: Path, damage: object, message: str
) -> None:
    first = _lz4_block(DATA[:4096])
    second = damage(_lz4_block(DATA[4096:8192]))  # type: ignore[operator]
    path = _write(tmp_path, "app.lz4", first + second + LZ4_END)
    data, error = _decode(path)
    assert data == DATA[:4096]
    assert type(error) is FormatError and message in str(error) and str(path) in str(error)


@pytest.mark.parametrize("into_second", [3, 8 + 5, 21 + 10], ids=["magic", "header", "body"])
def test_an_lz4_stream_cut_short_yields_its_whole_blocks_then_says_truncated(
    tmp_path: Path, into_second: int
) -> None:
    first = _lz4_block(DATA[:4096])
    stream = first + _lz4_block(DATA[4096:8192])
    data, error = _decode(_write(tmp_path, "app.lz4", stream[: len(first) + into_second]))
    assert data == DATA[:4096]
    assert isinstance(error, TruncatedStreamError) and "truncated" in str(error)


def test_lz4_bytes_after_a_block_that_are_no_magic_are_corrupt_not_cut(tmp_path: Path) -> None:
    stream = _lz4_block(DATA[:4096]) + b"XY"  # short, but not the start of a block magic
    data, error = _decode(_write(tmp_path, "app.lz4", stream))
    assert data == DATA[:4096]
    assert type(error) is FormatError and "bad block magic b'XY'" in str(error)


def test_snappy_concatenated_streams_decode(tmp_path: Path) -> None:
    half = len(DATA) // 2
    stream = _snappy_stream(DATA[:half]) + _snappy_stream(DATA[half:])
    assert _decode(_write(tmp_path, "app.snappy", stream)) == (DATA, None)


@pytest.mark.parametrize("cut", [10, 16 + 2, 16 + 4 + 50], ids=["header", "length", "chunk"])
def test_a_snappy_stream_cut_short_says_truncated(tmp_path: Path, cut: int) -> None:
    stream = _snappy_stream(DATA[:8192]) + _snappy_stream(DATA[8192:16384])[16:]
    first = len(_snappy_stream(DATA[:8192]))
    end = cut if cut < 16 else first + cut - 16
    data, error = _decode(_write(tmp_path, "app.snappy", stream[:end]))
    assert data == (DATA[:8192] if cut >= 16 else b"")
    assert isinstance(error, TruncatedStreamError)


@pytest.mark.parametrize(
    "chunk, message",
    [
        (struct.pack(">i", -5) + b"\x00" * 64, "corrupt snappy chunk (length -5)"),
        (struct.pack(">i", 6) + b"\x80" * 5 + b"\x01", "bad length prefix"),
        (struct.pack(">i", 8) + b"\x20" + b"\xff" * 7, "corrupt snappy chunk: "),
    ],
    ids=["negative length", "length prefix", "chunk data"],
)
def test_a_corrupt_snappy_chunk_is_named_after_the_chunks_before(
    tmp_path: Path, chunk: bytes, message: str
) -> None:
    path = _write(tmp_path, "app.snappy", _snappy_stream(DATA[:8192]) + chunk)
    data, error = _decode(path)
    assert data == DATA[:8192]
    assert type(error) is FormatError and message in str(error) and str(path) in str(error)


def test_lines_are_split_across_chunks_and_the_last_one_is_kept() -> None:
    chunks = iter([b"a\nb", b"c", b"\n\nd"])
    assert list(iter_lines(chunks)) == [b"a", b"bc", b"", b"d"]
