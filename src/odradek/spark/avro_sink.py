"""``value.format=avro`` in the sink: a row's datum -> Avro binary (issue 27).

Which columns make the value, which schema a subject is written with and the framing
are ``value_sink``'s, shared with the Protobuf and JSON Schema formats; here the datum
is encoded with fastavro's ``schemaless_writer`` (a field of the schema the row lacks
takes its default) and a datum that does not fit is explained by fastavro's validator,
which names the field path.
"""

from __future__ import annotations

import io
import json
from typing import Any

from odradek.spark.avro_types import strip_python_logical_types
from odradek.spark.value_sink import SinkSchema

__all__ = ["AvroSinkSchema"]


class AvroSinkSchema(SinkSchema):
    """One subject's Avro schema, parsed for fastavro."""

    def __init__(self, subject: str, schema_id: int, text: str) -> None:
        from fastavro import parse_schema, schemaless_writer  # noqa: PLC0415 - executors only

        super().__init__(subject, schema_id)
        raw = json.loads(text)
        self._write = schemaless_writer
        self.parsed = parse_schema(strip_python_logical_types(raw))
        self.record = isinstance(raw, dict) and raw.get("type") in ("record", "error")
        self.fields = {f["name"] for f in raw["fields"]} if self.record else set()

    def payload(self, datum: Any) -> bytes:
        buf = io.BytesIO()
        self._write(buf, self.parsed, datum)
        return buf.getvalue()

    def why(self, datum: Any, e: Exception) -> str:
        from fastavro.validation import ValidationError, validate  # noqa: PLC0415

        try:
            validate(datum, self.parsed, raise_errors=True)
        except ValidationError as v:  # names the field path
            return " ".join(str(v).split())  # one line: its text is a JSON list
        return super().why(datum, e)
