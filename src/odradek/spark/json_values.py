"""``value.format=json``: Confluent-framed JSON Schema values <-> typed Spark columns.

A value is magic byte 0, the 4-byte schema id and the UTF-8 JSON document (what
confluent-kafka's JSONSerializer writes). The reader schema's columns (``json_types``)
decide the shape: each document is checked against them (``conform``), so a document of
another shape is one undecodable value (``value.decode.errors``), not a failed batch. The
writer schema is looked up by id (an unknown id is undecodable, as for Avro) but not
validated against: JSON has no schema resolution, a property is matched by name.

The sink (``json_document``) writes a row's dict as the serializer does; null fields are
left out of the document (a row cannot tell "absent" from "null", and ``required`` plus
a typed property refuse a null), timestamps and dates as ISO 8601 strings, decimals as
numbers, and validates the document against the schema with ``jsonschema`` first, as
confluent-kafka's JSONSerializer does by default (``validate=True``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

from odradek.spark.json_types import json_columns
from odradek.spark.value_format import ValueDecoder
from odradek.spark.value_sink import SinkSchema
from odradek.spark.value_types import conform

__all__ = ["JsonValueDecoder", "JsonSinkSchema", "json_document", "json_validator"]


class JsonValueDecoder(ValueDecoder):
    """JSON documents checked against the reader schema's columns."""

    def parse_writer(self, schema_text: str) -> Any:
        return True  # only whether the id is a JSON schema matters (module doc)

    def decode_value(self, value: bytes, schema_id: int) -> Any:
        self.writer(schema_id)
        doc = json.loads(value[5:].decode("utf-8"))
        return conform(doc, self._type)


def _plain(v: Any) -> Any:
    """A row value as JSON data; nulls inside objects are left out (module doc)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return v


def json_validator(schema_text: str) -> Any:
    """A jsonschema validator of the schema's own draft (``$schema``), as Confluent's."""
    from jsonschema.validators import validator_for  # noqa: PLC0415 - the sink only

    schema = json.loads(schema_text)
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def json_document(datum: Any, validator: Any) -> bytes:
    """The JSON bytes of one row's datum, validated (raises jsonschema's ValidationError)."""
    doc = _plain(datum)
    validator.validate(doc)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


class JsonSinkSchema(SinkSchema):
    """One subject's JSON Schema: documents are validated before they are sent."""

    def __init__(self, subject: str, schema_id: int, text: str) -> None:
        super().__init__(subject, schema_id)
        cols, self.record = json_columns(json.loads(text))
        self.fields = {c.name for c in cols} if self.record else set()
        self._validator = json_validator(text)

    def payload(self, datum: Any) -> bytes:
        return json_document(datum, self._validator)

    def why(self, datum: Any, e: Exception) -> str:
        path = "/".join(str(p) for p in getattr(e, "absolute_path", ()))
        msg = getattr(e, "message", None) or str(e)
        return f"{'at /' + path + ': ' if path else ''}{' '.join(str(msg).split())}"
