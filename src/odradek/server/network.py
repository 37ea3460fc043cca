"""The thin asyncio layer: sockets in, frames to the broker, responses out.

One ``KafkaConnection`` per client socket. Like Kafka, a connection has at most one
request in progress: requests are handled in arrival order and responses go out in the
same order (clients rely on it). Handlers that finish at once are answered inline in
``data_received`` (the hot path creates no task); a handler that must wait (delayed
fetch or produce, admin writes) returns a coroutine, and the connection stops reading
until it is done (backpressure).

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


class CloseConnection(Exception):
    """Raised by dispatch when Kafka would close the connection instead of answering."""


Dispatch = Callable[[bytes], Any]


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatch: Dispatch, max_frame_bytes: int,
                 connections: set[KafkaConnection], use_sendfile: bool = True) -> None:
        self._dispatch = dispatch
        self._decoder = FrameDecoder(max_frame_bytes)
        self._pending: deque[Any] = deque()
        self._busy = False
        self._paused = False
        self._closed = False
        self._transport: asyncio.Transport | None = None
        self._sock_fd = -1
        self._connections = connections
        self._use_sendfile = use_sendfile
        self._task: asyncio.Task[None] | None = None
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
        if self._task is not None and not self._task.done():
            self._task.cancel()

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
            if not self._busy:
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
        while self._pending and not self._busy and not self._closed:
            frame = self._pending.popleft()
            token = CURRENT_PEER.set(self.peer)
            try:
                result = self._dispatch(frame)
                if isinstance(result, Coroutine):  # the task inherits CURRENT_PEER
                    self._busy = True
                    self._task = asyncio.get_running_loop().create_task(
                        self._finish(result))
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
            self._write(result)
        if self._paused and len(self._pending) < MAX_PENDING_FRAMES // 2 and self._transport:
            self._paused = False
            self._transport.resume_reading()

    async def _finish(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            result = await coro
        except CloseConnection as e:
            log.info("closing connection from %s: %s", self.peer, e)
            self.close()
            return
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("request from %s failed; closing the connection", self.peer)
            self.close()
            return
        self._busy = False
        self._task = None
        if self._closed:
            return
        self._write(result)
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
