"""Micro-benchmark of the protocol hot paths; prints ops/s, asserts nothing.

.venv/bin/python bench/protocol_codecs.py
"""

from __future__ import annotations

import datetime
import io
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from kio.index import load_request_schema
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i32Timedelta

from odradek.protocol.codec import decode_request
from odradek.protocol.fetch_response import PartitionFetchResult, encode_fetch_response
from odradek.protocol.framing import FrameDecoder
from odradek.protocol.produce_response import PartitionProduceResult, encode_produce_response


@dataclass(frozen=True)
class _Slice:  # stands in for storage.log.FileSlice
    fd: int
    position: int
    size: int


def _rate(name: str, fn: Callable[[], object], seconds: float = 1.0) -> None:
    n = 0
    batch = 200
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(batch):
            fn()
        n += batch
    elapsed = time.perf_counter() - start
    print(f"{name:<48} {n / elapsed:>12,.0f} ops/s  ({elapsed / n * 1e6:.2f} us/op)")


def _produce_v9_frame(records: bytes) -> bytes:
    cls = load_request_schema(0, 9)
    topic_cls = cls.__dataclass_fields__["topic_data"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partition_data"].type.__args__[0]
    req = cls(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(
            topic_cls(name="bench", partition_data=(part_cls(index=i32(0), records=records),)),
        ),
    )
    buf = io.BytesIO()
    entity_writer(RequestHeader)(
        buf,
        RequestHeader(
            request_api_key=i16(0),
            request_api_version=i16(9),
            correlation_id=i32(1),
            client_id="bench",
        ),
    )
    entity_writer(cls)(buf, req)
    return buf.getvalue()


def main() -> None:
    frame = _produce_v9_frame(b"\x00" * 1024)
    _rate("decode_request(Produce v9, 1 KiB records)", lambda: decode_request(frame))

    produce_topics = [("bench", [PartitionProduceResult(0, 0, 123456)])]
    _rate(
        "encode_produce_response(v9, 1 partition)",
        lambda: encode_produce_response(9, 1, produce_topics),
    )

    fetch_topics = [
        (
            "bench",
            [
                PartitionFetchResult(p, 0, 10_000, 10_000, 0, _Slice(3, 0, 1 << 20))
                for p in range(4)
            ],
        )
    ]
    _rate(
        "encode_fetch_response(v12, 4 partitions)",
        lambda: encode_fetch_response(12, 1, fetch_topics),
    )
    _rate(
        "encode_fetch_response(v11, 4 partitions)",
        lambda: encode_fetch_response(11, 1, fetch_topics),
    )

    stream = (struct.pack(">i", len(frame)) + frame) * 64
    _rate("FrameDecoder.feed(64 Produce frames)", lambda: FrameDecoder().feed(stream))


if __name__ == "__main__":
    main()
