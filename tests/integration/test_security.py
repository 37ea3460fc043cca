"""TLS, SASL and ACLs against a real secured cluster, with four real clients (issue 14).

One 3-broker cluster made by ``LocalCluster(security="sasl_ssl")`` -- a CA, PEM
keystores, the admin SCRAM super user, the ACL authorizer -- with three listeners per
broker: SASL_SSL (clients and replication, SCRAM), SSL with ``ssl.client.auth=required``
(principal ``User:CN=client,O=Odradek``) and SASL_PLAINTEXT (PLAIN and SCRAM).

* confluent-kafka, kafka-python, aiokafka and kcat produce and consume over SSL (mTLS),
  SASL_SSL with SCRAM-SHA-256 and -512, and SASL_PLAINTEXT with PLAIN;
* a wrong password and an unknown user get SASL_AUTHENTICATION_FAILED and a closed
  connection; a plaintext client on the TLS port fails cleanly and the broker serves on;
* user alice with only WRITE on t: produces to t, is refused reading t and writing u,
  does not see u in metadata; READ on t and group READ let her consume; revoking READ
  stops her on every broker within a second.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from security_util import (
    CLIENT_DN,
    PLAIN_USERS,
    Access,
    access,
    admin_password,
    ca_file,
    client_certificate,
    odradek,
    raw_connection,
)
from tests.support.polling import wait_until
from tests.support.topics import create_topic

from odradek.client.connection import ConnectionLost
from odradek.client.wire import FetchPartitionRequest, decode_fetch_response, encode_fetch_request
from odradek.cluster.certs import make_ca
from odradek.cluster.local import LocalCluster
from odradek.cluster.security_setup import EXTRA_LISTENERS
from odradek.protocol.client_codec import request_entity
from odradek.security.client_security import ClientSecurity

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

N = 60  # records per round trip
SASL_AUTHENTICATION_FAILED, TOPIC_AUTHORIZATION_FAILED = 58, 29
GROUP_AUTHORIZATION_FAILED = 30
AUTH_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.start(
        tmp_path_factory.mktemp("secure"),
        3,
        security="sasl_ssl",
        extra_listeners=("SSL", "SASL_PLAINTEXT"),
        plain_users=PLAIN_USERS,
        broker_config={
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "6",
            "group.initial.rebalance.delay.ms": "0",
            # short, so the hostile-input tests wait little
            "odradek.authentication.timeout.ms": str(int(AUTH_TIMEOUT_S * 1000)),
        },
    )
    try:
        admin = AdminClient(access(c, "SASL_SSL", "SCRAM-SHA-512").confluent())
        # The mTLS principal may use every topic and group (it is not a super user).
        bindings = [
            AclBinding(
                rt,
                "*",
                ResourcePatternType.LITERAL,
                f"User:{CLIENT_DN}",
                "*",
                AclOperation.ALL,
                AclPermissionType.ALLOW,
            )
            for rt in (ResourceType.TOPIC, ResourceType.GROUP)
        ]
        for f in admin.create_acls(bindings).values():
            f.result(30)
        yield c
    finally:
        c.down()


def _admin(c: LocalCluster) -> AdminClient:
    return AdminClient(access(c, "SASL_SSL", "SCRAM-SHA-512").confluent())


def _topic(c: LocalCluster, partitions: int = 2, rf: int = 3) -> str:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    a = access(c, "SASL_SSL", "SCRAM-SHA-512")
    create_topic(a.bootstrap, name, partitions, rf, security=a.confluent(), timeout=60)
    return name


def _values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:04d}-".encode() + bytes(range(i % 50)) for i in range(n)]


# =============================================================================== clients
def confluent_round_trip(a: Access, topic: str, values: list[bytes]) -> list[bytes]:
    p = Producer({**a.confluent(), "acks": "all", "linger.ms": 5})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(60) == 0
    c = Consumer({**a.confluent(), "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()
    return got


def kafka_python_round_trip(a: Access, topic: str, values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    p = KafkaProducer(acks="all", **a.kafka_python())
    for v in values:
        p.send(topic, v, partition=0)
    p.flush(60)
    p.close()
    c = KafkaConsumer(enable_auto_commit=False, **a.kafka_python())
    c.assign([KTP(topic, 0)])
    c.seek(KTP(topic, 0), 0)
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < deadline:
        for recs in c.poll(1000).values():
            got.extend(r.value for r in recs)
    c.close()
    return got


def aiokafka_round_trip(a: Access, topic: str, values: list[bytes]) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    async def go() -> list[bytes]:
        p = AIOKafkaProducer(acks="all", **a.aiokafka())
        await p.start()
        try:
            for v in values:
                await p.send(topic, v, partition=0)
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(enable_auto_commit=False, **a.aiokafka())
        await c.start()
        got: list[bytes] = []
        try:
            c.assign([ATP(topic, 0)])
            c.seek(ATP(topic, 0), 0)
            deadline = time.monotonic() + 60
            while len(got) < len(values) and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=1000)).values():
                    got.extend(r.value for r in recs)
        finally:
            await c.stop()
        return got

    return asyncio.run(asyncio.wait_for(go(), 150))


def kcat_round_trip(a: Access, topic: str, values: list[bytes]) -> list[bytes]:
    lines = [v.hex().encode() for v in values]  # kcat is line oriented
    base = ["kcat", "-b", a.bootstrap, *a.kcat_args()]
    subprocess.run(
        [*base, "-P", "-t", topic, "-p", "0", "-X", "acks=all"],
        input=b"\n".join(lines) + b"\n",
        check=True,
        capture_output=True,
        timeout=60,
    )
    out = subprocess.run(
        [*base, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-c", str(len(values))],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return [bytes.fromhex(x) for x in out.stdout.decode().split()]


CLIENTS = {
    "confluent": confluent_round_trip,
    "kafka-python": kafka_python_round_trip,
    "aiokafka": aiokafka_round_trip,
    "kcat": kcat_round_trip,
}
SETTINGS = [
    ("SSL", None),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_PLAINTEXT", "PLAIN"),
]


@pytest.mark.parametrize(
    "protocol,mechanism", SETTINGS, ids=[f"{p}-{m or 'mtls'}" for p, m in SETTINGS]
)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_round_trip(
    secure: LocalCluster, client: str, protocol: str, mechanism: str | None
) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    user = "carol" if mechanism == "PLAIN" else "admin"
    a = access(secure, protocol, mechanism, user)
    topic = _topic(secure, 1)
    if user == "carol":  # PLAIN user carol is no super user: she needs ACLs
        _grant(secure, "User:carol", ResourceType.TOPIC, topic, AclOperation.ALL)
        _grant(secure, "User:carol", ResourceType.GROUP, "unused", AclOperation.ALL)
    values = _values(N, f"{client}-{protocol}")
    assert CLIENTS[client](a, topic, values) == values


def test_ssl_principal_is_the_certificate_subject(secure: LocalCluster) -> None:
    """mTLS: the principal is User:<subject DN> -- an ACL on that DN is what lets the
    client in (the round trips above), and without a certificate the handshake fails."""
    a = access(secure, "SSL")
    _, port = a.bootstrap.split(",")[0].rsplit(":", 1)
    anonymous = ClientSecurity("SSL", ca_location=a.ca)
    with pytest.raises(ConnectionLost):
        conn = raw_connection(Access("SSL", a.bootstrap, ca=a.ca))
        conn.request(request_entity(18, 3, client_software_name="t", client_software_version="1"))
    assert anonymous.tls
    with raw_connection(a) as conn:
        md = conn.request(
            request_entity(
                3,
                12,
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=True,
            )
        )
        assert md.brokers and all(int(b.port) == int(port) for b in md.brokers)


# =============================================================================== failures
@pytest.mark.parametrize(
    "user,password", [("admin", "wrong-pw-3f9a"), ("mallory", "whatever-7c1e")]
)
def test_bad_credentials_are_refused(
    secure: LocalCluster, user: str, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = access(secure, "SASL_SSL", "SCRAM-SHA-256", user, password)
    # Our own client shows the wire: SASL_AUTHENTICATION_FAILED, then the broker closes.
    host, port = a.bootstrap.split(",")[0].rsplit(":", 1)
    from odradek.client.connection import KafkaConnection

    conn = KafkaConnection(
        host, int(port), timeout_s=15, security=ClientSecurity("SSL", ca_location=a.ca)
    )
    hs = conn.request(request_entity(17, 1, mechanism="SCRAM-SHA-256"))
    assert int(hs.error_code) == 0
    from odradek.security.sasl_client import SaslClient

    sc = SaslClient("SCRAM-SHA-256", user, password)
    first = conn.request(request_entity(36, 2, auth_bytes=sc.next_token()))
    if int(first.error_code) == 0:
        sc.receive(bytes(first.auth_bytes))
        final = conn.request(request_entity(36, 2, auth_bytes=sc.next_token()))
    else:
        final = first
    assert int(final.error_code) == SASL_AUTHENTICATION_FAILED
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in final.error_message
    with pytest.raises(ConnectionLost):
        conn.request(request_entity(18, 3, client_software_name="t", client_software_version="1"))
    # confluent-kafka reports the authentication failure to the application.
    errors: list[Any] = []
    p = Producer({**a.confluent(), "error_cb": errors.append})
    deadline = time.monotonic() + 30
    while (
        not any(e.code() == KafkaError._AUTHENTICATION for e in errors)
        and time.monotonic() < deadline
    ):
        p.poll(0.2)
    # Gone now, not at the next full garbage collection: the pytest.raises below keeps
    # this frame alive in a cycle, and a producer left running kept retrying its failed
    # login against whatever later test reused these addresses, for the rest of the run.
    del p
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    # kafka-python: its admin client cannot bootstrap, and what it reports for each
    # broker is SaslAuthenticationFailedError (code 58) with Kafka's message.
    import kafka.errors
    from kafka.admin import KafkaAdminClient

    caplog.set_level(logging.WARNING, logger="kafka")
    with pytest.raises(kafka.errors.KafkaError) as ei:
        KafkaAdminClient(**a.kafka_python(), request_timeout_ms=5000, bootstrap_timeout_ms=5000)
    _stop_half_built(ei.value, KafkaAdminClient)
    reported = repr(ei.value) + caplog.text
    assert "[Error 58] SaslAuthenticationFailedError" in reported, reported[-2000:]
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in reported


def _stop_half_built(e: BaseException, cls: type) -> None:
    """kafka-python 3's KafkaAdminClient starts its I/O thread before it bootstraps, and
    nothing stops it when bootstrapping fails (close() returns early on an object whose
    __init__ did not finish): the thread, and the client, lived for the rest of the run."""
    tb = e.__traceback__
    while tb is not None:
        client = tb.tb_frame.f_locals.get("self")
        if isinstance(client, cls):
            client._client.close()
            client._net.stop()
            return
        tb = tb.tb_next
    raise AssertionError(f"no half-built {cls.__name__} in the traceback")


def test_plaintext_client_on_tls_port_fails_cleanly(secure: LocalCluster) -> None:
    b = secure.brokers[0]
    # A Kafka request in plaintext where a TLS ClientHello is expected: the handshake
    # fails and the broker closes the connection (no answer, no crash).
    api_versions = bytes.fromhex("0000001a00120003000000010004746573740000000000000000")
    with socket.create_connection((b.host, b.port), timeout=10) as s:
        s.sendall(api_versions)
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except ConnectionResetError:
            pass
    assert not got.startswith(b"\x00\x00")  # nothing that looks like a Kafka response
    # A handshake that stops half-way holds no one up (it runs in its own task).
    stalled = socket.create_connection((b.host, b.port), timeout=10)
    stalled.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a cut ClientHello
    try:
        # confluent-kafka on the wrong protocol: an error, not a hang.
        errors: list[Any] = []
        p = Producer(
            {"bootstrap.servers": b.address, "error_cb": errors.append, "socket.timeout.ms": 5000}
        )
        deadline = time.monotonic() + 20
        while not errors and time.monotonic() < deadline:
            p.poll(0.2)
        assert errors
        # The broker is alive and serves everyone else.
        topic = _topic(secure, 1)
        values = _values(10, "after-plaintext")
        assert (
            confluent_round_trip(access(secure, "SASL_SSL", "SCRAM-SHA-512"), topic, values)
            == values
        )
    finally:
        stalled.close()
    assert all(secure.broker_state(x.id) == "running" for x in secure.brokers)


# =============================================================================== ACLs
def _grant(
    c: LocalCluster, principal: str, rtype: Any, name: str, op: Any, *, remove: bool = False
) -> None:
    admin = _admin(c)
    b = AclBinding(
        rtype, name, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW
    )
    futures = admin.delete_acls([b]) if remove else admin.create_acls([b])
    for f in futures.values():
        f.result(30)


def _fetch_error(conn: Any, topic: str) -> int:
    from odradek.client.connection import request_header  # noqa: F401 - documents v11

    body = encode_fetch_request(
        [FetchPartitionRequest(topic, 0, 0, 1 << 20)],
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
    )
    conn.send_body(1, 11, body)
    _, _, frame = conn.receive_frame()
    _, parts = decode_fetch_response(frame)
    return parts[0].error_code


def test_alice_acls(secure: LocalCluster, tmp_path: Path) -> None:
    props = secure.client_properties
    assert props is not None
    b0 = secure.brokers[0]
    t, u = _topic(secure, 1), _topic(secure, 1)
    group = f"g-{uuid.uuid4().hex[:6]}"
    # kafka-configs and kafka-acls, as a Kafka user would run them.
    r = odradek(
        "configs",
        "--bootstrap-server",
        b0.address,
        "--command-config",
        props,
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--alter",
        "--add-config",
        "SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
    )
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for user alice." in r.stdout
    r = odradek(
        "configs",
        "--bootstrap-server",
        b0.address,
        "--command-config",
        props,
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--describe",
    )
    assert (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-512=iterations=8192" in r.stdout
    ), r.stdout + r.stderr
    r = odradek(
        "acls",
        "--bootstrap-server",
        b0.address,
        "--command-config",
        props,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        t,
    )
    assert r.returncode == 0, r.stderr
    assert (
        f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, "
        f"patternType=LITERAL)`: \n \t(principal=User:alice, host=*, operation=WRITE, "
        f"permissionType=ALLOW) \n"
    ) in r.stdout

    alice = access(secure, "SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret")
    # Writes to t succeed (WRITE implies DESCRIBE, and her producer may be idempotent:
    # WRITE on a topic is enough for InitProducerId, KIP-679).
    p = Producer({**alice.confluent(), "acks": "all", "enable.idempotence": True})
    for i in range(20):
        p.produce(t, f"a{i}".encode())
    assert p.flush(60) == 0
    # Writing u: TOPIC_AUTHORIZATION_FAILED.
    failures: list[Any] = []
    p.produce(u, b"x", on_delivery=lambda err, _m: failures.append(err))
    p.flush(60)
    assert failures and failures[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Metadata: t is visible, u is not (not even its existence).
    md = AdminClient(alice.confluent()).list_topics(timeout=30)
    assert t in md.topics and u not in md.topics
    # Reading t: TOPIC_AUTHORIZATION_FAILED, on every broker.
    conns = [raw_connection(alice, f"{b.host}:{b.port}") for b in secure.brokers]
    try:
        assert {_fetch_error(cn, t) for cn in conns} == {TOPIC_AUTHORIZATION_FAILED}
        # Grant READ on t and READ on the group: she consumes with the group.
        r = odradek(
            "acls",
            "--bootstrap-server",
            b0.address,
            "--command-config",
            props,
            "--add",
            "--allow-principal",
            "User:alice",
            "--consumer",
            "--topic",
            t,
            "--group",
            group,
        )
        assert r.returncode == 0, r.stderr
        # (a broker that does not lead t answers NOT_LEADER_OR_FOLLOWER once authorized:
        # the authorization check comes first, so every broker shows its ACL cache)
        wait_until(
            lambda: all(_fetch_error(cn, t) != TOPIC_AUTHORIZATION_FAILED for cn in conns),
            "READ granted",
            10,
        )
        c = Consumer({**alice.confluent(), "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([t])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        c.commit(asynchronous=False)
        c.close()
        assert sorted(got) == sorted(f"a{i}".encode() for i in range(20))
        # Revoke READ on t: every broker refuses her (the change notification's watch;
        # about a second on an idle machine: the times are printed, not asserted, as a
        # loaded machine may take longer).
        r = odradek(
            "acls",
            "--bootstrap-server",
            b0.address,
            "--command-config",
            props,
            "--remove",
            "--force",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            t,
        )
        assert r.returncode == 0, r.stderr
        t0 = time.monotonic()
        took: dict[int, float] = {}
        while len(took) < len(conns) and time.monotonic() - t0 < 30:
            for b, cn in zip(secure.brokers, conns):
                if b.id not in took and _fetch_error(cn, t) == TOPIC_AUTHORIZATION_FAILED:
                    took[b.id] = time.monotonic() - t0
        print(f"revocation applied after (s, by broker): {took}")
        assert len(took) == len(conns), took
    finally:
        for cn in conns:
            cn.close()
    # The listing is kafka-acls'.
    r = odradek(
        "acls", "--bootstrap-server", b0.address, "--command-config", props, "--list", "--topic", t
    )
    assert (
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, "
        f"patternType=LITERAL)`: \n"
    ) in r.stdout
    assert "operation=READ" not in r.stdout and "operation=WRITE" in r.stdout


def test_acl_apis_need_cluster_alter_and_znodes_are_kafkas(secure: LocalCluster) -> None:
    carol = access(secure, "SASL_PLAINTEXT", "PLAIN", "carol")
    admin = AdminClient(carol.confluent())
    b = AclBinding(
        ResourceType.TOPIC,
        "x",
        ResourcePatternType.LITERAL,
        "User:carol",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(Exception) as ei:
        for f in admin.create_acls([b]).values():
            f.result(30)
    assert "CLUSTER_AUTHORIZATION_FAILED" in repr(ei.value)
    _grant(secure, "User:carol", ResourceType.TOPIC, "pfx-", AclOperation.READ)
    zk = secure.zk_client()
    data, _ = zk.get("/kafka-acl/Topic/pfx-")
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {"principal": "User:carol", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    assert any(
        zk.get(f"/kafka-acl-changes/{ch}")[0] == b"Topic:pfx-"
        for ch in zk.get_children("/kafka-acl-changes")
    )
    user = json.loads(zk.get("/config/users/admin")[0])
    assert set(user["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert "password" not in json.dumps(user)


# =============================================================================== hostile input
def _frame(api_key: int, version: int, body: bytes = b"", corr: int = 7) -> bytes:
    """A request with header v1 (client id "t")."""
    payload = struct.pack(">hhih", api_key, version, corr, 1) + b"t" + body
    return struct.pack(">i", len(payload)) + payload


def _tls(
    c: LocalCluster, listener: str, cert: tuple[str, str] | None = None, ca: str | None = None
) -> ssl.SSLSocket:
    b = c.brokers[0]
    port = b.port + (0 if listener == "SASL_SSL" else EXTRA_LISTENERS[listener])
    ctx = ssl.create_default_context(cafile=ca or ca_file(c))
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(*cert)
    return ctx.wrap_socket(
        socket.create_connection((b.host, port), timeout=15), server_hostname=b.host
    )


def _answer(s: socket.socket) -> tuple[int, bytes]:
    """(correlation id, body) of one response."""
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        assert chunk, "the broker closed the connection instead of answering"
        head += chunk
    (size,) = struct.unpack(">i", head)
    data = b""
    while len(data) < size:
        chunk = s.recv(size - len(data))
        assert chunk
        data += chunk
    return struct.unpack_from(">i", data)[0], data[4:]


def _closed_after(s: socket.socket, limit: float) -> tuple[float, bytes]:
    """Seconds until the broker closed ``s`` and whatever it sent first."""
    t0 = time.monotonic()
    s.settimeout(limit)
    got = b""
    try:
        while chunk := s.recv(4096):
            got += chunk
    except TimeoutError:
        raise AssertionError(f"still open after {limit} s") from None
    except (ssl.SSLError, ConnectionResetError):
        pass  # a TLS alert or a reset is a close too
    return time.monotonic() - t0, got


def test_unauthenticated_clients_get_only_the_handshake_apis(secure: LocalCluster) -> None:
    """Before SASL completes only ApiVersions, SaslHandshake and SaslAuthenticate are
    served (Kafka's SaslServerAuthenticator); anything else closes the connection unanswered."""
    with _tls(secure, "SASL_SSL") as s:
        s.sendall(_frame(18, 0))
        corr, body = _answer(s)
        assert corr == 7 and struct.unpack_from(">h", body)[0] == 0
        mech = b"SCRAM-SHA-256"
        s.sendall(_frame(17, 1, struct.pack(">h", len(mech)) + mech, corr=8))
        corr, body = _answer(s)
        assert corr == 8 and struct.unpack_from(">h", body)[0] == 0
        s.sendall(_frame(3, 1, struct.pack(">i", -1), corr=9))  # Metadata, all topics
        took, got = _closed_after(s, 10)
        assert got == b"" and took < AUTH_TIMEOUT_S - 1, took  # not the timeout
    # Produce straight away, without even a handshake: closed, nothing written.
    with socket.create_connection(
        (secure.brokers[0].host, secure.brokers[0].port + EXTRA_LISTENERS["SASL_PLAINTEXT"]),
        timeout=15,
    ) as s:
        s.sendall(_frame(0, 3, struct.pack(">hii", -1, 1, 1000) + struct.pack(">i", 0)))
        took, got = _closed_after(s, 10)
        assert got == b"" and took < AUTH_TIMEOUT_S - 1, took


def test_sasl_frames_are_bounded_before_authentication(secure: LocalCluster) -> None:
    """sasl.server.max.receive.size (512 KiB): a bigger frame before authentication
    closes the connection as soon as its size prefix arrives, before its body is read."""
    with _tls(secure, "SASL_SSL") as s:
        s.sendall(struct.pack(">i", 600_000) + b"\0" * 1000)
        took, got = _closed_after(s, 10)
        # at once, not by the authentication timeout
        assert got == b"" and took < AUTH_TIMEOUT_S - 1, took
    with _tls(secure, "SASL_SSL") as s:  # the broker serves on
        s.sendall(_frame(18, 0))
        assert _answer(s)[0] == 7


def test_stalled_handshakes_are_closed(secure: LocalCluster) -> None:
    """odradek.authentication.timeout.ms bounds a TLS handshake that stops half-way and a
    TLS connection that never authenticates with SASL: neither holds its slot longer."""
    b = secure.brokers[0]
    with socket.create_connection((b.host, b.port), timeout=15) as raw:
        raw.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a cut ClientHello
        took, _ = _closed_after(raw, AUTH_TIMEOUT_S + 10)
        assert AUTH_TIMEOUT_S - 1 <= took, took
    with _tls(secure, "SASL_SSL") as s:
        s.sendall(_frame(18, 0))  # answered, but it never authenticates
        _answer(s)
        took, _ = _closed_after(s, AUTH_TIMEOUT_S + 10)
        assert AUTH_TIMEOUT_S - 1.5 <= took, took
    log = Path(b.log).read_text(errors="replace")
    assert "SASL authentication did not complete within 3 s" in log


def test_bad_client_certificates_close_the_connection(secure: LocalCluster, tmp_path: Path) -> None:
    """ssl.client.auth=required: a certificate from another CA, or none, ends the TLS
    handshake with an alert -- no Kafka byte is answered -- and the broker serves on."""
    other = make_ca(tmp_path, "Not the cluster's CA")
    pem = other.issue(tmp_path / "mallory.pem", "client", [])
    for cert in ((str(pem), str(pem)), None):
        try:
            s = _tls(secure, "SSL", cert)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            continue  # refused during the handshake (TLS 1.2)
        with s:
            try:
                s.sendall(_frame(18, 0))
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                continue
            _, got = _closed_after(s, 10)
            assert got == b""
    with _tls(secure, "SSL", client_certificate(secure)) as s:
        s.sendall(_frame(18, 0))
        assert _answer(s)[0] == 7


def test_failed_logins_are_logged_without_the_secret(secure: LocalCluster) -> None:
    """PLAIN carries the password itself in its token: a refused PLAIN login is logged
    with the client's address and listener, never the password (nor a SCRAM proof)."""
    secret = "plain-secret-b41d"
    a = access(secure, "SASL_PLAINTEXT", "PLAIN", "carol", secret)
    for b in secure.brokers:
        with pytest.raises(
            ConnectionLost,
            match=r"SASL_AUTHENTICATION_FAILED|58|"
            r"Authentication failed",
        ):
            raw_connection(a, f"{b.host}:{b.port + EXTRA_LISTENERS['SASL_PLAINTEXT']}")
    logs = "".join(Path(b.log).read_text(errors="replace") for b in secure.brokers)
    assert "Failed authentication with" in logs
    for leaked in (secret, "wrong-pw-3f9a", "whatever-7c1e"):
        assert leaked not in logs


def test_transactions_cross_the_secured_inter_broker_listener(secure: LocalCluster) -> None:
    """The coordinator's WriteTxnMarkers and the leaders' KIP-890 verification requests
    go to the other brokers' inter-broker listener (SASL_SSL here), authenticated as the
    broker: a transaction over partitions led by every broker commits and aborts."""
    a = access(secure, "SASL_SSL", "SCRAM-SHA-512")
    topic = _topic(secure, partitions=3)
    p = Producer(
        {**a.confluent(), "transactional.id": f"sec-tx-{uuid.uuid4().hex[:6]}", "linger.ms": 5}
    )
    p.init_transactions(60)
    for commit, tag in ((True, "c1"), (False, "a"), (True, "c2")):
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, f"{tag}-{i}".encode(), partition=i % 3)
        p.flush(60)
        if commit:
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)
    c = Consumer(
        {
            **a.confluent(),
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, i, 0) for i in range(3)])
    got: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    while len(eof) < 3 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            eof.add(m.partition())
            continue
        got.append(m.value())
    c.close()
    assert len(eof) == 3
    assert sorted(got) == sorted(f"{t}-{i}".encode() for t in ("c1", "c2") for i in range(30))


