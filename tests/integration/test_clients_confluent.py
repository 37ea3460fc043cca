"""confluent-kafka (librdkafka 2.16) against a real Odradek broker (issue "Broker core").

Proves REQ-R7/R8 (ordered, contiguous, byte-exact round trip), every codec passing
through the broker opaque (R23), acks 0/1/all, ListOffsets by timestamp and the admin
APIs with Kafka's error codes. One single-broker cluster is shared by the module.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from clientutil import (
    CODECS,
    Rec,
    assert_contiguous,
    assert_round_trip,
    by_partition,
    confluent_consume,
    confluent_create_topic,
    make_records,
    timestamped,
)
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from tests.support.polling import wait_for

from odradek.cluster.local import LocalCluster

pytestmark = pytest.mark.integration

PARTITIONS = 3


def produce_all(bootstrap: str, topic: str, recs: list[Rec], **conf: Any) -> dict[int, list[int]]:
    """Produce ``recs`` to their partitions; return delivery-report offsets per partition."""
    offsets: dict[int, list[int]] = defaultdict(list)
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets[msg.partition()].append(msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for r in recs:
        while True:
            try:
                p.produce(
                    topic,
                    r.value,
                    r.key,
                    partition=r.partition,
                    headers=list(r.headers) or None,
                    on_delivery=on_delivery,
                    timestamp=r.timestamp_ms or 0,
                )
                break
            except BufferError:  # local queue full: let deliveries drain
                p.poll(0.05)
    left = p.flush(60)
    assert left == 0, f"{left} records not delivered"
    assert not errors, f"delivery errors: {errors[:5]}"
    return offsets


def test_round_trip_100k_lz4(cluster: LocalCluster, topic_name: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, PARTITIONS)
    recs = make_records(100_000, PARTITIONS, seed=1, null_value=True)
    offsets = produce_all(b, topic_name, recs, **{"compression.type": "lz4"})
    counts = {p: len(rs) for p, rs in by_partition(recs).items()}
    assert_contiguous(offsets, counts)
    # Delivery reports arrive in offset order per partition.
    assert all(o == sorted(o) for o in offsets.values())
    got = confluent_consume(b, topic_name, PARTITIONS, len(recs))
    assert_round_trip(recs, got)


@pytest.mark.parametrize("codec", CODECS)
def test_codec(cluster: LocalCluster, topic_name: str, codec: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, PARTITIONS)
    recs = make_records(20_000, PARTITIONS, seed=100 + CODECS.index(codec))
    produce_all(b, topic_name, recs, **{"compression.type": codec})
    assert_round_trip(recs, confluent_consume(b, topic_name, PARTITIONS, len(recs)))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(cluster: LocalCluster, topic_name: str, acks: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    recs = make_records(2_000, 1, seed=7)
    offsets = produce_all(b, topic_name, recs, acks=acks)
    if acks == "0":
        # No response, so no offsets: librdkafka counts up from OFFSET_INVALID (-1001)
        # within a batch (confluent-kafka shows negatives as None), so only the first
        # 1001 records of a batch are guaranteed to read None. A client quirk.
        assert len(offsets[0]) == len(recs) and offsets[0][0] is None
    else:
        assert_contiguous(offsets, {0: len(recs)})
    assert_round_trip(recs, confluent_consume(b, topic_name, 1, len(recs)))


def test_offsets_by_timestamp(cluster: LocalCluster, topic_name: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    base = int(time.time() * 1000) - 3_600_000
    recs = timestamped(make_records(100, 1, seed=3), base)
    produce_all(b, topic_name, recs)
    got = confluent_consume(b, topic_name, 1, len(recs))
    assert_round_trip(recs, got, check_timestamps=True)

    c = Consumer({"bootstrap.servers": b, "group.id": "odradek-compat-assign"})
    try:

        def at(ts: int) -> int:
            [tp] = c.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=10)
            assert tp.error is None
            return int(tp.offset)

        assert at(base) == 0
        assert at(base - 1) == 0
        assert at(base + 50_000) == 50
        assert at(base + 50_500) == 51  # first record with timestamp >= ts
        assert at(base + 99_000) == 99
        assert at(base + 99_001) == -1  # none: Kafka answers offset -1
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 100)
    finally:
        c.close()

    # The admin ListOffsets path (earliest / latest / by timestamp).
    admin = AdminClient({"bootstrap.servers": b})
    tp = TopicPartition(topic_name, 0)
    specs = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "ts": OffsetSpec.for_timestamp(base + 10_000),
    }
    for name, spec in specs.items():
        res = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(15)
        assert res.offset == {"earliest": 0, "latest": 100, "ts": 10}[name], name


def _result(fut: Any) -> Any:
    return fut.result(30)


def _error_code(fut: Any) -> int:
    with pytest.raises(KafkaException) as ei:
        fut.result(30)
    return int(ei.value.args[0].code())


def test_admin_lifecycle(cluster: LocalCluster, topic_name: str) -> None:
    b = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": b})
    fs = admin.create_topics(
        [NewTopic(topic_name, 2, 1, config={"retention.ms": "123456", "cleanup.policy": "delete"})],
        operation_timeout=20,
    )
    _result(fs[topic_name])

    md = admin.list_topics(timeout=10)
    assert [(bm.id, f"{bm.host}:{bm.port}") for bm in md.brokers.values()] == [(1, b)]
    t = md.topics[topic_name]
    assert t.error is None and sorted(t.partitions) == [0, 1]
    assert all(p.leader == 1 and p.replicas == [1] and p.isrs == [1] for p in t.partitions.values())

    [fut] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic_name)]).values()
    cfg = _result(fut)
    assert cfg["retention.ms"].value == "123456"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not cfg["retention.ms"].is_default
    assert cfg["segment.bytes"].value == "1073741824"
    assert cfg["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert cfg["segment.bytes"].is_default

    [fut] = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
    bcfg = _result(fut)
    assert bcfg["num.partitions"].value == "1"

    _result(
        admin.create_partitions([NewPartitions(topic_name, 4)], operation_timeout=20)[topic_name]
    )
    md = admin.list_topics(topic=topic_name, timeout=10)
    assert sorted(md.topics[topic_name].partitions) == [0, 1, 2, 3]
    assert (
        _error_code(admin.create_partitions([NewPartitions(topic_name, 2)])[topic_name])
        == KafkaError.INVALID_PARTITIONS
    )

    _result(admin.delete_topics([topic_name], operation_timeout=20)[topic_name])
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_a_deleted_topics_logs_are_renamed_then_removed(
    cluster: LocalCluster, topic_name: str
) -> None:
    """Kafka's LogManager.asyncDelete: a deleted replica's directory is renamed to
    ``<topic>-<partition>.<id>-delete`` on the broker's loop and removed after
    file.delete.delay.ms by the retention loop's worker thread (an rmtree on the loop,
    5-6 ms per replica, stalled every client for seconds for a large topic)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = NewTopic(topic_name, 2, 1, config={"file.delete.delay.ms": "1500"})
    _result(admin.create_topics([topic], operation_timeout=20)[topic_name])
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for part in (0, 1):
        p.produce(topic_name, b"v", partition=part)
    assert p.flush(30) == 0
    log_dir = Path(cluster.brokers[0].log_dir)
    assert {e.name for e in log_dir.glob(f"{topic_name}-*")} == {
        f"{topic_name}-0",
        f"{topic_name}-1",
    }
    _result(admin.delete_topics([topic_name], operation_timeout=20)[topic_name])
    # Renamed at once: the partition names are free; the -delete directories go later.
    wait_for(
        lambda: (
            sorted(e.name.endswith("-delete") for e in log_dir.glob(f"{topic_name}-*"))
            == [True, True]
        ),
        20,
        "both partition directories renamed to -delete",
    )
    wait_for(lambda: not list(log_dir.glob(f"{topic_name}-*")), 20, "the -delete directories gone")
    # A topic of the same name works at once (its replicas' directories are new).
    _result(admin.create_topics([NewTopic(topic_name, 1, 1)], operation_timeout=20)[topic_name])
    p.produce(topic_name, b"again", partition=0)
    assert p.flush(30) == 0
    assert (log_dir / f"{topic_name}-0").is_dir()


