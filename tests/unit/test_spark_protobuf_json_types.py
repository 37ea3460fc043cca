"""``value.format=protobuf`` and ``value.format=json`` (issue 27): schema -> Spark type
mapping (tables of cases), Confluent's message-index framing, and the decoders fed Arrow
batches shaped like the source's own, holding values framed as confluent-kafka's
serializers frame them (the integration tests use the serializers themselves against a
real registry: tests/integration/test_spark_protobuf_json.py)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry._sync.protobuf import ProtobufSerializer
from google.protobuf import message_factory
from tests.support.source_batches import source_batch

from odradek.spark.arrow import arrow_schema
from odradek.spark.json_types import json_columns
from odradek.spark.json_values import JsonSinkSchema
from odradek.spark.offsets import SparkOptionError
from odradek.spark.protobuf_types import (
    decode_indexes,
    encode_indexes,
    message_indexes,
    protobuf_file,
    protobuf_message,
    protobuf_value_schema,
)
from odradek.spark.protobuf_values import ProtobufSinkSchema, dict_to_message
from odradek.spark.value_format import (
    ValueDecodeError,
    ValueOptions,
    frame,
    make_decoder,
    value_ddl,
)
from odradek.spark.value_sink import sink_value_options
from odradek.spark.value_types import ValueTypeError

URL = "http://127.0.0.1:9"  # never asked: the tests' schema ids are the reader's own

ORDER_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  map<string, int64> attrs = 4;
  Ship ship = 5;
  Mode mode = 6;
  google.protobuf.Timestamp at = 7;
  uint64 big = 8;
  int32 small = 9;
  uint32 u32 = 10;
  sint64 s64 = 11;
  fixed64 f64 = 12;
  float f = 13;
  double d = 14;
  bool ok = 15;
  bytes raw = 16;
  oneof pick { string a = 17; int32 b = 18; }
  message Line { int32 n = 1; }
  repeated Line lines = 19;
}
message Ship { int32 days = 1; }
enum Mode { AIR = 0; SEA = 1; }
"""


def test_protobuf_type_mapping() -> None:
    cols = {c.name: c for c in protobuf_value_schema(ORDER_PROTO).columns}
    assert {n: c.ddl for n, c in cols.items()} == {
        "id": "bigint",
        "item": "string",
        "tags": "array<string>",
        "attrs": "map<string, bigint>",
        "ship": "struct<`days`: int>",
        "mode": "string",
        "at": "timestamp",
        "big": "decimal(20,0)",
        "small": "int",
        "u32": "bigint",
        "s64": "bigint",
        "f64": "decimal(20,0)",
        "f": "float",
        "d": "double",
        "ok": "boolean",
        "raw": "binary",
        "a": "string",
        "b": "int",
        "lines": "array<struct<`n`: int>>",
    }
    # presence: messages and oneof members can be unset (null); proto3 scalars cannot
    assert [n for n, c in cols.items() if c.nullable] == ["ship", "at", "a", "b"]
    assert cols["at"].arrow == pa.timestamp("us", tz="UTC")
    assert cols["attrs"].arrow == pa.map_(pa.string(), pa.int64())
    assert cols["u32"].arrow == pa.int64()
    # another message by full name; a nested one too
    assert [c.name for c in protobuf_value_schema(ORDER_PROTO, "shop.Ship").columns] == ["days"]
    assert [c.ddl for c in protobuf_value_schema(ORDER_PROTO, "shop.Order.Line").columns] == ["int"]


@pytest.mark.parametrize(
    "text, message, match",
    [
        (ORDER_PROTO, "shop.Nope", "value.protobuf.message"),
        ('syntax = "proto3"; message N { N next = 1; }', "", "recursive"),
        ('syntax = "proto3"; import "other.proto"; message A { int32 x = 1; }', "", "references"),
    ],
)
def test_protobuf_schemas_without_spark_columns_are_refused(
    text: str, message: str, match: str
) -> None:
    with pytest.raises(ValueTypeError, match=match):
        protobuf_value_schema(text, message)


