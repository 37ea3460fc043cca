"""``value.format=avro`` in the sink: rows -> Confluent-framed Avro values (issue 27).

The value of each row is built the way users of Spark's Kafka sink build it with
``to_avro``: a struct column ``value`` is the record; without a ``value`` column, every
column other than the sink's own (``key``, ``topic``, ``partition``, ``headers``) is a
field of the record. A schema that is not a record takes a plain ``value`` column as the
datum. A null ``value`` struct is a tombstone (null value).

The schema is chosen like Confluent's serializer (subject ``<topic>-value`` or option
``value.subject``): ``value.schema`` (inline JSON) is registered under the subject when
``auto.register.schemas`` is true (the default, as in Confluent's serializer), else it
must already be registered there (looked up); without ``value.schema`` the subject's
``value.schema.version`` (default latest) is used, and a subject with no schema fails.
Each value is magic byte 0, the 4-byte schema id and the fastavro binary encoding.

Every batch is turned into one with a binary ``value`` column before the sink's write
path sees it, so both clients, the replay tags and the transactional guarantee work on
the encoded bytes unchanged.
"""

from __future__ import annotations

import io
import json
import logging
import struct
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from odradek.errors import ErrorCode, KafkaError
from odradek.spark.avro_types import strip_python_logical_types
from odradek.spark.avro_values import registry_json
from odradek.spark.offsets import SparkOptionError, parse_bool

__all__ = [
    "AvroSinkOptions",
    "AvroEncodeError",
    "SINK_COLUMNS",
    "avro_sink_options",
    "AvroValueEncoder",
    "resolve_schema",
    "value_columns",
]

logger = logging.getLogger(__name__)

SINK_COLUMNS = ("key", "topic", "partition", "headers")
_MAGIC = b"\0"


class AvroEncodeError(KafkaError):
    """A row that does not fit the value schema, or a schema the sink cannot use."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.invalid_record, message)


@dataclass(frozen=True)
class AvroSinkOptions:
    """The ``value.*`` options of an Avro sink (picklable: shipped to executors)."""

    registry_url: str
    auth: str | None
    subject: str | None  # value.subject; None: <topic>-value per record
    version: str  # "latest" or a number (used without an inline schema)
    inline_schema: str | None  # value.schema
    auto_register: bool


def avro_sink_options(options: Mapping[str, str]) -> AvroSinkOptions | None:
    fmt = str(options.get("value.format", "binary")).strip().lower()
    if fmt not in ("binary", "avro"):
        raise SparkOptionError(f"option 'value.format' must be binary or avro, got {fmt!r}")
    if fmt == "binary":
        return None
    url = str(options.get("schema.registry.url", "")).strip().split(",")[0].rstrip("/")
    if not url:
        raise SparkOptionError("value.format=avro needs option 'schema.registry.url'")
    version = str(options.get("value.schema.version", "latest"))
    if version != "latest":
        try:
            version = str(int(version))
        except ValueError:
            raise SparkOptionError(
                f"option 'value.schema.version' must be a version number, got {version!r}"
            ) from None
    inline = options.get("value.schema")
    if inline is not None:
        if "value.schema.version" in options:
            raise SparkOptionError(
                "options 'value.schema' and 'value.schema.version' exclude each other"
            )
        try:
            from fastavro import parse_schema  # noqa: PLC0415 - fastavro only for avro

            parse_schema(json.loads(inline))
        except Exception as e:  # fastavro raises several types for a bad schema
            raise SparkOptionError(f"option 'value.schema' is not a valid Avro schema: {e}") from e
    subject = options.get("value.subject")
    return AvroSinkOptions(
        url,
        options.get("schema.registry.basic.auth.user.info"),
        str(subject) if subject else None,
        version,
        str(inline) if inline is not None else None,
        parse_bool(options, "auto.register.schemas", True),
    )


def resolve_schema(opts: AvroSinkOptions, subject: str) -> tuple[int, str]:
    """(schema id, schema JSON) the sink writes ``subject``'s values with."""
    quoted = urllib.parse.quote(subject, safe="")
    where = f"schema registry {opts.registry_url}: subject {subject!r}"
    try:
        if opts.inline_schema is not None:
            body = {"schema": opts.inline_schema, "schemaType": "AVRO"}
            if opts.auto_register:
                status, got = registry_json(
                    f"{opts.registry_url}/subjects/{quoted}/versions", opts.auth, body
                )
                if status != 200:
                    raise AvroEncodeError(f"{where}: cannot register value.schema: {got}")
                return int(got["id"]), opts.inline_schema
            status, got = registry_json(f"{opts.registry_url}/subjects/{quoted}", opts.auth, body)
            if status != 200:
                raise AvroEncodeError(
                    f"{where}: value.schema is not registered under the "
                    f"subject and auto.register.schemas is false: {got}"
                )
            return int(got["id"]), opts.inline_schema
        status, got = registry_json(
            f"{opts.registry_url}/subjects/{quoted}/versions/{opts.version}", opts.auth
        )
    except OSError as e:
        raise AvroEncodeError(f"schema registry {opts.registry_url}: {e}") from e
    if status != 200:
        raise AvroEncodeError(
            f"{where} version {opts.version}: no schema ({got}); give "
            "option 'value.schema' to register one"
        )
    if got.get("schemaType", "AVRO") != "AVRO":
        raise AvroEncodeError(f"{where} holds a {got['schemaType']} schema, not Avro")
    return int(got["id"]), str(got["schema"])


