"""Faults act on real packets and processes, and leave nothing behind (issue 6 item 1).

Needs root, iptables and tc (docs/platform-notes.md, network faults); otherwise every test skips.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from odradek.chaos.faults import (
    Faults,
    FaultsUnavailable,
    IptablesFault,
    IptRule,
    require_available,
    tagged_rules,
)
from odradek.cluster.local import LocalCluster
from odradek.zk.server import cgroup2_root

pytestmark = pytest.mark.integration


@pytest.fixture
def faults(make_cluster) -> Iterator[Faults]:  # type: ignore[no-untyped-def]
    try:
        require_available(need_tc=True)
    except FaultsUnavailable as e:
        pytest.skip(str(e))
    c: LocalCluster = make_cluster(2, broker_config={"zookeeper.session.timeout.ms": "4000"})
    f = Faults(c)
    yield f
    f.heal_all()


def _connects(src: str, dst: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((dst, port), timeout=timeout, source_address=(src, 0)):
            return True
    except OSError:
        return False


def _mine(tag: str) -> list[str]:
    return [r for r in tagged_rules() if f"--comment {tag} " in r + " "]


def test_partition_blocks_both_ways_and_is_removed(faults: Faults) -> None:
    c = faults.cluster
    b1, b2, zk = c.broker(1), c.broker(2), c.zookeeper()
    assert _connects(b1.host, b2.host, b2.port) and _connects(b2.host, b1.host, b1.port)
    with faults.partition("b1", "b2") as f:
        assert len(_mine(f.tag)) == 2
        assert not _connects(b1.host, b2.host, b2.port)
        assert not _connects(b2.host, b1.host, b1.port)
        # Only that link: both still reach ZooKeeper.
        assert _connects(b1.host, zk.address, zk.port) and _connects(b2.host, zk.address, zk.port)
    assert _mine(f.tag) == []  # removed by exact spec, nothing of ours left
    assert _connects(b1.host, b2.host, b2.port)


def test_rules_removed_when_the_body_fails(faults: Faults) -> None:
    with pytest.raises(RuntimeError):
        with faults.isolate("b2") as f:
            assert len(_mine(f.tag)) == 4  # b2 <-> zk, b2 <-> b1
            raise RuntimeError("scenario failed")
    assert _mine(f.tag) == []


def test_lossy_link_rule_is_installed_and_removed(faults: Faults) -> None:
    f = faults.lossy("b1", "b2", 0.25)
    rules = _mine(f.tag)
    assert len(rules) == 2 and all("--probability 0.25" in r for r in rules)
    faults.heal(f)
    assert _mine(f.tag) == []


def _transfer_seconds(dst: str, nbytes: int) -> float:
    srv = socket.socket()
    srv.bind((dst, 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got = [0]

    def sink() -> None:
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(65536):
                got[0] += len(data)

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    start = time.monotonic()
    with socket.create_connection((dst, port), source_address=("127.0.0.1", 0)) as s:
        s.sendall(b"x" * nbytes)
    t.join(30)
    srv.close()
    assert got[0] == nbytes
    return time.monotonic() - start


def test_slow_link_really_slows(faults: Faults) -> None:
    dst = faults.cluster.broker(2).host
    fast = _transfer_seconds(dst, 300_000)
    with faults.slow("b2", rate="1mbit") as f:
        slow = _transfer_seconds(dst, 300_000)  # 2.4 Mbit at 1 Mbit/s: ~2 s
        assert f.active
    assert fast < 0.5 and slow > 1.2, (fast, slow)
    assert (
        "htb"
        not in subprocess.run(
            ["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True
        ).stdout
    )
    assert _transfer_seconds(dst, 300_000) < 0.5


def test_sigstop_and_sigcont(faults: Faults) -> None:
    c = faults.cluster
    with faults.pause("b2"):
        assert c.broker_state(2) == "stopped"
    assert c.broker_state(2) == "running"
    c.wait_broker_ready(2, 10)


def test_cgroup_rule_matches_a_process_that_cannot_bind(faults: Faults) -> None:
    """How ZooKeeper ensemble links are cut (docs/platform-notes.md): match the sender's cgroup v2."""
    root = cgroup2_root()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy")
    cg = f"odradek/chaos-test-{os.getpid()}"
    (root / cg).mkdir(parents=True, exist_ok=True)
    dst = faults.cluster.broker(2).host
    srv = socket.socket()
    srv.bind((dst, 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    probe = (
        "import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])),"
        " timeout=1.5).close(); print('connected')\nexcept OSError: print('blocked')"
    )
    cmd = [
        "/bin/sh",
        "-c",
        'echo $$ > "$0"; exec "$@"',
        str(root / cg / "cgroup.procs"),
        sys.executable,
        "-c",
        probe,
        dst,
        str(port),
    ]
    try:
        f = IptablesFault("cgroup probe", lambda tag: [IptRule("OUTPUT", tag, dst=dst, cgroup=cg)])
        try:
            inside = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
            outside = subprocess.run(
                [sys.executable, "-c", probe, dst, str(port)],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout
        finally:
            f.heal()
        assert inside.strip() == "blocked" and outside.strip() == "connected"
        assert _mine(f.tag) == []
    finally:
        srv.close()
        try:
            (root / cg).rmdir()
        except OSError:
            pass
