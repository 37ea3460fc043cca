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
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

__all__ = ["RawClient", "ConnectionClosed", "encode_request", "frame", "request_cls"]

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
    def __init__(self, host: str, port: int, timeout: float = 10.0,
                 client_id: str | None = "rawclient") -> None:
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
            except (TimeoutError, socket.timeout):
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
