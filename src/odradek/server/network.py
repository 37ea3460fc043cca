"""The thin asyncio layer of one client connection: bytes in, frames to dispatch, responses out.

One ``KafkaConnection`` per client socket (accepted by ``socket_server.SocketServer``).
Requests are handled in arrival order and responses go out in the same order (clients
rely on it). Handlers that finish at once are answered inline in ``data_received`` (the
hot path creates no task). A handler that must wait (delayed fetch, admin writes) returns
a coroutine, and like Kafka the connection starts no other request until it is answered.
The one exception is Produce (``Pipelined``): its effects (the appends) happen in order
at once and only its wait for the acknowledgement overlaps the next requests, up to
``MAX_PENDING_ANSWERS``; the answers still leave in request order.

Memory per connection is bounded whatever the peer does (issue 11):

* a frame larger than ``socket.request.max.bytes`` closes the connection before its body
  is buffered (``FrameDecoder``);
* frames received but not yet handled are bounded in number and bytes per connection,
  and across the broker by ``queued.max.requests`` (``RequestQueue``): past either bound
  the connection stops reading and the kernel's socket buffer pushes back on the client;
* a client over its quota (``odradek.server.client_quotas``) gets its response at once
  with a throttle time, and then the connection reads and handles nothing until that
  time has passed (KIP-219: Kafka mutes the channel; ``Session.muted_until``);
* a response the peer does not read stops the connection from handling further requests
  until it has been written (Kafka mutes a channel while its response is in flight);
  its unsent record data stays in the segment files (``response_writer.py``: zero-copy
  ``sendfile``, and TLS's chunked encryption).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Protocol

from odradek.configdefs import broker_default
from odradek.log_limiter import LogLimiter
from odradek.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
)
from odradek.server.response_writer import ResponseWriter
from odradek.server.session import CURRENT_SESSION, Session

logger = logging.getLogger(__name__)

# TLS: the transport buffers at most this many bytes before the connection stops
# producing more (response_writer reads record data in chunks as it drains).
_TLS_HIGH_WATER: Final = 1 << 20

# The peer address of the connection whose request is being handled (handlers that must
# report client hosts, e.g. DescribeGroups, read it; tasks created meanwhile inherit it).
CURRENT_PEER: contextvars.ContextVar[Any] = contextvars.ContextVar("odradek_peer", default=None)
# When the frame being dispatched arrived (time.perf_counter()): the request metrics'
# queue time (RequestQueueTimeMs) starts here, not when its handler starts.
FRAME_ARRIVED_AT: contextvars.ContextVar[float] = contextvars.ContextVar(
    "odradek_frame_arrived_at", default=0.0
)

# Connection-level events a hostile client can repeat at will (malformed frames, closes):
# the first few per peer address are logged, then one line a minute with a count.
CONNECTION_LOG = LogLimiter(burst=5, interval_s=60.0)


class CloseConnection(Exception):
    """Raised by dispatch when Kafka would close the connection instead of answering."""


class CloseAfter:
    """A response after which the connection closes (Kafka's answer to a failed SASL
    authentication or a request sent before authenticating: the error, then close)."""

    __slots__ = ("response", "reason", "delay_s")

    def __init__(self, response: bytes | None, reason: str, delay_s: float = 0.0) -> None:
        self.response = response
        self.reason = reason
        # Kafka's connection.failed.authentication.delay.ms: the close waits, which slows
        # down password guessing and lets the client read the answer first.
        self.delay_s = delay_s


class Pipelined:
    """A delayed answer whose *waiting* may overlap the connection's next requests.

    The dispatcher returns it for Produce: the append (every effect of the request)
    already happened, in arrival order, before this is returned; only the wait for the
    acknowledgement (acks=all: the high watermark, REQ-R7) is left. Kafka handles one
    request per connection at a time, so a producer's pipelined requests queue behind
    each other's replication round trips; here they wait side by side, and the answers
    still leave in request order (the protocol's guarantee)."""

    __slots__ = ("coro",)

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro


class InOrder:
    """A delayed Produce answer that must *not* overlap the connection's next requests:
    its appends wait for something first (KIP-890 verification with the transaction
    coordinator), and a producer's next pipelined batches must not be appended before
    them. Handled like any other delayed answer (``Coroutine``)."""

    __slots__ = ("coro",)

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro


# Answers a connection may have pending at once (pipelined produces plus what follows
# them): the idempotent producer's limit of in-flight requests (5) with room to spare.
MAX_PENDING_ANSWERS: Final = 8


Dispatch = Callable[[bytes], Any]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Per-connection bounds (Kafka's names where Kafka has the setting)."""

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES  # socket.request.max.bytes
    # Frames received but not handled yet, per connection: past either bound the
    # connection stops reading until half of them have been handled.
    max_pending_frames: int = 100
    max_pending_bytes: int = 4 << 20
    use_sendfile: bool = True
    # Stamp each frame's arrival (FRAME_ARRIVED_AT) for the request metrics' queue time;
    # only a broker with a metrics.listener pays for it (issue 15).
    stamp_arrivals: bool = False
    # sasl.server.max.receive.size: frames before a SASL client has authenticated.
    max_unauthenticated_frame_bytes: int = broker_default("sasl.server.max.receive.size")
    # odradek.authentication.timeout.ms: a TLS handshake, and then a SASL authentication,
    # must each complete within this long, or the connection is closed.
    authentication_timeout_s: float = broker_default("odradek.authentication.timeout.ms") / 1000


class RequestQueue:
    """Kafka's ``queued.max.requests``: requests read from sockets but not yet handled,
    across every connection of the broker. At the bound, connections that receive more
    stop reading ("parked") until the count falls below it again."""

    __slots__ = ("max_queued", "queued", "_parked")

    def __init__(self, max_queued: int = 500) -> None:
        self.max_queued = max_queued
        self.queued = 0
        self._parked: set[KafkaConnection] = set()

    @property
    def full(self) -> bool:
        return self.queued >= self.max_queued

    def change(self, delta: int) -> None:
        self.queued += delta
        if delta < 0 and self._parked and self.queued < self.max_queued:
            parked, self._parked = self._parked, set()
            for conn in parked:
                conn.maybe_resume_reading()

    def park(self, conn: KafkaConnection) -> None:
        self._parked.add(conn)

    def forget(self, conn: KafkaConnection) -> None:
        self._parked.discard(conn)


class ConnectionOwner(Protocol):
    """What a connection tells the server that accepted it (``SocketServer``)."""

    request_queue: RequestQueue

    def connection_opened(self, conn: KafkaConnection) -> None: ...
    def connection_closed(self, conn: KafkaConnection) -> None: ...


class KafkaConnection(asyncio.Protocol):
    def __init__(
        self,
        dispatch: Dispatch,
        limits: ConnectionLimits,
        owner: ConnectionOwner,
        ip: str | None = None,
        session_factory: Callable[[str, Any], Session] | None = None,
    ) -> None:
        self._dispatch = dispatch
        self.ip = ip  # the address its connection quota was counted under
        self._limits = limits
        self._owner = owner
        self._requests = owner.request_queue
        self._session_factory = session_factory
        self.session = Session(client_host=ip or "")
        self.made = False
        self._decoder = FrameDecoder(limits.max_frame_bytes)
        self._tls = False
        self._close_reason: str | None = None  # close once the queued output is sent
        self._close_delay_s = 0.0
        self._auth_deadline: asyncio.TimerHandle | None = None
        self._pending: deque[Any] = deque()
        self._arrivals: deque[float] = deque()  # perf_counter() of each pending frame
        self._pending_bytes = 0
        self._queued = 0  # len(self._pending) as last reported to the request queue
        # Answers not yet written, in request order: tasks (delayed answers) and done
        # futures (immediate answers that must wait for an earlier delayed one).
        self._answers: deque[asyncio.Future[Any]] = deque()
        # A delayed request that is not pipelined: no further request starts until it
        # is answered (Kafka's one request at a time per connection).
        self._blocking: asyncio.Future[Any] | None = None
        self._reading_paused = False
        self._closed = False
        self._transport: asyncio.Transport | None = None
        self._writer = ResponseWriter(self, limits.use_sendfile)
        # The writer's unsent parts: non-empty means the socket is full and no further
        # request is handled until it drains.
        self._out = self._writer.out
        self._loop: asyncio.AbstractEventLoop | None = None
        self.peer: Any = None
        self.last_io = time.monotonic()  # for connections.max.idle.ms
        self._mute_timer: asyncio.TimerHandle | None = None  # KIP-219 throttle

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made = True
        self._transport = transport  # type: ignore[assignment]
        self._loop = asyncio.get_running_loop()
        self.peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        ssl_object = transport.get_extra_info("ssl_object")
        self._tls = ssl_object is not None
        if self._session_factory is not None:
            # Built here, before any byte is read: the principal of an SSL client comes
            # from its certificate, a SASL listener's session carries its authenticator.
            self.session = self._session_factory(self.ip or "", ssl_object)
        if self.session.authenticator is not None:
            # Until a SASL client has authenticated, its frames are bounded by
            # sasl.server.max.receive.size (Kafka's SaslServerAuthenticator), not by
            # socket.request.max.bytes: an unauthenticated peer cannot make us buffer
            # 100 MB.
            self._decoder.max_frame_bytes = min(
                self._limits.max_frame_bytes, self._limits.max_unauthenticated_frame_bytes
            )
            self.session.on_authenticated.append(self._authenticated)
            # An unauthenticated peer may hold a connection slot only briefly (Kafka
            # bounds it by connections.max.idle.ms alone, 10 minutes by default).
            self._auth_deadline = self._loop.call_later(
                self._limits.authentication_timeout_s, self._authentication_overdue
            )
        sock_fd = -1  # -1: responses go through the transport
        if self._tls:
            # Writing to the socket's fd would bypass the encryption: the transport's
            # buffer (bounded through pause_writing) carries every byte instead.
            transport.set_write_buffer_limits(high=_TLS_HIGH_WATER)  # type: ignore[attr-defined]
            if sock is not None:
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
        elif sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock_fd = sock.fileno()
            except OSError:
                sock_fd = -1
        self._writer.attach(self._loop, transport, sock_fd, self._tls)  # type: ignore[arg-type]
        self._owner.connection_opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._mute_timer is not None:
            self._mute_timer.cancel()
            self._mute_timer = None
        if self._auth_deadline is not None:
            self._auth_deadline.cancel()
            self._auth_deadline = None
        self._release()
        self._owner.connection_closed(self)
        answers, self._answers = self._answers, deque()
        for fut in answers:
            if not fut.done():
                fut.cancel()

    def _authenticated(self) -> None:
        self._decoder.max_frame_bytes = self._limits.max_frame_bytes
        if self._auth_deadline is not None:
            self._auth_deadline.cancel()
            self._auth_deadline = None

    def _authentication_overdue(self) -> None:
        self._auth_deadline = None
        if not self._closed and not self.session.authenticated:
            self.log_close(
                f"SASL authentication did not complete within "
                f"{self._limits.authentication_timeout_s:g} s "
                "(odradek.authentication.timeout.ms)",
                logging.INFO,
            )
            self.close()

    # TLS transports call these when their buffer crosses the high/low water marks.
    def pause_writing(self) -> None:
        self._writer.paused = True

    def resume_writing(self) -> None:
        self._writer.paused = False
        if self._closed:
            return
        self._writer.pump_tls()
        if not self._out and not self._writer.paused:
            self.drained()

    def data_received(self, data: bytes) -> None:
        self.last_io = time.monotonic()
        try:
            frames = self._decoder.feed(data)
        except (FrameTooLarge, FrameError) as e:
            # Kafka closes a connection whose size prefix exceeds socket.request.max.bytes
            # or is malformed; nothing sensible can be answered.
            self.log_close(str(e))
            self.close()
            return
        if frames:
            self._pending.extend(frames)
            if self._limits.stamp_arrivals:
                self._arrivals.extend([time.perf_counter()] * len(frames))
            self._pending_bytes += sum(len(f) for f in frames)
            if self._blocking is None and not self._out:
                self._process()
            self._account()

    def close(self) -> None:
        """Close now (responses not yet written are dropped, as Kafka does)."""
        if not self._closed and self._transport is not None:
            self._closed = True
            self._release()
            self._transport.close()

    def log_close(self, why: str, level: int = logging.WARNING) -> None:
        host = self.peer[0] if self.peer else None
        CONNECTION_LOG.log(
            logger,
            level,
            ("close", host, why[:24]),
            "closing connection from %s: %s",
            self.peer,
            why,
        )

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def has_unsent_output(self) -> bool:
        return bool(self._out)

    def _release(self) -> None:
        """Drop every queued request and unsent response part; close our fds."""
        self._close_reason = None
        self._pending.clear()
        self._arrivals.clear()
        self._pending_bytes = 0
        self._account()
        self._requests.forget(self)
        self._writer.release()

    # ------------------------------------------------------------------ backpressure
    def _account(self) -> None:
        """Report queued frames to the request queue; stop reading past the bounds."""
        n = len(self._pending)
        if n != self._queued:
            self._requests.change(n - self._queued)
            self._queued = n
        if self._closed or self._transport is None:
            return
        if not self._reading_paused:
            if (
                n >= self._limits.max_pending_frames
                or self._pending_bytes >= self._limits.max_pending_bytes
                or (n and self._requests.full)
            ):
                self._reading_paused = True
                self._transport.pause_reading()
                if self._requests.full:
                    self._requests.park(self)
        else:
            self.maybe_resume_reading()

    def maybe_resume_reading(self) -> None:
        if not self._reading_paused or self._closed or self._transport is None:
            return
        if self._mute_timer is not None:
            return  # throttled (KIP-219): _unmute resumes
        if (
            len(self._pending) <= self._limits.max_pending_frames // 2
            and self._pending_bytes <= self._limits.max_pending_bytes // 2
        ):
            if self._requests.full and self._pending:
                self._requests.park(self)
                return
            self._reading_paused = False
            self._transport.resume_reading()

    # ------------------------------------------------------------------ request loop
    def _process(self) -> None:
        loop = self._loop or asyncio.get_running_loop()
        while (
            self._pending
            and self._blocking is None
            and not self._closed
            and not self._out
            and not self._writer.paused
            and self._close_reason is None
            and len(self._answers) < MAX_PENDING_ANSWERS
        ):
            if self.session.muted_until and self._muted():
                return
            frame = self._pending.popleft()
            self._pending_bytes -= len(frame)
            arrived = FRAME_ARRIVED_AT.set(self._arrivals.popleft()) if self._arrivals else None
            token = CURRENT_PEER.set(self.peer)
            stoken = CURRENT_SESSION.set(self.session)
            try:
                result = self._dispatch(frame)
                if isinstance(result, CloseAfter):
                    self.log_close(result.reason, logging.INFO)
                    self._close_reason = result.reason
                    self._close_delay_s = result.delay_s
                    result = result.response
                # Tasks are created here, so that they inherit CURRENT_PEER.
                if isinstance(result, Pipelined):
                    self._enqueue(loop.create_task(result.coro))
                    continue
                if isinstance(result, Coroutine):
                    task = loop.create_task(result)
                    self._blocking = task
                    self._enqueue(task)
                    return
            except CloseConnection as e:
                self.log_close(str(e), logging.INFO)
                self.close()
                return
            except Exception:
                # dispatch answers handler failures with error codes; reaching here is a
                # bug in the server itself.
                logger.exception("request from %s failed; closing the connection", self.peer)
                self.close()
                return
            finally:
                CURRENT_SESSION.reset(stoken)
                CURRENT_PEER.reset(token)
                if arrived is not None:
                    FRAME_ARRIVED_AT.reset(arrived)
            if self._answers:  # an earlier answer is still pending: keep the order
                done = loop.create_future()
                done.set_result(result)
                self._answers.append(done)
            else:
                self._writer.write(result)
                self._maybe_close_after()

    def _muted(self) -> bool:
        """KIP-219: after a response with a throttle time the connection reads and
        handles nothing until the time has passed (Kafka mutes the channel); the client
        backs off as long on its side."""
        remaining = self.session.muted_until - time.monotonic()
        if remaining <= 0:
            self.session.muted_until = 0.0
            return False
        if self._mute_timer is None and self._loop is not None:
            if not self._reading_paused and self._transport is not None:
                self._reading_paused = True
                self._transport.pause_reading()
            self._mute_timer = self._loop.call_later(remaining, self._unmute)
        return True

    def _unmute(self) -> None:
        self._mute_timer = None
        if self._closed:
            return
        self._process()
        self._account()
        self.maybe_resume_reading()

    def _maybe_close_after(self) -> None:
        """A CloseAfter answer is fully handed over: close (a TLS transport flushes its
        buffer before closing; a plaintext socket already took every byte)."""
        if self._close_reason is not None and not self._out and not self._answers:
            if self._close_delay_s > 0 and self._loop is not None:
                delay, self._close_delay_s = self._close_delay_s, 0.0
                if self._transport is not None:
                    self._transport.pause_reading()
                self._loop.call_later(delay, self.close)
                return
            self.close()

    def _enqueue(self, task: asyncio.Future[Any]) -> None:
        self._answers.append(task)
        task.add_done_callback(self._answer_ready)

    def _answer_ready(self, _task: asyncio.Future[Any]) -> None:
        """A delayed answer is ready: write every answer at the head that is ready (a full
        socket queues them in order in ``_out``), then go on with the next requests."""
        if self._closed:
            return
        answers = self._answers
        while answers and answers[0].done():
            fut = answers.popleft()
            if fut is self._blocking:
                self._blocking = None
            if fut.cancelled():
                self.close()
                return
            exc = fut.exception()
            if isinstance(exc, CloseConnection):
                self.log_close(str(exc), logging.INFO)
                self.close()
                return
            if exc is not None:
                logger.error(
                    "request from %s failed; closing the connection", self.peer, exc_info=exc
                )
                self.close()
                return
            self._writer.write(fut.result())
            if self._closed:
                return
        self._maybe_close_after()
        if self._closed:
            return
        self._process()
        self._account()

    # ------------------------------------------------------------------ writes
    def write_failed(self, e: BaseException) -> None:
        # The peer reset the connection, or a segment was truncated under a slice that
        # was promised in a response whose size prefix is already on the wire: the only
        # honest ending is closing the connection (Kafka does the same).
        self.log_close(f"write failed: {e!r}", logging.INFO)
        self.close()

    def drained(self) -> None:
        """The writer sent everything queued: go on with the next requests."""
        self._maybe_close_after()
        if self._closed:
            return
        self._process()
        self._account()
