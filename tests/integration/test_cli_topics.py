"""The operator's view: ``odradek topics`` and ``odradek cluster status`` (kafka-topics format)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest
from replication_util import partition_meta, wait_for

pytestmark = pytest.mark.integration


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60
    )


def test_topics_describe_and_replica_health_filters(make_cluster, topic_name) -> None:
    c = make_cluster(
        3, broker_config={"replica.lag.time.max.ms": "2000", "zookeeper.session.timeout.ms": "4000"}
    )
    bs = c.bootstrap_servers
    r = odradek(
        "topics",
        "--bootstrap-server",
        bs,
        "--create",
        "--topic",
        topic_name,
        "--partitions",
        "3",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    )
    assert r.returncode == 0 and f"Created topic {topic_name}." in r.stdout, r.stderr
    r = odradek("topics", "--bootstrap-server", bs, "--describe", "--topic", topic_name)
    assert f"Topic: {topic_name}\tPartitionCount: 3\tReplicationFactor: 3" in r.stdout
    rows = re.findall(
        r"Partition: (\d+)\tLeader: (\d+)\tReplicas: ([\d,]+)\tIsr: ([\d,]+)", r.stdout
    )
    assert len(rows) == 3
    assert sorted(int(p) for p, *_ in rows) == [0, 1, 2]
    # REQ-R2: leaders spread over the brokers, the first replica is the leader.
    assert sorted(int(leader) for _, leader, *_ in rows) == [1, 2, 3]
    assert all(reps.split(",")[0] == leader for _, leader, reps, _ in rows)

    r = odradek("topics", "--bootstrap-server", bs, "--describe", "--under-replicated-partitions")
    assert r.stdout.strip() == ""
    c.stop_broker(3, signal.SIGKILL)
    wait_for(
        lambda: all(3 not in p.isrs for p in partition_meta(bs, topic_name).values()),
        30,
        "broker 3 to leave every ISR",
    )
    r = odradek(
        "topics",
        "--bootstrap-server",
        bs,
        "--describe",
        "--topic",
        topic_name,
        "--under-replicated-partitions",
    )
    assert len(r.stdout.strip().splitlines()) == 3
    r = odradek(
        "topics",
        "--bootstrap-server",
        bs,
        "--describe",
        "--topic",
        topic_name,
        "--under-min-isr-partitions",
    )
    assert r.stdout.strip() == ""  # ISR of 2 is not under min.insync.replicas=2
    r = odradek(
        "topics",
        "--bootstrap-server",
        bs,
        "--describe",
        "--topic",
        topic_name,
        "--at-min-isr-partitions",
    )
    assert len(r.stdout.strip().splitlines()) == 3

    r = odradek("cluster", "status", "--dir", str(c.dir))
    assert r.returncode == 0, r.stderr
    assert re.search(r"broker 3 .* dead", r.stdout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(f"Topic: {topic_name}")]
    assert len(lines) == 3 and all("Isr: " in ln and "HW: " in ln for ln in lines)

    r = odradek("topics", "--bootstrap-server", bs, "--delete", "--topic", topic_name)
    assert r.returncode == 0, r.stderr
    r = odradek("topics", "--bootstrap-server", bs, "--list")
    assert topic_name not in r.stdout.split()
