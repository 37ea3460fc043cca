"""Records -> ``pyarrow.RecordBatch`` with exactly the schema of Spark's Kafka source.

Spark checks a data source's Arrow batches against the declared schema, so the types
must match exactly: ``partition`` is int32, ``timestamp`` is microseconds in UTC,
``timestampType`` int32 (0 CreateTime, 1 LogAppendTime, Kafka's TimestampType ids).
Arrow moves whole columns, which measured several times faster than yielding tuples
(docs/platform-notes.md, PySpark).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # the decoder (numba) is imported by executors only, not by planning
    from odradek.client.record_columns import RecordColumns

__all__ = [
    "SCHEMA_DDL",
    "HEADERS_DDL",
    "arrow_schema",
    "spark_ddl",
    "messages_to_batch",
    "timestamp_type",
    "columns_to_batch",
]

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
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


def messages_to_batch(
    messages: Sequence[Any],
    include_headers: bool,
    *,
    topic: str | None = None,
    partition: int | None = None,
) -> pa.RecordBatch:
    """confluent-kafka ``Message`` objects (no error set) -> one RecordBatch.

    ``topic``/``partition``: when every message comes from one partition (a source task
    reads one range) those columns are built without touching each message. One list
    comprehension per column: measurably faster than a per-message loop.
    """
    n = len(messages)
    stamps = [m.timestamp() for m in messages]
    arrays = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        (
            pa.repeat(pa.scalar(topic, pa.string()), n)
            if topic is not None
            else pa.array([m.topic() for m in messages], pa.string())
        ),
        (
            pa.repeat(pa.scalar(partition, pa.int32()), n)
            if partition is not None
            else pa.array([m.partition() for m in messages], pa.int32())
        ),
        pa.array([m.offset() for m in messages], pa.int64()),
        pa.array(
            [ts * 1000 if kind else None for kind, ts in stamps], pa.timestamp("us", tz="UTC")
        ),
        pa.array([_TS_TYPE.get(kind, -1) for kind, _ in stamps], pa.int32()),
    ]
    if include_headers:
        # Spark shows a record without headers as null, not as an empty array
        arrays.append(
            pa.array(
                [
                    [{"key": k, "value": v} for k, v in h] if h else None
                    for h in (m.headers() for m in messages)
                ],
                _HEADER_TYPE,
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def _binary(
    offs: np.ndarray, data: np.ndarray, valid: np.ndarray, n: int, typ: pa.DataType
) -> pa.Array:
    """A binary/string array over the buffers (no copy); validity only when nulls exist."""
    nulls = n - int(np.count_nonzero(valid[:n]))
    bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid[:n], bitorder="little"))
    end = int(offs[n])
    return pa.Array.from_buffers(
        typ, n, [bitmap, pa.py_buffer(offs[: n + 1]), pa.py_buffer(data[:end])], null_count=nulls
    )


def columns_to_batch(
    cols: RecordColumns, include_headers: bool, *, topic: str, partition: int
) -> pa.RecordBatch:
    """Decoded record columns of one partition -> a RecordBatch with Spark's schema.

    Key and value arrays are built over the decoder's buffers without copying; a record
    without headers gets a null ``headers`` (as on the confluent-kafka path).
    """
    n = cols.n
    arrays = [
        _binary(cols.key_offs, cols.key_bytes, cols.key_valid, n, pa.binary()),
        _binary(cols.val_offs, cols.val_bytes, cols.val_valid, n, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets[:n])]),
        pa.Array.from_buffers(
            pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(cols.timestamps[:n])]
        ),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(cols.ts_types[:n])]),
    ]
    if include_headers:
        assert cols.hdr_offs is not None and cols.hk_offs is not None
        assert cols.hk_bytes is not None and cols.hv_offs is not None
        assert cols.hv_bytes is not None and cols.hv_valid is not None
        nh = int(cols.hdr_offs[n])
        hkeys = _binary(cols.hk_offs, cols.hk_bytes, np.ones(nh, np.bool_), nh, pa.string())
        hkeys.validate(full=True)  # header keys are Java Strings: UTF-8 or the batch is bad
        hvals = _binary(cols.hv_offs, cols.hv_bytes, cols.hv_valid, nh, pa.binary())
        entries = pa.StructArray.from_arrays([hkeys, hvals], fields=list(_HEADER_TYPE.value_type))
        has = np.diff(cols.hdr_offs[: n + 1]) > 0
        nulls = n - int(np.count_nonzero(has))
        bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(has, bitorder="little"))
        arrays.append(
            pa.Array.from_buffers(
                _HEADER_TYPE,
                n,
                [bitmap, pa.py_buffer(cols.hdr_offs[: n + 1])],
                null_count=nulls,
                children=[entries],
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))
