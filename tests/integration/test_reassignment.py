"""Partition reassignment (KIP-455) on a real cluster, driven by ``odradek reassign-partitions``.

* Every partition of a topic moves onto a newly added 4th broker while an idempotent
  acks=all producer keeps writing: each partition's current leader is dropped from its
  replicas, so leadership moves too. ``--verify`` reports completion, the dropped
  replicas' logs are deleted, and every acknowledged record is read back exactly once.
* A controller SIGKILLed during a move is replaced by one that completes it.
* A move throttled with ``--throttle`` (KIP-73 quotas) copies at most what the quota
  allows, is listed by ``--list`` / ListPartitionReassignments, and ``--cancel``
  restores the original replicas and clears the throttles.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from replication_util import consume_all, create_topic, partition_meta, wait_for

from odradek.cluster.local import LocalCluster
from odradek.zk import znodes

pytestmark = pytest.mark.integration

BASE = {"zookeeper.session.timeout.ms": "6000", "auto.leader.rebalance.enable": "false"}


def odradek(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Three brokers; the first test adds the fourth."""
    c = LocalCluster.start(tmp_path_factory.mktemp("reassign"), 3, broker_config=BASE)
    try:
        yield c
    finally:
        c.down()


class LoadProducer(threading.Thread):
    """Idempotent acks=all producer writing numbered records until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
        self.topic = topic
        self.stop = threading.Event()
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self.sent = 0

    def _cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.add(msg.value())

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in range(200):
                v = b"rec-%09d" % self.sent
                try:
                    self.p.produce(self.topic, key=v, value=v, on_delivery=self._cb)
                    self.sent += 1
                except BufferError:
                    break
            self.p.poll(0.01)
        self.p.flush(120)


def _write_json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path


def _four_brokers(four: LocalCluster) -> tuple[int, tuple[int, int, int]]:
    """The fourth broker added if an earlier test did not: the controller's id and the
    three others (a move among them leaves the controller alone)."""
    if len(four.brokers) < 4:
        four.add_broker()
    ctrl = wait_for(four.controller_id, 30, "a controller")
    a, b, c = [x for x in (1, 2, 3, 4) if x != ctrl]
    return ctrl, (a, b, c)


def test_reassign_onto_new_broker_under_load(four: LocalCluster, tmp_path: Path) -> None:
    topic = "moving"
    create_topic(four.bootstrap_servers, topic, 4, 3)
    load = LoadProducer(four.bootstrap_servers, topic)
    load.start()
    try:
        wait_for(lambda: len(load.acked) >= 20000, 120, "20,000 acknowledged records")
        b4 = four.add_broker()
        assert b4.id == 4
        meta = partition_meta(four.bootstrap_servers, topic)
        target = {p: [4] + [r for r in m.replicas if r != m.leader] for p, m in meta.items()}
        plan = _write_json(
            tmp_path / "plan.json",
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": p, "replicas": r} for p, r in target.items()
                ],
            },
        )
        out = odradek(
            "reassign-partitions",
            "--bootstrap-server",
            four.bootstrap_servers,
            "--execute",
            "--reassignment-json-file",
            str(plan),
        )
        assert out.returncode == 0, out.stderr
        assert (
            "Successfully started partition reassignments for "
            + ",".join(f"{topic}-{p}" for p in sorted(target))
            in out.stdout
        )
        assert (
            "Save this to use as the --reassignment-json-file option during rollback" in out.stdout
        )

        def verified() -> bool:
            v = odradek(
                "reassign-partitions",
                "--bootstrap-server",
                four.bootstrap_servers,
                "--verify",
                "--reassignment-json-file",
                str(plan),
            )
            assert v.returncode == 0, v.stderr
            return all(
                f"Reassignment of partition {topic}-{p} is completed." in v.stdout for p in target
            )

        wait_for(verified, 120, "--verify to report every partition completed", interval=1)
    finally:
        load.stop.set()
        load.join(150)
    assert not load.is_alive()
    assert not load.errors, load.errors[:5]

    # --verify asked one broker; the others apply the same znodes a moment later.
    def settled() -> dict[int, Any] | None:
        meta = partition_meta(four.bootstrap_servers, topic)
        ok = all(
            list(m.replicas) == target[p]
            and m.leader in target[p]
            and sorted(m.isrs) == sorted(target[p])
            for p, m in meta.items()
        )
        return meta if ok else None

    meta = wait_for(settled, 30, "every broker's metadata to show the new replicas")
    listed = odradek("reassign-partitions", "--bootstrap-server", four.bootstrap_servers, "--list")
    assert listed.stdout.strip() == "No partition reassignments found."
    # The dropped replicas stop and their logs are deleted; the new broker has them all.
    for p, _m in meta.items():
        for b in (1, 2, 3, 4):
            d = Path(four.broker(b).log_dir) / f"{topic}-{p}"
            wait_for(
                lambda d=d, b=b: d.exists() == (b in target[p]),  # noqa: B023 - called only within this iteration
                30,
                f"{d} to {'exist' if b in target[p] else 'be deleted'}",
            )
    got = consume_all(four.bootstrap_servers, topic, sorted(meta), timeout=120)
    values = [v for recs in got.values() for _, v in recs]
    assert len(values) == len(set(values)), "duplicates"
    missing = load.acked - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:3]}"
    for p, recs in got.items():
        offsets = [o for o, _ in recs]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), p


def _log_bytes(c: LocalCluster, broker: int, topic: str, p: int) -> int:
    d = Path(c.broker(broker).log_dir) / f"{topic}-{p}"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.exists() else 0


def _describe_config(c: LocalCluster, rtype: Any, name: str, address: str) -> dict[str, str]:
    """The dynamic (DescribeConfigs source 1 or 2) configs of a topic or broker."""
    from confluent_kafka.admin import AdminClient, ConfigResource  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": address})
    res = ConfigResource(rtype, name)
    entries = admin.describe_configs([res])[res].result(30)
    return {k: e.value for k, e in entries.items() if int(e.source) in (1, 2)}


def test_throttled_move_is_limited_then_cancelled(four: LocalCluster, tmp_path: Path) -> None:
    """--throttle 2000 B/s: the new replica gets the first fetch (the quota's rate starts
    at zero), then stays far behind; --cancel restores the original replicas, deletes
    the new replica's log and clears the throttles."""
    from confluent_kafka.admin import ResourceType  # noqa: PLC0415

    if len(four.brokers) < 4:
        four.add_broker()
    topic = "throttled"
    create_topic(four.bootstrap_servers, topic, 1, 2, assignment=[[1, 2]])
    values = [b"%06d" % i + b"x" * 1018 for i in range(4000)]  # ~4 MB
    p = Producer({"bootstrap.servers": four.bootstrap_servers, "acks": "all", "linger.ms": 20})
    for v in values:
        while True:
            try:
                p.produce(topic, value=v, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    full = _log_bytes(four, 1, topic, 0)
    assert full > 4_000_000
    # A probe partition broker 3 follows from the same leader (one fetcher per leader):
    # each acks=all write to it completes only after broker 3's next fetch from broker 1,
    # which would carry the throttled partition too if the quota let it.
    probe = f"{topic}-probe"
    create_topic(
        four.bootstrap_servers,
        probe,
        config={"min.insync.replicas": "2"},
        assignment=[[1, 3]],
        wait_leaders=True,
    )
    plan = _write_json(
        tmp_path / "plan.json",
        {
            "version": 1,
            "partitions": [
                {"topic": topic, "partition": 0, "replicas": [3, 2], "log_dirs": ["any", "any"]}
            ],
        },
    )
    out = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        "127.0.0.1:1," + four.broker(1).address,
        "--execute",
        "--throttle",
        "2000",
        "--reassignment-json-file",
        str(plan),
    )
    assert out.returncode == 0, out.stderr
    assert "The inter-broker throttle limit was set to 2000 B/s" in out.stdout
    listed = odradek("reassign-partitions", "--bootstrap-server", four.broker(1).address, "--list")
    assert f"{topic}-0: replicas: 3,2,1. adding: 3. removing: 1." in listed.stdout, listed
    ta = znodes.decode_topic(topic, four.zk_client().get(znodes.topic_path(topic))[0])
    assert ta.partitions[0] == [3, 2, 1]
    assert ta.adding_replicas == {0: [3]} and ta.removing_replicas == {0: [1]}
    assert _describe_config(four, ResourceType.TOPIC, topic, four.broker(1).address) == {
        "leader.replication.throttled.replicas": "0:1,0:2",
        "follower.replication.throttled.replicas": "0:3",
    }
    assert _describe_config(four, ResourceType.BROKER, "3", four.broker(3).address) == {
        "leader.replication.throttled.rate": "2000",
        "follower.replication.throttled.rate": "2000",
    }
    # The catch-up starts (one fetch of at most replica.fetch.max.bytes, 1 MiB), then
    # the quota holds it: over at least 4 s and ten more fetch rounds of broker 3 from
    # broker 1 (acks=all writes to the probe, each waiting for the next round) the new
    # replica gets at most ~2 fetches' worth. A rate needs time to pass (a lower bound:
    # a loaded machine only makes it longer); the rounds show the follower kept asking.
    wait_for(lambda: _log_bytes(four, 3, topic, 0) > 0, 30, "the new replica's first fetch")
    t0 = _log_bytes(four, 3, topic, 0)
    assert partition_meta(four.bootstrap_servers, topic)[0].leader == 1
    assert partition_meta(four.bootstrap_servers, probe)[0].leader == 1
    pp = Producer({"bootstrap.servers": four.bootstrap_servers, "acks": "all"})
    delivered: list[Any] = []  # each write's error (None: acknowledged)
    start = time.monotonic()
    while len(delivered) < 10 or time.monotonic() - start < 4:
        pp.produce(
            probe,
            value=b"round %d" % len(delivered),
            on_delivery=lambda err, _msg: delivered.append(err),
        )
        assert pp.flush(30) == 0 and delivered[-1] is None, delivered[-1]
    copied = _log_bytes(four, 3, topic, 0)
    assert copied <= 2 * 1048576 + 65536, (t0, copied, full)
    assert copied < full
    v = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        four.broker(1).address,
        "--verify",
        "--reassignment-json-file",
        str(plan),
    )
    assert f"Reassignment of partition {topic}-0 is still in progress." in v.stdout
    assert "Clearing" not in v.stdout  # throttles stay until the move is done
    c = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        four.broker(1).address,
        "--cancel",
        "--reassignment-json-file",
        str(plan),
    )
    assert c.returncode == 0, c.stderr
    assert f"Successfully cancelled partition reassignments for: {topic}-0" in c.stdout
    assert "Clearing broker-level throttles on brokers 1,2,3,4" in c.stdout
    # Kafka's ORS is RS minus the adding replicas, in RS's order (target first): the
    # original brokers come back as [2, 1], as they do in Kafka.
    wait_for(
        lambda: list(partition_meta(four.bootstrap_servers, topic)[0].replicas) == [2, 1],
        30,
        "the original replicas back",
    )
    ta = znodes.decode_topic(topic, four.zk_client().get(znodes.topic_path(topic))[0])
    assert ta.partitions[0] == [2, 1] and not ta.adding_replicas and not ta.removing_replicas
    d3 = Path(four.broker(3).log_dir) / f"{topic}-0"
    wait_for(lambda: not d3.exists(), 30, "the cancelled replica's log deleted")
    assert _describe_config(four, ResourceType.TOPIC, topic, four.broker(1).address) == {}
    assert _describe_config(four, ResourceType.BROKER, "3", four.broker(3).address) == {}
    again = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        four.broker(1).address,
        "--cancel",
        "--preserve-throttles",
        "--reassignment-json-file",
        str(plan),
    )
    assert "None of the specified partition reassignments are active." in again.stdout
    got = consume_all(four.bootstrap_servers, topic, [0])
    assert [v for _, v in got[0]] == values


