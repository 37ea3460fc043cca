"""The columnar client of the Spark connector against the confluent-kafka one (issue 17).

* Records of every codec, with headers, null keys, null values (tombstones) and a
  LogAppendTime topic read back identically through both clients.
* A leader SIGKILLed in the middle of a columnar read: the read follows the new leader
  and returns exactly the rows the confluent-kafka client reads afterwards.
* A leader SIGKILLed in the middle of a columnar write: every record is written exactly
  once (idempotent producer, retried with the same sequence numbers).
* What the columnar sink writes is read byte for byte by confluent-kafka and by kcat,
  for every codec.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from tests.support.polling import wait_until
from tests.support.topics import create_topic as support_create_topic

pyspark = pytest.importorskip("pyspark")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from spark_util import local_spark  # noqa: E402

from odradek.cluster.local import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
FAST = {"replica.lag.time.max.ms": "3000", "zookeeper.session.timeout.ms": "4000"}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_spark("odradek-columnar-tests")


wait_for = partial(wait_until, timeout=60.0, interval=0.1)


# Spark reads or writes a topic as soon as it exists: wait for its leaders.
create_topic = partial(support_create_topic, wait_leaders=True, timeout=60.0)


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    t = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    return t.partitions[partition].leader


def produce_mixed(bootstrap: str, topic: str, partitions: int, n: int, codec: str) -> None:
    """Keys, null keys, values, null values (tombstones), headers with null values."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "compression.type": codec,
            "enable.idempotence": True,
        }
    )
    for i in range(n):
        p.produce(
            topic,
            None if i % 9 == 0 else b"value-%d-" % i + bytes([i % 256]) * (i % 40),
            None if i % 4 == 0 else b"key-%d" % (i % 17),
            partition=i % partitions,
            headers=[("h", b"%d" % i), ("nothing", None), ("h", b"")] if i % 3 else None,
        )
    assert p.flush(30) == 0


def rows(spark: Any, bootstrap: str, topic: str, client: str, **opts: str) -> list[tuple]:
    df = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("odradek.client", client)
        .options(**opts)
        .load()
    )
    out = []
    for r in df.collect():
        hs = None if r.headers is None else [(h.key, h.value) for h in r.headers]
        out.append(
            (r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.timestampType, hs)
        )
    return sorted(out, key=lambda x: (x[1], x[2]))


# --------------------------------------------------------------------------- reads


@pytest.mark.parametrize("codec", CODECS)
def test_both_clients_read_identical_rows(
    spark: Any, cluster: LocalCluster, topic_name: str, codec: str
) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 2)
    produce_mixed(bs, topic_name, 2, 1500, codec)
    columnar = rows(spark, bs, topic_name, "columnar")
    assert len(columnar) == 1500
    assert columnar == rows(spark, bs, topic_name, "confluent")
    assert sum(1 for r in columnar if r[4] is None) == len(range(0, 1500, 9))  # tombstones
    assert sum(1 for r in columnar if r[3] is None) == len(range(0, 1500, 4))
    # a range that starts and ends inside batches, split into more tasks
    part = {
        "startingOffsets": f'{{"{topic_name}":{{"0":17,"1":300}}}}',
        "endingOffsets": f'{{"{topic_name}":{{"0":701,"1":333}}}}',
        "minPartitions": "5",
    }
    sub = rows(spark, bs, topic_name, "columnar", **part)
    assert sub == rows(spark, bs, topic_name, "confluent", **part)
    assert [(p, o) for _, p, o, *_ in sub] == (
        [(0, o) for o in range(17, 701)] + [(1, o) for o in range(300, 333)]
    )


def test_log_append_time_reads_identically(
    spark: Any, cluster: LocalCluster, topic_name: str
) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 1, config={"message.timestamp.type": "LogAppendTime"})
    produce_mixed(bs, topic_name, 1, 300, "lz4")
    columnar = rows(spark, bs, topic_name, "columnar")
    assert {r[6] for r in columnar} == {1}
    assert columnar == rows(spark, bs, topic_name, "confluent")


