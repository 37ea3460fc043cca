"""The guard that fails a test module which leaves a Kafka client alive
(tests/support/client_leaks.py), against real librdkafka clients. They point at a closed
loopback port: a live handle keeps its threads (and retries) whether or not a broker
answers, which is what made a leaked producer reach the next module's cluster."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from tests.support import client_leaks
from tests.support.client_leaks import leftover_clients

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nowhere() -> Iterator[str]:
    """A loopback address nobody listens on (bound, never listening, so not reused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        yield f"127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


def _quiet(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "log_level": 0, **extra}


def test_nothing_alive_is_a_cheap_none() -> None:
    assert leftover_clients() is None


def test_a_referenced_producer_is_reported_with_its_holder_once(nowhere: str) -> None:
    holder = {"kept_by_the_test": Producer(_quiet(nowhere))}
    try:
        left = leftover_clients(settle_s=0.5)
        assert left is not None and not left.cycles
        problem = "\n".join(left.referenced)
        assert "Producer" in problem and "still referenced" in problem
        assert "'kept_by_the_test'" in problem
        # Reported once: the modules after the one that leaked it are not blamed.
        assert leftover_clients(settle_s=0.5) is None
        again = Producer(_quiet(nowhere))
        left = leftover_clients(settle_s=0.5)
        assert left is not None and len(left.referenced) > 0
        again.close()
    finally:
        holder["kept_by_the_test"].close()
        client_leaks.REPORTED.forget()
    assert leftover_clients() is None


def test_clients_in_a_reference_cycle_are_reported_and_destroyed(nowhere: str) -> None:
    class Owner:
        def __init__(self) -> None:
            # A callback bound to the object that holds the client: the usual cycle.
            self.producer = Producer(_quiet(nowhere, error_cb=self.on_error))
            self.admin = AdminClient(_quiet(nowhere, error_cb=self.on_error))
            self.consumer = Consumer(_quiet(nowhere, **{"group.id": "g"}, error_cb=self.on_error))

        def on_error(self, err: Any) -> None:
            pass

    gc.disable()  # else an automatic collection may destroy them first
    try:
        Owner()
        left = leftover_clients()
    finally:
        gc.enable()
    assert left is not None and left.referenced == []
    problem = "\n".join(left.cycles)
    assert "reference cycle" in problem
    for kind in ("Producer", "AdminClient", "Consumer"):
        assert kind in problem
    assert "Owner.on_error" in problem
    assert leftover_clients() is None  # and they are gone


def test_a_closed_client_that_is_still_referenced_is_no_leak(nowhere: str) -> None:
    p = Producer(_quiet(nowhere))
    c = Consumer(_quiet(nowhere, **{"group.id": "g"}))
    p.close()
    c.close()
    assert leftover_clients(settle_s=0.5) is None
    del p, c


def test_a_console_collector_driven_by_hand_leaves_no_client(nowhere: str) -> None:
    # test_console_polling drives rounds without start(): the never-started thread held
    # the collector (its target) and so its AdminClient, until a full collection.
    from odradek.console.collector import ClusterCollector

    gc.disable()
    try:
        col = ClusterCollector(nowhere, lambda _s: None)
        col.stop()
        del col
        assert leftover_clients(settle_s=2) is None
    finally:
        gc.enable()


LEAKY_MODULE = """
from confluent_kafka import Producer

KEPT = []

def test_leaks():
    KEPT.append(Producer({"bootstrap.servers": "%s", "log_level": 0}))
"""

CYCLE_MODULE = """
from confluent_kafka import Producer

class Owner:
    def __init__(self):
        self.p = Producer({"bootstrap.servers": "%s", "log_level": 0, "error_cb": self.cb})

    def cb(self, err):
        pass

def test_cycle():
    import gc
    gc.disable()  # else an automatic collection may destroy it before the check
    Owner()
"""

TIDY_MODULE = """
from confluent_kafka import Producer

def test_closes():
    p = Producer({"bootstrap.servers": "%s", "log_level": 0})
    p.flush(0)
    p.close()

def test_drops():
    Producer({"bootstrap.servers": "%s", "log_level": 0})
"""


def test_the_hook_fails_the_module_that_leaked_and_warns_of_a_cycle(
    tmp_path: Path, nowhere: str
) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.support.client_leaks import pytest_runtest_protocol\n"
    )
    (tmp_path / "test_a_leaky.py").write_text(textwrap.dedent(LEAKY_MODULE % nowhere))
    (tmp_path / "test_b_cycle.py").write_text(textwrap.dedent(CYCLE_MODULE % nowhere))
    (tmp_path / "test_c_tidy.py").write_text(textwrap.dedent(TIDY_MODULE % (nowhere, nowhere)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider"]
        + ["-p", "no:xdist", "-q", "-rE", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "4 passed, 1 warning, 1 error" in out, out
    assert "ERROR test_a_leaky.py::test_leaks" in out, out
    assert "module left Kafka clients alive" in out and "<- list" in out, out
    # the cycle: a warning naming the callback; the modules after the leaky one are not
    # blamed for its producer
    warned = out.split("warnings summary")[1].split("short test summary")[0]
    assert "test_b_cycle.py::test_cycle: Kafka clients outlived the module" in warned, out
    assert "Owner.cb" in warned, out
    assert "test_b_cycle" not in out.split("short test summary")[-1], out
    assert "test_c_tidy" not in out.split("short test summary")[-1], out
