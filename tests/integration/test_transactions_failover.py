"""Transactions across failures (issue 18): a coordinator SIGKILLed between
PrepareCommit and its markers, and consume-transform-produce exactly once across a
SIGKILL of the processing client and of a partition leader. Slow (several failovers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from test_transactions import read_all, txn_producer
from tests.support.polling import wait_for
from tests.support.topics import create_topic

from odradek.chaos.faults import Faults, FaultsUnavailable, require_available
from odradek.cluster.local import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = {
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


def _leader(c: LocalCluster, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": c.bootstrap_servers}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[partition].leader


# A cluster in failover answers errors meanwhile: they mean "not yet".
_wait = partial(wait_for, interval=0.2, retry_on=(Exception,))


@pytest.fixture
def faults(make_cluster) -> Iterator[Faults]:  # type: ignore[no-untyped-def]
    try:
        require_available()
    except FaultsUnavailable as e:
        pytest.skip(str(e))
    f = Faults(make_cluster(3, broker_config=CONFIG))
    yield f
    f.heal_all()


def test_coordinator_killed_between_prepare_commit_and_markers(faults: Faults) -> None:
    c = faults.cluster
    bs = c.bootstrap_servers
    p = txn_producer(bs, "tx-failover")
    coord = _leader(c, "__transaction_state", 0)
    data_broker = next(b.id for b in c.brokers if b.id != coord)
    topic = f"txf-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, assignment=[[data_broker]])
    _wait(lambda: _leader(c, topic, 0) == data_broker, 30, "topic leader")
    p.begin_transaction()
    for i in range(20):
        p.produce(topic, b"v%d" % i, partition=0)
    p.flush(30)
    # The coordinator cannot reach the partition's leader: PrepareCommit is written (the
    # commit is decided and acknowledged) but the COMMIT marker cannot be delivered.
    with faults.partition(f"b{coord}", f"b{data_broker}"):
        p.commit_transaction(60)
        assert read_all(bs, topic, "read_committed", partitions=1, timeout=20) == []
        c.stop_broker(coord, signal.SIGKILL)
    # A new coordinator loads __transaction_state, finds PrepareCommit, sends the markers.
    _wait(
        lambda: len(read_all(bs, topic, "read_committed", partitions=1, timeout=10)) == 20,
        90,
        "the commit to complete on the new coordinator",
    )
    got = [v for _, v in read_all(bs, topic, "read_committed", partitions=1)]
    assert got == [b"v%d" % i for i in range(20)]
    c.start_broker(coord)


def _processor(
    bs: str, src: str, dst: str, group: str, n: int, log: Path
) -> subprocess.Popen[bytes]:
    script = Path(__file__).with_name("txn_processor.py")
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, str(script), bs, src, dst, group, "tx-cp", str(n)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_consume_transform_produce_exactly_once_across_kills(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c: LocalCluster = make_cluster(3, broker_config=CONFIG)
    bs = c.bootstrap_servers
    src, dst, group, n = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}", "cp", 3
    for t in (src, dst):
        create_topic(bs, t, n, 3, {"min.insync.replicas": "2"})
    total = 3000
    prod = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    for i in range(total):
        prod.produce(src, b"m%05d" % i, partition=i % n)
    assert prod.flush(60) == 0
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_processor(bs, src, dst, group, n, tmp_path / "processor.log"))

        def out_count() -> int:
            return len(read_all(bs, dst, "read_committed", timeout=20))

        _wait(lambda: out_count() > total // 5, 120, "processing to start")
        os.kill(procs[-1].pid, signal.SIGKILL)  # the processing client dies mid-stream
        procs[-1].wait(10)
        procs.append(_processor(bs, src, dst, group, n, tmp_path / "processor.log"))
        _wait(lambda: out_count() > total // 2, 120, "processing to resume")
        victim = _leader(c, dst, 0)
        c.stop_broker(victim, signal.SIGKILL)  # a partition leader dies mid-stream
        _wait(lambda: _leader(c, dst, 0) not in (victim, -1), 60, "a new leader")
        c.start_broker(victim)

        def done() -> bool:
            if procs[-1].poll() is not None:  # fenced/fatal: restart the client
                procs.append(_processor(bs, src, dst, group, n, tmp_path / "processor.log"))
            return out_count() >= total

        _wait(done, 120, "every input record to be processed")
        got = Counter(v for _, v in read_all(bs, dst, "read_committed"))
        dupes = {v: k for v, k in got.items() if k > 1}
        assert not dupes, f"{len(dupes)} duplicated outputs, e.g. {list(dupes)[:5]}"
        assert set(got) == {b"m%05d-out" % i for i in range(total)}
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait(10)
