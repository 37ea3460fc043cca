"""The ``odradek`` Spark sink against a real cluster (issue 7, item 2 and its proof).

Batch writes: topic option and column, key/headers/partition columns. Streaming writes:
a micro-batch replayed after an injected failure — a task dying after some of its
records are durable, or the driver dying after the sink committed — writes no record
twice (docs/spark.md, "Sink guarantee"); without the guard (exactlyOnce=false) the same
fault duplicates, which shows the test can see duplicates at all.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tests.support.topics import create_topic as support_create_topic

pyspark = pytest.importorskip("pyspark")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from spark_util import local_spark  # noqa: E402

from odradek.cluster.local import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    # small Arrow batches so a task has written some records before it fails
    yield from local_spark(
        "odradek-sink-tests", **{"spark.sql.execution.arrow.maxRecordsPerBatch": "50"}
    )


# A query writes to a topic as soon as it exists: wait for its leaders.
create_topic = partial(support_create_topic, wait_leaders=True)


def consume_all(
    bootstrap: str, topic: str, partitions: int, expect_at_least: int, settle: float = 1.0
) -> list[Any]:
    """Every record of ``topic`` (waits for ``expect_at_least``, then ``settle`` s of quiet)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-sink-test",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    out: list[Any] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline, quiet_until = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            msgs = [m for m in c.consume(num_messages=10000, timeout=0.2) if m.error() is None]
            out.extend(msgs)
            if len(out) >= expect_at_least:
                if msgs:
                    quiet_until = time.monotonic() + settle
                elif quiet_until is None or time.monotonic() >= quiet_until:
                    return out
        raise AssertionError(f"{topic}: only {len(out)} of {expect_at_least} records")
    finally:
        c.close()


def produce_values(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), f"k{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def user_headers(m: Any) -> list[tuple[str, bytes | None]]:
    return [(k, v) for k, v in (m.headers() or []) if k != "odradek.sink"]


# --------------------------------------------------------------------------- batch writes


def test_batch_write_topic_option_key_headers_partition(
    spark: Any, cluster: LocalCluster, topic_name: str
) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, topic_name, 3)
    rows = [
        (f"k{i}", f"v{i}".encode(), i % 3, [("h", f"{i}".encode()), ("n", None)]) for i in range(60)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    (
        df.write.format("odradek")
        .option("kafka.bootstrap.servers", bs)
        .option("topic", topic_name)
        .mode("append")
        .save()
    )
    got = consume_all(bs, topic_name, 3, 60)
    assert len(got) == 60
    for m in got:
        i = int(m.value()[1:])
        assert (m.key(), m.partition()) == (f"k{i}".encode(), i % 3)
        assert user_headers(m) == [("h", f"{i}".encode()), ("n", None)]


def test_batch_write_topic_column_and_key_partitioning(
    spark: Any, cluster: LocalCluster, topic_name: str
) -> None:
    bs = cluster.bootstrap_servers
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    create_topic(bs, a, 2)
    create_topic(bs, b, 1)
    df = spark.createDataFrame(
        [(a if i % 2 else b, f"key{i % 5}", f"value-{i}") for i in range(40)],
        "topic string, key string, value string",
    )
    df.write.format("odradek").option("kafka.bootstrap.servers", bs).mode("append").save()
    got_a, got_b = consume_all(bs, a, 2, 20), consume_all(bs, b, 1, 20)
    assert sorted(m.value().decode() for m in got_a) == sorted(
        f"value-{i}" for i in range(1, 40, 2)
    )
    assert sorted(m.value().decode() for m in got_b) == sorted(
        f"value-{i}" for i in range(0, 40, 2)
    )
    placed: dict[bytes, set[int]] = {}
    for m in got_a:
        placed.setdefault(m.key(), set()).add(m.partition())
    assert all(len(ps) == 1 for ps in placed.values()), "one key, one partition"
    with pytest.raises(Exception, match="topic option required"):
        (
            spark.createDataFrame([("x",)], "value string")
            .write.format("odradek")
            .option("kafka.bootstrap.servers", bs)
            .mode("append")
            .save()
        )
    with pytest.raises(Exception, match="'value' not found"):
        (
            spark.createDataFrame([("x",)], "key string")
            .write.format("odradek")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", a)
            .mode("append")
            .save()
        )


# --------------------------------------------------------------------------- streaming replays


def _pipeline(spark: Any, bs: str, src: str, dst: str, checkpoint: Path, **sink_opts: str) -> Any:
    df = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value")
    )
    w = (
        df.writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bs)
        .option("topic", dst)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for k, v in sink_opts.items():
        w = w.option(k, v)
    return w.start()


def _run_failing(q: Any, what: str) -> None:
    with pytest.raises(Exception, match=what):
        q.awaitTermination(120)


