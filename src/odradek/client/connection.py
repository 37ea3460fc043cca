"""One synchronous Kafka connection: pipelined requests, correlation ids, bounded frames.

Kafka answers the requests of one connection in the order they were sent, so the
connection keeps a FIFO of in-flight requests: ``send`` appends, ``receive`` reads the
next response frame and checks that its correlation id is the oldest one outstanding
(anything else is a protocol violation and closes the connection). Several requests may
be in flight at once (Produce pipelining, Fetch prefetch).

Hostile or broken peers cost the peer, not the client: a response frame larger than
``max_response_bytes`` (what the client itself asked the broker for, plus slack) closes
the connection before anything is allocated for it, and the receive buffer grows only
with the bytes that actually arrived. Every blocking call is bounded by the socket
timeout; a timeout, EOF or reset closes the connection and raises ``ConnectionLost``.

Security (issue 14): with a ``ClientSecurity`` the socket is wrapped in TLS (host names
checked against the certificate unless ``ssl.endpoint.identification.algorithm`` is
empty) and/or authenticated with SaslHandshake v1 + SaslAuthenticate v2 (PLAIN,
SCRAM-SHA-256/512 through ``odradek.security.sasl_client``) before the connection is
handed out. On TLS the gathered ``sendmsg`` gives way to one ``sendall``.

Request bodies are either kio entities (encoded by ``odradek.protocol.client_codec``) or
bytes that a caller hand-encoded with ``struct`` (Fetch and Produce, the hot paths);
``request_header`` builds the header for the latter.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from odradek.protocol.client_codec import decode_response, encode_request, request_entity
from odradek.security.client_security import PLAINTEXT, ClientSecurity
from odradek.security.sasl_client import SaslClient, SaslClientError

__all__ = ["ConnectionLost", "KafkaConnection", "request_header", "parse_address"]

logger = logging.getLogger(__name__)

_I32 = struct.Struct(">i")
_HEADER_V1 = struct.Struct(">hhih")
_FIRST_CHUNK = 256 << 10  # first receive buffer; grows with the bytes that arrive


class ConnectionLost(OSError):
    """The connection failed (refused, reset, EOF, timeout, malformed frame); it is closed."""


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad broker address {address!r} (want host:port)")
    return host.strip("[]"), int(port)


def request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: bytes | None
) -> bytes:
    """Request header v1 (non-flexible requests; the hand-encoded Fetch v11 / Produce v8)."""
    if client_id is None:
        return _HEADER_V1.pack(api_key, api_version, correlation_id, -1)
    return _HEADER_V1.pack(api_key, api_version, correlation_id, len(client_id)) + client_id


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    api_version: int


class KafkaConnection:
    """A blocking client connection to one broker (not thread-safe: one owner thread)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "odradek",
        timeout_s: float = 30.0,
        max_response_bytes: int = 128 << 20,
        source_address: tuple[str, int] | None = None,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self._client_id_raw = client_id.encode()
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self._next_id = 1
        self._in_flight: deque[_InFlight] = deque()
        try:
            self._sock: socket.socket | None = socket.create_connection(
                (host, port), timeout=timeout_s, source_address=source_address
            )
        except OSError as e:
            raise ConnectionLost(f"connect to {host}:{port}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(timeout_s)
        self._tls = False
        ctx = security.ssl_context()
        try:
            if ctx is not None:
                self._sock = ctx.wrap_socket(self._sock, server_hostname=host)
                self._tls = True
            if security.sasl:
                self._authenticate(security)
        except (OSError, SaslClientError) as e:
            self.close()
            raise ConnectionLost(f"{security.protocol} connection to {host}:{port}: {e}") from e

    def _authenticate(self, security: ClientSecurity) -> None:
        mech = security.sasl_mechanism or ""
        hs = self.request(request_entity(17, 1, mechanism=mech))
        if int(hs.error_code):
            raise SaslClientError(
                f"SaslHandshake error {int(hs.error_code)}; the broker "
                f"enables {list(hs.mechanisms)}"
            )
        client = SaslClient(mech, security.sasl_username or "", security.sasl_password or "")
        while not client.complete:
            resp = self.request(request_entity(36, 2, auth_bytes=client.next_token()))
            if int(resp.error_code):
                raise SaslClientError(f"SASL authentication failed: {resp.error_message}")
            client.receive(bytes(resp.auth_bytes))

    def __repr__(self) -> str:
        return f"KafkaConnection({self.host}:{self.port}, in_flight={len(self._in_flight)})"

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._sock is None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def fileno(self) -> int:
        return self._require().fileno()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._in_flight.clear()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    # ------------------------------------------------------------------ sending

    def _take_id(self) -> int:
        cid = self._next_id
        self._next_id = cid + 1 if cid < 0x7FFFFFFF else 1
        return cid

    def send(self, entity: Any) -> int:
        """Send a kio request entity; returns its correlation id."""
        cls = type(entity)
        cid = self._take_id()
        self._send_frame(
            encode_request(entity, cid, self.client_id), cid, cls.__api_key__, cls.__version__
        )
        return cid

    def send_body(self, api_key: int, api_version: int, body: bytes | list[bytes]) -> int:
        """Send a hand-encoded non-flexible request body (header v1 is added here)."""
        cid = self._take_id()
        header = request_header(api_key, api_version, cid, self._client_id_raw)
        parts = body if isinstance(body, list) else [body]
        size = len(header) + sum(len(p) for p in parts)
        self._send_frame([_I32.pack(size), header, *parts], cid, api_key, api_version)
        return cid

    def _send_frame(
        self, data: bytes | list[bytes], cid: int, api_key: int, api_version: int
    ) -> None:
        sock = self._require()
        try:
            if isinstance(data, list) and self._tls:
                sock.sendall(b"".join(data))  # SSLSocket has no sendmsg
            elif isinstance(data, list):
                # One sendmsg (writev) for header + record batches: no concatenation.
                total = sum(len(p) for p in data)
                sent = sock.sendmsg(data)
                if sent < total:
                    sock.sendall(b"".join(data)[sent:])
            else:
                sock.sendall(data)
        except OSError as e:
            self.close()
            raise ConnectionLost(f"send to {self.host}:{self.port}: {e}") from e
        self._in_flight.append(_InFlight(cid, api_key, api_version))

    # ------------------------------------------------------------------ receiving

    def receive_frame(self) -> tuple[int, int, memoryview]:
        """Next response: (api_key, api_version, frame after the correlation id).

        The caller decodes the body; for flexible responses it starts with the header's
        tagged-field section (``decode_response`` handles that for kio entities).
        """
        if not self._in_flight:
            raise RuntimeError("receive without a request in flight")
        head = self._recv_exact(4)
        (size,) = _I32.unpack(head)
        if size < 4 or size > self.max_response_bytes:
            self.close()
            raise ConnectionLost(
                f"{self.host}:{self.port} sent a {size}-byte frame "
                f"(limit {self.max_response_bytes}): closing"
            )
        frame = self._recv_exact(size)
        (cid,) = _I32.unpack_from(frame, 0)
        expected = self._in_flight.popleft()
        if cid != expected.correlation_id:
            self.close()
            raise ConnectionLost(
                f"{self.host}:{self.port} answered correlation id {cid}, "
                f"expected {expected.correlation_id}: closing"
            )
        return expected.api_key, expected.api_version, memoryview(frame)[4:]

    def receive(self) -> Any:
        """Next response decoded as a kio entity (for requests sent with ``send``)."""
        api_key, api_version, body = self.receive_frame()
        frame = _I32.pack(0) + bytes(body)  # decode_response expects the correlation id
        try:
            return decode_response(api_key, api_version, frame)[1]
        except Exception as e:  # kio raises ValueError/KeyError/struct.error on bad input
            self.close()
            raise ConnectionLost(
                f"malformed response to api {api_key} v{api_version} "
                f"from {self.host}:{self.port}: {e}"
            ) from e

    def request(self, entity: Any) -> Any:
        """Send one kio request and wait for its response (nothing else in flight)."""
        self.send(entity)
        return self.receive()

    def _require(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionLost(f"connection to {self.host}:{self.port} is closed")
        return self._sock

    def _recv_exact(self, n: int) -> bytearray:
        sock = self._require()
        # Grow with what arrives: a peer announcing a big frame and sending little makes
        # us allocate little.
        buf = bytearray(min(n, _FIRST_CHUNK))
        got = 0
        deadline = time.monotonic() + self.timeout_s
        try:
            while got < n:
                if got == len(buf):
                    buf.extend(bytes(min(len(buf), n - len(buf))))
                with memoryview(buf) as view:
                    k = sock.recv_into(view[got:])
                if k == 0:
                    raise ConnectionLost(
                        f"{self.host}:{self.port} closed the connection "
                        f"({got} of {n} bytes received)"
                    )
                got += k
                if got < n and time.monotonic() > deadline:
                    raise TimeoutError(f"{got} of {n} bytes within {self.timeout_s} s")
        except ConnectionLost:
            self.close()
            raise
        except OSError as e:  # socket.timeout is an OSError
            self.close()
            raise ConnectionLost(f"receive from {self.host}:{self.port}: {e!r}") from e
        return buf