@pytest.mark.parametrize(
    "indexes, wire",
    [
        ([0], b"\x00"),
        ([1], b"\x02\x02"),
        ([0, 1], b"\x04\x00\x02"),
        ([2, 0, 3], b"\x06\x04\x00\x06"),
    ],
)
def test_message_indexes_are_confluents_zigzag_varints(indexes: list[int], wire: bytes) -> None:
    assert encode_indexes(indexes) == wire
    assert decode_indexes(b"hdr.." + wire + b"rest", 5) == (indexes, 5 + len(wire))
    # confluent-kafka's own writer gives the same bytes
    import io

    buf = io.BytesIO()
    ProtobufSerializer._encode_varints(buf, indexes)
    assert buf.getvalue() == wire


@pytest.mark.parametrize(
    "wire, match",
    [(b"\x80", "past the value"), (b"\x01", "bad message index count"), (b"\xff" * 11, "10 bytes")],
)
def test_hostile_message_indexes_are_refused(wire: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        decode_indexes(b"hdr.." + wire, 5)


def test_message_indexes_name_a_message_by_its_path() -> None:
    f = protobuf_file(ORDER_PROTO)
    assert message_indexes(protobuf_message(f)) == [0]
    assert message_indexes(protobuf_message(f, "shop.Ship")) == [1]
    line = protobuf_message(f, "shop.Order.Line")
    assert list(f.message_types_by_name["Order"].nested_types)[message_indexes(line)[1]] == line


ORDER = {
    "id": 7,
    "item": "pen",
    "tags": ["a", "b"],
    "attrs": {"n": 3},
    "ship": {"days": 2},
    "mode": "SEA",
    "at": dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC),
    "big": Decimal(2**64 - 1),
    "small": -3,
    "u32": 2**32 - 1,
    "s64": -(2**40),
    "f64": Decimal(5),
    "f": 1.5,
    "d": -2.25,
    "ok": True,
    "raw": b"\x00\x01",
    "a": None,
    "b": 4,
    "lines": [{"n": 1}, {"n": 2}],
}


def test_protobuf_values_round_trip_through_the_sink_and_source_encoders() -> None:
    sink = ProtobufSinkSchema("t-value", 3, ORDER_PROTO, "")
    value = sink.prefix + sink.payload(ORDER)
    assert value[:6] == frame(3) + b"\x00"  # the first message: the single-0 shortcut
    unset = sink.prefix + sink.payload({"id": 1})
    vo = ValueOptions(URL, None, "t-value", 1, 3, ORDER_PROTO, "fail", "protobuf")
    out = make_decoder(vo, arrow_schema(False)).transform(
        source_batch([value, unset, None]), "t", 0
    )
    assert out.schema.names[:3] == ["key", "id", "item"]
    rows = out.to_pylist()
    got = {k: rows[0][k] for k in ORDER}
    assert got == {**ORDER, "attrs": [("n", 3)]}
    # unset: proto3 scalars read as their default, fields with presence as null
    assert rows[1]["item"] == "" and rows[1]["tags"] == [] and rows[1]["mode"] == "AIR"
    assert rows[1]["ship"] is None and rows[1]["at"] is None and rows[1]["b"] is None
    assert rows[2]["id"] is None  # a tombstone
    assert value_ddl(vo, False).startswith("key binary, `id` bigint, `item` string, `tags`")


def test_protobuf_nested_message_frames_its_index_path() -> None:
    sink = ProtobufSinkSchema("t-value", 3, ORDER_PROTO, "shop.Ship")
    value = sink.prefix + sink.payload({"days": 9})
    assert value[5:7] == b"\x02\x02"  # one index: 1
    vo = ValueOptions(URL, None, "t-value", 1, 3, ORDER_PROTO, "fail", "protobuf", "shop.Ship")
    out = make_decoder(vo, arrow_schema(False)).transform(source_batch([value]), "t", 0)
    assert out.column("days").to_pylist() == [9]


def test_protobuf_rows_that_do_not_fit_are_refused_naming_the_field() -> None:
    f = protobuf_file(ORDER_PROTO)
    cls = message_factory.GetMessageClass(protobuf_message(f))
    with pytest.raises(ValueError, match=r"value.mode: 'RAIL' is not a value of enum"):
        dict_to_message({"mode": "RAIL"}, cls())
    with pytest.raises(ValueError, match=r"\['nope'\] are not fields of shop.Order"):
        dict_to_message({"nope": 1}, cls())


def test_undecodable_values_follow_one_policy_for_all_formats() -> None:
    sink = ProtobufSinkSchema("t-value", 3, ORDER_PROTO, "")
    good = sink.prefix + sink.payload({"id": 1})
    bad = [b"plain", frame(3) + b"\x02\x0a", frame(3) + b"\x00\xff\xff"]  # no frame; index 5
    vo = ValueOptions(URL, None, "t-value", 1, 3, ORDER_PROTO, "fail", "protobuf")
    with pytest.raises(ValueDecodeError, match=r"Protobuf value of t-0 at offset 101 .*magic"):
        make_decoder(vo, arrow_schema(False)).transform(source_batch([good, *bad]), "t", 0)
    vo = ValueOptions(URL, None, "t-value", 1, 3, ORDER_PROTO, "null", "protobuf")
    out = make_decoder(vo, arrow_schema(False)).transform(source_batch([good, *bad]), "t", 0)
    assert out.column("id").to_pylist() == [1, None, None, None]
    jvo = ValueOptions(URL, None, "t-value", 1, 4, json.dumps(POINT), "null", "json")
    docs = [frame(4) + b'{"x": 1}', frame(4) + b'{"x": "one"}', frame(4) + b"{nope"]
    out = make_decoder(jvo, arrow_schema(False)).transform(source_batch(docs), "t", 0)
    assert out.column("x").to_pylist() == [1, None, None]
    jvo = ValueOptions(URL, None, "t-value", 1, 4, json.dumps(POINT), "fail", "json")
    with pytest.raises(ValueDecodeError, match=r"JSON value of t-0 at offset 101 .*value.x: 'one'"):
        make_decoder(jvo, arrow_schema(False)).transform(source_batch(docs), "t", 0)


POINT = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": ["number", "null"]}},
    "required": ["x"],
}

_DEFS = {"definitions": {"P": {"type": "object", "properties": {"n": {"type": "integer"}}}}}


@pytest.mark.parametrize(
    "schema, ddl, nullable",
    [
        ({"type": "string"}, "string", False),
        ({"type": "string", "format": "date-time"}, "string", False),
        ({"enum": ["a", "b"]}, "string", False),
        ({"type": "integer"}, "bigint", False),
        ({"type": "number"}, "double", False),
        ({"type": ["integer", "number"]}, "double", False),
        ({"type": "boolean"}, "boolean", False),
        ({"type": ["string", "null"]}, "string", True),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "bigint", True),
        ({"oneOf": [{"type": "boolean"}]}, "boolean", False),
        ({"type": "array", "items": {"type": "integer"}}, "array<bigint>", False),
        (
            {"type": "object", "additionalProperties": {"type": "number"}},
            "map<string, double>",
            False,
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
            "struct<`a`: string, `b`: bigint>",
            False,
        ),
        (
            {**_DEFS, "type": "array", "items": {"$ref": "#/definitions/P"}},
            "array<struct<`n`: bigint>>",
            False,
        ),
    ],
)
def test_json_schema_type_mapping(schema: dict[str, Any], ddl: str, nullable: bool) -> None:
    # a top-level non-object is one `value` column; as a property it is a field
    cols, record = json_columns(schema)
    if record:
        assert f"struct<{', '.join(f'`{c.name}`: {c.ddl}' for c in cols)}>" == ddl
        return
    assert [(c.name, c.ddl, c.nullable) for c in cols] == [("value", ddl, nullable)]
    wrapped = {"type": "object", "properties": {"p": schema}, "required": ["p"], **_DEFS}
    (col,), record = json_columns(wrapped)
    assert record and (col.name, col.ddl, col.nullable) == ("p", ddl, nullable)


