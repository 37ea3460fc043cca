"""The schema registry of a secured cluster (issue 27 item 1): a real ``sasl_ssl`` cluster
(SCRAM users in ZooKeeper under ``zookeeper.set.acl``, the ACL authorizer), its registry
started by the cluster manager (https with a certificate of the cluster's CA, basic
authentication, the admin as super user), and confluent-kafka's own SchemaRegistryClient
with ``basic.auth.user.info`` and ``ssl.ca.location``, as two users:

* no credentials, a wrong password, an unknown user: 401 with Confluent's body and a
  ``WWW-Authenticate`` challenge; the right password of a SCRAM user: served;
* alice may do anything on subjects starting ``alice-``; bob may only read
  ``alice-value``: each is refused (403, 40301) what the ACLs do not allow, ``GET
  /subjects`` lists only what each may see, a schema id is readable only through a subject
  the user may read; global config needs an ACL on the ``Registry`` resource; a DENY wins;
* a secondary instance forwards a write with the user's credentials and the primary
  checks them again (the forwarding header alone grants nothing);
* the registry's ACLs never appear in the brokers' DescribeAcls;
* the brokers' schema id validation logs in to the registry (the admin, over https):
  a record framed with a registered id passes, one with an unknown id is refused.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AclBindingFilter, AdminClient, ResourcePatternType
from confluent_kafka.admin import AclOperation as CkOperation
from confluent_kafka.admin import AclPermissionType as CkPermission
from confluent_kafka.admin import ResourceType as CkResourceType
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from schema_registry_util import RegistryProcess, http, start_registry
from security_util import admin_password, ca_file, odradek
from tests.support.polling import wait_until
from tests.support.topics import create_topic

from odradek.cluster.local import LocalCluster
from odradek.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.scram import credential_from_password
from odradek.zk import security_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

USERS = {"alice": "alice-pw", "bob": "bob-pw"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # With its registry, as `cluster up` starts it: the brokers' schema id validation
    # logs in to it over https too.
    c = LocalCluster.start(
        tmp_path_factory.mktemp("registry-security"), 1, security="sasl_ssl", schema_registry=True
    )
    try:
        zk = c.zk_client()
        for user, password in USERS.items():
            security_store.update_user_config(
                zk,
                user,
                {m: credential_from_password(m, password, 4096).to_config()
                 for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")},
                set(),
            )  # fmt: skip
        yield c
    finally:
        c.down()


def _client(c: LocalCluster, user: str) -> SchemaRegistryClient:
    password = admin_password(c) if user == "admin" else USERS[user]
    return SchemaRegistryClient(
        {
            "url": c.registry_url(),
            "basic.auth.user.info": f"{user}:{password}",
            "ssl.ca.location": ca_file(c),
        }
    )


def _raw(
    url: str, auth: tuple[str, str] | None, ca: str, headers: dict[str, str] | None = None
) -> tuple[int, Any, str]:
    """(status, JSON body, WWW-Authenticate) of a GET."""
    req = urllib.request.Request(url, headers=headers or {})
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    ctx = ssl.create_default_context(cafile=ca)
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            return r.status, json.loads(r.read()), ""
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers.get("WWW-Authenticate", "")


def _acl(
    c: LocalCluster,
    rtype: ResourceType,
    name: str,
    user: str,
    op: AclOperation,
    *,
    prefixed: bool = False,
    deny: bool = False,
) -> None:
    pattern = ResourcePattern(
        rtype, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL
    )
    perm = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    security_store.update_acls(
        c.zk_client(), pattern, add=frozenset({AccessControlEntry(f"User:{user}", "*", op, perm)})
    )


def _denied(fn: Callable[[], Any]) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as e:
        fn()
    assert (e.value.http_status_code, e.value.error_code) == (403, 40301), e.value
    return e.value


def _eventually(fn: Callable[[], Any], what: str) -> Any:
    """ACLs reach the registry through ZooKeeper's change notifications: soon, not at once."""

    def attempt() -> Any:
        try:
            return fn()
        except SchemaRegistryError as e:
            if e.http_status_code == 403:
                return None
            raise

    return wait_until(attempt, what, timeout=30)


