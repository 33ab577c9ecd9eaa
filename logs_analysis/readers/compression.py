"""Decompressing event-log streams: the codecs Spark writes event logs with.

Spark compresses event logs with ``spark.eventLog.compression.codec`` and names the file
``<name>.<codec>``. Each codec is recognised by its leading bytes (the extension only
confirms):

============  ====================================  =====================================
codec         leading bytes                         format
============  ====================================  =====================================
``zstd``      ``28 b5 2f fd``                       zstd frames (zstd-jni ``ZstdOutputStream``)
``lz4``       ``LZ4Block``                          lz4-java ``LZ4BlockOutputStream`` blocks
``snappy``    ``82 'SNAPPY' 00``                    snappy-java ``SnappyOutputStream`` chunks
``gzip``      ``1f 8b``                             gzip (not a Spark codec; accepted)
``lzf``       ``ZV``                                not supported: a clear :class:`FormatError`
(LZ4 frame)   ``04 22 4d 18``                       not supported (the ``lz4`` tool's format,
                                                    not Spark's): a clear :class:`FormatError`
============  ====================================  =====================================

Blocks are decoded with pyarrow's codecs (``zstd``, ``lz4_raw``, ``snappy``), so no extra
package is needed. A corrupt stream raises :class:`FormatError` naming the file; a stream
cut short (a file still being written, e.g. Spark's in-progress ``.zstd`` logs) raises
:class:`TruncatedStreamError` (a :class:`FormatError`) after yielding every byte decoded
before the cut, so readers can keep the complete lines and count the truncation.
"""

from __future__ import annotations

import enum
import io
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from logs_analysis.errors import FormatError, TruncatedStreamError

__all__ = [
    "LZ4_BLOCK_MAGIC",
    "LZ4_FRAME_MAGIC",
    "SNAPPY_JAVA_MAGIC",
    "Codec",
    "iter_lines",
    "open_decompressed",
    "sniff_codec",
]

LZ4_BLOCK_MAGIC = b"LZ4Block"
#: The LZ4 frame format's magic (the ``lz4`` command-line tool's files), not Spark's.
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
SNAPPY_JAVA_MAGIC = b"\x82SNAPPY\x00"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
LZF_MAGIC = b"ZV"
#: lz4-java's stream checksum seed (``LZ4BlockOutputStream.DEFAULT_SEED``).
LZ4_BLOCK_SEED = 0x9747B28C
# lz4-java's block methods (high nibble of the token) and the base of its block-size level
# (low nibble): a block holds at most 1 << (10 + level) decoded bytes
_LZ4_RAW = 0x10
_LZ4_COMPRESSED = 0x20
_LZ4_LEVEL_BASE = 10
_READ_SIZE = 1 << 20
#: Bytes asked of pyarrow's zstd stream per read. A read that meets the end of a truncated
#: stream raises and loses what it decoded (at most this much), so a cut stream is decoded a
#: second time to recover that tail (:func:`_zstd_tail`).
_ZSTD_READ_SIZE = 1 << 16


class Codec(str, enum.Enum):
    """Compression of an event-log file."""

    NONE = "none"
    ZSTD = "zstd"
    LZ4 = "lz4"
    SNAPPY = "snappy"
    GZIP = "gzip"
    LZF = "lzf"

    def __str__(self) -> str:
        return self.value


_EXTENSIONS = {
    ".zstd": Codec.ZSTD,
    ".zst": Codec.ZSTD,
    ".lz4": Codec.LZ4,
    ".snappy": Codec.SNAPPY,
    ".gz": Codec.GZIP,
    ".lzf": Codec.LZF,
}


def sniff_codec(head: bytes, path: str | Path = "") -> Codec:
    """The codec of a file from its first bytes (and, to confirm, its extension).

    Raises
    ------
    FormatError
        If the extension names a codec but the bytes do not start with its header, or the
        bytes are an LZ4 frame (the ``lz4`` tool's format, not the one Spark writes).
    """
    if head.startswith(LZ4_FRAME_MAGIC):
        raise FormatError(
            f"{path}: an LZ4 frame file (the lz4 tool's format), not the lz4-java LZ4Block "
            "stream Spark writes (spark.eventLog.compression.codec=lz4), the lz4 format read "
            "here; decompress it first (lz4 -d)"
        )
    if head.startswith(ZSTD_MAGIC):
        return Codec.ZSTD
    if head.startswith(LZ4_BLOCK_MAGIC):
        return Codec.LZ4
    if head.startswith(SNAPPY_JAVA_MAGIC):
        return Codec.SNAPPY
    if head.startswith(GZIP_MAGIC):
        return Codec.GZIP
    by_ext = _EXTENSIONS.get(Path(str(path)).suffix.lower())
    if by_ext is Codec.LZF or (
        by_ext is None and head.startswith(LZF_MAGIC) and not head[2:3].isalnum()
    ):
        return Codec.LZF
    if by_ext is not None:
        raise FormatError(
            f"{path}: named like a {by_ext.value}-compressed file but does not start with the "
            f"{by_ext.value} header ({head[:8]!r}); the file is truncated or not compressed "
            "this way: rename it or pass --format to read it as something else"
        )
    return Codec.NONE


