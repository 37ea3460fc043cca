"""The sans-IO security parts: ACL decisions, filters, SASL state machines, SCRAM codecs,
JAAS parsing, ACL znode codecs (Kafka's formats)."""

from __future__ import annotations

import hashlib

import pytest

from odradek.errors import ErrorCode
from odradek.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCache,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.jaas import parse_jaas_config
from odradek.security.principal import KafkaPrincipal, parse_principal
from odradek.security.sasl_client import SaslClient
from odradek.security.sasl_server import SaslServerAuthenticator, SaslState
from odradek.security.scram import (
    ScramCredential,
    credential_from_password,
    credential_from_salted_password,
)
from odradek.zk import security_store as store

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
A, D = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def ace(
    principal: str, op: AclOperation, perm: AclPermissionType = A, host: str = "*"
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, perm)


def lit(rtype: ResourceType, name: str) -> ResourcePattern:
    return ResourcePattern(rtype, name, PatternType.LITERAL)


# ------------------------------------------------------------------------------- decisions
def test_write_only_user() -> None:
    c = AclCache()
    c.set_acls(lit(T, "t"), [ace("User:alice", Op.WRITE)])
    assert c.authorize("User:alice", "1.2.3.4", Op.WRITE, T, "t")
    assert c.authorize("User:alice", "1.2.3.4", Op.DESCRIBE, T, "t")  # implied by WRITE
    assert not c.authorize("User:alice", "1.2.3.4", Op.READ, T, "t")
    assert not c.authorize("User:bob", "1.2.3.4", Op.WRITE, T, "t")
    assert not c.authorize("User:alice", "1.2.3.4", Op.WRITE, T, "u")  # no ACL: default deny


def test_no_acl_found_and_super_users() -> None:
    assert AclCache(allow_if_no_acl=True).authorize("User:x", "h", Op.READ, T, "t")
    assert not AclCache().authorize("User:x", "h", Op.READ, T, "t")
    c = AclCache(super_users=["User:admin"])
    c.set_acls(lit(T, "t"), [ace("User:*", Op.ALL, D)])
    assert c.authorize(KafkaPrincipal("User", "admin"), "h", Op.ALTER, T, "t")


def test_deny_wins_and_wildcards_and_prefixes() -> None:
    c = AclCache()
    c.set_acls(lit(T, "*"), [ace("User:*", Op.READ)])
    c.set_acls(ResourcePattern(T, "secret-", PatternType.PREFIXED), [ace("User:bob", Op.READ, D)])
    c.set_acls(lit(T, "other"), [ace("User:bob", Op.ALL, host="10.0.0.1")])
    assert c.authorize("User:bob", "h", Op.READ, T, "public")
    assert not c.authorize("User:bob", "h", Op.READ, T, "secret-1")
    assert c.authorize("User:carol", "h", Op.READ, T, "secret-1")
    assert c.authorize("User:bob", "10.0.0.1", Op.DELETE, T, "other")
    assert not c.authorize("User:bob", "10.0.0.2", Op.DELETE, T, "other")
    c.set_acls(lit(T, "*"), [])  # removing every entry forgets the pattern
    assert not c.authorize("User:carol", "h", Op.READ, T, "public")
    assert len(c) == 2


def test_alter_configs_implies_describe_configs_and_by_resource_type() -> None:
    c = AclCache()
    c.set_acls(lit(G, "g"), [ace("User:a", Op.ALTER_CONFIGS)])
    assert c.authorize("User:a", "h", Op.DESCRIBE_CONFIGS, G, "g")
    assert not c.authorize("User:a", "h", Op.READ, G, "g")
    c.set_acls(lit(T, "t"), [ace("User:a", Op.WRITE)])
    assert c.authorize_by_resource_type("User:a", "h", Op.WRITE, T)
    assert not c.authorize_by_resource_type("User:b", "h", Op.WRITE, T)


