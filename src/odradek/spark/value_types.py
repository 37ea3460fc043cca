"""What every value format's schema mapping produces (issue 27): the Spark columns of a
value schema, whatever the format (Avro, Protobuf, JSON Schema)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from odradek.spark.offsets import SparkOptionError

__all__ = [
    "ValueColumn",
    "ValueSchema",
    "ValueTypeError",
    "conform",
    "quote",
    "struct_ddl",
    "struct_of",
]


class ValueTypeError(SparkOptionError):
    """A value schema the source or sink cannot show as Spark columns."""


@dataclass(frozen=True)
class ValueColumn:
    """One Spark column (or struct field) for a type of the value schema."""

    name: str
    ddl: str  # Spark's DDL for the type
    arrow: pa.DataType  # the Arrow type Spark checks the batch against
    nullable: bool  # whether the value schema itself allows null (absence) here


@dataclass(frozen=True)
class ValueSchema:
    """The value's columns; ``record``: they are the fields of a record (a struct per
    value), otherwise one column ``value`` holds the whole datum."""

    columns: list[ValueColumn]
    record: bool

    @property
    def arrow(self) -> pa.DataType:
        """The Arrow type of one decoded value (a struct for a record)."""
        return struct_of(self.columns) if self.record else self.columns[0].arrow


def quote(name: str) -> str:
    """A Spark DDL identifier."""
    return "`" + name.replace("`", "``") + "`"


def struct_of(columns: list[ValueColumn]) -> pa.DataType:
    return pa.struct([pa.field(c.name, c.arrow) for c in columns])


def struct_ddl(columns: list[ValueColumn]) -> str:
    return "struct<" + ", ".join(f"{quote(c.name)}: {c.ddl}" for c in columns) + ">"


def conform(value: Any, t: pa.DataType, where: str = "value") -> Any:
    """``value`` checked against the Arrow type ``t`` (maps as lists of pairs), so that a
    value of another shape fails alone, naming the path, instead of failing ``pa.array``
    for the whole batch. Used where nothing typed the value already (JSON; a Protobuf
    writer message other than the reader's)."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        return {f.name: conform(value.get(f.name), f.type, f"{where}.{f.name}") for f in t}
    if pa.types.is_map(t):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a map, got {type(value).__name__}")
        return [
            (conform(k, t.key_type, f"{where}{{}}"), conform(v, t.item_type, f"{where}[{k!r}]"))
            for k, v in value.items()
        ]
    if pa.types.is_list(t):
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected an array, got {type(value).__name__}")
        return [conform(v, t.value_type, f"{where}[]") for v in value]
    ok = _SCALAR_CHECKS.get(t)
    if ok is not None and not ok(value):
        raise ValueError(f"{where}: {value!r} is not a {t}")
    if pa.types.is_floating(t) and isinstance(value, int):
        return float(value)
    if pa.types.is_integer(t) and isinstance(value, float):
        return int(value)  # 3.0 for an integer: JSON does not tell them apart
    return value


def _is_int(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (
        isinstance(v, float) and v.is_integer()
    )


_SCALAR_CHECKS: dict[pa.DataType, Callable[[Any], bool]] = {
    pa.bool_(): lambda v: isinstance(v, bool),
    pa.int32(): lambda v: _is_int(v) and -(1 << 31) <= v < 1 << 31,
    pa.int64(): lambda v: _is_int(v) and -(1 << 63) <= v < 1 << 63,
    pa.float32(): lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    pa.float64(): lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    pa.string(): lambda v: isinstance(v, str),
    pa.binary(): lambda v: isinstance(v, bytes),
}
