"""Avro -> Spark type mapping and the value decoder of ``value.format=avro`` (issue 27).

The mapping follows spark-avro's SchemaConverters; the decoder is fed Arrow batches shaped
like the source's own (``arrow_schema``) holding Confluent-framed values written by
fastavro, with the writer schema of another id already in the worker's cache (the
integration test fetches it from a real registry).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_writer
from tests.support.source_batches import source_batch

from odradek.spark import value_format
from odradek.spark.arrow import arrow_schema
from odradek.spark.avro_types import AvroTypeError, avro_columns
from odradek.spark.avro_values import AvroValueDecoder
from odradek.spark.offsets import SparkOptionError, parse_subscription
from odradek.spark.value_format import (
    ValueDecodeError,
    ValueOptions,
    value_arrow_schema,
    value_ddl,
    value_options,
)

RICH = {
    "type": "record",
    "name": "Rich",
    "namespace": "t",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": ["null", "string"]},
        {"name": "raw", "type": "bytes"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["R", "G"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "Inner",
                "fields": [{"name": "c", "type": "Color"}, {"name": "n", "type": "int"}],
            },
        },
        {"name": "again", "type": ["null", "t.Inner"]},
        {"name": "num", "type": ["int", "long"]},
        {"name": "real", "type": ["null", "float", "double"]},
    ],
}


def test_type_mapping_follows_spark_avro() -> None:
    cols = {c.name: c for c in avro_columns(RICH)}
    ddl = {n: c.ddl for n, c in cols.items()}
    assert ddl == {
        "b": "boolean",
        "i": "int",
        "l": "bigint",
        "f": "float",
        "d": "double",
        "s": "string",
        "raw": "binary",
        "color": "string",
        "fx": "binary",
        "day": "date",
        "ms": "timestamp",
        "us": "timestamp",
        "local": "timestamp_ntz",
        "tm": "int",
        "id": "string",
        "price": "decimal(9,2)",
        "tags": "array<string>",
        "attrs": "map<string, bigint>",
        "inner": "struct<`c`: string, `n`: int>",
        "again": "struct<`c`: string, `n`: int>",
        "num": "bigint",
        "real": "double",
    }
    assert [n for n, c in cols.items() if c.nullable] == ["s", "again", "real"]
    assert cols["ms"].arrow == pa.timestamp("us", tz="UTC")
    assert cols["local"].arrow == pa.timestamp("us")
    assert cols["day"].arrow == pa.date32()
    assert cols["price"].arrow == pa.decimal128(9, 2)
    assert cols["attrs"].arrow == pa.map_(pa.string(), pa.int64())
    assert cols["inner"].arrow == pa.struct([("c", pa.string()), ("n", pa.int32())])
    # a value that is not a record is one `value` column
    assert [(c.name, c.ddl) for c in avro_columns({"type": "array", "items": "int"})] == [
        ("value", "array<int>")
    ]


@pytest.mark.parametrize(
    "schema, match",
    [
        (["int", "string"], "union"),
        (
            {"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]},
            "recursive",
        ),
        ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}, "decimal"),
        ("Nope", "unknown Avro type"),
    ],
)
def test_types_without_a_spark_column_are_refused(schema: Any, match: str) -> None:
    with pytest.raises(AvroTypeError, match=match):
        avro_columns(schema)


V1 = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "email", "type": "string", "default": "none"}]}
URL = "http://127.0.0.1:9"  # never asked: the writer schema is in the worker's cache


def framed(schema: dict[str, Any], schema_id: int, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(b"\x00" + struct.pack(">I", schema_id))
    schemaless_writer(buf, parse_schema(schema), record)
    return buf.getvalue()


def decoder(errors: str = "fail") -> AvroValueDecoder:
    value_format._WRITERS[("avro", URL, 1)] = parse_schema(V1)
    vo = ValueOptions(URL, None, "t-value", 2, 2, json.dumps(V2), errors)
    return AvroValueDecoder(vo, arrow_schema(False))


def test_records_are_resolved_from_their_writer_schema_to_the_reader_schema() -> None:
    values = [
        framed(V1, 1, {"name": "ann", "age": 31}),
        framed(V2, 2, {"name": "bo", "age": 7, "email": "b@o"}),
        None,  # a tombstone: a null row
    ]
    out = decoder().transform(source_batch(values), "t", 0)
    assert out.schema.names == [
        "key",
        "name",
        "age",
        "email",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert out.column("name").to_pylist() == ["ann", "bo", None]
    assert out.column("age").type == pa.int32()
    assert out.column("email").to_pylist() == ["none", "b@o", None]
    assert out.column("offset").to_pylist() == [100, 101, 102]


def test_undecodable_values_fail_naming_the_record_or_read_as_null() -> None:
    values = [framed(V2, 2, {"name": "a", "age": 1, "email": "e"}), b"plain text", b"\x00\x00"]
    with pytest.raises(ValueDecodeError, match=r"t-0 at offset 101 .*magic byte"):
        decoder().transform(source_batch(values), "t", 0)
    out = decoder("null").transform(source_batch(values), "t", 0)
    assert out.column("name").to_pylist() == ["a", None, None]


def test_logical_types_decode_to_spark_values() -> None:
    schema = {"type": "record", "name": "L", "fields": RICH["fields"][9:16]}
    rec = {
        "day": dt.date(2024, 2, 29),
        "ms": dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=dt.UTC),
        "us": dt.datetime(2024, 1, 2, 3, 4, 5, 7, tzinfo=dt.UTC),
        "local": dt.datetime(2024, 1, 2, 3, 4, 5),
        "tm": dt.time(1, 2, 3),
        "id": "0b1c4c4e-7e55-4e0e-9f5a-7a1d0b8d9a10",
        "price": Decimal("12.34"),
    }
    vo = ValueOptions(URL, None, "t-value", 1, 7, json.dumps(schema), "fail")
    out = AvroValueDecoder(vo, arrow_schema(False)).transform(
        source_batch([framed(schema, 7, rec)]), "t", 0
    )
    row = {name: out.column(name)[0].as_py() for name in rec}
    assert row == {**rec, "tm": 3723000}  # time-millis is an int, as in spark-avro


def test_options() -> None:
    sub = parse_subscription({"subscribe": "a,b"})
    assert value_options({}, sub) is None
    with pytest.raises(SparkOptionError, match=r"value\.format"):
        value_options({"value.format": "xml"}, sub)
    with pytest.raises(SparkOptionError, match=r"schema\.registry\.url"):
        value_options({"value.format": "avro"}, sub)
    with pytest.raises(SparkOptionError, match=r"value\.subject"):
        value_options({"value.format": "avro", "schema.registry.url": URL}, sub)
    with pytest.raises(SparkOptionError, match=r"value\.decode\.errors"):
        value_options({"value.decode.errors": "ignore"}, sub)
    vo = ValueOptions(URL, None, "t-value", 1, 1, json.dumps(V1), "fail")
    assert value_ddl(vo, False) == (
        "key binary, `name` string, `age` int, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )


def test_headers_stay_last_in_both_schemas() -> None:
    vo = ValueOptions(URL, None, "t-value", 1, 1, json.dumps(V1), "fail")
    assert value_ddl(vo, True).endswith(
        "timestampType int, headers array<struct<key: string, value: binary>>"
    )
    assert value_arrow_schema(arrow_schema(True), vo).names == [
        "key",
        "name",
        "age",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
