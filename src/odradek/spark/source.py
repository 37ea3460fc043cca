"""The ``odradek`` Spark data source: batch and streaming reads (issue 7, item 1).

Mirrors Spark's Kafka source (schema, option names and semantics) with PySpark 4's
Python Data Source API, so ``pip install`` is all a Spark user needs.

Where things run (docs/platform-notes.md, PySpark):

* ``initialOffset`` / ``latestOffset`` / ``partitions`` / ``commit`` run in one
  long-lived Python process next to the driver: they hold an AdminClient (created
  lazily, never pickled) for metadata and ListOffsets.
* ``read(partition)`` runs on executors from a pickled reader: it opens its own
  confluent-kafka Consumer, ``assign``s the exact range and stops at the end offset.
  Consumers only ever see records below the high watermark, so only committed data
  is read (REQ-R7).

Offsets in the checkpoint are Spark's Kafka JSON, ``{"topic": {"0": 42}}``: the next
offset to read per partition, so a restarted query resumes exactly where the last
committed batch ended.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from odradek.errors import ErrorCode, KafkaError
from odradek.spark import offsets as om
from odradek.spark.arrow import arrow_schema, messages_to_batch, spark_ddl
from odradek.spark.offsets import (
    TP,
    DataLossError,
    OffsetRange,
    SparkOptionError,
    client_security,
)
from odradek.spark.value_format import ValueOptions, make_decoder, value_ddl, value_options

__all__ = [
    "OdradekDataSource",
    "SourceOptions",
    "OdradekStreamReader",
    "OdradekBatchReader",
    "RangePartition",
    "read_range",
    "client_config",
    "parse_client",
    "CLIENTS",
    "DEFAULT_CLIENT",
]

logger = logging.getLogger("odradek.spark")

# kafka.* options Spark's Kafka source refuses because the source manages them itself.
_FORBIDDEN_KAFKA = (
    "auto.offset.reset",
    "enable.auto.commit",
    "key.deserializer",
    "value.deserializer",
    "interceptor.classes",
)
_ROWS_PER_BATCH = 8192  # Arrow batch size: large enough to amortize, small enough to stream
# Which client moves the records (docs/spark.md, "Two clients"); chosen by benchmark.
CLIENTS = ("columnar", "confluent")
DEFAULT_CLIENT = "columnar"


def parse_client(options: Mapping[str, str], conf: Mapping[str, str]) -> str:
    """``odradek.client``: columnar (Odradek's Fetch/Produce client, Arrow in and out) or
    confluent (librdkafka through confluent-kafka, one Python object per record)."""
    client = str(options.get("odradek.client", DEFAULT_CLIENT)).strip().lower()
    if client not in CLIENTS:
        raise SparkOptionError(
            f"option 'odradek.client' must be one of {', '.join(CLIENTS)}, got {client!r}"
        )
    if client == "columnar":
        client_security(conf)  # a bad security setting fails the query at once
    return client


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options -> librdkafka config (prefix stripped), bootstrap required."""
    conf = {k[len("kafka.") :]: str(v) for k, v in options.items() if k.startswith("kafka.")}
    if not conf.get("bootstrap.servers"):
        raise SparkOptionError(
            "Option 'kafka.bootstrap.servers' must be specified for "
            "configuring the odradek source/sink"
        )
    return conf


@dataclass(frozen=True)
class SourceOptions:
    """Parsed, validated source options (picklable: shipped to executors)."""

    conf: dict[str, str]
    subscription: om.Subscription
    starting: om.OffsetSpec
    ending: om.OffsetSpec
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    poll_timeout_s: float
    fetch_retries: int = 30
    fetch_retry_interval_s: float = 1.0
    client: str = DEFAULT_CLIENT  # odradek.client: "columnar" or "confluent"
    value: ValueOptions | None = None  # value.format avro/protobuf/json: the reader schema

    @classmethod
    def parse(
        cls, options: Mapping[str, str], *, streaming: bool, value: ValueOptions | None = None
    ) -> SourceOptions:
        """``value``: the value format already resolved by ``schema()`` (the same reader
        schema for the whole query); resolved here when Spark did not ask for a schema."""
        conf = client_config(options)
        for k in _FORBIDDEN_KAFKA:
            if k in conf:
                raise SparkOptionError(
                    f"odradek option 'kafka.{k}' is not supported: the "
                    "source manages it (use startingOffsets / "
                    "failOnDataLoss instead)"
                )
        timeout_ms = om.parse_positive_int(options, "kafkaConsumer.pollTimeoutMs") or 120_000
        subscription = om.parse_subscription(options)
        return cls(
            conf=conf,
            subscription=subscription,
            starting=om.starting_spec(options, streaming=streaming),
            ending=om.ending_spec(options, streaming=streaming),
            fail_on_data_loss=om.parse_bool(options, "failOnDataLoss", True),
            include_headers=om.parse_bool(options, "includeHeaders", False),
            max_offsets_per_trigger=om.parse_positive_int(options, "maxOffsetsPerTrigger"),
            min_partitions=om.parse_positive_int(options, "minPartitions"),
            poll_timeout_s=timeout_ms / 1000.0,
            fetch_retries=om.parse_positive_int(options, "fetchOffset.numRetries") or 30,
            fetch_retry_interval_s=(
                om.parse_positive_int(options, "fetchOffset.retryIntervalMs") or 1000
            )
            / 1000.0,
            client=parse_client(options, conf),
            value=value if value is not None else value_options(options, subscription),
        )


class RangePartition(InputPartition):
    """One Spark task: ``[start, end)`` of one topic-partition, kept in ``value``."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))

    def __repr__(self) -> str:
        return f"RangePartition{self.value!r}"


# --------------------------------------------------------------------------- driver side


def _transient(err: Any) -> bool:
    """Errors an election or a metadata refresh will clear (Kafka's retriable ones)."""
    from confluent_kafka import KafkaError as CKError

    if err is None or not hasattr(err, "code"):
        return True
    return bool(err.retriable()) or err.code() in (
        CKError.LEADER_NOT_AVAILABLE,
        CKError.NOT_LEADER_FOR_PARTITION,
        CKError.UNKNOWN_TOPIC_OR_PART,
        CKError.REQUEST_TIMED_OUT,
        CKError.OFFSET_NOT_AVAILABLE,
        CKError.UNKNOWN_LEADER_EPOCH,
        CKError.FENCED_LEADER_EPOCH,
        CKError._TRANSPORT,
        CKError._TIMED_OUT,
        CKError._ALL_BROKERS_DOWN,
        CKError._UNKNOWN_PARTITION,
        CKError._NOENT,
    )  # _NOENT: "No leaders found" while the admin's metadata catches up


def read_committed(conf: Mapping[str, str]) -> bool:
    """``kafka.isolation.level`` (librdkafka's default, read_committed, when absent)."""
    return str(conf.get("isolation.level", "read_committed")).lower() == "read_committed"


def list_offsets_retrying(
    admin: Any,
    req: Mapping[Any, Any],
    retries: int,
    interval_s: float,
    conf: Mapping[str, str] | None = None,
    *,
    committed: bool = False,
) -> dict[Any, int]:
    """AdminClient.list_offsets, retrying partitions that fail with a retriable error.

    A topic created a moment ago, or a partition whose leader just died, answers
    LEADER_NOT_AVAILABLE / NOT_LEADER_OR_FOLLOWER until an election completes (seconds
    after a broker crash); Spark retries its offset fetches too (fetchOffset.*).

    Measured here: a long-lived librdkafka AdminClient keeps sending ListOffsets to a
    SIGKILLed leader, each request timing out and the future resolving to offset -1001
    (OFFSET_INVALID) without an error, for minutes; a fresh client finds the new leader
    at once. So every retry uses a fresh AdminClient (when ``conf`` is given).
    """
    from confluent_kafka import IsolationLevel, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._listoffsets import TimestampSpec

    # KIP-98: under read_committed "latest" is the last stable offset, so a micro-batch
    # never ends inside an open transaction (its reader would wait for it to finish).
    iso = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    out: dict[Any, int] = {}
    todo = dict(req)
    for attempt in range(retries + 1):
        failed: dict[Any, Any] = {}
        last: Exception | None = None
        if attempt and conf is not None:
            admin = AdminClient(dict(conf))
        for tp, fut in admin.list_offsets(todo, request_timeout=10, isolation_level=iso).items():
            try:
                off = int(fut.result().offset)
                if off < 0 and not isinstance(todo[tp], TimestampSpec):
                    # A leader elected a moment ago answered before it knew its high
                    # watermark (seen: -1001 for ~0.1 s after a failover). Only a
                    # timestamp lookup may legitimately answer -1 (no match).
                    last = KafkaError(
                        ErrorCode.offset_not_available,
                        f"ListOffsets {tp.topic}-{tp.partition}: offset {off}",
                    )
                    if attempt == retries:
                        raise last
                    failed[tp] = todo[tp]
                    continue
                out[tp] = off
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if attempt < retries and _transient(err):
                    failed[tp] = todo[tp]
                    last = e
                else:
                    raise
        if not failed:
            return out
        logger.info(
            "odradek source: ListOffsets retry %d for %d partitions (%s)",
            attempt + 1,
            len(failed),
            last,
        )
        todo = failed
        time.sleep(min(interval_s, 0.1 * 2**attempt))  # quick first retries
    return out


class _ClusterView:
    """Metadata and ListOffsets through one AdminClient (driver-side only)."""

    def __init__(self, conf: Mapping[str, str], retries: int, retry_interval_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        self._conf = dict(conf)
        # librdkafka reports a refused SASL login only to error_cb; list_topics then fails
        # with a bare "transport failure". Kept, so the job says why it failed.
        self._auth_error: Any = None
        self._admin = AdminClient({**self._conf, "error_cb": self._on_error})
        self._retries = retries
        self._retry_interval_s = retry_interval_s

    def _on_error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() == KafkaError._AUTHENTICATION:
            self._auth_error = err

    def partition_counts(self) -> dict[str, int]:
        from confluent_kafka import KafkaException

        try:
            md = self._admin.list_topics(timeout=30)
        except KafkaException as e:
            self._admin.poll(0.5)  # serves error_cb (librdkafka queues it)
            if self._auth_error is not None:
                raise KafkaException(self._auth_error) from e
            raise
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def list_offsets(self, queries: Mapping[TP, int]) -> dict[TP, int]:
        """``{tp: EARLIEST | LATEST | timestamp_ms}`` -> offsets (-1: no match)."""
        if not queries:
            return {}
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        req = {}
        for (topic, p), q in queries.items():
            spec = (
                OffsetSpec.earliest()
                if q == om.EARLIEST
                else OffsetSpec.latest()
                if q == om.LATEST
                else OffsetSpec.for_timestamp(q)
            )
            req[TopicPartition(topic, p)] = spec
        got = list_offsets_retrying(
            self._admin,
            req,
            self._retries,
            self._retry_interval_s,
            self._conf,
            committed=read_committed(self._conf),
        )
        return {(tp.topic, tp.partition): off for tp, off in got.items()}

    def earliest(self, tps: list[TP]) -> dict[TP, int]:
        return self.list_offsets({tp: om.EARLIEST for tp in tps})

    def latest(self, tps: list[TP]) -> dict[TP, int]:
        return self.list_offsets({tp: om.LATEST for tp in tps})

    def resolve(self, spec: om.OffsetSpec, tps: list[TP], *, is_start: bool) -> dict[TP, int]:
        earliest = self.earliest(tps) if spec.kind in ("earliest", "offsets") else {}
        latest = self.latest(tps) if spec.kind != "earliest" else {}
        by_ts: dict[TP, int | None] = dict(self.list_offsets(om.timestamp_queries(spec, tps)))
        return om.resolve(spec, tps, earliest, latest, by_ts, is_start=is_start)


class _NativeClusterView(_ClusterView):
    """The same view through Odradek's own client (``odradek.client=columnar``): one
    connection per broker and synchronous requests; planning a micro-batch costs a few
    round trips instead of a librdkafka AdminClient's start-up and polling (measured:
    ~150 ms of a batch read's planning)."""

    def __init__(self, conf: Mapping[str, str], retries: int, retry_interval_s: float) -> None:
        from odradek.client.cluster import ClusterClient

        self._isolation = 1 if read_committed(conf) else 0
        self._cluster = ClusterClient(
            conf["bootstrap.servers"],
            client_id=conf.get("client.id", "odradek-spark"),
            timeout_s=int(conf.get("socket.timeout.ms", 60_000)) / 1000,
            security=client_security(conf),
        )
        self._retries = retries
        self._retry_interval_s = retry_interval_s

    def partition_counts(self) -> dict[str, int]:
        md = self._retrying(lambda: self._cluster.refresh(None))
        counts: dict[str, int] = {}
        for topic, _p in md.partitions:
            if md.topic_errors.get(topic, 0) == ErrorCode.none:
                counts[topic] = counts.get(topic, 0) + 1
        return counts

    def list_offsets(self, queries: Mapping[TP, int]) -> dict[TP, int]:
        """``{tp: EARLIEST | LATEST | timestamp_ms}`` -> offsets (-1: no match)."""
        from odradek.client.cluster import EARLIEST, LATEST

        out: dict[TP, int] = {}
        todo = dict(queries)
        for attempt in range(self._retries + 1):
            got = self._cluster.list_offsets(
                todo,
                retries=self._retries,
                retry_interval_s=self._retry_interval_s,
                isolation_level=self._isolation,
            )
            # A leader elected a moment ago may answer before it knows its high
            # watermark; only a timestamp lookup may legitimately answer -1 (no match).
            bad = {tp for tp, off in got.items() if off < 0 and todo[tp] in (EARLIEST, LATEST)}
            out.update({tp: off for tp, off in got.items() if tp not in bad})
            if not bad:
                return out
            if attempt == self._retries:
                raise KafkaError(
                    ErrorCode.offset_not_available,
                    f"ListOffsets {sorted(bad)[:3]}: negative offsets",
                )
            todo = {tp: todo[tp] for tp in bad}
            time.sleep(min(self._retry_interval_s, 0.1 * 2**attempt))
        return out

    def _retrying(self, call: Any) -> Any:
        from odradek.client.connection import ConnectionLost

        for attempt in range(self._retries + 1):
            try:
                return call()
            except (ConnectionLost, KafkaError) as e:
                if attempt == self._retries or (isinstance(e, KafkaError) and not e.retriable):
                    raise
                time.sleep(min(self._retry_interval_s, 0.1 * 2**attempt))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._cluster.close()


class _DriverBase:
    """State shared by both readers; the AdminClient is dropped when pickled."""

    opts: SourceOptions
    _view: _ClusterView | None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view"] = None
        return state

    @property
    def view(self) -> _ClusterView:
        if self._view is None:
            cls = _NativeClusterView if self.opts.client == "columnar" else _ClusterView
            self._view = cls(
                self.opts.conf, self.opts.fetch_retries, self.opts.fetch_retry_interval_s
            )
        return self._view

    def current_partitions(self) -> list[TP]:
        """Partitions the subscription reads now (new topics/partitions included)."""
        sub = self.opts.subscription
        counts = self.view.partition_counts()
        if sub.kind == "assign":
            missing = [tp for tp in sub.partitions if tp[1] >= counts.get(tp[0], 0)]
            if missing and self.opts.fail_on_data_loss:
                raise DataLossError(f"assigned partitions {sorted(missing)} do not exist")
            return [tp for tp in sub.partitions if tp not in missing]
        return sub.select(counts)

    def plan(self, start: dict[TP, int], end: dict[TP, int]) -> list[RangePartition]:
        earliest = self.view.earliest(sorted(end))
        ranges, problems = om.plan_ranges(
            start, end, earliest, fail_on_data_loss=self.opts.fail_on_data_loss
        )
        for msg in problems:
            logger.warning("odradek source: %s (failOnDataLoss=false: continuing)", msg)
        return [
            RangePartition(r.topic, r.partition, r.start, r.end)
            for r in om.split_ranges(ranges, self.opts.min_partitions)
        ]


class OdradekStreamReader(_DriverBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader: offsets are ``{"topic": {"partition": next_offset}}``."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._view = None
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow's end point

    def initialOffset(self) -> dict[str, Any]:
        tps = self.current_partitions()
        return om.to_json(self.view.resolve(self.opts.starting, tps, is_start=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Everything committed now, and nothing after it (new partitions included).
        self._target = self.view.latest(self.current_partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        frm = om.from_json(start)
        latest = (
            dict(self._target)
            if self._target is not None
            else self.view.latest(self.current_partitions())
        )
        if isinstance(limit, ReadMaxRows):
            new = [tp for tp in latest if tp not in frm]
            end = om.rate_limit(frm, latest, limit.max_rows, new_start=self.view.earliest(new))
        else:
            end = latest
        return om.to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        return self.plan(om.from_json(start), om.from_json(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to do: Spark's checkpoint is the only record of progress (Spark's Kafka
        # source commits nothing to Kafka either). Arrives one batch late (docs/platform-notes.md).
        pass

    def stop(self) -> None:
        # may never be called (docs/spark.md); the view's connections then close with the process
        if isinstance(self._view, _NativeClusterView):
            self._view.close()
        self._view = None


class OdradekBatchReader(_DriverBase, DataSourceReader):
    """``spark.read``: one snapshot ``[startingOffsets, endingOffsets)``."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._view = None

    def partitions(self) -> list[RangePartition]:
        tps = self.current_partitions()
        start = self.view.resolve(self.opts.starting, tps, is_start=True)
        end = self.view.resolve(self.opts.ending, tps, is_start=False)
        for tp in tps:
            if end[tp] < start[tp]:
                raise SparkOptionError(
                    f"{tp[0]}-{tp[1]}: ending offset {end[tp]} is below starting offset {start[tp]}"
                )
        return self.plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition)


# --------------------------------------------------------------------------- executors


def read_range(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Yield ``[start, end)`` of one partition as Arrow batches, with the chosen client."""
    if opts.client == "columnar":
        from odradek.spark.columnar_source import read_range_columnar

        batches = read_range_columnar(opts, partition)
    else:
        batches = read_range_confluent(opts, partition)
    if opts.value is None or not isinstance(partition.value, (tuple, list)):
        return batches
    return _decode_values(opts.value, opts.include_headers, batches, OffsetRange(*partition.value))


def _decode_values(
    value: ValueOptions, include_headers: bool, batches: Iterator[pa.RecordBatch], r: OffsetRange
) -> Iterator[pa.RecordBatch]:
    """Either client's batches with ``value`` replaced by the decoded columns."""
    decoder = make_decoder(value, arrow_schema(include_headers))
    for batch in batches:
        yield decoder.transform(batch, r.topic, r.partition)


def read_range_confluent(
    opts: SourceOptions, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    """Yield ``[r.start, r.end)`` of one partition as Arrow batches (confluent-kafka).

    Stops as soon as the position reaches ``r.end`` (offsets may have gaps once
    compaction exists, so "position >= end" rather than counting records). A start
    below the log start is data loss: with failOnDataLoss the consumer's offset reset
    is an error, otherwise librdkafka resets to the earliest offset and we skip ahead.
    """
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka import KafkaError as CKError
    from confluent_kafka import KafkaException as CKException

    # Only ``value`` is relied on: a reused Python worker may hold another copy of the
    # class, and Spark hands a bare InputPartition(None) when a batch plan is empty.
    if not isinstance(partition.value, (tuple, list)):
        return
    r = OffsetRange(*partition.value)

    conf: dict[str, Any] = {
        "group.id": f"odradek-spark-{uuid.uuid4().hex[:12]}",  # never joined nor committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        # librdkafka backs off 1 s whenever its prefetch queue is full; a task that only
        # drains a bounded range wants the next fetch at once (measured ~1.5-2x faster).
        "fetch.queue.backoff.ms": 0,
        **opts.conf,
        "auto.offset.reset": "error" if opts.fail_on_data_loss else "earliest",
    }
    consumer = Consumer(conf)
    tp = TopicPartition(r.topic, r.partition, r.start)
    try:
        consumer.assign([tp])
        pos = r.start
        pending: list[Any] = []
        deadline = time.monotonic() + opts.poll_timeout_s
        while pos < r.end:
            msgs = consumer.consume(num_messages=min(_ROWS_PER_BATCH, r.end - pos), timeout=0.5)
            progressed = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == CKError._AUTO_OFFSET_RESET:
                        raise DataLossError(
                            f"Cannot fetch offset {pos} of {r.topic}-{r.partition}"
                            f": it is out of range ({err.str()})"
                        )
                    if err.code() == CKError._PARTITION_EOF:
                        continue
                    raise KafkaError(
                        ErrorCode.unknown_server_error,
                        f"fetch {r.topic}-{r.partition} @{pos}: {err.str()}",
                    )
                off = m.offset()
                if off < pos:  # reset below our start (offsets went backwards): not ours
                    continue
                if off >= r.end:
                    pos = r.end
                    break
                if off > pos and pos == r.start and not opts.fail_on_data_loss:
                    logger.warning(
                        "odradek source: %s-%d skipped offsets %d..%d (no longer "
                        "available; failOnDataLoss=false)",
                        r.topic,
                        r.partition,
                        pos,
                        off - 1,
                    )
                pending.append(m)
                pos = off + 1
                progressed = True
            if len(pending) >= _ROWS_PER_BATCH or (pending and pos >= r.end):
                yield messages_to_batch(
                    pending, opts.include_headers, topic=r.topic, partition=r.partition
                )
                pending = []
            if progressed:
                deadline = time.monotonic() + opts.poll_timeout_s
                continue
            if pos >= r.end:
                break
            # Nothing arrived: is the rest of the range still there? (Known gap: once
            # compaction exists, a range whose tail was compacted away and has no later
            # record waits for kafkaConsumer.pollTimeoutMs; librdkafka does not expose
            # its fetch position past a gap.)
            try:
                wm = consumer.get_watermark_offsets(
                    TopicPartition(r.topic, r.partition), timeout=10, cached=False
                )
            except CKException:  # e.g. leader election in progress: keep waiting
                wm = None
            if wm is not None and wm[1] <= pos:
                msg = (
                    f"{r.topic}-{r.partition}: offsets {pos}..{r.end - 1} were planned but "
                    f"the log now ends at {wm[1]}"
                )
                if opts.fail_on_data_loss:
                    raise DataLossError(msg)
                logger.warning("odradek source: %s (failOnDataLoss=false: skipping)", msg)
                break
            if time.monotonic() > deadline:
                raise KafkaError(
                    ErrorCode.request_timed_out,
                    f"no records from {r.topic}-{r.partition} at offset {pos} "
                    f"within kafkaConsumer.pollTimeoutMs",
                )
        if pending:
            yield messages_to_batch(
                pending, opts.include_headers, topic=r.topic, partition=r.partition
            )
    finally:
        consumer.close()


# --------------------------------------------------------------------------- data source


class OdradekDataSource(DataSource):
    """``format("odradek")``: Spark's Kafka source and sink options and schema."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> str:
        headers = om.parse_bool(self.options, "includeHeaders", False)
        value = self._value_options()
        return spark_ddl(headers) if value is None else value_ddl(value, headers)

    def _value_options(self) -> ValueOptions | None:
        # Resolved once: the reader schema behind schema() is the one the readers decode
        # to, even if a new version is registered between load() and the first batch.
        if not hasattr(self, "_value"):
            self._value = value_options(self.options, om.parse_subscription(self.options))
        return self._value

    def reader(self, schema: StructType) -> DataSourceReader:
        return OdradekBatchReader(
            SourceOptions.parse(self.options, streaming=False, value=self._value_options())
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OdradekStreamReader(
            SourceOptions.parse(self.options, streaming=True, value=self._value_options())
        )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from odradek.spark.sink import OdradekBatchWriter

        return OdradekBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from odradek.spark.sink import OdradekStreamWriter

        return OdradekStreamWriter(self.options, schema)
