"""The fetch write path keeps memory bounded, zero-copy and in order.

Four clients that ask for everything (max_bytes = 2^31-1) and then do not read used to
grow a broker by the whole response each: sendfile stopped when the socket buffer was
full and the rest of every slice was read into memory (4 x 125 MB took one from 80 MB to
554 MB). Now the unsent rest stays in the segment files and sendfile resumes when the
socket drains; the broker answers nothing else on such a connection meanwhile (Kafka
mutes it), and every byte arrives, CRC-valid, in order.
"""

from __future__ import annotations

import fcntl
import itertools
import socket
import struct
import sys
import termios
from typing import Any

import pytest
from confluent_kafka import Producer
from rawclient import (
    RawClient,
    create_topics_request,
    encode_request,
    fetch_request,
    frame,
    metadata_request,
)
from tests.support.polling import wait_for

from odradek.cluster.local import LocalCluster
from odradek.errors import ErrorCode
from odradek.fuzz.harness import process_rss_mb
from odradek.storage.batch import parse_batches

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DATA_BYTES = 48 << 20
RECORD = 20_000


def _fill(bootstrap: str, topic: str) -> None:
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "1"}
    )
    value = b"m" * RECORD
    for i in range(DATA_BYTES // RECORD):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError(f"closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _unread_bytes(s: socket.socket) -> int:
    """Bytes received on ``s`` and not yet read (FIONREAD)."""
    buf = bytearray(4)
    fcntl.ioctl(s.fileno(), termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def test_unread_huge_fetches_do_not_grow_the_broker(make_cluster: Any, topic_name: str) -> None:
    c: LocalCluster = make_cluster(1, broker_config={"fetch.max.bytes": str(256 << 20)})
    b = c.broker(1)
    with RawClient.to(c.bootstrap_servers) as rc:
        assert (
            rc.request(create_topics_request([(topic_name, 1, 1, {})])).topics[0].error_code
            == ErrorCode.none
        )
    _fill(c.bootstrap_servers, topic_name)
    rss_before = process_rss_mb(b.pid)
    socks = []
    for _ in range(4):
        s = socket.create_connection((b.host, b.port), timeout=30)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        # A fetch for everything, then a metadata request pipelined behind it.
        s.sendall(
            frame(encode_request(fetch_request(topic_name, 0, 0, max_bytes=0x7FFFFFFF), 1))
            + frame(encode_request(metadata_request([topic_name]), 2))
        )
        socks.append(s)
    # Bytes waiting on every socket: the broker has answered each fetch and its first
    # sendfile has returned (a 48 MB slice does not fit the sockets' buffers, so it
    # returned short: the moment the old code read the rest into memory).
    wait_for(
        lambda: all(_unread_bytes(s) > 0 for s in socks),
        60,
        "the first bytes of every fetch response",
    )
    # Meanwhile others are served; and once this answer is in, the broker's one event
    # loop has returned from those sends.
    with RawClient.to(c.bootstrap_servers) as rc:
        assert rc.request(metadata_request([topic_name])).topics[0].error_code == 0
    grown = process_rss_mb(b.pid) - rss_before
    assert grown < 24, f"the broker grew by {grown:.0f} MB holding unsent fetch data"
    for s in socks:
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        body = _recv_exact(s, size)
        assert struct.unpack_from(">i", body, 0)[0] == 1
        records = _fetch_records(body)
        assert len(records) >= DATA_BYTES * 0.9
        batches = parse_batches(records, verify_crc=True)
        assert batches[0].base_offset == 0
        assert all(x.next_offset == y.base_offset for x, y in itertools.pairwise(batches))
        # ... and the pipelined request is answered after it, not before.
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        assert struct.unpack_from(">i", _recv_exact(s, size), 0)[0] == 2
        s.close()
    assert process_rss_mb(b.pid) - rss_before < 24


def _fetch_records(body: bytes) -> bytes:
    """The records of the single partition of a Fetch v12 response body (after the
    correlation id), read with kio's response reader."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    cls = load_response_schema(1, 12)
    entity, _ = entity_reader(cls)(body, 5)  # correlation id + empty header tags
    p = entity.responses[0].partitions[0]
    assert p.error_code == 0
    return bytes(p.records or b"")