def test_admin_errors(cluster: LocalCluster, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})

    def create(t: NewTopic) -> int:
        return _error_code(admin.create_topics([t], operation_timeout=20)[t.topic])

    _result(admin.create_topics([NewTopic(topic_name, 1, 1)], operation_timeout=20)[topic_name])
    assert create(NewTopic(topic_name, 1, 1)) == KafkaError.TOPIC_ALREADY_EXISTS
    assert create(NewTopic(topic_name + "-rf", 1, 3)) == KafkaError.INVALID_REPLICATION_FACTOR
    assert (
        create(NewTopic(topic_name + "-cfg", 1, 1, config={"retention.ms": "abc"}))
        == KafkaError.INVALID_CONFIG
    )
    assert (
        create(NewTopic(topic_name + "-cfg2", 1, 1, config={"no.such.config": "1"}))
        == KafkaError.INVALID_CONFIG
    )
    assert create(NewTopic("bad name!", 1, 1)) == KafkaError.TOPIC_EXCEPTION
    assert create(NewTopic("x" * 250, 1, 1)) == KafkaError.TOPIC_EXCEPTION
    missing = topic_name + "-missing"
    assert (
        _error_code(admin.delete_topics([missing], operation_timeout=20)[missing])
        == KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    # None of the rejected topics exists afterwards.
    names = admin.list_topics(timeout=10).topics
    assert not any(n.startswith(topic_name + "-") for n in names)


def test_idempotent_producer(cluster: LocalCluster, topic_name: str) -> None:
    """enable.idempotence=true: InitProducerId, then sequenced batches (acks=all)."""
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, PARTITIONS)
    recs = make_records(20_000, PARTITIONS, seed=11)
    offsets = produce_all(
        b, topic_name, recs, **{"enable.idempotence": True, "compression.type": "zstd"}
    )
    assert_contiguous(offsets, {p: len(rs) for p, rs in by_partition(recs).items()})
    assert_round_trip(recs, confluent_consume(b, topic_name, PARTITIONS, len(recs)))


