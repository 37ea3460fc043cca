"""Kafka's SocketServer for one listener: accept, connection quotas, idle expiry.

The listener socket is bound early (start-up reserves the port; clients wait in the
backlog) and accepted from only once the broker serves. Accepting is our own loop rather
than ``loop.create_server`` so that Kafka's connection limits can be applied as Kafka
applies them (``kafka.network.ConnectionQuotas``, ``Acceptor``):

* ``max.connections`` (broker-wide): at the limit the acceptor stops accepting until a
  connection closes; new connections wait in the listen backlog. (Kafka exempts the
  inter-broker listener only when a broker has several listeners; Odradek has one.)
* ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a connection over
  its address's limit is accepted and closed at once, logged as "Rejected connection from
  ip, address already has the configured maximum of N connections.".
* ``connections.max.idle.ms``: a connection with no bytes read or written for that long
  is closed (Kafka's Selector expires idle channels whatever they are waiting for).
* ``queued.max.requests``: the ``RequestQueue`` shared by every connection.

A broker has one ``SocketServer`` per listener (issue 14); the limits above are shared
by all of them, as Kafka's are. On a TLS listener the handshake runs in its own task
(never in the accept loop, so a peer that stops half-way through a handshake delays
nobody else), bounded by ``odradek.authentication.timeout.ms``; a failed handshake -- a plaintext
client, a wrong certificate -- closes that connection with one rate-limited log line.
The connection counts against the quotas from the moment it is accepted.

``ConnectionQuotas`` is pure (counts in, decisions out) and unit-tested.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from odradek.log_limiter import LogLimiter
from odradek.security.acl import canonical_host
from odradek.server.network import ConnectionLimits, Dispatch, KafkaConnection, RequestQueue
from odradek.server.session import Session

logger = logging.getLogger(__name__)

__all__ = ["ConnectionQuotas", "SocketServer"]

_REJECT_LOG = LogLimiter(burst=5, interval_s=60.0)

SessionFactory = Callable[[str, "ssl.SSLObject | None"], Session]


class ConnectionQuotas:
    """Connection counts per address and in total, and Kafka's decisions on them."""

    __slots__ = ("max_connections", "max_per_ip", "overrides", "total", "_per_ip")

    def __init__(
        self, max_connections: int, max_per_ip: int, overrides: dict[str, int] | None = None
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = dict(overrides or {})
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def slot_available(self) -> bool:
        """May the acceptor take another connection (broker-wide limit)?"""
        return self.total < self.max_connections

    def limit_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.max_per_ip)

    def count(self, ip: str) -> int:
        return self._per_ip.get(ip, 0)

    def inc(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False (nothing counted) if ``ip`` already
        has its maximum."""
        n = self._per_ip.get(ip, 0)
        if n >= self.limit_for(ip):
            return False
        self._per_ip[ip] = n + 1
        self.total += 1
        return True

    def dec(self, ip: str) -> None:
        n = self._per_ip.get(ip, 0)
        if n <= 1:
            self._per_ip.pop(ip, None)
        else:
            self._per_ip[ip] = n - 1
        self.total = max(0, self.total - 1)


class SocketServer:
    """One listener: its socket, its connections and their limits."""

    def __init__(
        self,
        dispatch: Dispatch,
        limits: ConnectionLimits,
        quotas: ConnectionQuotas,
        request_queue: RequestQueue,
        idle_ms: int,
        on_connection_closed: Callable[[KafkaConnection], None] | None = None,
        *,
        name: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        session_factory: SessionFactory | None = None,
    ) -> None:
        self._dispatch = dispatch
        self.name = name
        self.ssl_context = ssl_context
        self._session_factory = session_factory
        self._setups: set[asyncio.Task[None]] = set()
        self.handshake_failures = 0
        self.limits = limits
        self.quotas = quotas
        self.request_queue = request_queue
        self.idle_ms = idle_ms
        self.connections: set[KafkaConnection] = set()
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self._slot_freed: asyncio.Event | None = None
        self._on_closed = on_connection_closed
        # Kafka's socket-server-metrics (connection-creation-total, connection-close-total)
        # and the per-ip rejections: plain counters, read by the metrics collector.
        self.connections_created = 0
        self.connections_closed = 0
        self.connections_rejected = 0

    # ------------------------------------------------------------------ lifecycle
    def bind(self, host: str, port: int, backlog: int = 1024) -> tuple[str, int]:
        """Bind and listen (connections queue in the backlog until ``start_serving``)."""
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, _, _, _, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        bound = sock.getsockname()
        return bound[0], bound[1]

    def start_serving(self) -> None:
        if self._sock is None:
            raise RuntimeError("bind() first")
        self._slot_freed = asyncio.Event()
        self._accept_task = asyncio.create_task(self._accept_loop(), name="acceptor")
        self._idle_task = asyncio.create_task(self._idle_loop(), name="idle-expiry")

    def close(self) -> None:
        """Stop accepting and close every connection."""
        for t in (self._accept_task, self._idle_task, *self._setups):
            if t is not None:
                t.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for conn in list(self.connections):
            conn.close()

    # ------------------------------------------------------------------ accepting
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None and self._slot_freed is not None
        lsock = self._sock
        while True:
            while not self.quotas.slot_available():
                # Kafka's Acceptor blocks in ConnectionQuotas.waitForConnectionSlot.
                self._slot_freed.clear()
                await self._slot_freed.wait()
            try:
                sock, addr = await loop.sock_accept(lsock)
            except asyncio.CancelledError:
                raise
            except OSError as e:
                # EMFILE/ENFILE/ENOBUFS: retry shortly rather than spin or die.
                _REJECT_LOG.log(
                    logger,
                    logging.ERROR,
                    ("accept", e.errno),
                    "error while accepting a connection: %r",
                    e,
                )
                await asyncio.sleep(0.1)
                continue
            # One spelling per address (an IPv4 client of a dual-stack listener is
            # a.b.c.d, not ::ffff:a.b.c.d, as for Kafka): per-IP quotas and their
            # overrides, ACL hosts and logs all see the same text.
            ip = canonical_host(addr[0]) if isinstance(addr, tuple) else str(addr)
            if not self.quotas.inc(ip):
                _REJECT_LOG.log(
                    logger,
                    logging.INFO,
                    ("per-ip", ip),
                    "Rejected connection from %s, address already has the "
                    "configured maximum of %d connections.",
                    ip,
                    self.quotas.limit_for(ip),
                )
                self.connections_rejected += 1
                sock.close()
                continue
            if self.ssl_context is None:
                await self._set_up(sock, ip)
            else:
                task = asyncio.create_task(self._set_up(sock, ip), name="tls-handshake")
                self._setups.add(task)
                task.add_done_callback(self._setups.discard)

    async def _set_up(self, sock: socket.socket, ip: str) -> None:
        loop = asyncio.get_running_loop()
        holder: list[KafkaConnection] = []

        def make() -> KafkaConnection:
            conn = KafkaConnection(
                self._dispatch, self.limits, self, ip, session_factory=self._session_factory
            )
            holder.append(conn)
            return conn

        try:
            if self.ssl_context is None:
                await loop.connect_accepted_socket(make, sock)
            else:
                await loop.connect_accepted_socket(
                    make,
                    sock,
                    ssl=self.ssl_context,
                    # Kafka has no separate setting (connections.max.idle.ms bounds
                    # it); a shorter bound frees a stalled handshake's slot sooner.
                    ssl_handshake_timeout=self.limits.authentication_timeout_s,
                )
        except asyncio.CancelledError:
            sock.close()
            if not (holder and holder[0].made):
                self.quotas.dec(ip)
            raise
        except Exception as e:  # noqa: BLE001 - one bad socket never stops accepting
            self.handshake_failures += self.ssl_context is not None
            _REJECT_LOG.log(
                logger,
                logging.INFO,
                ("setup", ip),
                "could not set up the connection from %s on listener %s: %r",
                ip,
                self.name,
                e,
            )
            sock.close()
            if not (holder and holder[0].made):
                # connection_made never ran, so connection_closed will not give the
                # quota back
                self.quotas.dec(ip)

    # ------------------------------------------------------------------ ConnectionOwner
    def connection_opened(self, conn: KafkaConnection) -> None:
        self.connections.add(conn)
        self.connections_created += 1

    def connection_closed(self, conn: KafkaConnection) -> None:
        self.connections.discard(conn)
        self.connections_closed += 1
        if conn.ip is not None:
            self.quotas.dec(conn.ip)
        if self._slot_freed is not None:
            self._slot_freed.set()
        if self._on_closed is not None:
            self._on_closed(conn)

    # ------------------------------------------------------------------ idle expiry
    async def _idle_loop(self) -> None:
        """connections.max.idle.ms: close connections without I/O for that long."""
        if self.idle_ms < 0:
            return  # Kafka: -1 disables idle expiry
        interval = min(max(self.idle_ms / 10_000, 0.05), 10.0)
        while True:
            await asyncio.sleep(interval)
            self.expire_idle(time.monotonic())

    def expire_idle(self, now: float) -> int:
        limit = self.idle_ms / 1000
        expired = [c for c in self.connections if now - c.last_io > limit]
        for conn in expired:
            conn.log_close(
                f"idle for more than connections.max.idle.ms={self.idle_ms}", logging.DEBUG
            )
            conn.close()
        return len(expired)

    @property
    def address(self) -> Any:
        return self._sock.getsockname() if self._sock is not None else None
