"""The follower's side of Fetch v12, hand-written (sans-IO): the request it sends and the
response it reads, once per replication round trip.

A follower sends a Fetch as soon as its previous append is done (REQ-R16, R17), so at
10,000 records/s each follower builds and parses thousands of these per second. kio's
pure-Python request writer and its dataclass-per-field responses cost more than the
whole rest of the round trip, so this module packs precompiled structs instead and
returns each partition's records as a zero-copy ``memoryview`` of the response frame.
Checked byte for byte against kio in tests/unit/protocol/test_replica_fetch.py.

Request (header v2, FetchRequest v12)::

    api_key i16 = 1, api_version i16 = 12, correlation_id i32, client_id i16-string,
    header tags uvarint 0
    replica_id i32, max_wait_ms i32, min_bytes i32, max_bytes i32, isolation_level i8,
    session_id i32, session_epoch i32,
    topics compact[]: topic compact-string, partitions compact[]: partition i32,
      current_leader_epoch i32, fetch_offset i64, last_fetched_epoch i32,
      log_start_offset i64, partition_max_bytes i32, tags; tags
    forgotten_topics_data compact[]: topic compact-string, partitions compact[] i32, tags;
    rack_id compact-string (""), tags

Response (header v1, FetchResponse v12): correlation_id i32, header tags,
throttle_time_ms i32, error_code i16, session_id i32, responses compact[]: topic
compact-string, partitions compact[]: partition_index i32, error_code i16,
high_watermark i64, last_stable_offset i64, log_start_offset i64,
aborted_transactions compact-nullable[] (producer_id i64, first_offset i64, tags),
preferred_read_replica i32, records compact-nullable-bytes, tags (skipped: a leader may
send diverging_epoch / current_leader); tags; tags.

Every length and count read from a response is checked against the bytes that remain
before it is used (``MalformedResponse``), so a broken peer costs a reconnect, not memory.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from odradek.protocol.wire import uvarint

__all__ = [
    "FETCH_V12",
    "FetchPartitionData",
    "MalformedResponse",
    "ReplicaFetchPartition",
    "decode_fetch_response_v12",
    "encode_replica_fetch_request",
]

FETCH_V12: Final = 12
_API_FETCH: Final = 1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">ihhi")  # size, api key, version, correlation id
_TOP = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, iso, session, epoch
_PART = struct.Struct(">iiqiqi")  # partition, leader epoch, offset, last epoch, start, max
_RESP_TOP = struct.Struct(">ihi")  # throttle, error, session id
_RESP_PART = struct.Struct(">ihqqq")  # partition, error, hw, lso, log start


class MalformedResponse(ValueError):
    """The response frame is not a well-formed FetchResponse v12."""


@dataclass(slots=True)
class ReplicaFetchPartition:
    """One partition of a follower's fetch."""

    topic: str
    partition: int
    fetch_offset: int  # the follower's LEO: the leader counts it toward its HW
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchPartitionData:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: memoryview | None


_topic_cache: dict[str, bytes] = {}


def _compact_string(s: str) -> bytes:
    cached = _topic_cache.get(s)
    if cached is None:
        raw = s.encode()
        cached = uvarint(len(raw) + 1) + raw
        if len(_topic_cache) < 100_000:
            _topic_cache[s] = cached
    return cached


def encode_replica_fetch_request(
    correlation_id: int,
    client_id: str,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partitions: Sequence[ReplicaFetchPartition],
    *,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Sequence[tuple[str, Sequence[int]]] = (),
) -> bytes:
    """Size prefix + header v2 + FetchRequest v12 body; partitions are grouped by topic
    in first-seen order. ``session_id``/``session_epoch``/``forgotten`` are the KIP-227
    fetch session fields (defaults: no session)."""
    topics: dict[str, list[ReplicaFetchPartition]] = {}
    for p in partitions:
        topics.setdefault(p.topic, []).append(p)
    cid = client_id.encode()
    parts: list[bytes] = [
        b"",
        _I16.pack(len(cid)),
        cid,
        b"\x00",
        _TOP.pack(replica_id, max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch),
        uvarint(len(topics) + 1),
    ]
    append = parts.append
    pack = _PART.pack
    for topic, ps in topics.items():
        append(_compact_string(topic))
        append(uvarint(len(ps) + 1))
        for p in ps:
            append(
                pack(
                    p.partition,
                    p.current_leader_epoch,
                    p.fetch_offset,
                    p.last_fetched_epoch,
                    p.log_start_offset,
                    p.partition_max_bytes,
                )
            )
            append(b"\x00")
        append(b"\x00")
    append(uvarint(len(forgotten) + 1))
    for topic, indexes in forgotten:
        append(_compact_string(topic))
        append(uvarint(len(indexes) + 1))
        for i in indexes:
            append(_I32.pack(i))
        append(b"\x00")
    append(b"\x01\x00")  # rack "", no tags
    body_len = sum(map(len, parts)) + 8  # + api key, version, correlation id
    parts[0] = _HEADER.pack(body_len, _API_FETCH, FETCH_V12, correlation_id)
    return b"".join(parts)


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise MalformedResponse(f"truncated at byte {start} (need {n})")
        self.pos = start + n
        return start

    def uvarint(self) -> int:
        result = shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        while True:
            if pos >= end:
                raise MalformedResponse("truncated varint")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return result
            shift += 7
            if shift > 28:
                raise MalformedResponse("varint longer than 5 bytes")

    def count(self, min_item_bytes: int) -> int:
        """A compact array length (-1 = null), bounded by the bytes left."""
        n = self.uvarint() - 1
        if n > 0 and n * min_item_bytes > self.end - self.pos:
            raise MalformedResponse(f"array of {n} items cannot fit in the frame")
        return n

    def skip_tags(self) -> None:
        n = self.uvarint()  # a plain count, not compact (+1)
        if n * 2 > self.end - self.pos:
            raise MalformedResponse(f"{n} tagged fields cannot fit in the frame")
        for _ in range(n):
            self.uvarint()
            self.take(self.uvarint())


def decode_fetch_response_v12(
    frame: bytes | memoryview,
) -> tuple[int, int, int, list[FetchPartitionData]]:
    """(correlation_id, top-level error code, session id, partitions) from a frame
    without its size prefix. Records are views of ``frame`` (keep it alive while they are used)."""
    buf = memoryview(frame)
    r = _Reader(buf, 0)
    (correlation_id,) = _I32.unpack_from(buf, r.take(4))
    r.skip_tags()
    _throttle, error, session_id = _RESP_TOP.unpack_from(buf, r.take(_RESP_TOP.size))
    out: list[FetchPartitionData] = []
    for _ in range(r.count(3)):
        n = r.uvarint() - 1
        topic = bytes(buf[r.take(n) : r.pos]).decode("utf-8", "replace") if n > 0 else ""
        for _ in range(r.count(_RESP_PART.size + 7)):
            idx, err, hw, lso, start = _RESP_PART.unpack_from(buf, r.take(_RESP_PART.size))
            aborted = r.count(17)
            if aborted > 0:
                for _ in range(aborted):
                    r.take(16)
                    r.skip_tags()
            r.take(4)  # preferred_read_replica
            size = r.uvarint() - 1
            records = buf[r.take(size) : r.pos] if size > 0 else None
            r.skip_tags()
            out.append(FetchPartitionData(topic, idx, err, hw, lso, start, records))
        r.skip_tags()
    r.skip_tags()
    return correlation_id, error, session_id, out
