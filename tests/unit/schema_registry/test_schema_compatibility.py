"""Compatibility rules as tables: (writer, reader) pairs from each format's resolution rules
(Avro specification "Schema Resolution"; Confluent's JSON Schema and Protobuf rules), then
the levels (BACKWARD, FORWARD, FULL, *_TRANSITIVE, NONE) on top of the pairwise check."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool

from odradek.schema_registry import errors
from odradek.schema_registry.protobuf_descriptor import serialized_form, to_file_descriptor
from odradek.schema_registry.protobuf_schema import parse_proto
from odradek.schema_registry.schemas import canonical_text, incompatibilities, parse_schema


def _rec(*fields: dict[str, Any], name: str = "R") -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


def _f(name: str, t: Any, **kw: Any) -> dict[str, Any]:
    return {"name": name, "type": t, **kw}


def _enum(*symbols: str, **kw: Any) -> str:
    return json.dumps({"type": "enum", "name": "E", "symbols": list(symbols), **kw})


# (writer, reader, reader can read writer's data)
AVRO_PAIRS = [
    ('"int"', '"int"', True),
    ('"int"', '"long"', True),
    ('"int"', '"float"', True),
    ('"int"', '"double"', True),
    ('"long"', '"float"', True),
    ('"long"', '"double"', True),
    ('"float"', '"double"', True),
    ('"long"', '"int"', False),
    ('"double"', '"float"', False),
    ('"float"', '"long"', False),
    ('"string"', '"bytes"', True),
    ('"bytes"', '"string"', True),
    ('"string"', '"int"', False),
    ('"boolean"', '"null"', False),
    # records: fields added with/without default, removed, promoted
    (_rec(_f("a", "int")), _rec(_f("a", "int"), _f("b", "string", default="x")), True),
    (_rec(_f("a", "int")), _rec(_f("a", "int"), _f("b", "string")), False),
    (_rec(_f("a", "int"), _f("b", "string")), _rec(_f("a", "int")), True),
    (_rec(_f("a", "int")), _rec(_f("a", "long")), True),
    (_rec(_f("a", "long")), _rec(_f("a", "int")), False),
    (_rec(_f("a", "int")), _rec(_f("a", "int"), name="Other"), False),
    (_rec(_f("a", "int")), _rec(_f("b", "int", aliases=["a"])), True),
    (_rec(_f("a", "int")), _rec(_f("a", ["null", "int"], default=None)), True),
    # enums
    (_enum("A", "B"), _enum("A", "B", "C"), True),
    (_enum("A", "B", "C"), _enum("A", "B"), False),
    (_enum("A", "B", "C"), _enum("A", "B", default="A"), True),
    # unions
    ('"int"', '["null", "int"]', True),
    ('"int"', '["null", "long"]', True),
    ('"string"', '["null", "int"]', False),
    ('["null", "int"]', '"int"', False),
    ('["null", "int"]', '["null", "int", "string"]', True),
    ('["null", "int", "string"]', '["null", "int"]', False),
    ('["int", "string"]', '["string", "long"]', True),
    # arrays, maps, fixed
    ('{"type":"array","items":"int"}', '{"type":"array","items":"long"}', True),
    ('{"type":"array","items":"long"}', '{"type":"array","items":"int"}', False),
    ('{"type":"map","values":"int"}', '{"type":"map","values":"double"}', True),
    ('{"type":"map","values":"string"}', '{"type":"map","values":"int"}', False),
    (
        '{"type":"fixed","name":"F","size":4}',
        '{"type":"fixed","name":"F","size":4}',
        True,
    ),
    (
        '{"type":"fixed","name":"F","size":4}',
        '{"type":"fixed","name":"F","size":8}',
        False,
    ),
    # a recursive type
    (
        _rec(_f("next", ["null", "R"], default=None), _f("v", "int")),
        _rec(_f("next", ["null", "R"], default=None), _f("v", "long")),
        True,
    ),
]


@pytest.mark.parametrize("writer,reader,ok", AVRO_PAIRS)
def test_avro_reader_writer_pairs(writer: str, reader: str, ok: bool) -> None:
    w, r = parse_schema("AVRO", writer), parse_schema("AVRO", reader)
    problems = incompatibilities("BACKWARD", r, [w])
    assert (problems == []) is ok, problems


def _obj(props: dict[str, Any], *, required: list[str] | None = None, closed: bool = False) -> str:
    doc: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        doc["required"] = required
    if closed:
        doc["additionalProperties"] = False
    return json.dumps(doc)


_S, _I, _N = {"type": "string"}, {"type": "integer"}, {"type": "number"}


def _obj_d(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props}


JSON_PAIRS = [
    (_obj({"a": _S}), _obj({"a": _S}), True),
    (json.dumps(_I), json.dumps(_N), True),  # widening
    (json.dumps(_N), json.dumps(_I), False),  # narrowing
    (json.dumps(_S), json.dumps(_I), False),
    (json.dumps({"type": ["string", "null"]}), json.dumps(_S), False),
    (json.dumps(_S), json.dumps({"type": ["string", "null"]}), True),
    # open content model: properties may be removed, not added
    (_obj({"a": _S, "b": _I}), _obj({"a": _S}), True),
    (_obj({"a": _S}), _obj({"a": _S, "b": _I}), False),
    # closed content model: properties may be added, not removed
    (_obj({"a": _S}, closed=True), _obj({"a": _S, "b": _I}, closed=True), True),
    (_obj({"a": _S, "b": _I}, closed=True), _obj({"a": _S}, closed=True), False),
    # required
    (_obj({"a": _S}, closed=True), _obj({"a": _S, "b": _I}, required=["b"], closed=True), False),
    (_obj({"a": _S}, required=["a"]), _obj({"a": _S}), True),
    (_obj({"a": _S}), _obj({"a": _S}, required=["a"]), False),
    # property types, enums, bounds, arrays
    (_obj({"a": _I}), _obj({"a": _N}), True),
    (_obj({"a": _N}), _obj({"a": _I}), False),
    (json.dumps({"enum": ["x", "y"]}), json.dumps({"enum": ["x", "y", "z"]}), True),
    (json.dumps({"enum": ["x", "y", "z"]}), json.dumps({"enum": ["x", "y"]}), False),
    (json.dumps({"type": "string", "maxLength": 5}), json.dumps({"type": "string"}), True),
    (json.dumps({"type": "string"}), json.dumps({"type": "string", "maxLength": 5}), False),
    (
        json.dumps({"type": "array", "items": _I}),
        json.dumps({"type": "array", "items": _N}),
        True,
    ),
    (
        json.dumps({"type": "array", "items": _N}),
        json.dumps({"type": "array", "items": _I}),
        False,
    ),
    # anyOf/oneOf as unions, allOf branch by branch, patterns
    (json.dumps({"anyOf": [_S, _I]}), json.dumps({"anyOf": [_S, _I, {"type": "null"}]}), True),
    (json.dumps({"anyOf": [_S, _I]}), json.dumps({"anyOf": [_S]}), False),
    (json.dumps(_S), json.dumps({"oneOf": [_S, _I]}), True),
    (json.dumps({"oneOf": [_S, _I]}), json.dumps(_S), False),
    (json.dumps({"oneOf": [_S, _I]}), json.dumps({"type": ["string", "integer"]}), True),
    (json.dumps({"allOf": [_obj_d({"a": _I})]}), json.dumps({"allOf": [_obj_d({"a": _N})]}), True),
    (json.dumps({"allOf": [_obj_d({"a": _N})]}), json.dumps({"allOf": [_obj_d({"a": _I})]}), False),
    (json.dumps({"allOf": [_S]}), json.dumps({"allOf": [_S, {"maxLength": 3}]}), False),
    (json.dumps(_S), json.dumps({"type": "string", "pattern": "^a"}), False),
    (json.dumps({"type": "string", "pattern": "^a"}), json.dumps(_S), True),
    (json.dumps({"type": "string", "pattern": "^a"}), json.dumps({"type": "string", "pattern": "^b"}), False),
    # local references are followed
    (
        json.dumps({"definitions": {"x": _I}, "type": "object", "properties": {"a": {"$ref": "#/definitions/x"}}}),
        json.dumps({"type": "object", "properties": {"a": _N}}),
        True,
    ),
]  # fmt: skip


@pytest.mark.parametrize("writer,reader,ok", JSON_PAIRS)
def test_json_schema_reader_writer_pairs(writer: str, reader: str, ok: bool) -> None:
    w, r = parse_schema("JSON", writer), parse_schema("JSON", reader)
    problems = incompatibilities("BACKWARD", r, [w])
    assert (problems == []) is ok, problems


_P1 = 'syntax = "proto3";\npackage p;\nmessage M {\n  string a = 1;\n  int32 b = 2;\n}\n'
PROTO_PAIRS = [
    (_P1, _P1, True),
    (_P1, _P1.replace("  int32 b = 2;\n", ""), True),  # field removed
    (_P1, _P1.replace("int32 b = 2;", "int32 b = 2;\n  bool c = 3;"), True),  # added
    (_P1, _P1.replace("int32 b = 2", "int64 b = 2"), True),  # same wire type
    (_P1, _P1.replace("int32 b = 2", "string b = 2"), False),  # number reused, new kind
    (_P1, _P1.replace("string a = 1", "bytes a = 1"), True),
    (_P1, _P1.replace("string a = 1", "repeated string a = 1"), False),
    (_P1, _P1.replace("message M", "message N"), False),  # message removed
    (_P1, _P1.replace("package p", "package q"), False),
    (
        _P1,
        'syntax = "proto3";\npackage p;\n// a comment\nmessage M {\n  string a = 1;\n'
        "  oneof o { int32 b = 2; }\n  map<string, int64> m = 3;\n  message Inner { int32 x = 1; }\n}\n",
        False,
    ),  # moved into a oneof
]


@pytest.mark.parametrize("writer,reader,ok", PROTO_PAIRS)
def test_protobuf_reader_writer_pairs(writer: str, reader: str, ok: bool) -> None:
    w, r = parse_schema("PROTOBUF", writer), parse_schema("PROTOBUF", reader)
    problems = incompatibilities("BACKWARD", r, [w])
    assert (problems == []) is ok, problems


def test_protobuf_serialized_descriptor_is_the_same_schema_as_its_text() -> None:
    fd = descriptor_pb2.FileDescriptorProto(name="m.proto", package="p", syntax="proto3")
    m = fd.message_type.add(name="M")
    m.field.add(name="a", number=1, type=9, label=1)
    m.field.add(name="b", number=2, type=5, label=1)
    serialized = base64.b64encode(fd.SerializeToString()).decode()
    as_text = parse_schema("PROTOBUF", _P1)
    as_desc = parse_schema("PROTOBUF", serialized)
    assert as_desc.parsed.messages == as_text.parsed.messages
    changed = _P1.replace("int32 b = 2", "string b = 2")
    assert incompatibilities("BACKWARD", parse_schema("PROTOBUF", changed), [as_desc])


V1 = _rec(_f("a", "int"))
V2_ADD_DEFAULT = _rec(_f("a", "int"), _f("b", "string", default=""))
V2_ADD_NO_DEFAULT = _rec(_f("a", "int"), _f("b", "string"))
V3_DROP_A = _rec(_f("b", "string", default=""))

# (level, earlier versions oldest first, new schema, accepted)
LEVELS = [
    ("BACKWARD", [V1], V2_ADD_DEFAULT, True),
    ("BACKWARD", [V1], V2_ADD_NO_DEFAULT, False),
    ("FORWARD", [V1], V2_ADD_NO_DEFAULT, True),  # old reader ignores the new field
    ("FORWARD", [V2_ADD_DEFAULT], V1, True),
    ("FORWARD", [V2_ADD_NO_DEFAULT], V1, False),  # old reader needs b, new writer lacks it
    ("FULL", [V1], V2_ADD_DEFAULT, True),
    ("FULL", [V1], V2_ADD_NO_DEFAULT, False),
    # V1 -> V2 (b with default) -> V3 (a dropped, no default): fine against V2 only
    ("BACKWARD", [V1, V2_ADD_DEFAULT], V3_DROP_A, True),
    ("BACKWARD_TRANSITIVE", [V1, V2_ADD_DEFAULT], V3_DROP_A, True),
    ("FORWARD", [V1, V2_ADD_DEFAULT], V3_DROP_A, False),
    ("FULL_TRANSITIVE", [V1, V2_ADD_DEFAULT], V3_DROP_A, False),
    # the oldest reader needs b without a default: only the transitive check sees it
    ("FORWARD_TRANSITIVE", [V2_ADD_NO_DEFAULT, V2_ADD_DEFAULT], V1, False),
    ("FORWARD", [V2_ADD_NO_DEFAULT, V2_ADD_DEFAULT], V1, True),
    ("NONE", [V1], '"string"', True),
    ("BACKWARD", [V1], '"string"', False),
    ("BACKWARD", [], '"string"', True),
]


@pytest.mark.parametrize("level,previous,new,ok", LEVELS)
def test_levels(level: str, previous: list[str], new: str, ok: bool) -> None:
    parsed = [parse_schema("AVRO", p) for p in previous]
    problems = incompatibilities(level, parse_schema("AVRO", new), parsed)
    assert (problems == []) is ok, problems


def test_schema_types_never_mix() -> None:
    avro, js = parse_schema("AVRO", '"string"'), parse_schema("JSON", json.dumps(_S))
    assert incompatibilities("BACKWARD", js, [avro])


@pytest.mark.parametrize(
    "schema_type,text",
    [
        ("AVRO", "{not json"),
        ("AVRO", '{"type": "record", "name": "R"}'),  # no fields
        ("AVRO", '{"type": "nosuchtype"}'),
        ("AVRO", "[" * 10000 + "]" * 10000),
        ("JSON", '{"type": 12}'),
        ("JSON", "[1, 2]"),
        ("PROTOBUF", "message {"),
        ("PROTOBUF", 'syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }'),
        ("PROTOBUF", "!!!!"),
        ("PROTOBUF", 'syntax = "proto3"; ' + "message A { " * 5000 + "}" * 5000),
        ("PROTOBUF", 'syntax = "proto3"; message A { ' + "oneof o { " * 5000),
        ("XML", "<a/>"),
    ],
)
def test_invalid_schemas_are_42201(schema_type: str, text: str) -> None:
    with pytest.raises(errors.RegistryError) as e:
        parse_schema(schema_type, text)
    assert (e.value.status, e.value.code) == (422, 42201)


def test_canonical_text_ignores_whitespace_and_primitive_wrapping() -> None:
    assert canonical_text("AVRO", '{ "type" : "string" }') == '"string"'
    assert canonical_text("AVRO", V1) == canonical_text(
        "AVRO", json.dumps(json.loads(V1), indent=4)
    )
    assert canonical_text("PROTOBUF", _P1) == _P1
    # Attribute order is not part of an Avro schema: Avro (and Confluent) print one order.
    reordered = {
        "fields": [
            {"type": {"type": "int"}, "name": "a"},
            {"name": "b", "type": {"items": "long", "type": "array"}},
        ],
        "name": "R",
        "type": "record",
    }
    same = _rec(_f("a", "int"), _f("b", {"type": "array", "items": "long"}))
    assert canonical_text("AVRO", json.dumps(reordered)) == canonical_text("AVRO", same)
    assert canonical_text("AVRO", same).startswith(
        '{"type":"record","name":"R","fields":[{"name":"a"'
    )


def test_avro_references_resolve_named_types() -> None:
    address = parse_schema("AVRO", _rec(_f("street", "string"), name="Address"))
    user = _rec(_f("home", "Address"), name="User")
    with pytest.raises(errors.RegistryError):
        parse_schema("AVRO", user)  # Address unknown without the reference
    parsed = parse_schema("AVRO", user, [address])
    assert "Address" in parsed.names


_NESTED = """
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";

