"""A ``.proto`` text schema as the base64 ``FileDescriptorProto`` that confluent-kafka's
ProtobufDeserializer asks for (``?format=serialized``): built from the parsed schema, with
type names resolved through the scopes protoc searches (innermost message outwards), map
fields as their synthetic ``...Entry`` messages, and oneofs as ``oneof_decl`` entries.
Types from imports that the file does not define are left as message references."""

from __future__ import annotations

import base64
from collections.abc import Iterable

from google.protobuf import descriptor_pb2

from odradek.schema_registry.protobuf_schema import ProtoField, ProtoSchema, parse_proto

__all__ = ["to_file_descriptor", "serialized_form"]

FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": FDP.TYPE_DOUBLE, "float": FDP.TYPE_FLOAT, "int64": FDP.TYPE_INT64,
    "uint64": FDP.TYPE_UINT64, "int32": FDP.TYPE_INT32, "fixed64": FDP.TYPE_FIXED64,
    "fixed32": FDP.TYPE_FIXED32, "bool": FDP.TYPE_BOOL, "string": FDP.TYPE_STRING,
    "bytes": FDP.TYPE_BYTES, "uint32": FDP.TYPE_UINT32, "sfixed32": FDP.TYPE_SFIXED32,
    "sfixed64": FDP.TYPE_SFIXED64, "sint32": FDP.TYPE_SINT32, "sint64": FDP.TYPE_SINT64,
}  # fmt: skip


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


class _Builder:
    def __init__(self, schema: ProtoSchema) -> None:
        self.schema = schema

    def resolve(self, scope: str, name: str) -> tuple[int, str]:
        """(TYPE_MESSAGE or TYPE_ENUM, fully qualified ".a.b.C") for a type name used in
        message ``scope``."""
        if name.startswith("."):
            candidates = [name[1:]]
        else:
            parts = scope.split(".")
            candidates = [".".join([*parts[:i], name]) for i in range(len(parts), -1, -1)]
        for c in candidates:
            c = c.lstrip(".")
            if c in self.schema.messages:
                return FDP.TYPE_MESSAGE, "." + c
            if c in self.schema.enums:
                return FDP.TYPE_ENUM, "." + c
        return FDP.TYPE_MESSAGE, "." + name.lstrip(".")  # an imported type

    def field(self, scope: str, f: ProtoField, out: descriptor_pb2.FieldDescriptorProto) -> None:
        out.name, out.number = f.name, f.number
        out.label = FDP.LABEL_REPEATED if f.label == "repeated" else FDP.LABEL_OPTIONAL
        if f.label == "required":
            out.label = FDP.LABEL_REQUIRED
        if f.type in _SCALARS:
            out.type = _SCALARS[f.type]
        else:
            out.type, out.type_name = self.resolve(scope, f.type)

    def message(self, full: str, out: descriptor_pb2.DescriptorProto) -> None:
        out.name = full.rsplit(".", 1)[-1]
        oneofs: dict[str, int] = {}
        for f in self.schema.messages[full].values():
            fd = out.field.add()
            if f.type.startswith("map<"):
                key, value = f.type[4:-1].split(",", 1)
                entry = out.nested_type.add(name=_camel(f.name) + "Entry")
                entry.options.map_entry = True
                self.field(full, ProtoField("key", 1, key), entry.field.add())
                self.field(full, ProtoField("value", 2, value), entry.field.add())
                fd.name, fd.number = f.name, f.number
                fd.label, fd.type = FDP.LABEL_REPEATED, FDP.TYPE_MESSAGE
                fd.type_name = f".{full}.{entry.name}"
                continue
            self.field(full, f, fd)
            if f.oneof:
                if f.oneof not in oneofs:
                    oneofs[f.oneof] = len(out.oneof_decl)
                    out.oneof_decl.add(name=f.oneof)
                fd.oneof_index = oneofs[f.oneof]
        for name in self.children(full, self.schema.messages):
            self.message(name, out.nested_type.add())
        for name in self.children(full, self.schema.enums):
            self.enum(name, out.enum_type.add())

    def enum(self, full: str, out: descriptor_pb2.EnumDescriptorProto) -> None:
        out.name = full.rsplit(".", 1)[-1]
        for name, number in self.schema.enums[full].items():
            out.value.add(name=name, number=number)

    @staticmethod
    def children(parent: str, names: Iterable[str]) -> list[str]:
        prefix = f"{parent}." if parent else ""
        return [
            n for n in names if n.startswith(prefix) and "." not in n[len(prefix) :]
        ]  # direct children only


def to_file_descriptor(schema: ProtoSchema, name: str) -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name=name, package=schema.package)
    if schema.syntax == "proto3":
        fd.syntax = "proto3"
    fd.dependency.extend(schema.imports)
    b = _Builder(schema)
    for full in b.children(schema.package, schema.messages):
        b.message(full, fd.message_type.add())
    for full in b.children(schema.package, schema.enums):
        b.enum(full, fd.enum_type.add())
    return fd


def serialized_form(text: str, name: str = "default.proto") -> str:
    """The schema as base64 FileDescriptorProto; a schema registered in that form already is
    returned as it is."""
    stripped = text.strip()
    if "{" not in stripped:  # already a serialized descriptor (parse_proto's test)
        return stripped
    return base64.b64encode(
        to_file_descriptor(parse_proto(text), name).SerializeToString()
    ).decode()
