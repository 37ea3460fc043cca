"""A minimal, correct record batch v2 encoder/decoder (tests, tools, ListOffsets).

The broker's hot path never decodes records (batches are opaque); this module exists
for tests of every layer, for CLI tools, and for cold paths such as finding the exact
record for a timestamp. Codecs: none, gzip (zlib), and — when ``cramjam`` is installed —
snappy (raw and Java's xerial framing), lz4 (frame) and zstd.
"""

from __future__ import annotations

import struct
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CONTROL_BIT,
    HEADER_STRUCT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
)

__all__ = [
    "Record",
    "encode_batch",
    "decode_batch_records",
    "COMPRESSION_NONE",
    "COMPRESSION_GZIP",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD",
    "compress_payload",
    "decompress_payload",
]

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

Header = tuple[str, bytes | None]
RecordInput = (
    tuple[bytes | None, bytes | None, Sequence[Header]] | tuple[bytes | None, bytes | None]
)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


# --- varints (zig-zag, as in protobuf / Kafka's ByteUtils) ------------------------


def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)  # zig-zag for 64-bit range
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise KafkaError(ErrorCode.corrupt_message, "truncated varint")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise KafkaError(ErrorCode.corrupt_message, "varint too long")
    return (raw >> 1) ^ -(raw & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise KafkaError(ErrorCode.corrupt_message, "truncated record field")
    return bytes(buf[pos : pos + n]), pos + n


# --- codecs ----------------------------------------------------------------------


def _compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits=31: gzip container
        return c.compress(data) + c.flush()
    import cramjam

    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise KafkaError(ErrorCode.unsupported_compression_type, f"codec {codec}")


# A decompressed batch may not exceed this (a decompression bomb: 1 MB of gzip can say
# 1 GB of zeros). Kafka's producers build batches of at most ~1 MB before compression,
# so 64 MiB leaves ample room; every caller (compacted-topic produce checks, the cleaner,
# ListOffsets by timestamp, the coordinator's loader) thus allocates a bounded amount.
MAX_DECOMPRESSED_BATCH_BYTES = 64 << 20


def _too_big(limit: int) -> KafkaError:
    return KafkaError(
        ErrorCode.corrupt_message, f"record batch decompresses to more than {limit} bytes"
    )


def _decompress(codec: int, data: bytes, limit: int = MAX_DECOMPRESSED_BATCH_BYTES) -> bytes:
    """The batch payload, decompressed; never more than ``limit`` bytes are produced."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        d = zlib.decompressobj(47)  # 47: auto-detect gzip/zlib header
        try:
            out = d.decompress(data, limit + 1)
        except zlib.error as e:
            raise KafkaError(ErrorCode.corrupt_message, f"gzip: {e}") from None
        if len(out) > limit or d.unconsumed_tail:
            raise _too_big(limit)
        return out
    import cramjam

    try:
        if codec == COMPRESSION_SNAPPY:
            if data.startswith(_XERIAL_MAGIC):
                # Java's xerial framing: 16-byte header, then [i32 length][raw block]...
                out_buf = bytearray()
                pos = 16
                while pos < len(data):
                    (n,) = struct.unpack_from(">i", data, pos)
                    pos += 4
                    block = data[pos : pos + n]
                    if len(out_buf) + cramjam.snappy.decompress_raw_len(block) > limit:
                        raise _too_big(limit)
                    out_buf += bytes(cramjam.snappy.decompress_raw(block))
                    pos += n
                return bytes(out_buf)
            if cramjam.snappy.decompress_raw_len(data) > limit:  # the size is in its header
                raise _too_big(limit)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec in (COMPRESSION_LZ4, COMPRESSION_ZSTD):
            return _decompress_into(
                cramjam.lz4 if codec == COMPRESSION_LZ4 else cramjam.zstd, data, limit
            )
    except cramjam.DecompressionError as e:
        raise KafkaError(ErrorCode.corrupt_message, f"codec {codec}: {e}") from None
    raise KafkaError(ErrorCode.unsupported_compression_type, f"codec {codec}")


def compress_payload(codec: int, data: bytes) -> bytes:
    """The records section of a batch compressed with ``codec`` (Kafka's codec ids)."""
    return _compress(codec, data)


def decompress_payload(codec: int, data: bytes) -> bytes:
    """Inverse of ``compress_payload`` (also reads Java's xerial-framed snappy)."""
    return _decompress(codec, data)


# A per-thread buffer lz4/zstd frames are decompressed into (the result is copied out):
# a fresh buffer of a few hundred KB costs a page fault per 4 KB on first write, ~8x the
# decompression itself (400 vs 50 us for a 1,000-record batch of 100 B values, issue 27).
# Only buffers up to _SCRATCH_MAX are kept, so a thread holds at most that much.
_SCRATCH = threading.local()
_SCRATCH_MAX = 8 << 20


def _scratch(size: int) -> memoryview:
    """``size`` writable bytes: a view of this thread's reused buffer, or a fresh one."""
    if size > _SCRATCH_MAX:
        return memoryview(bytearray(size))
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < size:
        buf = bytearray(max(size, 1 << 20))
        _SCRATCH.buf = buf
    return memoryview(buf)[:size]


def _decompress_into(module: object, data: bytes, limit: int) -> bytes:
    """lz4/zstd frames need not state their size: decompress into a bounded buffer,
    growing it (x8) up to ``limit``; a frame that does not fit even then is refused."""
    import cramjam

    cap = limit + 1  # one byte more than allowed: filling it proves the frame too big
    # 1 MiB first: the reused buffer makes a large first try free, and typical batches
    # (~1 MB before compression) then need no second one.
    size = min(cap, max(8 * len(data), 1 << 20))
    while True:
        out = _scratch(size)
        try:
            n = module.decompress_into(data, out)  # type: ignore[attr-defined]
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e) and "too small" not in str(e):
                raise  # corrupt, not merely larger: no point growing the buffer
            if size >= cap:
                raise _too_big(limit) from None
            size = min(cap, size * 8)
            continue
        if n < size:
            return bytes(memoryview(out)[:n])
        if size >= cap:
            raise _too_big(limit)
        size = min(cap, size * 8)


# --- encode / decode -------------------------------------------------------------


def encode_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    timestamps: Sequence[int] | None = None,
    compression: int = COMPRESSION_NONE,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """Encode ``[(key, value[, headers]), ...]`` as one v2 record batch.

    ``timestamps`` gives one timestamp per record; otherwise every record gets
    ``timestamp_ms`` (default: now).
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    if timestamps is None:
        ts0 = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        timestamps = [ts0] * len(records)
    base_ts = timestamps[0]
    body = bytearray()
    for delta, rec in enumerate(records):
        key, value = rec[0], rec[1]
        headers: Sequence[Header] = rec[2] if len(rec) > 2 else ()
        r = bytearray()
        r.append(0)  # record attributes (unused)
        _write_varint(r, timestamps[delta] - base_ts)
        _write_varint(r, delta)
        _write_bytes(r, key)
        _write_bytes(r, value)
        _write_varint(r, len(headers))
        for hk, hv in headers:
            _write_bytes(r, hk.encode())
            _write_bytes(r, hv)
        _write_varint(body, len(r))
        body += r
    payload = _compress(compression, bytes(body))
    attributes = compression
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    batch_length = BATCH_HEADER_SIZE - 12 + len(payload)
    buf = bytearray(BATCH_HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        buf,
        0,
        base_offset,
        batch_length,
        partition_leader_epoch,
        2,
        0,
        attributes,
        len(records) - 1,
        base_ts,
        max(timestamps),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf += payload
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def decode_batch_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Decode the records of ONE v2 batch (any supported codec)."""
    h = BatchHeader.unpack(batch, 0)
    if h.magic != 2:
        raise KafkaError(ErrorCode.corrupt_message, f"magic {h.magic}")
    payload = _decompress(h.compression, bytes(batch[BATCH_HEADER_SIZE : h.size]))
    out: list[Record] = []
    pos = 0
    log_append = h.timestamp_type == 1
    for _ in range(h.records_count):
        length, pos = _read_varint(payload, pos)
        end = pos + length
        pos += 1  # attributes
        ts_delta, pos = _read_varint(payload, pos)
        off_delta, pos = _read_varint(payload, pos)
        key, pos = _read_bytes(payload, pos)
        value, pos = _read_bytes(payload, pos)
        nh, pos = _read_varint(payload, pos)
        headers: list[Header] = []
        for _h in range(nh):
            hk, pos = _read_bytes(payload, pos)
            hv, pos = _read_bytes(payload, pos)
            # Java's new String(bytes, UTF_8), as Kafka decodes header keys: malformed
            # bytes become U+FFFD rather than an exception on a producer's garbage.
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise KafkaError(ErrorCode.corrupt_message, "record length mismatch")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        out.append(Record(h.base_offset + off_delta, ts, key, value, headers))
    return out
