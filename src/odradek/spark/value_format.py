"""``value.format``: what the Avro, Protobuf and JSON Schema values share (issue 27).

Confluent's serializers frame every value alike (magic byte 0, the 4-byte schema id,
then the format's bytes), so the source treats the three formats alike but for the
decoding itself: the options (``value_options``), the reader schema fetched once per
query from the registry, the Spark columns of the reader schema, writer schemas fetched
by id once per Python worker, and the policy for values that do not decode
(``value.decode.errors``) live here; ``avro_values``, ``protobuf_values`` and
``json_values`` only turn one value's bytes into the Python value of the reader's Arrow
type. Each batch's decoded values become one Arrow array of the reader type whose
children replace the ``value`` column, so no Spark Row is built.
"""

from __future__ import annotations

import base64
import json
import logging
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from odradek.errors import ErrorCode, KafkaError
from odradek.spark.offsets import SparkOptionError, Subscription
from odradek.spark.value_types import ValueSchema, ValueTypeError, quote

__all__ = [
    "VALUE_FORMATS",
    "DECODE_ERRORS",
    "SCHEMA_TYPES",
    "ValueOptions",
    "ValueDecodeError",
    "ValueDecoder",
    "value_options",
    "value_schema",
    "value_ddl",
    "value_arrow_schema",
    "make_decoder",
    "registry_json",
    "registry_url",
    "frame",
    "unframe",
]

logger = logging.getLogger(__name__)

VALUE_FORMATS = ("binary", "avro", "protobuf", "json")
DECODE_ERRORS = ("fail", "null")
# value.format -> the registry's schemaType (absent in the registry's answers for AVRO)
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json": "JSON"}
_TITLES = {"avro": "Avro", "protobuf": "Protobuf", "json": "JSON"}
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
    schema: str  # the reader schema's text, as the registry holds it
    decode_errors: str
    fmt: str = "avro"  # avro, protobuf or json
    message: str = ""  # protobuf: the reader message's full name (value.protobuf.message)

    def value_schema(self) -> ValueSchema:
        return value_schema(self.fmt, self.schema, self.message)


def value_schema(fmt: str, text: str, message: str = "") -> ValueSchema:
    """The Spark columns of a registered schema's text in format ``fmt``."""
    if fmt == "avro":
        from odradek.spark.avro_types import avro_value_schema  # noqa: PLC0415

        return avro_value_schema(text)
    if fmt == "protobuf":
        from odradek.spark.protobuf_types import protobuf_value_schema  # noqa: PLC0415

        return protobuf_value_schema(text, message)
    from odradek.spark.json_types import json_value_schema  # noqa: PLC0415

    return json_value_schema(text)


def frame(schema_id: int) -> bytes:
    """Confluent's prefix of every value: magic byte 0 and the big-endian schema id."""
    return bytes([_MAGIC]) + struct.pack(">I", schema_id)


def unframe(value: bytes) -> int:
    """The schema id of a framed value (its payload starts at byte 5)."""
    if len(value) < 5 or value[0] != _MAGIC:
        raise ValueError("no Confluent framing (magic byte 0 and a schema id)")
    return int(struct.unpack_from(">I", value, 1)[0])


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


def parse_format(options: Mapping[str, str]) -> str:
    fmt = str(options.get("value.format", "binary")).strip().lower()
    if fmt not in VALUE_FORMATS:
        raise SparkOptionError(
            f"option 'value.format' must be one of {', '.join(VALUE_FORMATS)}, got {fmt!r}"
        )
    return fmt


def registry_url(options: Mapping[str, str], fmt: str) -> str:
    url = str(options.get("schema.registry.url", "")).strip().split(",")[0].rstrip("/")
    if not url:
        raise SparkOptionError(f"value.format={fmt} needs option 'schema.registry.url'")
    return url


def parse_version(options: Mapping[str, str]) -> str:
    raw = str(options.get("value.schema.version", "latest"))
    if raw == "latest":
        return raw
    try:
        return str(int(raw))
    except ValueError:
        raise SparkOptionError(
            f"option 'value.schema.version' must be a version number, got {raw!r}"
        ) from None


