"""The ``odradek`` Spark source against a real cluster (issue 7, item 1 and its proof).

One local[2] SparkSession and one single-broker cluster per module (Spark starts in
8-15 s). Streaming tests collect rows with ``foreachBatch`` keyed by batch id, so a
batch Spark replays after a stop overwrites its own entry: what remains is exactly what
the source delivered per batch, and duplicates or gaps are the source's fault.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tests.support.polling import wait_until
from tests.support.topics import create_topic as support_create_topic
from tests.support.topics import wait_for_leaders

pyspark = pytest.importorskip("pyspark")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402
from spark_util import local_spark  # noqa: E402

from odradek.cluster.local import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BASE_TS = 1_700_000_000_000  # ms; records get BASE_TS + offset * 1000 per partition


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_spark("odradek-source-tests")


# A query reads a topic as soon as it exists: wait for its leaders.
create_topic = partial(support_create_topic, wait_leaders=True, timeout=60.0)


def produce(
    bootstrap: str,
    topic: str,
    partitions: int,
    n: int,
    *,
    tag: str = "r",
    first_offset: int = 0,
    headers: bool = False,
) -> None:
    """``n`` records round-robin over partitions; value ``tag-i``; timestamps by offset.

    The record that will get offset ``o`` in its partition has timestamp
    BASE_TS + o * 1000 (``first_offset`` = offsets already in every partition).
    """
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    errors: list[Any] = []
    for i in range(n):
        part = i % partitions
        off = first_offset + i // partitions
        p.produce(
            topic,
            f"{tag}-{i}".encode(),
            f"k{i}".encode(),
            partition=part,
            timestamp=BASE_TS + off * 1000,
            headers=[("h", f"{i}".encode()), ("n", None)] if headers and i % 2 else None,
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
        p.poll(0)
    assert p.flush(30) == 0 and not errors, errors[:3]


wait_for = partial(wait_until, timeout=60.0, interval=0.2)  # Spark micro-batches: slower


def reader(spark: Any, bootstrap: str, *, stream: bool, **opts: Any) -> Any:
    r = (spark.readStream if stream else spark.read).format("odradek")
    r = r.option("kafka.bootstrap.servers", bootstrap)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def collect_both(spark: Any, bootstrap: str, **opts: Any) -> list[Any]:
    """A batch read through both clients (issue 17): the columnar client's rows, after
    checking that confluent-kafka's per-record path returns exactly the same rows."""
    got = {}
    for client in ("columnar", "confluent"):
        rows = reader(
            spark, bootstrap, stream=False, **{"odradek.client": client}, **opts
        ).collect()
        got[client] = sorted(rows, key=lambda r: (r.topic, r.partition, r.offset))
    assert got["columnar"] == got["confluent"]
    return got["columnar"]


