"""Record and key layout of the cache (one concept: the bytes of a record).

Key
---
8 bytes, big-endian: ``variant`` (16 bits) then sample ``index`` (48 bits), so
keys sort by ``(variant, index)``. An epoch serves one variant, whose records
form one contiguous key range (counted and cleared by range), and ascending
indices of one variant are neighbours on disk.

Value
-----
=========  =======  ==============================================
offset     bytes    field (little-endian)
=========  =======  ==============================================
0          4        magic ``b"DPC1"``
4          1        record format version (1)
5          3        reserved (zero)
8          8        label, int64
16         8        payload size ``n`` in bytes, uint64
24         n        payload: the augmented uint8 sample, C-contiguous, in
                    the layout it is served in (CHW)
24 + n     8        checksum: xxh3_64 of bytes ``[0, 24 + n)``, seeded
                    with the 64-bit key, uint64
=========  =======  ==============================================

The payload is contiguous, so a reader views it with ``np.frombuffer`` over
LMDB's read-only memory map and copies it once, into the batch buffer. Seeding
the checksum with the key binds a record to its (index, variant): a record
written under the wrong key fails its checksum too.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import numpy as np
import xxhash

from cache.errors import CacheConfigError, CorruptRecordError

#: Anything exposing the buffer protocol (bytes, memoryview, numpy array).
Buffer = bytes | bytearray | memoryview | np.ndarray

MAGIC: Final = b"DPC1"
RECORD_VERSION: Final = 1
HEADER: Final = struct.Struct("<4sB3xqQ")
HEADER_SIZE: Final = HEADER.size  # 24
CHECKSUM_SIZE: Final = 8
#: Bytes a record adds to its payload.
RECORD_OVERHEAD: Final = HEADER_SIZE + CHECKSUM_SIZE
KEY_SIZE: Final = 8
#: Bytes of the header that are the same in every record: magic and version.
HEADER_VERSION_END: Final = 5
MAX_INDEX: Final = (1 << 48) - 1
MAX_VARIANT: Final = (1 << 16) - 1


def key_int(index: int, variant: int) -> int:
    """The 64-bit key of ``(index, variant)`` as an int (also the checksum seed)."""
    if not 0 <= index <= MAX_INDEX:
        raise CacheConfigError(f"sample index must be in 0..{MAX_INDEX}, not {index}")
    if not 0 <= variant <= MAX_VARIANT:
        raise CacheConfigError(f"variant must be in 0..{MAX_VARIANT}, not {variant}")
    return (variant << 48) | index


def pack_key(index: int, variant: int) -> bytes:
    """The 8-byte key of ``(index, variant)``."""
    return key_int(index, variant).to_bytes(KEY_SIZE, "big")


def pack_keys(indices: np.ndarray, variant: int) -> tuple[list[bytes], np.ndarray]:
    """Keys of many indices of one variant: ``(keys, key ints as uint64)``."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) > MAX_INDEX):
        raise CacheConfigError(f"sample indices must be in 0..{MAX_INDEX}")
    if not 0 <= variant <= MAX_VARIANT:
        raise CacheConfigError(f"variant must be in 0..{MAX_VARIANT}, not {variant}")
    ints = idx.astype(np.uint64) | np.uint64(variant << 48)
    raw = ints.astype(">u8").tobytes()
    return [raw[i : i + KEY_SIZE] for i in range(0, len(raw), KEY_SIZE)], ints


def _view(value: Buffer) -> memoryview:
    """A memoryview of any :data:`Buffer` (``ndarray.data`` for arrays: numpy's stubs declare
    the buffer protocol only for Python 3.12+, so ``memoryview(array)`` does not type-check on
    the versions this package supports, though it works)."""
    return value.data if isinstance(value, np.ndarray) else memoryview(value)


def unpack_key(key: Buffer) -> tuple[int, int]:
    """``(index, variant)`` of an 8-byte key.

    Raises
    ------
    CacheConfigError
        If ``key`` is not :data:`KEY_SIZE` bytes long. (A key read from a cache's
        records is checked first, with :func:`malformed_key`: one of another length is
        damage, a :class:`~cache.errors.DamagedCacheError`.)
    """
    if len(_view(key)) != KEY_SIZE:
        raise CacheConfigError(f"a record key has {KEY_SIZE} bytes, not {len(_view(key))}")
    value = int.from_bytes(key, "big")
    return value & MAX_INDEX, value >> 48


