"""Broker metrics over HTTP, scraped from real brokers while real clients produce and a
broker is SIGKILLed and restarted (issue 15)."""

from __future__ import annotations

import re
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from replication_util import create_topic, produce, wait_for

from odradek.cluster.local import LocalCluster
from odradek.metrics.scrape import Samples, scrape

pytestmark = pytest.mark.integration

# Every series the issue names, as sample names (counters carry _total, histograms
# _bucket/_count/_sum).
REQUIRED = [
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_replicamanager_partitioncount",
    "kafka_server_replicamanager_leadercount",
    "kafka_server_replicamanager_offlinereplicacount",
    "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_controller_kafkacontroller_offlinepartitionscount",
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
    "kafka_server_replicamanager_isrshrinks_total",
    "kafka_server_replicamanager_isrexpands_total",
    "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total",
    "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_network_requestmetrics_requests_total",
    "kafka_network_requestmetrics_totaltimems_bucket",
    "kafka_network_requestmetrics_requestqueuetimems_bucket",
    "kafka_network_requestmetrics_localtimems_bucket",
    "kafka_network_requestmetrics_remotetimems_count",
    "kafka_log_log_size",
    "kafka_log_log_logendoffset",
    "kafka_server_sessionexpirelistener_sessionstate",
    "odradek_eventloop_stalls_total",
    "odradek_eventloop_lag_seconds_bucket",
    "odradek_gc_full_collections_total",
    "odradek_gc_full_collection_seconds_total",
    "odradek_gc_full_collection_max_seconds",
    "odradek_gc_heap_frozen",
    "odradek_gc_heap_freezes_total",
    "odradek_gc_heap_unfreezes_total",
    "kafka_server_socket_server_metrics_connection_count",
    "kafka_server_socket_server_metrics_connection_creation_total",
    "kafka_server_socket_server_metrics_connection_close_total",
    "kafka_network_requestchannel_requestqueuesize",
]

KILLED = 3


def _scrape_all(c: LocalCluster, skip: int | None = None) -> dict[int, Samples]:
    out = {}
    for b in c.brokers:
        if b.id != skip:
            assert b.metrics_url is not None
            out[b.id] = scrape(b.metrics_url)
    return out


def _total(samples: dict[int, Samples], name: str, **labels: str) -> float:
    return sum(s.get(name, **labels) or 0.0 for s in samples.values())


def _try_total(c: LocalCluster, name: str, skip: int | None = None) -> float | None:
    try:
        return _total(_scrape_all(c, skip), name)
    except OSError:
        return None


