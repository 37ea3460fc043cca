"""Protobuf schemas: the proto3 subset Confluent's compatibility checks look at.

A schema arrives as ``.proto`` text or, as confluent-kafka's ProtobufSerializer sends it, a
base64-encoded ``FileDescriptorProto``; the latter is decoded with protobuf's own descriptor
classes. The ``protobuf`` package has no ``.proto`` text parser (that is protoc), so the text
form goes through a small tokenizer here: ``syntax``, ``package``, ``import``, ``option``,
``message`` (nested), ``enum``, ``oneof``, ``map<K,V>``, ``reserved``, fields with numbers.

Compatibility (Confluent's rules for proto3): fields are matched by number; a number that
reappears with another type is FIELD_KIND_CHANGED unless the two types share a wire
encoding Confluent accepts (int32/uint32/int64/uint64/bool; sint32/sint64; string/bytes;
fixed32/sfixed32; fixed64/sfixed64); a field added or removed is compatible; a message the
writer had that the reader lacks is MESSAGE_REMOVED; a changed package is PACKAGE_CHANGED.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

__all__ = ["ProtoField", "ProtoSchema", "parse_proto", "proto_incompatibilities"]

_MAX_TEXT = 1 << 20
_MAX_NESTING = 100


@dataclass
class ProtoField:
    name: str
    number: int
    type: str
    label: str = ""
    oneof: str = ""


@dataclass
class ProtoSchema:
    package: str = ""
    syntax: str = "proto3"
    imports: list[str] = field(default_factory=list)
    # full message name (package-qualified, dotted for nested ones) -> number -> field
    messages: dict[str, dict[int, ProtoField]] = field(default_factory=dict)
    enums: dict[str, dict[str, int]] = field(default_factory=dict)


_TOKEN = re.compile(
    r'\s+|//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[A-Za-z_][\w.]*|'
    r"-?\d[\w.+-]*|[{}\[\]()<>;=,:]|.",
    re.S,
)
# protobuf's FieldDescriptorProto.Type numbers -> the .proto keyword
_FD_TYPES = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
    7: "fixed32", 8: "bool", 9: "string", 10: "group", 11: "message", 12: "bytes",
    13: "uint32", 14: "enum", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64",
}  # fmt: skip
_WIRE_GROUPS = [
    {"int32", "uint32", "int64", "uint64", "bool"},
    {"sint32", "sint64"},
    {"string", "bytes"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
]


def _tokens(text: str) -> list[str]:
    out = []
    for m in _TOKEN.finditer(text):
        t = m.group(0)
        if t.isspace() or t.startswith("//") or t.startswith("/*"):
            continue
        out.append(t)
    return out


class _Parser:
    def __init__(self, toks: list[str]) -> None:
        self.toks, self.i = toks, 0
        self.depth = 0
        self.schema = ProtoSchema()

    def peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def next(self) -> str:
        if self.i >= len(self.toks):
            raise ValueError("unexpected end of the schema")
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, tok: str) -> None:
        t = self.next()
        if t != tok:
            raise ValueError(f"expected {tok!r}, got {t!r}")

    def skip_statement(self) -> None:
        depth = 0
        while True:
            t = self.next()
            if t in "{[(" and t:
                depth += 1
            elif t in "}])" and t:
                depth -= 1
                if depth == 0 and t == "}":
                    return
            elif t == ";" and depth == 0:
                return

    def parse(self) -> ProtoSchema:
        while self.i < len(self.toks):
            t = self.next()
            if t == "syntax" or t == "edition":
                self.expect("=")
                value = self.next().strip("\"'")
                if value not in ("proto2", "proto3") and t == "syntax":
                    raise ValueError(f"unknown syntax {value!r}")
                self.schema.syntax = value
                self.expect(";")
            elif t == "package":
                self.schema.package = self.next()
                self.expect(";")
            elif t == "import":
                name = self.next()
                if name in ("public", "weak"):
                    name = self.next()
                self.schema.imports.append(name.strip("\"'"))
                self.expect(";")
            elif t == "option":
                self.skip_statement()
            elif t == "message":
                self.message(self._qualify(self.next()))
            elif t == "enum":
                self.enum(self._qualify(self.next()))
            elif t == "service" or t == "extend":
                self.next()
                self.skip_statement()
            elif t == ";":
                continue
            else:
                raise ValueError(f"unexpected {t!r}")
        return self.schema

    def _qualify(self, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ValueError(f"bad name {name!r}")
        return f"{self.schema.package}.{name}" if self.schema.package else name

    def enum(self, full: str) -> None:
        self.expect("{")
        values: dict[str, int] = {}
        while (t := self.next()) != "}":
            if t in ("option", "reserved"):
                self.skip_statement()
            elif t != ";":
                self.expect("=")
                values[t] = int(self.next(), 0)
                if self.peek() == "[":
                    self.skip_statement()
                else:
                    self.expect(";")
        self.schema.enums[full] = values

    def message(self, full: str) -> None:
        self.expect("{")
        fields: dict[int, ProtoField] = {}
        self.schema.messages[full] = fields
        self._body(full, fields, oneof="")

    def _body(self, full: str, fields: dict[int, ProtoField], oneof: str) -> None:
        # Nested messages and oneofs recurse: bound the nesting (protoc allows 100).
        self.depth += 1
        if self.depth > _MAX_NESTING:
            raise ValueError(f"messages nested deeper than {_MAX_NESTING}")
        try:
            self._body_items(full, fields, oneof)
        finally:
            self.depth -= 1

    def _body_items(self, full: str, fields: dict[int, ProtoField], oneof: str) -> None:
        while (t := self.next()) != "}":
            if t == ";":
                continue
            if t in ("option", "reserved", "extensions"):
                self.skip_statement()
            elif t == "message":
                self.message(f"{full}.{self.next()}")
            elif t == "enum":
                self.enum(f"{full}.{self.next()}")
            elif t == "oneof":
                name = self.next()
                self.expect("{")
                self._body(full, fields, oneof=name)
            elif t == "extend":
                self.next()
                self.skip_statement()
            else:
                label = ""
                if t in ("repeated", "optional", "required"):
                    label, t = t, self.next()
                ftype = t
                if t == "map":
                    self.expect("<")
                    k = self.next()
                    self.expect(",")
                    v = self.next()
                    self.expect(">")
                    ftype = f"map<{k},{v}>"
                name = self.next()
                self.expect("=")
                number = int(self.next(), 0)
                if not 1 <= number <= 536870911:
                    raise ValueError(f"field number {number} out of range")
                if number in fields:
                    raise ValueError(f"field number {number} used twice in {full}")
                fields[number] = ProtoField(name, number, ftype, label, oneof)
                if self.peek() == "[":
                    self.skip_statement()
                else:
                    self.expect(";")


def _from_descriptor(fd: descriptor_pb2.FileDescriptorProto) -> ProtoSchema:
    s = ProtoSchema(package=fd.package, syntax=fd.syntax or "proto2", imports=list(fd.dependency))
    prefix = f"{fd.package}." if fd.package else ""

    def enum(e: descriptor_pb2.EnumDescriptorProto, full: str) -> None:
        s.enums[full] = {v.name: v.number for v in e.value}

    def type_of(f: descriptor_pb2.FieldDescriptorProto) -> str:
        return f.type_name.lstrip(".") if f.type in (11, 14) else _FD_TYPES.get(f.type, "?")

    def message(m: descriptor_pb2.DescriptorProto, full: str) -> None:
        # Map fields are repeated fields of a synthetic nested "...Entry" message; show them
        # as the text form does (map<K,V>), so text and descriptor registrations compare.
        entries = {
            f"{full}.{n.name}": n
            for n in m.nested_type
            if n.options.map_entry and len(n.field) == 2
        }
        fields: dict[int, ProtoField] = {}
        for f in m.field:
            ftype, label = type_of(f), "repeated" if f.label == 3 else ""
            entry = entries.get(ftype)
            if entry is not None:
                key, value = sorted(entry.field, key=lambda e: e.number)
                ftype, label = f"map<{type_of(key)},{type_of(value)}>", ""
            oneof = m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else ""
            fields[f.number] = ProtoField(f.name, f.number, ftype, label, oneof)
        s.messages[full] = fields
        for n in m.nested_type:
            if f"{full}.{n.name}" not in entries:
                message(n, f"{full}.{n.name}")
        for e in m.enum_type:
            enum(e, f"{full}.{e.name}")

    for m in fd.message_type:
        message(m, prefix + m.name)
    for e in fd.enum_type:
        enum(e, prefix + e.name)
    return s


def parse_proto(text: str) -> ProtoSchema:
    """Parse ``.proto`` text or a base64 FileDescriptorProto; ValueError when invalid."""
    if len(text) > _MAX_TEXT:
        raise ValueError("schema too large")
    stripped = text.strip()
    if stripped and re.fullmatch(r"[A-Za-z0-9+/=\s]+", stripped) and "{" not in stripped:
        try:
            raw = base64.b64decode(stripped, validate=False)
            fd = descriptor_pb2.FileDescriptorProto()
            fd.ParseFromString(raw)
        except (binascii.Error, DecodeError) as e:
            raise ValueError(f"not a serialized FileDescriptorProto: {e}") from e
        return _from_descriptor(fd)
    schema = _Parser(_tokens(text)).parse()
    if not schema.messages and not schema.enums:
        raise ValueError("no message or enum defined")
    return schema


def _short_type(t: str) -> str:
    # "shop.v1.Order.Line" and "Line" name one type (qualified in a descriptor, as written
    # in text); inside "map<K,V>" too.
    return re.sub(r"[\w.]+", lambda m: m.group(0).rsplit(".", 1)[-1], t.replace(" ", ""))


def _same_kind(a: str, b: str) -> bool:
    if a == b or _short_type(a) == _short_type(b):
        return True
    return any(a in g and b in g for g in _WIRE_GROUPS)


def proto_incompatibilities(reader: ProtoSchema, writer: ProtoSchema) -> list[str]:
    """Why ``reader`` cannot read messages written with ``writer`` (empty: it can)."""
    problems: list[str] = []
    if reader.package != writer.package:
        problems.append(f"{{type:PACKAGE_CHANGED, location:#/{writer.package}}}")
    for name, wfields in writer.messages.items():
        rfields = reader.messages.get(name)
        if rfields is None:
            problems.append(f"{{type:MESSAGE_REMOVED, location:#/{name}}}")
            continue
        for number, wf in wfields.items():
            rf = rfields.get(number)
            if rf is None:
                continue
            loc = f"#/{name}/{number}"
            if not _same_kind(rf.type, wf.type):
                problems.append(f"{{type:FIELD_KIND_CHANGED, location:{loc}}}")
            elif (rf.label == "repeated") != (wf.label == "repeated"):
                problems.append(f"{{type:FIELD_LABEL_CHANGED, location:{loc}}}")
            elif rf.oneof and not wf.oneof:
                problems.append(f"{{type:FIELD_MOVED_TO_EXISTING_ONEOF, location:{loc}}}")
    return problems