def malformed_key(keys: Sequence[Buffer]) -> str | None:
    """Why one of ``keys``, read from a cache's records, is not a record key; None when
    every one is.

    Every key this package writes has :data:`KEY_SIZE` bytes, so a key of another
    length in a cache is damage: the readers of keys (:meth:`CacheStore.counts
    <cache.store.CacheStore.counts>`, :meth:`~cache.store.CacheStore.completed`,
    :func:`cache.verify`) raise :class:`~cache.errors.DamagedCacheError` with this
    reason (:func:`cache.env.damaged`), e.g. ``"a record key of 7 bytes, not 8:
    00000000000001"`` (its first 16 bytes in hex). One C-level pass over the lengths
    when every key is whole.
    """
    if set(map(len, keys)) <= {KEY_SIZE}:
        return None
    key = next(k for k in keys if len(k) != KEY_SIZE)
    return f"a record key of {len(key)} bytes, not {KEY_SIZE}: {bytes(key[:16]).hex()}"


def variant_range(variant: int) -> tuple[bytes, bytes]:
    """First key of ``variant`` and first key after it (exclusive end, or b"" for the last)."""
    start = pack_key(0, variant)
    end = pack_key(0, variant + 1) if variant < MAX_VARIANT else b""
    return start, end


def encode_record(index: int, variant: int, label: int, payload: Buffer) -> bytes:
    """The value stored for one sample (see the module docs for the layout).

    Parameters
    ----------
    index, variant : int
        The record's key (seeds the checksum).
    label : int
        Class label (int64).
    payload : buffer
        The augmented uint8 sample, C-contiguous.
    """
    view = _view(payload).cast("B")
    header = HEADER.pack(MAGIC, RECORD_VERSION, int(label), view.nbytes)
    hasher = xxhash.xxh3_64(seed=key_int(index, variant))
    hasher.update(header)
    hasher.update(view)
    return b"".join((header, view, hasher.intdigest().to_bytes(CHECKSUM_SIZE, "little")))


