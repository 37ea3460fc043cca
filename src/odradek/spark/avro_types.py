"""Avro schema -> Spark column types and the Arrow types Spark expects for them (issue 27).

The mapping is Spark's own (``SchemaConverters.toSqlType`` of spark-avro), so a job moved
from ``from_avro`` sees the same columns: records -> struct, arrays -> array, maps ->
map<string, _>, a union of null and one type -> that type (nullable), ``[int, long]`` ->
long, ``[float, double]`` -> double, enums -> string, fixed/bytes -> binary; logical types
``date`` -> date, ``timestamp-millis/micros`` -> timestamp, ``local-timestamp-*`` ->
timestamp_ntz, ``decimal`` -> decimal(p, s). Other unions (Spark turns them into
``struct<member0, ...>``) are refused: the decoder could not tell the branches apart.

Every Spark column and field is declared nullable: a tombstone, or a record that failed
to decode under ``value.decode.errors=null``, is a null row; ``AvroColumn.nullable``
records what the schema itself allows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from odradek.spark.value_types import ValueColumn, ValueSchema, ValueTypeError, quote

__all__ = [
    "AvroColumn",
    "AvroTypeError",
    "avro_columns",
    "avro_value_schema",
    "strip_python_logical_types",
]

_PRIMITIVES: dict[str, tuple[str, pa.DataType]] = {
    "boolean": ("boolean", pa.bool_()),
    "int": ("int", pa.int32()),
    "long": ("bigint", pa.int64()),
    "float": ("float", pa.float32()),
    "double": ("double", pa.float64()),
    "bytes": ("binary", pa.binary()),
    "string": ("string", pa.string()),
}
_TIMESTAMP = ("timestamp", pa.timestamp("us", tz="UTC"))
_TIMESTAMP_NTZ = ("timestamp_ntz", pa.timestamp("us"))
_LOGICAL: dict[tuple[str, str], tuple[str, pa.DataType]] = {
    ("int", "date"): ("date", pa.date32()),
    ("long", "timestamp-millis"): _TIMESTAMP,
    ("long", "timestamp-micros"): _TIMESTAMP,
    ("long", "local-timestamp-millis"): _TIMESTAMP_NTZ,
    ("long", "local-timestamp-micros"): _TIMESTAMP_NTZ,
}
# fastavro turns these into Python types Spark has no column for (time, UUID); Spark reads
# them as their underlying int/long/string, so the decoder is given schemas without them.
_PLAIN_LOGICAL = ("time-millis", "time-micros", "uuid")


class AvroTypeError(ValueTypeError):
    """An Avro schema the source cannot show as Spark columns."""


AvroColumn = ValueColumn  # the columns of every value format are alike


class _Mapper:
    """Walks one schema; named types are resolved by full name as Avro defines it."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}
        self.active: set[str] = set()  # records being mapped: a recursive type has no Spark type

    def full_name(self, schema: Mapping[str, Any], namespace: str) -> tuple[str, str]:
        name = str(schema.get("name", ""))
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        ns = str(schema.get("namespace", namespace) or "")
        return (f"{ns}.{name}" if ns else name), ns

    def map(self, schema: Any, namespace: str, where: str) -> tuple[str, pa.DataType, bool]:
        if isinstance(schema, list):
            return self.union(schema, namespace, where)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return (*_PRIMITIVES[schema], False)
            if schema == "null":
                raise AvroTypeError(f"{where}: a bare 'null' type has no Spark column")
            ref = self.named.get(schema) or self.named.get(f"{namespace}.{schema}")
            if ref is None:
                raise AvroTypeError(f"{where}: unknown Avro type {schema!r}")
            if isinstance(ref, Mapping) and ref.get("type") == "record":
                name, _ = self.full_name(ref, namespace)
                if name in self.active:
                    raise AvroTypeError(f"{where}: recursive record {name!r} has no Spark type")
            return self.map(ref, namespace, where)
        if not isinstance(schema, Mapping):
            raise AvroTypeError(f"{where}: not an Avro schema: {schema!r}")
        kind = schema.get("type")
        logical = str(schema.get("logicalType", ""))
        if isinstance(kind, str) and kind in _PRIMITIVES:
            if logical == "decimal" and kind == "bytes":
                return self.decimal(schema, where)
            if (kind, logical) in _LOGICAL:
                return (*_LOGICAL[(kind, logical)], False)
            return (*_PRIMITIVES[kind], False)
        if kind in ("record", "error"):
            return self.record(schema, namespace, where)
        if kind == "enum":
            self.register(schema, namespace)
            return "string", pa.string(), False
        if kind == "fixed":
            self.register(schema, namespace)
            if logical == "decimal":
                return self.decimal(schema, where)
            return "binary", pa.binary(), False
        if kind == "array":
            ddl, typ, _ = self.map(schema.get("items"), namespace, f"{where}[]")
            return f"array<{ddl}>", pa.list_(typ), False
        if kind == "map":
            ddl, typ, _ = self.map(schema.get("values"), namespace, f"{where}{{}}")
            return f"map<string, {ddl}>", pa.map_(pa.string(), typ), False
        return self.map(kind, namespace, where)  # {"type": "string"} or a named reference

    def register(self, schema: Mapping[str, Any], namespace: str) -> tuple[str, str]:
        name, ns = self.full_name(schema, namespace)
        self.named[name] = schema
        return name, ns

    def decimal(self, schema: Mapping[str, Any], where: str) -> tuple[str, pa.DataType, bool]:
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if (
            not isinstance(precision, int)
            or not isinstance(scale, int)
            or not (0 < precision <= 38 and 0 <= scale <= precision)
        ):
            raise AvroTypeError(
                f"{where}: decimal({precision}, {scale}) does not fit Spark's decimal(38)"
            )
        return f"decimal({precision},{scale})", pa.decimal128(precision, scale), False

    def record(
        self, schema: Mapping[str, Any], namespace: str, where: str
    ) -> tuple[str, pa.DataType, bool]:
        name, ns = self.register(schema, namespace)
        self.active.add(name)
        cols = self.fields(schema, ns, where)
        self.active.discard(name)
        ddl = ", ".join(f"{quote(c.name)}: {c.ddl}" for c in cols)
        return f"struct<{ddl}>", pa.struct([pa.field(c.name, c.arrow) for c in cols]), False

    def fields(self, schema: Mapping[str, Any], namespace: str, where: str) -> list[AvroColumn]:
        out = []
        for f in schema.get("fields", []):
            fname = str(f["name"])
            ddl, typ, nullable = self.map(f["type"], namespace, f"{where}.{fname}")
            out.append(AvroColumn(fname, ddl, typ, nullable))
        return out

    def union(
        self, branches: list[Any], namespace: str, where: str
    ) -> tuple[str, pa.DataType, bool]:
        others = [b for b in branches if b != "null" and b != {"type": "null"}]
        nullable = len(others) < len(branches)
        if len(others) == 1:
            ddl, typ, _ = self.map(others[0], namespace, where)
            return ddl, typ, nullable
        if sorted(map(str, others)) == ["int", "long"]:
            return "bigint", pa.int64(), nullable
        if sorted(map(str, others)) == ["double", "float"]:
            return "double", pa.float64(), nullable
        raise AvroTypeError(
            f"{where}: the union {branches!r} has no Spark column here (only null with one "
            "type, [int, long] and [float, double] are supported)"
        )


def avro_columns(schema: Any) -> list[AvroColumn]:
    """The value's Spark columns: a record's fields, or one ``value`` column otherwise."""
    mapper = _Mapper()
    if isinstance(schema, Mapping) and schema.get("type") in ("record", "error"):
        name, ns = mapper.register(schema, "")
        mapper.active.add(name)
        return mapper.fields(schema, ns, name)
    ddl, typ, nullable = mapper.map(schema, "", "value")
    return [AvroColumn("value", ddl, typ, nullable)]


def avro_value_schema(text: str) -> ValueSchema:
    """The value's columns for a registered Avro schema's text."""
    schema = json.loads(text)
    record = isinstance(schema, Mapping) and schema.get("type") in ("record", "error")
    return ValueSchema(avro_columns(schema), record)


def strip_python_logical_types(schema: Any) -> Any:
    """The schema without the logical types that fastavro would turn into time/UUID objects."""
    if isinstance(schema, list):
        return [strip_python_logical_types(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: strip_python_logical_types(v) for k, v in schema.items()}
    if out.get("logicalType") in _PLAIN_LOGICAL:
        del out["logicalType"]
    return out
