"""Primitive encoders shared by the hand-written response encoders (hot path).

Kafka's wire format has two flavours: classic (int16/int32 length prefixes) and flexible
(KIP-482: unsigned varint lengths + 1, compact arrays and strings). These helpers append
the right one to a list of byte parts that is later joined or written with writev.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

I32: Final = struct.Struct(">i")
I16: Final = struct.Struct(">h")
_SMALL_UVARINTS: Final = [bytes((i,)) for i in range(0x80)]


def uvarint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def append_array_length(append: Callable[[bytes], None], flexible: bool, n: int) -> None:
    append(uvarint(n + 1) if flexible else I32.pack(n))


def append_string(append: Callable[[bytes], None], flexible: bool, raw: bytes) -> None:
    append(uvarint(len(raw) + 1) if flexible else I16.pack(len(raw)))
    append(raw)
