"""Real ZooKeeper (Debian jar): server lifecycle, bound client, ephemeral nodes (REQ-R12)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.exceptions import NoNodeError

from odradek.cluster import procs
from odradek.errors import KafkaError
from odradek.zk import znodes
from odradek.zk.client import connect_zk, split_chroot
from odradek.zk.server import ZooKeeperServer, cgroup2_root, four_letter_word, zookeeper_jar

pytestmark = pytest.mark.integration

# 127.0.250.x: outside the blocks the cluster manager hands out first, so this module can
# run beside a cluster test.
ZK_ADDR = "127.0.250.1"


def _require_zookeeper() -> None:
    try:
        zookeeper_jar()
    except KafkaError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    _require_zookeeper()
    with ZooKeeperServer(tmp_path_factory.mktemp("zk"), ZK_ADDR, 2181) as srv:
        yield srv
    assert srv.pid is not None and not procs.alive(srv.pid)


def test_ruok_and_config(zk_server: ZooKeeperServer) -> None:
    assert four_letter_word(ZK_ADDR, 2181, "ruok") == "imok"
    assert "Mode: standalone" in four_letter_word(ZK_ADDR, 2181, "srvr")
    cfg = zk_server.config_path.read_text()
    assert f"clientPortAddress={ZK_ADDR}" in cfg and "admin.enableServer=false" in cfg
    assert (zk_server.data_dir / "zookeeper.log").exists()


def test_node_in_its_own_cgroup(zk_server: ZooKeeperServer) -> None:
    root = cgroup2_root()
    if zk_server.cgroup is None or root is None:
        pytest.skip("cgroup v2 not writable here")
    members = (root / zk_server.cgroup / "cgroup.procs").read_text().split()
    assert str(zk_server.pid) in members  # the JVM itself, exec'd inside the cgroup


def test_client_binds_source_address(zk_server: ZooKeeperServer) -> None:
    zk = connect_zk(zk_server.connect, source_ip="127.0.250.7", session_timeout_s=4)
    try:
        # platform-notes trap: without the bound handler this would be 127.0.0.1.
        assert zk._connection._socket.getsockname()[0] == "127.0.250.7"
        assert "/127.0.250.7:" in four_letter_word(ZK_ADDR, 2181, "stat")
    finally:
        zk.stop()
        zk.close()


def test_ephemeral_node_disappears_after_session_close(zk_server: ZooKeeperServer) -> None:
    a = connect_zk(zk_server.connect, source_ip="127.0.250.2", session_timeout_s=4)
    b = connect_zk(zk_server.connect, source_ip=None, session_timeout_s=4)
    try:
        znodes.ensure_base_paths(a)
        reg = znodes.BrokerRegistration.plaintext(1, "127.0.250.2", 9092)
        a.create(znodes.broker_path(1), znodes.encode_broker(reg), ephemeral=True)
        data, _ = b.get(znodes.broker_path(1))
        assert znodes.decode_broker(1, data).host == "127.0.250.2"
        a.stop()  # closes the session: ZooKeeper deletes its ephemerals at once
        deadline = time.monotonic() + 5
        while b.exists(znodes.broker_path(1)) is not None:
            assert time.monotonic() < deadline, "ephemeral node outlived its session"
            time.sleep(0.05)
    finally:
        a.stop()
        a.close()
        b.stop()
        b.close()


def test_chroot_is_created_and_applied(zk_server: ZooKeeperServer) -> None:
    assert split_chroot("h1:1,h2:2/kafka/x") == ("h1:1,h2:2", "/kafka/x")
    assert split_chroot("h:1") == ("h:1", "")
    c = connect_zk(zk_server.connect + "/odradek-test", source_ip=None, session_timeout_s=4)
    plain = connect_zk(zk_server.connect, source_ip=None, session_timeout_s=4)
    try:
        znodes.ensure_base_paths(c)
        cid = znodes.get_or_create_cluster_id(c)
        assert len(cid) == 22
        assert znodes.get_or_create_cluster_id(c) == cid  # stable
        data, _ = plain.get("/odradek-test" + znodes.CLUSTER_ID)
        assert znodes.decode_cluster_id(data) == cid
        with pytest.raises(NoNodeError):
            plain.get(znodes.CLUSTER_ID + "-nope")
    finally:
        for z in (c, plain):
            z.stop()
            z.close()


def test_three_node_ensemble(tmp_path: Path) -> None:
    _require_zookeeper()
    peers = [(i, f"127.0.250.{10 + i}") for i in (1, 2, 3)]
    servers = [
        ZooKeeperServer(tmp_path / f"zk{i}", addr, 2181, server_id=i, peers=peers)
        for i, addr in peers
    ]
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait_ready(60)
        assert (tmp_path / "zk2" / "myid").read_text().strip() == "2"
        modes = sorted(
            four_letter_word(s.address, 2181, "srvr").split("Mode: ")[1].split()[0] for s in servers
        )
        assert modes == ["follower", "follower", "leader"]
        connect = ",".join(s.connect for s in servers)
        zk = connect_zk(connect, source_ip=None, session_timeout_s=4)
        try:
            zk.create("/x", b"1")
            assert zk.get("/x")[0] == b"1"
        finally:
            zk.stop()
            zk.close()
    finally:
        for s in servers:
            s.stop()
    assert all(not procs.alive(s.pid) for s in servers)
