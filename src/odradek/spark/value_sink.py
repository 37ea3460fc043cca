"""``value.format`` in the sink: rows -> Confluent-framed values (issue 27).

What the three formats share: the options, which schema a subject's values are written
with, which columns make the value, and the batch loop; ``avro_sink``,
``protobuf_values`` and ``json_values`` only turn one row's datum into the format's bytes.

The value of each row is built the way users of Spark's Kafka sink build it with
``to_avro``/``to_protobuf``/``to_json``: a struct column ``value`` is the record; without a
``value`` column, every column other than the sink's own (``key``, ``topic``,
``partition``, ``headers``) is a field of the record. A schema that is not a record
(Avro or JSON Schema) takes a plain ``value`` column as the datum. A null ``value``
struct is a tombstone (null value).

The schema is chosen like Confluent's serializers (subject ``<topic>-value`` or option
``value.subject``): ``value.schema.id`` names it (``use.schema.id``); else ``value.schema``
(inline) is registered under the subject when ``auto.register.schemas`` is true (the
default, as in Confluent's serializers), or must already be registered there (looked up);
else the subject's ``value.schema.version`` (default latest) is used, and a subject with
no schema fails. Each value is magic byte 0, the 4-byte schema id and the format's
bytes (for Protobuf with the message indexes between, as the ProtobufSerializer writes).

Every batch is turned into one with a binary ``value`` column before the sink's write
path sees it, so both clients, the replay tags and the transactional guarantee work on
the encoded bytes unchanged.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from odradek.errors import ErrorCode, KafkaError
from odradek.spark.offsets import SparkOptionError, parse_bool
from odradek.spark.value_format import (
    SCHEMA_TYPES,
    check_schema_type,
    frame,
    parse_format,
    parse_version,
    registry_json,
    registry_url,
)
from odradek.spark.value_types import ValueTypeError

__all__ = [
    "SINK_COLUMNS",
    "SinkValueOptions",
    "ValueEncodeError",
    "SinkSchema",
    "ValueEncoder",
    "sink_value_options",
    "resolve_schema",
    "value_columns",
]

logger = logging.getLogger(__name__)

SINK_COLUMNS = ("key", "topic", "partition", "headers")


class ValueEncodeError(KafkaError):
    """A row that does not fit the value schema, or a schema the sink cannot use."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.invalid_record, message)


@dataclass(frozen=True)
class SinkValueOptions:
    """The ``value.*`` options of the sink (picklable: shipped to executors)."""

    registry_url: str
    auth: str | None
    subject: str | None  # value.subject; None: <topic>-value per record
    version: str  # "latest" or a number (used without an inline schema or an id)
    inline_schema: str | None  # value.schema
    auto_register: bool
    fmt: str = "avro"
    schema_id: int | None = None  # value.schema.id
    message: str = ""  # protobuf: value.protobuf.message (default: the first message)


def _check_inline(fmt: str, text: str, message: str) -> None:
    """A bad ``value.schema`` fails the query when it is defined."""
    try:
        if fmt == "avro":
            from fastavro import parse_schema  # noqa: PLC0415 - fastavro only for avro

            parse_schema(json.loads(text))
        elif fmt == "json":
            from odradek.spark.json_values import json_validator  # noqa: PLC0415

            json_validator(text)
        else:
            from odradek.spark.protobuf_types import (  # noqa: PLC0415
                protobuf_file,
                protobuf_message,
            )

            protobuf_message(protobuf_file(text), message)
    except Exception as e:  # each library raises several types for a bad schema
        title = {"avro": "Avro", "json": "JSON", "protobuf": "Protobuf"}[fmt]
        raise SparkOptionError(f"option 'value.schema' is not a valid {title} schema: {e}") from e


def sink_value_options(options: Mapping[str, str]) -> SinkValueOptions | None:
    fmt = parse_format(options)
    if fmt == "binary":
        return None
    url = registry_url(options, fmt)
    version = parse_version(options)
    message = str(options.get("value.protobuf.message", ""))
    inline = options.get("value.schema")
    raw_id = options.get("value.schema.id")
    schema_id = None
    if raw_id is not None:
        try:
            schema_id = int(raw_id)
        except ValueError:
            raise SparkOptionError(
                f"option 'value.schema.id' must be a schema id, got {raw_id!r}"
            ) from None
    given = [k for k in ("value.schema", "value.schema.id", "value.schema.version") if k in options]
    if len(given) > 1:
        raise SparkOptionError(f"options {given} exclude each other")
    if inline is not None:
        _check_inline(fmt, str(inline), message)
    subject = options.get("value.subject")
    return SinkValueOptions(
        url,
        options.get("schema.registry.basic.auth.user.info"),
        str(subject) if subject else None,
        version,
        str(inline) if inline is not None else None,
        parse_bool(options, "auto.register.schemas", True),
        fmt,
        schema_id,
        message,
    )