def value_columns(names: list[str]) -> list[str]:
    """The columns that make the value (module doc)."""
    lower = {n.lower(): n for n in names}
    if "value" in lower:
        return [lower["value"]]
    return [n for n in names if n.lower() not in SINK_COLUMNS]


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_map(f.type) for f in t)
    return False


def _py(v: Any, t: pa.DataType) -> Any:
    """Arrow's Python value with maps as dicts (Arrow gives lists of pairs)."""
    if v is None:
        return None
    if pa.types.is_map(t):
        return {k: _py(x, t.item_type) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_py(x, t.value_type) for x in v]
    if pa.types.is_struct(t):
        return {f.name: _py(v[f.name], f.type) for f in t}
    return v


class _Schema:
    """One subject's schema, parsed for fastavro."""

    def __init__(self, subject: str, schema_id: int, text: str) -> None:
        from fastavro import parse_schema  # noqa: PLC0415 - executors only

        raw = json.loads(text)
        self.subject, self.id = subject, schema_id
        self.parsed = parse_schema(strip_python_logical_types(raw))
        self.record = isinstance(raw, dict) and raw.get("type") in ("record", "error")
        self.fields = {f["name"] for f in raw["fields"]} if self.record else set()
        self.prefix = _MAGIC + struct.pack(">I", schema_id)


class AvroValueEncoder:
    """Replaces the value columns of the sink's batches by the encoded ``value``."""

    def __init__(self, opts: AvroSinkOptions, default_topic: str | None) -> None:
        self.opts, self.default_topic = opts, default_topic
        self._schemas: dict[str, _Schema] = {}

    def schema_for(self, subject: str) -> _Schema:
        got = self._schemas.get(subject)
        if got is None:
            got = _Schema(subject, *resolve_schema(self.opts, subject))
            self._schemas[subject] = got
        return got

    def check_columns(self, names: list[str], subject: str) -> None:
        """Fail early (planning) when the columns cannot make the subject's values."""
        s = self.schema_for(subject)
        cols = value_columns(names)
        if not s.record:
            if cols != ["value"] and [c.lower() for c in cols] != ["value"]:
                raise AvroEncodeError(
                    f"subject {subject!r} (schema id {s.id}) is not a record: "
                    "the sink needs a 'value' column holding the datum"
                )
            return
        if len(cols) == 1 and cols[0].lower() == "value":
            return  # a struct column: its fields are checked per row
        extra = sorted(set(cols) - s.fields)
        if extra:
            raise AvroEncodeError(
                f"column(s) {extra} are not fields of subject {subject!r} "
                f"(schema id {s.id}, fields {sorted(s.fields)})"
            )

    def _subject(self, topic: str) -> str:
        return self.opts.subject or f"{topic}-value"

    def encode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        from fastavro import schemaless_writer  # noqa: PLC0415 - executors only

        names = batch.schema.names
        lower = [n.lower() for n in names]
        cols = value_columns(names)
        struct_value = cols == [names[lower.index("value")]] if "value" in lower else False
        topics = (
            None
            if self.default_topic is not None or "topic" not in lower
            else batch.column(lower.index("topic")).to_pylist()
        )
        if struct_value:
            col = batch.column(names.index(cols[0]))
            values = (
                [_py(v, col.type) for v in col.to_pylist()]
                if _has_map(col.type)
                else col.to_pylist()
            )
        else:
            arrays = [batch.column(names.index(c)) for c in cols]
            pylists = [
                [_py(v, a.type) for v in a.to_pylist()] if _has_map(a.type) else a.to_pylist()
                for a in arrays
            ]
            values = [dict(zip(cols, row, strict=True)) for row in zip(*pylists, strict=True)]
        out: list[bytes | None] = []
        for i, datum in enumerate(values):
            topic = self.default_topic if topics is None else topics[i]
            if topic is None:
                raise KafkaError(
                    ErrorCode.invalid_topic_exception,
                    "null topic present in the data. Use the topic option for "
                    "setting a default topic.",
                )
            s = self.schema_for(self._subject(topic))
            if datum is None:
                out.append(None)
                continue
            if s.record and isinstance(datum, dict):
                extra = set(datum) - s.fields
                if extra:
                    raise AvroEncodeError(
                        f"row {i}: field(s) {sorted(extra)} are not in "
                        f"subject {s.subject!r} (schema id {s.id})"
                    )
            buf = io.BytesIO()
            buf.write(s.prefix)
            try:
                schemaless_writer(buf, s.parsed, datum)
            except Exception as e:  # fastavro raises many types; say which row and why
                raise AvroEncodeError(self._why(i, s, datum, e)) from e
            out.append(buf.getvalue())
        keep = [
            (n, batch.column(j))
            for j, n in enumerate(names)
            if n.lower() in SINK_COLUMNS and n.lower() != "value"
        ]
        arrays_out = [a for _, a in keep] + [pa.array(out, pa.binary())]
        return pa.RecordBatch.from_arrays(arrays_out, names=[n for n, _ in keep] + ["value"])

    @staticmethod
    def _why(i: int, s: _Schema, datum: Any, e: Exception) -> str:
        from fastavro.validation import ValidationError, validate  # noqa: PLC0415

        detail = str(e)
        try:
            validate(datum, s.parsed, raise_errors=True)
        except ValidationError as v:  # names the field path
            detail = " ".join(str(v).split())  # one line: its text is a JSON list
        return f"row {i} does not fit subject {s.subject!r} (schema id {s.id}): {detail}"

    def encode_all(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield self.encode(b)