def _read_exact(f: BinaryIO, n: int, path: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise TruncatedStreamError(
            f"{path}: compressed stream is truncated (wanted {n} bytes, got {len(data)})"
        )
    return data


def _lz4_blocks(f: BinaryIO, path: str) -> Iterator[bytes]:
    """Decode lz4-java ``LZ4BlockOutputStream`` blocks (21-byte header each)."""
    import xxhash

    while True:
        magic = f.read(len(LZ4_BLOCK_MAGIC))
        if not magic:
            return
        if len(magic) < len(LZ4_BLOCK_MAGIC) and LZ4_BLOCK_MAGIC.startswith(magic):
            raise TruncatedStreamError(f"{path}: LZ4Block stream is truncated (in a block header)")
        if magic != LZ4_BLOCK_MAGIC:
            raise FormatError(f"{path}: corrupt LZ4Block stream (bad block magic {magic!r})")
        token, clen, dlen, checksum = struct.unpack("<BiiI", _read_exact(f, 13, path))
        method = token & 0xF0
        if clen == 0 and dlen == 0 and checksum == 0:
            continue  # end mark; another stream may follow (concatenated)
        _check_lz4_header(method, 1 << (_LZ4_LEVEL_BASE + (token & 0x0F)), clen, dlen, path)
        data = _read_exact(f, clen, path)
        if method == _LZ4_RAW:
            out = data
        elif method == _LZ4_COMPRESSED:
            try:
                out = pa.decompress(data, decompressed_size=dlen, codec="lz4_raw", asbytes=True)
            except (pa.ArrowException, OSError) as exc:
                raise FormatError(f"{path}: corrupt LZ4 block: {exc}") from exc
        else:
            raise FormatError(
                f"{path}: LZ4Block method {method:#x} is not known (expected raw or LZ4)"
            )
        # lz4-java's Checksum view of xxHash32 keeps the low 28 bits
        if (xxhash.xxh32_intdigest(out, seed=LZ4_BLOCK_SEED) & 0x0FFFFFFF) != (
            checksum & 0x0FFFFFFF
        ):
            raise FormatError(f"{path}: LZ4 block checksum mismatch: the file is corrupt")
        yield out


def _check_lz4_header(method: int, block_size: int, clen: int, dlen: int, path: str) -> None:
    """Refuse a block header lz4-java's ``LZ4BlockInputStream`` refuses ("Stream is
    corrupted"): a negative length, one length 0 and the other not, a decoded length over
    the block size its token declares, or a raw block whose two lengths differ; so a corrupt
    header is named before its lengths are used to read or allocate."""
    if (
        clen < 0
        or dlen < 0
        or (clen == 0) != (dlen == 0)
        or dlen > block_size
        or (method == _LZ4_RAW and clen != dlen)
    ):
        raise FormatError(
            f"{path}: corrupt LZ4Block header (method {method:#x}, compressed length {clen}, "
            f"length {dlen}, block size {block_size})"
        )


def _snappy_varint(data: bytes, path: str) -> int:
    result = shift = 0
    for byte in data[:5]:
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
    raise FormatError(f"{path}: corrupt snappy chunk (bad length prefix)")


def _snappy_chunks(f: BinaryIO, path: str) -> Iterator[bytes]:
    """Decode snappy-java ``SnappyOutputStream`` chunks (16-byte stream header, then
    big-endian length-prefixed raw snappy chunks)."""
    _read_exact(f, 16, path)
    while True:
        prefix = f.read(4)
        if not prefix:
            return
        if len(prefix) != 4:
            raise TruncatedStreamError(f"{path}: snappy stream is truncated")
        if prefix == SNAPPY_JAVA_MAGIC[:4]:  # a concatenated stream's header
            _read_exact(f, 12, path)
            continue
        (n,) = struct.unpack(">i", prefix)
        if n < 0:
            raise FormatError(f"{path}: corrupt snappy chunk (length {n})")
        data = _read_exact(f, n, path)
        try:
            yield pa.decompress(
                data, decompressed_size=_snappy_varint(data, path), codec="snappy", asbytes=True
            )
        except (pa.ArrowException, OSError) as exc:
            raise FormatError(f"{path}: corrupt snappy chunk: {exc}") from exc


def _plain_chunks(f: BinaryIO, path: str, size: int = _READ_SIZE) -> Iterator[bytes]:
    try:
        while True:
            data = f.read(size)
            if not data:
                return
            yield data
    except (OSError, EOFError, pa.ArrowException) as exc:
        if _is_truncation(exc):
            raise TruncatedStreamError(f"{path}: compressed stream is truncated: {exc}") from exc
        raise FormatError(f"{path}: cannot decompress: {exc}") from exc


def _is_truncation(exc: BaseException) -> bool:
    return "truncated" in str(exc).lower()


def _zstd_chunks(path: str) -> Iterator[bytes]:
    """Decode zstd frames one after another with pyarrow's stream, yielding output as it is
    decoded; a stream cut short yields every byte decoded before the cut (see
    :func:`_zstd_tail`) before :class:`TruncatedStreamError`."""
    good = 0  # bytes decoded and yielded
    with pa.input_stream(path, compression="zstd") as stream:
        while True:
            try:
                data = stream.read(_ZSTD_READ_SIZE)
            except (OSError, EOFError, pa.ArrowException) as exc:
                if not _is_truncation(exc):
                    raise FormatError(f"{path}: cannot decompress: {exc}") from exc
                error = exc
                break
            if not data:
                return
            good += len(data)
            yield data
    tail = _zstd_tail(path, good)
    if tail:
        yield tail
    raise TruncatedStreamError(
        f"{path}: compressed stream is truncated (zstd frame without its end)"
    ) from error


def _zstd_tail(path: str, skip: int) -> bytes:
    """The bytes of a cut zstd stream decodable after its first ``skip`` ones.

    pyarrow's stream raises at the cut and drops what the failing read had decoded (at most
    :data:`_ZSTD_READ_SIZE` bytes), so the stream is decoded again: ``skip`` bytes in large
    reads, then one byte a read up to the cut, so no byte decoded before it is lost. Only cut
    streams pay for this: a second decode of the file, and at most :data:`_ZSTD_READ_SIZE`
    one-byte reads.
    """
    out: list[bytes] = []
    try:
        with pa.input_stream(path, compression="zstd") as stream:
            while skip > 0:
                data = stream.read(min(skip, _READ_SIZE))
                if not data:
                    return b""  # the file changed since the first decode
                skip -= len(data)
            for _ in range(_ZSTD_READ_SIZE):
                byte = stream.read(1)
                if not byte:
                    break
                out.append(byte)
    except (OSError, EOFError, pa.ArrowException):
        pass  # the cut (expected) or a file changed since the first decode
    return b"".join(out)


def _gzip_chunks(f: BinaryIO, path: str) -> Iterator[bytes]:
    """Decode gzip members one after another, yielding output as it is decoded (so a
    member cut short still yields its decodable part before :class:`TruncatedStreamError`)."""
    d = zlib.decompressobj(wbits=31)
    started = False  # the current member has input
    while True:
        data = f.read(_READ_SIZE)
        if not data:
            break
        while True:
            if not started:
                if not data.strip(b"\0"):
                    break  # zero padding after the last member (as gzip accepts)
                started = True
            try:
                out = d.decompress(data, _READ_SIZE)
            except zlib.error as exc:
                raise FormatError(f"{path}: cannot decompress: corrupt gzip data ({exc})") from exc
            if out:
                yield out
            if d.eof:  # member done; another may follow (concatenated)
                data = d.unused_data
                d = zlib.decompressobj(wbits=31)
                started = False
                if not data:
                    break
            elif d.unconsumed_tail:
                data = d.unconsumed_tail
            elif len(out) == _READ_SIZE:
                data = b""  # output may still be pending for the input given
            else:
                break
    if started:
        raise TruncatedStreamError(
            f"{path}: compressed stream is truncated (gzip member without its end)"
        )


def open_decompressed(path: str | Path) -> tuple[Codec, Iterator[bytes]]:
    """Open ``path`` and return its codec and an iterator over its decompressed bytes.

    Raises
    ------
    FormatError
        For LZF (not supported) and for corrupt streams (while iterating).
    TruncatedStreamError
        A :class:`FormatError`: the stream ends early; raised after the decodable bytes.
    OSError
        If the file cannot be opened.
    """
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(16)
    codec = sniff_codec(head, path)
    name = str(path)
    if codec is Codec.LZF:
        raise FormatError(
            f"{path}: LZF-compressed event logs are not supported; decompress the file first or "
            "write event logs with spark.eventLog.compression.codec=zstd (or lz4, snappy)"
        )

    def chunks() -> Iterator[bytes]:
        if codec is Codec.ZSTD:
            yield from _zstd_chunks(name)
        elif codec is Codec.GZIP:
            with open(name, "rb") as g:
                yield from _gzip_chunks(g, name)
        else:
            with open(name, "rb") as raw:
                f = io.BufferedReader(raw, _READ_SIZE)
                if codec is Codec.LZ4:
                    yield from _lz4_blocks(f, name)
                elif codec is Codec.SNAPPY:
                    yield from _snappy_chunks(f, name)
                else:
                    yield from _plain_chunks(f, name)

    return codec, chunks()


def iter_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Split a stream of byte chunks into lines (without the newline)."""
    rest = b""
    for chunk in chunks:
        data = rest + chunk
        lines = data.split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest
