"""ZooKeeper authentication and Kafka's znode ACLs (issue 14 item 5, zookeeper.set.acl):
the pure policy (Kafka's ZkData.defaultAcls / sensitivePath), then against a real
ZooKeeper: what an authenticated, secured client creates cannot be written by an
unauthenticated one, sensitive znodes cannot even be read, and the migration command
(Kafka's ZkSecurityMigrator) secures and un-secures an existing tree."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions
from tests.support.polling import wait_for

from odradek.cli.main import main
from odradek.cluster import addresses
from odradek.config import BrokerConfig, ConfigError
from odradek.zk.acls import default_acls, is_sensitive_path, migrate_acls, parse_zk_auth
from odradek.zk.client import connect_zk
from odradek.zk.server import ZooKeeperServer

AUTH = "digest:kafka:kafka-secret"


# ----------------------------------------------------------------- the pure policy


def test_sensitive_paths_are_kafkas() -> None:
    for p in (
        "/config/users",
        "/config/users/alice",
        "/config/brokers/1",
        "/config/brokers/<default>",
        "/delegation_token/tokens/x",
    ):
        assert is_sensitive_path(p), p
    for p in (
        "/config",
        "/config/topics/t",
        "/config/changes/config_change_0000000001",
        "/brokers/ids/1",
        "/controller",
        "/admin/delete_topics/t",
        "/kafka-acl/Topic/t",
    ):
        assert not is_sensitive_path(p), p


def test_default_acls() -> None:
    assert default_acls(False, "/brokers/ids/1") == list(OPEN_ACL_UNSAFE)
    assert default_acls(False, "/config/users/alice") == list(OPEN_ACL_UNSAFE)
    public = default_acls(True, "/brokers/topics/t")
    assert [(a.id.scheme, a.id.id, a.perms) for a in public] == [
        ("auth", "", Permissions.ALL),
        ("world", "anyone", Permissions.READ),
    ]
    secret = default_acls(True, "/config/users/alice")
    assert [(a.id.scheme, a.id.id, a.perms) for a in secret] == [("auth", "", Permissions.ALL)]
    # Kafka keeps the old consumer path open even when secure.
    assert default_acls(True, "/consumers") == list(OPEN_ACL_UNSAFE)


def test_parse_zk_auth() -> None:
    a = parse_zk_auth("digest:kafka:pa:ss")
    assert a is not None and (a.scheme, a.username, a.password) == ("digest", "kafka", "pa:ss")
    assert "pa:ss" not in repr(a)
    assert parse_zk_auth(None) is None and parse_zk_auth("") is None
    for bad in ("kafka:secret", "digest:kafka", "digest::x", "ip:1.2.3.4:x", "digest:kafka:"):
        with pytest.raises(ValueError) as e:
            parse_zk_auth(bad)
        assert "secret" not in str(e.value)


def test_set_acl_without_authentication_is_refused_at_start() -> None:
    base = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}
    with pytest.raises(ConfigError, match=r"zookeeper\.set\.acl is true"):
        BrokerConfig.from_dict({**base, "zookeeper.set.acl": "true"})
    with pytest.raises(ConfigError, match=r"odradek\.zookeeper\.auth"):
        BrokerConfig.from_dict({**base, "odradek.zookeeper.auth": "kafka:secret"})
    cfg = BrokerConfig.from_dict(
        {**base, "zookeeper.set.acl": "true", "odradek.zookeeper.auth": AUTH}
    )
    assert cfg.get("zookeeper.set.acl") is True


# ----------------------------------------------------------------- a real ZooKeeper


@pytest.fixture
def sessions(
    zk_server: ZooKeeperServer,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., KazooClient]]:
    """``sessions(auth=None, secure=False)``: a kazoo session in this test's chroot."""
    made: list[KazooClient] = []
    chroot = "/" + request.node.name

    def connect(auth: str | None = None, secure: bool = False) -> KazooClient:
        zk = connect_zk(
            zk_server.connect + chroot,
            source_ip=None,
            session_timeout_s=4.0,
            auth=parse_zk_auth(auth),
            secure_acls=secure,
        )
        made.append(zk)
        return zk

    yield connect
    for zk in made:
        zk.stop()
        zk.close()