def check_schema_type(fmt: str, body: Mapping[str, Any], what: str) -> None:
    """A registry answer holding a schema of another format than ``fmt`` is refused."""
    got = str(body.get("schemaType", "AVRO"))
    if got != SCHEMA_TYPES[fmt]:
        raise ValueTypeError(f"{what} holds a {got} schema, not {_TITLES[fmt]}")
    if body.get("references"):
        raise ValueTypeError(f"{what}: schemas with references are not supported yet")


def _subject(fmt: str, options: Mapping[str, str], subscription: Subscription) -> str:
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
            f"value.format={fmt} reads one subject: with more than one topic (or a pattern) "
            "option 'value.subject' must name it"
        )
    return f"{topics[0]}-value"  # Confluent's TopicNameStrategy


def value_options(options: Mapping[str, str], subscription: Subscription) -> ValueOptions | None:
    """Parse the ``value.*`` options; unless binary, fetch the reader schema."""
    fmt = parse_format(options)
    errors = str(options.get("value.decode.errors", "fail")).strip().lower()
    if errors not in DECODE_ERRORS:
        raise SparkOptionError(
            f"option 'value.decode.errors' must be one of {', '.join(DECODE_ERRORS)}, got {errors!r}"
        )
    if fmt == "binary":
        return None
    url = registry_url(options, fmt)
    auth = options.get("schema.registry.basic.auth.user.info")
    subject = _subject(fmt, options, subscription)
    version = parse_version(options)
    path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}"
    try:
        status, body = registry_json(url + path, auth)
    except OSError as e:
        raise SparkOptionError(f"schema registry {url}: {e}") from e
    if status != 200:
        raise SparkOptionError(
            f"schema registry {url}: subject {subject!r} version {version}: {body}"
        )
    check_schema_type(fmt, body, f"subject {subject!r}")
    vo = ValueOptions(
        url,
        auth,
        subject,
        int(body["version"]),
        int(body["id"]),
        body["schema"],
        errors,
        fmt,
        str(options.get("value.protobuf.message", "")),
    )
    names = [c.name for c in vo.value_schema().columns]
    clash = [n for n in names if n.lower() in _RESERVED]
    if clash:
        raise ValueTypeError(
            f"subject {subject!r}: field(s) {clash} would hide the source's own columns"
        )
    return vo


def value_ddl(vo: ValueOptions, include_headers: bool) -> str:
    cols = ", ".join(f"{quote(c.name)} {c.ddl}" for c in vo.value_schema().columns)
    headers = ", headers array<struct<key: string, value: binary>>" if include_headers else ""
    return f"{_BASE_BEFORE}, {cols}, {_BASE_AFTER}{headers}"


def value_arrow_schema(base: pa.Schema, vo: ValueOptions) -> pa.Schema:
    """The source's Arrow schema with ``value`` replaced by the value's columns."""
    fields = [pa.field(c.name, c.arrow) for c in vo.value_schema().columns]
    i = base.get_field_index("value")
    return pa.schema([*base][:i] + fields + [*base][i + 1 :])


# Parsed writer schemas by (format, registry, id): ids are immutable, so a worker keeps
# them for good.
_WRITERS: dict[tuple[str, str, int], Any] = {}


