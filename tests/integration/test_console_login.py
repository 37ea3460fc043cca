"""The console of a secured cluster needs a login and acts as the user who logged in
(issue 28 item 5). A real secured cluster (SASL_SSL, SCRAM, the ACL authorizer), the
real ``odradek console`` started by ``cluster up``'s manager with the super user's
client.properties, plain HTTP requests with basic authentication:

* no login, or a password the cluster refuses: 401 and no data;
* alice (READ on t, DESCRIBE only on u) sees t and u but not the other topic, reads t's
  messages, and is refused u's by the broker (the browser reads as alice);
* the super user sees and reads everything."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from security_util import admin_password
from tests.support.polling import wait_until
from tests.support.topics import create_topic

from odradek.cluster.local import LocalCluster
from odradek.security.scram import credential_from_password
from odradek.zk import security_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.start(tmp_path_factory.mktemp("console-login"), 1, security="sasl_ssl")
    try:
        yield c
    finally:
        c.down()


def _get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str, str]:
    """(status, body, WWW-Authenticate)."""
    req = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(), ""
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("WWW-Authenticate", "")


def test_console_login_and_acting_as_the_user(secured: LocalCluster) -> None:
    conf = secured.client_config()
    tag = uuid.uuid4().hex[:6]
    t, u, hidden = f"open-{tag}", f"described-{tag}", f"hidden-{tag}"
    for name in (t, u, hidden):
        create_topic(secured.bootstrap_servers, name, 1, 1, security=conf, timeout=60)
    p = Producer({**conf, "bootstrap.servers": secured.bootstrap_servers, "acks": "all"})
    for name in (t, u, hidden):
        p.produce(name, f"{name}-message".encode(), partition=0)
    assert p.flush(60) == 0
    zk = secured.zk_client()
    security_store.update_user_config(
        zk,
        "alice",
        {
            m: credential_from_password(m, "alice-pw", 4096).to_config()
            for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        },
        set(),
    )
    admin = AdminClient({**conf, "bootstrap.servers": secured.bootstrap_servers})
    acls = [
        AclBinding(
            ResourceType.TOPIC,
            name,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for name, op in ((t, AclOperation.READ), (u, AclOperation.DESCRIBE))
    ]
    for f in admin.create_acls(acls).values():
        f.result(30)

    base = secured.start_console().rstrip("/")
    root = ("admin", admin_password(secured))
    alice = ("alice", "alice-pw")

    # No login, a refused one, a malformed header: 401, nothing of the cluster.
    for auth in (None, ("alice", "wrong"), ("nobody", "x")):
        status, body, challenge = _get(f"{base}/topics", auth)
        assert status == 401 and challenge.startswith("Basic "), (auth, status)
        assert t not in body and hidden not in body
    status, body, _ = _get(f"{base}/messages?topic={hidden}&partition=0")
    assert status == 401 and "message" not in body
    assert _get(f"{base}/metrics")[0] == 401

    # The super user sees every topic (once the collector has them) and reads them.
    wait_until(lambda: hidden in _get(f"{base}/topics", root)[1], "the topics listed", 60)
    assert f"{hidden}-message" in _get(f"{base}/messages?topic={hidden}&partition=0", root)[1]
    # alice: the topics she may describe; her own ACLs decide what she reads.
    status, body, _ = _get(f"{base}/topics", alice)
    assert status == 200 and t in body and u in body and hidden not in body
    assert 'id="user">alice<' in body
    body = _get(f"{base}/messages?topic={t}&partition=0", alice)[1]
    assert f"{t}-message" in body, body[body.find("browse-error") :][:400]
    body = _get(f"{base}/messages?topic={u}&partition=0", alice)[1]
    assert f"{u}-message" not in body and "browse-error" in body
    assert "TOPIC_AUTHORIZATION_FAILED" in body or "authoriz" in body.lower(), body[-600:]
    body = _get(f"{base}/messages?topic={hidden}&partition=0", alice)[1]
    assert f"{hidden}-message" not in body and "browse-error" in body
