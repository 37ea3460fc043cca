"""ACL hosts are compared as addresses (issue 28 item 3): on a dual-stack listener an IPv4
client's address is ``::ffff:a.b.c.d``, which must match (and be denied by) an ACL for
``a.b.c.d``, as in Kafka, where Java's InetAddress turns an IPv4-mapped address into the
IPv4 one; IPv6 spellings of one address are one address; host names stay text."""

from __future__ import annotations

import pytest

from odradek.security.acl import (
    AccessControlEntry,
    AclCache,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
    canonical_host,
)

T = ResourceType.TOPIC
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def _cache(*entries: tuple[str, AclPermissionType]) -> AclCache:
    c = AclCache()
    c.set_acls(
        ResourcePattern(T, "t"),
        [
            AccessControlEntry("User:alice", host, AclOperation.READ, perm)
            for host, perm in (("*", ALLOW), *entries)
        ],
    )
    return c


@pytest.mark.parametrize("client", ["10.0.0.5", "::ffff:10.0.0.5", "::FFFF:0a00:0005"])
def test_a_deny_for_an_ipv4_address_applies_to_its_ipv4_mapped_form(client: str) -> None:
    c = _cache(("10.0.0.5", DENY))
    assert not c.authorize("User:alice", client, AclOperation.READ, T, "t")
    assert c.authorize("User:alice", "10.0.0.6", AclOperation.READ, T, "t")
    assert c.authorize("User:alice", "::ffff:10.0.0.6", AclOperation.READ, T, "t")


@pytest.mark.parametrize("acl_host", ["::ffff:10.0.0.5", "0:0:0:0:0:ffff:a00:5"])
def test_an_acl_written_in_ipv4_mapped_form_matches_the_ipv4_client(acl_host: str) -> None:
    assert not _cache((acl_host, DENY)).authorize(
        "User:alice", "10.0.0.5", AclOperation.READ, T, "t"
    )


def test_ipv6_spellings_and_by_resource_type() -> None:
    c = _cache(("0:0:0:0:0:0:0:1", DENY))
    assert not c.authorize("User:alice", "::1", AclOperation.READ, T, "t")
    only = AclCache()
    only.set_acls(
        ResourcePattern(T, "t"),
        [AccessControlEntry("User:bob", "10.0.0.5", AclOperation.WRITE, ALLOW)],
    )
    assert only.authorize_by_resource_type("User:bob", "::ffff:10.0.0.5", AclOperation.WRITE, T)
    assert not only.authorize_by_resource_type("User:bob", "::ffff:10.0.0.6", AclOperation.WRITE, T)


def test_canonical_host() -> None:
    assert canonical_host("::ffff:127.0.0.1") == "127.0.0.1"
    assert canonical_host("0:0:0:0:0:0:0:1") == "::1"
    assert canonical_host("FE80::1") == "fe80::1"
    assert canonical_host("*") == "*"
    assert canonical_host("broker.example.com") == "broker.example.com"
    assert canonical_host("") == ""
