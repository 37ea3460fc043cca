"""Hand-encoded Fetch v11 / Produce v8 against kio, field by field; the bounded reader
and the connection's framing rules against hostile peers (real loopback sockets)."""

from __future__ import annotations

import io
import socket
import struct
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from kio.index import load_response_schema
from kio.serial import entity_writer

from odradek.client.connection import ConnectionLost, KafkaConnection, request_header
from odradek.client.wire import (
    FetchPartitionRequest,
    MalformedResponse,
    decode_fetch_response,
    decode_produce_response,
    encode_fetch_request,
    encode_produce_request,
)
from odradek.errors import ErrorCode
from odradek.protocol.codec import decode_request
from odradek.storage.records import encode_batch


def _frame_of(api_key: int, version: int, body: bytes) -> bytes:
    return request_header(api_key, version, 7, b"test") + body


def test_fetch_request_decodes_with_kio() -> None:
    body = encode_fetch_request(
        [
            FetchPartitionRequest("a", 0, 42, 1 << 20),
            FetchPartitionRequest("b", 3, 7, 999, 5),
            FetchPartitionRequest("a", 1, 0, 10),
        ],
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=1,
    )
    header, req = decode_request(_frame_of(1, 11, body))
    assert (header.api_key, header.api_version, header.correlation_id) == (1, 11, 7)
    assert req.max_wait == timedelta(milliseconds=500) and req.isolation_level == 1
    assert (req.session_id, req.session_epoch, req.replica_id) == (0, -1, -1)
    got = [
        (t.topic, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
        for t in req.topics
        for p in t.partitions
    ]
    assert got == [("a", 0, 42, 1 << 20, -1), ("a", 1, 0, 10, -1), ("b", 3, 7, 999, 5)]


def test_produce_request_decodes_with_kio() -> None:
    batch = encode_batch([(b"k", b"v")], base_offset=0)
    parts = encode_produce_request(
        [("t", 0, batch), ("t", 2, batch), ("u", 1, batch)], acks=-1, timeout_ms=30_000
    )
    _header, req = decode_request(_frame_of(0, 8, b"".join(bytes(p) for p in parts)))
    assert req.acks == -1 and req.transactional_id is None
    got = [(t.name, p.index, bytes(p.records)) for t in req.topic_data for p in t.partition_data]
    assert got == [("t", 0, batch), ("t", 2, batch), ("u", 1, batch)]


def _kio_bytes(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def test_fetch_response_decodes_like_kio() -> None:
    import sys

    cls = load_response_schema(1, 11)
    m = sys.modules[cls.__module__]
    batch = encode_batch([(b"k", b"v"), (None, None)], base_offset=10)
    resp = cls(
        throttle_time=timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            m.FetchableTopicResponse(
                topic="t",
                partitions=(
                    m.PartitionData(
                        partition_index=0,
                        error_code=ErrorCode.none,
                        high_watermark=12,
                        last_stable_offset=12,
                        log_start_offset=3,
                        aborted_transactions=(
                            m.AbortedTransaction(producer_id=5, first_offset=11),
                        ),
                        preferred_read_replica=-1,
                        records=batch,
                    ),
                    m.PartitionData(
                        partition_index=1,
                        error_code=ErrorCode.offset_out_of_range,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=None,
                    ),
                ),
            ),
        ),
    )
    error, parts = decode_fetch_response(_kio_bytes(resp))
    assert error == 0
    a, b = parts
    assert (a.topic, a.partition, a.error_code, a.high_watermark, a.log_start_offset) == (
        "t",
        0,
        0,
        12,
        3,
    )
    assert a.aborted_transactions == [(5, 11)] and bytes(a.records) == batch
    assert (b.partition, b.error_code, b.aborted_transactions, bytes(b.records)) == (
        1,
        1,
        None,
        b"",
    )


def test_produce_response_decodes_like_kio() -> None:
    import sys

    cls = load_response_schema(0, 8)
    m = sys.modules[cls.__module__]
    resp = cls(
        throttle_time=timedelta(0),
        responses=(
            m.TopicProduceResponse(
                name="t",
                partition_responses=(
                    m.PartitionProduceResponse(
                        index=0,
                        error_code=ErrorCode.none,
                        base_offset=100,
                        log_append_time=None,
                        log_start_offset=0,
                        record_errors=(),
                        error_message=None,
                    ),
                    m.PartitionProduceResponse(
                        index=1,
                        error_code=ErrorCode.invalid_record,
                        base_offset=-1,
                        log_append_time=None,
                        log_start_offset=-1,
                        record_errors=(
                            m.BatchIndexAndErrorMessage(
                                batch_index=0, batch_index_error_message="bad"
                            ),
                        ),
                        error_message=None,
                    ),
                ),
            ),
        ),
    )
    got = decode_produce_response(_kio_bytes(resp))
    assert [(r.topic, r.partition, r.error_code, r.base_offset, r.error_message) for r in got] == [
        ("t", 0, 0, 100, None),
        ("t", 1, 87, -1, "bad"),
    ]


def test_malformed_responses_are_refused() -> None:
    # a topic array claiming a billion entries in a 20-byte body
    with pytest.raises(MalformedResponse, match="does not fit"):
        decode_fetch_response(struct.pack(">ihii", 0, 0, 0, 1_000_000_000) + b"\0" * 6)
    # records longer than the frame
    body = (
        struct.pack(">ihi", 0, 0, 0)
        + struct.pack(">i", 1)
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">i", 1)
        + struct.pack(">ihqqq", 0, 0, 1, 1, 0)
        + struct.pack(">i", -1)
        + struct.pack(">i", -1)
        + struct.pack(">i", 100)
        + b"short"
    )
    with pytest.raises(MalformedResponse, match="need 100 bytes"):
        decode_fetch_response(body)
    with pytest.raises(MalformedResponse, match="trailing"):
        decode_produce_response(struct.pack(">ii", 0, 0) + b"x")