class ValueDecoder:
    """Turns the ``value`` column of the source's batches into the value's columns.

    A format implements ``parse_writer`` (a registry answer -> what its ``decode_value``
    needs) and ``decode_value`` (one framed value -> the Python value of the reader's
    Arrow type: a dict for a record).
    """

    def __init__(self, vo: ValueOptions, base: pa.Schema) -> None:
        self._vo = vo
        vs = vo.value_schema()
        self._record = vs.record
        self._type = vs.arrow
        self._schema = value_arrow_schema(base, vo)
        self._value_index = base.get_field_index("value")
        self._unknown: dict[int, str] = {}  # ids this task could not resolve, and why

    def parse_writer(self, schema_text: str) -> Any:
        raise NotImplementedError

    def decode_value(self, value: bytes, schema_id: int) -> Any:
        raise NotImplementedError

    def writer(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id`` (fetched once per worker)."""
        key = (self._vo.fmt, self._vo.registry_url, schema_id)
        got = _WRITERS.get(key)
        if got is not None:
            return got
        if schema_id in self._unknown:
            raise LookupError(self._unknown[schema_id])
        if schema_id == self._vo.schema_id:
            got = self.parse_writer(self._vo.schema)
        else:
            try:
                status, body = registry_json(
                    f"{self._vo.registry_url}/schemas/ids/{schema_id}", self._vo.auth
                )
            except OSError as e:  # the registry is down: retrying per record would not help
                raise ValueDecodeError(f"schema registry {self._vo.registry_url}: {e}") from e
            want = SCHEMA_TYPES[self._vo.fmt]
            if status != 200 or body.get("schemaType", "AVRO") != want:
                self._unknown[schema_id] = f"unknown {want} schema id {schema_id} ({body})"
                raise LookupError(self._unknown[schema_id])
            got = self.parse_writer(str(body["schema"]))
        _WRITERS[key] = got
        return got

    def transform(self, batch: pa.RecordBatch, topic: str, partition: int) -> pa.RecordBatch:
        values = batch.column(self._value_index).to_pylist()
        decoded = self.decode_rows(batch, values, range(len(values)), topic, partition)
        return self.with_columns(batch, self.columns_of(decoded))

    def decode_rows(
        self,
        batch: pa.RecordBatch,
        values: list[bytes | None],
        rows: Iterable[int],
        topic: str,
        partition: int,
    ) -> list[Any]:
        """``values`` (the batch's rows ``rows``) one record at a time, with the
        decode-error policy (``value.decode.errors``)."""
        decoded: list[Any] = []
        fail = self._vo.decode_errors == "fail"
        decode = self.decode_value  # bound once: called per record
        for i, v in zip(rows, values, strict=True):
            if v is None:  # a tombstone: a null row
                decoded.append(None)
                continue
            try:
                decoded.append(decode(v, unframe(v)))
            except ValueDecodeError:
                raise
            except Exception as e:  # the decoders raise many types on bad bytes
                offset = batch.column(batch.schema.get_field_index("offset"))[i].as_py()
                msg = (
                    f"cannot decode the {_TITLES[self._vo.fmt]} value of {topic}-{partition} "
                    f"at offset {offset} (subject {self._vo.subject!r}): {e}"
                )
                if fail:
                    raise ValueDecodeError(
                        msg + " (value.decode.errors=null reads it as null)"
                    ) from e
                logger.debug("odradek source: %s", msg)
                decoded.append(None)
        return decoded

    def columns_of(self, decoded: list[Any]) -> list[pa.Array]:
        """The value's Arrow columns from decoded Python values (a dict per record)."""
        arr = pa.array(decoded, type=self._type)
        return arr.flatten() if self._record else [arr]

    def with_columns(self, batch: pa.RecordBatch, cols: list[pa.Array]) -> pa.RecordBatch:
        """``batch`` with its ``value`` column replaced by ``cols``."""
        arrays = list(batch.columns)
        arrays[self._value_index : self._value_index + 1] = cols
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


def make_decoder(vo: ValueOptions, base: pa.Schema) -> ValueDecoder:
    """The decoder of ``vo``'s format (imported on executors only)."""
    if vo.fmt == "avro":
        from odradek.spark.avro_values import AvroValueDecoder  # noqa: PLC0415

        return AvroValueDecoder(vo, base)
    if vo.fmt == "protobuf":
        from odradek.spark.protobuf_values import ProtobufValueDecoder  # noqa: PLC0415

        return ProtobufValueDecoder(vo, base)
    from odradek.spark.json_values import JsonValueDecoder  # noqa: PLC0415

    return JsonValueDecoder(vo, base)
