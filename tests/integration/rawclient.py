"""A tiny raw-socket Kafka client for tests that must send what no real client would.

Requests are kio request entities written with kio's own entity writers behind a request
header v1 or v2 (whichever the request's schema declares); responses are read with kio's
response readers behind a response header v0 or v1. Anything else (garbage, truncated
frames, byte-by-byte sends) goes through ``send_raw``. The broker under test never sees
this module's code on its side: it is a client, built from kio, not from ``odradek``.
"""

from __future__ import annotations

import io
import socket
import struct
import time
from datetime import timedelta
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

__all__ = [
    "ConnectionClosed",
    "RawClient",
    "create_topics_request",
    "encode_request",
    "fetch_request",
    "frame",
    "list_offsets_request",
    "metadata_request",
    "produce_request",
    "request_cls",
]

_I32 = struct.Struct(">i")


class ConnectionClosed(Exception):
    """The broker closed the connection (EOF or reset) before a full response arrived."""


def request_cls(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)  # type: ignore[no-any-return]


def _write(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def encode_request(entity: Any, correlation_id: int, client_id: str | None = "rawclient") -> bytes:
    """Request header (v1, or v2 for flexible versions) + body, without the size prefix."""
    cls = type(entity)
    header_cls = RequestHeaderV2 if cls.__header_schema__.__version__ >= 2 else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(cls.__api_key__),
        request_api_version=i16(cls.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return _write(header) + _write(entity)


def frame(payload: bytes) -> bytes:
    """Size prefix + payload."""
    return _I32.pack(len(payload)) + payload


class RawClient:
    def __init__(
        self, host: str, port: int, timeout: float = 10.0, client_id: str | None = "rawclient"
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.client_id = client_id
        self._next_correlation = 1

    @classmethod
    def to(cls, address: str, timeout: float = 10.0) -> RawClient:
        host, port = address.rsplit(":", 1)
        return cls(host, int(port), timeout)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # ----------------------------------------------------------------- raw bytes
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        out = bytearray()
        deadline = time.monotonic() + self.timeout
        while len(out) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"received {len(out)} of {n} bytes")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError as e:
                raise ConnectionClosed("connection reset") from e
            if not chunk:
                raise ConnectionClosed(f"EOF after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def read_frame(self) -> bytes:
        (size,) = _I32.unpack(self.recv_exact(4))
        return self.recv_exact(size)

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True if the broker closes the connection within ``timeout`` (any bytes it sends
        first are discarded); False if it is still open then."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
            if not chunk:
                return True

    # ----------------------------------------------------------------- requests
    def send(self, entity: Any, correlation_id: int | None = None) -> int:
        cid = self._next_correlation if correlation_id is None else correlation_id
        self._next_correlation = cid + 1
        self.send_raw(frame(encode_request(entity, cid, self.client_id)))
        return cid

    def receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        """Read one response frame and decode it with kio's reader for (key, version)."""
        data = self.read_frame()
        (cid,) = _I32.unpack_from(data, 0)
        assert cid == correlation_id, f"correlation id {cid}, expected {correlation_id}"
        cls = load_response_schema(api_key, version)
        pos = 4
        if cls.__header_schema__.__version__ >= 1:
            assert data[pos] == 0, "unexpected tagged fields in the response header"
            pos += 1
        entity, _size = entity_reader(cls)(data, pos)
        return entity

    def request(self, entity: Any) -> Any:
        cls = type(entity)
        cid = self.send(entity)
        return self.receive(cls.__api_key__, cls.__version__, cid)


# ----------------------------------------------------------------- request builders
# Plain ints are accepted by kio's writers; timeouts are timedeltas.


def _module(api_key: int, version: int) -> Any:
    import sys

    return sys.modules[request_cls(api_key, version).__module__]


def produce_request(
    topic: str,
    partition: int,
    records: bytes | None,
    *,
    acks: int = -1,
    timeout_ms: int = 10000,
    version: int = 9,
) -> Any:
    m = _module(0, version)
    return m.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=timedelta(milliseconds=timeout_ms),
        topic_data=(
            m.TopicProduceData(
                name=topic,
                partition_data=(m.PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    *,
    current_leader_epoch: int = -1,
    max_wait_ms: int = 0,
    max_bytes: int = 1 << 20,
    version: int = 12,
) -> Any:
    m = _module(1, version)
    fp = m.FetchPartition(
        partition=partition,
        current_leader_epoch=current_leader_epoch,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )
    return m.FetchRequest(
        replica_id=-1,
        max_wait=timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(m.FetchTopic(topic=topic, partitions=(fp,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def metadata_request(
    names: list[str] | None, *, allow_auto_topic_creation: bool = False, version: int = 12
) -> Any:
    m = _module(3, version)
    topics = (
        None
        if names is None
        else tuple(m.MetadataRequestTopic(topic_id=None, name=n) for n in names)
    )
    return m.MetadataRequest(
        topics=topics,
        allow_auto_topic_creation=allow_auto_topic_creation,
        include_topic_authorized_operations=False,
    )


def create_topics_request(
    topics: list[tuple[str, int, int, dict[str, str]]],
    *,
    timeout_ms: int = 15000,
    validate_only: bool = False,
    version: int = 5,
) -> Any:
    """``topics``: (name, num_partitions, replication_factor, configs)."""
    m = _module(19, version)
    return m.CreateTopicsRequest(
        topics=tuple(
            m.CreatableTopic(
                name=name,
                num_partitions=n,
                replication_factor=rf,
                assignments=(),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in cfg.items()),
            )
            for name, n, rf, cfg in topics
        ),
        timeout=timedelta(milliseconds=timeout_ms),
        validate_only=validate_only,
    )


def list_offsets_request(
    topic: str, partition: int, timestamp: int, *, current_leader_epoch: int = -1, version: int = 7
) -> Any:
    m = _module(2, version)
    return m.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            m.ListOffsetsTopic(
                name=topic,
                partitions=(
                    m.ListOffsetsPartition(
                        partition_index=partition,
                        current_leader_epoch=current_leader_epoch,
                        timestamp=timestamp,
                    ),
                ),
            ),
        ),
    )