def encode_records(
    indices: np.ndarray,
    variant: int,
    labels: np.ndarray,
    payloads: np.ndarray,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The values of many samples of one variant, as the rows of one array.

    Row ``i`` equals ``encode_record(indices[i], variant, labels[i], payloads[i])``;
    headers and payloads are written with numpy for the whole batch, so the only
    per-record Python work is one checksum call (what makes filling cheap for
    small samples).

    Parameters
    ----------
    indices : numpy.ndarray
        Sample indices (int64), ``n`` of them.
    variant : int
        Their variant.
    labels : numpy.ndarray
        Their labels (int64).
    payloads : numpy.ndarray
        uint8 ``(n, payload_size)``.
    out : numpy.ndarray, optional
        A C-contiguous uint8 array of ``(m, payload_size + RECORD_OVERHEAD)`` with
        ``m >= n`` to write into (its first ``n`` rows), e.g. a buffer reused from
        batch to batch: writing into memory already mapped is about twice as fast
        as into a new array. Default: a new array.

    Returns
    -------
    numpy.ndarray
        uint8 ``(n, payload_size + RECORD_OVERHEAD)``, C-contiguous (the first
        ``n`` rows of ``out`` when given).
    """
    n, size = payloads.shape
    end = HEADER_SIZE + size
    if out is None:
        out = np.empty((n, end + CHECKSUM_SIZE), dtype=np.uint8)
    else:
        if (
            out.dtype != np.uint8
            or out.ndim != 2
            or out.shape[0] < n
            or out.shape[1] != end + CHECKSUM_SIZE
            or not out.flags.c_contiguous
        ):
            raise CacheConfigError(
                f"out must be a C-contiguous uint8 array of at least ({n}, "
                f"{end + CHECKSUM_SIZE}), not {out.dtype} {out.shape}"
            )
        out = out[:n]
    if n == 0:
        return out
    out[:, :4] = np.frombuffer(MAGIC, dtype=np.uint8)
    out[:, 4] = RECORD_VERSION
    out[:, 5:8] = 0
    out[:, 8:16] = np.asarray(labels, dtype="<i8").reshape(n, 1).view(np.uint8)
    out[:, 16:HEADER_SIZE] = np.array([size], dtype="<u8").view(np.uint8)
    out[:, HEADER_SIZE:end] = payloads
    flat = out.data.cast("B")
    record = end + CHECKSUM_SIZE
    _, seeds = pack_keys(np.asarray(indices, dtype=np.int64), variant)
    digest = xxhash.xxh3_64_intdigest
    sums = [
        digest(flat[i * record : i * record + end], seed=seed)
        for i, seed in enumerate(seeds.tolist())
    ]
    out[:, end:] = np.array(sums, dtype="<u8").reshape(n, 1).view(np.uint8)
    return out


def _corrupt(index: int, variant: int, why: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"cache record (index {index}, variant {variant}) is corrupt: {why}; it is never served "
        "and is dropped and refilled (or run `dataplane cache verify --repair`)",
        index=index,
        variant=variant,
    )


def check_record(value: Buffer, index: int, variant: int, payload_size: int) -> int:
    """Check a stored value and return its label.

    Parameters
    ----------
    value : buffer
        The stored bytes (may be a memoryview into LMDB's map).
    index, variant : int
        The key the value was stored under.
    payload_size : int
        Expected payload size in bytes (``prod(shape)`` for uint8 samples).

    Raises
    ------
    CorruptRecordError
        If the size, magic, version or checksum is wrong.
    """
    view = _view(value)
    if view.nbytes != payload_size + RECORD_OVERHEAD:
        raise _corrupt(
            index, variant, f"{view.nbytes} bytes, expected {payload_size + RECORD_OVERHEAD}"
        )
    magic, version, label, size = HEADER.unpack_from(view, 0)
    if magic != MAGIC or version != RECORD_VERSION or size != payload_size:
        raise _corrupt(index, variant, "bad header")
    end = HEADER_SIZE + payload_size
    digest = xxhash.xxh3_64_intdigest(view[:end], seed=key_int(index, variant))
    if digest != int.from_bytes(view[end:], "little"):
        raise _corrupt(index, variant, "checksum mismatch")
    return int(label)


_CHECKSUM = struct.Struct("<Q")


def header_prefix() -> np.ndarray:
    """The first :data:`HEADER_VERSION_END` bytes of every record (magic, version)."""
    return np.frombuffer(MAGIC + bytes([RECORD_VERSION]), dtype=np.uint8)


def record_label(value: bytes | memoryview, seed: int, payload_size: int) -> int | None:
    """The label of a valid record, or None if it fails any check of :func:`check_record`.

    The serving fast path (no exception, no message): ``value`` is bytes or a
    one-dimensional byte memoryview (LMDB's ``buffers=True``), ``seed`` the
    record's :func:`key_int`. Call :func:`check_record` on a None for the reason.
    """
    end = HEADER_SIZE + payload_size
    if len(value) != end + CHECKSUM_SIZE:
        return None
    magic, version, label, size = HEADER.unpack_from(value, 0)
    if magic != MAGIC or version != RECORD_VERSION or size != payload_size:
        return None
    if xxhash.xxh3_64_intdigest(value[:end], seed=seed) != _CHECKSUM.unpack_from(value, end)[0]:
        return None
    return int(label)


def payload_view(value: Buffer, payload_size: int) -> np.ndarray:
    """The payload of a checked value as a flat uint8 array (no copy)."""
    return np.frombuffer(value, dtype=np.uint8, count=payload_size, offset=HEADER_SIZE)


def decode_record(
    value: Buffer, index: int, variant: int, shape: tuple[int, ...]
) -> tuple[np.ndarray, int]:
    """Check a value and return ``(sample copy of shape shape, label)``."""
    size = int(np.prod(shape, dtype=np.int64))
    label = check_record(value, index, variant, size)
    return payload_view(value, size).reshape(shape).copy(), label
