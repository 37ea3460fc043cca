"""Bounded request decoding: every length, count and varint checked against the frame.

kio's native reader trusts the counts it reads: it reserves ``count`` slots before it
reads a single element, so one SyncGroup v5 whose compact-array length is the varint
``ff ff ff ff 0f`` made it ask for 34 GB and the allocation failure aborted the process
(issue 11). A Rust abort cannot be caught; the only defence is to never hand kio a frame
whose structure does not fit in its own bytes. This module walks a request body exactly
as kio will, guided by kio's schema dataclasses (like ``tagged.py``), and proves first:

* every string, bytes and records length ends inside the frame (or its tagged field);
* every array count times the smallest encoding of one element fits in the bytes left,
  so kio's reservation is bounded by the frame size, which ``socket.request.max.bytes``
  bounds;
* every varint is at most 5 bytes (Kafka's unsigned varint);
* null only where the schema says nullable (Kafka's generated readers refuse a null
  non-nullable field as a malformed request; JoinGroup with null protocols used to reach
  the handler and raise TypeError there);
* a known tagged field's value fills exactly its declared size;
* the request decodes to at most ``max_elements`` array elements in total: Python
  objects cost ~50-200 bytes each, so a 100 MB frame of 2-byte array elements would
  otherwise become several GB of objects (``odradek.request.max.elements``).

Cost: the walk runs on every request, Produce and Fetch included, so one validator is
generated per (api_key, version) as straight-line Python source (fixed-size fields merged
into one bounds check, fixed-size primitive arrays skipped in one step, varints decoded
inline for the one-byte case), compiled once and cached. docs/security.md has its
measured cost per request next to kio's decode.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import fields
from typing import Any, Final

from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from odradek.configdefs import broker_default

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_ELEMENTS",
    "MalformedRequest",
    "TooManyElements",
    "Validator",
    "entity_validator",
    "request_validator",
]

# Default of ``odradek.request.max.elements``, from the table: a replica fetch covering
# 10,000 partitions or a CreateTopics assigning 10,000 partitions RF 5 stays well below.
DEFAULT_MAX_ELEMENTS: Final[int] = broker_default("odradek.request.max.elements")

_FIXED_SIZES: Final[dict[str, int]] = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip
_STRINGS: Final = frozenset({"string"})
_INLINE_DEPTH: Final = 3
_BYTES: Final = frozenset({"bytes", "records"})


class MalformedRequest(ValueError):
    """The body does not fit its frame (or breaks the schema): Kafka closes the
    connection for such a request."""


class TooManyElements(MalformedRequest):
    """The body would decode into more array elements than ``max_elements``."""


# validator(buf, body_offset, end, max_elements) -> offset just after the body
Validator = Callable[[Any, int, int, int], int]


# --- runtime helpers used by the generated code ----------------------------------------


def _truncated() -> None:
    raise MalformedRequest("request body truncated: a field ends past its frame")


def _bad(message: str) -> None:
    raise MalformedRequest(message)


def _too_many(limit: int) -> None:
    raise TooManyElements(
        f"request decodes to more than {limit} array elements (odradek.request.max.elements)"
    )


def _uvarint(b: Any, p: int, e: int) -> tuple[int, int]:
    """Kafka's unsigned varint: at most 5 bytes (32 bits); returns (value, new offset)."""
    value = 0
    shift = 0
    while True:
        if p >= e:
            _truncated()
        x = b[p]
        p += 1
        value |= (x & 0x7F) << shift
        if not x & 0x80:
            return value, p
        shift += 7
        if shift > 28:
            _bad("varint is longer than 5 bytes")


_RUNTIME: Final[dict[str, Any]] = {
    "_t": _truncated,
    "_bad": _bad,
    "_many": _too_many,
    "_uv": _uvarint,
    "_i16": struct.Struct(">h").unpack_from,
    "_i32": struct.Struct(">i").unpack_from,
}


# --- code generation -------------------------------------------------------------------


