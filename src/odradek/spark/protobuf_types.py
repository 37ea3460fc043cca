"""Protobuf schemas -> Spark columns, and Confluent's message indexes (issue 27).

The registry holds a Protobuf schema as ``.proto`` text or as the base64
``FileDescriptorProto`` confluent-kafka's ProtobufSerializer registers; either becomes a
real protobuf ``FileDescriptor`` in a pool of its own (``schema_registry.protobuf_descriptor``
builds the descriptor from text), so values are parsed by the ``protobuf`` library.
Imports of Google's well-known types are served from the library's own descriptors;
other imports are schema references, not supported yet.

Type mapping (Spark's ``from_protobuf`` with ``upcast.unsigned.ints``, so an unsigned
value never reads as a negative number): int32/sint32/sfixed32 -> int;
int64/sint64/sfixed64, uint32/fixed32 -> bigint; uint64/fixed64 -> decimal(20,0); float,
double, bool, string, bytes -> float, double, boolean, string, binary; enum -> string (the
value's name); a message -> struct (a recursive one is refused); repeated -> array;
``map<K,V>`` -> map<K,V>; ``google.protobuf.Timestamp`` -> timestamp. Message indexes
(Confluent's framing after the schema id) are zigzag varints: the count, then the index
of the message at each nesting level; ``[0]`` (the first message) is written as one 0.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor

from odradek.schema_registry.protobuf_descriptor import serialized_form
from odradek.spark.value_types import ValueColumn, ValueSchema, ValueTypeError, struct_ddl

__all__ = [
    "TIMESTAMP",
    "protobuf_file",
    "protobuf_message",
    "protobuf_value_schema",
    "message_indexes",
    "encode_indexes",
    "decode_indexes",
    "is_map",
    "message_at",
]

F = FieldDescriptor
TIMESTAMP = "google.protobuf.Timestamp"
_UINT64 = ("decimal(20,0)", pa.decimal128(20, 0))
_SCALARS: dict[int, tuple[str, pa.DataType]] = {
    F.TYPE_INT32: ("int", pa.int32()),
    F.TYPE_SINT32: ("int", pa.int32()),
    F.TYPE_SFIXED32: ("int", pa.int32()),
    F.TYPE_INT64: ("bigint", pa.int64()),
    F.TYPE_SINT64: ("bigint", pa.int64()),
    F.TYPE_SFIXED64: ("bigint", pa.int64()),
    F.TYPE_UINT32: ("bigint", pa.int64()),
    F.TYPE_FIXED32: ("bigint", pa.int64()),
    F.TYPE_UINT64: _UINT64,
    F.TYPE_FIXED64: _UINT64,
    F.TYPE_FLOAT: ("float", pa.float32()),
    F.TYPE_DOUBLE: ("double", pa.float64()),
    F.TYPE_BOOL: ("boolean", pa.bool_()),
    F.TYPE_STRING: ("string", pa.string()),
    F.TYPE_BYTES: ("binary", pa.binary()),
    F.TYPE_ENUM: ("string", pa.string()),
}
_MAX_INDEXES = 64  # nesting levels of a message index path; more is a hostile value


def _well_known() -> dict[str, FileDescriptor]:
    from google.protobuf import (  # noqa: PLC0415 - only when a schema imports them
        any_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    mods = (any_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2)
    return {m.DESCRIPTOR.name: m.DESCRIPTOR for m in (*mods, wrappers_pb2)}


def protobuf_file(text: str) -> FileDescriptor:
    """The registered schema (text or base64 descriptor) as a FileDescriptor."""
    try:
        raw = base64.b64decode(serialized_form(text))
        fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (ValueError, binascii.Error) as e:
        raise ValueTypeError(f"not a Protobuf schema: {e}") from e
    if not fdp.name:
        fdp.name = "default.proto"
    pool = descriptor_pool.DescriptorPool()
    known = _well_known() if fdp.dependency else {}
    for dep in fdp.dependency:
        if dep not in known:
            raise ValueTypeError(
                f"the schema imports {dep!r}: schemas with references are not supported yet"
            )
        dep_proto = descriptor_pb2.FileDescriptorProto()
        known[dep].CopyToProto(dep_proto)
        pool.Add(dep_proto)
    try:
        pool.Add(fdp)
        return pool.FindFileByName(fdp.name)
    except Exception as e:  # protobuf raises TypeError/KeyError for unresolvable names
        raise ValueTypeError(f"the Protobuf schema does not build: {e}") from e


def protobuf_message(file: FileDescriptor, name: str = "") -> Descriptor:
    """The message ``name`` (full name), or the file's first message (Confluent's default)."""
    if not name:
        first = next(iter(file.message_types_by_name.values()), None)
        if first is None:
            raise ValueTypeError("the Protobuf schema defines no message")
        return first
    try:
        return file.pool.FindMessageTypeByName(name)
    except KeyError:
        raise ValueTypeError(
            f"option 'value.protobuf.message': no message {name!r} in the schema"
        ) from None


def is_map(f: FieldDescriptor) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry


def _field(f: FieldDescriptor, active: set[str], where: str) -> tuple[str, pa.DataType]:
    if is_map(f):
        k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        kd, kt = _single(k, active, f"{where}{{}}")
        vd, vt = _single(v, active, f"{where}[]")
        return f"map<{kd}, {vd}>", pa.map_(kt, vt)
    ddl, typ = _single(f, active, where)
    if f.is_repeated:
        return f"array<{ddl}>", pa.list_(typ)
    return ddl, typ


def _single(f: FieldDescriptor, active: set[str], where: str) -> tuple[str, pa.DataType]:
    if f.type in _SCALARS:
        return _SCALARS[f.type]
    if f.type != F.TYPE_MESSAGE:
        raise ValueTypeError(f"{where}: protobuf type {f.type} (a group) has no Spark column")
    m = f.message_type
    if m.full_name == TIMESTAMP:
        return "timestamp", pa.timestamp("us", tz="UTC")
    if m.full_name in active:
        raise ValueTypeError(f"{where}: recursive message {m.full_name!r} has no Spark type")
    cols = _columns(m, active, where)
    return struct_ddl(cols), pa.struct([pa.field(c.name, c.arrow) for c in cols])


def _columns(m: Descriptor, active: set[str], where: str) -> list[ValueColumn]:
    active.add(m.full_name)
    out = []
    for f in m.fields:
        ddl, typ = _field(f, active, f"{where}.{f.name}")
        out.append(ValueColumn(f.name, ddl, typ, f.has_presence and not f.is_repeated))
    active.discard(m.full_name)
    return out


def protobuf_value_schema(text: str, message: str = "") -> ValueSchema:
    """The value's columns: the fields of the chosen message."""
    m = protobuf_message(protobuf_file(text), message)
    return ValueSchema(_columns(m, set(), m.full_name), True)