def _registry_schema(opts: SinkValueOptions, subject: str, where: str) -> tuple[int, str]:
    quoted = urllib.parse.quote(subject, safe="")
    if opts.schema_id is not None:
        status, got = registry_json(f"{opts.registry_url}/schemas/ids/{opts.schema_id}", opts.auth)
        what = f"schema registry {opts.registry_url}: schema id {opts.schema_id}"
        if status != 200:
            raise ValueEncodeError(f"{what}: {got}")
        return opts.schema_id, _checked(opts, got, what)
    if opts.inline_schema is not None:
        body = {"schema": opts.inline_schema, "schemaType": SCHEMA_TYPES[opts.fmt]}
        if opts.auto_register:
            status, got = registry_json(
                f"{opts.registry_url}/subjects/{quoted}/versions", opts.auth, body
            )
            if status != 200:
                raise ValueEncodeError(f"{where}: cannot register value.schema: {got}")
            return int(got["id"]), opts.inline_schema
        status, got = registry_json(f"{opts.registry_url}/subjects/{quoted}", opts.auth, body)
        if status != 200:
            raise ValueEncodeError(
                f"{where}: value.schema is not registered under the "
                f"subject and auto.register.schemas is false: {got}"
            )
        return int(got["id"]), opts.inline_schema
    status, got = registry_json(
        f"{opts.registry_url}/subjects/{quoted}/versions/{opts.version}", opts.auth
    )
    if status != 200:
        raise ValueEncodeError(
            f"{where} version {opts.version}: no schema ({got}); give "
            "option 'value.schema' to register one"
        )
    return int(got["id"]), _checked(opts, got, where)


def _checked(opts: SinkValueOptions, got: Any, where: str) -> str:
    try:
        check_schema_type(opts.fmt, got, where)
    except ValueTypeError as e:
        raise ValueEncodeError(str(e)) from e
    return str(got["schema"])


def resolve_schema(opts: SinkValueOptions, subject: str) -> tuple[int, str]:
    """(schema id, schema text) the sink writes ``subject``'s values with."""
    where = f"schema registry {opts.registry_url}: subject {subject!r}"
    try:
        return _registry_schema(opts, subject, where)
    except OSError as e:
        raise ValueEncodeError(f"schema registry {opts.registry_url}: {e}") from e


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


def _pylist(a: pa.Array) -> list[Any]:
    return [_py(v, a.type) for v in a.to_pylist()] if _has_map(a.type) else a.to_pylist()


class SinkSchema:
    """One subject's schema, ready to encode: ``record`` and ``fields`` say which
    columns may make the value; ``payload`` is the format's bytes after the schema id."""

    record: bool
    fields: set[str]

    def __init__(self, subject: str, schema_id: int) -> None:
        self.subject, self.id = subject, schema_id
        self.prefix = frame(schema_id)

    def payload(self, datum: Any) -> bytes:
        raise NotImplementedError

    def why(self, datum: Any, e: Exception) -> str:
        """Why ``datum`` does not fit (one line)."""
        return " ".join(str(e).split())


def _sink_schema(opts: SinkValueOptions, subject: str, schema_id: int, text: str) -> SinkSchema:
    if opts.fmt == "avro":
        from odradek.spark.avro_sink import AvroSinkSchema  # noqa: PLC0415

        return AvroSinkSchema(subject, schema_id, text)
    if opts.fmt == "protobuf":
        from odradek.spark.protobuf_values import ProtobufSinkSchema  # noqa: PLC0415

        return ProtobufSinkSchema(subject, schema_id, text, opts.message)
    from odradek.spark.json_values import JsonSinkSchema  # noqa: PLC0415

    return JsonSinkSchema(subject, schema_id, text)


class ValueEncoder:
    """Replaces the value columns of the sink's batches by the encoded ``value``."""

    def __init__(self, opts: SinkValueOptions, default_topic: str | None) -> None:
        self.opts, self.default_topic = opts, default_topic
        self._schemas: dict[str, SinkSchema] = {}

    def schema_for(self, subject: str) -> SinkSchema:
        got = self._schemas.get(subject)
        if got is None:
            try:
                got = _sink_schema(self.opts, subject, *resolve_schema(self.opts, subject))
            except ValueTypeError as e:  # a registered schema without Spark columns
                raise ValueEncodeError(f"subject {subject!r}: {e}") from e
            self._schemas[subject] = got
        return got

    def check_columns(self, names: list[str], subject: str) -> None:
        """Fail early (planning) when the columns cannot make the subject's values."""
        s = self.schema_for(subject)
        cols = value_columns(names)
        if not s.record:
            if [c.lower() for c in cols] != ["value"]:
                raise ValueEncodeError(
                    f"subject {subject!r} (schema id {s.id}) is not a record: "
                    "the sink needs a 'value' column holding the datum"
                )
            return
        if len(cols) == 1 and cols[0].lower() == "value":
            return  # a struct column: its fields are checked per row
        extra = sorted(set(cols) - s.fields)
        if extra:
            raise ValueEncodeError(
                f"column(s) {extra} are not fields of subject {subject!r} "
                f"(schema id {s.id}, fields {sorted(s.fields)})"
            )

    def _subject(self, topic: str) -> str:
        return self.opts.subject or f"{topic}-value"

    def encode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
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
            values = _pylist(batch.column(names.index(cols[0])))
        else:
            pylists = [_pylist(batch.column(names.index(c))) for c in cols]
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
                    raise ValueEncodeError(
                        f"row {i}: field(s) {sorted(extra)} are not in "
                        f"subject {s.subject!r} (schema id {s.id})"
                    )
            try:
                out.append(s.prefix + s.payload(datum))
            except Exception as e:  # the libraries raise many types; say which row and why
                raise ValueEncodeError(
                    f"row {i} does not fit subject {s.subject!r} (schema id {s.id}): "
                    f"{s.why(datum, e)}"
                ) from e
        keep = [
            (n, batch.column(j))
            for j, n in enumerate(names)
            if n.lower() in SINK_COLUMNS and n.lower() != "value"
        ]
        arrays_out = [a for _, a in keep] + [pa.array(out, pa.binary())]
        return pa.RecordBatch.from_arrays(arrays_out, names=[n for n, _ in keep] + ["value"])

    def encode_all(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield self.encode(b)
