"""Hand-encoded Fetch v11 and Produce v8 (the client's hot paths), and a bounded reader.

kio decodes a Fetch response into entities whose ``records`` field is a fresh ``bytes``
copy per partition; the Spark source wants the record batches as a view of the frame it
received, to decode them straight into Arrow buffers (tests/unit/client compares these
encoders and decoders with kio's, field by field).

Both APIs are used at non-flexible versions (Fetch v11: the last with topic names and
without tagged fields; Produce v8: the last before KIP-482), which every Kafka broker
since 2.3 and Odradek serve.

Every length and count in a response is checked against the bytes that are left before
it is used (``ResponseReader``); a violation raises ``MalformedResponse``, and the
connection that received it is closed by the caller.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "FETCH_VERSION",
    "PRODUCE_VERSION",
    "FETCH_KEY",
    "PRODUCE_KEY",
    "MalformedResponse",
    "ResponseReader",
    "FetchPartitionRequest",
    "FetchedPartition",
    "encode_fetch_request",
    "decode_fetch_response",
    "ProducePartitionResult",
    "encode_produce_request",
    "decode_produce_response",
]

FETCH_KEY, FETCH_VERSION = 1, 11
PRODUCE_KEY, PRODUCE_VERSION = 0, 8

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_FETCH_HEAD = struct.Struct(">iiiibii")  # replica, max_wait, min_bytes, max_bytes, iso, sess, epoch
_FETCH_PART = struct.Struct(">iiqqi")  # partition, leader epoch, offset, log start, max bytes
_FETCH_RESP_PART = struct.Struct(">ihqqq")  # index, error, hw, lso, log start
_ABORTED = struct.Struct(">qq")
_FETCH_HEAD_RESP = struct.Struct(">ihi")  # throttle, error, session id
_PRODUCE_RESP_PART = struct.Struct(">ihqqq")  # index, error, base offset, append time, log start


class MalformedResponse(ValueError):
    """A response that does not parse within its own frame."""


class ResponseReader:
    """Big-endian reads over one frame; every read is bounded by the frame's end."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: memoryview | bytes, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise MalformedResponse(f"need {n} bytes at {self.pos}, frame ends at {self.end}")

    def unpack(self, st: struct.Struct) -> tuple[int, ...]:
        self._need(st.size)
        out = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return out

    def i16(self) -> int:
        return self.unpack(_I16)[0]

    def i32(self) -> int:
        return self.unpack(_I32)[0]

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        self._need(n)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            raise MalformedResponse(f"string at {self.pos - n} is not UTF-8") from e

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise MalformedResponse(f"null string at {self.pos - 2}")
        return s

    def nullable_bytes(self) -> memoryview | None:
        n = self.i32()
        if n == -1:
            return None
        self._need(n)
        view = memoryview(self.buf)[self.pos : self.pos + n]
        self.pos += n
        return view

    def array_count(self, min_element_bytes: int, *, nullable: bool = False) -> int:
        """An array length, refused when the rest of the frame cannot hold that many."""
        n = self.i32()
        if n == -1 and nullable:
            return -1
        if n < 0 or n * min_element_bytes > self.end - self.pos:
            raise MalformedResponse(
                f"array of {n} elements at {self.pos - 4} does not fit "
                f"in the {self.end - self.pos} bytes left"
            )
        return n


def _string(s: str) -> bytes:
    raw = s.encode()
    return _I16.pack(len(raw)) + raw


# --------------------------------------------------------------------------- Fetch v11


@dataclass(frozen=True, slots=True)
class FetchPartitionRequest:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class FetchedPartition:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None  # (producer id, first offset)
    preferred_read_replica: int
    records: memoryview  # zero or more v2 batches; the last one may be cut off


def encode_fetch_request(
    partitions: Sequence[FetchPartitionRequest],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
) -> bytes:
    """FetchRequest v11 body, sessionless (session id 0, epoch -1: a full fetch)."""
    by_topic: dict[str, list[FetchPartitionRequest]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    out = [
        _FETCH_HEAD.pack(-1, max_wait_ms, min_bytes, max_bytes, isolation_level, 0, -1),
        _I32.pack(len(by_topic)),
    ]
    for topic, parts in by_topic.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(parts)))
        out.extend(
            _FETCH_PART.pack(p.partition, p.current_leader_epoch, p.offset, -1, p.max_bytes)
            for p in parts
        )
    out.append(_I32.pack(0))  # forgotten_topics_data
    out.append(_string(""))  # rack_id
    return b"".join(out)


def decode_fetch_response(body: memoryview | bytes) -> tuple[int, list[FetchedPartition]]:
    """FetchResponse v11 body (after the correlation id) -> (top-level error, partitions).

    ``records`` are views of ``body``: no bytes are copied.
    """
    r = ResponseReader(body)
    _throttle, error_code, _session = r.unpack(_FETCH_HEAD_RESP)
    out: list[FetchedPartition] = []
    for _ in range(r.array_count(6)):
        topic = r.string()
        for _ in range(r.array_count(_FETCH_RESP_PART.size + 12)):
            index, err, hw, lso, log_start = r.unpack(_FETCH_RESP_PART)
            n = r.array_count(_ABORTED.size, nullable=True)
            aborted = None if n < 0 else [r.unpack(_ABORTED) for _ in range(n)]
            preferred = r.i32()
            records = r.nullable_bytes()
            out.append(
                FetchedPartition(
                    topic,
                    index,
                    err,
                    hw,
                    lso,
                    log_start,
                    aborted,  # type: ignore[arg-type]
                    preferred,
                    records if records is not None else memoryview(b""),
                )
            )
    if r.pos != r.end:
        raise MalformedResponse(f"{r.end - r.pos} trailing bytes after the fetch response")
    return error_code, out


# --------------------------------------------------------------------------- Produce v8


@dataclass(slots=True)
class ProducePartitionResult:
    topic: str
    partition: int
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None


def encode_produce_request(
    batches: Sequence[tuple[str, int, bytes | memoryview]], *, acks: int, timeout_ms: int
) -> list[bytes | memoryview]:
    """ProduceRequest v8 body as parts (the record batches are not copied).

    ``batches``: (topic, partition, records); one entry per partition.
    """
    by_topic: dict[str, list[tuple[int, bytes | memoryview]]] = {}
    for topic, partition, records in batches:
        by_topic.setdefault(topic, []).append((partition, records))
    out: list[bytes | memoryview] = [
        _I16.pack(-1),
        _I16.pack(acks),
        _I32.pack(timeout_ms),
        _I32.pack(len(by_topic)),
    ]
    for topic, parts in by_topic.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(parts)))
        for partition, records in parts:
            out.append(_I32.pack(partition))
            out.append(_I32.pack(len(records)))
            out.append(records)
    return out


def decode_produce_response(body: memoryview | bytes) -> list[ProducePartitionResult]:
    r = ResponseReader(body)
    out: list[ProducePartitionResult] = []
    for _ in range(r.array_count(6)):
        topic = r.string()
        for _ in range(r.array_count(_PRODUCE_RESP_PART.size + 6)):
            index, err, base, _append_time, log_start = r.unpack(_PRODUCE_RESP_PART)
            messages = []
            for _ in range(r.array_count(6)):
                r.i32()
                messages.append(r.nullable_string())
            msg = r.nullable_string()
            if msg is None and messages:
                msg = "; ".join(m for m in messages if m)
            out.append(ProducePartitionResult(topic, index, err, base, log_start, msg))
    r.i32()  # throttle_time_ms
    if r.pos != r.end:
        raise MalformedResponse(f"{r.end - r.pos} trailing bytes after the produce response")
    return out
