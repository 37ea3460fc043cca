"""``value.format=avro``: Confluent-framed Avro values -> typed Spark columns (issue 27).

The driver picks the reader schema once per query (the subject's latest version, or
``value.schema.version``) and derives the Spark schema from it (``avro_types``). Each
record names its writer schema (magic byte 0 + 4-byte id); executors fetch writer schemas
by id from the registry once per Python worker and let fastavro resolve every record to
the reader schema, so a compatible new version produced mid-stream is read with the
query's fixed columns (a field the reader has and the writer lacks takes its default).

Decoding yields one dict per record (fastavro has no columnar reader); the dicts go into
one Arrow StructArray per batch whose children become the columns, so no Row is built.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from odradek.errors import ErrorCode, KafkaError
from odradek.spark.avro_types import (
    AvroColumn,
    AvroTypeError,
    avro_columns,
    strip_python_logical_types,
)
from odradek.spark.offsets import SparkOptionError, Subscription

__all__ = [
    "VALUE_FORMATS",
    "DECODE_ERRORS",
    "ValueOptions",
    "ValueDecodeError",
    "AvroValueDecoder",
    "value_options",
    "avro_ddl",
    "avro_arrow_schema",
    "registry_json",
]

logger = logging.getLogger(__name__)

VALUE_FORMATS = ("binary", "avro")
DECODE_ERRORS = ("fail", "null")
_BASE_BEFORE = "key binary"
_BASE_AFTER = "topic string, partition int, offset long, timestamp timestamp, timestampType int"
_RESERVED = ("key", "topic", "partition", "offset", "timestamp", "timestamptype", "headers")
_MAGIC = 0
_TIMEOUT_S = 30.0


class ValueDecodeError(KafkaError):
    """A record whose value cannot be decoded (``value.decode.errors=fail``)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.corrupt_message, message)


@dataclass(frozen=True)
class ValueOptions:
    """The resolved value format (picklable: shipped to executors)."""

    registry_url: str
    auth: str | None  # "user:password" (schema.registry.basic.auth.user.info)
    subject: str
    version: int
    schema_id: int
    schema: str  # the reader schema's JSON text
    decode_errors: str

    def columns(self) -> list[AvroColumn]:
        return avro_columns(json.loads(self.schema))


def registry_json(url: str, auth: str | None, body: Any = None) -> tuple[int, Any]:
    """(HTTP status, JSON body) of a registry call: GET, or POST of ``body`` when given."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, headers={"Accept": "application/vnd.schemaregistry.v1+json"}
    )
    if data is not None:
        req.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, body.decode(errors="replace")


def _subject(options: Mapping[str, str], subscription: Subscription) -> str:
    subject = options.get("value.subject")
    if subject:
        return str(subject)
    topics = (
        subscription.topics
        if subscription.kind == "subscribe"
        else tuple(sorted({t for t, _ in subscription.partitions}))
    )
    if subscription.kind == "subscribePattern" or len(topics) != 1:
        raise SparkOptionError(
            "value.format=avro reads one subject: with more than one topic (or a pattern) "
            "option 'value.subject' must name it"
        )
    return f"{topics[0]}-value"  # Confluent's TopicNameStrategy


def value_options(options: Mapping[str, str], subscription: Subscription) -> ValueOptions | None:
    """Parse the ``value.*`` options; for avro, fetch the reader schema from the registry."""
    fmt = str(options.get("value.format", "binary")).strip().lower()
    if fmt not in VALUE_FORMATS:
        raise SparkOptionError(
            f"option 'value.format' must be one of {', '.join(VALUE_FORMATS)}, got {fmt!r}"
        )
    errors = str(options.get("value.decode.errors", "fail")).strip().lower()
    if errors not in DECODE_ERRORS:
        raise SparkOptionError(
            f"option 'value.decode.errors' must be one of {', '.join(DECODE_ERRORS)}, got {errors!r}"
        )
    if fmt == "binary":
        return None
    url = str(options.get("schema.registry.url", "")).strip().split(",")[0].rstrip("/")
    if not url:
        raise SparkOptionError("value.format=avro needs option 'schema.registry.url'")
    auth = options.get("schema.registry.basic.auth.user.info")
    subject = _subject(options, subscription)
    raw_version = options.get("value.schema.version", "latest")
    try:
        version = "latest" if raw_version == "latest" else str(int(raw_version))
    except ValueError:
        raise SparkOptionError(
            f"option 'value.schema.version' must be a version number, got {raw_version!r}"
        ) from None
    path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}"
    try:
        status, body = registry_json(url + path, auth)
    except OSError as e:
        raise SparkOptionError(f"schema registry {url}: {e}") from e
    if status != 200:
        raise SparkOptionError(
            f"schema registry {url}: subject {subject!r} version {version}: {body}"
        )
    if body.get("schemaType", "AVRO") != "AVRO":
        raise SparkOptionError(f"subject {subject!r} holds a {body['schemaType']} schema, not Avro")
    if body.get("references"):
        raise AvroTypeError(f"subject {subject!r}: schemas with references are not supported yet")
    vo = ValueOptions(
        url, auth, subject, int(body["version"]), int(body["id"]), body["schema"], errors
    )
    names = [c.name for c in vo.columns()]
    clash = [n for n in names if n.lower() in _RESERVED]
    if clash:
        raise AvroTypeError(
            f"subject {subject!r}: field(s) {clash} would hide the source's own columns"
        )
    return vo


def avro_ddl(vo: ValueOptions, include_headers: bool) -> str:
    cols = ", ".join(f"`{c.name.replace('`', '``')}` {c.ddl}" for c in vo.columns())
    headers = ", headers array<struct<key: string, value: binary>>" if include_headers else ""
    return f"{_BASE_BEFORE}, {cols}, {_BASE_AFTER}{headers}"


def avro_arrow_schema(base: pa.Schema, vo: ValueOptions) -> pa.Schema:
    """The source's Arrow schema with ``value`` replaced by the Avro columns."""
    fields = [pa.field(c.name, c.arrow) for c in vo.columns()]
    i = base.get_field_index("value")
    return pa.schema([*base][:i] + fields + [*base][i + 1 :])


