"""Property tests (hypothesis) for the record batch parser, the broker's only look inside
produced data: whatever a client sends, parse_batches either returns headers that match
what was encoded or raises KafkaError -- never anything else, never a wrong answer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.batch import BATCH_HEADER_SIZE, parse_batches, scan_batches
from odradek.storage.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    decode_batch_records,
    encode_batch,
)

_RECORDS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=16)), st.one_of(st.none(), st.binary(max_size=64))
    ),
    min_size=1,
    max_size=6,
)
_CODECS = st.sampled_from(
    [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
)
_BATCHES = st.lists(st.tuples(_RECORDS, _CODECS), min_size=1, max_size=4)


def _encode(batches: list[tuple[list[tuple[bytes | None, bytes | None]], int]]) -> bytes:
    out = b""
    offset = 0
    for records, codec in batches:
        out += encode_batch(records, base_offset=offset, compression=codec)
        offset += len(records)
    return out


@settings(deadline=None)
@given(_BATCHES)
def test_valid_batches_parse_to_what_was_encoded(batches: list) -> None:
    data = _encode(batches)
    headers = parse_batches(data, verify_crc=True, strict_count=True)
    assert [h.records_count for h in headers] == [len(r) for r, _ in batches]
    assert sum(h.size for h in headers) == len(data)
    for h, (records, codec) in zip(headers, batches):
        assert h.compression == codec
        decoded = decode_batch_records(data[h.position : h.position + h.size])
        assert [(r.key, r.value) for r in decoded] == records


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_kafka_errors(data: bytes) -> None:
    try:
        parse_batches(data)
    except KafkaError:
        pass
    scan = scan_batches(data)  # the recovery scan never raises
    assert 0 <= scan.valid_bytes <= len(data)


@settings(deadline=None)
@given(_BATCHES, st.data())
def test_any_bit_flip_under_the_crc_is_corrupt_message(batches: list, data: st.DataObject) -> None:
    buf = bytearray(_encode(batches))
    first = parse_batches(bytes(buf))[0]
    i = data.draw(st.integers(21, first.size - 1))  # CRC-32C covers bytes 21..end
    buf[i] ^= 1 << data.draw(st.integers(0, 7))
    try:
        parse_batches(bytes(buf))
    except KafkaError as e:
        assert e.code in (ErrorCode.corrupt_message, ErrorCode.invalid_record)
        return
    raise AssertionError(f"a flipped bit at {i} went unnoticed")


@settings(deadline=None)
@given(_BATCHES, st.data())
def test_truncated_batches_are_corrupt_message(batches: list, data: st.DataObject) -> None:
    buf = _encode(batches)
    cut = data.draw(st.integers(1, len(buf) - 1))
    try:
        headers = parse_batches(buf[:cut])
    except KafkaError as e:
        assert e.code == ErrorCode.corrupt_message
        return
    assert sum(h.size for h in headers) == cut  # cut exactly between two batches


@settings(max_examples=300, deadline=None)
@given(_BATCHES, st.data())
def test_decoding_mutated_records_raises_only_kafka_errors(
    batches: list, data: st.DataObject
) -> None:
    # ListOffsets by timestamp, the cleaner and the coordinator's loader decode records.
    buf = bytearray(_encode(batches[:1]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(BATCH_HEADER_SIZE - 4, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    try:
        decode_batch_records(bytes(buf))
    except KafkaError:
        pass
