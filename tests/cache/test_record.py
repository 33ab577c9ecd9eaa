"""Record and key layout: round-trips and corruption detection (Hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cache import CorruptRecordError
from cache.errors import CacheConfigError
from cache.record import (
    CHECKSUM_SIZE,
    HEADER_SIZE,
    MAX_INDEX,
    MAX_VARIANT,
    RECORD_OVERHEAD,
    RECORD_VERSION,
    decode_record,
    encode_record,
    encode_records,
    key_int,
    malformed_key,
    pack_key,
    pack_keys,
    record_label,
    unpack_key,
    variant_range,
)

shapes = st.tuples(st.integers(1, 4), st.integers(1, 24), st.integers(1, 24))
indices = st.integers(0, MAX_INDEX)
variants = st.integers(0, 0xFFFF)
labels = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), shape=shapes, index=indices, variant=variants, label=labels)
def test_record_round_trip(data, shape, index, variant, label) -> None:
    sample = data.draw(hnp.arrays(np.uint8, shape))
    value = encode_record(index, variant, label, sample)
    assert len(value) == sample.nbytes + RECORD_OVERHEAD
    out, got_label = decode_record(value, index, variant, shape)
    assert out.dtype == np.uint8 and out.shape == shape
    assert np.array_equal(out, sample)
    assert got_label == label
    # The serving fast path agrees, on bytes and on a memoryview (LMDB's buffers).
    seed = key_int(index, variant)
    assert record_label(value, seed, sample.nbytes) == label
    assert record_label(memoryview(value), seed, sample.nbytes) == label


@settings(max_examples=60, deadline=None)
@given(data=st.data(), shape=shapes, index=indices, variant=variants)
def test_any_flipped_byte_is_detected(data, shape, index, variant) -> None:
    sample = data.draw(hnp.arrays(np.uint8, shape))
    value = bytearray(encode_record(index, variant, 3, sample))
    pos = data.draw(st.integers(0, len(value) - 1))
    value[pos] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError, match=f"index {index}, variant {variant}") as info:
        decode_record(bytes(value), index, variant, shape)
    assert (info.value.index, info.value.variant) == (index, variant)
    assert record_label(memoryview(bytes(value)), key_int(index, variant), sample.nbytes) is None


@settings(max_examples=30, deadline=None)
@given(index=indices, variant=variants, other=st.integers(0, MAX_INDEX))
def test_record_is_bound_to_its_key(index, variant, other) -> None:
    value = encode_record(index, variant, 1, np.zeros(12, np.uint8))
    if other != index:
        with pytest.raises(CorruptRecordError, match="checksum"):
            decode_record(value, other, variant, (12,))


def test_truncated_record_is_detected() -> None:
    value = encode_record(1, 0, 1, np.arange(48, dtype=np.uint8))
    with pytest.raises(CorruptRecordError, match="bytes, expected"):
        decode_record(value[:-1], 1, 0, (48,))
    assert record_label(value[:-1], key_int(1, 0), 48) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(indices, variants), min_size=2, max_size=30, unique=True))
def test_keys_sort_by_variant_then_index(pairs) -> None:
    keys = sorted(pack_key(i, v) for i, v in pairs)
    assert [unpack_key(k) for k in keys] == sorted(pairs, key=lambda p: (p[1], p[0]))


def test_pack_keys_matches_pack_key(rng: np.random.Generator) -> None:
    idx = rng.integers(0, MAX_INDEX, size=50)
    keys, ints = pack_keys(idx, 7)
    assert keys == [pack_key(int(i), 7) for i in idx]
    assert [int(k) >> 48 for k in ints] == [7] * 50
    with pytest.raises(ValueError, match="sample indices"):
        pack_keys(np.array([-1]), 0)
    with pytest.raises(ValueError, match="variant"):
        pack_key(0, 1 << 16)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    size=st.integers(1, 300),
    n=st.integers(0, 12),
    variant=variants,
)
def test_batch_encoding_equals_record_encoding(data, size, n, variant) -> None:
    idx = np.array(data.draw(st.lists(indices, min_size=n, max_size=n)), dtype=np.int64)
    lab = np.array(data.draw(st.lists(labels, min_size=n, max_size=n)), dtype=np.int64)
    payloads = data.draw(hnp.arrays(np.uint8, (n, size)))
    rows = encode_records(idx, variant, lab, payloads)
    assert rows.shape == (n, size + RECORD_OVERHEAD)
    for i in range(n):
        assert rows[i].tobytes() == encode_record(int(idx[i]), variant, int(lab[i]), payloads[i])


def test_keys_out_of_range_or_of_a_bad_length_raise_the_packages_config_error() -> None:
    from cache.errors import CacheConfigError, CacheError

    with pytest.raises(CacheError, match="sample indices must be in") as info:
        pack_keys(np.array([-1]), 0)
    assert isinstance(info.value, CacheConfigError) and isinstance(info.value, ValueError)
    with pytest.raises(CacheError, match="variant must be in"):
        pack_key(0, 1 << 16)
    with pytest.raises(CacheConfigError, match="a record key has 8 bytes, not 7"):
        unpack_key(b"\0" * 7)


def test_pack_keys_accepts_the_largest_index_and_variant_and_refuses_one_past_them() -> None:
    keys, _ = pack_keys(np.array([0, MAX_INDEX]), MAX_VARIANT)
    assert keys == [pack_key(0, MAX_VARIANT), pack_key(MAX_INDEX, MAX_VARIANT)]
    with pytest.raises(CacheConfigError, match="sample indices must be in"):
        pack_keys(np.array([0, MAX_INDEX + 1]), 0)
    with pytest.raises(CacheConfigError, match="variant must be in"):
        pack_keys(np.array([0]), MAX_VARIANT + 1)


@pytest.mark.parametrize("variant", [0, 7, MAX_VARIANT])
def test_a_variant_range_holds_every_key_of_its_variant_and_no_other(variant: int) -> None:
    start, end = variant_range(variant)

    def inside(key: bytes) -> bool:
        return start <= key and (end == b"" or key < end)

    assert inside(pack_key(0, variant)) and inside(pack_key(MAX_INDEX, variant))
    if variant > 0:
        assert not inside(pack_key(MAX_INDEX, variant - 1))
    if variant < MAX_VARIANT:
        assert not inside(pack_key(0, variant + 1))
    else:
        assert end == b""  # the last variant's range runs to the end of the keys


def test_malformed_key_is_none_for_whole_or_no_keys_and_names_one_of_another_length() -> None:
    assert malformed_key([]) is None
    assert malformed_key([pack_key(1, 0), pack_key(MAX_INDEX, 3)]) is None
    short = bytes(6) + b"\x01"
    assert malformed_key([pack_key(1, 0), short]) == (
        "a record key of 7 bytes, not 8: 00000000000001"
    )


def test_batch_encoding_refuses_an_out_buffer_that_is_not_c_contiguous() -> None:
    payloads = np.zeros((2, 12), np.uint8)
    out = np.zeros((2, 12 + RECORD_OVERHEAD), np.uint8, order="F")
    with pytest.raises(CacheConfigError, match="C-contiguous"):
        encode_records(np.arange(2), 0, np.zeros(2, np.int64), payloads, out=out)


def test_a_record_with_bytes_after_its_checksum_is_refused() -> None:
    sample = np.arange(48, dtype=np.uint8)
    value = encode_record(5, 1, 2, sample) + b"\0"
    with pytest.raises(CorruptRecordError, match="bytes, expected"):
        decode_record(value, 5, 1, (48,))
    assert record_label(value, key_int(5, 1), 48) is None
    assert record_label(memoryview(value), key_int(5, 1), 48) is None


def _resealed(value: bytes, index: int, variant: int, offset: int, field: bytes) -> bytes:
    """``value`` with ``field`` written at ``offset`` of its header and its checksum
    recomputed (xxh3_64 of everything before it, seeded with the key), as a writer of
    another format would store it."""
    body = bytearray(value[:-CHECKSUM_SIZE])
    body[offset : offset + len(field)] = field
    digest = xxhash.xxh3_64_intdigest(bytes(body), seed=key_int(index, variant))
    return bytes(body) + digest.to_bytes(CHECKSUM_SIZE, "little")


@pytest.mark.parametrize(
    ("offset", "field"),
    [
        (0, b"DPC2"),  # magic
        (4, bytes([RECORD_VERSION + 1])),  # format version
        (16, (49).to_bytes(8, "little")),  # payload size: one more than the 48 stored
    ],
    ids=["magic", "version", "payload size"],
)
def test_a_header_of_another_format_is_refused_even_with_a_valid_checksum(
    offset: int, field: bytes
) -> None:
    value = _resealed(encode_record(5, 1, 2, np.arange(48, dtype=np.uint8)), 5, 1, offset, field)
    with pytest.raises(CorruptRecordError, match="bad header"):
        decode_record(value, 5, 1, (48,))
    assert record_label(value, key_int(5, 1), 48) is None
    assert record_label(memoryview(value), key_int(5, 1), 48) is None


def test_a_decoded_sample_is_a_writable_copy_independent_of_the_stored_value() -> None:
    sample = np.arange(48, dtype=np.uint8).reshape(3, 4, 4)
    value = bytearray(encode_record(5, 1, 2, sample))
    out, label = decode_record(value, 5, 1, (3, 4, 4))
    value[HEADER_SIZE : HEADER_SIZE + 48] = bytes(48)  # the map's page reused after the read
    assert label == 2 and np.array_equal(out, sample)
    from_bytes, _ = decode_record(encode_record(5, 1, 2, sample), 5, 1, (3, 4, 4))
    assert out.flags.writeable and from_bytes.flags.writeable