# --------------------------------------------------------------------------- connection


@pytest.fixture
def server() -> Iterator[tuple[socket.socket, list[bytes]]]:
    """A loopback listener whose accepted connection answers with the queued bytes."""
    srv = socket.create_server(("127.0.0.1", 0))
    replies: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            try:
                conn.recv(65536)
                for r in replies:
                    conn.sendall(r)
                # End of the replies (EOF for the client), then read until the client
                # closes: closing with unread requests in the buffer would send an RST
                # and fail the client's next send at random.
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(65536):
                    pass
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv, replies
    srv.close()
    t.join(5)


def _connect(srv: socket.socket, **kw: object) -> KafkaConnection:
    host, port = srv.getsockname()
    return KafkaConnection(host, port, timeout_s=5, **kw)  # type: ignore[arg-type]


def test_oversized_frame_closes_the_connection(server: tuple[socket.socket, list[bytes]]) -> None:
    srv, replies = server
    replies.append(struct.pack(">i", 1 << 30))  # 1 GiB announced, nothing sent
    conn = _connect(srv, max_response_bytes=1 << 20)
    conn.send_body(1, 11, b"x")
    with pytest.raises(ConnectionLost, match="limit"):
        conn.receive_frame()
    assert conn.closed


def test_wrong_correlation_id_closes_the_connection(
    server: tuple[socket.socket, list[bytes]],
) -> None:
    srv, replies = server
    replies.append(struct.pack(">ii", 4, 999))
    conn = _connect(srv)
    conn.send_body(1, 11, b"x")
    with pytest.raises(ConnectionLost, match="correlation id 999"):
        conn.receive_frame()
    assert conn.closed


def test_pipelined_responses_in_order_and_eof(server: tuple[socket.socket, list[bytes]]) -> None:
    srv, replies = server
    replies.append(
        struct.pack(">ii", 8, 1)
        + b"one!"
        + struct.pack(">ii", 8, 2)
        + b"two!"
        + struct.pack(">ii", 100, 3)
        + b"cut"
    )
    conn = _connect(srv)
    for _ in range(3):
        conn.send_body(0, 8, b"req")
    assert bytes(conn.receive_frame()[2]) == b"one!"
    assert bytes(conn.receive_frame()[2]) == b"two!"
    assert conn.in_flight == 1
    srv.close()
    with pytest.raises(ConnectionLost):
        conn.receive_frame()  # 100 bytes announced, 3 sent, then silence: timeout / EOF