def test_secure_client_creates_kafkas_acls(sessions: Callable[..., KazooClient]) -> None:
    broker = sessions(AUTH, secure=True)
    broker.ensure_path("/brokers/ids")
    broker.create("/brokers/ids/1", b"{}", ephemeral=True)
    tx = broker.transaction()  # creates inside a multi get the policy too
    tx.create("/config", b"")
    tx.create("/config/users", b"")
    tx.create("/config/users/alice", b"salt=...")
    tx.create("/config/topics", b"")
    assert all(r is not Exception and not isinstance(r, Exception) for r in tx.commit())
    acls, _ = broker.get_acls("/brokers/ids/1")
    assert sorted((a.id.scheme, a.perms) for a in acls) == [
        ("digest", Permissions.ALL),
        ("world", Permissions.READ),
    ]
    assert next(a for a in acls if a.id.scheme == "digest").id.id.startswith("kafka:")
    acls, _ = broker.get_acls("/config/users/alice")
    assert [(a.id.scheme, a.perms) for a in acls] == [("digest", Permissions.ALL)]

    anyone = sessions()
    with pytest.raises(NoAuthError):
        anyone.set("/brokers/ids/1", b'{"host":"evil"}')
    with pytest.raises(NoAuthError):
        anyone.create("/brokers/ids/2", b"{}")
    with pytest.raises(NoAuthError):
        anyone.create("/config/topics/t", b"{}")
    with pytest.raises(NoAuthError):
        anyone.get("/config/users/alice")
    with pytest.raises(NoAuthError):
        anyone.get_children("/config/users")
    assert anyone.get("/brokers/ids/1")[0] == b"{}"  # public znodes stay world-readable
    # Another broker with the same identity may write what the first one created.
    other = sessions(AUTH, secure=True)
    other.set("/config/users/alice", b"salt=new")
    # A different identity may not.
    with pytest.raises(NoAuthError):
        sessions("digest:kafka:wrong", secure=True).set("/brokers/ids/1", b"x")


