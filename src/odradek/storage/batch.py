"""Pure functions over the 61-byte record batch v2 header (REQ-R23, R26).

The broker treats record batches as opaque: it reads only this header, validates size,
magic and CRC-32C, and rewrites ``baseOffset`` / ``partitionLeaderEpoch`` in place. Both
fields lie *before* the CRC-covered range (bytes 21..end), so rewriting them never
requires a CRC recomputation — the hot produce path stays one memcpy + one write.

Layout (big-endian, as Kafka's DefaultRecordBatch)::

    baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch i32 @12, magic i8 @16,
    crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27,
    maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51,
    baseSequence i32 @53, recordsCount i32 @57

Error choices (mirroring Kafka's broker):

* bad CRC, a batchLength shorter than the header, a batch running past the end of the
  buffer, trailing bytes too short to hold a batch, or magic > 2 → ``CORRUPT_MESSAGE``
  (Kafka's ``ByteBufferLogInputStream`` raises ``CorruptRecordException``).
* magic 0/1 → ``INVALID_RECORD``: Kafka's ``ProduceRequest.validateRecords`` throws
  ``InvalidRecordException`` ("Produce requests with version 3 are only allowed to contain
  record batches with magic version 2"), which maps to INVALID_RECORD (87), not
  UNSUPPORTED_FOR_MESSAGE_FORMAT.
* recordsCount <= 0 or lastOffsetDelta != recordsCount - 1 → ``INVALID_RECORD``
  (Kafka's ``LogValidator.validateBatch``: "Inconsistent batch offset range").
* one batch larger than ``max_batch_bytes`` (the topic's ``max.message.bytes``, compared
  with the whole batch including the 12-byte log overhead) → ``MESSAGE_TOO_LARGE`` --
  only for a batch that is all there: a batchLength past the end of the buffer is
  ``CORRUPT_MESSAGE`` whatever it claims.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "BatchScan",
    "parse_batches",
    "scan_batches",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "compute_crc",
    "HEADER_STRUCT",
]

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # CRC-32C covers [21, end)
MAX_TIMESTAMP_OFFSET = 35
CURRENT_MAGIC = 2

TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
COMPRESSION_MASK = 0x07

# One precompiled struct for the whole header; unpack_from avoids slicing copies.
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert HEADER_STRUCT.size == BATCH_HEADER_SIZE
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


@dataclass(slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0  # byte position of the batch within the parsed buffer

    @property
    def size(self) -> int:
        """Whole batch size on disk / on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @classmethod
    def unpack(cls, buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
        """Unpack a header at ``position`` without any validation."""
        return cls(*HEADER_STRUCT.unpack_from(buf, position), position)  # type: ignore[call-arg]  # 14 unpacked fields


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC-32C of the batch at ``position`` (bytes 21..end of the batch)."""
    mv = memoryview(buf)
    return crc32c(mv[position + ATTRIBUTES_OFFSET : position + size])


@dataclass(slots=True)
class BatchScan:
    """Result of a tolerant scan: the valid prefix and why the scan stopped."""

    batches: list[BatchHeader]
    valid_bytes: int  # length of the valid prefix
    error: KafkaError | None  # None when the whole buffer was valid


def _check_one(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    verify_crc: bool,
    max_batch_bytes: int | None,
    strict_count: bool = False,
) -> BatchHeader:
    remaining = end - pos
    if remaining < LOG_OVERHEAD + 5:  # cannot even read the magic byte
        raise KafkaError(
            ErrorCode.corrupt_message,
            f"{remaining} trailing bytes at position {pos} are not a record batch",
        )
    magic = buf[pos + MAGIC_OFFSET]
    if magic > 127:
        magic -= 256
    if magic != CURRENT_MAGIC:
        if magic in (0, 1):
            raise KafkaError(
                ErrorCode.invalid_record,
                f"record batch at position {pos} has magic {magic}; only magic 2 is accepted",
            )
        raise KafkaError(ErrorCode.corrupt_message, f"invalid magic {magic} at position {pos}")
    if remaining < BATCH_HEADER_SIZE:
        raise KafkaError(ErrorCode.corrupt_message, f"truncated batch header at position {pos}")
    h = BatchHeader.unpack(buf, pos)
    size = h.batch_length + LOG_OVERHEAD
    if size < BATCH_HEADER_SIZE:
        raise KafkaError(
            ErrorCode.corrupt_message,
            f"batch length {h.batch_length} at position {pos} is smaller than the header",
        )
    # A length past the bytes received is corruption before it is a size: a lie of
    # 2^31-16 bytes in a 100-byte produce was answered MESSAGE_TOO_LARGE, which tells the
    # producer to split a batch it never sent.
    if size > remaining:
        raise KafkaError(
            ErrorCode.corrupt_message,
            f"batch at position {pos} claims {size} bytes but only {remaining} remain",
        )
    if max_batch_bytes is not None and size > max_batch_bytes:
        raise KafkaError(
            ErrorCode.message_too_large,
            f"batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}",
        )
    if verify_crc:
        actual = compute_crc(buf, pos, size)
        if actual != h.crc:
            raise KafkaError(
                ErrorCode.corrupt_message,
                f"CRC-32C mismatch at position {pos}: stored {h.crc:#010x}, "
                f"computed {actual:#010x}",
            )
    # Produce (strict_count, Kafka's LogValidator) needs lastOffsetDelta == count - 1.
    # Batches already in a log may have fewer records than their offset range: the
    # cleaner keeps a retained batch's original range (REQ-R25), as Kafka does.
    if (
        h.records_count <= 0
        or h.last_offset_delta < h.records_count - 1
        or (strict_count and h.last_offset_delta != h.records_count - 1)
    ):
        raise KafkaError(
            ErrorCode.invalid_record,
            f"inconsistent batch at position {pos}: recordsCount {h.records_count}, "
            f"lastOffsetDelta {h.last_offset_delta}",
        )
    return h


def scan_batches(
    buf: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_batch_bytes: int | None = None,
    start: int = 0,
    end: int | None = None,
) -> BatchScan:
    """Parse batches until the first invalid one; never raises (crash recovery)."""
    stop = len(buf) if end is None else end
    pos = start
    out: list[BatchHeader] = []
    while pos < stop:
        try:
            h = _check_one(buf, pos, stop, verify_crc, max_batch_bytes)
        except KafkaError as e:
            return BatchScan(out, pos - start, e)
        out.append(h)
        pos += h.batch_length + LOG_OVERHEAD
    return BatchScan(out, pos - start, None)


def parse_batches(
    buf: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_batch_bytes: int | None = None,
    strict_count: bool = False,
) -> list[BatchHeader]:
    """Parse and validate every batch in ``buf``; raise ``KafkaError`` on the first fault.

    ``strict_count``: produce-time check that every offset of a batch holds a record."""
    out: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    while pos < end:
        h = _check_one(buf, pos, end, verify_crc, max_batch_bytes, strict_count)
        out.append(h)
        pos += h.batch_length + LOG_OVERHEAD
    return out


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite baseOffset in place (outside the CRC: no recomputation)."""
    _I64.pack_into(buf, position, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place (outside the CRC: no recomputation)."""
    _I32.pack_into(buf, position + 12, epoch)


def set_log_append_time(
    buf: bytearray | memoryview, header: BatchHeader, timestamp_ms: int
) -> None:
    """Stamp LogAppendTime: maxTimestamp + timestamp-type bit, then recompute the CRC.

    These fields are inside the CRC, so this is the one case where the broker rewrites the
    checksum (Kafka's ``DefaultRecordBatch.setMaxTimestamp``).
    """
    pos = header.position
    header.attributes |= TIMESTAMP_TYPE_BIT
    header.max_timestamp = timestamp_ms
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, header.attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    header.crc = compute_crc(buf, pos, header.size)
    _U32.pack_into(buf, pos + CRC_OFFSET, header.crc)
