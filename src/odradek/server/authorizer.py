"""The broker's authorizer and SCRAM credential cache, kept in step with ZooKeeper.

``Authorizer`` is Kafka's ``AclAuthorizer`` (``authorizer.class.name=
kafka.security.authorizer.AclAuthorizer``): at start it loads every ACL from
``/kafka-acl`` and ``/kafka-acl-extended`` into an ``AclCache`` (the pure decision,
``odradek.security.acl``), then watches the two change-notification znodes; each new
notification names one resource pattern, whose znode is re-read and swapped into the
cache. A change made through any broker therefore reaches every broker within one
ZooKeeper round trip (the integration tests check < 1 s). Reads run in a worker thread;
the cache is only touched on the event loop, so a decision never sees half a change.

``CredentialCache`` does the same for SCRAM credentials: ``/config/users/*`` at start,
then a children watch on ``/config/users`` and a data watch per user.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from odradek.security.acl import AclCache, AclOperation, ResourceType
from odradek.security.principal import KafkaPrincipal
from odradek.security.scram import MECHANISMS, ScramCredential
from odradek.zk import security_store as store

logger = logging.getLogger(__name__)

__all__ = ["Authorizer", "CredentialCache", "parse_super_users"]


def parse_super_users(value: str) -> list[str]:
    """``super.users`` is separated by semicolons (a DN may contain commas)."""
    return [p.strip() for p in (value or "").split(";") if p.strip()]


class _ZkFollower:
    """Runs blocking reads in a thread when a watch fires and applies the result on the
    loop; at most one refresh runs at a time and a watch during one schedules another."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._running = False
        self._again = False
        self.refreshes = 0

    def trigger(self) -> None:
        """From any thread (kazoo's watch callbacks)."""
        try:
            self._loop.call_soon_threadsafe(self._start)
        except RuntimeError:
            pass  # loop closed: the broker is stopping

    def _start(self) -> None:
        if self._running:
            self._again = True
            return
        self._running = True
        self._loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                try:
                    apply = await asyncio.to_thread(self.read)
                    apply()
                    self.refreshes += 1
                except Exception:
                    logger.exception("refresh from ZooKeeper failed")
                if not self._again:
                    return
        finally:
            self._running = False

    def read(self) -> Callable[[], None]:  # pragma: no cover - overridden
        raise NotImplementedError


class Authorizer(_ZkFollower):
    def __init__(self, zk: KazooClient, loop: asyncio.AbstractEventLoop, *,
                 super_users: list[str], allow_if_no_acl: bool) -> None:
        super().__init__(loop)
        self.zk = zk
        self.cache = AclCache(super_users, allow_if_no_acl)
        self._positions: dict[str, int] = {}
        self._watches: list[Any] = []

    def start(self) -> None:
        """Blocking (call in a thread): load everything, then watch for changes."""
        store.ensure_paths(self.zk)
        # Positions first: a change made between the two reads is applied twice, never
        # missed.
        self._positions = store.latest_change_sequence(self.zk)
        acls = store.read_all_acls(self.zk)

        def load() -> None:
            for pattern, entries in acls.items():
                self.cache.set_acls(pattern, entries)
        self._loop.call_soon_threadsafe(load)
        for root in store.ACL_CHANGE_ROOTS:
            self._watches.append(ChildrenWatch(self.zk, root, self._on_children))
        logger.info("authorizer: %d ACL bindings loaded", sum(len(v) for v in acls.values()))

    def _on_children(self, _children: list[str]) -> bool:
        self.trigger()
        return True

    def read(self) -> Callable[[], None]:
        updates = []
        for root in store.ACL_CHANGE_ROOTS:
            for seq, pattern in store.changes_after(self.zk, root,
                                                    self._positions.get(root, -1)):
                self._positions[root] = seq
                if pattern is not None:
                    updates.append((pattern, store.read_acls(self.zk, pattern)[0]))

        def apply() -> None:
            for pattern, entries in updates:
                self.cache.set_acls(pattern, entries)
                logger.info("authorizer: ACLs of %s are now %d entries", pattern,
                            len(entries))
        return apply

    def authorize(self, principal: KafkaPrincipal | str, host: str, op: AclOperation,
                  rtype: ResourceType, name: str) -> bool:
        return self.cache.authorize(principal, host, op, rtype, name)


class CredentialCache(_ZkFollower):
    """SCRAM credentials by (mechanism, user), read from ``/config/users``."""

    def __init__(self, zk: KazooClient, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.zk = zk
        self._creds: dict[tuple[str, str], ScramCredential] = {}
        self._watched: set[str] = set()
        self._watches: list[Any] = []

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._creds.get((mechanism, user))

    def start(self) -> None:
        """Blocking: load and watch."""
        store.ensure_paths(self.zk)
        apply = self.read()
        self._loop.call_soon_threadsafe(apply)
        self._watches.append(ChildrenWatch(self.zk, store.USERS_ROOT, self._on_users))

    def _on_users(self, children: list[str]) -> bool:
        for child in children:
            if child not in self._watched:
                self._watched.add(child)
                self._watches.append(DataWatch(self.zk, f"{store.USERS_ROOT}/{child}",
                                               self._on_user))
        self.trigger()
        return True

    def _on_user(self, _data: Any, _stat: Any) -> bool:
        self.trigger()
        return True

    def read(self) -> Callable[[], None]:
        creds: dict[tuple[str, str], ScramCredential] = {}
        for user, config in store.read_all_user_configs(self.zk).items():
            for mech in MECHANISMS:
                if mech in config:
                    try:
                        creds[(mech, user)] = ScramCredential.from_config(config[mech])
                    except ValueError:
                        logger.warning("user %s: unreadable %s credential; ignored", user,
                                       mech)

        def apply() -> None:
            self._creds = creds
        return apply
