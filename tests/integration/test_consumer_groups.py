"""Consumer groups with real clients, real brokers and a real ZooKeeper (issue 4).

Reliability levers (docs/requirements.md): consumer acknowledgement (offsets committed after processing
are durable: replicated in ``__consumer_offsets`` before the commit is answered) and
consumer-group rebalancing (partitions are redistributed when consumers join, leave or
crash). Consumers that must crash run in their own processes (SIGKILL).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from rawclient import RawClient, request_cls
from replication_util import create_topic, wait_for

from odradek.cluster.local import LocalCluster

pytestmark = pytest.mark.integration

FAST_GROUPS = {
    "group.initial.rebalance.delay.ms": "300",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "6",
    "replica.lag.time.max.ms": "3000",
    "zookeeper.session.timeout.ms": "4000",
}
SESSION_MS = 3000

# One consumer process: subscribes, appends "partition offset" for every record it
# processes, commits after processing (at-least-once), and publishes its assignment.
CONSUMER_SCRIPT = r'''
import json, os, signal, sys, time
client, bootstrap, topic, group, out = sys.argv[1:6]
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
processed = open(out + ".processed", "a", buffering=1)
last = None
def publish(parts):
    global last
    parts = sorted(parts)
    if parts != last:
        last = parts
        with open(out + ".tmp", "w") as f:
            json.dump(parts, f)
        os.replace(out + ".tmp", out + ".assign")
if client == "confluent":
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": %(session)d, "heartbeat.interval.ms": 300,
                  "topic.metadata.refresh.interval.ms": 2000})
    c.subscribe([topic])
    while not stop:
        msgs = c.consume(200, 0.2)
        publish([tp.partition for tp in c.assignment()])
        done = {}
        for m in msgs:
            if m.error():
                continue
            processed.write("%%d %%d\n" %% (m.partition(), m.offset()))
            done[m.partition()] = m.offset() + 1
        if done:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in done.items()],
                         asynchronous=False)
            except Exception as e:  # a rebalance: the records will be reprocessed
                print("commit failed:", e, file=sys.stderr)
    c.close()
else:
    from kafka import KafkaConsumer, TopicPartition, OffsetAndMetadata
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      session_timeout_ms=%(session)d, heartbeat_interval_ms=300,
                      metadata_max_age_ms=2000)
    c.subscribe([topic])
    while not stop:
        batches = c.poll(timeout_ms=200)
        publish([tp.partition for tp in c.assignment()])
        done = {}
        for tp, recs in batches.items():
            for r in recs:
                processed.write("%%d %%d\n" %% (r.partition, r.offset))
                done[tp] = r.offset + 1
        if done:
            try:
                c.commit({tp: OffsetAndMetadata(o, None, -1) for tp, o in done.items()})
            except Exception as e:
                print("commit failed:", e, file=sys.stderr)
    c.close()
''' % {"session": SESSION_MS}  # noqa: UP031 - the script's own braces need no escaping


@pytest.fixture(scope="module")
def groups_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.start(tmp_path_factory.mktemp("groups"), 3, broker_config=FAST_GROUPS)
    try:
        yield c
    finally:
        c.down()


def produce_n(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=b"v-%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe-" + uuid.uuid4().hex})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        c.close()


class ConsumerProcs:
    """Consumer processes of one group; every one is killed at the end, even on failure."""

    def __init__(self, tmp: Path, client: str, bootstrap: str, topic: str, group: str) -> None:
        self.dir = tmp
        self.script = tmp / "consumer.py"
        self.script.write_text(CONSUMER_SCRIPT)
        self.args = [client, bootstrap, topic, group]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - the child process owns the file
        self.procs[name] = subprocess.Popen(
            [sys.executable, str(self.script), *self.args, str(self.dir / name)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def stop(self, name: str, sig: int) -> None:
        p = self.procs.pop(name)
        p.send_signal(sig)
        p.wait(30)

    def assignment(self, name: str) -> list[int]:
        try:
            return json.loads((self.dir / f"{name}.assign").read_text())
        except (OSError, ValueError):
            return []

    def assignments(self) -> dict[str, list[int]]:
        return {n: self.assignment(n) for n in self.procs}

    def processed(self) -> set[tuple[int, int]]:
        out: set[tuple[int, int]] = set()
        for f in self.dir.glob("*.processed"):
            for line in f.read_text().splitlines():
                p, o = line.split()
                out.add((int(p), int(o)))
        return out

    def close(self) -> None:
        for p in self.procs.values():
            p.kill()
            p.wait(10)
        self.procs.clear()


def balanced(procs: ConsumerProcs, n_partitions: int) -> dict[str, list[int]] | None:
    a = procs.assignments()
    parts = [p for ps in a.values() for p in ps]
    sizes = {len(ps) for ps in a.values()}
    if sorted(parts) == list(range(n_partitions)) and max(sizes) - min(sizes) <= 1:
        return a
    return None


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_group_rebalances_on_leave_crash_join_without_skipping(
    groups_cluster: LocalCluster, tmp_path: Path, client: str
) -> None:
    bs = groups_cluster.bootstrap_servers
    topic, group, n_parts = f"cg-{uuid.uuid4().hex[:8]}", f"g-{client}", 12
    create_topic(bs, topic, n_parts, 2)
    produce_n(bs, topic, 600, n_parts)
    procs = ConsumerProcs(tmp_path, client, bs, topic, group)
    try:
        for name in ("c1", "c2", "c3"):
            procs.start(name)
        a = wait_for(lambda: balanced(procs, n_parts), 60, "3 consumers balanced")
        assert sorted(len(v) for v in a.values()) == [4, 4, 4]
        produce_n(bs, topic, 600, n_parts, start=600)

        procs.stop("c1", signal.SIGTERM)  # leaves the group (LeaveGroup)
        a = wait_for(lambda: balanced(procs, n_parts), 30, "2 consumers after a leave")
        assert sorted(len(v) for v in a.values()) == [6, 6]
        produce_n(bs, topic, 600, n_parts, start=1200)

        procs.stop("c2", signal.SIGKILL)  # crash: found by the session timeout
        a = wait_for(lambda: balanced(procs, n_parts), 30, "1 consumer after a crash")
        assert a == {"c3": list(range(n_parts))}
        produce_n(bs, topic, 600, n_parts, start=1800)

        procs.start("c4")
        a = wait_for(lambda: balanced(procs, n_parts), 30, "2 consumers after a join")
        assert sorted(len(v) for v in a.values()) == [6, 6]
        produce_n(bs, topic, 600, n_parts, start=2400)

        ends = end_offsets(bs, topic, n_parts)
        assert sum(ends.values()) == 3000
        want = {(p, o) for p, end in ends.items() for o in range(end)}
        wait_for(lambda: want <= procs.processed(), 60, "every record processed")
        # Nothing was skipped, and the group's committed offsets reach the end.
        admin = AdminClient({"bootstrap.servers": bs})

        def committed() -> bool:
            from confluent_kafka import ConsumerGroupTopicPartitions

            res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
                group
            ].result()
            return {tp.partition: tp.offset for tp in res.topic_partitions} == ends

        wait_for(committed, 30, "committed offsets at the end of every partition")
    finally:
        procs.close()


def test_commit_restart_resumes_at_committed_offset(groups_cluster: LocalCluster) -> None:
    bs = groups_cluster.bootstrap_servers
    topic, group = f"cr-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 1, 3)
    produce_n(bs, topic, 100, 1)
    conf = {
        "bootstrap.servers": bs,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
    }
    c = Consumer(conf)
    c.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while len(seen) < 37 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(m.offset())
    assert seen[:37] == list(range(37))
    # The committed offset is the next offset to read; metadata round-trips.
    c.commit(offsets=[TopicPartition(topic, 0, 37, metadata="after-36")], asynchronous=False)
    got = c.committed([TopicPartition(topic, 0)], timeout=10)[0]
    assert (got.offset, got.metadata) == (37, "after-36")
    c.close()

    c2 = Consumer(conf)
    c2.subscribe([topic])
    try:
        m = wait_for(
            lambda: (lambda m: m if m is not None and not m.error() else None)(c2.poll(0.5)),
            30,
            "first record after restart",
        )
        assert m.offset() == 37
    finally:
        c2.close()

    # A kafka-python consumer of the same group resumes there too.
    from kafka import KafkaConsumer

    k = KafkaConsumer(
        topic,
        bootstrap_servers=bs,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
    )
    try:
        recs: list[Any] = []
        deadline = time.monotonic() + 30
        while not recs and time.monotonic() < deadline:
            recs = [r for rs in k.poll(timeout_ms=500).values() for r in rs]
        assert recs and recs[0].offset == 37
    finally:
        k.close()


def _join(rc: RawClient, group: str, member_id: str) -> Any:
    cls = request_cls(11, 7)
    mod = sys.modules[cls.__module__]
    from datetime import timedelta

    return rc.request(
        cls(
            group_id=group,
            session_timeout=timedelta(seconds=10),
            rebalance_timeout=timedelta(seconds=30),
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00"),),
        )
    )


def test_first_join_completes_after_the_initial_delay_not_the_rebalance_timeout(
    make_cluster: Any,
) -> None:
    """group.initial.rebalance.delay.ms: a new group's first JoinGroup is held for the
    initial delay (3 s), then answered, long before the member's 30 s rebalance timeout.
    The upper bounds are the rebalance timeout with a margin, not the delay plus a
    latency (a loaded machine adds seconds)."""
    c = make_cluster(1)  # default group.initial.rebalance.delay.ms = 3000
    bs = c.bootstrap_servers
    host, port = c.brokers[0].host, c.brokers[0].port
    with RawClient(host, port, timeout=15) as rc:
        # The first FindCoordinator creates __consumer_offsets (50 partitions by default);
        # wait until the group's coordinator is elected.
        find = request_cls(10, 3)
        wait_for(
            lambda: rc.request(find(key="fresh", key_type=0)).error_code == 0,
            30,
            "group coordinator available",
        )
        first = _join(rc, "fresh", "")
        assert first.error_code == 79  # MEMBER_ID_REQUIRED (KIP-394)
        t0 = time.monotonic()
        res = _join(rc, "fresh", first.member_id)
        took = time.monotonic() - t0
    assert res.error_code == 0 and res.generation_id == 1 and res.leader == first.member_id
    assert 2.9 <= took < 20, took

    # A real client's first rebalance (FindCoordinator, two joins, sync) is as quick.
    topic = f"fj-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, 2, 1)
    assigned: list[float] = []
    cons = Consumer({"bootstrap.servers": bs, "group.id": "fresh-" + uuid.uuid4().hex[:6]})
    t0 = time.monotonic()
    cons.subscribe([topic], on_assign=lambda c_, ps: assigned.append(time.monotonic() - t0))
    try:
        while not assigned and time.monotonic() - t0 < 25:
            cons.poll(0.05)
    finally:
        cons.close()
    # (librdkafka's rebalance timeout is its max.poll.interval.ms, 300 s)
    assert assigned and assigned[0] < 25, assigned


def test_committed_offsets_survive_coordinator_failover(make_cluster: Any) -> None:
    c = make_cluster(3, broker_config=FAST_GROUPS)
    bs = c.bootstrap_servers
    topic, group = f"fo-{uuid.uuid4().hex[:8]}", "failover-group"
    create_topic(bs, topic, 3, 3)
    produce_n(bs, topic, 90, 3)
    conf = {
        "bootstrap.servers": bs,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
    }
    cons = Consumer(conf)
    cons.subscribe([topic])
    wait_for(lambda: (cons.poll(0.2), len(cons.assignment()) == 3)[1], 30, "assignment")
    want = {0: 11, 1: 22, 2: 29}
    cons.commit(offsets=[TopicPartition(topic, p, o) for p, o in want.items()], asynchronous=False)
    cons.close()

    admin = AdminClient({"bootstrap.servers": bs})
    coordinator = admin.describe_consumer_groups([group])[group].result().coordinator.id
    del admin  # no client with requests in flight may outlive the broker (librdkafka
    # 2.16 aborts in rd_kafka_enq_once_del_source_return when an admin request's
    # coordinator dies under it), so after the kill we ask with raw requests.
    alive = [b for b in c.brokers if b.id != coordinator]
    with RawClient(alive[0].host, alive[0].port) as rc:
        assert rc.request(request_cls(10, 3)(key=group, key_type=0)).node_id == coordinator
    c.stop_broker(coordinator, signal.SIGKILL)

    def offsets() -> tuple[int, dict[int, int]] | None:
        """(coordinator, committed offsets) once a live coordinator answers."""
        with RawClient(alive[0].host, alive[0].port) as rc:
            fc = rc.request(request_cls(10, 3)(key=group, key_type=0))
        if fc.error_code != 0 or fc.node_id == coordinator:
            return None
        of = request_cls(9, 7)
        with RawClient(fc.host, fc.port) as rc:
            r = rc.request(of(group_id=group, topics=None, require_stable=False))
        if r.error_code != 0:
            return None
        return fc.node_id, {
            p.partition_index: p.committed_offset for t in r.topics for p in t.partitions
        }

    new_coord, got = wait_for(offsets, 40, "offsets from the new coordinator")
    assert got == want and new_coord != coordinator

    cons = Consumer({**conf, "bootstrap.servers": ",".join(b.address for b in alive)})
    cons.subscribe([topic])
    first: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while len(first) < 3 and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                first.setdefault(m.partition(), m.offset())
    finally:
        cons.close()
    assert first == want


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "consumer-groups", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_list_describe_reset_delete(groups_cluster: LocalCluster) -> None:
    bs = groups_cluster.bootstrap_servers
    topic, group = f"cli-{uuid.uuid4().hex[:8]}", f"cli-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 2, 1)
    produce_n(bs, topic, 40, 2)
    conf = {
        "bootstrap.servers": bs,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
        "client.id": "cli-test-client",
    }
    cons = Consumer(conf)
    cons.subscribe([topic])
    wait_for(lambda: (cons.poll(0.2), len(cons.assignment()) == 2)[1], 30, "assignment")
    cons.commit(
        offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)], asynchronous=False
    )
    try:
        out = wait_for(
            lambda: (lambda r: r.stdout if group in r.stdout else None)(
                _cli("--bootstrap-server", bs, "--list")
            ),
            20,
            "group listed",
        )
        assert group in out.split()
        r = _cli("--bootstrap-server", bs, "--describe", "--group", group)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        header = next(ln for ln in lines if ln.startswith("GROUP"))
        assert header.split() == [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        rows = {int(ln.split()[2]): ln.split() for ln in lines if ln.startswith(group)}
        assert rows[0][3:6] == ["5", "20", "15"] and rows[1][3:6] == ["7", "20", "13"]
        assert rows[0][8] == "cli-test-client"
        r = _cli("--bootstrap-server", bs, "--describe", "--group", group, "--state")
        assert "Stable" in r.stdout, r.stdout + r.stderr
        r = _cli("--bootstrap-server", bs, "--describe", "--group", group, "--members")
        assert "cli-test-client" in r.stdout and "#PARTITIONS" in r.stdout, r.stdout
        # Deleting or resetting an active group is refused.
        r = _cli("--bootstrap-server", bs, "--delete", "--group", group)
        assert r.returncode != 0 and "NON_EMPTY_GROUP" in (r.stdout + r.stderr)
    finally:
        cons.close()
    r = _cli(
        "--bootstrap-server",
        bs,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--shift-by",
        "-3",
        "--dry-run",
    )
    assert r.returncode == 0, r.stderr
    assert [ln.split()[2:4] for ln in r.stdout.splitlines() if ln.startswith(group)] == [
        ["0", "2"],
        ["1", "4"],
    ]
    r = _cli(
        "--bootstrap-server",
        bs,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--to-latest",
        "--execute",
    )
    assert r.returncode == 0, r.stderr
    r = _cli("--bootstrap-server", bs, "--describe", "--group", group)
    rows = {int(ln.split()[2]): ln.split() for ln in r.stdout.splitlines() if ln.startswith(group)}
    assert rows[0][3:6] == ["20", "20", "0"] and rows[1][3:6] == ["20", "20", "0"], r.stdout
    r = _cli(
        "--bootstrap-server",
        bs,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--to-offset",
        "1",
        "--execute",
    )
    assert r.returncode == 0, r.stderr
    r = _cli("--bootstrap-server", bs, "--delete", "--group", group)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _cli("--bootstrap-server", bs, "--list")
    assert group not in r.stdout.split()


def test_static_member_restart_keeps_assignment_without_rebalance(
    groups_cluster: LocalCluster,
) -> None:
    """KIP-345: a static member (group.instance.id) that restarts within its session gets
    its partitions back and the other members are not disturbed (no rebalance)."""
    bs = groups_cluster.bootstrap_servers
    topic, group = f"st-{uuid.uuid4().hex[:8]}", f"static-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 4, 1)
    revoked: dict[str, int] = {"a": 0, "b": 0}

    def consumer(name: str) -> Any:
        c = Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": group,
                "group.instance.id": f"instance-{name}",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe(
            [topic],
            on_revoke=lambda c_, ps: revoked.__setitem__(name, revoked[name] + (1 if ps else 0)),
        )
        return c

    b = consumer("b")  # first: the leader
    a = None
    try:
        wait_for(lambda: (b.poll(0.1), len(b.assignment()) == 4)[1], 30, "b owns all")
        a = consumer("a")

        def split() -> bool:
            a.poll(0.05)
            b.poll(0.05)
            return len(a.assignment()) == 2 and len(b.assignment()) == 2

        wait_for(split, 30, "2 + 2 partitions")
        a_parts = sorted(tp.partition for tp in a.assignment())
        b_parts = sorted(tp.partition for tp in b.assignment())
        revoked_b = revoked["b"]
        a.close()  # a static member does not leave the group on close
        a = consumer("a")
        wait_for(
            lambda: (a.poll(0.1), b.poll(0.05), len(a.assignment()) == 2)[2],
            30,
            "restarted static member assigned",
        )
        assert sorted(tp.partition for tp in a.assignment()) == a_parts
        for _ in range(10):
            b.poll(0.1)
        assert revoked["b"] == revoked_b, "the other member was rebalanced"
        assert sorted(tp.partition for tp in b.assignment()) == b_parts
    finally:
        b.close()
        if a is not None:
            a.close()


def test_kcat_consumer_group_commits(groups_cluster: LocalCluster) -> None:
    """librdkafka 2.0.2 (Debian's kcat) in group mode: joins, consumes, commits."""
    import shutil

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    bs = groups_cluster.bootstrap_servers
    topic, group = f"kc-{uuid.uuid4().hex[:8]}", f"kcat-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, 2, 1)
    produce_n(bs, topic, 20, 2)
    r = subprocess.run(
        ["kcat", "-b", bs, "-G", group, "-o", "beginning", "-e", "-f", "%p:%o\n", topic],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split()) == 20
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bs})
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=10
    )[group].result()
    assert {tp.partition: tp.offset for tp in res.topic_partitions} == {0: 10, 1: 10}


