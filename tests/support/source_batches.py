"""Arrow batches shaped like the odradek Spark source's own, for the value decoders'
unit tests (``value.format``: Avro, Protobuf, JSON Schema)."""

from __future__ import annotations

import pyarrow as pa

from odradek.spark.arrow import arrow_schema

__all__ = ["source_batch"]


def source_batch(values: list[bytes | None]) -> pa.RecordBatch:
    """One batch of partition ``t-0`` holding ``values`` at offsets 100, 101, ..."""
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([b"k"] * n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(["t"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(100, 100 + n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=arrow_schema(False),
    )
