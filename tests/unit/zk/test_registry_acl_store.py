"""The schema registry's ACLs (``Subject`` and ``Registry`` resources) share the brokers'
ZooKeeper ACL store (issue 27 item 1): a real ZooKeeper, a broker's ``Authorizer`` and a
registry's (``resource_types=REGISTRY_RESOURCE_TYPES``) on their own sessions. Each holds
only its own resource types, whether loaded at start or followed through a change
notification, so a broker never describes or deletes a registry ACL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kazoo.client import KazooClient

from odradek.security.acl import (
    KAFKA_RESOURCE_TYPES,
    REGISTRY_RESOURCE_TYPES,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.server.authorizer import Authorizer
from odradek.zk import security_store as store

TOPIC = ResourcePattern(ResourceType.TOPIC, "orders")
SUBJECT = ResourcePattern(ResourceType.SUBJECT, "orders-", PatternType.PREFIXED)
LATER = ResourcePattern(ResourceType.SUBJECT, "audit-value")
ALLOW = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)


async def _until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def test_read_all_acls_by_resource_type(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    store.ensure_paths(zk)
    for pattern in (TOPIC, SUBJECT):
        store.update_acls(zk, pattern, frozenset({ALLOW}))
    assert set(store.read_all_acls(zk)) == {TOPIC, SUBJECT}
    assert set(store.read_all_acls(zk, KAFKA_RESOURCE_TYPES)) == {TOPIC}
    assert set(store.read_all_acls(zk, REGISTRY_RESOURCE_TYPES)) == {SUBJECT}


def test_brokers_and_registries_each_hold_their_own(
    zk_connect: Callable[..., KazooClient],
) -> None:
    admin_zk, broker_zk, registry_zk = zk_connect(), zk_connect(), zk_connect()
    store.ensure_paths(admin_zk)
    for pattern in (TOPIC, SUBJECT):
        store.update_acls(admin_zk, pattern, frozenset({ALLOW}))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        broker = Authorizer(broker_zk, loop, super_users=[], allow_if_no_acl=False)
        registry = Authorizer(registry_zk, loop, super_users=[], allow_if_no_acl=False,
                              resource_types=REGISTRY_RESOURCE_TYPES)  # fmt: skip
        await asyncio.to_thread(broker.start)
        await asyncio.to_thread(registry.start)
        await _until(lambda: len(broker.cache) == 1 and len(registry.cache) == 1, "the loads")
        assert [b.pattern for b in broker.cache.bindings()] == [TOPIC]
        assert [b.pattern for b in registry.cache.bindings()] == [SUBJECT]
        assert registry.authorize("User:alice", "h", AclOperation.READ, ResourceType.SUBJECT,
                                  "orders-value")  # fmt: skip
        # A change notification naming a registry resource: followed by the registry only.
        await asyncio.to_thread(store.update_acls, admin_zk, LATER, frozenset({ALLOW}))
        await _until(lambda: len(registry.cache) == 2, "the registry following the change")
        await asyncio.sleep(0.3)  # the broker handled the same notification meanwhile
        assert broker.refreshes >= 1
        assert [b.pattern for b in broker.cache.bindings()] == [TOPIC]

    asyncio.run(scenario())