@pytest.mark.slow  # ~10 s more: CI keeps the two moves above within its budget
def test_move_resumes_after_controller_failover(four: LocalCluster, tmp_path: Path) -> None:
    """REQ-R13 for KIP-455: the move's state lives in the topic znode, so a controller
    SIGKILLed mid-move is replaced by one that completes it (once the throttle that held
    it is lifted)."""
    ctrl, (a, b, c) = _four_brokers(four)
    topic = "resumed"
    create_topic(four.bootstrap_servers, topic, 1, 2, assignment=[[a, b]])
    values = [b"%06d" % i + b"y" * 1018 for i in range(3000)]
    p = Producer({"bootstrap.servers": four.bootstrap_servers, "acks": "all", "linger.ms": 20})
    for v in values:
        while True:
            try:
                p.produce(topic, value=v, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    plan = _write_json(
        tmp_path / "plan.json",
        {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [c, b]}]},
    )
    alive = four.broker(a).address
    out = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        alive,
        "--execute",
        "--throttle",
        "2000",
        "--reassignment-json-file",
        str(plan),
    )
    assert out.returncode == 0, out.stderr
    four.stop_broker(ctrl, signal.SIGKILL)
    try:
        wait_for(lambda: four.controller_id() not in (None, ctrl), 60, "a new controller")
        v = odradek(
            "reassign-partitions",
            "--bootstrap-server",
            alive,
            "--verify",
            "--reassignment-json-file",
            str(plan),
        )
        assert f"Reassignment of partition {topic}-0 is still in progress." in v.stdout, v
        # Lift the throttle (the topic's throttled replicas): the new controller, which
        # learnt of the move from the topic znode, completes it.
        r = odradek(
            "configs",
            "--bootstrap-server",
            alive,
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--alter",
            "--delete-config",
            "leader.replication.throttled.replicas,follower.replication.throttled.replicas",
        )
        assert r.returncode == 0, r.stderr

        def verified() -> bool:
            v = odradek(
                "reassign-partitions",
                "--bootstrap-server",
                alive,
                "--verify",
                "--reassignment-json-file",
                str(plan),
            )
            return f"Reassignment of partition {topic}-0 is completed." in v.stdout

        wait_for(verified, 120, "the move completed by the new controller", interval=1)
        assert list(partition_meta(alive, topic)[0].replicas) == [c, b]
        got = consume_all(alive, topic, [0])
        assert [v for _, v in got[0]] == values
    finally:
        four.start_broker(ctrl)


