"""Row checks shared by every reader: bad rows are dropped and counted, never fatal.

A row is dropped (first failing check wins) when

* a required column (:data:`placement.schema.REQUIRED_COLUMNS`) is null,
* ``created_at`` or ``deleted_at`` is not finite,
* it was deleted before it was created,
* ``size_bytes``, an operation count or a byte count is negative.

These are the checks of :func:`placement.features.clean_table`, applied per chunk with
the row's location (file and line, row or record) kept for the report.

Duplicates across inputs (a log copied under another name, a Spark log given both plain
and compressed) are found by key: a usable row whose ``(run_id, file_id)`` was already
read, earlier in the same chunk or in an earlier chunk (inputs in the order they are
found), is dropped and counted as "duplicate row (run_id and file_id read before;
dropped)". Keys are compared by a 64-bit hash of their bytes (:func:`key_hashes`: each
id's 8-byte words folded through MurmurHash3's 64-bit finalizer, computed in numpy on
the Arrow buffers); like any well-mixed 64-bit hash, two different keys share one with a
chance of about ``n**2 / 2**65`` among ``n`` rows (3e-6 for 10 million).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logs_analysis.issues import MAX_EXAMPLES, ReadIssues
from logs_analysis.readers.base import ChunkResult
from placement.schema import REQUIRED_COLUMNS

__all__ = [
    "COUNT_COLUMNS",
    "DUPLICATE_ROW",
    "DuplicateRows",
    "drop_duplicates",
    "duplicate_rows",
    "key_hashes",
    "usable_rows",
    "validate_rows",
]

COUNT_COLUMNS = ("size_bytes", "read_ops", "write_ops", "read_bytes", "write_bytes")
#: Reason of a row dropped because its (run_id, file_id) was read before.
DUPLICATE_ROW = "duplicate row (run_id and file_id read before; dropped)"


def validate_rows(result: ChunkResult) -> tuple[pa.Table, ReadIssues]:
    """The usable rows of ``result.table`` and the issues of the dropped ones.

    The returned issues hold only the row checks; ``result.issues`` is left as it is.
    """
    table, issues, _ = usable_rows(result)
    return table, issues


def usable_rows(result: ChunkResult) -> tuple[pa.Table, ReadIssues, np.ndarray]:
    """:func:`validate_rows`, and the index in ``result.table`` of each usable row."""
    table = result.table
    issues = ReadIssues()
    n = table.num_rows
    if n == 0:
        return table, issues, np.arange(0, dtype=np.int64)
    keep = np.ones(n, dtype=bool)

    def drop(reason: str, bad: np.ndarray, detail: str) -> None:
        bad = bad & keep
        count = int(bad.sum())
        if not count:
            return
        for i in np.flatnonzero(bad)[:5]:
            location, line = result.locate(int(i))
            issues.add(
                reason, result.source, location, detail, line=line, block_start=result.block_start
            )
        # the examples above counted up to 5; add the rest without examples
        issues.counts[reason] += count - min(count, 5)
        keep[bad] = False

    for name in REQUIRED_COLUMNS:
        column = table[name]
        if column.null_count:
            drop(f"null {name}", np.asarray(column.is_null()), f"{name} is missing")
    created = table["created_at"].to_numpy(zero_copy_only=False).astype(np.float64)
    deleted = table["deleted_at"].to_numpy(zero_copy_only=False).astype(np.float64)
    drop(
        "non-finite time",
        ~(np.isfinite(created) & np.isfinite(deleted)),
        "created_at or deleted_at is NaN or infinite",
    )
    with np.errstate(invalid="ignore"):
        drop("deleted before created", deleted < created, "deleted_at < created_at")
    for name in COUNT_COLUMNS:
        values = table[name].to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            drop(f"negative {name}", np.asarray(values < 0, dtype=bool), f"{name} < 0")
    if keep.all():
        return table, issues, np.arange(n, dtype=np.int64)
    return table.filter(pa.array(keep)), issues, np.flatnonzero(keep)


# ---------------------------------------------------------------------------- key hashes
#
# A string's hash depends on its bytes alone, so it is the same in whatever array it is held
# (string or large_string, plain or dictionary-encoded, any chunk or slice):
#
#     h = length * _LENGTH_MULT ^ _SEED
#     for each 8-byte little-endian word w of the string (the last one zero-filled):
#         h = fmix64(h ^ w)
#
# fmix64 is MurmurHash3's 64-bit finalizer, a bijection in which every output bit depends on
# every input bit. It runs on whole columns in numpy, one word of every string at a time.
# Written here because no library hashes an Arrow string column without a Python object per
# string: pyarrow exposes no row-hash kernel, and pandas' hash_array (used before) took
# 0.22 s per million ids through objects, halving the report's ingestion rate.

_MIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_MIX_SHIFT = np.uint64(33)
_LENGTH_MULT = np.uint64(0x9E3779B97F4A7C15)
_SEED = np.uint64(0x243F6A8885A308D3)
#: Hash of a null string.
_NULL_HASH = np.uint64(0x13198A2E03707344)
#: ``_WORD_MASKS[k]`` keeps the first ``k`` bytes (0 to 8) of a little-endian word.
_WORD_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)
#: Longest strings, in bytes, of a chunk whose strings are padded to one width to be hashed;
#: beyond it (or for non-ASCII text) each word is gathered from the string's offset.
_PAD_MAX_BYTES = 64

_WordFn = Callable[[int, np.ndarray | None], np.ndarray]


def _fmix(h: np.ndarray) -> None:
    """MurmurHash3's 64-bit finalizer, applied to ``h`` (uint64) in place."""
    tmp = np.empty_like(h)  # (array arithmetic wraps around modulo 2**64 silently)
    np.right_shift(h, _MIX_SHIFT, out=tmp)
    h ^= tmp
    h *= _MIX_1
    np.right_shift(h, _MIX_SHIFT, out=tmp)
    h ^= tmp
    h *= _MIX_2
    np.right_shift(h, _MIX_SHIFT, out=tmp)
    h ^= tmp


