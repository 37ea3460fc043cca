"""Retention (delete policy), the replicated log start offset and DeleteRecords (REQ-R24).

Real ZooKeeper, three real broker processes, real clients (confluent-kafka, kafka-python).
Segments are tiny so retention has something to delete within seconds; the retention
check runs every 300 ms and deleted files are unlinked 200 ms after being renamed.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from rawclient import RawClient, fetch_request
from replication_util import create_topic, partition_meta, wait_for
from replication_util import produce as _produce

from odradek.cluster.local import LocalCluster
from odradek.storage.checkpoint import read_checkpoint

pytestmark = pytest.mark.integration

BROKER_CONFIG = {
    "replica.lag.time.max.ms": "5000",
    "zookeeper.session.timeout.ms": "6000",
    "log.retention.check.interval.ms": "300",
    "log.segment.delete.delay.ms": "200",
}
SMALL_SEGMENTS = {"segment.bytes": "4096"}


def produce(bs: str, topic: str, values: list[bytes]) -> tuple[dict[bytes, Any], list[str]]:
    """acks=all, batches well below segment.bytes (a produce must fit in one segment)."""
    return _produce(bs, topic, values, extra={"batch.size": 2500})


def _values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:06d}-{uuid.uuid4().hex}".encode() for i in range(n)]


def _dir(c: LocalCluster, broker: int, topic: str, p: int = 0) -> Path:
    return Path(c.broker(broker).log_dir) / f"{topic}-{p}"


def _bases(c: LocalCluster, broker: int, topic: str, p: int = 0) -> list[int]:
    return sorted(int(f.name[:20]) for f in _dir(c, broker, topic, p).glob("*.log"))


def _deleted_files(c: LocalCluster, broker: int, topic: str, p: int = 0) -> list[Path]:
    return list(_dir(c, broker, topic, p).glob("*.deleted"))


def _checkpointed_start(c: LocalCluster, broker: int, topic: str, p: int = 0) -> int | None:
    path = Path(c.broker(broker).log_dir) / "log-start-offset-checkpoint"
    if not path.exists():
        return None
    return read_checkpoint(path).get((topic, p))


def _watermarks(bootstrap: str, topic: str, p: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    finally:
        c.close()


def _first_offsets(
    bootstrap: str, topic: str, start: int, reset: str, n: int, timeout: float = 30
) -> tuple[list[int], list[str]]:
    """Offsets of the first ``n`` records a consumer positioned at ``start`` gets, and the
    errors it reports (auto.offset.reset decides what OFFSET_OUT_OF_RANGE does)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
        }
    )
    offsets: list[int] = []
    errors: list[str] = []
    try:
        c.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + timeout
        while len(offsets) < n and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is not None:
                    errors.append(str(m.error()))
                    if reset == "error":
                        return offsets, errors
                    continue
                offsets.append(m.offset())
    finally:
        c.close()
    return offsets[:n], errors


def _fetch_error(c: LocalCluster, leader: int, topic: str, offset: int) -> tuple[int, int]:
    """(error_code, log_start_offset) of a consumer Fetch at ``offset`` (raw Fetch v12)."""
    with RawClient.to(c.broker(leader).address) as rc:
        resp = rc.request(fetch_request(topic, 0, offset))
    pr = resp.responses[0].partitions[0]
    return int(pr.error_code), int(pr.log_start_offset)


