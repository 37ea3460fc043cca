"""The ``odradek`` Spark sink: batch and streaming writes (issue 7, item 2).

Columns as in Spark's Kafka sink: ``value`` (required, string or binary), optional
``key`` (string/binary), ``topic`` (string; the ``topic`` option overrides it),
``partition`` (int) and ``headers`` (array<struct<key string, value binary>>).
Records go through an idempotent producer (KIP-98, acks=all) with Java's murmur2 key
partitioner, so keyed records land where a Java producer would put them.

Streaming writes are made replay-safe (docs/spark.md, "Sink guarantee"). Every task
writing micro-batch B of query Q (Spark partition P) tags its records with the header
``odradek.sink = Q:B:P:<digest of the row>``, and before the first record to a topic it
durably writes a *begin marker* (the topic's end offsets at that moment) to the query's
marker topic ``__odradek_spark_sink-<Q>``. The driver's ``commit`` writes a *commit
marker* for B. When Spark replays B (same query id, batch id and input):

* commit marker present -> the whole batch was already written: tasks write nothing;
* begin markers of (B, P) present -> an earlier attempt of this task wrote some
  records: the task scans the target partitions from the recorded offsets, collects
  the digests tagged ``Q:B:P`` and writes only rows whose digest is not already there
  (a multiset, so rows that legitimately repeat are kept the right number of times).

Markers for B always follow every marker of B-1 (micro-batches commit in order), so a
task finds B's markers by reading the marker topic backwards from its end until it sees
an older batch: normally one small read. Batch (non-streaming) writes are at-least-once.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from odradek.errors import ErrorCode, KafkaError
from odradek.spark.offsets import SparkOptionError, parse_bool, parse_positive_int
from odradek.spark.source import parse_client
from odradek.spark.value_sink import (
    SinkValueOptions,
    ValueEncoder,
    sink_value_options,
    value_columns,
)

__all__ = [
    "SinkOptions",
    "OdradekBatchWriter",
    "OdradekStreamWriter",
    "SinkCommitMessage",
    "TAG_HEADER",
    "marker_topic",
    "row_digest",
    "read_markers",
]

logger = logging.getLogger("odradek.spark")

TAG_HEADER = "odradek.sink"
MARKER_TOPIC_PREFIX = "__odradek_spark_sink-"
_FORBIDDEN_KAFKA = ("key.serializer", "value.serializer", "transactional.id")


def marker_topic(query_id: str) -> str:
    return MARKER_TOPIC_PREFIX + query_id


@dataclass(frozen=True)
class SinkOptions:
    conf: dict[str, str]
    topic: str | None
    exactly_once: bool
    # Fault injection for tests and demos (docs/spark.md): fail a write task once it has
    # durably written this many records / fail the driver commit after the marker.
    fail_after_records: int | None = None
    fail_after_commit: bool = False
    client: str = "columnar"  # odradek.client: columnar or confluent (docs/spark.md)
    # odradek.sink.guarantee (docs/spark.md): "dedupe" (replays skip rows already
    # written) or "transactional" (one Kafka transaction per task and micro-batch)
    transactional: bool = False
    # value.format avro/protobuf/json (docs/spark.md): values encoded from the row's
    # other columns
    value_fmt: SinkValueOptions | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkOptions:
        conf = {k[len("kafka.") :]: str(v) for k, v in options.items() if k.startswith("kafka.")}
        if not conf.get("bootstrap.servers"):
            raise SparkOptionError(
                "Option 'kafka.bootstrap.servers' must be specified for "
                "configuring the odradek sink"
            )
        for k in _FORBIDDEN_KAFKA:
            if k in conf:
                raise SparkOptionError(f"odradek sink option 'kafka.{k}' is not supported")
        topic = options.get("topic")
        value_fmt = sink_value_options(options)
        _validate_schema(
            schema,
            has_topic_option=topic is not None,
            value_fmt=value_fmt.fmt if value_fmt else None,
        )
        if value_fmt is not None and (topic is not None or value_fmt.subject):
            # Resolve (and register, when allowed) the schema now: a missing schema or a
            # column the schema lacks fails the query before any task runs.
            ValueEncoder(value_fmt, None).check_columns(
                schema.fieldNames(), value_fmt.subject or f"{topic}-value"
            )
        client = parse_client(options, conf)
        if client == "columnar":
            from odradek.spark.columnar_sink import produce_settings

            produce_settings(conf)  # option errors at planning time, not in a task
        return cls(
            conf=conf,
            topic=str(topic) if topic is not None else None,
            exactly_once=parse_bool(options, "exactlyOnce", True),
            fail_after_records=parse_positive_int(options, "odradek.test.failAfterRecords"),
            fail_after_commit=parse_bool(options, "odradek.test.failAfterCommit", False),
            client=client,
            transactional=_parse_guarantee(options),
            value_fmt=value_fmt,
        )


def _validate_schema(
    schema: StructType, *, has_topic_option: bool, value_fmt: str | None = None
) -> None:
    """Spark's Kafka sink checks, with its messages (with ``value.format`` avro, protobuf or
    json the value is built from the other columns, value_sink)."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    typed = value_fmt is not None
    if typed:
        if not value_columns(schema.fieldNames()):
            raise SparkOptionError(f"value.format={value_fmt}: no column to build the value from")
    elif "value" not in types:
        raise SparkOptionError("Required attribute 'value' not found")
    for name in ("key",) if typed else ("value", "key"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise SparkOptionError(f"{name} attribute type must be a string or binary")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise SparkOptionError("topic attribute type must be a string")
    if "topic" not in types and not has_topic_option:
        raise SparkOptionError(
            "topic option required when no 'topic' attribute is present. "
            "Use the topic option for setting a topic."
        )
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise SparkOptionError("partition attribute type must be an int")
    if "headers" in types:
        h = types["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [f.name for f in h.elementType.fields] == ["key", "value"]
        )
        if not ok:
            raise SparkOptionError(
                "headers attribute type must be array<struct<key:string,value:binary>>"
            )


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    query_id: str | None
    task: int
    written: int
    skipped_replayed: int
    skipped_batch: bool = False


# --------------------------------------------------------------------------- rows


def _b(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    return str(v).encode()


def _rows(
    batch: pa.RecordBatch, default_topic: str | None
) -> Iterator[tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]]:
    cols = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    n = batch.num_rows
    none = [None] * n
    values, keys = cols["value"], cols.get("key", none)
    topics, parts, headers = (
        cols.get("topic", none),
        cols.get("partition", none),
        cols.get("headers", none),
    )
    for i in range(n):
        topic = default_topic if default_topic is not None else topics[i]
        if topic is None:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                "null topic present in the data. Use the topic option for setting a default topic.",
            )
        hs = [(h["key"], _b(h["value"])) for h in headers[i]] if headers[i] else []
        yield topic, _b(keys[i]), _b(values[i]), parts[i], hs


