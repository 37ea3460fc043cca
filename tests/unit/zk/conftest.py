"""A real ZooKeeper for the tests of this directory that need one (the batched client and
the controller's round trips): one server per module, on a loopback block claimed like a
local cluster's so it never collides with a cluster test running beside it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from odradek.cluster import addresses, procs
from odradek.errors import KafkaError
from odradek.zk.client import connect_zk
from odradek.zk.server import ZooKeeperServer, zookeeper_jar


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    try:
        zookeeper_jar()
    except KafkaError as e:
        pytest.skip(str(e))
    owner = tmp_path_factory.mktemp("zk-owner")
    block = addresses.claim_block(owner, n_brokers=8)
    try:
        with ZooKeeperServer(
            tmp_path_factory.mktemp("zk"), addresses.zk_address(block), addresses.ZK_PORT
        ) as srv:
            yield srv
        assert srv.pid is not None and not procs.alive(srv.pid)
    finally:
        addresses.release_block(block, owner)


@pytest.fixture
def zk_connect(
    zk_server: ZooKeeperServer,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., KazooClient]]:
    """``zk_connect(chroot="/x")`` -> a kazoo session (closed after the test). Each test
    gets its own chroot by default, so tests never see each other's znodes."""
    sessions: list[KazooClient] = []
    default = "/" + request.node.name.replace("[", "_").replace("]", "_")

    def connect(chroot: str | None = None, session_timeout_s: float = 4.0) -> KazooClient:
        host = zk_server.connect.rsplit(":", 1)[0]
        zk = connect_zk(
            zk_server.connect + (chroot or default),
            source_ip=host,
            session_timeout_s=session_timeout_s,
        )
        sessions.append(zk)
        return zk

    yield connect
    for zk in sessions:
        try:
            zk.stop()
            zk.close()
        except Exception:
            pass