class _Compiler:
    """Generates one Python function per kio entity class reachable from a request."""

    def __init__(self) -> None:
        self.names: dict[type, str] = {}
        self.sources: list[str] = []
        self.min_sizes: dict[type, int] = {}
        self._tmp = 0

    def function_for(self, cls: type) -> str:
        name = self.names.get(cls)
        if name is None:
            name = self.names[cls] = f"_v{len(self.names)}_{cls.__name__}"
            self.sources.append(self._entity(cls, name))
        return name

    def root_function(self, cls: type) -> str:
        """The entry point: ``(buf, offset, end, max_elements) -> end of body``; it owns
        the element budget ``c = [left, limit]`` shared by the nested functions."""
        self.sources.append(self._entity(cls, "_root", root=True))
        return "_root"

    # -- sizes --------------------------------------------------------------------------
    def min_size(self, cls: type) -> int:
        """Fewest bytes one encoded instance of ``cls`` can take (tagged fields absent)."""
        cached = self.min_sizes.get(cls)
        if cached is not None:
            return cached
        flexible = bool(getattr(cls, "__flexible__", False))
        total = 1 if flexible else 0  # the tagged-field count
        for f in fields(cls):
            if get_field_tag(f) is not None:
                continue
            fc = classify_field(f)
            if isinstance(fc, PrimitiveField):
                kt = f.metadata["kafka_type"]
                total += _FIXED_SIZES.get(kt) or _length_size(kt, flexible)
            elif isinstance(fc, EntityField):
                total += 1 if is_optional(f) else self.min_size(fc.type_)
            else:  # arrays: the count alone
                total += 1 if flexible else 4
        self.min_sizes[cls] = total
        return total

    # -- emitters -----------------------------------------------------------------------
    def _var(self) -> str:
        self._tmp += 1
        return f"n{self._tmp}"

    def _entity(self, cls: type, name: str, root: bool = False) -> str:
        out: list[str] = (
            [f"def {name}(b, p, e, m):", "    c = [m, m]"] if root else [f"def {name}(b, p, e, c):"]
        )
        out += self._body(cls, "    ", depth=0)
        out.append("    return p")
        return "\n".join(out) + "\n"

    def _body(self, cls: type, ind: str, depth: int) -> list[str]:
        """The statements that walk one ``cls`` at ``p`` (inlined into loops up to
        ``_INLINE_DEPTH`` levels: a Python call per array element costs ~0.1 µs)."""
        flexible = bool(getattr(cls, "__flexible__", False))
        out: list[str] = []
        fixed = 0
        tagged: dict[int, Any] = {}
        for f in fields(cls):
            tag = get_field_tag(f)
            if tag is not None:
                tagged[int(tag)] = f
                continue
            size = self._fixed_size(f)
            if size is not None:
                fixed += size
                continue
            if fixed:
                out += _advance(fixed, ind)
                fixed = 0
            out += self._field(f, flexible, ind, f.name, depth)
        if fixed:
            out += _advance(fixed, ind)
        if flexible:
            out += self._tagged_section(tagged, ind, cls.__name__, depth)
        return out

    @staticmethod
    def _fixed_size(f: Any) -> int | None:
        if get_field_tag(f) is not None:
            return None
        if isinstance(classify_field(f), PrimitiveField):
            return _FIXED_SIZES.get(f.metadata["kafka_type"])
        return None

    def _field(self, f: Any, flexible: bool, ind: str, label: str, depth: int) -> list[str]:
        fc = classify_field(f)
        nullable = is_optional(f)
        if isinstance(fc, PrimitiveField):
            return self._primitive(f.metadata["kafka_type"], flexible, nullable, ind, label)
        if isinstance(fc, EntityField):
            fn = self.function_for(fc.type_)
            if not nullable:
                return [f"{ind}p = {fn}(b, p, e, c)"]
            # KIP-893 nullable struct: int8 marker, -1 null, 1 present. Anything else is
            # refused rather than guessed at (the walk must read exactly what kio reads).
            return [
                f"{ind}if p >= e: _t()",
                f"{ind}if b[p] == 0xFF: p += 1",
                f"{ind}elif b[p] == 1: p = {fn}(b, p + 1, e, c)",
                f"{ind}else: _bad('invalid null marker in {label}')",
            ]
        n = self._var()
        out = self._length(n, flexible, wide=True, nullable=nullable, ind=ind, label=label)
        # out leaves the item count in n (-1 for null, already allowed)
        body = ind + "    "
        if isinstance(fc, PrimitiveTupleField):
            kt = f.metadata["kafka_type"]
            size = _FIXED_SIZES.get(kt)
            out.append(f"{ind}if {n} > 0:")
            out.append(f"{body}c[0] -= {n}")
            out.append(f"{body}if c[0] < 0: _many(c[1])")
            if size is not None:
                out.append(f"{body}p += {n} * {size}")
                out.append(f"{body}if p > e: _t()")
                return out
            min_item = _length_size(kt, flexible)
            out.append(
                f"{body}if {n} * {min_item} > e - p: _bad('{label}: count exceeds the bytes left')"
            )
            out.append(f"{body}for _ in range({n}):")
            out += self._primitive(kt, flexible, False, body + "    ", label + "[]")
            return out
        assert isinstance(fc, EntityTupleField)
        min_item = max(1, self.min_size(fc.type_))
        out.append(f"{ind}if {n} > 0:")
        out.append(
            f"{body}if {n} * {min_item} > e - p: _bad('{label}: count exceeds the bytes left')"
        )
        out.append(f"{body}c[0] -= {n}")
        out.append(f"{body}if c[0] < 0: _many(c[1])")
        out.append(f"{body}for _ in range({n}):")
        if depth < _INLINE_DEPTH:
            out += self._body(fc.type_, body + "    ", depth + 1)
        else:
            out.append(f"{body}    p = {self.function_for(fc.type_)}(b, p, e, c)")
        return out

    def _primitive(
        self, kt: str, flexible: bool, nullable: bool, ind: str, label: str
    ) -> list[str]:
        size = _FIXED_SIZES.get(kt)
        if size is not None:
            return _advance(size, ind)
        if kt not in _STRINGS and kt not in _BYTES:
            raise TypeError(f"{label}: unsupported kafka type {kt!r}")
        n = self._var()
        out = self._length(n, flexible, wide=kt in _BYTES, nullable=nullable, ind=ind, label=label)
        out.append(f"{ind}if {n} > 0:")
        out.append(f"{ind}    p += {n}")
        out.append(f"{ind}    if p > e: _t()")
        return out

    @staticmethod
    def _length(
        n: str, flexible: bool, *, wide: bool, nullable: bool, ind: str, label: str
    ) -> list[str]:
        """Read a length/count into ``n`` (-1 = null), refusing null if not nullable."""
        null_check = (
            [] if nullable else [f"{ind}    _bad('null value for non-nullable field {label}')"]
        )
        if flexible:
            out = [
                f"{ind}if p >= e: _t()",
                f"{ind}{n} = b[p]",
                f"{ind}if {n} < 0x80: p += 1",
                f"{ind}else: {n}, p = _uv(b, p, e)",
                f"{ind}{n} -= 1",
            ]
        else:
            width, reader = (4, "_i32") if wide else (2, "_i16")
            out = [
                f"{ind}if p + {width} > e: _t()",
                f"{ind}{n} = {reader}(b, p)[0]",
                f"{ind}p += {width}",
                f"{ind}if {n} < -1: _bad('negative length in {label}')",
            ]
        if null_check:
            out.append(f"{ind}if {n} < 0:")
            out += null_check
        return out

    def _tagged_section(
        self, tagged: dict[int, Any], ind: str, owner: str, depth: int
    ) -> list[str]:
        """Tagged fields: known tags are walked inside exactly their declared size;
        unknown ones are skipped (KIP-482), their size checked like any length."""
        if not tagged:
            # The common case: no tag is known, so only the count and sizes matter; an
            # empty section (one zero byte) is the usual wire content.
            k, end = self._var(), self._var()
            return [
                f"{ind}if p >= e: _t()",
                f"{ind}if b[p] == 0: p += 1",
                f"{ind}else:",
                f"{ind}    {k}, p = _uv(b, p, e)",
                f"{ind}    if {k} > e - p: _bad('{owner}: tagged-field count exceeds "
                "the bytes left')",
                f"{ind}    for _ in range({k}):",
                f"{ind}        _, p = _uv(b, p, e)",
                f"{ind}        {end}, p = _uv(b, p, e)",
                f"{ind}        p += {end}",
                f"{ind}        if p > e: _t()",
            ]
        k, tag, end, outer = self._var(), self._var(), self._var(), self._var()
        out = [
            f"{ind}{k}, p = _uv(b, p, e)",
            f"{ind}if {k} > e - p: _bad('{owner}: tagged-field count exceeds the bytes left')",
            f"{ind}for _ in range({k}):",
            f"{ind}    {tag}, p = _uv(b, p, e)",
            f"{ind}    {end}, p = _uv(b, p, e)",
            f"{ind}    {end} += p",
            f"{ind}    if {end} > e: _t()",
        ]
        first = True
        for tag_id, f in sorted(tagged.items()):
            kw = "if" if first else "elif"
            first = False
            out.append(f"{ind}    {kw} {tag} == {tag_id}:")
            out.append(f"{ind}        {outer}, e = e, {end}")
            # Tagged values are never null on the wire (absence is the default), but a
            # nullable type still has its null encoding, so nullability is kept.
            out += self._field(f, True, ind + "        ", f"{owner}.{f.name}", depth)
            out.append(f"{ind}        e = {outer}")
            out.append(
                f"{ind}        if p != {end}: _bad('tagged field {tag_id} of {owner} "
                "does not fill its size')"
            )
        out.append(f"{ind}    else:")
        out.append(f"{ind}        p = {end}")
        return out


