"""__consumer_offsets record formats (Kafka's exact bytes) and group → partition mapping."""

from __future__ import annotations

import struct

import pytest

from odradek.coordinator.group_codec import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from odradek.coordinator.runtime import java_string_hashcode, partition_for
from odradek.errors import KafkaError


def s16(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def test_offset_key_is_kafkas_v1_layout() -> None:
    raw = encode_offset_key("g", "topic", 7)
    assert raw == struct.pack(">h", 1) + s16("g") + s16("topic") + struct.pack(">i", 7)
    assert decode_key(raw) == OffsetKey("g", "topic", 7)
    # version 0 keys (older brokers) have the same layout
    assert decode_key(struct.pack(">h", 0) + raw[2:]) == OffsetKey("g", "topic", 7)


def test_offset_value_is_kafkas_v3_layout() -> None:
    v = OffsetValue(offset=42, leader_epoch=3, metadata="meta", commit_timestamp=1700000000000)
    raw = encode_offset_value(v)
    assert raw == (struct.pack(">hqi", 3, 42, 3) + s16("meta") + struct.pack(">q", 1700000000000))
    assert decode_offset_value(raw) == v


def test_offset_value_v1_with_expire_timestamp_decodes() -> None:
    raw = struct.pack(">hq", 1, 9) + s16("") + struct.pack(">qq", 5, 99)
    assert decode_offset_value(raw) == OffsetValue(9, -1, "", 5)


def test_group_key_and_value_round_trip() -> None:
    assert encode_group_key("grp") == struct.pack(">h", 2) + s16("grp")
    assert decode_key(encode_group_key("grp")) == GroupKey("grp")
    v = GroupValue(
        "consumer",
        4,
        "range",
        "m-1",
        123,
        (
            MemberValue("m-1", None, "client", "/127.0.0.1", 300000, 10000, b"sub", b"asg"),
            MemberValue("m-2", "inst-2", "client2", "/127.0.0.2", 60000, 45000, b"", b"\x00"),
        ),
    )
    raw = encode_group_value(v)
    assert raw[:2] == struct.pack(">h", 3)
    assert decode_group_value(raw) == v
    # member layout: memberId, groupInstanceId (null = -1), clientId, clientHost,
    # rebalanceTimeout, sessionTimeout, subscription, assignment
    first_member = (
        s16("m-1")
        + struct.pack(">h", -1)
        + s16("client")
        + s16("/127.0.0.1")
        + struct.pack(">ii", 300000, 10000)
        + struct.pack(">i", 3)
        + b"sub"
        + struct.pack(">i", 3)
        + b"asg"
    )
    assert first_member in raw


def test_empty_group_value_nulls() -> None:
    v = GroupValue("consumer", 2, None, None, -1, ())
    raw = encode_group_value(v)
    assert raw == (struct.pack(">h", 3) + s16("consumer") + struct.pack(">ihhqi", 2, -1, -1, -1, 0))
    assert decode_group_value(raw) == v


def test_unknown_key_versions_are_skipped_and_truncation_raises() -> None:
    assert decode_key(struct.pack(">h", 5) + b"whatever") is None
    with pytest.raises(KafkaError):
        decode_offset_value(struct.pack(">hq", 3, 1))


@pytest.mark.parametrize(
    "group, hashcode, partition",
    [
        # Values printed by Java 17's String.hashCode on this machine.
        ("", 0, 0),
        ("abc", 96354, 4),
        ("my-group", -1906497762, 12),
        ("consumer-group-with-a-long-name-0123456789", -1857696348, 48),
        ("grüppe-\U0001f600", -1039948164, 14),  # non-BMP: UTF-16 surrogate pair
        ("polygenelubricants", -2147483648, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    ],
)
def test_group_partition_is_kafkas(group: str, hashcode: int, partition: int) -> None:
    assert java_string_hashcode(group) == hashcode
    assert partition_for(group, 50) == partition
