"""JSON Schema -> Spark columns (issue 27, ``value.format=json``).

JSON Schema describes documents, not a record layout, so only the constructs that have
one Spark type are mapped; the rest is refused naming the path (``value.a.b[]``), rather
than guessed. Mapping (Kafka Connect's JsonSchemaConverter takes the same types):

| JSON Schema | Spark |
|---|---|
| ``object`` with ``properties`` | struct of the properties (in schema order) |
| ``object`` with only an ``additionalProperties`` schema | map<string, _> |
| ``array`` with an ``items`` schema | array<_> |
| ``string`` (any ``format``), ``enum``/``const`` of strings | string |
| ``integer`` / ``number`` / ``[integer, number]`` | bigint / double / double |
| ``boolean`` | boolean |
| ``[T, "null"]``, ``anyOf``/``oneOf`` of one schema and ``{"type": "null"}`` | T |
| local ``$ref`` (``#/definitions/...``, ``#/$defs/...``) | the referenced schema |

Refused: ``allOf``, ``not``, ``if``, ``patternProperties``, ``prefixItems``, tuple
``items``, unions of several types, a recursive ``$ref``, a schema without a type.
``required`` is recorded in ``ValueColumn.nullable``; as for every format, Spark's
columns are all nullable (a tombstone is a null row).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from odradek.spark.value_types import ValueColumn, ValueSchema, ValueTypeError, struct_ddl

__all__ = ["json_value_schema", "json_columns"]

_SIMPLE: dict[str, tuple[str, pa.DataType]] = {
    "string": ("string", pa.string()),
    "integer": ("bigint", pa.int64()),
    "number": ("double", pa.float64()),
    "boolean": ("boolean", pa.bool_()),
}
_REFUSED = (
    "allOf",
    "not",
    "if",
    "patternProperties",
    "prefixItems",
    "dependentSchemas",
    "unevaluatedProperties",
)
_MAX_DEPTH = 64


class _Mapper:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.active: list[str] = []  # $refs being mapped: a recursive one has no Spark type

    def deref(self, ref: str, where: str) -> Any:
        if not ref.startswith("#"):
            raise ValueTypeError(f"{where}: $ref {ref!r} is not local (references unsupported)")
        node = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise ValueTypeError(f"{where}: $ref {ref!r} names nothing in the schema")
            node = node[part]
        return node

    def map(self, s: Any, where: str) -> tuple[str, pa.DataType, bool]:
        """(ddl, arrow type, nullable) of schema ``s`` at path ``where``."""
        if len(self.active) > _MAX_DEPTH or where.count(".") > _MAX_DEPTH:
            raise ValueTypeError(f"{where}: the schema nests too deep")
        if not isinstance(s, Mapping):
            raise ValueTypeError(f"{where}: {s!r} has no single type (no Spark column)")
        if "$ref" in s:
            ref = str(s["$ref"])
            if ref in self.active:
                raise ValueTypeError(f"{where}: recursive $ref {ref!r} has no Spark type")
            self.active.append(ref)
            try:
                return self.map(self.deref(ref, where), where)
            finally:
                self.active.pop()
        for key in _REFUSED:
            if key in s:
                raise ValueTypeError(f"{where}: '{key}' has no Spark column")
        for key in ("anyOf", "oneOf"):
            if key in s:
                return self.union(s[key], key, where)
        types = s.get("type")
        if types is None:
            types = self.implied(s, where)
        names = [types] if isinstance(types, str) else list(types)
        nullable = "null" in names
        rest = sorted({str(n) for n in names} - {"null"})
        if rest == ["integer", "number"]:
            rest = ["number"]
        if len(rest) != 1:
            raise ValueTypeError(f"{where}: type {types!r} is not one Spark type")
        kind = rest[0]
        if kind in _SIMPLE:
            return (*_SIMPLE[kind], nullable)
        if kind == "array":
            items = s.get("items")
            if not isinstance(items, Mapping):
                raise ValueTypeError(f"{where}: an array needs one 'items' schema")
            ddl, typ, _ = self.map(items, f"{where}[]")
            return f"array<{ddl}>", pa.list_(typ), nullable
        if kind == "object":
            return (*self.object(s, where), nullable)
        raise ValueTypeError(f"{where}: type {kind!r} has no Spark column")

    def implied(self, s: Mapping[str, Any], where: str) -> Any:
        """The type of a schema that leaves ``type`` out but says it otherwise."""
        if "properties" in s or "additionalProperties" in s:
            return "object"
        if "items" in s:
            return "array"
        values = s.get("enum", [s["const"]] if "const" in s else None)
        if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
            return "string"
        raise ValueTypeError(f"{where}: the schema gives no type (no Spark column)")

    def union(self, branches: Any, key: str, where: str) -> tuple[str, pa.DataType, bool]:
        if not isinstance(branches, list):
            raise ValueTypeError(f"{where}: '{key}' must be a list")
        others = [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]
        if len(others) != 1:
            raise ValueTypeError(
                f"{where}: '{key}' of {len(others)} schemas has no single Spark type "
                "(only one schema, with or without {\"type\": \"null\"})"
            )
        ddl, typ, nullable = self.map(others[0], where)
        return ddl, typ, nullable or len(others) < len(branches)

    def object(self, s: Mapping[str, Any], where: str) -> tuple[str, pa.DataType]:
        props = s.get("properties")
        if props:
            cols = self.fields(s, where)
            return struct_ddl(cols), pa.struct([pa.field(c.name, c.arrow) for c in cols])
        extra = s.get("additionalProperties")
        if isinstance(extra, Mapping):
            ddl, typ, _ = self.map(extra, f"{where}{{}}")
            return f"map<string, {ddl}>", pa.map_(pa.string(), typ)
        raise ValueTypeError(
            f"{where}: an object needs 'properties' (a struct) or an "
            "'additionalProperties' schema (a map)"
        )

    def fields(self, s: Mapping[str, Any], where: str) -> list[ValueColumn]:
        props = s.get("properties")
        if not isinstance(props, Mapping):
            raise ValueTypeError(f"{where}: 'properties' must be an object")
        required = set(s.get("required") or ())
        out = []
        for name, sub in props.items():
            ddl, typ, nullable = self.map(sub, f"{where}.{name}")
            out.append(ValueColumn(str(name), ddl, typ, nullable or name not in required))
        return out


def json_columns(schema: Any) -> tuple[list[ValueColumn], bool]:
    """(columns, record): an object's properties, or one ``value`` column otherwise."""
    m = _Mapper(schema)
    ddl, typ, nullable = m.map(schema, "value")  # every check, whatever the shape
    top = schema
    for _ in range(_MAX_DEPTH):  # map() refused a recursive chain already
        if not (isinstance(top, Mapping) and "$ref" in top):
            break
        top = m.deref(str(top["$ref"]), "value")
    if pa.types.is_struct(typ) and isinstance(top, Mapping) and top.get("properties"):
        return m.fields(top, "value"), True
    return [ValueColumn("value", ddl, typ, nullable)], False


def json_value_schema(text: str) -> ValueSchema:
    """The value's columns for a registered JSON Schema's text."""
    try:
        schema = json.loads(text)
    except ValueError as e:
        raise ValueTypeError(f"not a JSON Schema: {e}") from e
    cols, record = json_columns(schema)
    return ValueSchema(cols, record)
