"""The compiled Avro decoder (``odradek.spark.avro_columnar``) against fastavro.

Every schema of the table is written with fastavro, decoded by both fastavro (what the
per-record path does: the dicts into one Arrow array of the Spark type) and the columnar
decoder, and the two must give the same Arrow types and values; values it must not take
(truncated, out of range, invalid UTF-8) raise ColumnarFallback so that the caller uses
fastavro for them.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from odradek.spark.arrow import arrow_schema
from odradek.spark.avro_columnar import ColumnarAvroDecoder, ColumnarFallback
from odradek.spark.avro_types import avro_columns, strip_python_logical_types
from odradek.spark.avro_values import AvroValueDecoder, ValueOptions

UTC = dt.UTC
L64 = 2**63 - 1


def rec(name: str, *fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


PRIMS = rec(
    "P",
    ("b", "boolean"),
    ("i", "int"),
    ("l", "long"),
    ("f", "float"),
    ("d", "double"),
    ("raw", "bytes"),
    ("s", "string"),
)
PRIM_ROWS = [
    {"b": True, "i": 0, "l": 0, "f": 0.0, "d": 0.0, "raw": b"", "s": ""},
    {
        "b": False,
        "i": -(2**31),
        "l": -L64 - 1,
        "f": 1.5,
        "d": -2.25,
        "raw": b"\x00\xff",
        "s": "žluť",
    },
    {
        "b": True,
        "i": 2**31 - 1,
        "l": L64,
        "f": 3.4e38,
        "d": float("inf"),
        "raw": b"x" * 300,
        "s": "a" * 200,
    },
]
UNIONS = rec(
    "U",
    ("ns", ["null", "string"]),
    ("ln", ["long", "null"]),
    ("il", ["null", "int", "long"]),
    ("fd", ["float", "double"]),
    ("r", ["null", rec("Inner", ("x", "int"), ("y", ["null", "string"]))]),
    ("a", ["null", {"type": "array", "items": "long"}]),
    ("m", ["null", {"type": "map", "values": ["null", "long"]}]),
)
UNION_ROWS = [
    {"ns": None, "ln": None, "il": None, "fd": 1.25, "r": None, "a": None, "m": None},
    {"ns": "x", "ln": -5, "il": 7, "fd": 2.5, "r": {"x": 1, "y": None}, "a": [], "m": {}},
    {
        "ns": "",
        "ln": 6,
        "il": 2**40,
        "fd": 1e300,
        "r": {"x": -1, "y": "why"},
        "a": [1, -2, 3],
        "m": {"k": None, "j": 9},
    },
]
COLOR = {"type": "enum", "name": "Color", "symbols": ["R", "G", "B"]}
NESTED = {
    "type": "record",
    "name": "N",
    "namespace": "ns1",
    "fields": [
        {"name": "c", "type": COLOR},
        {"name": "c2", "type": ["null", "Color"]},  # a reference to the named enum
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "inner", "type": rec("In", ("p", rec("Deep", ("q", "long"), ("t", "string"))))},
        {
            "name": "items",
            "type": {
                "type": "array",
                "items": rec("It", ("k", "string"), ("v", ["null", "double"])),
            },
        },
        {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
        {"name": "byname", "type": {"type": "map", "values": "ns1.In"}},
        {"name": "maybe", "type": ["null", "ns1.In"]},
    ],
}
IN = {"p": {"q": 3, "t": "three"}}
NESTED_ROWS = [
    {
        "c": "R",
        "c2": None,
        "fx": b"abcd",
        "inner": IN,
        "items": [],
        "grid": [],
        "byname": {},
        "maybe": None,
    },
    {
        "c": "B",
        "c2": "G",
        "fx": b"\x00\x01\x02\x03",
        "inner": {"p": {"q": -1, "t": ""}},
        "items": [{"k": "a", "v": None}, {"k": "b", "v": 0.5}],
        "grid": [[1, 2], [], [3]],
        "byname": {"one": IN, "two": {"p": {"q": 2, "t": "2"}}},
        "maybe": IN,
    },
]
LOGICAL = rec(
    "L",
    ("day", {"type": "int", "logicalType": "date"}),
    ("ms", {"type": "long", "logicalType": "timestamp-millis"}),
    ("us", {"type": "long", "logicalType": "timestamp-micros"}),
    ("lms", {"type": "long", "logicalType": "local-timestamp-millis"}),
    ("lus", {"type": "long", "logicalType": "local-timestamp-micros"}),
    ("tm", {"type": "int", "logicalType": "time-millis"}),
    ("tu", {"type": "long", "logicalType": "time-micros"}),
    ("id", {"type": "string", "logicalType": "uuid"}),
    ("nms", ["null", {"type": "long", "logicalType": "timestamp-millis"}]),
)
LOGICAL_ROWS = [
    {
        "day": dt.date(2024, 2, 29),
        "ms": dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
        "us": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "lms": dt.datetime(2024, 1, 2, 3, 4, 5),
        "lus": dt.datetime(1, 1, 1, 0, 0, 0),
        "tm": dt.time(1, 2, 3),
        "tu": dt.time(23, 59, 59, 999999),
        "id": "0b1c4c4e-7e55-4e0e-9f5a-7a1d0b8d9a10",
        "nms": None,
    },
    {
        "day": dt.date(1, 1, 1),
        "ms": dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        "us": dt.datetime(1970, 1, 1, tzinfo=UTC),
        "lms": dt.datetime(1970, 1, 1),
        "lus": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        "tm": dt.time(0),
        "tu": dt.time(0),
        "id": "00000000-0000-0000-0000-000000000000",
        "nms": dt.datetime(2000, 1, 1, tzinfo=UTC),
    },
]
TABLE = [
    ("primitives", PRIMS, PRIM_ROWS),
    ("nullable unions", UNIONS, UNION_ROWS),
    ("nested, enums, fixed, named references", NESTED, NESTED_ROWS),
    ("logical types", LOGICAL, LOGICAL_ROWS),
    ("a string root", "string", ["", "abc"]),
    ("a nullable long root", ["null", "long"], [None, 5, -5]),
    ("an array root", {"type": "array", "items": "int"}, [[], [1, 2]]),
    ("a nullable record root", ["null", rec("R", ("x", "int"))], [None, {"x": 4}]),
    ("an empty record", rec("E"), [{}, {}]),
]


def encode(schema: Any, rows: list[Any]) -> list[bytes]:
    parsed = parse_schema(schema)
    out = []
    for r in rows:
        buf = io.BytesIO()
        schemaless_writer(buf, parsed, r)
        out.append(buf.getvalue())
    return out


def columnar(schema: Any, values: list[bytes]) -> list[pa.Array]:
    data = np.frombuffer(b"".join(values), np.uint8)
    ends = np.cumsum([len(v) for v in values], dtype=np.int64)
    starts = ends - np.array([len(v) for v in values], np.int64)
    return ColumnarAvroDecoder(strip_python_logical_types(schema)).decode(data, starts, ends)


def per_record(schema: Any, values: list[bytes]) -> list[pa.Array]:
    """What the fastavro path builds: the dicts as one array of the Spark type."""
    reader = parse_schema(strip_python_logical_types(schema))
    cols = avro_columns(schema)
    record = isinstance(schema, dict) and schema["type"] == "record"
    typ = pa.struct([pa.field(c.name, c.arrow) for c in cols]) if record else cols[0].arrow
    arr = pa.array([schemaless_reader(io.BytesIO(v), reader, None) for v in values], typ)
    return arr.flatten() if record else [arr]


@pytest.mark.parametrize(("name", "schema", "rows"), TABLE, ids=[t[0] for t in TABLE])
def test_columns_equal_fastavro(name: str, schema: Any, rows: list[Any]) -> None:
    values = encode(schema, rows) * 3  # more than one of each, so offsets are exercised
    got, want = columnar(schema, values), per_record(schema, values)
    assert [a.type for a in got] == [a.type for a in want]
    assert [a.to_pylist() for a in got] == [a.to_pylist() for a in want]
    for a in got:
        a.validate(full=True)


def test_blocks_with_byte_sizes_decode() -> None:
    # Writers may split an array into blocks, a negative count followed by the byte size.
    schema = {"type": "array", "items": "long"}
    # zig-zag: count -2 (3), 2 bytes (4), items 1, 2 (2, 4); count 1 (2), item 3 (6); end
    value = bytes([3, 4, 2, 4, 2, 6, 0])
    assert columnar(schema, [value])[0].to_pylist() == [[1, 2, 3]]
    assert per_record(schema, [value])[0].to_pylist() == [[1, 2, 3]]


BAD = [
    ("truncated", PRIMS, encode(PRIMS, PRIM_ROWS[:1])[0][:-1]),
    ("enum index out of range", COLOR, bytes([6])),
    ("bool byte 2", "boolean", bytes([2])),
    ("invalid UTF-8", "string", bytes([4, 0xC3, 0x28])),
    ("int beyond int32", "int", encode("long", [2**31])[0]),
    ("union branch out of range", ["null", "long"], bytes([4, 2])),
    ("array count beyond the bytes", {"type": "array", "items": "long"}, bytes([100, 2])),
    (
        "timestamp beyond year 9999",
        {"type": "long", "logicalType": "timestamp-millis"},
        encode("long", [2**62])[0],
    ),
]


@pytest.mark.parametrize(("name", "schema", "value"), BAD, ids=[b[0] for b in BAD])
def test_values_it_cannot_take_fall_back(name: str, schema: Any, value: bytes) -> None:
    with pytest.raises(ColumnarFallback):
        columnar(schema, [value])


def test_decimal_schemas_are_not_compiled() -> None:
    dec = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
    with pytest.raises(ColumnarFallback):
        ColumnarAvroDecoder(rec("D", ("x", dec)))


def framed(schema: Any, schema_id: int, row: Any) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + encode(schema, [row])[0]


def test_the_source_decoder_mixes_both_paths_in_row_order() -> None:
    # Values of the reader's id go the compiled way; a tombstone, a bad value and a
    # truncated one go through fastavro, which reads them as null (decode.errors=null).
    good = [framed(UNIONS, 9, r) for r in UNION_ROWS]
    values = [good[0], None, good[1], b"junk", good[2], good[1][:-1]]
    vo = ValueOptions("http://127.0.0.1:1", None, "t-value", 1, 9, json.dumps(UNIONS), "null")
    n = len(values)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([None] * n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(["t"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=arrow_schema(False),
    )
    out = AvroValueDecoder(vo, arrow_schema(False)).transform(batch, "t", 0)
    assert out.column("ns").to_pylist() == [None, None, "x", None, "", None]
    assert out.column("m").to_pylist() == [None, None, [], None, [("k", None), ("j", 9)], None]
    assert out.column("offset").to_pylist() == list(range(n))