class Collector:
    """foreachBatch sink: rows per batch id (a replayed batch replaces its entry)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[str, int, int, str]]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches[batch_id] = [
            (r.topic, r.partition, r.offset, r.value.decode())
            for r in df.select("topic", "partition", "offset", "value").collect()
        ]

    @property
    def rows(self) -> list[tuple[str, int, int, str]]:
        return [r for b in sorted(self.batches) for r in self.batches[b]]

    def count(self) -> int:
        return sum(len(b) for b in self.batches.values())


def start_stream(df: Any, sink: Collector, checkpoint: Path, **trigger: Any) -> Any:
    return (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"processingTime": "200 milliseconds"}))
        .start()
    )


def assert_exactly(
    rows: list[tuple[str, int, int, str]], expected: set[tuple[str, int, int]]
) -> None:
    keys = [(t, p, o) for t, p, o, _ in rows]
    assert len(keys) == len(set(keys)), "a record was delivered twice"
    assert set(keys) == expected, (
        f"missing {sorted(expected - set(keys))[:5]}, extra {sorted(set(keys) - expected)[:5]}"
    )


def offsets_of(
    topic: str, partitions: int, n_per_partition: int, start: int = 0
) -> set[tuple[str, int, int]]:
    return {(topic, p, o) for p in range(partitions) for o in range(start, n_per_partition)}


# --------------------------------------------------------------------------- batch reads


def test_batch_read_schema_and_records(spark: Any, cluster: LocalCluster, topic_name: str) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 3)
    produce(bs, topic_name, 3, 90, headers=True)
    df = reader(spark, bs, stream=False, subscribe=topic_name, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = collect_both(spark, bs, subscribe=topic_name, includeHeaders="true")
    assert len(rows) == 90
    for r in rows:
        i = int(r.value.decode().split("-")[1])
        assert (r.partition, r.offset) == (i % 3, i // 3)
        assert r.key == f"k{i}".encode()
        assert r.timestampType == 0  # CreateTime
        assert int(r.timestamp.timestamp() * 1000) == BASE_TS + r.offset * 1000
        if i % 2:
            assert [(h.key, h.value) for h in r.headers] == [("h", f"{i}".encode()), ("n", None)]
        else:
            assert r.headers is None
    # minPartitions splits ranges into more tasks without changing the result.
    df = reader(spark, bs, stream=False, subscribe=topic_name, minPartitions=6)
    assert df.rdd.getNumPartitions() == 6
    split = collect_both(spark, bs, subscribe=topic_name, minPartitions=6)
    assert [(r.partition, r.offset) for r in split] == sorted((i % 3, i // 3) for i in range(90))


def test_batch_read_offset_ranges(spark: Any, cluster: LocalCluster, topic_name: str) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 2)
    produce(bs, topic_name, 2, 40)  # offsets 0..19 in each partition
    rows = collect_both(
        spark,
        bs,
        assign=f'{{"{topic_name}":[0,1]}}',
        startingOffsets=f'{{"{topic_name}":{{"0":5,"1":-2}}}}',
        endingOffsets=f'{{"{topic_name}":{{"0":8,"1":-1}}}}',
    )
    got = [(r.partition, r.offset) for r in rows]
    assert got == [(0, o) for o in range(5, 8)] + [(1, o) for o in range(0, 20)]
    with pytest.raises(Exception, match="starting offset can't be latest"):
        reader(spark, bs, stream=False, subscribe=topic_name, startingOffsets="latest").collect()
    with pytest.raises(Exception, match="exactly one"):
        reader(spark, bs, stream=False, subscribe=topic_name, subscribePattern="x.*").collect()


def test_batch_read_timestamp_ranges(spark: Any, cluster: LocalCluster, topic_name: str) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 2)
    produce(bs, topic_name, 2, 40)  # timestamp of offset o = BASE_TS + o*1000

    def read(**opts: Any) -> list[tuple[int, int]]:
        return [
            (r.partition, r.offset) for r in collect_both(spark, bs, subscribe=topic_name, **opts)
        ]

    assert read(startingTimestamp=BASE_TS + 15_000) == [
        (p, o) for p in (0, 1) for o in range(15, 20)
    ]
    # between timestamps the first offset at or after the timestamp is used
    assert read(
        startingOffsetsByTimestamp=f'{{"{topic_name}":{{"0":{BASE_TS + 2500},"1":{BASE_TS}}}}}',
        endingOffsetsByTimestamp=f'{{"{topic_name}":{{"0":{BASE_TS + 6000},"1":{BASE_TS + 2000}}}}}',
    ) == ([(0, o) for o in range(3, 6)] + [(1, o) for o in range(0, 2)])
    # no record at or after the starting timestamp: Spark's strategy option decides
    with pytest.raises(Exception, match="No offset matched the starting timestamp"):
        read(startingTimestamp=BASE_TS + 10**9)
    assert (
        read(startingTimestamp=BASE_TS + 10**9, startingOffsetsByTimestampStrategy="latest") == []
    )
    # an ending timestamp past the end means latest
    assert len(read(endingTimestamp=BASE_TS + 10**9)) == 40


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("client", ["columnar", "confluent"])
def test_stream_restart_resumes_exactly(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path, client: str
) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 3)
    produce(bs, topic_name, 3, 150, tag="a")  # 50 per partition
    sink = Collector()
    df = reader(
        spark,
        bs,
        stream=True,
        subscribe=topic_name,
        startingOffsets="earliest",
        **{"odradek.client": client},
    )
    q = start_stream(df, sink, tmp_path / "ck")
    try:
        wait_for(lambda: sink.count() >= 150, "first 150 rows")
        produce(bs, topic_name, 3, 60, tag="b", first_offset=50)  # while running
        wait_for(lambda: sink.count() >= 210, "210 rows")
    finally:
        q.stop()
    produce(bs, topic_name, 3, 90, tag="c", first_offset=70)  # while stopped
    q = start_stream(
        reader(spark, bs, stream=True, subscribe=topic_name, **{"odradek.client": client}),
        sink,
        tmp_path / "ck",
    )
    try:
        wait_for(lambda: sink.count() >= 300, "all 300 rows after restart")
        q.processAllAvailable()
    finally:
        q.stop()
    assert_exactly(sink.rows, offsets_of(topic_name, 3, 100))


def test_max_offsets_per_trigger_and_available_now(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 3)
    produce(bs, topic_name, 3, 601)  # 201/200/200: uneven on purpose
    sink = Collector()
    df = reader(
        spark,
        bs,
        stream=True,
        subscribe=topic_name,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=70,
    )
    q = start_stream(df, sink, tmp_path / "ck", availableNow=True)
    assert q.awaitTermination(120), "AvailableNow query did not stop by itself"
    assert q.exception() is None
    sizes = [len(sink.batches[b]) for b in sorted(sink.batches)]
    assert max(sizes) <= 70, sizes
    assert len(sizes) >= 9, sizes  # ceil(601 / 70)
    assert_exactly(sink.rows, offsets_of(topic_name, 3, 200) | {(topic_name, 0, 200)})
    # AvailableNow again from the checkpoint: only what arrived since.
    produce(bs, topic_name, 3, 30, tag="late", first_offset=201)
    q = start_stream(df, sink, tmp_path / "ck", availableNow=True)
    assert q.awaitTermination(120)
    assert sink.count() == 631


def test_subscribe_pattern_picks_up_new_topics_and_partitions(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap_servers
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    create_topic(bs, first, 1)
    produce(bs, first, 1, 10)
    sink = Collector()
    df = reader(
        spark, bs, stream=True, subscribePattern=f"{topic_name}-.*", startingOffsets="earliest"
    )
    q = start_stream(df, sink, tmp_path / "ck")
    try:
        wait_for(lambda: sink.count() >= 10, "rows of the first topic")
        create_topic(bs, second, 2)
        produce(bs, second, 2, 20)  # records written before the query sees the topic
        wait_for(lambda: sink.count() >= 30, "rows of the new topic, from its earliest offset")
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_partitions([NewPartitions(first, 2)])[first].result(30)
        wait_for_leaders(admin, first, 2, timeout=60.0)
        p = Producer({"bootstrap.servers": bs})
        for i in range(5):
            p.produce(first, f"new-{i}".encode(), partition=1)
        assert p.flush(30) == 0
        wait_for(lambda: sink.count() >= 35, "rows of the added partition")
        q.processAllAvailable()
    finally:
        q.stop()
    assert_exactly(
        sink.rows,
        offsets_of(first, 1, 10) | offsets_of(second, 2, 10) | {(first, 1, o) for o in range(5)},
    )


def test_fail_on_data_loss_when_offsets_go_backwards(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    """A topic deleted and recreated under a running query: its offsets went backwards."""
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 1)
    produce(bs, topic_name, 1, 30)
    sink = Collector()
    df = reader(spark, bs, stream=True, subscribe=topic_name, startingOffsets="earliest")
    q = start_stream(df, sink, tmp_path / "ck", availableNow=True)
    assert q.awaitTermination(120) and sink.count() == 30
    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_topics([topic_name], operation_timeout=30)[topic_name].result(30)
    wait_for(lambda: _recreate(admin, topic_name), "topic recreated", timeout=60)
    wait_for_leaders(admin, topic_name, 1, timeout=60.0)
    produce(bs, topic_name, 1, 10, tag="new")  # offsets 0..9 < checkpointed 30
    q = start_stream(df, sink, tmp_path / "ck", availableNow=True)
    with pytest.raises(Exception, match="offset was changed from 30 to 10"):
        q.awaitTermination(120)
    # failOnDataLoss=false: the lost range is skipped (logged) and reading goes on.
    lenient = reader(spark, bs, stream=True, subscribe=topic_name, failOnDataLoss="false")
    q = start_stream(lenient, sink, tmp_path / "ck", availableNow=True)
    assert q.awaitTermination(120) and q.exception() is None
    produce(bs, topic_name, 1, 5, tag="newer", first_offset=10)
    q = start_stream(lenient, sink, tmp_path / "ck", availableNow=True)
    assert q.awaitTermination(120) and q.exception() is None
    assert [v for _, _, o, v in sink.rows if v.startswith("newer")] == [
        f"newer-{i}" for i in range(5)
    ]


def _recreate(admin: AdminClient, name: str) -> bool:
    try:
        admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=20)[name].result(30)
        return True
    except Exception:  # still being deleted: TOPIC_ALREADY_EXISTS until it is gone
        return False


def _delete_records(bs: str, topic: str, partition: int, before: int) -> None:
    """DeleteRecords (REQ-R24): the log start offset becomes ``before``."""
    from confluent_kafka import TopicPartition

    admin = AdminClient({"bootstrap.servers": bs})
    (fut,) = admin.delete_records([TopicPartition(topic, partition, before)]).values()
    assert fut.result(30).low_watermark == before


def test_fail_on_data_loss_when_retention_removed_unread_data(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    """Spark's Kafka source semantics once the log start passed unread offsets (issue 5):
    failOnDataLoss=true fails the query with a clear message; false skips to the new
    earliest offset, logs a warning and goes on. Planning-time detection (a checkpoint
    below the log start) through Spark, and the executor path (the records vanish
    between planning and reading) through ``read_range`` with a real consumer."""
    from odradek.spark.offsets import DataLossError
    from odradek.spark.source import RangePartition, SourceOptions, read_range

    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 1)
    produce(bs, topic_name, 1, 20)
    sink = Collector()
    df = reader(spark, bs, stream=True, subscribe=topic_name, startingOffsets="earliest")
    q = start_stream(df, sink, tmp_path / "ck", availableNow=True)
    assert q.awaitTermination(120) and q.exception() is None and sink.count() == 20
    produce(bs, topic_name, 1, 20, tag="later", first_offset=20)  # offsets 20..39 unread
    _delete_records(bs, topic_name, 0, 30)  # 20..29 go before the query saw them
    q = start_stream(df, sink, tmp_path / "ck", availableNow=True)
    with pytest.raises(Exception, match="from offset 20: the log starts at 30"):
        q.awaitTermination(120)
    assert sink.count() == 20
    lenient = reader(spark, bs, stream=True, subscribe=topic_name, failOnDataLoss="false")
    q = start_stream(lenient, sink, tmp_path / "ck", availableNow=True)
    assert q.awaitTermination(120) and q.exception() is None
    assert [o for _, _, o, _ in sink.rows] == list(range(20)) + list(range(30, 40))
    # A batch read from an explicit offset below the log start behaves the same.
    old = {"startingOffsets": f'{{"{topic_name}":{{"0":5}}}}'}
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, bs, stream=False, subscribe=topic_name, **old).collect()
    rows = (
        reader(spark, bs, stream=False, subscribe=topic_name, failOnDataLoss="false", **old)
        .select("offset")
        .collect()
    )
    assert [r.offset for r in rows] == list(range(30, 40))

    # Executor path: the range [30, 40) was planned, then DeleteRecords moved the start
    # to 35 before the task read it.
    _delete_records(bs, topic_name, 0, 35)
    part = RangePartition(topic_name, 0, 30, 40)
    for client in ("columnar", "confluent"):
        strict = SourceOptions.parse(
            {
                "kafka.bootstrap.servers": bs,
                "subscribe": topic_name,
                "kafkaConsumer.pollTimeoutMs": "20000",
                "odradek.client": client,
            },
            streaming=True,
        )
        with pytest.raises(DataLossError, match="failOnDataLoss"):
            list(read_range(strict, part))
        loose = SourceOptions.parse(
            {
                "kafka.bootstrap.servers": bs,
                "subscribe": topic_name,
                "failOnDataLoss": "false",
                "odradek.client": client,
                "kafkaConsumer.pollTimeoutMs": "20000",
            },
            streaming=True,
        )
        got = [o for batch in read_range(loose, part) for o in batch.column("offset").to_pylist()]
        assert got == list(range(35, 40)), client


_CONNECT_SCRIPT = r'''
import sys
from pyspark.sql import SparkSession
from odradek.spark import register
bs, topic, out, ck = sys.argv[1:5]
spark = SparkSession.builder.remote("local[2]").getOrCreate()
try:
    register(spark)
    n = spark.read.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", topic).load().count()
    q = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs)
         .option("subscribe", topic).option("startingOffsets", "earliest").load()
         .selectExpr("value", "CAST(partition AS STRING) AS key")
         .writeStream.format("odradek").option("kafka.bootstrap.servers", bs).option("topic", out)
         .option("checkpointLocation", ck).trigger(availableNow=True).start())
    q.awaitTermination()
    m = spark.read.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", out).load().count()
    print(f"RESULT {n} {m}", flush=True)
finally:
    spark.stop()
'''


def test_spark_connect_source_and_sink(
    cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    """The same source and sink through Spark Connect (issue 7, proof), in a subprocess
    so its local Connect server does not share this module's SparkContext."""
    import subprocess

    bs = cluster.bootstrap_servers
    out = f"{topic_name}-out"
    create_topic(bs, topic_name, 2)
    create_topic(bs, out, 1)
    produce(bs, topic_name, 2, 50)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    # Own process group: the local Connect server's JVM is a child of the script and
    # must go down with it even if the script hangs.
    proc = subprocess.Popen(
        [sys.executable, "-c", _CONNECT_SCRIPT, bs, topic_name, out, str(tmp_path / "ck")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result = [ln for ln in stdout.splitlines() if ln.startswith("RESULT")]
    causes = [
        ln
        for ln in stderr.splitlines()
        if ("Error" in ln or "Exception" in ln) and not ln.lstrip().startswith("at ")
    ]
    assert proc.returncode == 0 and result, "\n".join(causes[:15]) or stderr[-3000:]
    assert result[0] == "RESULT 50 50"
