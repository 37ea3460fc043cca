"""Brokers and a ZooKeeper ensemble as separate hosts (network namespaces), issue 19.

Root only (skipped otherwise). Three brokers and three ZooKeeper servers, each in its
own namespace on a private bridge; an idempotent acks=all producer on client host c1
and a consumer group member on c2 -- processes in other namespaces that reach the
brokers by their host addresses. A broker is SIGKILLed, then the ZooKeeper ensemble
leader; no acknowledged record may be lost (REQ-R1: acks=all records are committed
on every ISR member, min.insync.replicas=2). ``cluster down`` must leave no namespace,
veth or bridge of the block behind, even after the processes were killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from replication_util import consume_all, create_topic, partition_meta, produce, wait_for

from odradek.cluster import netns
from odradek.cluster.local import LocalCluster
from odradek.zk.server import four_letter_word

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

CLIENTS = Path(__file__).resolve().parents[1] / "support" / "host_clients.py"
FAST = {"replica.lag.time.max.ms": "4000", "zookeeper.session.timeout.ms": "6000"}


def _lines(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text().splitlines() if ln]
    except FileNotFoundError:
        return []


def _zk_leader(c: LocalCluster) -> int | None:
    for z in c.zookeeper_nodes:
        try:
            if "Mode: leader" in four_letter_word(z.address, z.port, "srvr"):
                return z.id
        except OSError:
            continue
    return None


def _leftovers(block: int) -> list[str]:
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names = [ln.split()[0] for ln in ns.splitlines() if ln.strip()]
    names += [ln.split(":")[1].strip().split("@")[0] for ln in links.splitlines() if ":" in ln]
    return [
        n
        for n in names
        if n.startswith(f"odx{block}-") or n.startswith(f"odx{block}v") or n == f"odx{block}br"
    ]


@pytest.mark.timeout(300)
def test_netns_hosts_survive_broker_and_zookeeper_leader_kill(tmp_path: Path) -> None:
    if (why := netns.available()) is not None:
        pytest.skip(why)
    c = LocalCluster(tmp_path / "cluster")
    clients: list[subprocess.Popen[bytes]] = []
    block: int | None = None
    try:
        c.up(3, FAST, zk_nodes=3, hosts="netns", timeout=120)
        block = c.block
        assert block is not None
        # Every node really is in its own namespace, on its subnet address.
        for b in c.brokers:
            ns = subprocess.run(
                ["ip", "netns", "identify", str(b.pid)], capture_output=True, text=True
            ).stdout.strip()
            assert ns == netns.namespace_name(block, f"b{b.id}")
            assert b.host == f"10.209.{block}.{1 + b.id}"
        topic = "netns-acks-all"
        create_topic(c.bootstrap_servers, topic, 3, 3, {"min.insync.replicas": "2"})
        acked, consumed, stop = tmp_path / "acked", tmp_path / "consumed", tmp_path / "stop"
        # The consumer stops only once the producer has exited: its last acks (records
        # that waited for an election) reach the acked file during its final flush, and
        # a consumer that compared against the file before that stopped short.
        produced = tmp_path / "produced"
        common = ["--bootstrap", c.bootstrap_servers, "--topic", topic]
        for host, args in (
            ("c1", ["produce", "--out", str(acked), "--stop", str(stop)]),
            (
                "c2",
                [
                    "consume",
                    "--out",
                    str(consumed),
                    "--expect-file",
                    str(acked),
                    "--stop",
                    str(produced),
                ],
            ),
        ):
            log = open(tmp_path / f"{host}.log", "wb")  # noqa: SIM115 - the child process owns the file
            clients.append(
                subprocess.Popen(
                    [*c.exec_prefix(host), sys.executable, str(CLIENTS), *args, *common],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        wait_for(lambda: len(_lines(acked)) >= 300, 60, "the producer on c1 to get 300 acks")

        c.stop_broker(2, signal.SIGKILL)
        mark = len(_lines(acked))
        wait_for(lambda: len(_lines(acked)) >= mark + 300, 90, "acks after the broker SIGKILL")

        leader = wait_for(lambda: _zk_leader(c), 30, "a ZooKeeper ensemble leader")
        c.stop_zookeeper(leader, signal.SIGKILL)
        mark = len(_lines(acked))
        wait_for(
            lambda: len(_lines(acked)) >= mark + 300, 90, "acks after the ZooKeeper leader SIGKILL"
        )
        new_leader = wait_for(lambda: _zk_leader(c), 30, "a new ZooKeeper leader")
        assert new_leader != leader

        stop.touch()
        assert clients[0].wait(150) == 0
        produced.touch()
        errors = _lines(Path(str(acked) + ".errors"))
        assert errors == [], errors  # idempotent acks=all: every record acknowledged
        assert clients[1].wait(150) == 0
        want = set(_lines(acked))
        assert len(want) >= 900
        missing = want - set(_lines(consumed))
        assert not missing, f"the consumer group on c2 missed {len(missing)} acked records"
        # And the log itself holds each acknowledged record exactly once (idempotence).
        logged = [
            v.decode()
            for recs in consume_all(c.bootstrap_servers, topic, [0, 1, 2], 60).values()
            for _, v in recs
        ]
        assert want <= set(logged)
        assert len(logged) == len(set(logged))
    finally:
        for p in clients:
            if p.poll() is None:
                p.kill()
            p.wait()
        c.down()
    # down() after SIGKILLs: every namespace, veth and bridge of the block is gone.
    assert block is not None and _leftovers(block) == []


def _reaches(c: LocalCluster, src: str, address: str, port: int) -> bool:
    """Can host ``src`` open a TCP connection to ``address:port``? (run inside its namespace)"""
    probe = f"import socket; socket.create_connection(({address!r}, {port}), timeout=1.5).close()"
    r = subprocess.run(
        [*c.exec_prefix(src), sys.executable, "-c", probe], capture_output=True, timeout=30
    )
    return r.returncode == 0


@pytest.mark.timeout(120)
def test_down_removes_namespaces_after_a_crashed_manager(tmp_path: Path) -> None:
    """Processes killed behind the manager's back (as after a crash of `cluster up`'s
    caller): a fresh manager reading cluster.json still removes every object by name."""
    if (why := netns.available()) is not None:
        pytest.skip(why)
    c = LocalCluster.start(tmp_path / "c", 1, hosts="netns")
    block = c.block
    assert block is not None
    try:
        assert len(_leftovers(block)) > 0
        # The fault hooks act on this block's objects only, and each one heals.
        hosts, b1 = c.netns_hosts(), c.broker(1)
        assert _reaches(c, "c1", b1.host, b1.port)
        hosts.link_down("b1")
        try:
            assert not _reaches(c, "c1", b1.host, b1.port)
        finally:
            hosts.link_up("b1")
        assert _reaches(c, "c1", b1.host, b1.port)
        hosts.cut("c1", "b1")
        try:
            assert not _reaches(c, "c1", b1.host, b1.port)
            assert _reaches(c, "c2", b1.host, b1.port)  # only that link is cut
        finally:
            hosts.heal("c1", "b1")
        assert _reaches(c, "c1", b1.host, b1.port)
        kind = hosts.shape("b1", delay_ms=50, rate_kbit=2000)  # netem if present, else htb
        try:
            dev = netns.veth_names(block, "b1")[0]
            shown = subprocess.run(
                ["tc", "qdisc", "show", "dev", dev], capture_output=True, text=True
            ).stdout
            assert kind in shown
            assert _reaches(c, "c1", b1.host, b1.port)
        finally:
            hosts.unshape("b1")
        for m in [*c.brokers, *c.zookeeper_nodes]:
            os.kill(m.pid or 0, signal.SIGKILL)
    finally:
        LocalCluster(tmp_path / "c").down()  # a new process's view: state file only
        c.down()
    assert _leftovers(block) == []


@pytest.mark.timeout(240)
def test_a_broker_added_on_its_own_host_takes_a_reassigned_partition(tmp_path: Path) -> None:
    """``add_broker`` on netns hosts makes a new host (namespace + veth on the bridge)
    and starts broker 4 there; `odradek reassign-partitions` moves a partition onto it,
    every record is still read once, and ``down`` removes the new host with the rest."""
    if (why := netns.available()) is not None:
        pytest.skip(why)
    c = LocalCluster.start(tmp_path / "c", 3, broker_config=FAST, hosts="netns")
    block = c.block
    assert block is not None
    try:
        topic = "netns-moving"
        create_topic(c.bootstrap_servers, topic, 2, 2, assignment=[[1, 2], [2, 3]])
        values = [b"m%05d" % i for i in range(2000)]
        acked, errors = produce(c.bootstrap_servers, topic, values)
        assert not errors and len(acked) == len(values)
        b4 = c.add_broker()
        assert (b4.id, b4.host) == (4, f"10.209.{block}.5")
        ns = subprocess.run(
            ["ip", "netns", "identify", str(b4.pid)], capture_output=True, text=True
        ).stdout.strip()
        assert ns == netns.namespace_name(block, "b4")
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [4, 2]}]}
            )
        )
        odradek = [
            sys.executable,
            "-m",
            "odradek",
            "reassign-partitions",
            "--bootstrap-server",
            c.bootstrap_servers,
            "--reassignment-json-file",
            str(plan),
        ]
        out = subprocess.run([*odradek, "--execute"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr

        def completed() -> bool:
            v = subprocess.run([*odradek, "--verify"], capture_output=True, text=True, timeout=60)
            return f"Reassignment of partition {topic}-0 is completed." in v.stdout

        wait_for(completed, 90, "--verify to report the move completed")
        wait_for(
            lambda: partition_meta(c.bootstrap_servers, topic)[0].replicas == [4, 2],
            30,
            "metadata to show replicas [4, 2]",
        )
        got = consume_all(c.bootstrap_servers, topic, [0, 1], 60)
        read = [v for recs in got.values() for _, v in recs]
        assert sorted(read) == sorted(values)
        # Broker 4's own copy, on its own host's disk, holds the moved partition.
        assert (Path(b4.log_dir) / f"{topic}-0").is_dir()
    finally:
        c.down()
    assert _leftovers(block) == []
