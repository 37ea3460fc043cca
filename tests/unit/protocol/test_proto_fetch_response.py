"""The hand-written FetchResponse encoder matches kio, v4..v12, without copying records."""

from __future__ import annotations

import datetime
import itertools
import struct
from dataclasses import dataclass, fields
from typing import Any

import pytest
from _proto_samples import encode_entity, split_response
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from odradek.protocol.fetch_response import PartitionFetchResult, encode_fetch_response, parts_size


@dataclass(frozen=True)
class FakeSlice:
    """Stands in for storage.log.FileSlice: only ``size`` (and read_bytes) matter."""

    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    def read_bytes(self) -> bytes:
        return self.data


BATCH_A = bytes(range(200)) * 3
BATCH_B = b"\x07" * 150


def _topics() -> list[tuple[str, list[PartitionFetchResult]]]:
    return [
        (
            "orders",
            [
                PartitionFetchResult(0, 0, 100, 100, 0, FakeSlice(BATCH_A)),
                PartitionFetchResult(
                    1, 0, 50, 50, 10, BATCH_B, aborted_transactions=[(7, 3), (8, 4)]
                ),
                PartitionFetchResult(2, 1, -1, -1, -1, None),  # OFFSET_OUT_OF_RANGE, no data
                PartitionFetchResult(3, 0, 9, 9, 0, FakeSlice(b""), aborted_transactions=[]),
                PartitionFetchResult(4, 0, 9, 9, 0, FakeSlice(BATCH_B), preferred_read_replica=2),
            ],
        ),
        ("empty-topic", []),
        ("t2", [PartitionFetchResult(0, 0, 1, 1, 0, FakeSlice(BATCH_B))]),
    ]


def _records_bytes(records: Any) -> bytes:
    if records is None:
        return b""
    return records if isinstance(records, bytes) else records.read_bytes()


def _kio_response(version: int, topics: list, **top: int):  # type: ignore[no-untyped-def]
    cls = load_response_schema(1, version)
    names = {f.name for f in fields(cls)}
    topic_cls = next(f for f in fields(cls) if f.name == "responses").type.__args__[0]
    part_cls = next(f for f in fields(topic_cls) if f.name == "partitions").type.__args__[0]
    part_names = {f.name for f in fields(part_cls)}
    aborted_cls = (
        next(f for f in fields(part_cls) if f.name == "aborted_transactions")
        .type.__args__[0]
        .__args__[0]
    )

    def part(p: PartitionFetchResult):  # type: ignore[no-untyped-def]
        kw: dict[str, Any] = {
            "partition_index": p.index,
            "error_code": ErrorCode(p.error_code),
            "high_watermark": p.high_watermark,
            "last_stable_offset": p.last_stable_offset,
            "aborted_transactions": None
            if p.aborted_transactions is None
            else tuple(
                aborted_cls(producer_id=a, first_offset=b) for a, b in p.aborted_transactions
            ),
            "records": _records_bytes(p.records),
        }
        if "log_start_offset" in part_names:
            kw["log_start_offset"] = p.log_start_offset
        if "preferred_read_replica" in part_names:
            kw["preferred_read_replica"] = p.preferred_read_replica
        return part_cls(**kw)

    kw: dict[str, Any] = {
        "throttle_time": datetime.timedelta(milliseconds=top.get("throttle_time_ms", 0)),
        "responses": tuple(
            topic_cls(topic=name, partitions=tuple(part(p) for p in parts))
            for name, parts in topics
        ),
    }
    if "error_code" in names:
        kw["error_code"] = ErrorCode(top.get("error_code", 0))
        kw["session_id"] = top.get("session_id", 0)
    return cls(**kw)


def _flatten(parts: list[Any]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.read_bytes() for p in parts)


@pytest.mark.parametrize("version", range(4, 13))
def test_matches_kio(version: int) -> None:
    topics = _topics()
    top = (
        {"throttle_time_ms": 3, "error_code": 0, "session_id": 0}
        if version < 7
        else {
            "throttle_time_ms": 3,
            "error_code": 0,
            "session_id": 12345,
        }
    )
    parts = encode_fetch_response(version, 4321, topics, **top)
    # Sized objects pass through untouched; byte runs are coalesced.
    slices = [p for p in parts if not isinstance(p, bytes)]
    assert [s.data for s in slices] == [BATCH_A, BATCH_B, BATCH_B]
    for a, b in itertools.pairwise(parts):
        assert not (isinstance(a, bytes) and isinstance(b, bytes))
    assert isinstance(parts[0], bytes)
    assert struct.unpack_from(">i", parts[0])[0] == parts_size(parts) - 4

    correlation_id, body = split_response(_flatten(parts), flexible_header=version >= 12)
    assert correlation_id == 4321
    if version < 11:  # preferred_read_replica does not exist before v11
        topics[0][1][4].preferred_read_replica = -1
    expected = _kio_response(version, topics, **top)
    assert body == encode_entity(expected)
    decoded, size = entity_reader(load_response_schema(1, version))(body, 0)
    assert size == len(body) and decoded == expected


def test_all_bytes_records_is_one_part() -> None:
    topics = [
        (
            "t",
            [
                PartitionFetchResult(0, 0, 5, 5, 0, BATCH_A),
                PartitionFetchResult(1, 0, 5, 5, 0, None),
            ],
        )
    ]
    for version in (4, 11, 12):
        parts = encode_fetch_response(version, 1, topics)
        assert len(parts) == 1
        _, body = split_response(parts[0], flexible_header=version >= 12)
        assert body == encode_entity(_kio_response(version, topics))


def test_empty_response_and_top_level_error() -> None:
    parts = encode_fetch_response(
        12, 8, [], error_code=70, session_id=0
    )  # FETCH_SESSION_ID_NOT_FOUND
    _, body = split_response(parts[0], flexible_header=True)
    decoded, _ = entity_reader(load_response_schema(1, 12))(body, 0)
    assert decoded.error_code == 70 and decoded.responses == ()


def test_rejects_unserved_versions() -> None:
    for version in (3, 13):
        with pytest.raises(ValueError):
            encode_fetch_response(version, 1, [])