def test_migration_command_secures_and_unsecures(
    zk_server: ZooKeeperServer,
    sessions: Callable[..., KazooClient],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = sessions()  # a cluster that ran without zookeeper.set.acl
    for path in (
        "/brokers/topics/t/partitions/0/state",
        "/config/users/alice",
        "/controller_epoch",
        "/consumers/g",
    ):
        old.create(path, b"v", makepath=True)
    connect = zk_server.connect + "/" + request.node.name
    monkeypatch.setenv("ODRADEK_ZOOKEEPER_AUTH", AUTH)
    assert (
        main(
            [
                "zookeeper-security-migration",
                "--zookeeper.acl",
                "secure",
                "--zookeeper.connect",
                connect,
            ]
        )
        == 0
    )
    assert "Set secure ACLs on" in capsys.readouterr().out
    with pytest.raises(NoAuthError):
        old.set("/brokers/topics/t/partitions/0/state", b"x")
    with pytest.raises(NoAuthError):
        old.get("/config/users/alice")
    with pytest.raises(NoAuthError):
        old.create("/brokers/topics/u", b"x")
    old.create("/consumers/h", b"x")  # the old consumer path stays open (Kafka)
    # The chroot node itself is secured too: nothing new can appear beside /brokers.
    with pytest.raises(NoAuthError):
        old.create("/evil", b"x")
    # Back to open ACLs (Kafka's --zookeeper.acl unsecure).
    assert (
        main(
            [
                "zookeeper-security-migration",
                "--zookeeper.acl",
                "unsecure",
                "--zookeeper.connect",
                connect,
            ]
        )
        == 0
    )
    old.set("/brokers/topics/t/partitions/0/state", b"x")
    assert old.get("/config/users/alice")[0] == b"v"
    # secure without authentication is refused, as Kafka refuses it without JAAS.
    monkeypatch.delenv("ODRADEK_ZOOKEEPER_AUTH")
    assert (
        main(
            [
                "zookeeper-security-migration",
                "--zookeeper.acl",
                "secure",
                "--zookeeper.connect",
                connect,
            ]
        )
        == 1
    )


def test_migrate_acls_counts_every_znode(sessions: Callable[..., KazooClient]) -> None:
    zk = sessions(AUTH)
    for p in ("/a/b/c", "/a/d", "/e"):
        zk.create(p, b"", makepath=True)
    seen: list[str] = []
    assert migrate_acls(zk, True, on_path=lambda p, _a: seen.append(p)) == 6  # + chroot
    assert sorted(seen) == ["/a", "/a/b", "/a/b/c", "/a/d", "/e", zk.chroot]


@pytest.fixture(scope="module")
def sasl_zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper with SASL DIGEST-MD5 (JAAS Server section with user kafka): Kafka's
    way of authenticating brokers to ZooKeeper."""
    owner = tmp_path_factory.mktemp("sasl-zk-owner")
    block = addresses.claim_block(owner, n_brokers=8)
    try:
        with ZooKeeperServer(
            tmp_path_factory.mktemp("sasl-zk"),
            addresses.zk_address(block),
            addresses.ZK_PORT,
            sasl_users={"kafka": "kafka-secret"},
        ) as srv:
            yield srv
    finally:
        addresses.release_block(block, owner)


def test_sasl_digest_md5_authentication(
    sasl_zk_server: ZooKeeperServer, request: pytest.FixtureRequest
) -> None:
    assert (sasl_zk_server.jaas_path.stat().st_mode & 0o077) == 0
    connect = sasl_zk_server.connect + "/" + request.node.name
    made: list[KazooClient] = []
    try:
        broker = connect_zk(
            connect,
            source_ip=None,
            session_timeout_s=4.0,
            auth=parse_zk_auth("sasl:kafka:kafka-secret"),
            secure_acls=True,
        )
        made.append(broker)
        broker.create("/brokers/ids/1", b"{}", makepath=True)
        broker.create("/config/users/alice", b"creds", makepath=True)
        acls, _ = broker.get_acls("/brokers/ids/1")
        assert sorted((a.id.scheme, a.id.id, a.perms) for a in acls) == [
            ("sasl", "kafka", Permissions.ALL),
            ("world", "anyone", Permissions.READ),
        ]
        anyone = connect_zk(connect, source_ip=None, session_timeout_s=4.0)
        made.append(anyone)
        with pytest.raises(NoAuthError):
            anyone.set("/brokers/ids/1", b"x")
        with pytest.raises(NoAuthError):
            anyone.get("/config/users/alice")
        # A wrong password gets no session at all (ZooKeeper ends the SASL exchange).
        with pytest.raises(AuthFailedError):
            made.append(
                connect_zk(
                    connect,
                    source_ip=None,
                    session_timeout_s=4.0,
                    timeout_s=5.0,
                    auth=parse_zk_auth("sasl:kafka:wrong"),
                    secure_acls=True,
                )
            )
    finally:
        for zk in made:
            zk.stop()
            zk.close()


def test_refused_credentials_fail_the_connect_whichever_thread_runs_first(
    sasl_zk_server: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kazoo marks a session connected before it authenticates. A wrong password must
    fail ``connect_zk`` with AuthFailedError both when ``start`` returns first (no chroot
    to create: the caller used to get a client whose session was already lost) and when
    the refusal lands before ``start`` looks (it used to raise "Connection time-out":
    a loaded CI run's failure of the test above)."""
    wrong = parse_zk_auth("sasl:kafka:wrong")
    # start returns first (the usual order), no chroot.
    with pytest.raises(AuthFailedError):
        connect_zk(
            sasl_zk_server.connect, source_ip=None, session_timeout_s=4.0, timeout_s=5.0, auth=wrong
        )

    # The refusal lands before start looks: start's wait returns only once the session
    # has failed (what a descheduled main thread sees).
    real_start_async = KazooClient.start_async

    def late_start_async(self: KazooClient) -> Any:
        states: list[str] = []
        self.add_listener(states.append)  # CONNECTED, then LOST once the refusal is handled
        live = real_start_async(self)

        class LateWake:
            def wait(self_, timeout: float | None = None) -> bool:
                wait_for(
                    lambda: states[-2:] == [KazooState.CONNECTED, KazooState.LOST],
                    timeout or 5.0,
                    "the SASL refusal",
                    interval=0.01,
                )
                return live.is_set()

            def is_set(self_) -> bool:
                return live.is_set()

        return LateWake()

    monkeypatch.setattr(KazooClient, "start_async", late_start_async)
    with pytest.raises(AuthFailedError):
        connect_zk(
            sasl_zk_server.connect, source_ip=None, session_timeout_s=4.0, timeout_s=5.0, auth=wrong
        )
