"""``value.format=avro``: Confluent-framed Avro values -> typed Spark columns (issue 27).

The driver picks the reader schema once per query (the subject's latest version, or
``value.schema.version``) and derives the Spark schema from it (``avro_types``). Each
record names its writer schema (magic byte 0 + 4-byte id); executors fetch writer schemas
by id from the registry once per Python worker and let fastavro resolve every record to
the reader schema, so a compatible new version produced mid-stream is read with the
query's fixed columns (a field the reader has and the writer lacks takes its default).

Values framed with the reader's own schema id are decoded column-wise by a compiled
decoder (``avro_columnar``: no Python object per record or field); the rest -- tombstones,
other writer schemas (resolution), values it refuses, schemas it does not compile -- by
fastavro, one dict per record. Framing, writer lookup, the decode-error policy and the
Arrow columns are ``value_format``'s, shared with the Protobuf and JSON Schema formats.
"""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import numpy as np
import pyarrow as pa

from odradek.spark.avro_types import strip_python_logical_types
from odradek.spark.value_format import ValueDecoder, ValueOptions

__all__ = ["AvroValueDecoder"]

logger = logging.getLogger(__name__)

_MAGIC = 0


class AvroValueDecoder(ValueDecoder):
    """Avro values, each resolved from its writer schema to the reader schema."""

    def __init__(self, vo: ValueOptions, base: pa.Schema) -> None:
        from fastavro import parse_schema, schemaless_reader  # noqa: PLC0415 - executors only

        super().__init__(vo, base)
        self._parse = parse_schema
        self._read = schemaless_reader  # bound once: decoding is per record
        schema = json.loads(vo.schema)
        self._reader = parse_schema(strip_python_logical_types(schema))
        self._columnar = _columnar_decoder(schema, self._type, self._record)

    def parse_writer(self, schema_text: str) -> Any:
        return self._parse(strip_python_logical_types(json.loads(schema_text)))

    def decode_value(self, value: bytes, schema_id: int) -> Any:
        buf = io.BytesIO(value)
        buf.seek(5)
        if schema_id == self._vo.schema_id:
            return self._read(buf, self._reader, None)
        return self._read(buf, self.writer(schema_id), self._reader)

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
            rows = slow.tolist()
            decoded = self.decode_rows(
                batch, values.take(pa.array(slow)).to_pylist(), rows, topic, partition
            )
            slow_cols = self.columns_of(decoded)
            if not len(fast):
                cols = slow_cols
            else:  # both kinds: back into the batch's row order
                order = pa.array(np.argsort(np.concatenate([fast, slow]), kind="stable"))
                cols = [
                    pa.concat_arrays([f, s]).take(order)
                    for f, s in zip(cols, slow_cols, strict=True)
                ]
        return self.with_columns(batch, cols)

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
