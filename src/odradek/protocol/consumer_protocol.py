"""The consumer protocol's embedded formats, read from bytes a client sent: a member's
``ConsumerProtocolSubscription`` (JoinGroup metadata) and ``ConsumerProtocolAssignment``
(SyncGroup / DescribeGroups), versions 0-3. Both start with version i16 and a topic
list; the fields later versions add follow it and are not needed here.

Hostile or broken bytes cost nothing: every count and length is checked against the
bytes that are there before anything is read or allocated for it, and anything
malformed reads as empty (the coordinator and the console only describe these bytes).
"""

from __future__ import annotations

import struct

__all__ = ["assignment_partitions", "subscription_topics"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Reader:
    """A cursor over a memoryview; ``ValueError`` when a count or length points past
    the end (``struct.error`` when a fixed-size field does)."""

    def __init__(self, data: bytes) -> None:
        self.buf = memoryview(data)
        self.pos = 0

    def count(self, min_item_bytes: int) -> int:
        (n,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        if n < 0 or n * min_item_bytes > len(self.buf) - self.pos:
            raise ValueError("count beyond the bytes sent")
        return n

    def string(self) -> str:
        (size,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        if size < 0 or size > len(self.buf) - self.pos:
            raise ValueError("string beyond the bytes sent")
        s = bytes(self.buf[self.pos : self.pos + size]).decode()
        self.pos += size
        return s


def subscription_topics(data: bytes | None) -> set[str]:
    """The topics of a member subscription (version, [topic], ...)."""
    if not data:
        return set()
    r = _Reader(data)
    r.pos = 2  # version: every version starts with the same topic list
    try:
        return {r.string() for _ in range(r.count(2))}
    except (struct.error, ValueError, UnicodeDecodeError):
        return set()


def assignment_partitions(data: bytes | None) -> list[tuple[str, int]]:
    """The partitions of a member assignment (version, [topic, [partition]], ...)."""
    if not data:
        return []
    r = _Reader(data)
    r.pos = 2
    out: list[tuple[str, int]] = []
    try:
        for _ in range(r.count(6)):
            name = r.string()
            n = r.count(4)
            out.extend((name, p) for p in struct.unpack_from(f">{n}i", r.buf, r.pos))
            r.pos += 4 * n
    except (struct.error, ValueError, UnicodeDecodeError):
        return []
    return out