def row_digest(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    partition: int | None,
    headers: list[tuple[str, bytes | None]],
) -> str:
    """64-bit content digest of a row (length-prefixed fields; None != b""), as hex.

    XXH64 (``kernels.xxh64_rows``), the same function both clients tag rows with."""
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [topic],
            "key": [key],
            "value": [value],
            "partition": [partition],
            "headers": [[{"key": k, "value": v} for k, v in headers] or None],
        },
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("partition", pa.int32()),
                ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ]
        ),
    )
    from odradek.spark.columnar_sink import ArrowRows, batch_digests

    return f"{int(batch_digests(ArrowRows.from_batch(batch, None))[0]):016x}"


# --------------------------------------------------------------------------- cluster helpers


def _parse_guarantee(options: Mapping[str, str]) -> bool:
    g = str(options.get("odradek.sink.guarantee", "dedupe")).lower()
    if g not in ("dedupe", "transactional"):
        raise SparkOptionError(
            f"option 'odradek.sink.guarantee' must be dedupe or transactional, not {g!r}"
        )
    return g == "transactional"


def transactional_id(query_id: str, task: int) -> str:
    """One id per query and Spark partition: a retry or replay of the task reuses it, so
    its InitProducerId fences the earlier attempt and aborts its open transaction."""
    return f"odradek-spark-{query_id}-{task}"


def _producer(conf: Mapping[str, str]) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            **conf,
        }
    )


