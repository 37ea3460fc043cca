"""Mutations of valid requests: the lies a hostile or broken client can tell (pure).

Each mutated request is a corpus payload (request header + body) with one to three of:

* ``bitflip``   -- flip 1-4 random bits;
* ``byte``      -- set a random byte to 0x00, 0x7f, 0x80 or 0xff;
* ``int_lie``   -- overwrite 2 or 4 bytes with an extreme big-endian integer (the shape of
                   an int16 string length or an int32 array count: -1, -2, 0x7fff, 2^31-1,
                   -2^31, 0x10000, ...);
* ``varint``    -- overwrite bytes with an extreme unsigned varint (``ff ff ff ff 0f``,
                   the 34 GB compact-array length of issue 11, a 6-byte varint, a
                   non-minimal zero) -- the shape of a compact length or count;
* ``truncate``  -- cut the payload short;
* ``extend``    -- append random bytes or repeat a slice of the payload;
* ``splice``    -- this payload's head with another payload's tail (any API);
* ``insert`` / ``delete`` -- shift everything after a random point;
* ``header``    -- another served version of the same API, or another API key, in the
                   header of an unchanged body (schema confusion).

Lengths and counts sit at every few bytes of a small request, so random positions hit
them often; no knowledge of the schema is needed (or wanted: the point is to find what
the validator did not foresee). The frame's size prefix itself is left honest here --
framing lies are the harness's ``frame_lies``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Final

__all__ = ["MUTATIONS", "Mutator"]

_INT16_LIES: Final = (-1, -2, 0x7FFF, -0x8000, 0x100, 0x7FFE)
_INT32_LIES: Final = (-1, -2, 0x7FFFFFFF, -0x80000000, 0x10000, 0x7FFFFFF0, 1 << 24)
_VARINT_LIES: Final = (
    b"\xff\xff\xff\xff\x0f",  # 2^32 - 1: the SyncGroup v5 compact-array length of issue 11
    b"\xff\xff\xff\xff\x07",
    b"\xff\xff\xff\xff\xff\x01",  # longer than Kafka's 5 bytes
    b"\x80\x80\x80\x80\x00",  # a non-minimal zero
    b"\xff\x7f",
    b"\x00",
    b"\x01",
)
_BYTES: Final = (0x00, 0x7F, 0x80, 0xFF)


class Mutator:
    """Seeded: the same seed and corpus give the same sequence of requests."""

    def __init__(
        self,
        corpus: Sequence[bytes],
        seed: int = 0,
        header_variants: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        self.corpus = list(corpus)
        self.rnd = random.Random(seed)
        # api_key -> its served versions (for the ``header`` mutation)
        self.header_variants = header_variants or {}

    def mutate(self, payload: bytes) -> tuple[bytes, list[str]]:
        """(mutated payload, names of the mutations applied)."""
        data = bytearray(payload)
        applied: list[str] = []
        for _ in range(self.rnd.choice((1, 1, 1, 2, 3))):
            name, op = self.rnd.choice(MUTATIONS)
            op(self, data)
            applied.append(name)
        if len(data) < 8:  # keep a request header's fixed part: framing is not the target
            data = bytearray(payload[:8]) + data
        return bytes(data), applied

    # ---------------------------------------------------------------- operators
    def _pos(self, data: bytearray, width: int = 1) -> int:
        # Bodies start after ~10-20 header bytes; favour them but keep headers in play.
        lo = 0 if self.rnd.random() < 0.1 else min(8, max(len(data) - width, 0))
        return self.rnd.randrange(lo, max(len(data) - width + 1, lo + 1))

    def bitflip(self, data: bytearray) -> None:
        for _ in range(self.rnd.randrange(1, 5)):
            if data:
                i = self._pos(data)
                data[i] ^= 1 << self.rnd.randrange(8)

    def byte(self, data: bytearray) -> None:
        if data:
            data[self._pos(data)] = self.rnd.choice(_BYTES)

    def int_lie(self, data: bytearray) -> None:
        if self.rnd.random() < 0.5:
            raw = struct.pack(">h", self.rnd.choice(_INT16_LIES))
        else:
            raw = struct.pack(">i", self.rnd.choice(_INT32_LIES))
        if len(data) >= len(raw):
            i = self._pos(data, len(raw))
            data[i : i + len(raw)] = raw

    def varint(self, data: bytearray) -> None:
        raw = self.rnd.choice(_VARINT_LIES)
        if data:
            i = self._pos(data)
            data[i : i + len(raw)] = raw

    def truncate(self, data: bytearray) -> None:
        if len(data) > 1:
            del data[self.rnd.randrange(1, len(data)) :]

    def extend(self, data: bytearray) -> None:
        if data and self.rnd.random() < 0.5:
            i = self.rnd.randrange(len(data))
            data += data[i : i + self.rnd.randrange(1, 64)] * self.rnd.randrange(1, 8)
        else:
            data += bytes(self.rnd.getrandbits(8) for _ in range(self.rnd.randrange(1, 32)))

    def splice(self, data: bytearray) -> None:
        other = self.rnd.choice(self.corpus)
        if len(data) > 1 and len(other) > 1:
            cut = self.rnd.randrange(1, len(data))
            data[cut:] = other[self.rnd.randrange(1, len(other)) :]

    def insert(self, data: bytearray) -> None:
        i = self._pos(data)
        data[i:i] = bytes(self.rnd.getrandbits(8) for _ in range(self.rnd.randrange(1, 9)))

    def delete(self, data: bytearray) -> None:
        if len(data) > 1:
            i = self._pos(data)
            del data[i : i + self.rnd.randrange(1, 9)]

    def header(self, data: bytearray) -> None:
        if len(data) < 4:
            return
        api_key, _ = struct.unpack_from(">hh", data, 0)
        if self.header_variants and self.rnd.random() < 0.7:
            versions = self.header_variants.get(api_key)
            if versions:
                struct.pack_into(">h", data, 2, self.rnd.choice(versions))
                return
        keys = list(self.header_variants) or [api_key]
        key = self.rnd.choice(keys)
        versions = self.header_variants.get(key) or [0]
        struct.pack_into(">hh", data, 0, key, self.rnd.choice(versions))


MUTATIONS: Final[tuple[tuple[str, Callable[[Mutator, bytearray], None]], ...]] = (
    ("bitflip", Mutator.bitflip),
    ("byte", Mutator.byte),
    ("int_lie", Mutator.int_lie),
    ("int_lie", Mutator.int_lie),
    ("varint", Mutator.varint),
    ("varint", Mutator.varint),
    ("truncate", Mutator.truncate),
    ("extend", Mutator.extend),
    ("splice", Mutator.splice),
    ("insert", Mutator.insert),
    ("delete", Mutator.delete),
    ("header", Mutator.header),
)