def test_basic_authentication_over_tls(secured: LocalCluster) -> None:
    url, ca = secured.registry_url(), ca_file(secured)
    assert url.startswith("https://")
    for auth in (None, ("alice", "wrong"), ("nobody", "x"), ("alice", "")):
        status, body, challenge = _raw(url + "/subjects", auth, ca)
        assert (status, body) == (401, {"error_code": 401, "message": "Unauthorized"}), auth
        assert challenge == 'Basic realm="SchemaRegistry"', auth
    # A malformed header is no login either.
    status, _, _ = _raw(url + "/subjects", None, ca, {"Authorization": "Basic !!!"})
    assert status == 401
    admin = _client(secured, "admin")  # the super user: everything, no ACL needed
    schema_id = admin.register_schema("admin-value", Schema('"string"', "AVRO"))
    assert admin.get_schema(schema_id).schema_str == '"string"'
    assert "admin-value" in admin.get_subjects()
    status, body, _ = _raw(url + "/subjects", ("alice", USERS["alice"]), ca)
    assert status == 200 and "admin-value" not in body  # alice: no ACL on it


def test_subject_permissions_for_two_users(secured: LocalCluster) -> None:
    c = secured
    admin, alice, bob = (_client(c, u) for u in ("admin", "alice", "bob"))
    hidden = admin.register_schema("hidden-value", Schema('"bytes"', "AVRO"))
    _acl(c, ResourceType.SUBJECT, "alice-", "alice", AclOperation.ALL, prefixed=True)
    _acl(c, ResourceType.SUBJECT, "alice-value", "bob", AclOperation.READ)
    user_v1 = json.dumps({"type": "record", "name": "U",
                          "fields": [{"name": "a", "type": "int"}]})  # fmt: skip
    sid = _eventually(lambda: alice.register_schema("alice-value", Schema(user_v1, "AVRO")),
                      "alice's ACL on alice-*")  # fmt: skip
    e = _denied(lambda: bob.register_schema("alice-value", Schema('"int"', "AVRO")))
    assert str(e.error_message) == "User is denied operation Write on Subject: alice-value"
    _eventually(lambda: bob.get_latest_version("alice-value"), "bob's ACL on alice-value")
    assert bob.get_latest_version("alice-value").schema_id == sid
    assert _client(c, "bob").get_schema(sid).schema_str == alice.get_schema(sid).schema_str
    _denied(lambda: _client(c, "bob").get_schema(hidden))  # only under hidden-value
    _denied(lambda: alice.register_schema("bob-value", Schema('"int"', "AVRO")))
    # GET /subjects: what each may describe.
    assert alice.get_subjects() == ["alice-value"]
    assert bob.get_subjects() == ["alice-value"]
    assert {"alice-value", "hidden-value"} <= set(admin.get_subjects())
    # Subject config: alice's ALL covers it; bob's READ does not.
    assert alice.set_compatibility("alice-value", "FULL")["compatibility"] == "FULL"
    _denied(lambda: bob.set_compatibility("alice-value", "NONE"))
    # Global config: the Registry resource.
    _denied(lambda: alice.get_compatibility())
    _acl(c, ResourceType.REGISTRY, "schema-registry", "alice", AclOperation.DESCRIBE_CONFIGS)
    assert _eventually(lambda: alice.get_compatibility(), "alice's Registry ACL") == "BACKWARD"
    _denied(lambda: alice.set_compatibility(level="NONE"))
    # Deletes: bob may not, alice may.
    _denied(lambda: bob.delete_subject("alice-value"))
    alice.register_schema("alice-other", Schema('"long"', "AVRO"))
    assert alice.delete_subject("alice-other") == [1]
    # A DENY wins over alice's ALL.
    assert alice.get_compatibility("alice-value") == "FULL"
    _acl(c, ResourceType.SUBJECT, "alice-value", "alice", AclOperation.DESCRIBE_CONFIGS,
         deny=True)  # fmt: skip

    def refused() -> bool:
        try:
            alice.get_compatibility("alice-value")
        except SchemaRegistryError as e:
            return e.http_status_code == 403
        return False

    wait_until(refused, "the DENY reaching the registry", timeout=30)
    # The brokers' DescribeAcls: Kafka's resources only, and it still answers.
    kafka = AdminClient({**c.client_config(), "bootstrap.servers": c.bootstrap_servers})
    flt = AclBindingFilter(CkResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                           CkOperation.ANY, CkPermission.ANY)  # fmt: skip
    described = kafka.describe_acls(flt).result(30)
    assert all(
        b.restype
        in (
            CkResourceType.TOPIC,
            CkResourceType.GROUP,
            CkResourceType.BROKER,
            CkResourceType.TRANSACTIONAL_ID,
        )
        for b in described
    ), described


@pytest.fixture
def secondary(secured: LocalCluster) -> Iterator[RegistryProcess]:
    sec = secured.dir / "security"
    assert secured.client_properties is not None and secured.zk_auth_file is not None
    reg = start_registry(
        secured,
        8091,
        zookeeper=True,
        command_config=secured.client_properties,
        extra_args=("--zookeeper-auth-file", secured.zk_auth_file,
                    "--ssl-keystore-location", str(sec / "schema-registry.pem"),
                    "--ssl-truststore-location", ca_file(secured)),
        https=True,
        cafile=ca_file(secured),
    )  # fmt: skip
    try:
        yield reg
    finally:
        reg.stop()