class _Delivery:
    """Counts deliveries; the first error fails the task (after flush)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}: {err}")

    def check(self, producer: Any) -> None:
        left = producer.flush(120)
        if left or self.errors:
            raise KafkaError(
                ErrorCode.request_timed_out if left else ErrorCode.unknown_server_error,
                f"{left} records undelivered; errors: {self.errors[:3]}",
            )


def _admin(conf: Mapping[str, str]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(dict(conf))


def _ensure_marker_topic(admin: Any, topic: str) -> None:
    md = admin.list_topics(timeout=30)
    if topic not in md.topics or md.topics[topic].error is not None:
        _create_marker_topic(admin, topic, min(3, len(md.brokers)))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until a leader is known (another task's
        t = admin.list_topics(topic, timeout=10).topics.get(topic)  # topic too)
        if t is not None and t.error is None and t.partitions and t.partitions[0].leader >= 0:
            return
        time.sleep(0.1)
    raise KafkaError(ErrorCode.leader_not_available, f"marker topic {topic} has no leader")


def _create_marker_topic(admin: Any, topic: str, replication_factor: int) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    fut = admin.create_topics([NewTopic(topic, 1, replication_factor)], operation_timeout=30)[topic]
    try:
        fut.result()
    except KafkaException as e:
        # Another task of the same batch may have created it first: TOPIC_ALREADY_EXISTS
        # is success (the caller then waits for its leader); anything else is fine only
        # if the topic exists now.
        if e.args[0].code() == ErrorCode.topic_already_exists:
            return
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t is None or t.error is not None:
            raise KafkaError(
                ErrorCode.unknown_server_error, f"cannot create marker topic {topic}: {e}"
            ) from e


def _consumer(conf: Mapping[str, str]) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "group.id": "odradek-spark-sink",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **conf,
            "auto.offset.reset": "earliest",
        }
    )


def _read_range(consumer: Any, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
    """Records ``[start, end)`` of one partition (committed data only)."""
    from confluent_kafka import TopicPartition

    if end <= start:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    pos, deadline = start, time.monotonic() + 60
    while pos < end:
        for m in consumer.consume(num_messages=1000, timeout=0.5):
            if m.error() is not None:
                raise KafkaError(ErrorCode.unknown_server_error, f"scan {topic}: {m.error()}")
            if m.offset() >= end:
                return
            if m.offset() >= pos:
                pos = m.offset() + 1
                deadline = time.monotonic() + 60
                yield m
        # A read_committed consumer never returns transaction markers or aborted
        # records: its position moves past them, and so does ours.
        at = consumer.position([TopicPartition(topic, partition)])[0].offset
        if at > pos:
            pos, deadline = at, time.monotonic() + 60
        if time.monotonic() > deadline:
            raise KafkaError(
                ErrorCode.request_timed_out, f"scan {topic}-{partition} stuck at {pos}"
            )


def _watermarks(admin: Any, topic: str, partition: int, conf: Mapping[str, str]) -> tuple[int, int]:
    """(log start, high watermark) through ListOffsets (the admin client looks the topic
    up itself; a consumer's cached metadata may not know a just-created topic yet)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from odradek.spark.source import list_offsets_retrying, read_committed

    tp = TopicPartition(topic, partition)
    lo = list_offsets_retrying(admin, {tp: OffsetSpec.earliest()}, 30, 1.0, conf)[tp]
    hi = list_offsets_retrying(
        admin, {tp: OffsetSpec.latest()}, 30, 1.0, conf, committed=read_committed(conf)
    )[tp]
    return lo, hi


def read_markers(
    conf: Mapping[str, str], admin: Any, query_id: str, batch_id: int
) -> list[dict[str, Any]]:
    """All markers of ``batch_id``, reading the marker topic backwards in growing windows."""
    topic = marker_topic(query_id)
    low, high = _watermarks(admin, topic, 0, conf)
    if high <= low:
        return []
    c = _consumer(conf)
    try:
        window, stop = 64, high
        found: list[dict[str, Any]] = []
        while stop > low:
            frm = max(low, stop - window)
            older = False
            for m in _read_range(c, topic, 0, frm, stop):
                mk = json.loads(m.value())
                if mk["batch"] == batch_id:
                    found.append(mk)
                elif mk["batch"] < batch_id:
                    older = True
            if older:
                break
            stop, window = frm, window * 4
        return found
    finally:
        c.close()


def _write_marker(p: Any, query_id: str, marker: dict[str, Any]) -> None:
    """Produce one marker and wait until it is committed (acks=all)."""
    d = _Delivery()
    p.produce(
        marker_topic(query_id),
        json.dumps(marker).encode(),
        str(marker["batch"]).encode(),
        partition=0,
        on_delivery=d,
    )
    d.check(p)


def _latest_offsets(admin: Any, topic: str, conf: Mapping[str, str]) -> dict[str, int]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    t = admin.list_topics(topic, timeout=30).topics.get(topic)
    if t is None or t.error is not None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {topic} does not exist")
    from odradek.spark.source import list_offsets_retrying, read_committed

    got = list_offsets_retrying(
        admin,
        {TopicPartition(topic, p): OffsetSpec.latest() for p in t.partitions},
        30,
        1.0,
        conf,
        committed=read_committed(conf),
    )
    return {str(tp.partition): off for tp, off in got.items()}


# --------------------------------------------------------------------------- writers


@dataclass
class _Task:
    """One write task: produce, dedupe against earlier attempts, count."""

    opts: SinkOptions
    query_id: str | None
    batch_id: int | None
    task: int
    attempt: int
    already: Counter[str] = field(default_factory=Counter)
    begun: set[str] = field(default_factory=set)
    written: int = 0
    skipped: int = 0
    _admin_client: Any = None
    _native: Any = None

    @property
    def native(self) -> Any:
        """Marker I/O through Odradek's own client (columnar client only), else None."""
        if self.opts.client != "columnar":
            return None
        if self._native is None:
            from odradek.spark.sink_markers import NativeMarkers

            self._native = NativeMarkers(self.opts.conf)
        return self._native

    @property
    def admin(self) -> Any:
        if self._admin_client is None:
            self._admin_client = _admin(self.opts.conf)
        return self._admin_client

    @property
    def exactly_once(self) -> bool:
        return self.opts.exactly_once and self.query_id is not None and self.batch_id is not None

    @property
    def tag(self) -> str:
        return f"{self.query_id}:{self.batch_id}:{self.task}"

    def run(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        if self.opts.value_fmt is not None:
            batches = ValueEncoder(self.opts.value_fmt, self.opts.topic).encode_all(batches)
        try:
            return self._run(batches)
        finally:
            if self._native is not None:
                self._native.close()

    def _run(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        if self.exactly_once and self.opts.transactional:
            return self._run_transactional(batches)
        if self.exactly_once:
            assert self.query_id is not None and self.batch_id is not None
            topic = marker_topic(self.query_id)
            if self.native is not None:
                if not self.native.topic_ready(topic):
                    _ensure_marker_topic(self.admin, topic)  # created once per query
                markers = self.native.read(topic, self.batch_id)
            else:
                _ensure_marker_topic(self.admin, topic)
                markers = read_markers(self.opts.conf, self.admin, self.query_id, self.batch_id)
            if any(m["type"] == "commit" for m in markers):
                logger.info(
                    "odradek sink: batch %s of query %s already committed; skipping",
                    self.batch_id,
                    self.query_id,
                )
                return SinkCommitMessage(self.query_id, self.task, 0, 0, skipped_batch=True)

            self._load_previous_attempts(
                [m for m in markers if m["type"] == "begin" and m["task"] == self.task]
            )
        if self.opts.client == "columnar":
            return self._run_columnar(batches)
        from odradek.spark.columnar_sink import ArrowRows, batch_digests

        producer, delivery = _producer(self.opts.conf), _Delivery()
        for batch in batches:
            digests = (
                batch_digests(ArrowRows.from_batch(batch, self.opts.topic)).tolist()
                if self.exactly_once
                else None
            )
            for i, (topic, key, value, partition, headers) in enumerate(
                _rows(batch, self.opts.topic)
            ):
                if digests is not None:
                    digest = f"{digests[i]:016x}"
                    if self.already[digest] > 0:
                        self.already[digest] -= 1
                        self.skipped += 1
                        continue
                    if topic not in self.begun:
                        self._begin(topic, producer, delivery)
                    headers = [*headers, (TAG_HEADER, f"{self.tag}:{digest}".encode())]
                self._produce(producer, delivery, topic, key, value, partition, headers)
                self.written += 1
                if self.opts.fail_after_records and self.written >= self.opts.fail_after_records:
                    delivery.check(producer)
                    raise KafkaError(
                        ErrorCode.unknown_server_error,
                        f"odradek.test.failAfterRecords: injected failure after "
                        f"{self.written} durable records",
                    )
        delivery.check(producer)
        return SinkCommitMessage(self.query_id, self.task, self.written, self.skipped)

    def _run_transactional(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """odradek.sink.guarantee=transactional: the task's records and its ``task``
        marker are written in one transaction (KIP-98). A replay finds the marker (read
        read_committed) and writes nothing; an attempt that died before committing left
        an open transaction that this attempt's InitProducerId aborts (same
        transactional.id), so read_committed consumers never see it."""
        assert self.query_id is not None and self.batch_id is not None
        from confluent_kafka import Producer

        _ensure_marker_topic(self.admin, marker_topic(self.query_id))
        producer = Producer(
            {
                "acks": "all",
                "linger.ms": 5,
                "partitioner": "murmur2_random",
                **self.opts.conf,
                "transactional.id": transactional_id(self.query_id, self.task),
            }
        )
        # First fence and abort an earlier attempt of this task, then read the markers
        # (read_committed, up to the LSO): only committed transactions count.
        producer.init_transactions(120)
        conf = {**self.opts.conf, "isolation.level": "read_committed"}
        markers = read_markers(conf, self.admin, self.query_id, self.batch_id)
        if any(
            m["type"] == "commit" or (m["type"] == "task" and m["task"] == self.task)
            for m in markers
        ):
            logger.info(
                "odradek sink: task %d of batch %s already committed; skipping",
                self.task,
                self.batch_id,
            )
            return SinkCommitMessage(
                self.query_id,
                self.task,
                0,
                0,
                skipped_batch=any(m["type"] == "commit" for m in markers),
            )
        producer.begin_transaction()
        delivery = _Delivery()
        for batch in batches:
            for topic, key, value, partition, headers in _rows(batch, self.opts.topic):
                self._produce(producer, delivery, topic, key, value, partition, headers)
                self.written += 1
                if self.opts.fail_after_records and self.written >= self.opts.fail_after_records:
                    delivery.check(producer)  # durable, but in a transaction never committed
                    raise KafkaError(
                        ErrorCode.unknown_server_error,
                        f"odradek.test.failAfterRecords: injected failure after "
                        f"{self.written} records",
                    )
        marker = {
            "type": "task",
            "batch": self.batch_id,
            "task": self.task,
            "written": self.written,
        }
        producer.produce(
            marker_topic(self.query_id),
            json.dumps(marker).encode(),
            str(self.batch_id).encode(),
            partition=0,
            on_delivery=delivery,
        )
        delivery.check(producer)
        producer.commit_transaction(120)
        return SinkCommitMessage(self.query_id, self.task, self.written, 0)

    def _run_columnar(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """The columnar client: whole record batches per partition (module doc)."""
        from odradek.spark.columnar_sink import (
            ArrowRows,
            ColumnarWriter,
            batch_digests,
            produce_settings,
        )

        writer = ColumnarWriter(
            self.opts.conf["bootstrap.servers"], produce_settings(self.opts.conf)
        )

        def before_topic(topic: str) -> None:
            if topic in self.begun:
                return
            # The begin marker goes through the same idempotent producer and is flushed
            # (with everything queued before it) before any record reaches ``topic``.
            assert self.query_id is not None
            from odradek.spark.sink_markers import NativeMarkers

            NativeMarkers.write(
                writer.producer,
                marker_topic(self.query_id),
                {
                    "type": "begin",
                    "batch": self.batch_id,
                    "task": self.task,
                    "attempt": self.attempt,
                    "topic": topic,
                    "offsets": self.native.latest_offsets(topic),
                },
            )
            self.begun.add(topic)

        limit = self.opts.fail_after_records
        prefix = f"{self.tag}:".encode() if self.exactly_once else None
        try:
            for batch in batches:
                rows = ArrowRows.from_batch(batch, self.opts.topic)
                keep, digests = None, None
                if self.exactly_once:
                    digests = batch_digests(rows)
                    if self.already:
                        keep = self._not_written_before(digests)
                if limit is not None:
                    chosen = np.flatnonzero(keep) if keep is not None else np.arange(rows.n)
                    chosen = chosen[: max(limit - self.written, 0)]
                    keep = np.zeros(rows.n, np.bool_)
                    keep[chosen] = True
                self.written += writer.write(
                    rows,
                    keep,
                    tag_prefix=prefix,
                    digests=digests,
                    before_topic=before_topic if self.exactly_once else None,
                )
                if limit is not None and self.written >= limit:
                    writer.flush()
                    raise KafkaError(
                        ErrorCode.unknown_server_error,
                        f"odradek.test.failAfterRecords: injected failure after "
                        f"{self.written} durable records",
                    )
            writer.flush()
        finally:
            writer.close()
        return SinkCommitMessage(self.query_id, self.task, self.written, self.skipped)

    def _not_written_before(self, digests: np.ndarray) -> np.ndarray:
        """Rows an earlier attempt did not write (replays only; a multiset, per row)."""
        from odradek.spark.columnar_sink import not_written_before

        keep = not_written_before(digests, self.already)
        self.skipped += int(keep.shape[0] - np.count_nonzero(keep))
        return keep

    @staticmethod
    def _produce(
        producer: Any,
        delivery: _Delivery,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: list[Any],
    ) -> None:
        kw: dict[str, Any] = {"on_delivery": delivery}
        if partition is not None:
            kw["partition"] = partition
        if headers:
            kw["headers"] = headers
        while True:
            try:
                producer.produce(topic, value, key, **kw)
                return
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)

    def _begin(self, topic: str, producer: Any, delivery: _Delivery) -> None:
        """Durably record where this attempt starts writing to ``topic``."""
        delivery.check(producer)  # keep "marker before records" for every topic
        assert self.query_id is not None
        _write_marker(
            producer,
            self.query_id,
            {
                "type": "begin",
                "batch": self.batch_id,
                "task": self.task,
                "attempt": self.attempt,
                "topic": topic,
                "offsets": _latest_offsets(self.admin, topic, self.opts.conf),
            },
        )
        self.begun.add(topic)

    def _load_previous_attempts(self, begins: list[dict[str, Any]]) -> None:
        """Digests this task's earlier attempts already wrote (committed records only)."""
        if not begins:
            return
        start: dict[tuple[str, int], int] = {}
        for b in begins:
            for p, off in b["offsets"].items():
                tp = (b["topic"], int(p))
                start[tp] = min(start.get(tp, off), off)
        prefix = (self.tag + ":").encode()
        c = _consumer(self.opts.conf)
        try:
            for (topic, p), frm in sorted(start.items()):
                end = int(_latest_offsets(self.admin, topic, self.opts.conf)[str(p)])
                for m in _read_range(c, topic, p, frm, end):
                    for k, v in m.headers() or ():
                        if k == TAG_HEADER and v is not None and v.startswith(prefix):
                            self.already[v[len(prefix) :].decode()] += 1
        finally:
            c.close()
        logger.warning(
            "odradek sink: replay of batch %s task %s: %d records already written by "
            "earlier attempts will be skipped",
            self.batch_id,
            self.task,
            sum(self.already.values()),
        )


def _task_context() -> tuple[str | None, int | None, int, int]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return None, None, 0, 0
    qid = tc.getLocalProperty("sql.streaming.queryId")
    bid = tc.getLocalProperty("streaming.sql.batchId")
    return qid, (int(bid) if bid is not None else None), tc.partitionId(), tc.attemptNumber()


class OdradekStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink; replays of a micro-batch do not duplicate records (module doc)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = SinkOptions.parse(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        qid, bid, task, attempt = _task_context()
        return _Task(self.opts, qid, bid, task, attempt).run(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        ours = [m for m in messages if isinstance(m, SinkCommitMessage)]
        qid = next((m.query_id for m in ours if m.query_id), None)
        if not self.opts.exactly_once or qid is None:
            return
        if any(m.skipped_batch for m in ours):
            return  # the marker is already there
        marker = {
            "type": "commit",
            "batch": batchId,
            "written": sum(m.written for m in ours),
            "skipped_replayed": sum(m.skipped_replayed for m in ours),
        }
        if self.opts.client == "columnar":
            from odradek.client.producer import BatchProducer
            from odradek.spark.columnar_sink import produce_settings
            from odradek.spark.sink_markers import NativeMarkers

            producer = BatchProducer(
                self.opts.conf["bootstrap.servers"], produce_settings(self.opts.conf).producer
            )
            try:
                NativeMarkers.write(producer, marker_topic(qid), marker)
            finally:
                producer.close()
        else:
            _write_marker(_producer(self.opts.conf), qid, marker)
        if self.opts.fail_after_commit:
            raise KafkaError(
                ErrorCode.unknown_server_error,
                "odradek.test.failAfterCommit: injected failure after the "
                f"commit marker of batch {batchId}",
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Nothing to undo: records already written stay, and the replay skips them.
        logger.warning(
            "odradek sink: batch %s aborted; a replay will not duplicate its records", batchId
        )


class OdradekBatchWriter(DataSourceArrowWriter):
    """``df.write.format("odradek")``: at-least-once, like Spark's Kafka sink."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = SinkOptions.parse(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        _, _, task, attempt = _task_context()
        return _Task(self.opts, None, None, task, attempt).run(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass
