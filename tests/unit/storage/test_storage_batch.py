"""storage.batch: header parsing and validation (REQ-R23, R26)."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.batch import (
    BATCH_HEADER_SIZE,
    parse_batches,
    scan_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from odradek.storage.records import encode_batch


def _recrc(b: bytearray) -> bytearray:
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return b


def _code(buf: bytes | bytearray, **kw: int) -> ErrorCode:
    with pytest.raises(KafkaError) as ei:
        parse_batches(buf, **kw)
    return ei.value.code


def test_parse_fields_and_properties() -> None:
    b = encode_batch(
        [(b"a", b"1"), (b"b", b"2"), (None, None)],
        base_offset=7,
        timestamps=[5, 9, 6],
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        transactional=True,
        compression=1,
    )
    b2 = encode_batch([(b"c", b"3")], base_offset=10, timestamp_ms=11)
    (h, h2) = parse_batches(b + b2)
    assert BATCH_HEADER_SIZE == 61
    assert (h.base_offset, h.last_offset, h.records_count, h.last_offset_delta) == (7, 9, 3, 2)
    assert (h.base_timestamp, h.max_timestamp, h.compression, h.timestamp_type) == (5, 9, 1, 0)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 10)
    assert h.is_transactional and not h.is_control and h.magic == 2
    assert h.size == len(b) and h.position == 0 and h2.position == len(b)


def test_empty_buffer_is_no_batches() -> None:
    assert parse_batches(b"") == []


def test_crc_mismatch_is_corrupt() -> None:
    b = bytearray(encode_batch([(b"k", b"value")]))
    b[-1] ^= 0x01
    assert _code(b) == ErrorCode.corrupt_message
    assert parse_batches(b, verify_crc=False)  # header still parses without the check


def test_truncated_and_trailing_garbage_are_corrupt() -> None:
    b = encode_batch([(b"k", b"value")])
    assert _code(b[:-1]) == ErrorCode.corrupt_message
    assert _code(b[:30]) == ErrorCode.corrupt_message
    assert _code(b + b"\x00" * 5) == ErrorCode.corrupt_message
    assert _code(b + b"\xff" * 70) == ErrorCode.corrupt_message


def test_batch_length_smaller_than_header_is_corrupt() -> None:
    b = bytearray(encode_batch([(b"k", b"value")]))
    struct.pack_into(">i", b, 8, 10)
    assert _code(b) == ErrorCode.corrupt_message


def test_magic_checks() -> None:
    b = bytearray(encode_batch([(b"k", b"v")]))
    b[16] = 1  # v0/v1 in a v3+ produce → INVALID_RECORD like Kafka's ProduceRequest
    assert _code(b) == ErrorCode.invalid_record
    b[16] = 3
    assert _code(b) == ErrorCode.corrupt_message


def test_inconsistent_counts_are_invalid_record() -> None:
    b = bytearray(encode_batch([(b"k", b"v"), (b"k", b"w")]))
    struct.pack_into(">i", b, 57, 3)  # recordsCount != lastOffsetDelta + 1
    assert _code(_recrc(b)) == ErrorCode.invalid_record
    struct.pack_into(">i", b, 57, 0)
    struct.pack_into(">i", b, 23, -1)
    assert _code(_recrc(b)) == ErrorCode.invalid_record


def test_oversized_batch_is_message_too_large() -> None:
    b = encode_batch([(b"k", b"v" * 1000)])
    assert _code(b, max_batch_bytes=len(b) - 1) == ErrorCode.message_too_large
    assert parse_batches(b, max_batch_bytes=len(b))


def test_a_length_past_the_buffer_is_corrupt_whatever_it_claims() -> None:
    # Checked before the size limit: 2^31-16 bytes claimed, ~100 sent.
    b = bytearray(encode_batch([(b"k", b"v" * 100)]))
    struct.pack_into(">i", b, 8, 2**31 - 16)
    assert _code(bytes(b), max_batch_bytes=1 << 20) == ErrorCode.corrupt_message


def test_offset_and_epoch_rewrites_keep_crc_valid() -> None:
    b = bytearray(encode_batch([(b"k", b"v")]) * 1)
    set_base_offset(b, 0, 123456789)
    set_partition_leader_epoch(b, 0, 17)
    (h,) = parse_batches(b)
    assert h.base_offset == 123456789 and h.partition_leader_epoch == 17


def test_log_append_time_recomputes_crc() -> None:
    b = bytearray(encode_batch([(b"k", b"v")], timestamp_ms=5))
    (h,) = parse_batches(b)
    set_log_append_time(b, h, 99)
    (h2,) = parse_batches(b)  # CRC verified
    assert h2.max_timestamp == 99 and h2.timestamp_type == 1 and h2.base_timestamp == 5


def test_scan_reports_valid_prefix() -> None:
    good = encode_batch([(b"k", b"v")])
    sc = scan_batches(good * 3 + good[:20])
    assert len(sc.batches) == 3 and sc.valid_bytes == 3 * len(good)
    assert sc.error is not None and sc.error.code == ErrorCode.corrupt_message
