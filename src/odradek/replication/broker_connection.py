"""A connection from this broker to another one (followers to leaders).

Every outgoing connection binds this broker's own address first: otherwise a connection
to 127.0.0.3 leaves from 127.0.0.1 and the source-based iptables rules of the fault
tests never match. One request at a time per connection, like Kafka's replica fetcher.

It is an ``asyncio.Protocol`` with the same framing as the server side
(``protocol.framing.FrameDecoder``): a request is one ``transport.write`` and its answer
one future, timed out with a loop timer -- no stream objects and no ``wait_for`` tasks on
the replication round trip, which a follower makes thousands of times a second.

It speaks the inter-broker listener's protocol (issue 14, ``ClientSecurity``): TLS
through asyncio's SSL transport, then SaslHandshake v1 and SaslAuthenticate v2 with the
broker's own credentials (``odradek.security.sasl_client``) before the first request.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Any

from odradek.protocol.client_codec import decode_response, encode_request, request_entity
from odradek.protocol.framing import FrameDecoder, FrameError, FrameTooLarge
from odradek.security.client_security import PLAINTEXT, ClientSecurity
from odradek.security.sasl_client import SaslClient, SaslClientError

logger = logging.getLogger(__name__)

__all__ = ["BrokerConnection", "BrokerConnectionError", "BrokerConnectionPool"]

_I32 = struct.Struct(">i")
# Responses are bounded by replica.fetch.response.max.bytes (+ one oversized batch, KIP-74)
# and message.max.bytes; anything larger than this is not a response we asked for.
MAX_RESPONSE_BYTES = 1 << 30


class BrokerConnectionError(Exception):
    pass


class _ClientProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(MAX_RESPONSE_BYTES)
        self.waiter: asyncio.Future[Any] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except (FrameTooLarge, FrameError) as e:
            self._fail(BrokerConnectionError(f"bad response frame: {e}"))
            return
        for frame in frames:
            w = self.waiter
            if w is None or w.done():
                self._fail(BrokerConnectionError("response without a request"))
                return
            self.waiter = None
            w.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(BrokerConnectionError(f"connection closed: {exc!r}"))

    def _fail(self, err: Exception) -> None:
        w, self.waiter = self.waiter, None
        if w is not None and not w.done():
            w.set_exception(err)
        if self.transport is not None:
            self.transport.close()
        self.closed = True


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        source_ip: str | None,
        client_id: str,
        timeout_s: float,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.host, self.port = host, port
        self.security = security
        self.source_ip = source_ip
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._proto: _ClientProtocol | None = None
        self._correlation = 0

    @property
    def connected(self) -> bool:
        return self._proto is not None and not self._proto.closed

    async def connect(self) -> None:
        local = (self.source_ip, 0) if self.source_ip else None
        loop = asyncio.get_running_loop()
        ctx = self.security.ssl_context()
        try:
            # asyncio.timeout: wait_for (3.11) can swallow a cancel racing the connect.
            async with asyncio.timeout(self.timeout_s):
                _, proto = await loop.create_connection(
                    _ClientProtocol,
                    self.host,
                    self.port,
                    local_addr=local,
                    ssl=ctx,
                    server_hostname=self.host if ctx is not None else None,
                )
        except (TimeoutError, OSError) as e:
            self.close()
            raise BrokerConnectionError(f"connect to {self.host}:{self.port}: {e!r}") from e
        self._proto = proto
        if self.security.sasl:
            try:
                await self._authenticate()
            except BaseException:
                self.close()
                raise

    async def _authenticate(self) -> None:
        sec = self.security
        mech = sec.sasl_mechanism or ""
        hs = await self.request(request_entity(17, 1, mechanism=mech))
        if int(hs.error_code):
            raise BrokerConnectionError(
                f"SASL handshake with {self.host}:{self.port} "
                f"failed: error {int(hs.error_code)}, mechanisms "
                f"{list(hs.mechanisms)}"
            )
        try:
            client = SaslClient(mech, sec.sasl_username or "", sec.sasl_password or "")
            while not client.complete:
                resp = await self.request(request_entity(36, 2, auth_bytes=client.next_token()))
                if int(resp.error_code):
                    raise BrokerConnectionError(
                        f"SASL authentication with {self.host}:{self.port} failed: "
                        f"{resp.error_message}"
                    )
                client.receive(bytes(resp.auth_bytes))
        except SaslClientError as e:
            raise BrokerConnectionError(f"SASL with {self.host}:{self.port}: {e}") from e

    def next_correlation_id(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    async def send(
        self, data: bytes, correlation_id: int, timeout_s: float | None = None
    ) -> memoryview | bytes:
        """Send one encoded request (size prefix included) and return its response frame
        (without the size prefix); the caller decodes it and checks the correlation id."""
        if not self.connected:
            await self.connect()
        proto = self._proto
        assert proto is not None and proto.transport is not None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        proto.waiter = fut
        timer = loop.call_later(timeout_s or self.timeout_s, _expire, fut)
        try:
            proto.transport.write(data)
            return await fut
        except TimeoutError as e:
            self.close()
            raise BrokerConnectionError(f"request to {self.host}:{self.port} timed out") from e
        except BrokerConnectionError:
            self.close()
            raise
        finally:
            timer.cancel()

    async def request(self, entity: Any, timeout_s: float | None = None) -> Any:
        """A kio request entity in, its decoded kio response out (rare requests)."""
        corr = self.next_correlation_id()
        frame = await self.send(encode_request(entity, corr, self.client_id), corr, timeout_s)
        got, response = decode_response(
            type(entity).__api_key__, type(entity).__version__, bytes(frame)
        )
        if got != corr:
            self.close()
            raise BrokerConnectionError(f"correlation id {got} != {corr}")
        return response

    def close(self) -> None:
        if self._proto is not None:
            self._proto._fail(BrokerConnectionError("closed"))
        self._proto = None


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


class BrokerConnectionPool:
    """One connection per destination broker, one request at a time on each: the
    transaction coordinator's requests to other brokers (WriteTxnMarkers) and the
    leaders' KIP-890 verification requests to it. ``address`` finds a broker's endpoint
    on the inter-broker listener in the current metadata (None: not registered);
    ``security`` is that listener's protocol, read at each new connection."""

    def __init__(
        self,
        address: Callable[[int], tuple[str, int] | None],
        source_ip: str | None,
        client_id: str,
        timeout_s: float,
        security: Callable[[], ClientSecurity] = lambda: PLAINTEXT,
    ) -> None:
        self._address = address
        self._security = security
        self._source_ip = source_ip
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._conns: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def request(self, broker_id: int, entity: Any, timeout_s: float | None = None) -> Any:
        """Send ``entity`` to ``broker_id``; a failed connection is dropped (the next
        request reconnects). Raises BrokerConnectionError, TimeoutError or OSError."""
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            conn = self._conns.get(broker_id)
            try:
                if conn is None or not conn.connected:
                    addr = self._address(broker_id)
                    if addr is None:
                        raise BrokerConnectionError(f"broker {broker_id} is not registered")
                    conn = BrokerConnection(
                        addr[0],
                        addr[1],
                        self._source_ip,
                        self._client_id,
                        timeout_s=self._timeout_s,
                        security=self._security(),
                    )
                    await conn.connect()
                    self._conns[broker_id] = conn
                return await conn.request(entity, timeout_s or self._timeout_s)
            except BaseException:
                self.drop(broker_id)
                raise

    def drop(self, broker_id: int) -> None:
        conn = self._conns.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
