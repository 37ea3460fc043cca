"""The registry's login check and error answers, as pure code: a password is checked
against a stored SCRAM credential (salt, iteration count, StoredKey), never stored itself;
malformed Authorization headers are no login; 401 and 403 carry Confluent's bodies; the
registry's ACL resource types never reach a broker's authorizer."""

from __future__ import annotations

import base64

import pytest

from odradek.schema_registry.security import (
    basic_credentials,
    denied,
    password_matches,
    unauthorized,
)
from odradek.security.acl import (
    KAFKA_RESOURCE_TYPES,
    REGISTRY_RESOURCE_TYPES,
    AccessControlEntry,
    AclCache,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.scram import credential_from_password
from odradek.zk.security_store import acl_path, decode_acl_change


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_password_checked_against_the_stored_key(mechanism: str) -> None:
    cred = credential_from_password(mechanism, "s3cret", 4096)
    check = (mechanism, cred.salt, cred.iterations, cred.stored_key)
    assert password_matches(*check, "s3cret")
    assert not password_matches(*check, "s3cret ")
    assert not password_matches(*check, "")
    # Another salt or count derives another key.
    assert not password_matches(mechanism, b"another-salt-16b", cred.iterations,
                                cred.stored_key, "s3cret")  # fmt: skip


def test_iteration_counts_outside_kafkas_bounds_are_refused_without_computing() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pw", 4096)
    assert not password_matches("SCRAM-SHA-256", cred.salt, 10**9, cred.stored_key, "pw")
    assert not password_matches("SCRAM-SHA-256", cred.salt, 1, cred.stored_key, "pw")
    # A salt scramp refuses (too short) is a refused login, not an error.
    assert not password_matches("SCRAM-SHA-256", b"short", 4096, cred.stored_key, "pw")


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def test_basic_credentials() -> None:
    assert basic_credentials(_basic("alice:pw:with:colons")) == ("alice", "pw:with:colons")
    assert basic_credentials(_basic("alice:")) == ("alice", "")
    for bad in ("", "Bearer abc", "Basic !!!", _basic("no-colon"), _basic(":pw"),
                "Basic " + "A" * 5000):  # fmt: skip
        assert basic_credentials(bad) is None, bad


def test_confluent_error_bodies() -> None:
    e = unauthorized("SchemaRegistry")
    assert (e.status, e.body()) == (401, {"error_code": 401, "message": "Unauthorized"})
    assert e.headers == {"WWW-Authenticate": 'Basic realm="SchemaRegistry"'}
    e = denied(AclOperation.WRITE, ResourceType.SUBJECT, "orders-value")
    assert (e.status, e.body()) == (
        403,
        {"error_code": 40301, "message": "User is denied operation Write on Subject: orders-value"},
    )
    e = denied(AclOperation.ALTER_CONFIGS, ResourceType.REGISTRY, "schema-registry")
    assert e.body()["message"] == "User is denied operation AlterConfigs on Registry"


def test_registry_resource_types_are_stored_like_kafkas_but_never_on_the_wire() -> None:
    subject = ResourcePattern(ResourceType.SUBJECT, "orders-", PatternType.PREFIXED)
    assert acl_path(subject) == "/kafka-acl-extended/prefixed/Subject/orders-"
    assert acl_path(ResourcePattern(ResourceType.REGISTRY, "schema-registry")) == (
        "/kafka-acl/Registry/schema-registry"
    )
    assert decode_acl_change("/kafka-acl-changes", b"Subject:s").resource_type == (
        ResourceType.SUBJECT
    )
    # Kafka's ResourceType is an int8 on the wire: these codes cannot be sent.
    assert all(int(t) > 127 for t in REGISTRY_RESOURCE_TYPES)
    assert not KAFKA_RESOURCE_TYPES & REGISTRY_RESOURCE_TYPES


def test_subject_acls_decide_as_kafkas() -> None:
    cache = AclCache(["User:admin"])
    allow = AclPermissionType.ALLOW
    cache.set_acls(
        ResourcePattern(ResourceType.SUBJECT, "alice-", PatternType.PREFIXED),
        [AccessControlEntry("User:alice", "*", AclOperation.WRITE, allow)],
    )
    cache.set_acls(
        ResourcePattern(ResourceType.SUBJECT, "alice-secret"),
        [AccessControlEntry("User:alice", "*", AclOperation.ALL, AclPermissionType.DENY)],
    )
    ok = cache.authorize
    assert ok("User:alice", "127.0.0.1", AclOperation.WRITE, ResourceType.SUBJECT, "alice-x")
    # WRITE implies DESCRIBE (listed in GET /subjects), not READ.
    assert ok("User:alice", "127.0.0.1", AclOperation.DESCRIBE, ResourceType.SUBJECT, "alice-x")
    assert not ok("User:alice", "127.0.0.1", AclOperation.READ, ResourceType.SUBJECT, "alice-x")
    assert not ok("User:alice", "h", AclOperation.WRITE, ResourceType.SUBJECT, "alice-secret")
    assert not ok("User:alice", "h", AclOperation.WRITE, ResourceType.SUBJECT, "bob-x")
    assert ok("User:admin", "h", AclOperation.DELETE, ResourceType.SUBJECT, "alice-secret")