def test_delete_records_replicated_with_real_clients(make_cluster, topic_name) -> None:
    """DeleteRecords (API 21): the log start moves on the leader, follows to every replica,
    segments below it disappear everywhere, consumers below it get OFFSET_OUT_OF_RANGE and
    reset per auto.offset.reset, ListOffsets(earliest) reflects it, restarts keep it."""
    c = make_cluster(3, broker_config=BROKER_CONFIG)
    bs = c.bootstrap_servers
    create_topic(bs, topic_name, 1, 3, SMALL_SEGMENTS, assignment=[[1, 2, 3]])
    acked, errors = produce(bs, topic_name, _values(2000, "a"))
    assert not errors and len(acked) == 2000
    for b in (1, 2, 3):
        wait_for(lambda b=b: len(_bases(c, b, topic_name)) > 5, 30, f"segments on broker {b}")

    # confluent-kafka: delete everything below 1000; answered once every ISR replica's log
    # start offset reached it (the low watermark).
    admin = AdminClient({"bootstrap.servers": bs})
    futs = admin.delete_records([TopicPartition(topic_name, 0, 1000)], operation_timeout=30)
    (res,) = [f.result(60) for f in futs.values()]
    assert res.low_watermark == 1000

    assert _watermarks(bs, topic_name) == (1000, 2000)  # ListOffsets earliest / latest
    code, lso = _fetch_error(c, 1, topic_name, 10)
    assert (code, lso) == (1, 1000)  # OFFSET_OUT_OF_RANGE, log_start_offset current

    def segments_gone(b: int) -> bool:
        bases = _bases(c, b, topic_name)
        return (
            bases[0] <= 1000
            and (len(bases) == 1 or bases[1] > 1000)
            and not _deleted_files(c, b, topic_name)
            and _checkpointed_start(c, b, topic_name) == 1000
        )

    for b in (1, 2, 3):
        wait_for(
            lambda b=b: segments_gone(b),
            30,
            f"segments below 1000 deleted and the log start checkpointed on broker {b}",
        )

    # Consumers positioned below the log start: reset per their policy.
    offs, _ = _first_offsets(bs, topic_name, 5, "earliest", 3)
    assert offs == [1000, 1001, 1002]
    offs, errs = _first_offsets(bs, topic_name, 5, "error", 1, timeout=20)
    assert not offs and errs and "out of range" in errs[0].lower(), errs
    latest: dict[str, Any] = {}

    def consume_latest() -> None:
        latest["offs"], _ = _first_offsets(bs, topic_name, 5, "latest", 5, timeout=40)

    th = threading.Thread(target=consume_latest)
    th.start()
    try:
        wait_for(
            lambda: not th.is_alive() or _produce_late(bs, topic_name, latest),
            40,
            "the latest-reset consumer to see new records",
        )
    finally:
        th.join(60)
    assert latest["offs"] and latest["offs"][0] >= 2000, latest

    # kafka-python: -1 means "up to the high watermark"; past the HW is refused.
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError

    kadmin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=30000)
    try:
        hw = _watermarks(bs, topic_name)[1]
        out = kadmin.delete_records({KTP(topic_name, 0): -1}, timeout_ms=30000)
        (meta,) = out.values()
        assert meta["low_watermark"] == hw, out
        with pytest.raises(OffsetOutOfRangeError):
            kadmin.delete_records({KTP(topic_name, 0): hw + 100}, timeout_ms=30000)
    finally:
        kadmin.close()
    assert _watermarks(bs, topic_name) == (hw, hw)

    # A restarted replica keeps the log start (checkpoint + deleted files stay deleted).
    c.stop_broker(3)
    c.start_broker(3)
    wait_for(
        lambda: sorted(partition_meta(bs, topic_name)[0].isrs) == [1, 2, 3],
        60,
        "broker 3 back in the ISR",
    )
    wait_for(
        lambda: _checkpointed_start(c, 3, topic_name) == hw, 30, "broker 3's log start checkpoint"
    )
    assert _bases(c, 3, topic_name)[0] <= hw


def _produce_late(bs: str, topic: str, latest: dict[str, Any]) -> bool:
    """Produce a few records (repeatedly, until the latest-reset consumer has 5)."""
    produce(bs, topic, _values(5, "late"))
    return "offs" in latest


def test_follower_below_leader_log_start_restarts_there(make_cluster, topic_name) -> None:
    """Kafka's handleOffsetOutOfRange: a follower that was away while the leader deleted
    past its LEO truncates fully and starts at the leader's log start offset."""
    c = make_cluster(3, broker_config=BROKER_CONFIG)
    bs = c.bootstrap_servers
    create_topic(bs, topic_name, 1, 3, SMALL_SEGMENTS, assignment=[[1, 2, 3]])
    assert not produce(bs, topic_name, _values(300, "a"))[1]
    c.stop_broker(3)
    wait_for(
        lambda: 3 not in partition_meta(bs, topic_name)[0].isrs, 30, "broker 3 to leave the ISR"
    )
    assert not produce(bs, topic_name, _values(1000, "b"))[1]
    admin = AdminClient({"bootstrap.servers": bs})
    (fut,) = admin.delete_records([TopicPartition(topic_name, 0, 1200)]).values()
    assert fut.result(60).low_watermark == 1200  # the ISR is {1, 2}
    c.start_broker(3)
    wait_for(
        lambda: sorted(partition_meta(bs, topic_name)[0].isrs) == [1, 2, 3],
        60,
        "broker 3 back in the ISR",
    )
    wait_for(lambda: _bases(c, 3, topic_name)[0] >= 300, 30, "broker 3's old segments replaced")
    wait_for(
        lambda: _checkpointed_start(c, 3, topic_name) == 1200, 30, "broker 3's log start checkpoint"
    )