def message_indexes(m: Descriptor) -> list[int]:
    """The path of ``m`` in its file: index among the file's messages, then nested ones."""
    path = []
    while m.containing_type is not None:
        parent = m.containing_type
        path.append(list(parent.nested_types).index(m))
        m = parent
    path.append(list(m.file.message_types_by_name.values()).index(m))
    return path[::-1]


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_indexes(indexes: list[int]) -> bytes:
    """Confluent's message-index bytes (the first message is a single 0)."""
    if indexes == [0]:
        return b"\x00"
    return _zigzag(len(indexes)) + b"".join(_zigzag(i) for i in indexes)


def _read_zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    z, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("message indexes run past the value")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("message index varint longer than 10 bytes")


def decode_indexes(buf: bytes, pos: int) -> tuple[list[int], int]:
    """(message indexes, position of the message bytes) from ``buf[pos:]``."""
    count, pos = _read_zigzag(buf, pos)
    if count == 0:
        return [0], pos
    if not 0 < count <= _MAX_INDEXES:
        raise ValueError(f"bad message index count {count}")
    out = []
    for _ in range(count):
        i, pos = _read_zigzag(buf, pos)
        if i < 0:
            raise ValueError(f"negative message index {i}")
        out.append(i)
    return out, pos


def message_at(file: FileDescriptor, indexes: list[int]) -> Descriptor:
    """The message a value's indexes name in the writer's file."""
    level: Any = list(file.message_types_by_name.values())
    m: Descriptor | None = None
    for i in indexes:
        if i >= len(level):
            raise ValueError(f"message index path {indexes} names no message of the schema")
        m = level[i]
        level = list(m.nested_types)
    assert m is not None  # decode_indexes never returns an empty path
    return m
