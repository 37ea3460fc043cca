"""The schema registry's primary election on a real ZooKeeper: one primary, the other
forwarding to it; the role moves when the primary's session ends; and a primary whose own
session expires (ZooKeeper drops its ephemeral znode and kazoo drops its watches) stops
acting as primary and campaigns again on its new session."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from tests.support.polling import wait_until

from odradek.schema_registry.election import PrimaryElection, find_primary
from odradek.schema_registry.errors import RegistryError
from odradek.zk.server import ZooKeeperServer


@pytest.fixture
def connect(zk_server: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    return zk_server.connect + "/" + request.node.name


def test_one_primary_and_the_role_moves(connect: str) -> None:
    elected: list[str] = []
    a = PrimaryElection(connect, "http://a:1", on_elected=lambda: elected.append("a"))
    b = PrimaryElection(connect, "http://b:1", on_elected=lambda: elected.append("b"))
    try:
        assert a.primary_url() is None  # a is the primary
        assert b.primary_url() == "http://a:1"
        assert find_primary(connect, "default") == "http://a:1"
        a.close()
        wait_until(lambda: b.primary_url() is None, "b taking over", timeout=30)
        assert elected == ["a", "b"]
    finally:
        b.close()


def test_a_primary_whose_session_expires_campaigns_again(connect: str) -> None:
    elected: list[int] = []
    a = PrimaryElection(connect, "http://a:1", on_elected=lambda: elected.append(1),
                        session_timeout_s=4.0)  # fmt: skip
    try:
        assert a.primary_url() is None
        # Expire a's session from outside: a second client on the same session closes it.
        hosts = connect.split("/", 1)[0]
        twin = KazooClient(hosts=hosts, client_id=a._zk.client_id)
        twin.start(timeout=10)
        twin.stop()
        twin.close()

        def primary_again() -> bool:
            try:
                return a.primary_url() is None and find_primary(connect, "default") == "http://a:1"
            except RegistryError:
                return False

        wait_until(primary_again, "a primary again on a new session", timeout=30)
        assert len(elected) == 2
    finally:
        a.close()
