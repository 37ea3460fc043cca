"""One connection's responses on their way to the socket (the write half of ``network.py``).

Writes bypass the transport (uvloop has no ``loop.sendfile``): bytes go out with
``os.writev``, record data with ``os.sendfile``, both straight to the socket; readiness
is awaited with ``loop.add_writer`` on a ``dup`` of the socket (the transport already
polls the socket's own fd for reading).

Unsent record data stays in the segment files: a slice that does not fit in the socket
buffer is kept as (fd, position, size), its fd ``dup``-ed so retention or deletion of the
segment cannot close it underneath, and ``os.sendfile`` resumes when the socket is
writable again (REQ-R26: zero-copy). The old writer ``pread`` the unsent rest of every
slice into memory: four 125 MB fetches took a broker from 80 MB to 554 MB.

On a TLS connection (issue 14) zero copy gives way to encryption: every byte must pass
through the SSL object, so responses go to the transport, and record data is read from
the segment in pieces of ``_TLS_CHUNK`` bytes, each encrypted as it is written. The
transport's ``pause_writing`` / ``resume_writing`` (``paused``) take the place of the
socket's readiness: while the transport's buffer is above its high-water mark no further
piece is read and the connection handles no further request, so a TLS peer that does not
read costs at most that buffer, like a plaintext one.

While anything waits in ``out`` the connection handles no further request (Kafka mutes a
channel while its response is in flight), so a peer that does not read costs at most one
response's bookkeeping, never its bytes.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import Any, Final, Protocol

# Linux IOV_MAX: the most buffers one writev takes.
_IOV_MAX: Final = 1024
# A FileSlice is sent in pieces of at most this many bytes when sendfile is off.
_PREAD_CHUNK: Final = 1 << 20
# TLS: record data is read and encrypted this many bytes at a time.
_TLS_CHUNK: Final = 256 << 10


class FileSliceLike(Protocol):
    """storage.log_types.FileSlice: whole batches at [position, position+size) of fd."""

    @property
    def fd(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def size(self) -> int: ...


class WriterOwner(Protocol):
    """What the writer tells its connection (``network.KafkaConnection``)."""

    last_io: float

    @property
    def closed(self) -> bool: ...

    def write_failed(self, e: BaseException) -> None:
        """The peer reset the connection or a slice's segment was truncated: close."""

    def drained(self) -> None:
        """Everything queued was written: the connection may handle its next requests."""


class _PendingFile:
    """The unsent rest of a FileSlice, with its own fd (a dup: the segment may be
    closed by retention or deletion while the peer is slow to read)."""

    __slots__ = ("fd", "position", "remaining")

    def __init__(self, fd: int, position: int, remaining: int) -> None:
        self.fd = fd
        self.position = position
        self.remaining = remaining


class _Truncated(Exception):
    """A segment got shorter than the slice being sent (follower truncation)."""


