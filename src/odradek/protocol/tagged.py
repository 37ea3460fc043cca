"""Drop unknown tagged fields from a flexible request body (the rare, slow path).

Kafka's protocol (KIP-482) says a receiver must skip tagged fields it does not know, so
a newer client may add tags to a version we serve. kio 0.6.5 instead raises
``KeyError("Unknown tagged field tag: N")``. When that happens ``codec.decode_request``
walks the body here, guided by kio's own schema dataclasses, copies it while leaving out
every tag the schema does not declare, and decodes the copy with kio again. This is pure
Python and much slower than kio's reader, but only runs for such requests.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

__all__ = ["strip_unknown_tags"]

_FIXED_SIZES: dict[str, int] = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Truncated(ValueError):
    pass


# One step per field: (kind, detail, optional) where kind is "prim", "prim[]", "ent",
# "ent[]" and detail the kafka_type or the nested entity class.
_Step = tuple[str, Any, bool]


def _step(field: Any) -> _Step:
    fc = classify_field(field)
    optional = is_optional(field)
    if isinstance(fc, PrimitiveField):
        return ("prim", field.metadata["kafka_type"], optional)
    if isinstance(fc, PrimitiveTupleField):
        return ("prim[]", field.metadata["kafka_type"], optional)
    if isinstance(fc, EntityField):
        return ("ent", fc.type_, optional)
    assert isinstance(fc, EntityTupleField)
    return ("ent[]", fc.type_, optional)


@cache
def _plan(cls: type) -> tuple[list[_Step], dict[int, _Step]]:
    plain: list[_Step] = []
    tagged: dict[int, _Step] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is None:
            plain.append(_step(f))
        else:
            tagged[int(tag)] = _step(f)
    return plain, tagged


class _Walker:
    __slots__ = ("buf", "pos", "end", "out")

    def __init__(self, buf: Any, pos: int, end: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.out = bytearray()

    def _take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise _Truncated("request body truncated")
        self.pos = start + n
        return start

    def copy(self, n: int) -> None:
        start = self._take(n)
        self.out += self.buf[start : start + n]

    def read_uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self.buf[self._take(1)]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def copy_uvarint(self) -> int:
        start = self.pos
        value = self.read_uvarint()
        self.out += self.buf[start : self.pos]
        return value

    def copy_length(self, flexible: bool, wide: bool) -> int:
        """Copy a length prefix; return the number of items/bytes that follow (0 if null)."""
        if flexible:
            return max(self.copy_uvarint() - 1, 0)
        fmt = _I32 if wide else _I16
        start = self._take(fmt.size)
        (n,) = fmt.unpack_from(self.buf, start)
        self.out += self.buf[start : self.pos]
        if n < -1:
            raise ValueError(f"negative length {n}")
        return max(n, 0)

    def primitive(self, kafka_type: str, flexible: bool) -> None:
        size = _FIXED_SIZES.get(kafka_type)
        if size is not None:
            self.copy(size)
        elif kafka_type == "string":
            self.copy(self.copy_length(flexible, wide=False))
        elif kafka_type in ("bytes", "records"):
            self.copy(self.copy_length(flexible, wide=True))
        else:
            raise ValueError(f"unsupported kafka type {kafka_type!r}")

    def run_step(self, step: _Step, flexible: bool) -> None:
        kind, detail, optional = step
        if kind == "prim":
            self.primitive(detail, flexible)
        elif kind == "prim[]":
            for _ in range(self.copy_length(flexible, wide=True)):
                self.primitive(detail, flexible)
        elif kind == "ent":
            if optional:  # KIP-893 nullable struct: int8 marker, -1 = null
                start = self._take(1)
                self.out += self.buf[start : self.pos]
                if self.buf[start] == 0xFF:
                    return
            self.entity(detail)
        else:
            for _ in range(self.copy_length(flexible, wide=True)):
                self.entity(detail)

    def entity(self, cls: type) -> None:
        plain, tagged = _plan(cls)
        flexible: bool = cls.__flexible__  # type: ignore[attr-defined]
        for step in plain:
            self.run_step(step, flexible)
        if not flexible:
            return
        kept: list[tuple[int, bytes]] = []
        for _ in range(self.read_uvarint()):
            tag = self.read_uvarint()
            size = self.read_uvarint()
            start = self._take(size)
            found = tagged.get(tag)
            if found is None:
                continue  # unknown: ignored, as the protocol requires
            sub = _Walker(self.buf, start, start + size)
            # Tagged fields are never nullable on the wire (absence means default).
            sub.run_step((found[0], found[1], False), flexible)
            if sub.pos != start + size:
                raise ValueError(f"tagged field {tag} has {start + size - sub.pos} extra bytes")
            kept.append((tag, bytes(sub.out)))
        _write_uvarint(self.out, len(kept))
        for tag, payload in kept:
            _write_uvarint(self.out, tag)
            _write_uvarint(self.out, len(payload))
            self.out += payload


def _write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def strip_unknown_tags(cls: type, buf: Any, offset: int) -> tuple[bytes, int]:
    """Re-encode the body of entity ``cls`` at ``buf[offset:]`` without unknown tags.

    Returns (new body, bytes of ``buf`` consumed). Raises ValueError on malformed input.
    """
    walker = _Walker(buf, offset, len(buf))
    walker.entity(cls)
    return bytes(walker.out), walker.pos - offset
