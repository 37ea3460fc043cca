"""Size-prefixed request framing (sans-IO).

Every Kafka request is ``int32 size`` followed by ``size`` bytes (header + body). The
decoder turns an arbitrary chunking of the TCP stream into complete frames, without the
size prefix.

Efficiency: a 100 MiB produce request may arrive in thousands of chunks. Bytes are
appended to one ``bytearray`` (amortised O(1) per byte) and consumed frames are removed
from its front, which CPython's bytearray does by moving a start offset, not by copying;
whatever remains after the last complete frame arrived in the current chunk, so
compaction is bounded by the chunk size. When nothing is buffered and the chunk is
immutable ``bytes``, complete frames are returned as zero-copy ``memoryview`` slices.
"""

from __future__ import annotations

import struct
from typing import Final

from odradek.configdefs import broker_default

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "MIN_FRAME_BYTES",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
]

# socket.request.max.bytes' default (Kafka's: 100 MiB), from the table.
DEFAULT_MAX_FRAME_BYTES: Final[int] = broker_default("socket.request.max.bytes")
# The smallest request header (v0: api_key i16, api_version i16, correlation_id i32).
# Anything shorter cannot be a request; finer checks are codec.peek_header's job.
MIN_FRAME_BYTES: Final = 8

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The stream is not a sequence of Kafka frames (negative or too-small size)."""


class FrameTooLarge(Exception):
    """A size prefix exceeds ``max_frame_bytes`` (Kafka closes the connection)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


class FrameDecoder:
    """Incremental decoder; one per connection. After an exception it must be discarded."""

    __slots__ = ("max_frame_bytes", "_buf")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buf)

    def _check(self, size: int) -> None:
        # Checked as soon as the 4 prefix bytes are seen: an oversized frame is refused
        # before any of its body is buffered.
        if size > self.max_frame_bytes:
            raise FrameTooLarge(size, self.max_frame_bytes)
        if size < MIN_FRAME_BYTES:
            raise FrameError(f"invalid frame size {size}")

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | memoryview]:
        """Consume ``data``; return the frames it completes (possibly none)."""
        frames: list[bytes | memoryview] = []
        buf = self._buf
        if not buf and type(data) is bytes:
            # Fast path: frames entirely inside this immutable chunk are views of it.
            view = memoryview(data)
            n = len(data)
            pos = 0
            while n - pos >= 4:
                (size,) = _SIZE.unpack_from(data, pos)
                self._check(size)
                end = pos + 4 + size
                if end > n:
                    break
                frames.append(view[pos + 4 : end])
                pos = end
            if pos < n:
                buf += view[pos:]
            return frames

        buf += data
        n = len(buf)
        pos = 0
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            self._check(size)
            end = pos + 4 + size
            if end > n:
                break
            frames.append(bytes(buf[pos + 4 : end]) if size < 4096 else _copy(buf, pos + 4, end))
            pos = end
        if pos:
            del buf[:pos]  # O(1): bytearray advances its start offset
        return frames


def _copy(buf: bytearray, start: int, end: int) -> bytes:
    # One copy instead of two (slice -> bytearray -> bytes) for large frames; the view
    # must be released before the bytearray is resized again.
    with memoryview(buf) as view:
        return bytes(view[start:end])
