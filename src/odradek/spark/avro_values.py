"""``value.format=avro``: Confluent-framed Avro values -> typed Spark columns (issue 27).

The driver picks the reader schema once per query (the subject's latest version, or
``value.schema.version``) and derives the Spark schema from it (``avro_types``). Each
record names its writer schema (magic byte 0 + 4-byte id); executors fetch writer schemas
by id from the registry once per Python worker and let fastavro resolve every record to
the reader schema, so a compatible new version produced mid-stream is read with the
query's fixed columns (a field the reader has and the writer lacks takes its default).

Decoding yields one dict per record (fastavro has no columnar reader); framing, writer
lookup, the decode-error policy and the Arrow columns are ``value_format``'s, shared with
the Protobuf and JSON Schema formats.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa

from odradek.spark.avro_types import strip_python_logical_types
from odradek.spark.value_format import ValueDecoder, ValueOptions

__all__ = ["AvroValueDecoder"]


class AvroValueDecoder(ValueDecoder):
    """Avro values, each resolved from its writer schema to the reader schema."""

    def __init__(self, vo: ValueOptions, base: pa.Schema) -> None:
        from fastavro import parse_schema, schemaless_reader  # noqa: PLC0415 - executors only

        super().__init__(vo, base)
        self._parse = parse_schema
        self._read = schemaless_reader  # bound once: decoding is per record
        self._reader = parse_schema(strip_python_logical_types(json.loads(vo.schema)))

    def parse_writer(self, schema_text: str) -> Any:
        return self._parse(strip_python_logical_types(json.loads(schema_text)))

    def decode_value(self, value: bytes, schema_id: int) -> Any:
        buf = io.BytesIO(value)
        buf.seek(5)
        if schema_id == self._vo.schema_id:
            return self._read(buf, self._reader, None)
        return self._read(buf, self.writer(schema_id), self._reader)