class ResponseWriter:
    """Sends a connection's responses in order: bytes, or lists of bytes and FileSlices."""

    __slots__ = (
        "_owner",
        "_use_sendfile",
        "_loop",
        "_transport",
        "_sock_fd",
        "_tls",
        "_wait_fd",
        "out",
        "paused",
    )

    def __init__(self, owner: WriterOwner, use_sendfile: bool) -> None:
        self._owner = owner
        self._use_sendfile = use_sendfile
        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: asyncio.Transport | None = None
        self._sock_fd = -1  # -1: write through the transport (TLS, or no socket)
        self._tls = False
        self._wait_fd = -1  # dup of the socket registered with loop.add_writer
        # Unsent response parts (memoryview | _PendingFile), in order; non-empty means the
        # socket is full and the connection handles no further request until it drains.
        self.out: deque[Any] = deque()
        # TLS: the transport's buffer is above its high-water mark.
        self.paused = False

    def attach(
        self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, sock_fd: int, tls: bool
    ) -> None:
        self._loop = loop
        self._transport = transport
        self._sock_fd = sock_fd
        self._tls = tls

    def release(self) -> None:
        """Drop every unsent part and close our fds (the connection is closing)."""
        for part in self.out:
            if isinstance(part, _PendingFile):
                os.close(part.fd)
        self.out.clear()
        if self._wait_fd >= 0:
            if self._loop is not None:
                self._loop.remove_writer(self._wait_fd)
            os.close(self._wait_fd)
            self._wait_fd = -1

    def write(self, result: Any) -> None:
        """Send a response: bytes, or a list of bytes and FileSlices (in order)."""
        if result is None or self._transport is None or self._owner.closed:
            return
        if self._tls:
            self._write_tls(result)
            return
        if type(result) is bytes and not self.out and self._sock_fd >= 0:
            # The common case (every non-Fetch response): one write() that takes it all.
            try:
                n = os.write(self._sock_fd, result)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as e:
                self._owner.write_failed(e)
                return
            if n == len(result):
                self._owner.last_io = time.monotonic()
                return
            self.out.append(memoryview(result)[n:])
            self._wait_writable()
            return
        if isinstance(result, (bytes, bytearray, memoryview)):
            result = (result,)
        if self._sock_fd < 0:
            self._transport.writelines(
                [
                    p if isinstance(p, (bytes, bytearray, memoryview)) else _read_all(p)
                    for p in result
                ]
            )
            return
        try:
            if self.out:  # still sending an earlier response: keep the order
                self.out.extend(self._pin(p) for p in result)
            else:
                self.out.extend(self._send_now(result))
            if self.out:
                self._wait_writable()
        except OSError as e:  # os.dup at the fd limit (EMFILE): this connection gives up
            self._owner.write_failed(e)

    # ------------------------------------------------------------------ TLS
    def _write_tls(self, result: Any) -> None:
        """TLS: bytes to the transport; record data read in chunks as the transport
        drains (``pump_tls``). Order is kept: once something waits in ``out``,
        everything after it waits too."""
        if isinstance(result, (bytes, bytearray, memoryview)):
            result = (result,)
        try:
            for p in result:
                if self.out or not isinstance(p, (bytes, bytearray, memoryview)):
                    self.out.append(self._pin(p))
                else:
                    self._transport.write(p)  # type: ignore[union-attr]
        except OSError as e:  # os.dup at the fd limit
            self._owner.write_failed(e)
            return
        self._owner.last_io = time.monotonic()
        self.pump_tls()

    def pump_tls(self) -> None:
        out = self.out
        transport = self._transport
        owner = self._owner
        while out and not self.paused and not owner.closed and transport is not None:
            p = out[0]
            if isinstance(p, memoryview):
                transport.write(p)
                out.popleft()
                continue
            try:
                chunk = os.pread(p.fd, min(p.remaining, _TLS_CHUNK), p.position)
            except OSError as e:
                owner.write_failed(e)
                return
            if not chunk:
                owner.write_failed(_Truncated(f"segment ends {p.remaining} bytes early"))
                return
            transport.write(chunk)
            p.position += len(chunk)
            p.remaining -= len(chunk)
            owner.last_io = time.monotonic()
            if not p.remaining:
                os.close(p.fd)
                out.popleft()

    # ------------------------------------------------------------------ plaintext socket
    def _send_now(self, parts: Any) -> list[Any]:
        """Write as much of ``parts`` as the socket takes now; return the unsent rest
        (its file parts pinned by their own fds)."""
        i, n = 0, len(parts)
        while i < n:
            p = parts[i]
            if isinstance(p, (bytes, bytearray, memoryview)):
                j = i + 1
                while (
                    j < n
                    and j - i < _IOV_MAX
                    and isinstance(parts[j], (bytes, bytearray, memoryview))
                ):
                    j += 1
                rest = self._writev(parts[i:j])
                if rest is None:
                    return []
                if rest:
                    return rest + [self._pin(q) for q in parts[j:]]
                i = j
                continue
            try:
                sent = self._sendfile(p.fd, p.position, p.size)
            except (_Truncated, OSError) as e:
                self._owner.write_failed(e)
                return []
            if sent < p.size:
                left = _PendingFile(os.dup(p.fd), p.position + sent, p.size - sent)
                return [left] + [self._pin(q) for q in parts[i + 1 :]]
            i += 1
        self._owner.last_io = time.monotonic()
        return []

    @staticmethod
    def _pin(p: Any) -> Any:
        if isinstance(p, (bytes, bytearray, memoryview)):
            return memoryview(p)
        return _PendingFile(os.dup(p.fd), p.position, p.size)

    def _writev(self, bufs: list[Any]) -> list[memoryview] | None:
        """[] if all written, the unsent rest, or None if the connection broke."""
        try:
            written = os.writev(self._sock_fd, bufs)
        except (BlockingIOError, InterruptedError):
            written = 0
        except OSError as e:
            self._owner.write_failed(e)
            return None
        rest: list[memoryview] = []
        for b in bufs:
            size = len(b)
            if written >= size:
                written -= size
                continue
            rest.append(memoryview(b)[written:])
            written = 0
        return rest

    def _sendfile(self, fd: int, position: int, size: int) -> int:
        """REQ-R26: page cache to socket without passing through our buffers. Returns
        the bytes sent before the socket filled up."""
        sent = 0
        while sent < size:
            try:
                if self._use_sendfile:
                    n = os.sendfile(self._sock_fd, fd, position + sent, size - sent)
                else:
                    chunk = os.pread(fd, min(size - sent, _PREAD_CHUNK), position + sent)
                    if not chunk:
                        raise _Truncated(f"segment ends {size - sent} bytes early")
                    n = os.write(self._sock_fd, chunk)
            except (BlockingIOError, InterruptedError):
                break
            if n == 0:
                raise _Truncated(f"segment ends {size - sent} bytes early")
            sent += n
        return sent

    def _wait_writable(self) -> None:
        if self._wait_fd < 0 and self._loop is not None and not self._owner.closed:
            self._wait_fd = os.dup(self._sock_fd)
            self._loop.add_writer(self._wait_fd, self._on_writable)

    def _on_writable(self) -> None:
        out = self.out
        owner = self._owner
        while out and not owner.closed:
            p = out[0]
            if isinstance(p, memoryview):
                run: list[memoryview] = []
                for q in out:
                    if not isinstance(q, memoryview) or len(run) >= _IOV_MAX:
                        break
                    run.append(q)
                rest = self._writev(run)
                if rest is None:
                    return
                for _ in range(len(run)):
                    out.popleft()
                if rest:
                    out.extendleft(reversed(rest))
                    return
                continue
            try:
                sent = self._sendfile(p.fd, p.position, p.remaining)
            except (_Truncated, OSError) as e:
                owner.write_failed(e)
                return
            p.position += sent
            p.remaining -= sent
            owner.last_io = time.monotonic()
            if p.remaining:
                return
            os.close(p.fd)
            out.popleft()
        if owner.closed:
            return
        owner.last_io = time.monotonic()
        if self._wait_fd >= 0 and self._loop is not None:
            self._loop.remove_writer(self._wait_fd)
            os.close(self._wait_fd)
            self._wait_fd = -1
        owner.drained()


def _read_all(p: FileSliceLike) -> bytes:
    out = bytearray()
    while len(out) < p.size:
        chunk = os.pread(p.fd, p.size - len(out), p.position + len(out))
        if not chunk:
            raise _Truncated("segment ends early")
        out += chunk
    return bytes(out)
