"""Records -> ``pyarrow.RecordBatch`` with exactly the schema of Spark's Kafka source.

Spark checks a data source's Arrow batches against the declared schema, so the types
must match exactly: ``partition`` is int32, ``timestamp`` is microseconds in UTC,
``timestampType`` int32 (0 CreateTime, 1 LogAppendTime, Kafka's TimestampType ids).
Arrow moves whole columns, which measured several times faster than yielding tuples
(FACTS.md, PySpark section).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["SCHEMA_DDL", "HEADERS_DDL", "arrow_schema", "spark_ddl", "messages_to_batch",
           "timestamp_type"]

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"

_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]

# confluent-kafka's TIMESTAMP_* constants -> Kafka's TimestampType ids as Spark shows them.
_TS_TYPE = {1: 0, 2: 1}  # CREATE_TIME -> 0, LOG_APPEND_TIME -> 1; NOT_AVAILABLE -> -1


def timestamp_type(confluent_type: int) -> int:
    return _TS_TYPE.get(confluent_type, -1)


def spark_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL + (HEADERS_DDL if include_headers else "")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", _HEADER_TYPE))
    return pa.schema(fields)


def messages_to_batch(messages: Sequence[Any], include_headers: bool) -> pa.RecordBatch:
    """confluent-kafka ``Message`` objects (no error set) -> one RecordBatch."""
    n = len(messages)
    keys: list[bytes | None] = [None] * n
    values: list[bytes | None] = [None] * n
    topics: list[str] = [""] * n
    parts: list[int] = [0] * n
    offsets: list[int] = [0] * n
    stamps: list[int | None] = [None] * n
    kinds: list[int] = [0] * n
    headers: list[list[dict[str, Any]] | None] = [None] * n if include_headers else []
    for i, m in enumerate(messages):
        keys[i] = m.key()
        values[i] = m.value()
        topics[i] = m.topic()
        parts[i] = m.partition()
        offsets[i] = m.offset()
        kind, ts = m.timestamp()
        kinds[i] = _TS_TYPE.get(kind, -1)
        stamps[i] = ts * 1000 if kind else None
        if include_headers:
            h = m.headers()
            # Spark shows a record without headers as null, not as an empty array
            headers[i] = [{"key": k, "value": v} for k, v in h] if h else None
    arrays = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array(topics, pa.string()),
        pa.array(parts, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(stamps, pa.timestamp("us", tz="UTC")),
        pa.array(kinds, pa.int32()),
    ]
    if include_headers:
        arrays.append(pa.array(headers, _HEADER_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))
