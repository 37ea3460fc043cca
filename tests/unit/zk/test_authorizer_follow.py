"""The authorizer follows ``/kafka-acl`` through a failed read (issue 28 item 1): a real
ZooKeeper, the broker's real ``Authorizer`` on its own session, ACLs written by another
session with ``update_acls`` as a broker answering CreateAcls does. The one injected part
is a ZooKeeper error (ConnectionLoss) on the authorizer's read of the changed resource,
between the change notification and the read: the seam is ``security_store.read_acls``,
failing only for the authorizer's session. A failed read must neither lose the change
(fail-open for a new DENY) nor advance past it: the authorizer retries and reloads
everything, as Kafka's AclAuthorizer does after an error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from odradek.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from odradek.server.authorizer import Authorizer
from odradek.zk import security_store as store

T = ResourcePattern(ResourceType.TOPIC, "orders")
U = ResourcePattern(ResourceType.TOPIC, "audit")
ALLOW_ALL = AccessControlEntry("User:alice", "*", AclOperation.ALL, AclPermissionType.ALLOW)
DENY_READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.DENY)


async def _until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def _fail_reads(monkeypatch: pytest.MonkeyPatch, victim: KazooClient, times: int) -> list[Any]:
    """The next ``times`` ACL reads on ``victim``'s session raise ConnectionLoss."""
    real = store.read_acls
    failed: list[Any] = []

    def flaky(zk: KazooClient, pattern: ResourcePattern) -> Any:
        if zk is victim and len(failed) < times:
            failed.append(pattern)
            raise ConnectionLoss("injected between the notification and the read")
        return real(zk, pattern)

    monkeypatch.setattr(store, "read_acls", flaky)
    return failed


@pytest.mark.parametrize("failures", [1, 3])
def test_a_failed_read_loses_no_acl_change(
    zk_connect: Callable[..., KazooClient], monkeypatch: pytest.MonkeyPatch, failures: int
) -> None:
    broker_zk, admin_zk = zk_connect(), zk_connect()
    store.ensure_paths(admin_zk)
    store.update_acls(admin_zk, T, frozenset({ALLOW_ALL}))

    async def scenario() -> None:
        auth = Authorizer(
            broker_zk, asyncio.get_running_loop(), super_users=[], allow_if_no_acl=False
        )
        await asyncio.to_thread(auth.start)
        await _until(
            lambda: auth.authorize(
                "User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders"
            ),
            "the ALLOW loaded",
        )
        failed = _fail_reads(monkeypatch, broker_zk, failures)
        await asyncio.to_thread(store.update_acls, admin_zk, T, frozenset({DENY_READ}))
        await _until(lambda: len(failed) == failures, "the injected failures")
        # The DENY arrives without any further change in ZooKeeper.
        await _until(
            lambda: (
                not auth.authorize(
                    "User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders"
                )
            ),
            "the DENY after the failed read",
            timeout=15,
        )
        # And the authorizer still follows changes incrementally afterwards.
        await asyncio.to_thread(store.update_acls, admin_zk, U, frozenset({ALLOW_ALL}))
        await _until(
            lambda: auth.authorize(
                "User:alice", "10.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "audit"
            ),
            "a later change",
        )
        assert auth.cache.acls(T) == {ALLOW_ALL, DENY_READ}

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_reload_drops_acls_deleted_meanwhile(
    zk_connect: Callable[..., KazooClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DeleteAcls whose read failed is applied too: the reload replaces the cache."""
    broker_zk, admin_zk = zk_connect(), zk_connect()
    store.ensure_paths(admin_zk)
    store.update_acls(admin_zk, T, frozenset({ALLOW_ALL}))

    async def scenario() -> None:
        auth = Authorizer(
            broker_zk, asyncio.get_running_loop(), super_users=[], allow_if_no_acl=False
        )
        await asyncio.to_thread(auth.start)
        await _until(lambda: len(auth.cache) == 1, "the ALLOW loaded")
        failed = _fail_reads(monkeypatch, broker_zk, 1)
        await asyncio.to_thread(store.update_acls, admin_zk, T, frozenset(), frozenset({ALLOW_ALL}))
        await _until(lambda: failed != [], "the injected failure")
        await _until(lambda: len(auth.cache) == 0, "the deletion after the failed read", timeout=15)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_write_of_this_broker_never_shadows_a_newer_one(
    zk_connect: Callable[..., KazooClient],
) -> None:
    """``written`` (CreateAcls / DeleteAcls answered by this broker) shows its value at
    once, then re-reads the resource: a newer write by another broker, already applied
    from its notification, wins again."""
    broker_zk, admin_zk = zk_connect(), zk_connect()
    store.ensure_paths(admin_zk)

    async def scenario() -> None:
        auth = Authorizer(
            broker_zk, asyncio.get_running_loop(), super_users=[], allow_if_no_acl=False
        )
        await asyncio.to_thread(auth.start)
        await asyncio.to_thread(store.update_acls, admin_zk, T, frozenset({ALLOW_ALL, DENY_READ}))
        await _until(lambda: len(auth.cache) == 2, "the other broker's write")
        auth.written(T, frozenset({ALLOW_ALL}))  # this broker's older value
        assert auth.cache.acls(T) == {ALLOW_ALL}
        await _until(
            lambda: auth.cache.acls(T) == {ALLOW_ALL, DENY_READ}, "ZooKeeper's value again"
        )

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_new_session_reloads_everything(
    zk_connect: Callable[..., KazooClient], zk_server: Any
) -> None:
    """After its ZooKeeper session expired, the authorizer reloads every ACL: the
    notification of a change made meanwhile may be gone (purged after 15 minutes); here
    the ACL znode is written without any notification at all."""
    broker_zk, admin_zk = zk_connect(), zk_connect()
    store.ensure_paths(admin_zk)

    async def scenario() -> None:
        auth = Authorizer(
            broker_zk, asyncio.get_running_loop(), super_users=[], allow_if_no_acl=False
        )
        await asyncio.to_thread(auth.start)
        await asyncio.to_thread(
            admin_zk.create,
            store.acl_path(T),
            store.encode_acls(frozenset({DENY_READ})),
            makepath=True,
        )
        await asyncio.to_thread(_expire_session, broker_zk, zk_server.connect)
        await _until(
            lambda: auth.cache.acls(T) == {DENY_READ},
            "the ACL written while the session was lost",
            timeout=30,
        )

    asyncio.run(asyncio.wait_for(scenario(), 60))


def _expire_session(zk: KazooClient, connect: str) -> None:
    """ZooKeeper's way to expire a session: another client with the same session id
    connects and closes."""
    lost: list[str] = []
    zk.add_listener(lambda state: lost.append(state) if state == "LOST" else None)
    session_id, password = zk.client_id
    other = KazooClient(hosts=connect, client_id=(session_id, password))
    other.start(timeout=10)
    other.stop()
    other.close()
    deadline = time.monotonic() + 30
    while not lost and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lost, "the session did not expire"