def test_leader_killed_mid_read_gives_same_rows(
    make_cluster: Callable[..., LocalCluster], topic_name: str
) -> None:
    """read_range (the executor code) over a 3-broker cluster; the leader dies after the
    first fetch; the rest comes from the new leader; same rows as confluent-kafka."""
    from odradek.spark.source import RangePartition, SourceOptions, read_range

    c = make_cluster(3, broker_config=FAST)
    bs = c.bootstrap_servers
    create_topic(bs, topic_name, 1, rf=3, config={"min.insync.replicas": "2"})
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "acks": "all"})
    for i in range(20_000):
        p.produce(topic_name, b"v%d" % i, b"k%d" % (i % 100), partition=0)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    victim = leader_of(bs, topic_name, 0)

    def read(client: str) -> list[tuple]:
        opts = SourceOptions.parse(
            {
                "kafka.bootstrap.servers": bs,
                "subscribe": topic_name,
                "odradek.client": client,
                "kafka.max.partition.fetch.bytes": "16384",
            },
            streaming=False,
        )
        out: list[tuple] = []
        for i, batch in enumerate(read_range(opts, RangePartition(topic_name, 0, 0, 20_000))):
            if i == 1 and client == "columnar":
                c.stop_broker(victim, signal.SIGKILL)
            out.extend(
                (r["offset"], r["key"], r["value"], r["timestamp"]) for r in batch.to_pylist()
            )
        return out

    columnar = read("columnar")
    # every broker's metadata converges on the new leader (the one that served the rest)
    wait_for(lambda: leader_of(bs, topic_name, 0) not in (victim, -1), "a new leader")
    assert [o for o, *_ in columnar] == list(range(20_000))
    assert columnar == read("confluent")


# --------------------------------------------------------------------------- writes


def consume(bootstrap: str, topic: str, partitions: int, n: int) -> list[Any]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "columnar-test", "enable.auto.commit": False}
    )
    out: list[Any] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=0.2):
                assert m.error() is None, m.error()
                out.append(m)
        assert len(out) == n, f"{len(out)} of {n}"
        assert not [m for m in c.consume(num_messages=10, timeout=0.5) if m.error() is None]
    finally:
        c.close()
    return out


def test_leader_killed_mid_write_writes_each_record_once(
    make_cluster: Callable[..., LocalCluster], topic_name: str
) -> None:
    """ColumnarWriter (the executor code) while the leader of both partitions dies."""
    import pyarrow as pa

    from odradek.spark.columnar_sink import ArrowRows, ColumnarWriter, produce_settings

    c = make_cluster(3, broker_config=FAST)
    bs = c.bootstrap_servers
    create_topic(bs, topic_name, 2, rf=3, config={"min.insync.replicas": "2"})
    victim = leader_of(bs, topic_name, 0)
    writer = ColumnarWriter(bs, produce_settings({"batch.size": "20000"}))
    n, step = 60_000, 2_000
    killer = threading.Timer(0.0, lambda: c.stop_broker(victim, signal.SIGKILL))
    try:
        for start in range(0, n, step):
            batch = pa.RecordBatch.from_pydict(
                {
                    "value": [b"v%d" % i for i in range(start, start + step)],
                    "partition": [i % 2 for i in range(start, start + step)],
                },
                schema=pa.schema([("value", pa.binary()), ("partition", pa.int32())]),
            )
            writer.write(ArrowRows.from_batch(batch, topic_name))
            if start == n // 3:
                killer.start()  # in the middle of the writes, batches in flight
        writer.flush()
    finally:
        killer.join(60)
        writer.close()
    got = consume(bs, topic_name, 2, n)
    values = [m.value() for m in got]
    assert sorted(values) == sorted(b"v%d" % i for i in range(n))  # none lost, none twice
    for part in (0, 1):  # per-partition order is the input order
        seq = [int(m.value()[1:]) for m in got if m.partition() == part]
        assert seq == sorted(seq)