enum Status { UNKNOWN = 0; PAID = 1; }

message Order {
  string id = 1;
  repeated Line lines = 2;
  Status status = 3;
  map<string, int64> counts_by_sku = 4;
  map<int32, Line> lines_by_number = 7;
  oneof payment { string card = 5; Voucher voucher = 6; }
  message Line { string sku = 1; int32 qty = 2; Kind kind = 3; enum Kind { A = 0; B = 1; } }
  message Voucher { bytes code = 1; }
}
"""


def test_protobuf_text_becomes_a_descriptor_protobuf_accepts() -> None:
    fd = to_file_descriptor(parse_proto(_NESTED), "shop.proto")
    fd.ClearField("dependency")  # the import is not in this pool
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)  # protobuf itself checks every type reference resolves
    order = pool.FindMessageTypeByName("shop.v1.Order")
    fields = {f.name: f for f in order.fields}
    assert fields["lines"].message_type.full_name == "shop.v1.Order.Line"
    assert fields["status"].enum_type.full_name == "shop.v1.Status"
    assert fields["counts_by_sku"].message_type.GetOptions().map_entry
    assert fields["voucher"].containing_oneof.name == "payment"
    line = pool.FindMessageTypeByName("shop.v1.Order.Line")
    assert line.fields_by_name["kind"].enum_type.full_name == "shop.v1.Order.Line.Kind"
    # The serialized form parses back to the same messages and field numbers.
    back = parse_schema("PROTOBUF", serialized_form(_NESTED)).parsed
    assert {m: sorted(fs) for m, fs in back.messages.items()} == {
        m: sorted(fs) for m, fs in parse_proto(_NESTED).messages.items()
    }
    assert back.imports == ["google/protobuf/timestamp.proto"]
    # Text and descriptor forms of one schema are compatible with each other.
    text, desc = (
        parse_schema("PROTOBUF", _NESTED),
        parse_schema("PROTOBUF", serialized_form(_NESTED)),
    )
    assert incompatibilities("FULL", text, [desc]) == []
