"""The thin asyncio layer: sockets in, frames to the broker, responses out.

One ``KafkaConnection`` per client socket. Requests are handled in arrival order and
responses go out in the same order (clients rely on it). Handlers that finish at once
are answered inline in ``data_received`` (the hot path creates no task). A handler that
must wait (delayed fetch, admin writes) returns a coroutine, and like Kafka the
connection starts no other request until it is answered (backpressure). The one
exception is Produce (``Pipelined``): its effects happen in order at once, and only its
wait for the acknowledgement overlaps the next requests, up to ``MAX_PENDING_ANSWERS``.

Responses are written with as few copies as possible (SPEC R26): when the transport's
buffer is empty, byte parts go straight to the socket and record data from segment
files with ``os.sendfile``; only what the socket does not take at once is copied into
the transport's buffer.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from odradek.protocol.framing import FrameDecoder, FrameError, FrameTooLarge

log = logging.getLogger(__name__)

MAX_PENDING_FRAMES = 100

# The peer address of the connection whose request is being handled (handlers that must
# report client hosts, e.g. DescribeGroups, read it; tasks created meanwhile inherit it).
CURRENT_PEER: contextvars.ContextVar[Any] = contextvars.ContextVar("odradek_peer",
                                                                  default=None)
# When the frame being dispatched arrived (time.perf_counter()): the request metrics'
# queue time (RequestQueueTimeMs) starts here, not when its handler starts.
FRAME_ARRIVED_AT: contextvars.ContextVar[float] = contextvars.ContextVar(
    "odradek_frame_arrived_at", default=0.0)


class CloseConnection(Exception):
    """Raised by dispatch when Kafka would close the connection instead of answering."""


class Pipelined:
    """A delayed answer whose *waiting* may overlap the connection's next requests.

    The dispatcher returns it for Produce: the append (every effect of the request)
    already happened, in arrival order, before this is returned; only the wait for the
    acknowledgement (acks=all: the high watermark, SPEC R7) is left. Kafka processes one
    request per connection at a time, so a producer's pipelined requests queue behind
    each other's replication round trips; here they wait side by side, and the answers
    still leave in request order (the protocol's guarantee)."""

    __slots__ = ("coro",)

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro


Dispatch = Callable[[bytes], Any]

# Answers a connection may have pending at once (pipelined produces plus what follows
# them): the idempotent producer's limit of in-flight requests (5) with room to spare.
MAX_PENDING_ANSWERS = 8


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatch: Dispatch, max_frame_bytes: int,
                 connections: set[KafkaConnection], use_sendfile: bool = True) -> None:
        self._dispatch = dispatch
        self._decoder = FrameDecoder(max_frame_bytes)
        self._pending: deque[Any] = deque()
        self._arrivals: deque[float] = deque()  # perf_counter() of each pending frame
        # Answers not yet written, in request order: tasks (delayed answers) and done
        # futures (immediate answers that must wait for an earlier delayed one).
        self._answers: deque[asyncio.Future[Any]] = deque()
        # A delayed request that is not pipelined: no further request starts until it
        # is answered (Kafka's one-request-at-a-time per connection).
        self._blocking: asyncio.Future[Any] | None = None
        self._paused = False
        self._closed = False
        self._transport: asyncio.Transport | None = None
        self._sock_fd = -1
        self._connections = connections
        self._use_sendfile = use_sendfile
        self.peer: Any = None

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sock_fd = sock.fileno()
            except OSError:
                self._sock_fd = -1
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._connections.discard(self)
        self._pending.clear()
        self._arrivals.clear()
        answers, self._answers = self._answers, deque()
        for fut in answers:
            if not fut.done():
                fut.cancel()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except (FrameTooLarge, FrameError) as e:
            # Kafka closes a connection whose size prefix exceeds socket.request.max.bytes
            # or is malformed; nothing sensible can be answered.
            log.warning("closing connection from %s: %s", self.peer, e)
            self.close()
            return
        if frames:
            self._pending.extend(frames)
            self._arrivals.extend([time.perf_counter()] * len(frames))
            if self._blocking is None:
                self._process()
            if len(self._pending) > MAX_PENDING_FRAMES and not self._paused and self._transport:
                self._paused = True
                self._transport.pause_reading()

    def close(self) -> None:
        if not self._closed and self._transport is not None:
            self._closed = True
            self._transport.close()

    # ------------------------------------------------------------------ request loop
    def _process(self) -> None:
        loop = asyncio.get_running_loop()
        while (self._pending and self._blocking is None and not self._closed
               and len(self._answers) < MAX_PENDING_ANSWERS):
            frame = self._pending.popleft()
            arrived = FRAME_ARRIVED_AT.set(self._arrivals.popleft())
            token = CURRENT_PEER.set(self.peer)
            try:
                result = self._dispatch(frame)
                # Tasks are created here so that they inherit CURRENT_PEER.
                if isinstance(result, Pipelined):
                    self._enqueue(loop.create_task(result.coro))
                    continue
                if isinstance(result, Coroutine):
                    task = loop.create_task(result)
                    self._blocking = task
                    self._enqueue(task)
                    return
            except CloseConnection as e:
                log.info("closing connection from %s: %s", self.peer, e)
                self.close()
                return
            except Exception:
                log.exception("request from %s failed; closing the connection", self.peer)
                self.close()
                return
            finally:
                CURRENT_PEER.reset(token)
                FRAME_ARRIVED_AT.reset(arrived)
            if self._answers:  # an earlier answer is still pending: keep the order
                done = loop.create_future()
                done.set_result(result)
                self._answers.append(done)
            else:
                self._write(result)
        if self._paused and len(self._pending) < MAX_PENDING_FRAMES // 2 and self._transport:
            self._paused = False
            self._transport.resume_reading()

    def _enqueue(self, task: asyncio.Future[Any]) -> None:
        self._answers.append(task)
        task.add_done_callback(self._answer_ready)

    def _answer_ready(self, _task: asyncio.Future[Any]) -> None:
        """A delayed answer is ready: write every answer at the head that is ready."""
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
                log.info("closing connection from %s: %s", self.peer, exc)
                self.close()
                return
            if exc is not None:
                log.error("request from %s failed; closing the connection", self.peer,
                          exc_info=exc)
                self.close()
                return
            self._write(fut.result())
        self._process()

    # ------------------------------------------------------------------ writes
    def _write(self, result: Any) -> None:
        if result is None or self._closed or self._transport is None:
            return
        transport = self._transport
        if isinstance(result, (bytes, bytearray)):
            transport.write(result)
            return
        # A list of parts: bytes and file slices (fd, position, size).
        direct = (self._use_sendfile and self._sock_fd >= 0
                  and transport.get_write_buffer_size() == 0)
        buffered: list[bytes] = []
        for p in result:
            if isinstance(p, (bytes, bytearray, memoryview)):
                if direct:
                    p = self._send_direct(p)
                    if p is None:
                        continue
                    direct = False
                buffered.append(bytes(p))
            else:
                if direct:
                    sent = self._sendfile_direct(p.fd, p.position, p.size)
                    if sent == p.size:
                        continue
                    direct = False
                    buffered.append(os.pread(p.fd, p.size - sent, p.position + sent))
                else:
                    buffered.append(p.read_bytes())
        if buffered:
            transport.writelines(buffered)

    def _send_direct(self, data: bytes | bytearray | memoryview) -> bytes | None:
        """Write to the socket now; return what it did not take (None if all went)."""
        try:
            n = os.write(self._sock_fd, data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self.close()
            return None
        if n == len(data):
            return None
        return bytes(memoryview(data)[n:])

    def _sendfile_direct(self, fd: int, position: int, size: int) -> int:
        """SPEC R26: page cache to socket without passing through our buffers."""
        sent = 0
        while sent < size:
            try:
                n = os.sendfile(self._sock_fd, fd, position + sent, size - sent)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if n == 0:
                break
            sent += n
        return sent


async def start_listener(host: str, port: int, dispatch: Dispatch, max_frame_bytes: int,
                         connections: set[KafkaConnection]) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: KafkaConnection(dispatch, max_frame_bytes, connections),
        host=host or None, port=port, reuse_address=True, start_serving=False, backlog=1024)