# Writer schemas by (registry, id): ids are immutable, so a worker keeps them for good.
_WRITERS: dict[tuple[str, int], Any] = {}


class AvroValueDecoder:
    """Turns the ``value`` column of the source's batches into the Avro columns."""

    def __init__(self, vo: ValueOptions, base: pa.Schema) -> None:
        from fastavro import parse_schema, schemaless_reader  # noqa: PLC0415 - executors only

        self._vo = vo
        self._parse = parse_schema
        self._read = schemaless_reader  # bound once: decoding is per record
        schema = json.loads(vo.schema)
        self._reader = parse_schema(strip_python_logical_types(schema))
        cols = vo.columns()
        self._record = isinstance(schema, dict) and schema.get("type") in ("record", "error")
        self._type = (
            pa.struct([pa.field(c.name, c.arrow) for c in cols]) if self._record else cols[0].arrow
        )
        self._schema = avro_arrow_schema(base, vo)
        self._value_index = base.get_field_index("value")
        self._unknown: dict[int, str] = {}  # ids this task could not resolve, and why
        self._columnar = _columnar_decoder(schema, self._type, self._record)

    def _writer(self, schema_id: int) -> Any:
        """The parsed writer schema, or None when it is the reader's own."""
        if schema_id == self._vo.schema_id:
            return None
        key = (self._vo.registry_url, schema_id)
        got = _WRITERS.get(key)
        if got is not None:
            return got
        if schema_id in self._unknown:
            raise LookupError(self._unknown[schema_id])
        try:
            status, body = registry_json(
                f"{self._vo.registry_url}/schemas/ids/{schema_id}", self._vo.auth
            )
        except OSError as e:  # the registry is down: retrying per record would not help
            raise ValueDecodeError(f"schema registry {self._vo.registry_url}: {e}") from e
        if status != 200 or body.get("schemaType", "AVRO") != "AVRO":
            self._unknown[schema_id] = f"unknown schema id {schema_id} ({body})"
            raise LookupError(self._unknown[schema_id])
        got = self._parse(strip_python_logical_types(json.loads(body["schema"])))
        _WRITERS[key] = got
        return got

    def _decode(self, value: bytes) -> Any:
        if len(value) < 5 or value[0] != _MAGIC:
            raise ValueError("no Confluent framing (magic byte 0 and a schema id)")
        (schema_id,) = struct.unpack_from(">I", value, 1)
        writer = self._writer(schema_id)
        buf = io.BytesIO(value)
        buf.seek(5)
        if writer is None:
            return self._read(buf, self._reader, None)
        return self._read(buf, writer, self._reader)

    def transform(self, batch: pa.RecordBatch, topic: str, partition: int) -> pa.RecordBatch:
        values = batch.column(self._value_index)
        fast, slow = self._split(values)
        cols: list[pa.Array] = []
        if len(fast):
            from odradek.spark.avro_columnar import ColumnarFallback  # noqa: PLC0415

            assert self._columnar is not None
            data, starts, ends = _value_bytes(values)
            try:
                cols = self._columnar.decode(data, starts[fast] + 5, ends[fast])
            except ColumnarFallback as e:  # fastavro decodes them, and names the bad one
                logger.debug(
                    "odradek source: per-record Avro decoding of %d values: %s", len(fast), e
                )
                fast, slow = fast[:0], np.arange(len(values))
        if len(slow):
            decoded = self._decode_rows(batch, values, slow, topic, partition)
            arr = pa.array(decoded, type=self._type)
            slow_cols = arr.flatten() if self._record else [arr]
            if not len(fast):
                cols = slow_cols
            else:  # both kinds: back into the batch's row order
                order = pa.array(np.argsort(np.concatenate([fast, slow]), kind="stable"))
                cols = [
                    pa.concat_arrays([f, s]).take(order)
                    for f, s in zip(cols, slow_cols, strict=True)
                ]
        arrays = list(batch.columns)
        arrays[self._value_index : self._value_index + 1] = cols
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _split(self, values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Rows for the compiled decoder (framed with the reader's own schema id) and the
        rest (tombstones, other writer schemas, unframed values): fastavro's, one by one."""
        n = len(values)
        if self._columnar is None or n == 0:
            return np.zeros(0, np.int64), np.arange(n)
        data, starts, ends = _value_bytes(values)
        ok = (ends - starts) >= 5
        if values.null_count:
            ok &= values.is_valid().to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(ok)
        head = starts[rows]
        sid = (
            (data[head + 1].astype(np.int64) << 24)
            | (data[head + 2].astype(np.int64) << 16)
            | (data[head + 3].astype(np.int64) << 8)
            | data[head + 4].astype(np.int64)
        )
        ok[rows] = (data[head] == _MAGIC) & (sid == self._vo.schema_id)
        return np.flatnonzero(ok), np.flatnonzero(~ok)

    def _decode_rows(
        self, batch: pa.RecordBatch, values: pa.Array, rows: np.ndarray, topic: str, partition: int
    ) -> list[Any]:
        """fastavro, one record at a time: tombstones, writer schemas to resolve, bad values."""
        decoded: list[Any] = []
        fail = self._vo.decode_errors == "fail"
        for i, v in zip(rows.tolist(), values.take(pa.array(rows)).to_pylist(), strict=True):
            if v is None:  # a tombstone: a null row
                decoded.append(None)
                continue
            try:
                decoded.append(self._decode(v))
            except ValueDecodeError:
                raise
            except Exception as e:  # fastavro raises many types on bad bytes
                offset = batch.column(batch.schema.get_field_index("offset"))[i].as_py()
                msg = (
                    f"cannot decode the Avro value of {topic}-{partition} at offset {offset} "
                    f"(subject {self._vo.subject!r}): {e}"
                )
                if fail:
                    raise ValueDecodeError(
                        msg + " (value.decode.errors=null reads it as null)"
                    ) from e
                logger.debug("odradek source: %s", msg)
                decoded.append(None)
        return decoded


def _value_bytes(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, starts, ends) of a binary array, over its own buffers (no copy)."""
    n = len(values)
    bufs = values.buffers()
    offs = np.frombuffer(bufs[1], np.int32, count=n + 1, offset=values.offset * 4)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    bounds = offs.astype(np.int64)
    return data, bounds[:-1], bounds[1:]


def _columnar_decoder(schema: Any, typ: pa.DataType, record: bool) -> Any:
    """The compiled decoder for values of the reader's own schema (``avro_columnar``), or
    None when the schema has parts it does not decode (then fastavro decodes every value).
    Its columns' types are checked once, on no values, against the Spark schema's."""
    from odradek.spark.avro_columnar import (  # noqa: PLC0415 - numba: executors only
        ColumnarAvroDecoder,
        ColumnarFallback,
    )

    try:
        dec = ColumnarAvroDecoder(strip_python_logical_types(schema))
        empty = np.zeros(0, np.int64)
        got = [a.type for a in dec.decode(np.zeros(0, np.uint8), empty, empty)]
    except ColumnarFallback as e:
        logger.info("odradek source: Avro values decoded per record (fastavro): %s", e)
        return None
    want = [f.type for f in typ] if record else [typ]
    if got != want:  # a mapping this module and avro_types disagree on: stay correct
        logger.warning(
            "odradek source: compiled Avro decoder types %s != %s; using fastavro", got, want
        )
        return None
    return dec