def _length_size(kafka_type: str, flexible: bool) -> int:
    if flexible:
        return 1
    if kafka_type in _BYTES:
        return 4
    return 2


def _advance(size: int, ind: str) -> list[str]:
    return [f"{ind}p += {size}", f"{ind}if p > e: _t()"]


def _compile(cls: type) -> Validator:
    compiler = _Compiler()
    root = compiler.root_function(cls)
    source = "\n".join(compiler.sources)
    namespace: dict[str, Any] = dict(_RUNTIME)
    exec(compile(source, f"<validator {cls.__module__}.{cls.__name__}>", "exec"), namespace)
    validate: Validator = namespace[root]
    validate.source = source  # type: ignore[attr-defined]  # for tests and debugging
    return validate


_cache: dict[type, Validator] = {}
_by_key: dict[tuple[int, int], Validator] = {}


def entity_validator(cls: type) -> Validator:
    """The compiled validator of kio entity class ``cls`` (cached)."""
    v = _cache.get(cls)
    if v is None:
        v = _cache[cls] = _compile(cls)
    return v


def request_validator(api_key: int, api_version: int) -> Validator:
    """The compiled validator of a request body (cached per (api_key, api_version))."""
    key = (api_key, api_version)
    v = _by_key.get(key)
    if v is None:
        v = _by_key[key] = entity_validator(load_request_schema(api_key, api_version))
    return v
