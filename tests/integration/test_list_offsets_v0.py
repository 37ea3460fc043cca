"""ListOffsets v0 against a real broker: Kafka's legacy offsets (latest = HW then segment
bases, earliest = log start), answered in v0's layout (kio has no v0 schema)."""

from __future__ import annotations

import struct

import pytest
from confluent_kafka import Producer
from rawclient import RawClient
from replication_util import create_topic

from odradek.cluster.local import LocalCluster

pytestmark = pytest.mark.integration


def _request(topic: str, parts: list[tuple[int, int, int]], cid: int) -> bytes:
    body = struct.pack(">ii", -1, 1) + struct.pack(">h", len(topic)) + topic.encode()
    body += struct.pack(">i", len(parts))
    for p in parts:
        body += struct.pack(">iqi", *p)
    msg = struct.pack(">hhih", 2, 0, cid, 2) + b"v0" + body
    return struct.pack(">i", len(msg)) + msg


def test_list_offsets_v0(cluster: LocalCluster, topic_name: str) -> None:
    create_topic(cluster.bootstrap_servers, topic_name, 1, 1, config={"segment.bytes": "2048"})
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    for _i in range(40):
        p.produce(topic_name, value=b"v" * 200, partition=0)
        p.flush(10)  # one batch per record: several segments
    with RawClient.to(cluster.broker(1).address) as c:
        c.send_raw(_request(topic_name, [(0, -1, 100), (0, -2, 1), (7, -1, 1)], 5))
        frame = c.read_frame()
    assert struct.unpack_from(">i", frame, 0)[0] == 5
    # Duplicated partitions are answered in order; read them with the parser per entry.
    res = _parse_all(frame)
    latest, earliest, unknown = res
    assert latest[0] == 0 and latest[1][0] == 40
    assert latest[1] == sorted(latest[1], reverse=True) and len(latest[1]) > 2
    assert latest[1][-1] == 0  # the first segment's base
    assert earliest == (0, [0])
    assert unknown[0] == 3 and unknown[1] == []  # UNKNOWN_TOPIC_OR_PARTITION


def _parse_all(frame: bytes) -> list[tuple[int, list[int]]]:
    pos = 8
    (n,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + n
    (n_parts,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    out = []
    for _ in range(n_parts):
        _p, code, k = struct.unpack_from(">ihi", frame, pos)
        pos += 10
        out.append((code, list(struct.unpack_from(f">{k}q", frame, pos))))
        pos += 8 * k
    assert pos == len(frame)
    return out