def test_protocol_errors_over_raw_requests(groups_cluster: LocalCluster) -> None:
    """Error codes a client relies on, across old and new versions (raw kio requests)."""
    from datetime import timedelta

    bs = groups_cluster.bootstrap_servers
    group = f"raw-{uuid.uuid4().hex[:6]}"
    with RawClient.to(bs.split(",")[0]) as rc:
        coord = wait_for(
            lambda: (lambda r: r if r.error_code == 0 else None)(
                rc.request(request_cls(10, 0)(key=group))
            ),
            30,
            "coordinator",
        )
    others = [b for b in groups_cluster.brokers if b.id != coord.node_id]
    with RawClient(others[0].host, others[0].port) as rc:
        r = rc.request(request_cls(12, 0)(group_id=group, generation_id=1, member_id="m"))
        assert r.error_code == 16  # NOT_COORDINATOR
    with RawClient(coord.host, coord.port) as rc:
        join0 = request_cls(11, 0)
        mod0 = sys.modules[join0.__module__]
        proto = (mod0.JoinGroupRequestProtocol(name="range", metadata=b""),)
        r = rc.request(
            join0(
                group_id=group,
                session_timeout=timedelta(milliseconds=100),
                member_id="",
                protocol_type="consumer",
                protocols=proto,
            )
        )
        assert r.error_code == 26  # INVALID_SESSION_TIMEOUT
        r = rc.request(
            join0(
                group_id="",
                session_timeout=timedelta(seconds=10),
                member_id="",
                protocol_type="consumer",
                protocols=proto,
            )
        )
        assert r.error_code == 24  # INVALID_GROUP_ID
        # JoinGroup v0 (no MEMBER_ID_REQUIRED round trip): joins after the initial delay.
        r = rc.request(
            join0(
                group_id=group,
                session_timeout=timedelta(seconds=10),
                member_id="",
                protocol_type="consumer",
                protocols=proto,
            )
        )
        assert (r.error_code, r.generation_id, r.leader) == (0, 1, r.member_id)
        member = r.member_id
        r = rc.request(
            request_cls(12, 4)(
                group_id=group, generation_id=0, member_id=member, group_instance_id=None
            )
        )
        assert r.error_code == 22  # ILLEGAL_GENERATION
        r = rc.request(
            request_cls(12, 4)(
                group_id=group, generation_id=1, member_id="who", group_instance_id=None
            )
        )
        assert r.error_code == 25  # UNKNOWN_MEMBER_ID
        # OffsetCommit during CompletingRebalance (before SyncGroup): REBALANCE_IN_PROGRESS
        oc = request_cls(8, 2)
        ocm = sys.modules[oc.__module__]
        commit = oc(
            group_id=group,
            generation_id_or_member_epoch=1,
            member_id=member,
            retention_time=timedelta(milliseconds=-1),
            topics=(
                ocm.OffsetCommitRequestTopic(
                    name="no-such-topic",
                    partitions=(
                        ocm.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=5, committed_metadata=""
                        ),
                    ),
                ),
            ),
        )
        r = rc.request(commit)
        assert r.topics[0].partitions[0].error_code == 27
        sync = request_cls(14, 0)
        smod = sys.modules[sync.__module__]
        r = rc.request(
            sync(
                group_id=group,
                generation_id=1,
                member_id=member,
                assignments=(
                    smod.SyncGroupRequestAssignment(member_id=member, assignment=b"\x00\x01"),
                ),
            )
        )
        assert (r.error_code, r.assignment) == (0, b"\x00\x01")
        r = rc.request(commit)
        assert r.topics[0].partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
        # DescribeGroups v0 shows the member; DeleteGroups refuses a non-empty group.
        d = rc.request(request_cls(15, 0)(groups=(group,)))
        assert d.groups[0].group_state == "Stable"
        assert [m.member_id for m in d.groups[0].members] == [member]
        dg = request_cls(42, 0)
        assert rc.request(dg(groups_names=(group,))).results[0].error_code == 68
        # LeaveGroup v0, then the empty group can be deleted; a missing one cannot.
        assert rc.request(request_cls(13, 0)(group_id=group, member_id=member)).error_code == 0
        assert rc.request(dg(groups_names=(group,))).results[0].error_code == 0
        assert rc.request(dg(groups_names=(group,))).results[0].error_code == 69
        # OffsetFetch v1 of a group with nothing committed: -1 per partition.
        of = request_cls(9, 1)
        ofm = sys.modules[of.__module__]
        r = rc.request(
            of(
                group_id=group,
                topics=(ofm.OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1)),),
            )
        )
        assert [(p.committed_offset, p.error_code) for p in r.topics[0].partitions] == [
            (-1, 0),
            (-1, 0),
        ]
