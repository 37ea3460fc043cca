"""Settings the table marks honoured change what a real broker does, and refused ones are
refused over the wire (the settings table in odradek.configdefs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.clientutil import confluent_create_topic
from tests.support.polling import wait_until

from odradek.cluster.local import LocalCluster
from odradek.storage.batch import parse_batches
from odradek.storage.checkpoint import read_checkpoint
from odradek.storage.records import COMPRESSION_ZSTD

pytestmark = pytest.mark.integration

CHECKPOINT_MS = 200


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> LocalCluster:
    c = LocalCluster.start(
        tmp_path_factory.mktemp("honoured"),
        1,
        broker_config={"replica.high.watermark.checkpoint.interval.ms": str(CHECKPOINT_MS)},
    )
    try:
        yield c  # type: ignore[misc]
    finally:
        c.down()


def _produce(bootstrap: str, topic: str, n: int, timestamp: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    for i in range(n):
        if timestamp is None:
            p.produce(topic, value=b"v%d" % i)
        else:
            p.produce(topic, value=b"v%d" % i, timestamp=timestamp)
    assert p.flush(30) == 0


def test_high_watermark_checkpoint_interval_is_honoured(
    broker: LocalCluster, topic_name: str
) -> None:
    """With a 200 ms interval the HW checkpoint follows each produce within a second; the
    old hard-coded 5 s period would miss most of these three deadlines."""
    bootstrap = broker.bootstrap_servers
    confluent_create_topic(bootstrap, topic_name)
    path = Path(broker.broker(1).log_dir) / "replication-offset-checkpoint"
    total = 0
    for _ in range(3):
        _produce(bootstrap, topic_name, 50)
        total += 50
        wait_until(
            lambda: path.exists() and read_checkpoint(path).get((topic_name, 0)) == total,  # noqa: B023 - called only within this iteration
            f"HW checkpoint of {topic_name}-0 at {total}",
            timeout=1.5,
        )


def test_log_append_time_topic_stamps_the_broker_clock(
    broker: LocalCluster, topic_name: str
) -> None:
    bootstrap = broker.bootstrap_servers
    confluent_create_topic(
        bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"}
    )
    before_ms = int(time.time() * 1000)
    _produce(bootstrap, topic_name, 5, timestamp=1_000)  # a CreateTime from 1970
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic_name, "enable.auto.commit": False}
    )
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.timestamp())
    finally:
        c.close()
    assert len(got) == 5
    for ts_type, ts in got:
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME
        assert before_ms - 1000 <= ts <= int(time.time() * 1000) + 1000


def test_refused_topic_config_is_invalid_config(broker: LocalCluster, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    fut = admin.create_topics(
        [NewTopic(topic_name, 1, 1, config={"remote.storage.enable": "true"})], operation_timeout=20
    )[topic_name]
    with pytest.raises(KafkaException) as e:
        fut.result(30)
    assert e.value.args[0].name() == "INVALID_CONFIG"
    assert "remote.storage.enable" in e.value.args[0].str()


def test_topic_compression_type_recompresses(broker: LocalCluster, topic_name: str) -> None:
    """compression.type=zstd: an lz4 producer's batches are stored and served as zstd,
    and a consumer reads the same records."""
    bootstrap = broker.bootstrap_servers
    confluent_create_topic(bootstrap, topic_name, config={"compression.type": "zstd"})
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "lz4"}
    )
    values = [b"record-%d-" % i + b"x" * 200 for i in range(300)]
    for v in values:
        p.produce(topic_name, value=v)
    assert p.flush(30) == 0
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic_name, "enable.auto.commit": False}
    )
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert got == values
    log_dir = Path(broker.broker(1).log_dir) / f"{topic_name}-0"
    data = b"".join(f.read_bytes() for f in sorted(log_dir.glob("*.log")))
    codecs = {h.compression for h in parse_batches(data)}
    assert codecs == {COMPRESSION_ZSTD}