def _kcat(*args: str) -> bytes:
    proc = subprocess.run(["kcat", *args], capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("codec", CODECS)
def test_sink_output_readable_by_confluent_and_kcat(
    spark: Any, cluster: LocalCluster, topic_name: str, codec: str
) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 2)
    data = [
        (
            f"k{i % 7}" if i % 5 else None,
            None if i % 13 == 0 else f"value {i}".encode(),
            [("h", f"{i}".encode()), ("n", None)] if i % 2 else None,
        )
        for i in range(400)
    ]
    df = spark.createDataFrame(
        data, "key string, value binary, headers array<struct<key:string,value:binary>>"
    )
    (
        df.write.format("odradek")
        .option("kafka.bootstrap.servers", bs)
        .option("topic", topic_name)
        .option("kafka.compression.type", codec)
        .option("odradek.client", "columnar")
        .mode("append")
        .save()
    )
    expected = sorted(
        ((None if k is None else k.encode(), v, h or None) for k, v, h in data), key=repr
    )
    got = consume(bs, topic_name, 2, 400)
    assert sorted(((m.key(), m.value(), m.headers()) for m in got), key=repr) == expected
    placed: dict[bytes, set[int]] = {}
    for m in got:
        if m.key() is not None:
            placed.setdefault(m.key(), set()).add(m.partition())
    assert all(len(ps) == 1 for ps in placed.values()), "one key, one partition"
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    # kcat (librdkafka 2.0.2): key, value and headers, each length-prefixed (%K/%S/%h
    # would be ambiguous for binary data, so compare lengths and the headers' text; kcat
    # prints a null header value as NULL).
    out = _kcat("-b", bs, "-C", "-t", topic_name, "-e", "-q", "-f", "%K|%S|%k|%s|%h\n")
    lines = [ln for ln in out.split(b"\n") if ln]
    assert len(lines) == 400
    seen = sorted(tuple(ln.split(b"|", 4)) for ln in lines)
    want = sorted(
        (
            str(-1 if k is None else len(k)).encode(),
            str(-1 if v is None else len(v)).encode(),
            (k or "").encode(),
            v or b"",
            b",".join(f"{hk}={'NULL' if hv is None else hv.decode()}".encode() for hk, hv in h)
            if h
            else b"",
        )
        for k, v, h in data
    )
    assert seen == want


def test_same_key_same_partition_on_both_clients(
    spark: Any, cluster: LocalCluster, topic_name: str
) -> None:
    """murmur2 of the key, like Java's (and librdkafka's murmur2_random) partitioner."""
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 5)
    df = spark.createDataFrame(
        [(f"key-{i}", f"v{i}") for i in range(200)], "key string, value string"
    )
    for client in ("columnar", "confluent"):
        (
            df.write.format("odradek")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", topic_name)
            .option("odradek.client", client)
            .mode("append")
            .save()
        )
    placed: dict[bytes, set[int]] = {}
    for m in consume(bs, topic_name, 5, 400):
        placed.setdefault(m.key(), set()).add(m.partition())
    assert len(placed) == 200 and all(len(ps) == 1 for ps in placed.values())


def test_client_option_is_validated(spark: Any, cluster: LocalCluster, topic_name: str) -> None:
    bs = cluster.bootstrap_servers
    with pytest.raises(Exception, match=r"odradek\.client"):
        (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", topic_name)
            .option("odradek.client", "fast")
            .load()
            .collect()
        )
    with pytest.raises(Exception, match=r"compression\.type"):
        (
            spark.createDataFrame([("x",)], "value string")
            .write.format("odradek")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", topic_name)
            .option("kafka.compression.type", "brotli")
            .mode("append")
            .save()
        )