def test_retention_by_time_and_size_under_load(make_cluster) -> None:
    """REQ-R24 proof: small segments, concurrent produce and fetch, replicated topics.
    Segments past retention.bytes / retention.ms disappear on every replica (bounded by
    the HW, never the active one); a consumer left below the new start resets."""
    c = make_cluster(3, broker_config=BROKER_CONFIG)
    bs = c.bootstrap_servers
    by_size, by_time = f"size-{uuid.uuid4().hex[:6]}", f"time-{uuid.uuid4().hex[:6]}"
    create_topic(
        bs, by_size, 1, 3, {**SMALL_SEGMENTS, "retention.bytes": "16384"}, assignment=[[1, 2, 3]]
    )
    create_topic(
        bs, by_time, 1, 3, {**SMALL_SEGMENTS, "retention.ms": "4000"}, assignment=[[2, 3, 1]]
    )
    stop = threading.Event()
    produced: dict[str, int] = {by_size: 0, by_time: 0}
    tail: dict[str, list[int]] = {by_size: [], by_time: []}
    failures: list[str] = []

    def producer() -> None:
        while not stop.is_set():
            for t in (by_size, by_time):
                acked, errs = produce(bs, t, _values(200, "load"))
                produced[t] += len(acked)
                failures.extend(errs)

    def tailer(topic: str) -> None:
        cons = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": f"tail-{topic}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        cons.assign([TopicPartition(topic, 0, 0)])
        try:
            while not stop.is_set() or len(tail[topic]) < produced[topic]:
                msgs = cons.consume(500, 0.5)
                if not msgs and stop.is_set():
                    break
                tail[topic].extend(m.offset() for m in msgs if m.error() is None)
        finally:
            cons.close()

    threads = [threading.Thread(target=producer)] + [
        threading.Thread(target=tailer, args=(t,)) for t in (by_size, by_time)
    ]
    for th in threads:
        th.start()
    try:
        # Deletions happen while producing and fetching go on.
        wait_for(
            lambda: all(_bases(c, b, by_size)[0] > 0 for b in (1, 2, 3)),
            60,
            "size retention to delete segments on every replica",
        )
        wait_for(
            lambda: all(_bases(c, b, by_time)[0] > 0 for b in (1, 2, 3)),
            60,
            "time retention to delete segments on every replica",
        )
    finally:
        stop.set()
        for th in threads:
            th.join(120)
    assert not failures, failures[:5]
    for t in (by_size, by_time):
        offs = tail[t]
        assert offs == sorted(set(offs)), f"{t}: the tailing consumer saw offsets go back"

    # Size: at most retention.bytes plus one segment (the one that would cross it, and
    # the active one) stays on each replica.
    for b in (1, 2, 3):
        wait_for(
            lambda b=b: (
                sum(f.stat().st_size for f in _dir(c, b, by_size).glob("*.log")) <= 16384 + 2 * 4096
            ),
            30,
            f"broker {b} within retention.bytes",
        )
    # Time: once nothing new arrives for retention.ms, only the active segment remains.
    for b in (1, 2, 3):
        wait_for(
            lambda b=b: len(_bases(c, b, by_time)) == 1 and not _deleted_files(c, b, by_time),
            30,
            f"broker {b}: only the active segment of {by_time} left",
        )
    low, high = _watermarks(bs, by_time)
    assert low == _bases(c, 2, by_time)[0] and high == produced[by_time]
    # A consumer left below the new start gets OFFSET_OUT_OF_RANGE and resets.
    offs, _ = _first_offsets(bs, by_size, 0, "earliest", 1)
    assert offs == [_watermarks(bs, by_size)[0]] and offs[0] > 0
    offs, errs = _first_offsets(bs, by_time, 0, "error", 1, timeout=20)
    assert not offs and errs


def test_delete_records_errors(make_cluster, topic_name) -> None:
    """NOT_LEADER_OR_FOLLOWER off the leader, POLICY_VIOLATION on a compacted topic."""
    c = make_cluster(2, broker_config=BROKER_CONFIG)
    bs = c.bootstrap_servers
    create_topic(bs, topic_name, 1, 2, assignment=[[1, 2]])
    compacted = topic_name + "-c"
    create_topic(bs, compacted, 1, 1, {"cleanup.policy": "compact"}, assignment=[[1]])
    assert not produce(bs, topic_name, _values(10, "x"))[1]
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import NotLeaderForPartitionError, PolicyViolationError

    kadmin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=30000)
    try:
        with pytest.raises(NotLeaderForPartitionError):
            kadmin.delete_records({KTP(topic_name, 0): 5}, timeout_ms=10000, partition_leader_id=2)
        with pytest.raises(PolicyViolationError):
            kadmin.delete_records({KTP(compacted, 0): 0}, timeout_ms=10000)
    finally:
        kadmin.close()
    admin = AdminClient({"bootstrap.servers": bs})
    (fut,) = admin.delete_records([TopicPartition(topic_name, 0, 5)]).values()
    assert fut.result(60).low_watermark == 5
    with pytest.raises(KafkaException):
        (fut,) = admin.delete_records([TopicPartition(topic_name, 0, 11)]).values()
        fut.result(60)
