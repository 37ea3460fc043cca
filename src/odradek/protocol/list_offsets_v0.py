"""ListOffsets v0 (Kafka's pre-KIP-79 "offset request"), decoded and encoded by hand.

Kafka serves v0 until 4.0; old clients (and librdkafka with ``api.version.request=false``
or a broker version below 0.10.1) still send it. kio has no schema for it, so this module
reads the request and writes the response with ``struct``, bounded like the validator:
every count is checked against the bytes left before anything is allocated, and a
malformed body raises ``ValueError`` (the dispatcher closes the connection).

    request:  replica_id i32, [topic: name str16, [partition i32, timestamp i64,
              max_num_offsets i32]]
    response: [topic: name str16, [partition i32, error_code i16, old_style_offsets [i64]]]
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">iqi")
_PART_SIZE = _PART.size  # 16
_TOPIC_MIN = 2 + 4  # empty name + empty partition array


@dataclass(frozen=True, slots=True)
class PartitionV0:
    partition_index: int
    timestamp: int
    max_num_offsets: int


@dataclass(frozen=True, slots=True)
class TopicV0:
    name: str
    partitions: tuple[PartitionV0, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsRequestV0:
    replica_id: int
    topics: tuple[TopicV0, ...]


def _count(buf: memoryview, pos: int, min_size: int, what: str) -> tuple[int, int]:
    if pos + 4 > len(buf):
        raise ValueError(f"{what}: truncated count")
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0 or n * min_size > len(buf) - pos:
        raise ValueError(f"{what}: count {n} exceeds the {len(buf) - pos} bytes left")
    return n, pos


def decode_request(body: bytes | bytearray | memoryview) -> ListOffsetsRequestV0:
    buf = memoryview(body)
    if len(buf) < 4:
        raise ValueError("truncated replica_id")
    replica_id = _I32.unpack_from(buf, 0)[0]
    n_topics, pos = _count(buf, 4, _TOPIC_MIN, "topics")
    topics = []
    for _ in range(n_topics):
        if pos + 2 > len(buf):
            raise ValueError("truncated topic name")
        n = _I16.unpack_from(buf, pos)[0]
        pos += 2
        if n < 0 or pos + n > len(buf):
            raise ValueError(f"bad topic name length {n}")
        name = bytes(buf[pos : pos + n]).decode("utf-8")
        pos += n
        n_parts, pos = _count(buf, pos, _PART_SIZE, "partitions")
        parts = []
        for _ in range(n_parts):
            p, ts, max_n = _PART.unpack_from(buf, pos)
            pos += _PART_SIZE
            parts.append(PartitionV0(p, ts, max_n))
        topics.append(TopicV0(name, tuple(parts)))
    return ListOffsetsRequestV0(replica_id, tuple(topics))


def encode_response(
    correlation_id: int, topics: list[tuple[str, list[tuple[int, int, list[int]]]]]
) -> bytes:
    """The size-prefixed response frame: topics of (partition, error_code, offsets)."""
    out = bytearray(4)
    out += _I32.pack(correlation_id)
    out += _I32.pack(len(topics))
    for name, parts in topics:
        raw = name.encode()
        out += _I16.pack(len(raw)) + raw
        out += _I32.pack(len(parts))
        for p, code, offsets in parts:
            out += struct.pack(f">ihi{len(offsets)}q", p, code, len(offsets), *offsets)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
