"""The follower's hand-written Fetch v12 codec: the request is byte-identical to kio's,
the response decoder reads what the broker's encoder writes (and kio's), skips tagged
fields, and refuses frames whose lengths or counts do not fit."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.client_codec import encode_request, nested_request, request_entity
from odradek.protocol.fetch_response import PartitionFetchResult, encode_fetch_response
from odradek.protocol.replica_fetch import (
    MalformedResponse,
    ReplicaFetchPartition,
    decode_fetch_response_v12,
    encode_replica_fetch_request,
)


def _part(
    topic: str, partition: int, epoch: int, offset: int, last_epoch: int, start: int, max_bytes: int
) -> ReplicaFetchPartition:
    return ReplicaFetchPartition(
        topic=topic,
        partition=partition,
        fetch_offset=offset,
        current_leader_epoch=epoch,
        last_fetched_epoch=last_epoch,
        log_start_offset=start,
        partition_max_bytes=max_bytes,
    )


def _kio_request(
    corr: int,
    parts: dict[str, list[ReplicaFetchPartition]],
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: tuple[tuple[str, tuple[int, ...]], ...] = (),
) -> bytes:
    req = request_entity(
        1,
        12,
        replica_id=2,
        max_wait=500,
        min_bytes=1,
        max_bytes=10485760,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(
            nested_request(
                1,
                12,
                "FetchTopic",
                topic=t,
                partitions=tuple(
                    nested_request(
                        1,
                        12,
                        "FetchPartition",
                        partition=p.partition,
                        current_leader_epoch=p.current_leader_epoch,
                        fetch_offset=p.fetch_offset,
                        last_fetched_epoch=p.last_fetched_epoch,
                        log_start_offset=p.log_start_offset,
                        partition_max_bytes=p.partition_max_bytes,
                    )
                    for p in ps
                ),
            )
            for t, ps in parts.items()
        ),
        forgotten_topics_data=tuple(
            nested_request(1, 12, "ForgottenTopic", topic=t, partitions=ps) for t, ps in forgotten
        ),
        rack_id="",
    )
    return encode_request(req, corr, "replica-fetcher-2")


def test_request_matches_kio_byte_for_byte() -> None:
    parts = {
        "orders": [
            _part("orders", 0, 5, 1234567890123, 4, 17, 1048576),
            _part("orders", 3, 5, 0, -1, 0, 1048576),
        ],
        "t" * 200: [_part("t" * 200, 7, 0, 9, 0, 0, 100)],
    }
    ours = encode_replica_fetch_request(
        42, "replica-fetcher-2", 2, 500, 1, 10485760, [p for ps in parts.values() for p in ps]
    )
    assert ours == _kio_request(42, parts)


def test_session_fields_and_forgotten_topics_match_kio() -> None:
    """KIP-227: an incremental fetch names its session and the partitions it drops."""
    parts = {"orders": [_part("orders", 1, 5, 99, 4, 0, 1048576)]}
    forgotten = (("orders", (0, 3)), ("gone", (7,)))
    ours = encode_replica_fetch_request(
        43,
        "replica-fetcher-2",
        2,
        500,
        1,
        10485760,
        parts["orders"],
        session_id=123456,
        session_epoch=9,
        forgotten=[(t, list(ps)) for t, ps in forgotten],
    )
    assert ours == _kio_request(43, parts, 123456, 9, forgotten)
    assert encode_replica_fetch_request(
        44, "replica-fetcher-2", 2, 500, 1, 10485760, [], session_id=5, session_epoch=2
    ) == _kio_request(44, {}, 5, 2)


def test_the_session_id_is_decoded() -> None:
    frame = b"".join(
        p if isinstance(p, bytes) else p.data
        for p in encode_fetch_response(12, 3, [], session_id=31337)
    )[4:]
    assert decode_fetch_response_v12(frame)[:3] == (3, 0, 31337)


def _response(topics: list[tuple[str, list[PartitionFetchResult]]], corr: int = 7) -> bytes:
    frame = b"".join(
        p if isinstance(p, bytes) else p.data for p in encode_fetch_response(12, corr, topics)
    )
    return frame[4:]  # without the size prefix


def test_decodes_the_brokers_own_response() -> None:
    frame = _response(
        [
            (
                "orders",
                [
                    PartitionFetchResult(0, 0, 100, 100, 3, b"\x01" * 70),
                    PartitionFetchResult(1, 6, -1, -1, -1, None),
                    PartitionFetchResult(2, 0, 9, 9, 0, b"", aborted_transactions=[(5, 6)]),
                ],
            )
        ]
    )
    corr, err, _session, parts = decode_fetch_response_v12(frame)
    assert (corr, err) == (7, 0)
    assert [
        (p.topic, p.partition, p.error_code, p.high_watermark, p.log_start_offset) for p in parts
    ] == [("orders", 0, 0, 100, 3), ("orders", 1, 6, -1, -1), ("orders", 2, 0, 9, 0)]
    assert bytes(parts[0].records) == b"\x01" * 70  # type: ignore[arg-type]
    assert parts[1].records is None and parts[2].records is None


def test_unknown_tagged_fields_are_skipped() -> None:
    frame = bytearray(_response([("a", [PartitionFetchResult(0, 0, 1, 1, 0, b"xy")])]))
    # The partition's (empty) tag section is the byte before the topic's tags and the top
    # level's: replace it with one unknown tag (tag 9, 3 bytes).
    assert frame[-3:] == b"\x00\x00\x00"
    frame[-3:-2] = b"\x01\x09\x03abc"
    _, _, _, parts = decode_fetch_response_v12(bytes(frame))
    assert bytes(parts[0].records) == b"xy"  # type: ignore[arg-type]


def test_lying_lengths_and_counts_are_refused() -> None:
    good = _response([("a", [PartitionFetchResult(0, 0, 1, 1, 0, b"xyz")])])
    # A records length far past the end of the frame.
    bad = bytearray(good)
    i = bad.index(b"\x04xyz")
    bad[i : i + 1] = b"\xff\xff\xff\x0f"
    with pytest.raises(MalformedResponse):
        decode_fetch_response_v12(bytes(bad))
    # A topic count of 2^28 in a 40-byte frame: refused before any loop runs.
    bad = bytearray(good)
    top = 4 + 1 + 10  # correlation id, header tags, throttle/error/session
    bad[top : top + 1] = b"\x80\x80\x80\x80\x01"
    with pytest.raises(MalformedResponse):
        decode_fetch_response_v12(bytes(bad))
    with pytest.raises(MalformedResponse):
        decode_fetch_response_v12(good[:-5])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_else(data: bytes) -> None:
    try:
        decode_fetch_response_v12(data)
    except MalformedResponse:
        pass
    except (struct.error, UnicodeDecodeError) as e:  # pragma: no cover - must not happen
        pytest.fail(f"unexpected {e!r}")