def _registered(address: str) -> set[int]:
    md = AdminClient({"bootstrap.servers": address}).list_topics(timeout=10)
    return set(md.brokers)


def test_move_with_a_stopped_replica_completes_once_it_is_back(
    four: LocalCluster, tmp_path: Path
) -> None:
    """Kafka's validateReassignment: only the brokers being added must be alive. A replica
    that stays may be down: the move starts, and completes once that replica is back in
    the ISR. Adding a broker that is not registered is refused with
    INVALID_REPLICA_ASSIGNMENT. (The simulator's seed 2951: a move issued while a staying
    replica's broker was cut from ZooKeeper was accepted by the API, then dropped by the
    controller, and never completed.)"""
    _, (a, b, c) = _four_brokers(four)
    topic = "stayer-down"
    create_topic(four.bootstrap_servers, topic, 1, 2, assignment=[[a, b]])
    p = Producer({"bootstrap.servers": four.bootstrap_servers, "acks": "all"})
    values = [b"%04d" % i for i in range(200)]
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(60) == 0
    del p
    alive = four.broker(a).address

    four.stop_broker(b)
    # kafka-python's AdminClient: Odradek's reassign-partitions, as Kafka's, refuses a
    # plan naming any unknown broker before it asks the cluster ("Unknown broker id(s)").
    admin = KafkaAdminClient(bootstrap_servers=alive)
    try:
        wait_for(lambda: b not in _registered(alive), 60, f"broker {b} unregistered")
        tp = KafkaTopicPartition(topic, 0)
        bad = admin.alter_partition_reassignments({tp: [c, b, 99]})
        assert bad == {tp: kafka.errors.InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({tp: [c, b]}) == {tp: None}
        wait_for(
            lambda: list(partition_meta(alive, topic)[0].replicas) == [c, b, a],
            60,
            "the move started: replicas [c, b, a]",
        )
    finally:
        admin.close()
        four.start_broker(b)
    wait_for(
        lambda: list(partition_meta(alive, topic)[0].replicas) == [c, b],
        120,
        "the move completed once the stopped replica was back",
        interval=0.5,
    )
    got = consume_all(alive, topic, [0])
    assert [v for _, v in got[0]] == values
