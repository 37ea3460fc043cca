"""The broker's ``metrics.listener``: a small, bounded HTTP server for Prometheus scrapes.

It runs on the broker's own event loop, so the scrape reads the loop-owned state (the
partitions, the metadata image) without locks and never races a request; ``render`` is a
coroutine that copies that state in short slices and builds the text in a worker thread,
so a scrape never holds the loop requests run on (issue 29). Scrapes that arrive while
one renders share its result. It is a new network surface on a broker, so whatever a
client sends costs the client only:

* at most ``MAX_CONNECTIONS`` connections at once (more are closed on accept);
* the request head must arrive within ``HEAD_TIMEOUT_S`` and fit in ``MAX_HEAD_BYTES``
  (a slow or endless sender is cut off, the buffer never grows past the bound);
* one request per connection (``Connection: close``), only GET and HEAD, only
  ``/metrics`` (and ``/`` with a link to it); anything else gets 400/404/405;
* ``/metrics?name[]=A&name[]=B`` answers only the samples named (as prometheus-client's
  own exposition does; Prometheus sends it from a scrape config's ``params``): the
  console asks for the few families it shows, not every partition's nine;
* a failure while rendering answers 500 and is logged, the broker goes on.

Why not ``prometheus_client.start_http_server``: it runs a thread per connection with
no bound and would read the loop's state from other threads. The request parsing
needed here is the request line only; the text format comes from prometheus-client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_HEAD_BYTES",
    "HEAD_TIMEOUT_S",
    "BadRequest",
    "parse_listener_url",
    "parse_request_head",
    "MetricsListener",
]

MAX_CONNECTIONS = 32
MAX_HEAD_BYTES = 8192
HEAD_TIMEOUT_S = 5.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus text format

# The sample names asked for (``name[]``), or None for every sample.
Names = frozenset[str] | None
Render = Callable[[Names], Awaitable[bytes]]


class BadRequest(ValueError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def parse_listener_url(value: str) -> tuple[str, int]:
    """``http://127.0.0.1:9404`` → ("127.0.0.1", 9404); raises ValueError otherwise."""
    parts = urlsplit(value.strip())
    if parts.scheme != "http":
        raise ValueError(f"metrics.listener must be http://HOST:PORT, got {value!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"metrics.listener has a bad port: {value!r}") from None
    if not parts.hostname or port is None:
        raise ValueError(f"metrics.listener needs an explicit host and port: {value!r}")
    if parts.path not in ("", "/"):
        raise ValueError(f"metrics.listener takes no path (metrics are at /metrics): {value!r}")
    return parts.hostname, port


def parse_request_head(head: bytes) -> tuple[str, str, Names]:
    """(method, path, the ``name[]`` values of the query or None) of an HTTP/1.x request
    head; raises BadRequest."""
    line, _, _ = head.partition(b"\r\n")
    fields = line.split(b" ")
    if len(fields) != 3 or not fields[2].startswith(b"HTTP/1."):
        raise BadRequest(400, "malformed request line")
    try:
        method, target = fields[0].decode("ascii"), fields[1].decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest(400, "non-ASCII request line") from None
    if method not in ("GET", "HEAD"):
        raise BadRequest(405, f"method {method[:16]} not allowed")
    path, _, query = target.partition("?")
    names = parse_qs(query).get("name[]") if query else None
    return method, path, frozenset(names) if names else None


def _response(
    status: int,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    head_only: bool = False,
) -> bytes:
    reason = {
        200: "OK",
        400: "Bad Request",
        404: "Not Found",
        405: "Method Not Allowed",
        408: "Request Timeout",
        431: "Request Header Fields Too Large",
        500: "Internal Server Error",
        503: "Service Unavailable",
    }.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    return head if head_only else head + body


_INDEX = (
    b"<html><head><title>Odradek broker metrics</title></head><body>"
    b"<a href=\"/metrics\">/metrics</a></body></html>"
)


class _MetricsConnection(asyncio.Protocol):
    def __init__(self, server: MetricsListener) -> None:
        self._server = server
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._answered = False
        self._rendering: asyncio.Future[None] | None = None  # keeps the task referenced

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        if len(self._server.connections) >= MAX_CONNECTIONS:
            transport.close()  # over the bound: the sender pays, nothing is read
            return
        self._server.connections.add(self)
        self._timer = asyncio.get_running_loop().call_later(HEAD_TIMEOUT_S, self._timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()

    def _timeout(self) -> None:
        self._answer(_response(408, b"request head not received in time\n"))

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD_BYTES:
                self._answer(_response(431, b"request head too large\n"))
            return
        if end > MAX_HEAD_BYTES:
            self._answer(_response(431, b"request head too large\n"))
            return
        try:
            method, path, names = parse_request_head(bytes(self._buf[:end]))
        except BadRequest as e:
            self._answer(_response(e.status, f"{e}\n".encode()))
            return
        head_only = method == "HEAD"
        if path == "/metrics":
            self._rendering = asyncio.ensure_future(self._serve_metrics(head_only, names))
        elif path == "/":
            self._answer(_response(200, _INDEX, "text/html; charset=utf-8", head_only))
        else:
            self._answer(_response(404, b"not found; metrics are at /metrics\n"))

    async def _serve_metrics(self, head_only: bool, names: Names) -> None:
        self._answered = True  # the head is complete: nothing more is read
        if self._timer is not None:
            self._timer.cancel()
        try:
            body = await self._server.render_shared(names)
        except Exception:
            logger.exception("rendering metrics failed")
            self._answer(_response(500, b"rendering metrics failed\n"))
            return
        self._answer(_response(200, body, CONTENT_TYPE, head_only))

    def _answer(self, response: bytes) -> None:
        self._answered = True
        self._buf = bytearray()
        if self._timer is not None:
            self._timer.cancel()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(response)
            self._transport.close()  # flushes the buffer, then closes


class MetricsListener:
    """Serve ``render()`` at ``http://host:port/metrics`` on the running loop."""

    def __init__(self, host: str, port: int, render: Render) -> None:
        self.host = host
        self.port = port
        self.render = render
        self.connections: set[_MetricsConnection] = set()
        self._server: asyncio.Server | None = None
        self._inflight: dict[Names, asyncio.Future[bytes]] = {}

    async def render_shared(self, names: Names = None) -> bytes:
        """Scrapes asking for the same names while one renders share its text."""
        fut = self._inflight.get(names)
        if fut is None:
            fut = self._inflight[names] = asyncio.ensure_future(self.render(names))
            fut.add_done_callback(lambda f: self._rendered(names, f))
        return await asyncio.shield(fut)

    def _rendered(self, names: Names, fut: asyncio.Future[bytes]) -> None:
        if self._inflight.get(names) is fut:
            del self._inflight[names]
        if not fut.cancelled():
            fut.exception()  # retrieved: a failure is reported by each waiting scrape

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _MetricsConnection(self),
            host=self.host,
            port=self.port,
            reuse_address=True,
            backlog=64,
        )
        sock = self._server.sockets[0] if self._server.sockets else None
        if sock is not None:
            self.port = sock.getsockname()[1]  # port 0: the one the OS chose
        logger.info("metrics at http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if conn._transport is not None:
                conn._transport.close()
