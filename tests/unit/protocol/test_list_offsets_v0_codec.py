"""ListOffsets v0, hand-coded (kio has no schema for it): decode bounds, encode layout."""

from __future__ import annotations

import struct

import pytest

from odradek.protocol.codec import InvalidRequest, decode_request
from odradek.protocol.list_offsets_v0 import (
    ListOffsetsRequestV0,
    PartitionV0,
    TopicV0,
    encode_response,
)
from odradek.protocol.list_offsets_v0 import decode_request as decode_v0
from odradek.protocol.versions import ADVERTISED, is_served


def _body(replica: int, topics: list[tuple[str, list[tuple[int, int, int]]]]) -> bytes:
    out = struct.pack(">ii", replica, len(topics))
    for name, parts in topics:
        out += struct.pack(">h", len(name)) + name.encode() + struct.pack(">i", len(parts))
        for p in parts:
            out += struct.pack(">iqi", *p)
    return out


def _frame(body: bytes, correlation_id: int = 7) -> bytes:
    return struct.pack(">hhih", 2, 0, correlation_id, 3) + b"cli" + body


def test_decode_round_trip_and_dispatch() -> None:
    body = _body(-1, [("t", [(0, -1, 5), (3, -2, 1)]), ("u", [])])
    want = ListOffsetsRequestV0(
        -1, (TopicV0("t", (PartitionV0(0, -1, 5), PartitionV0(3, -2, 1))), TopicV0("u", ()))
    )
    assert decode_v0(body) == want
    header, req = decode_request(_frame(body))
    assert (header.api_key, header.api_version, header.correlation_id) == (2, 0, 7)
    assert req == want
    assert is_served(2, 0) and ADVERTISED[2] == (0, 7)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        struct.pack(">ii", -1, 1_000_000),  # count larger than the bytes left
        struct.pack(">ii", -1, 1) + struct.pack(">h", 50) + b"t",  # name past the end
        struct.pack(">ii", -1, 1)
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">i", 2)
        + struct.pack(">iqi", 0, -1, 1),  # second partition missing
        struct.pack(">ii", -1, -3),
    ],
)
def test_malformed_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        decode_request(_frame(body))


def test_element_bound() -> None:
    body = _body(-1, [("t", [(i, -1, 1) for i in range(20)])])
    with pytest.raises(InvalidRequest):
        decode_request(_frame(body), max_elements=10)


def test_encode_layout() -> None:
    frame = encode_response(9, [("t", [(0, 0, [42, 0]), (1, 3, [])])])
    size, cid, n_topics, name_len = struct.unpack_from(">iiih", frame, 0)
    assert (size, cid, n_topics, name_len) == (len(frame) - 4, 9, 1, 1)
    pos = 14 + 1
    assert struct.unpack_from(">i", frame, pos)[0] == 2
    assert struct.unpack_from(">ihiqq", frame, pos + 4) == (0, 0, 2, 42, 0)
    assert struct.unpack_from(">ihi", frame, pos + 4 + 26) == (1, 3, 0)