def test_metrics_follow_produce_kill_and_restart(make_cluster, topic_name) -> None:
    c = make_cluster(
        3, zk_session_timeout_ms=4000, broker_config={"replica.lag.time.max.ms": "4000"}
    )
    boot = c.bootstrap_servers
    create_topic(boot, topic_name, 3, 3)
    lonely = topic_name + "-rf1"  # one replica, on the broker that will be killed
    create_topic(boot, lonely, 1, 1, assignment=[[KILLED]])

    values = [f"{i:08d}".encode() * 8 for i in range(3000)]
    acked, errors = produce(boot, topic_name, values)
    assert not errors and len(acked) == len(values)

    s = _scrape_all(c)
    for b, samples in s.items():
        missing = [n for n in REQUIRED if n not in samples]
        assert not missing, f"broker {b} lacks {missing}"
    # Bytes in: what the leaders appended, i.e. their log sizes for this new topic.
    leaders_log_bytes = 0.0
    for samples in s.values():
        for (topic, part), _led in samples.by(
            "kafka_cluster_partition_replicascount", "topic", "partition"
        ).items():
            if topic == topic_name:
                leaders_log_bytes += (
                    samples.get("kafka_log_log_size", partition=part, topic=topic) or 0
                )
    bytes_in = _total(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic_name)
    assert bytes_in == leaders_log_bytes > sum(len(v) for v in values)
    assert _total(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == len(
        values
    )
    assert _total(s, "kafka_server_brokertopicmetrics_bytesin_total") >= bytes_in
    produces = sum(
        v
        for s_ in s.values()
        for labels, v in s_.series("kafka_network_requestmetrics_requests_total").items()
        if ("request", "Produce") in labels
    )
    assert produces >= 3
    assert (
        _total(s, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produces
    )
    # Queue time starts at the frame's arrival (stamped by the connection), so it is
    # never exactly 0; total time covers queue + local + remote.
    queue_ms = _total(s, "kafka_network_requestmetrics_requestqueuetimems_sum", request="Produce")
    assert queue_ms > 0
    assert _total(s, "kafka_network_requestmetrics_totaltimems_sum", request="Produce") >= queue_ms
    assert _total(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert _total(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert _total(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert _total(s, "kafka_server_replicamanager_partitioncount") >= 3 * 3 + 1
    for samples in s.values():
        assert (
            samples.get("kafka_server_sessionexpirelistener_sessionstate", state="CONNECTED") == 1
        )
        # The connection layer's counts: every broker leads a partition of the RF-3
        # topic, so the two followers' fetchers are connected to it.
        open_now = samples.get(
            "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT"
        )
        created = samples.get(
            "kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT"
        )
        closed = samples.get(
            "kafka_server_socket_server_metrics_connection_close_total", listener="PLAINTEXT"
        )
        assert open_now is not None and created is not None and closed is not None
        assert open_now >= 2 and created == open_now + closed
    expands_before = _total(s, "kafka_server_replicamanager_isrexpands_total")
    closes_before = _total(
        {b: v for b, v in s.items() if b != KILLED},
        "kafka_server_socket_server_metrics_connection_close_total",
        listener="PLAINTEXT",
    )

    c.stop_broker(KILLED, signal.SIGKILL)
    # Every partition of the RF-3 topic loses broker 3 from its ISR (the controller
    # removes it once its session expires) and is under-replicated on its leader; the
    # RF-1 topic's partition has no leader left: offline, counted by the controller.
    wait_for(
        lambda: _try_total(c, "kafka_server_replicamanager_underreplicatedpartitions", KILLED) == 3,
        60,
        "3 under-replicated partitions",
    )
    wait_for(
        lambda: (
            _try_total(c, "kafka_controller_kafkacontroller_offlinepartitionscount", KILLED) == 1
        ),
        60,
        "1 offline partition",
    )
    s = _scrape_all(c, KILLED)
    assert _total(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    # The killed broker's fetcher connections to the other leaders were closed.
    assert (
        _total(s, "kafka_server_socket_server_metrics_connection_close_total", listener="PLAINTEXT")
        >= closes_before + 2
    )

    c.start_broker(KILLED)
    wait_for(
        lambda: _try_total(c, "kafka_server_replicamanager_underreplicatedpartitions") == 0,
        60,
        "no under-replicated partition after the restart",
    )
    wait_for(
        lambda: _try_total(c, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0,
        60,
        "no offline partition after the restart",
    )
    # The leaders took broker 3 back into their ISRs: one expansion per partition.
    s = _scrape_all(c)
    assert _total(s, "kafka_server_replicamanager_isrexpands_total") >= expands_before + 3


def _raw(host: str, port: int, payload: bytes, timeout: float = 10.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def test_metrics_listener_bounds_hostile_input(cluster: LocalCluster) -> None:
    b = cluster.brokers[0]
    assert b.metrics_url is not None
    host, port = b.host, int(b.metrics_url.rsplit(":", 1)[1].split("/")[0])
    assert _raw(host, port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _raw(host, port, b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert _raw(host, port, b"GET /nope HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert _raw(host, port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000).startswith(
        b"HTTP/1.1 431"
    )
    # Connections that never finish their request: more than the bound are refused
    # at once, and each is cut off after the head timeout; scrapes keep working.
    idle = [socket.create_connection((host, port), timeout=60) for _ in range(40)]
    try:
        t0 = time.monotonic()
        first = idle[0].recv(100)
        # Cut off by the head timeout (5 s), not left open: generous for a loaded machine.
        assert first.startswith(b"HTTP/1.1 408") and time.monotonic() - t0 < 30
    finally:
        for sock in idle:
            sock.close()
    with urllib.request.urlopen(b.metrics_url, timeout=5) as resp:
        assert resp.status == 200
        assert b"kafka_server_replicamanager_partitioncount" in resp.read()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(b.metrics_url.replace("/metrics", "/x"), timeout=5)
    assert e.value.code == 404


def test_scrapes_at_once_and_abandoned_scrapes_all_answer(
    cluster: LocalCluster, topic_name: str
) -> None:
    """A scrape renders off the event loop (copied in slices, formatted in a thread);
    scrapes that arrive together share one rendering. Each still gets the whole text,
    and a scraper that hangs up mid-rendering leaves the listener serving."""
    import concurrent.futures

    b = cluster.brokers[0]
    assert b.metrics_url is not None
    create_topic(cluster.bootstrap_servers, topic_name, 600, 1, wait_leaders=True)
    host, port = b.host, int(b.metrics_url.rsplit(":", 1)[1].split("/")[0])
    for _ in range(5):  # hang up right after asking
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")

    def one(query: str = "") -> bytes:
        with urllib.request.urlopen(b.metrics_url + query, timeout=30) as resp:
            assert resp.status == 200
            return bytes(resp.read())

    by_name = "?name[]=kafka_log_log_size&name[]=kafka_server_replicamanager_partitioncount"
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(
            pool.map(lambda i: (i % 3 == 0, one(by_name if i % 3 == 0 else "")), range(36))
        )
    bodies = [body for named, body in answers if not named]
    for named in [body for named, body in answers if named]:  # only the samples asked for
        names = {
            ln.split(b"{")[0].split(b" ")[0] for ln in named.splitlines() if not ln.startswith(b"#")
        }
        assert names == {b"kafka_log_log_size", b"kafka_server_replicamanager_partitioncount"}
        assert named.count(b'topic="' + topic_name.encode() + b'"') == 600
    for body in bodies:
        series = len(
            re.findall(
                rb'^kafka_log_log_size\{partition="\d+",topic="' + topic_name.encode() + rb'"\} ',
                body,
                re.M,
            )
        )
        assert series == 600, series
        assert b"process_cpu_seconds_total" in body  # the process collectors too
    head = _raw(host, port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")


def test_the_settled_heap_is_frozen_and_a_removed_partition_unfreezes_it(
    make_cluster, topic_name
) -> None:
    """odradek.heap.freeze.settle.ms (odradek.broker.heap): once the broker's partitions
    settle, its heap is frozen out of full garbage collections; new partitions join it
    once they settle too, and a deleted partition unfreezes it at once, so the deleted
    partition's objects reach the next full collection."""
    from confluent_kafka.admin import AdminClient

    c = make_cluster(1, broker_config={"odradek.heap.freeze.settle.ms": "500"})
    url = c.brokers[0].metrics_url
    assert url is not None

    def heap() -> tuple[float, float, float]:
        m = scrape(url)
        return (
            m.get("odradek_gc_heap_frozen") or 0.0,
            m.get("odradek_gc_heap_freezes_total") or 0.0,
            m.get("odradek_gc_heap_unfreezes_total") or 0.0,
        )

    def until(cond: Callable[[tuple[float, float, float]], bool], what: str) -> Any:
        def check() -> tuple[float, float, float] | None:
            h = heap()
            return h if cond(h) else None

        return wait_for(check, 30, what)  # ticks every 5 s (odradek.broker.heap.TICK_S)

    # The broker's own start-up heap is frozen.
    first = until(lambda h: h[0] == 1, "the start-up heap frozen")
    assert first[2] == 0
    create_topic(c.bootstrap_servers, topic_name, partitions=4, wait_leaders=True)
    grown = until(lambda h: h[1] > first[1], "the new partitions frozen too")
    assert grown[0] == 1 and grown[2] == 0
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.delete_topics([topic_name], operation_timeout=30)[topic_name].result(30)
    gone = until(lambda h: h[2] >= 1, "the heap unfrozen after the deletion")
    assert gone[1] >= grown[1]