def test_filters() -> None:
    c = AclCache()
    c.set_acls(lit(T, "t"), [ace("User:a", Op.WRITE), ace("User:b", Op.READ)])
    c.set_acls(lit(T, "*"), [ace("User:a", Op.DESCRIBE)])
    c.set_acls(ResourcePattern(T, "t", PatternType.PREFIXED), [ace("User:a", Op.READ)])
    c.set_acls(lit(G, "g"), [ace("User:a", Op.READ)])
    assert len(list(c.bindings(AclBindingFilter()))) == 5
    assert len(list(c.bindings(AclBindingFilter(T, "t", PatternType.LITERAL)))) == 2
    assert len(list(c.bindings(AclBindingFilter(T, "t", PatternType.MATCH)))) == 4
    assert len(list(c.bindings(AclBindingFilter(T, "tx", PatternType.MATCH)))) == 2
    assert len(list(c.bindings(AclBindingFilter(principal="User:b")))) == 1
    assert len(list(c.bindings(AclBindingFilter(operation=Op.READ)))) == 3
    b = AclBindingFilter(T, "t", PatternType.ANY, "User:a", "*", Op.ANY, A)
    assert all(b.matches(x) for x in c.bindings(b))
    assert (
        AclBindingFilter(
            T, "t", PatternType.LITERAL, "User:a", "*", Op.READ, A
        ).find_indefinite_field()
        is None
    )
    assert "ANY" in (
        AclBindingFilter(T, "t", PatternType.ANY, "User:a", "*", Op.READ, A).find_indefinite_field()
        or ""
    )
    assert str(AclBinding(lit(T, "t"), ace("User:a", Op.READ)).pattern) == (
        "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"
    )


def test_principal_parsing() -> None:
    assert parse_principal("User:CN=a,O=b") == KafkaPrincipal("User", "CN=a,O=b")
    with pytest.raises(ValueError):
        parse_principal("alice")


# ------------------------------------------------------------------------------- ZooKeeper codecs
def test_acl_znode_format_is_kafkas() -> None:
    entries = frozenset(
        {ace("User:alice", Op.IDEMPOTENT_WRITE), ace("User:bob", Op.READ, D, "10.0.0.1")}
    )
    data = store.encode_acls(entries)
    assert data == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
        b'"operation":"IdempotentWrite","host":"*"},{"principal":"User:bob",'
        b'"permissionType":"Deny","operation":"Read","host":"10.0.0.1"}]}'
    )
    assert store.decode_acls(data) == entries
    assert store.acl_path(lit(T, "t")) == "/kafka-acl/Topic/t"
    assert store.acl_path(
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, "x", PatternType.PREFIXED)
    ) == ("/kafka-acl-extended/prefixed/TransactionalId/x")
    for bad in ("a/b", "..", ""):
        with pytest.raises(ValueError):
            store.acl_path(lit(G, bad))
    assert store.decode_acl_change(store.LITERAL_CHANGES, b"Group:g:1") == lit(G, "g:1")
    root, body = store._encode_change(ResourcePattern(T, "p", PatternType.PREFIXED))
    assert root == "/kafka-acl-extended-changes"
    assert store.decode_acl_change(root, body) == ResourcePattern(T, "p", PatternType.PREFIXED)
    assert store.sanitize_user("CN=a b") == "CN%3Da%20b"
    assert store.unsanitize_user(store.sanitize_user("x/y..")) == "x/y.."


# ------------------------------------------------------------------------------- SCRAM
def test_scram_credential_format() -> None:
    salt = b"0123456789abcdef"
    cred = credential_from_password("SCRAM-SHA-512", "pw", 8192, salt)
    text = cred.to_config()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=")
    assert text.endswith(",iterations=8192")
    assert ScramCredential.from_config(text) == cred
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 8192)
    assert credential_from_salted_password("SCRAM-SHA-512", salt, salted, 8192) == cred
    for bad in ("salt=x", "salt=a,stored_key=b,server_key=c,iterations=x", "a=b,c"):
        with pytest.raises(ValueError):
            ScramCredential.from_config(bad)


def _server(creds: dict, plain: dict | None = None, reauth: int = 0) -> SaslServerAuthenticator:
    return SaslServerAuthenticator(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        scram_lookup=lambda m, u: creds.get((m, u)),
        plain_check=lambda u, p: (plain or {}).get(u) == p,
        max_reauth_ms=reauth,
    )


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_and_reauthentication(mech: str) -> None:
    creds = {(mech, "alice"): credential_from_password(mech, "alice-secret")}
    s = _server(creds, reauth=1000)
    assert s.handshake(mech, 1) == (ErrorCode.none, ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
    for round_ in range(2):
        c = SaslClient(mech, "alice", "alice-secret")
        r1 = s.authenticate(c.next_token(), 2, 0)
        assert (r1.error_code == ErrorCode.none and not s.principal) or round_
        c.receive(r1.token)
        r2 = s.authenticate(c.next_token(), 2, 100)
        assert r2.error_code == ErrorCode.none and r2.session_lifetime_ms == 1000
        c.receive(r2.token)  # verifies the server signature
        assert c.complete and s.principal == KafkaPrincipal("User", "alice")
        assert s.expired(1100) and not s.expired(1099)
        if round_ == 0:  # KIP-368: a handshake on an authenticated session re-authenticates
            assert s.handshake(mech, 1)[0] == ErrorCode.none
            assert s.state == SaslState.REAUTHENTICATE and s.authenticated
    assert s.reauthentications == 1


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "x")])
def test_scram_failures_do_not_say_why(user: str, password: str) -> None:
    creds = {("SCRAM-SHA-256", "alice"): credential_from_password("SCRAM-SHA-256", "pw")}
    s = _server(creds)
    s.handshake("SCRAM-SHA-256", 1)
    c = SaslClient("SCRAM-SHA-256", user, password)
    r = s.authenticate(c.next_token(), 2, 0)
    if r.error_code == ErrorCode.none:
        c.receive(r.token)
        r = s.authenticate(c.next_token(), 2, 0)
    assert r.error_code == ErrorCode.sasl_authentication_failed and r.close
    assert r.error_message == (
        "Authentication failed during authentication due to invalid "
        "credentials with SASL mechanism SCRAM-SHA-256"
    )
    assert s.state == SaslState.FAILED and not s.authenticated


def test_plain_and_handshake_errors() -> None:
    s = _server({}, {"bob": "bob-pw"})
    assert s.handshake("GSSAPI", 1)[0] == ErrorCode.unsupported_sasl_mechanism
    s = _server({}, {"bob": "bob-pw"})
    s.handshake("PLAIN", 1)
    r = s.authenticate(b"\x00bob\x00nope", 1, 0)
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert r.error_message == "Authentication failed: Invalid username or password"
    s = _server({}, {"bob": "bob-pw"})
    s.handshake("PLAIN", 0)
    assert s.raw_tokens
    assert s.authenticate(b"\x00bob\x00bob-pw", 0, 0).error_code == ErrorCode.none
    assert s.principal == KafkaPrincipal("User", "bob") and not s.supports_reauth
    # no re-authentication for a v0 client, and never with another mechanism
    assert s.handshake("PLAIN", 1)[0] == ErrorCode.unsupported_sasl_mechanism
    s = _server({}, {"bob": "bob-pw"})
    assert s.authenticate(b"x", 1, 0).error_code == ErrorCode.illegal_sasl_state
    s = _server({}, {"bob": "bob-pw"})
    s.handshake("PLAIN", 1)
    assert s.authenticate(b"only-one-token", 1, 0).error_code == (
        ErrorCode.sasl_authentication_failed
    )


# ------------------------------------------------------------------------------- JAAS
def test_jaas_parsing() -> None:
    e = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="a s\\"ecret" user_admin="x" user_bob=y;'
    )
    assert e.flag == "required" and e.options["password"] == 'a s"ecret'
    assert e.plain_users == {"admin": "x", "bob": "y"}
    for bad in ("Module", "Module bogus;", 'Module required a="b"', 'M required a="b"; junk'):
        with pytest.raises(ValueError):
            parse_jaas_config(bad)


def test_reauthentication_cannot_change_the_principal() -> None:
    """KIP-368 (Kafka's SaslServerAuthenticator): a re-authentication as another user fails
    and keeps the session's principal; one as the same user succeeds."""
    s = _server({}, {"bob": "bob-pw", "eve": "eve-pw"}, reauth=1000)
    s.handshake("PLAIN", 1)
    assert s.authenticate(b"\x00bob\x00bob-pw", 1, 0).error_code == ErrorCode.none
    assert s.handshake("PLAIN", 1)[0] == ErrorCode.none
    assert s.authenticate(b"\x00bob\x00bob-pw", 1, 10).error_code == ErrorCode.none
    assert s.reauthentications == 1
    assert s.handshake("PLAIN", 1)[0] == ErrorCode.none
    r = s.authenticate(b"\x00eve\x00eve-pw", 1, 20)
    assert r.error_code == ErrorCode.sasl_authentication_failed and r.close
    assert r.error_message == "Cannot change principals during re-authentication"
    assert s.principal == KafkaPrincipal("User", "bob") and s.state == SaslState.FAILED