def test_json_required_is_nullability() -> None:
    cols, record = json_columns(POINT)
    assert record and [(c.name, c.ddl, c.nullable) for c in cols] == [
        ("x", "bigint", False),
        ("y", "double", True),
    ]


@pytest.mark.parametrize(
    "schema, match",
    [
        (
            {
                "type": "object",
                "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
            },
            r"value\.a: 'oneOf' of 2",
        ),
        (
            {"type": "object", "properties": {"a": {"type": ["string", "integer"]}}},
            r"value\.a: type",
        ),
        (
            {
                "type": "object",
                "properties": {"m": {"type": "object", "patternProperties": {"^x": {}}}},
            },
            r"value\.m: 'patternProperties'",
        ),
        (
            {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}},
            r"value\.a: 'allOf'",
        ),
        ({"type": "array", "items": [{"type": "string"}]}, r"value: an array needs one 'items'"),
        ({"type": "object", "properties": {"a": {}}}, r"value\.a: the schema gives no type"),
        (
            {"type": "object", "properties": {"a": {"type": "array", "items": {"not": {}}}}},
            r"value\.a\[\]: 'not'",
        ),
        (
            {
                "$defs": {"N": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}}},
                "$ref": "#/$defs/N",
            },
            "recursive",
        ),
        ({"$ref": "other.json"}, "not local"),
        ({"type": "object"}, "needs 'properties'"),
    ],
)
def test_json_schemas_without_spark_columns_are_refused(schema: Any, match: str) -> None:
    with pytest.raises(ValueTypeError, match=match):
        json_columns(schema)


def test_json_sink_validates_and_leaves_nulls_out() -> None:
    sink = JsonSinkSchema("t-value", 4, json.dumps(POINT))
    assert sink.record and sink.fields == {"x", "y"}
    assert sink.prefix + sink.payload({"x": 1, "y": None}) == frame(4) + b'{"x":1}'
    with pytest.raises(Exception) as e:
        sink.payload({"y": 2.5})
    assert "'x' is a required property" in sink.why({"y": 2.5}, e.value)
    with pytest.raises(Exception) as e:
        sink.payload({"x": "one"})
    assert sink.why({"x": "one"}, e.value) == "at /x: 'one' is not of type 'integer'"


def test_sink_options_for_every_format() -> None:
    url = {"schema.registry.url": "http://127.0.0.1:8081"}
    for fmt in ("protobuf", "json"):
        with pytest.raises(SparkOptionError, match=rf"value.format={fmt} needs option"):
            sink_value_options({"value.format": fmt})
    o = sink_value_options({**url, "value.format": "json", "value.schema.id": "12"})
    assert o is not None and (o.fmt, o.schema_id, o.inline_schema) == ("json", 12, None)
    o = sink_value_options(
        {**url, "value.format": "protobuf", "value.protobuf.message": "shop.Ship"}
    )
    assert o is not None and (o.fmt, o.message, o.schema_id) == ("protobuf", "shop.Ship", None)
    with pytest.raises(SparkOptionError, match="must be a schema id"):
        sink_value_options({**url, "value.format": "json", "value.schema.id": "x"})
    with pytest.raises(SparkOptionError, match="exclude each other"):
        sink_value_options(
            {**url, "value.format": "json", "value.schema.id": "1", "value.schema.version": "2"}
        )
    ok = {**url, "value.format": "protobuf", "value.schema": ORDER_PROTO}
    assert sink_value_options(ok) is not None
    with pytest.raises(SparkOptionError, match="not a valid Protobuf schema"):
        sink_value_options({**ok, "value.protobuf.message": "shop.Nope"})
    with pytest.raises(SparkOptionError, match="not a valid JSON schema"):
        sink_value_options({**url, "value.format": "json", "value.schema": '{"type": 5}'})
