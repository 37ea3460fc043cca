"""``value.format=protobuf``: Confluent-framed Protobuf values <-> typed Spark columns.

A value is magic byte 0, the 4-byte schema id, the message indexes (which message of the
writer's file, ``protobuf_types``) and the message's bytes, which the ``protobuf``
library parses with the writer schema's descriptor (built once per worker and id). The
message becomes a dict of the reader's columns: a proto3 scalar without presence reads
as its value (0, "" when unset, as a ProtobufDeserializer user sees it), a field with
presence (a message, ``optional``, a oneof member) that is unset reads as null, an enum
as its name (its number when the writer's enum lacks it). A writer message other than
the reader's (another schema version) is matched to the reader's columns by field name.

The sink goes the other way (``ProtobufValueEncoder``): a row's dict fills a message of
the chosen schema, serialized and framed as confluent-kafka's ProtobufSerializer frames.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.message import Message

from odradek.spark.protobuf_types import (
    TIMESTAMP,
    decode_indexes,
    encode_indexes,
    is_map,
    message_at,
    message_indexes,
    protobuf_file,
    protobuf_message,
)
from odradek.spark.value_format import ValueDecoder, ValueOptions
from odradek.spark.value_sink import SinkSchema
from odradek.spark.value_types import conform

__all__ = ["ProtobufValueDecoder", "ProtobufSinkSchema", "message_to_dict", "dict_to_message"]

F = FieldDescriptor
_UNSIGNED64 = (F.TYPE_UINT64, F.TYPE_FIXED64)


def _scalar_out(f: FieldDescriptor) -> Callable[[Any], Any]:
    """The Python value Spark's column wants for one value of field ``f``."""
    if f.type == F.TYPE_ENUM:
        enum = f.enum_type

        def enum_name(v: int) -> str:
            ev = enum.values_by_number.get(v)
            return ev.name if ev is not None else str(v)

        return enum_name
    if f.type in _UNSIGNED64:
        return Decimal
    if f.type == F.TYPE_MESSAGE:
        if f.message_type.full_name == TIMESTAMP:
            return lambda ts: ts.ToDatetime(tzinfo=dt.UTC)
        return message_to_dict
    return lambda v: v


def message_to_dict(msg: Message) -> dict[str, Any]:
    """A parsed message as the dict of its Spark struct (module doc)."""
    out: dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        v = getattr(msg, f.name)
        if is_map(f):
            conv = _scalar_out(f.message_type.fields_by_name["value"])
            out[f.name] = {k: conv(x) for k, x in v.items()}
        elif f.is_repeated:
            conv = _scalar_out(f)
            out[f.name] = [conv(x) for x in v]
        elif f.has_presence and not msg.HasField(f.name):
            out[f.name] = None
        else:
            out[f.name] = _scalar_out(f)(v)
    return out


def _scalar_in(f: FieldDescriptor, v: Any, where: str) -> Any:
    if f.type == F.TYPE_ENUM and isinstance(v, str):
        ev = f.enum_type.values_by_name.get(v)
        if ev is None:
            raise ValueError(f"{where}: {v!r} is not a value of enum {f.enum_type.full_name}")
        return ev.number
    if f.type in _UNSIGNED64 and isinstance(v, Decimal):
        return int(v)
    return v


def dict_to_message(d: dict[str, Any], msg: Message, where: str = "value") -> Message:
    """Fill ``msg`` from a row's dict; a key that is not a field is an error; null is unset."""
    fields = msg.DESCRIPTOR.fields_by_name
    extra = sorted(set(d) - set(fields))
    if extra:
        raise ValueError(f"{where}: {extra} are not fields of {msg.DESCRIPTOR.full_name}")
    msg.SetInParent()
    for name, v in d.items():
        if v is None:
            continue
        f, path = fields[name], f"{where}.{name}"
        target = getattr(msg, name)
        if is_map(f):
            vf = f.message_type.fields_by_name["value"]
            for k, x in v.items():
                if vf.type == F.TYPE_MESSAGE:
                    _fill(vf, x, target[k], f"{path}[{k!r}]")
                else:
                    target[k] = _scalar_in(vf, x, path)
        elif f.is_repeated:
            for x in v:
                if f.type == F.TYPE_MESSAGE:
                    _fill(f, x, target.add(), f"{path}[]")
                else:
                    target.append(_scalar_in(f, x, path))
        elif f.type == F.TYPE_MESSAGE:
            _fill(f, v, target, path)
        else:
            setattr(msg, name, _scalar_in(f, v, path))
    return msg


def _fill(f: FieldDescriptor, v: Any, target: Message, where: str) -> None:
    if f.message_type.full_name == TIMESTAMP:
        if not isinstance(v, dt.datetime):
            raise ValueError(f"{where}: {v!r} is not a timestamp")
        target.FromDatetime(v if v.tzinfo else v.replace(tzinfo=dt.UTC))
    elif isinstance(v, dict):
        dict_to_message(v, target, where)
    else:
        raise ValueError(f"{where}: {v!r} is not a struct for {f.message_type.full_name}")


class _Writer:
    """One writer schema: its file and a message class per message it names."""

    def __init__(self, file: FileDescriptor) -> None:
        self.file = file
        self.classes: dict[tuple[int, ...], tuple[str, type[Message]]] = {}

    def message_class(self, indexes: list[int]) -> tuple[str, type[Message]]:
        key = tuple(indexes)
        got = self.classes.get(key)
        if got is None:
            m: Descriptor = message_at(self.file, indexes)
            got = (m.full_name, message_factory.GetMessageClass(m))
            self.classes[key] = got
        return got


class ProtobufValueDecoder(ValueDecoder):
    """Protobuf values parsed by the protobuf library with their writer's descriptor."""

    def __init__(self, vo: ValueOptions, base: pa.Schema) -> None:
        super().__init__(vo, base)
        self._reader_name = protobuf_message(protobuf_file(vo.schema), vo.message).full_name

    def parse_writer(self, schema_text: str) -> Any:
        return _Writer(protobuf_file(schema_text))

    def decode_value(self, value: bytes, schema_id: int) -> Any:
        writer: _Writer = self.writer(schema_id)
        indexes, pos = decode_indexes(value, 5)
        name, cls = writer.message_class(indexes)
        msg = cls.FromString(value[pos:])
        got = message_to_dict(msg)
        if name == self._reader_name and schema_id == self._vo.schema_id:
            return got  # typed by the reader's own descriptor already
        return conform(got, self._type)


class ProtobufSinkSchema(SinkSchema):
    """One subject's Protobuf schema and the message rows are written as."""

    def __init__(self, subject: str, schema_id: int, text: str, message: str) -> None:
        super().__init__(subject, schema_id)
        m = protobuf_message(protobuf_file(text), message)
        self._cls = message_factory.GetMessageClass(m)
        self.prefix += encode_indexes(message_indexes(m))  # as ProtobufSerializer frames
        self.record = True
        self.fields = {f.name for f in m.fields}

    def payload(self, datum: Any) -> bytes:
        if not isinstance(datum, dict):
            raise ValueError(f"{datum!r} is not a struct")
        return dict_to_message(datum, self._cls()).SerializeToString()