def _fold_words(h: np.ndarray, lengths: np.ndarray, word: _WordFn) -> None:
    """Fold each string's 8-byte words into its hash ``h`` (in place).

    ``word(k, rows)`` is the word at byte ``k`` of each string of ``rows`` (``None``: all),
    zero-filled past the string's end; only strings longer than ``k`` bytes take it.
    """
    if not len(lengths):
        return
    shortest, longest = int(lengths.min()), int(lengths.max())
    for k in range(0, longest, 8):
        if shortest > k:
            h ^= word(k, None)
            _fmix(h)
        else:
            rows = np.flatnonzero(lengths > k)
            part = h[rows] ^ word(k, rows)
            _fmix(part)
            h[rows] = part


def _offsets_and_bytes(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The offsets of the strings of ``array`` (string or binary, small or large; int32 or
    int64 as stored, one more than strings) and their bytes, from the first string's start
    (uint8); both zero-copy."""
    wide = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    kind = np.dtype(np.int64 if wide else np.int32)
    buffers = array.buffers()
    offsets = np.frombuffer(
        buffers[1], dtype=kind, count=len(array) + 1, offset=array.offset * kind.itemsize
    )
    first, last = int(offsets[0]), int(offsets[-1])
    if last == first or buffers[2] is None:
        return offsets, np.zeros(0, dtype=np.uint8)
    return offsets, np.frombuffer(buffers[2], dtype=np.uint8, count=last - first, offset=first)


def _padded_matrix(array: pa.Array, data: np.ndarray, width: int) -> np.ndarray | None:
    """The strings of ``array`` as rows of a zero-padded (n, ``width``) uint8 matrix, padded
    by Arrow (:func:`pyarrow.compute.ascii_rpad`), or None if that cannot be relied on."""
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return None
    if len(data) and int(data.max()) >= 0x80:  # ascii_rpad is meant for ASCII text only
        return None
    padded = pc.ascii_rpad(array, width=width, padding="\0")
    offsets, data = _offsets_and_bytes(padded)
    if not bool((np.diff(offsets) == width).all()):
        return None
    return data.reshape(len(array), width)


def _hash_plain(array: pa.Array) -> np.ndarray:
    """:func:`_hash_strings` of a string or binary array without nulls."""
    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    offsets, data = _offsets_and_bytes(array)
    lengths = np.diff(offsets)
    h = lengths.astype(np.uint64)
    h *= _LENGTH_MULT
    h ^= _SEED
    shortest, longest = int(lengths.min()), int(lengths.max())
    width = -(-longest // 8) * 8
    matrix: np.ndarray | None = None
    if shortest == longest:  # one length: the bytes are an (n, length) matrix already
        matrix = np.zeros((n, width), dtype=np.uint8)
        matrix[:, :longest] = data.reshape(n, longest)
    elif longest <= _PAD_MAX_BYTES:
        matrix = _padded_matrix(array, data, width)
    if matrix is not None:
        words = matrix.view("<u8")

        def word(k: int, rows: np.ndarray | None) -> np.ndarray:
            return words[:, k // 8] if rows is None else words[rows, k // 8]

        _fold_words(h, lengths, word)
        return h
    # ragged lengths: read each word at its string's offset (unaligned) and mask its tail
    buffer = np.zeros(len(data) + 8, dtype=np.uint8)
    buffer[: len(data)] = data
    unaligned = np.ndarray(shape=(len(data) + 1,), dtype="<u8", buffer=buffer, strides=(1,))
    starts = offsets[:-1] - offsets[0]

    def gathered(k: int, rows: np.ndarray | None) -> np.ndarray:
        at, left = (starts, lengths) if rows is None else (starts[rows], lengths[rows])
        return unaligned[at + k] & _WORD_MASKS[np.minimum(left - k, 8)]

    _fold_words(h, lengths, gathered)
    return h


def _hash_strings(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A 64-bit hash of each string (uint64), the same for the same string whether the column
    is plain or dictionary-encoded, ``string`` or ``large_string``, chunked or sliced."""
    if isinstance(column, pa.ChunkedArray):
        parts = [_hash_strings(chunk) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    if pa.types.is_dictionary(column.type):
        values = np.append(_hash_strings(column.dictionary), _NULL_HASH)
        indices = column.indices
        if indices.null_count:  # a null index: the extra value at the end
            indices = pc.fill_null(indices, len(values) - 1)
        return values[np.asarray(indices.to_numpy(zero_copy_only=False))]
    kind = column.type
    if not (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        column = column.cast(pa.large_string())
    if not column.null_count:
        return _hash_plain(column)
    nulls = np.asarray(column.is_null())
    hashes = _hash_plain(pc.fill_null(column, pa.scalar(b"", column.type)))
    hashes[nulls] = _NULL_HASH
    return hashes


def key_hashes(table: pa.Table) -> np.ndarray:
    """A 64-bit hash of each row's ``(run_id, file_id)`` (uint64, one per row).

    It depends on the two strings alone, not on how their columns are held (plain or
    dictionary-encoded, ``string`` or ``large_string``): chunks of every format agree.
    """
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.uint64)
    run = _hash_strings(table["run_id"])
    file = _hash_strings(table["file_id"])
    with np.errstate(over="ignore"):
        return file ^ (run * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019))


@dataclasses.dataclass(frozen=True)
class DuplicateRows:
    """The rows of one chunk to drop as duplicates.

    Attributes
    ----------
    positions : numpy.ndarray
        Index of each such row among the chunk's usable rows (:func:`usable_rows`).
    first_sources : tuple of str
        Where the first few of them (up to :data:`~logs_analysis.issues.MAX_EXAMPLES`) were
        read before, for the issue's detail.
    """

    positions: np.ndarray
    first_sources: tuple[str, ...] = ()


def duplicate_rows(
    hashes: Sequence[np.ndarray], sources: Sequence[str]
) -> dict[int, DuplicateRows]:
    """The duplicates of each chunk, given the key hashes of the chunks' usable rows.

    Parameters
    ----------
    hashes : sequence of numpy.ndarray
        :func:`key_hashes` of each chunk's usable rows, chunks in input order.
    sources : sequence of str
        The file of each chunk.

    Returns
    -------
    dict of int to DuplicateRows
        Chunk index -> its rows whose key came earlier (in that chunk or an earlier one);
        chunks without duplicates are left out.

    Notes
    -----
    The hashes are sorted once (8 bytes a row beside the inputs) to tell whether any key
    repeats; only then is the stable order of the rows (8 more bytes a row) worked out, in
    which a key's first occurrence (input order, then row order) comes first among its own.
    """
    sizes = np.fromiter((len(h) for h in hashes), dtype=np.int64, count=len(hashes))
    total = int(sizes.sum())
    if total < 2:
        return {}
    ranked = np.concatenate([np.asarray(h, dtype=np.uint64) for h in hashes])
    ranked.sort()
    # repeat[i]: the key at sorted position i + 1 came before
    repeat = ranked[1:] == ranked[:-1]
    del ranked
    if not repeat.any():
        return {}
    flat = np.concatenate([np.asarray(h, dtype=np.uint64) for h in hashes])
    order = np.argsort(flat, kind="stable")
    later = np.sort(order[1:][repeat])  # rows whose key came before, in input order
    starts = np.concatenate([[0], np.cumsum(sizes)])
    bounds = np.searchsorted(later, starts)
    out: dict[int, DuplicateRows] = {}
    for chunk in np.flatnonzero(np.diff(bounds)).tolist():
        rows = later[bounds[chunk] : bounds[chunk + 1]]
        examples = rows[:MAX_EXAMPLES]
        # the first occurrence of a key is the first of its run in the stable order
        firsts = order[np.searchsorted(flat, flat[examples], side="left", sorter=order)]
        owners = np.searchsorted(starts, firsts, side="right") - 1
        out[int(chunk)] = DuplicateRows(
            rows - starts[chunk], tuple(sources[k] for k in owners.tolist())
        )
    return out


def drop_duplicates(
    table: pa.Table, result: ChunkResult, kept: np.ndarray, duplicates: DuplicateRows | None
) -> tuple[pa.Table, ReadIssues]:
    """``table`` (the usable rows of ``result``, at ``kept`` in it) without ``duplicates``,
    and the issue counting them, with the first few located."""
    issues = ReadIssues()
    if duplicates is None or not len(duplicates.positions):
        return table, issues
    positions = np.asarray(duplicates.positions, dtype=np.int64)
    runs = table["run_id"].take(pa.array(positions[:MAX_EXAMPLES])).to_pylist()
    files = table["file_id"].take(pa.array(positions[:MAX_EXAMPLES])).to_pylist()
    for k, i in enumerate(positions[:MAX_EXAMPLES].tolist()):
        location, line = result.locate(int(kept[i]))
        first = duplicates.first_sources[k] if k < len(duplicates.first_sources) else ""
        detail = f"run_id={runs[k]!r} file_id={files[k]!r}"
        issues.add(
            DUPLICATE_ROW,
            result.source,
            location,
            detail + (f", already read from {first}" if first else ""),
            line=line,
            block_start=result.block_start,
        )
    issues.counts[DUPLICATE_ROW] += len(positions) - min(len(positions), MAX_EXAMPLES)
    keep = np.ones(table.num_rows, dtype=bool)
    keep[positions] = False
    return table.filter(pa.array(keep)), issues
