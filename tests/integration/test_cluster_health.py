"""``odradek cluster health`` against a real cluster: exit 0 only while healthy (issue 15)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from replication_util import create_topic, wait_for

pytestmark = pytest.mark.integration


def _health(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "cluster", "health", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_health_exit_code_follows_a_broker_kill(make_cluster, topic_name) -> None:
    c = make_cluster(3, zk_session_timeout_ms=4000)
    create_topic(c.bootstrap_servers, topic_name, 3, 3, config={"min.insync.replicas": "3"})
    ok = _health("--bootstrap-server", c.bootstrap_servers)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Healthy:" in ok.stdout and "true" in ok.stdout
    assert "Nodes down:                       []" in ok.stdout

    c.stop_broker(2, signal.SIGKILL)
    # With the cluster directory, the dead process is down at once.
    r = _health("--dir", str(c.dir))
    assert r.returncode == 1 and "nodes_down" in r.stdout, r.stdout
    # Over the protocol alone, once its ZooKeeper session expired and the controller
    # shrank the ISRs: down, under-replicated and under min ISR.
    r = wait_for(
        lambda: (lambda p: p if "under_min_isr_partitions" in p.stdout else None)(
            _health("--bootstrap-server", c.bootstrap_servers)
        ),
        60,
        "an unhealthy report",
    )
    assert r.returncode == 1
    assert "Nodes down:                       [2]" in r.stdout
    assert "Under-replicated partitions (3):" in r.stdout
    assert "Under-min-ISR partitions (3):" in r.stdout

    c.start_broker(2)
    r = _health("--dir", str(c.dir), "--wait", "60")
    assert r.returncode == 0, r.stdout
