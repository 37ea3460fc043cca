"""The consumer protocol's embedded assignment and subscription (bytes a client wrote,
relayed by the coordinator), decoded without trusting their counts."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.consumer_protocol import assignment_partitions, subscription_topics


def encode(
    assignment: list[tuple[str, list[int]]], version: int = 0, user_data: bytes = b""
) -> bytes:
    out = struct.pack(">hi", version, len(assignment))
    for topic, parts in assignment:
        name = topic.encode()
        out += (
            struct.pack(">h", len(name))
            + name
            + struct.pack(f">i{len(parts)}i", len(parts), *parts)
        )
    return out + struct.pack(">i", len(user_data)) + user_data


@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=20), st.lists(st.integers(0, 2**31 - 1), max_size=8)
        ),
        max_size=6,
    ),
    st.integers(0, 3),
    st.binary(max_size=16),
)
def test_round_trip(
    assignment: list[tuple[str, list[int]]], version: int, user_data: bytes
) -> None:
    expected = [(t, p) for t, parts in assignment for p in parts]
    assert assignment_partitions(encode(assignment, version, user_data)) == expected


def test_empty_and_truncated_read_as_nothing() -> None:
    assert assignment_partitions(None) == []
    assert assignment_partitions(b"") == []
    whole = encode([("t", [0, 1, 2])])
    for cut in range(1, len(whole) - 4):  # anything short of the partition list
        got = assignment_partitions(whole[:cut])
        assert got == [] or got == [("t", 0), ("t", 1), ("t", 2)]


def test_hostile_counts_allocate_nothing() -> None:
    # 2^31-1 topics / partitions in a 20-byte assignment: refused by the byte count.
    assert assignment_partitions(struct.pack(">hi", 0, 2**31 - 1) + b"\0" * 14) == []
    assert (
        assignment_partitions(struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", 2**31 - 1))
        == []
    )
    assert assignment_partitions(struct.pack(">hih", 0, 1, -5)) == []
    assert (
        assignment_partitions(struct.pack(">hih", 0, 1, 2) + b"\xff\xfe" + struct.pack(">ii", 1, 0))
        == []
    )  # not UTF-8


def _str(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def test_subscription_topics_are_read_within_the_bytes_sent() -> None:
    def sub(*topics: bytes, version: int = 1) -> bytes:
        body = struct.pack(">hi", version, len(topics)) + b"".join(_str(t) for t in topics)
        return body + struct.pack(">i", -1)  # user data: null

    assert subscription_topics(sub(b"a", b"bb")) == {"a", "bb"}
    assert subscription_topics(sub()) == set()
    # Hostile counts and lengths read as nothing, without allocating by the count.
    assert subscription_topics(struct.pack(">hi", 0, 2**31 - 1)) == set()
    assert subscription_topics(struct.pack(">hih", 0, 1, 30000) + b"x") == set()
    assert subscription_topics(struct.pack(">hi", 0, -5)) == set()
    assert subscription_topics(b"") == set()
    assert subscription_topics(None) == set()
    assert subscription_topics(struct.pack(">hih", 0, 1, 2) + b"\xff\xfe") == set()
