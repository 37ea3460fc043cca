"""The source's columnar read path (``odradek.client=columnar``, issue 17 item 1).

A task reads its offset range with ``odradek.client.fetcher.PartitionFetcher`` (Fetch
requests to the partition's leader, one in flight ahead of the decoder) and turns each
fetch response into one Arrow RecordBatch: the compiled decoder writes keys, values,
offsets, timestamps and headers straight into the buffers the Arrow arrays are built on,
so no Python object is created per record. Semantics are the confluent-kafka path's
(docs/spark.md): committed records only, ``failOnDataLoss`` for records that vanished
before the task read them, ``kafkaConsumer.pollTimeoutMs`` without progress fails the
task, read_committed unless ``kafka.isolation.level`` says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from odradek.client.fetcher import FetchConfig, PartitionFetcher
from odradek.spark.arrow import columns_to_batch
from odradek.spark.offsets import (
    DataLossError,
    OffsetRange,
    SparkOptionError,
    client_security,
)

__all__ = ["read_range_columnar", "fetch_config"]

logger = logging.getLogger(__name__)


def _int(conf: Mapping[str, str], name: str, default: int) -> int:
    raw = conf.get(name)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise SparkOptionError(f"option 'kafka.{name}' must be an integer, got {raw!r}") from None
    if v <= 0:
        raise SparkOptionError(f"option 'kafka.{name}' must be positive, got {raw!r}")
    return v


def fetch_config(opts: object) -> FetchConfig:
    """The ``kafka.*`` options the columnar client honours, librdkafka's names and defaults
    (so one set of options means the same on both paths)."""
    conf: Mapping[str, str] = opts.conf  # type: ignore[attr-defined]
    iso = str(conf.get("isolation.level", "read_committed")).lower()
    if iso not in ("read_committed", "read_uncommitted"):
        raise SparkOptionError(
            f"option 'kafka.isolation.level' must be read_committed or "
            f"read_uncommitted, got {iso!r}"
        )
    check = str(conf.get("check.crcs", "false")).lower()
    poll_s: float = opts.poll_timeout_s  # type: ignore[attr-defined]
    grace = opts.fetch_retries * opts.fetch_retry_interval_s  # type: ignore[attr-defined]
    return FetchConfig(
        max_partition_bytes=_int(conf, "max.partition.fetch.bytes", 1 << 20),
        max_bytes=_int(conf, "fetch.max.bytes", 50 << 20),
        max_wait_ms=_int(conf, "fetch.wait.max.ms", 500),
        read_committed=iso == "read_committed",
        check_crcs=check == "true",
        with_headers=opts.include_headers,  # type: ignore[attr-defined]
        poll_timeout_s=poll_s,
        retry_backoff_s=_int(conf, "retry.backoff.ms", 100) / 1000,
        hw_grace_s=min(poll_s, grace),
        socket_timeout_s=_int(conf, "socket.timeout.ms", 60_000) / 1000,
        client_id=str(conf.get("client.id", "odradek-spark")),
        security=client_security(conf),
    )


def read_range_columnar(opts: object, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Yield ``[start, end)`` of one partition as Arrow batches (one per fetch response)."""
    # Only ``value`` is relied on: a reused Python worker may hold another copy of the
    # class, and Spark hands a bare InputPartition(None) when a batch plan is empty.
    if not isinstance(partition.value, (tuple, list)):
        return
    r = OffsetRange(*partition.value)
    fail: bool = opts.fail_on_data_loss  # type: ignore[attr-defined]

    def on_data_loss(message: str) -> None:
        if fail:
            raise DataLossError(message)
        logger.warning("odradek source: %s (failOnDataLoss=false: skipping)", message)

    fetcher = PartitionFetcher(
        opts.conf["bootstrap.servers"],  # type: ignore[attr-defined]
        r.topic,
        r.partition,
        r.start,
        r.end,
        fetch_config(opts),
        on_data_loss,
    )
    include_headers: bool = opts.include_headers  # type: ignore[attr-defined]
    for cols in fetcher:
        yield columns_to_batch(cols, include_headers, topic=r.topic, partition=r.partition)