def test_transactional_producer(cluster: LocalCluster, topic_name: str) -> None:
    """Transactions (issue 18) on one broker: an aborted and a committed transaction; a
    read_committed consumer sees the committed records only (more in
    test_transactions.py)."""
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    p = Producer({"bootstrap.servers": b, "transactional.id": f"tx-{topic_name}"})
    p.init_transactions(30)
    recs = make_records(10, 1, seed=12)
    p.begin_transaction()
    p.produce(topic_name, b"aborted", partition=0)
    p.abort_transaction(30)
    p.begin_transaction()
    for r in recs:
        p.produce(
            topic_name,
            r.value,
            r.key,
            partition=0,
            headers=list(r.headers) or None,
            timestamp=r.timestamp_ms or 0,
        )
    p.commit_transaction(30)
    assert_round_trip(
        recs,
        confluent_consume(b, topic_name, 1, len(recs), **{"isolation.level": "read_committed"}),
    )


def test_consumer_from_offset(cluster: LocalCluster, topic_name: str) -> None:
    """assign() at an explicit offset reads from exactly there."""
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    recs = make_records(500, 1, seed=5)
    produce_all(b, topic_name, recs)
    c = Consumer(
        {"bootstrap.servers": b, "group.id": "odradek-compat-assign", "enable.auto.commit": False}
    )
    try:
        c.assign([TopicPartition(topic_name, 0, 321)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 179 and time.monotonic() < deadline:
            got += [m for m in c.consume(500, 0.5) if m.error() is None]
        assert [m.offset() for m in got] == list(range(321, 500))
        assert [m.value() for m in got] == [r.value for r in recs[321:]]
    finally:
        c.close()


def test_broker_side_errors_and_cluster(cluster: LocalCluster, topic_name: str) -> None:
    """MESSAGE_TOO_LARGE from the broker (the client's own limit raised), CreateTopics
    validate_only, DescribeCluster."""
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    errs: list[Any] = []
    p = Producer({"bootstrap.servers": b, "message.max.bytes": 5_000_000})
    p.produce(topic_name, b"x" * 2_000_000, on_delivery=lambda e, m: errs.append(e))
    assert p.flush(30) == 0
    assert [e.code() for e in errs] == [KafkaError.MSG_SIZE_TOO_LARGE]

    admin = AdminClient({"bootstrap.servers": b})
    vo = topic_name + "-vo"
    assert admin.create_topics([NewTopic(vo, 2, 1)], validate_only=True)[vo].result(30) is None
    assert vo not in admin.list_topics(timeout=10).topics
    desc = admin.describe_cluster(request_timeout=10).result(15)
    assert [n.id for n in desc.nodes] == [1] and desc.controller.id == 1
    assert desc.cluster_id


def test_list_offsets_max_timestamp(cluster: LocalCluster, topic_name: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    base = int(time.time() * 1000) - 100_000
    recs = [Rec(None, b"v%d" % i, (), 0, base + d) for i, d in enumerate((0, 5000, 1000))]
    produce_all(b, topic_name, recs, **{"linger.ms": 0, "batch.num.messages": 1})
    admin = AdminClient({"bootstrap.servers": b})
    tp = TopicPartition(topic_name, 0)
    res = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=10)[tp].result(15)
    assert (res.offset, res.timestamp) == (1, base + 5000)
