"""The hand-written ProduceResponse encoder matches kio byte for byte, v3..v10."""

from __future__ import annotations

import datetime
from dataclasses import fields

import pytest
from _proto_samples import encode_entity, split_response
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from odradek.protocol.produce_response import PartitionProduceResult, encode_produce_response

TOPICS = [
    (
        "orders",
        [
            PartitionProduceResult(0, 0, 1234, -1, 0),
            PartitionProduceResult(3, 6, -1, -1, -1, "not the leader: broker 2 leads"),
            PartitionProduceResult(4, 87, -1, -1, -1, "keyless", [(0, "no key"), (10, None)]),
        ],
    ),
    ("ünïcode-topic", [PartitionProduceResult(1, 0, 2**40, 1_700_000_000_123, 17)]),
    ("empty", []),
]


def _kio_response(version: int, topics: list, throttle_ms: int):  # type: ignore[no-untyped-def]
    cls = load_response_schema(0, version)
    topic_cls = fields(cls)[0].type.__args__[0]
    part_cls = next(f for f in fields(topic_cls) if f.name == "partition_responses").type.__args__[
        0
    ]
    names = {f.name for f in fields(part_cls)}

    def part(p: PartitionProduceResult):  # type: ignore[no-untyped-def]
        kw = {
            "index": p.index,
            "error_code": ErrorCode(p.error_code),
            "base_offset": p.base_offset,
            "log_append_time": None
            if p.log_append_time_ms == -1
            else datetime.datetime.fromtimestamp(p.log_append_time_ms / 1000, tz=datetime.UTC),
        }
        if "log_start_offset" in names:
            kw["log_start_offset"] = p.log_start_offset
        if "record_errors" in names:
            rec_cls = next(f for f in fields(part_cls) if f.name == "record_errors").type.__args__[
                0
            ]
            kw["record_errors"] = tuple(
                rec_cls(batch_index=i, batch_index_error_message=m)
                for i, m in (p.record_errors or [])
            )
            kw["error_message"] = p.error_message
        return part_cls(**kw)

    return cls(
        responses=tuple(
            topic_cls(name=name, partition_responses=tuple(part(p) for p in parts))
            for name, parts in topics
        ),
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
    )


@pytest.mark.parametrize("version", range(3, 11))
def test_matches_kio(version: int) -> None:
    topics = (
        TOPICS
        if version >= 8
        else [
            (
                n,
                [
                    PartitionProduceResult(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        p.log_append_time_ms,
                        p.log_start_offset,
                    )
                    for p in ps
                ],
            )
            for n, ps in TOPICS
        ]
    )
    out = encode_produce_response(version, 99, topics, throttle_time_ms=25)
    correlation_id, body = split_response(out, flexible_header=version >= 9)
    assert correlation_id == 99
    expected = _kio_response(version, topics, 25)
    assert body == encode_entity(expected)
    decoded, size = entity_reader(load_response_schema(0, version))(body, 0)
    assert size == len(body) and decoded == expected
    if version < 5:
        return
    first = decoded.responses[0].partition_responses[0]
    assert (first.index, first.base_offset, first.log_start_offset) == (0, 1234, 0)


def test_rejects_unserved_versions() -> None:
    for version in (2, 11):
        with pytest.raises(ValueError):
            encode_produce_response(version, 1, [])


def test_long_names_use_multibyte_varints() -> None:
    topics = [("t" * 300, [PartitionProduceResult(i, 0, i) for i in range(130)])]
    _, body = split_response(encode_produce_response(10, 5, topics), flexible_header=True)
    assert body == encode_entity(_kio_response(10, topics, 0))
