"""Kafka's record formats for ``__consumer_offsets`` (pure, no I/O).

Odradek writes exactly what a Kafka 2.x/3.x broker writes, so Kafka's own tools (for
example ``kafka-console-consumer --formatter ...OffsetsMessageFormatter``) can read the
topic. All integers are big-endian; ``string`` is an i16 length + UTF-8 (-1 = null);
``bytes`` is an i32 length + data. Keys start with an i16 *key version*, values with an
i16 *value version*:

=====================  ========  ===========================================================
record                 version   layout
=====================  ========  ===========================================================
offset commit key      0 or 1    group string, topic string, partition i32
offset commit value    3         offset i64, leaderEpoch i32, metadata string,
                                 commitTimestamp i64   (v1 adds expireTimestamp i64; v0/v2
                                 lack leaderEpoch — decoded, never written)
group metadata key     2         group string
group metadata value   3         protocolType string, generation i32, protocol string?,
                                 leader string?, currentStateTimestamp i64, members[i32 n]:
                                 memberId string, groupInstanceId string?, clientId string,
                                 clientHost string, rebalanceTimeout i32, sessionTimeout i32,
                                 subscription bytes, assignment bytes
=====================  ========  ===========================================================

A record with a null value is a tombstone: the offset was deleted / the group removed
(compaction then drops the key). Both offset-commit key versions (0 and 1) mean the same.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "OffsetKey",
    "GroupKey",
    "OffsetValue",
    "GroupValue",
    "MemberValue",
    "encode_offset_key",
    "encode_offset_value",
    "encode_group_key",
    "encode_group_value",
    "decode_key",
    "decode_offset_value",
    "decode_group_value",
]

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


# ------------------------------------------------------------------ writer helpers
class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i16(self, v: int) -> _Writer:
        self.buf += _I16.pack(v)
        return self

    def i32(self, v: int) -> _Writer:
        self.buf += _I32.pack(v)
        return self

    def i64(self, v: int) -> _Writer:
        self.buf += _I64.pack(v)
        return self

    def string(self, s: str | None) -> _Writer:
        if s is None:
            return self.i16(-1)
        data = s.encode()
        if len(data) > 0x7FFF:
            raise KafkaError(ErrorCode.invalid_request, "string longer than 32767 bytes")
        self.i16(len(data))
        self.buf += data
        return self

    def bytes_(self, b: bytes | None) -> _Writer:
        if b is None:
            return self.i32(-1)
        self.i32(len(b))
        self.buf += b
        return self


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise KafkaError(ErrorCode.corrupt_message, "truncated __consumer_offsets record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode()

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else bytes(self._take(n))


# ------------------------------------------------------------------ keys
def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(_Writer().i16(OFFSET_KEY_VERSION).string(group).string(topic).i32(partition).buf)


def encode_group_key(group: str) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(group).buf)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record; None for record types we do not use
    (e.g. the new consumer protocol's keys, version >= 3)."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        group, topic = r.string() or "", r.string() or ""
        return OffsetKey(group, topic, r.i32())
    if version == 2:
        return GroupKey(r.string() or "")
    return None


# ------------------------------------------------------------------ offset values
def encode_offset_value(v: OffsetValue) -> bytes:
    return bytes(
        _Writer()
        .i16(OFFSET_VALUE_VERSION)
        .i64(v.offset)
        .i32(v.leader_epoch)
        .string(v.metadata)
        .i64(v.commit_timestamp)
        .buf
    )


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise KafkaError(ErrorCode.corrupt_message, f"offset commit value version {version}")
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    ts = r.i64()
    return OffsetValue(offset, epoch, metadata, ts)


# ------------------------------------------------------------------ group values
def encode_group_value(v: GroupValue) -> bytes:
    w = (
        _Writer()
        .i16(GROUP_VALUE_VERSION)
        .string(v.protocol_type)
        .i32(v.generation)
        .string(v.protocol)
        .string(v.leader)
        .i64(v.current_state_timestamp)
        .i32(len(v.members))
    )
    for m in v.members:
        (
            w.string(m.member_id)
            .string(m.group_instance_id)
            .string(m.client_id)
            .string(m.client_host)
            .i32(m.rebalance_timeout_ms)
            .i32(m.session_timeout_ms)
            .bytes_(m.subscription)
            .bytes_(m.assignment)
        )
    return bytes(w.buf)


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise KafkaError(ErrorCode.corrupt_message, f"group metadata value version {version}")
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.i32(), 0)):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        session = r.i32()
        rebalance = session
        if version >= 1:
            rebalance, session = session, r.i32()
        members.append(
            MemberValue(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance,
                session,
                r.bytes_(),
                r.bytes_(),
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, ts, tuple(members))
