"""Connection limits with Kafka's names, against real broker processes over TCP.

connections.max.idle.ms, max.connections, max.connections.per.ip (+ overrides),
queued.max.requests and the cluster-wide partition cap. Each test has its own 1-broker
cluster with the limit set low, and ends by checking that a real client (confluent-kafka)
still gets a produce acknowledged and read back.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from rawclient import RawClient, create_topics_request, encode_request, frame, request_cls

from odradek.cluster.local import LocalCluster
from odradek.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MakeCluster = Callable[..., LocalCluster]


def _api_versions() -> Any:
    return request_cls(18, 3)(client_software_name="t", client_software_version="1")


def _connect(b: Any, source_ip: str = "127.0.0.1", timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection((b.host, b.port), timeout=timeout, source_address=(source_ip, 0))
    return s


def _answers(s: socket.socket, timeout: float) -> bool:
    """Send ApiVersions; True if answered within ``timeout``, False if no answer or closed."""
    s.settimeout(timeout)
    try:
        s.sendall(frame(encode_request(_api_versions(), 5)))
        head = s.recv(4)
    except TimeoutError:
        return False
    except OSError:
        return False
    return len(head) == 4


def _closed(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _real_client_round_trip(bootstrap: str, topic: str) -> None:
    with RawClient.to(bootstrap) as rc:
        r = rc.request(create_topics_request([(topic, 1, 1, {})]))
        assert r.topics[0].error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    acked: list[Any] = []
    p.produce(topic, b"still-serving", on_delivery=lambda err, msg: acked.append((err, msg)))
    assert p.flush(20) == 0
    err, msg = acked[0]
    assert err is None, err
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "limits", "enable.auto.commit": False}
    )
    try:
        c.assign([TopicPartition(topic, msg.partition(), msg.offset())])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                assert m.value() == b"still-serving"
                return
        raise AssertionError("the record was not read back")
    finally:
        c.close()


def test_idle_connections_are_closed(make_cluster: MakeCluster, topic_name: str) -> None:
    c = make_cluster(1, broker_config={"connections.max.idle.ms": "1000"})
    b = c.broker(1)
    idle = [_connect(b) for _ in range(300)]
    busy = _connect(b)
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            assert _answers(busy, 5)  # activity keeps this one open
            busy.recv(65536)
            time.sleep(0.2)
            if all(_closed(s, 0.001) for s in idle[:5]):
                break
        assert all(_closed(s, 5) for s in idle), "idle connections left open"
        assert _answers(busy, 5), "an active connection was closed"
    finally:
        for s in [*idle, busy]:
            s.close()
    _real_client_round_trip(c.bootstrap_servers, topic_name)


def test_max_connections_per_ip_and_overrides(make_cluster: MakeCluster, topic_name: str) -> None:
    c = make_cluster(
        1,
        broker_config={
            "max.connections.per.ip": "5",
            "max.connections.per.ip.overrides": "127.0.0.7:8",
        },
    )
    b = c.broker(1)
    mine = [_connect(b) for _ in range(5)]
    more = [_connect(b, "127.0.0.7") for _ in range(8)]
    try:
        assert all(_answers(s, 5) for s in mine + more)
        extra = _connect(b)  # the TCP handshake completes, then the broker closes it
        assert _closed(extra, 5), "a 6th connection from 127.0.0.1 was kept"
        extra_7 = _connect(b, "127.0.0.7")
        assert _closed(extra_7, 5), "a 9th connection from 127.0.0.7 was kept"
        mine.pop().close()
        deadline = time.monotonic() + 10
        while True:  # the slot comes back once the broker saw the close
            s = _connect(b)
            if _answers(s, 2):
                mine.append(s)
                break
            s.close()
            assert time.monotonic() < deadline, "the freed slot never came back"
            time.sleep(0.05)
    finally:
        for s in mine + more:
            s.close()
    _real_client_round_trip(c.bootstrap_servers, topic_name)


def test_max_connections_blocks_accepting(make_cluster: MakeCluster, topic_name: str) -> None:
    c = make_cluster(1, broker_config={"max.connections": "4"})
    b = c.broker(1)
    held = [_connect(b) for _ in range(4)]
    try:
        assert all(_answers(s, 5) for s in held)
        # Kafka's acceptor stops accepting at the limit: the fifth connects (the kernel's
        # backlog) but is not served until a slot frees.
        waiting = _connect(b)
        waiting.sendall(frame(encode_request(_api_versions(), 9)))
        waiting.settimeout(1.0)
        with pytest.raises((TimeoutError, socket.timeout)):
            waiting.recv(4)
        held.pop().close()
        waiting.settimeout(10)
        head = waiting.recv(4)
        assert len(head) == 4 and struct.unpack(">i", head)[0] > 0
        held.append(waiting)
    finally:
        for s in held:
            s.close()
    _real_client_round_trip(c.bootstrap_servers, topic_name)


def test_queued_max_requests_bounds_reading_not_serving(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    # One request may wait in the broker's queue: connections pipelining behind a long
    # fetch stop being read, and everything is still answered, in order.
    c = make_cluster(1, broker_config={"queued.max.requests": "1"})
    b = c.broker(1)
    with RawClient.to(c.bootstrap_servers) as rc:
        rc.request(create_topics_request([(topic_name, 1, 1, {})]))
    from rawclient import fetch_request, metadata_request

    conns = [RawClient(b.host, b.port) for _ in range(3)]
    try:
        for conn in conns:
            frames = [frame(encode_request(fetch_request(topic_name, 0, 0, max_wait_ms=500), 100))]
            frames += [
                frame(encode_request(metadata_request([topic_name]), 101 + k)) for k in range(50)
            ]
            conn.send_raw(b"".join(frames))
        for conn in conns:
            assert conn.receive(1, 12, 100).error_code == 0
            for k in range(50):
                assert conn.receive(3, 12, 101 + k).topics[0].error_code == 0
    finally:
        for conn in conns:
            conn.close()
    _real_client_round_trip(c.bootstrap_servers, topic_name)


def test_cluster_partition_cap(make_cluster: MakeCluster, topic_name: str) -> None:
    c = make_cluster(1, broker_config={"odradek.max.partitions": "8"})
    with RawClient.to(c.bootstrap_servers) as rc:
        r = rc.request(create_topics_request([(topic_name, 6, 1, {})]))
        assert r.topics[0].error_code == ErrorCode.none
        r = rc.request(create_topics_request([(topic_name + "-b", 3, 1, {})]))
        assert r.topics[0].error_code == ErrorCode.policy_violation
        assert "odradek.max.partitions=8" in (r.topics[0].error_message or "")
        import sys

        cp = sys.modules[request_cls(37, 3).__module__]
        from datetime import timedelta

        def add(count: int) -> Any:
            return rc.request(
                cp.CreatePartitionsRequest(
                    topics=(
                        cp.CreatePartitionsTopic(name=topic_name, count=count, assignments=None),
                    ),
                    timeout=timedelta(seconds=10),
                    validate_only=False,
                )
            ).results[0]

        assert add(9).error_code == ErrorCode.policy_violation
        assert add(8).error_code == ErrorCode.none
        r = rc.request(create_topics_request([(topic_name + "-c", 1, 1, {})]))
        assert r.topics[0].error_code == ErrorCode.policy_violation
    # The cap counts partitions, so the round trip reuses a partition that exists.
    _real_client_round_trip(c.bootstrap_servers, topic_name)


def test_assignment_larger_than_a_znode_is_refused(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    # With the per-request cap raised, 100,000 partitions reach the assignment: its JSON
    # is larger than ZooKeeper's 1 MB packet limit, which used to make ZooKeeper drop
    # the broker's connection (and the client's with it). It is refused before sending.
    c = make_cluster(1, broker_config={"odradek.max.partitions.per.request": "200000"})
    with RawClient.to(c.bootstrap_servers) as rc:
        r = rc.request(create_topics_request([(topic_name, 100_000, 1, {})]))
        assert r.topics[0].error_code == ErrorCode.policy_violation
        assert "znode" in (r.topics[0].error_message or "")
        assert rc.request(_api_versions()).error_code == 0  # same connection, still open
    assert c.is_registered(1)  # the broker kept its ZooKeeper session
    _real_client_round_trip(c.bootstrap_servers, topic_name + "-ok")