@pytest.mark.parametrize("exactly_once", [True, False])
def test_stream_replay_after_task_failure_writes_no_duplicates(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path, exactly_once: bool
) -> None:
    bs = cluster.bootstrap_servers
    src, dst = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    produce_values(bs, src, 2, 400)
    eo = str(exactly_once).lower()
    # Run 1: every write task dies once 120 of its records are durable.
    _run_failing(
        _pipeline(
            spark,
            bs,
            src,
            dst,
            tmp_path / "ck",
            exactlyOnce=eo,
            **{"odradek.test.failAfterRecords": "120"},
        ),
        "failAfterRecords",
    )
    partial = consume_all(bs, dst, 2, 120, settle=0.5)
    assert 120 <= len(partial) < 400, "the failed attempt must leave some records behind"
    # Run 2: same checkpoint, Spark replays batch 0 with the same batch id.
    q = _pipeline(spark, bs, src, dst, tmp_path / "ck", exactlyOnce=eo)
    assert q.awaitTermination(120) and q.exception() is None
    counts = Counter(m.value() for m in consume_all(bs, dst, 2, 400))
    assert set(counts) == {f"v{i}".encode() for i in range(400)}
    dups = sum(c - 1 for c in counts.values())
    if exactly_once:
        assert dups == 0, f"{dups} duplicates after the replay"
    else:
        assert dups > 0  # Spark's Kafka sink behaviour: at-least-once


def test_stream_replay_after_sink_commit_writes_nothing(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    """The driver dies after the sink committed but before Spark recorded the batch."""
    bs = cluster.bootstrap_servers
    src, dst = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bs, src, 2)
    create_topic(bs, dst, 1)
    produce_values(bs, src, 2, 100)
    _run_failing(
        _pipeline(spark, bs, src, dst, tmp_path / "ck", **{"odradek.test.failAfterCommit": "true"}),
        "failAfterCommit",
    )
    assert len(consume_all(bs, dst, 1, 100, settle=0.5)) == 100
    q = _pipeline(spark, bs, src, dst, tmp_path / "ck")
    assert q.awaitTermination(120) and q.exception() is None
    assert q.lastProgress is not None
    produce_values(bs, src, 2, 10)  # the query goes on normally afterwards
    q = _pipeline(spark, bs, src, dst, tmp_path / "ck")
    assert q.awaitTermination(120) and q.exception() is None
    got = consume_all(bs, dst, 1, 110)
    assert len(got) == 110
    assert Counter(m.value() for m in got) == Counter(
        [f"v{i}".encode() for i in range(100)] + [f"v{i}".encode() for i in range(10)]
    )


def test_replay_with_the_other_client_writes_no_duplicates(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    """Both clients tag rows with the same digest (issue 17): an attempt that died on the
    confluent-kafka client is completed by a replay on the columnar one, exactly once."""
    bs = cluster.bootstrap_servers
    src, dst = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    produce_values(bs, src, 2, 400)
    _run_failing(
        _pipeline(
            spark,
            bs,
            src,
            dst,
            tmp_path / "ck",
            **{"odradek.client": "confluent", "odradek.test.failAfterRecords": "120"},
        ),
        "failAfterRecords",
    )
    assert 120 <= len(consume_all(bs, dst, 2, 120, settle=0.5)) < 400
    q = _pipeline(spark, bs, src, dst, tmp_path / "ck", **{"odradek.client": "columnar"})
    assert q.awaitTermination(120) and q.exception() is None
    counts = Counter(m.value() for m in consume_all(bs, dst, 2, 400))
    assert set(counts) == {f"v{i}".encode() for i in range(400)}
    assert sum(c - 1 for c in counts.values()) == 0


def test_transactional_sink_replay_after_task_failure(
    spark: Any, cluster: LocalCluster, topic_name: str, tmp_path: Path
) -> None:
    """odradek.sink.guarantee=transactional (issue 18): the failed attempt's records sit in
    a transaction that is never committed; the replay fences it (aborting it) and
    commits its own. read_committed readers see every record exactly once; the aborted
    attempt is visible only to read_uncommitted readers."""
    bs = cluster.bootstrap_servers
    src, dst = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bs, src, 2)
    create_topic(bs, dst, 2)
    produce_values(bs, src, 2, 400)
    opts = {"odradek.sink.guarantee": "transactional", "odradek.client": "confluent"}
    _run_failing(
        _pipeline(
            spark, bs, src, dst, tmp_path / "ck", **opts, **{"odradek.test.failAfterRecords": "120"}
        ),
        "failAfterRecords",
    )
    q = _pipeline(spark, bs, src, dst, tmp_path / "ck", **opts)
    assert q.awaitTermination(120) and q.exception() is None
    counts = Counter(m.value() for m in consume_all(bs, dst, 2, 400))
    assert set(counts) == {f"v{i}".encode() for i in range(400)}
    assert sum(c - 1 for c in counts.values()) == 0
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "odradek-sink-test-ru",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(dst, p, OFFSET_BEGINNING) for p in range(2)])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 400 + 120 and time.monotonic() < deadline:
            seen += sum(1 for m in c.consume(1000, 0.2) if m.error() is None)
        assert seen >= 400 + 120  # the aborted attempt's records are in the log
    finally:
        c.close()
