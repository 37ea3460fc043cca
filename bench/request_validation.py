#!/usr/bin/env python
"""Micro-benchmark: the cost of bounded decoding (protocol/validator.py) per request.

Every request body is walked by its compiled validator before kio's native reader decodes
it (issue 11). This prints, for the hot-path requests, the validator's time per request,
kio's decode time, and the whole ``decode_request`` (header + validator + kio), as the
median of ``--repeat`` timing rounds, in this process's CPU time (``--clock wall`` for
wall time). Asserts nothing.

    .venv/bin/python bench/request_validation.py [--repeat 5] [--seconds 0.5] [--clock cpu]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from odradek.protocol.codec import decode_request, peek_header
from odradek.protocol.validator import DEFAULT_MAX_ELEMENTS, request_validator


def _module(api_key: int, version: int) -> Any:
    return sys.modules[load_request_schema(api_key, version).__module__]


def _new(cls: type, **kw: Any) -> Any:
    """An instance of ``cls`` from the keyword arguments its version has."""
    names = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in kw.items() if k in names})


def _frame(entity: Any) -> bytes:
    cls = type(entity)
    header_cls = RequestHeaderV2 if cls.__header_schema__.__version__ >= 2 else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=cls.__api_key__,
            request_api_version=cls.__version__,
            correlation_id=1,
            client_id="bench",
        ),
    )
    entity_writer(cls)(buf, entity)
    return buf.getvalue()


def produce(version: int, partitions: int, record_bytes: int) -> bytes:
    m = _module(0, version)
    parts = tuple(
        m.PartitionProduceData(index=i, records=b"\x00" * record_bytes) for i in range(partitions)
    )
    return _frame(
        m.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=timedelta(seconds=30),
            topic_data=(m.TopicProduceData(name="bench", partition_data=parts),),
        )
    )


def fetch(version: int, partitions: int, replica_id: int) -> bytes:
    m = _module(1, version)
    parts = tuple(
        _new(
            m.FetchPartition,
            partition=i,
            current_leader_epoch=3,
            fetch_offset=123456,
            last_fetched_epoch=-1,
            log_start_offset=0,
            partition_max_bytes=1 << 20,
        )
        for i in range(partitions)
    )
    return _frame(
        _new(
            m.FetchRequest,
            replica_id=replica_id,
            max_wait=timedelta(milliseconds=500),
            min_bytes=1,
            max_bytes=50 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(m.FetchTopic(topic="bench", partitions=parts),),
            forgotten_topics_data=(),
            rack_id="",
        )
    )


# CPU time of this process by default: on the shared 2-core machine wall time also counts
# the time other processes hold the CPU (--clock wall to see it).
_CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
_clock = time.process_time


def _us_per_call(fn: Callable[[], object], seconds: float) -> float:
    n = 0
    batch = 100
    start = _clock()
    deadline = start + seconds
    while _clock() < deadline:
        for _ in range(batch):
            fn()
        n += batch
    return (_clock() - start) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--clock", choices=sorted(_CLOCKS), default="cpu")
    args = ap.parse_args()
    global _clock
    _clock = _CLOCKS[args.clock]
    cases = [
        ("Produce v9, 1 partition, 1 KiB", produce(9, 1, 1024)),
        ("Produce v10, 10 partitions, 1 KiB each", produce(10, 10, 1024)),
        ("Fetch v12 consumer, 1 partition", fetch(12, 1, -1)),
        ("Fetch v11 consumer, 4 partitions", fetch(11, 4, -1)),
        ("Fetch v12 follower, 100 partitions", fetch(12, 100, 2)),
        ("Fetch v12 follower, 1000 partitions", fetch(12, 1000, 2)),
    ]
    print(
        f"{'request':<40} {'validator':>10} {'kio read':>10} {'decode_request':>15}  (µs "
        f"{args.clock} time per request, median of {args.repeat})"
    )
    for name, frame in cases:
        header = peek_header(frame)
        validate = request_validator(header.api_key, header.api_version)
        reader = entity_reader(load_request_schema(header.api_key, header.api_version))
        pos, end = header.header_size, len(frame)
        rows: list[tuple[float, float, float]] = []
        for _ in range(args.repeat):
            rows.append(
                (
                    _us_per_call(
                        lambda v=validate, f=frame, p=pos, e=end: v(f, p, e, DEFAULT_MAX_ELEMENTS),
                        args.seconds,
                    ),
                    _us_per_call(lambda r=reader, f=frame, p=pos: r(f, p), args.seconds),
                    _us_per_call(lambda f=frame: decode_request(f), args.seconds),
                )
            )
        v, k, d = (statistics.median(col) for col in zip(*rows))
        print(f"{name:<40} {v:>10.2f} {k:>10.2f} {d:>15.2f}")


if __name__ == "__main__":
    main()