def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(
    secure: LocalCluster,
) -> None:
    """OffsetDelete (KIP-496) under ACLs, as Kafka's KafkaApis: without DELETE on the
    group the whole request is GROUP_AUTHORIZATION_FAILED and nothing goes; with it, a
    topic the principal may not READ is TOPIC_AUTHORIZATION_FAILED per partition and
    keeps its offset, while the readable one's offset is deleted."""
    from kio.schema.offset_delete.v0.request import (
        OffsetDeleteRequest,
        OffsetDeleteRequestPartition,
        OffsetDeleteRequestTopic,
    )

    props = secure.client_properties
    assert props is not None
    b0 = secure.brokers[0]
    readable, hidden = _topic(secure, 1), _topic(secure, 1)
    group = f"g-{uuid.uuid4().hex[:6]}"
    su = access(secure, "SASL_SSL", "SCRAM-SHA-512")
    c = Consumer({**su.confluent(), "group.id": group, "enable.auto.commit": False})
    c.commit(
        offsets=[TopicPartition(readable, 0, 5), TopicPartition(hidden, 0, 7)], asynchronous=False
    )
    c.close()
    r = odradek(
        "configs",
        "--bootstrap-server",
        b0.address,
        "--command-config",
        props,
        "--entity-type",
        "users",
        "--entity-name",
        "dave",
        "--alter",
        "--add-config",
        "SCRAM-SHA-512=[iterations=8192,password=dave-secret]",
    )
    assert r.returncode == 0, r.stderr

    def grant(*args: str) -> None:
        r = odradek(
            "acls",
            "--bootstrap-server",
            b0.address,
            "--command-config",
            props,
            "--add",
            "--allow-principal",
            "User:dave",
            *args,
        )
        assert r.returncode == 0, r.stderr

    grant("--operation", "Read", "--topic", readable)
    dave = access(secure, "SASL_SSL", "SCRAM-SHA-512", "dave", "dave-secret")
    req = OffsetDeleteRequest(
        group_id=group,
        topics=tuple(
            OffsetDeleteRequestTopic(
                name=t, partitions=(OffsetDeleteRequestPartition(partition_index=0),)
            )
            for t in (readable, hidden)
        ),
    )

    def ask() -> Any:
        # The coordinator answers; any broker checks the ACLs the same way, so ask each
        # until one is the coordinator (the others answer NOT_COORDINATOR once allowed).
        for b in secure.brokers:
            with raw_connection(dave, f"{b.host}:{b.port}") as cn:
                resp = cn.request(req)
            if int(resp.error_code) != 16:  # NOT_COORDINATOR
                return resp
        raise AssertionError("no broker answered as the coordinator")

    assert int(ask().error_code) == GROUP_AUTHORIZATION_FAILED
    grant("--operation", "Delete", "--group", group)
    wait_until(lambda: int(ask().error_code) == 0, "DELETE on the group granted", 10)
    resp = ask()
    per = {str(t.name): int(t.partitions[0].error_code) for t in resp.topics}
    assert per == {readable: 0, hidden: TOPIC_AUTHORIZATION_FAILED}
    admin = AdminClient(su.confluent())
    [fut] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    left = {tp.topic: tp.offset for tp in fut.result(30).topic_partitions}
    assert left.get(hidden) == 7 and left.get(readable, -1001) == -1001, left


# =============================================================================== secrets on disk
def test_every_file_holding_a_secret_is_private(secure: LocalCluster) -> None:
    """Issue 28 item 4: what ``cluster up --security sasl_ssl`` writes with a password or a
    private key in it (client.properties, each server.properties, the ZooKeeper digest
    identity, keystores, the CA key) is readable by its owner only; and no other file
    (logs, state) holds one of those secrets."""
    zk_auth = (secure.dir / "security" / "zookeeper.auth").read_text().strip()
    secrets = {admin_password(secure), *PLAIN_USERS.values(), zk_auth.rsplit(":", 1)[1]}
    holders: dict[str, int] = {}
    for path in sorted(secure.dir.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if b"PRIVATE KEY" in data or any(s.encode() in data for s in secrets):
            holders[str(path.relative_to(secure.dir))] = path.stat().st_mode & 0o777
    expected = {
        "client.properties",
        "security/zookeeper.auth",
        "security/ca-key.pem",
        *(f"broker-{b.id}/server.properties" for b in secure.brokers),
        *(f"security/broker-{b.id}.pem" for b in secure.brokers),
    }
    assert expected <= set(holders)  # (besides client certificates of the tests)
    assert {p: oct(m) for p, m in holders.items() if m & 0o077} == {}