def test_a_secondary_forwards_the_users_credentials(
    secured: LocalCluster, secondary: RegistryProcess
) -> None:
    c, ca = secured, ca_file(secured)
    _acl(c, ResourceType.SUBJECT, "fwd-", "alice", AclOperation.WRITE, prefixed=True)
    body = {"schema": '"float"'}
    path = "/subjects/fwd-value/versions"
    assert http(secondary.url, "POST", path, body, cafile=ca)[0] == 401

    def alice_writes() -> Any:
        st, got = http(secondary.url, "POST", path, body, auth=("alice", USERS["alice"]),
                       cafile=ca)  # fmt: skip
        return got if st == 200 else None

    got = wait_until(alice_writes, "alice's write through the secondary", timeout=30)
    assert "id" in got
    st, err = http(secondary.url, "POST", path, {"schema": '"double"'},
                   auth=("bob", USERS["bob"]), cafile=ca)  # fmt: skip
    assert (st, err["error_code"]) == (403, 40301), err
    # The primary: the forwarding header without credentials is still a 401.
    st, err = _raw(c.registry_url() + "/subjects", None, ca, {"X-Odradek-Forwarded": "1"})[:2]
    assert st == 401


def test_cli_logs_in_and_manages_registry_acls(secured: LocalCluster) -> None:
    """``odradek schemas`` logs in with the cluster's client.properties (its SASL user) or
    ``basic.auth.user.info``; ``odradek schemas acls`` writes the registry's ACLs."""
    c, url, ca = secured, secured.registry_url(), ca_file(secured)
    assert c.client_properties is not None and c.zk_auth_file is not None
    _client(c, "admin").register_schema("cli-value", Schema('"int"', "AVRO"))
    r = odradek("schemas", "--url", url, "--command-config", c.client_properties, "list")
    assert r.returncode == 0 and "cli-value" in json.loads(r.stdout), r.stderr
    as_bob = ("--command-config", f"basic.auth.user.info=bob:{USERS['bob']}",
              "--command-config", f"ssl.ca.location={ca}")  # fmt: skip
    r = odradek("schemas", "--url", url, *as_bob, "get", "cli-value")
    assert r.returncode == 1 and "40301" in r.stderr, (r.stdout, r.stderr)
    r = odradek("schemas", "acls", "--zookeeper", c.zk_connect, "--zookeeper-auth-file",
                c.zk_auth_file, "--add", "--allow-principal", "User:bob", "--operation", "Read",
                "--subject", "cli-value")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ResourcePattern(resourceType=SUBJECT, name=cli-value, patternType=LITERAL)" in (
        r.stdout
    )
    r = odradek("schemas", "acls", "--zookeeper", c.zk_connect, "--zookeeper-auth-file",
                c.zk_auth_file, "--add", "--allow-principal", "User:bob", "--operation",
                "IdempotentWrite", "--registry")  # fmt: skip
    assert r.returncode == 2 and "Registry ACLs do not take IDEMPOTENT_WRITE" in r.stdout

    def bob_reads() -> Any:
        got = odradek("schemas", "--url", url, *as_bob, "get", "cli-value")
        return json.loads(got.stdout) if got.returncode == 0 else None

    assert wait_until(bob_reads, "bob's ACL written by the CLI", timeout=30)["version"] == 1


def test_broker_validation_logs_in_to_the_registry(secured: LocalCluster) -> None:
    c = secured
    conf = c.client_config()
    create_topic(c.bootstrap_servers, "validated", 1, 1,
                 {"confluent.value.schema.validation": "true"}, security=conf, timeout=60)  # fmt: skip
    sid = _client(c, "admin").register_schema("validated-value", Schema('"string"', "AVRO"))
    p = Producer({**conf, "bootstrap.servers": c.bootstrap_servers, "linger.ms": 0,
                  "message.timeout.ms": 20000})  # fmt: skip
    results: dict[str, Any] = {}
    for name, sid_used in (("good", sid), ("unknown", sid + 1000)):
        value = b"\x00" + sid_used.to_bytes(4, "big") + b"\x02a"

        def report(err: Any, _msg: Any, name: str = name) -> None:
            results[name] = err

        p.produce("validated", value=value, on_delivery=report)
        p.flush(30)
    assert results["good"] is None, results
    assert results["unknown"] is not None
    assert results["unknown"].code() == KafkaError.INVALID_RECORD, results
