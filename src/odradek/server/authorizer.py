"""The broker's authorizer and SCRAM credential cache, kept in step with ZooKeeper.

``Authorizer`` is Kafka's ``AclAuthorizer`` (``authorizer.class.name=
kafka.security.authorizer.AclAuthorizer``): at start it loads every ACL from
``/kafka-acl`` and ``/kafka-acl-extended`` into an ``AclCache`` (the pure decision,
``odradek.security.acl``), then watches the two change-notification znodes; each new
notification names one resource pattern, whose znode is re-read and swapped into the
cache. A change made through any broker therefore reaches every broker within one
ZooKeeper round trip (the integration tests check < 1 s). Reads run in a worker thread;
the cache is only touched on the event loop, so a decision never sees half a change.

A change is consumed only once it is applied: the positions move on the loop with the
batch they were read with. A failed read (a ZooKeeper connection loss, an unreadable
znode) loses nothing: the follower retries with a growing delay, and the retry reloads
every ACL, since what changed meanwhile is unknown (otherwise a DeleteAcls or a new DENY
would never reach this broker until it restarts: fail-open). A new ZooKeeper session
reloads everything as well (notifications are purged after 15 minutes).

The broker that answers CreateAcls / DeleteAcls also puts what it wrote into its own cache
at once (``written``), as Kafka's authorizer updates its cache as it writes: a
DescribeAcls sent to it right after sees the change without waiting for the notification
to come back. The written resource is then re-read once, so that a concurrent write by
another broker that landed in between cannot be shadowed by this older value.

``CredentialCache`` does the same for SCRAM credentials: ``/config/users/*`` at start,
then a children watch on ``/config/users`` and a data watch per user.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from odradek.security.acl import (
    KAFKA_RESOURCE_TYPES,
    AccessControlEntry,
    AclCache,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
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
    loop; at most one refresh runs at a time and a watch during one schedules another.
    A failed refresh calls ``failed`` and is retried after a growing delay, whether or
    not another watch fires."""

    RETRY_FIRST_S = 0.2
    RETRY_MAX_S = 10.0

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._running = False
        self._again = False
        self._retry_s = self.RETRY_FIRST_S
        self._retry: asyncio.TimerHandle | None = None
        self.refreshes = 0
        self.failures = 0

    def trigger(self) -> None:
        """From any thread (kazoo's watch callbacks)."""
        try:
            self._loop.call_soon_threadsafe(self._start)
        except RuntimeError:
            pass  # loop closed: the broker is stopping

    def _start(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._running:
            self._again = True
            return
        self._running = True
        self._loop.create_task(self._run())

    async def _run(self) -> None:
        failed = False
        try:
            while True:
                self._again = False
                try:
                    apply = await asyncio.to_thread(self.read)
                    apply()
                    self.refreshes += 1
                    self._retry_s = self.RETRY_FIRST_S
                    failed = False
                except Exception:
                    self.failures += 1
                    failed = True
                    self.failed()
                    logger.exception(
                        "refresh from ZooKeeper failed; retrying in %.1f s", self._retry_s
                    )
                if not self._again:
                    return
        finally:
            self._running = False
            if failed and self._retry is None and not self._loop.is_closed():
                self._retry = self._loop.call_later(self._retry_s, self._start)
                self._retry_s = min(self._retry_s * 2, self.RETRY_MAX_S)

    def read(self) -> Callable[[], None]:  # pragma: no cover - overridden
        raise NotImplementedError

    def failed(self) -> None:
        """On the loop, after a failed read or apply (the next read must recover)."""


class Authorizer(_ZkFollower):
    def __init__(
        self,
        zk: KazooClient,
        loop: asyncio.AbstractEventLoop,
        *,
        super_users: list[str],
        allow_if_no_acl: bool,
        resource_types: frozenset[ResourceType] = KAFKA_RESOURCE_TYPES,
    ) -> None:
        """``resource_types``: the ACLs this authorizer holds (a broker: Kafka's own;
        the schema registry: its subjects and registry), the others in the store are
        skipped, so a broker's DescribeAcls never returns a registry ACL."""
        super().__init__(loop)
        self.zk = zk
        self.resource_types = resource_types
        self.cache = AclCache(super_users, allow_if_no_acl)
        # Changes applied so far, per change root; moved only on the loop, by the apply
        # of the batch that was read with them.
        self._positions: dict[str, int] = {}
        self._reload_all = False
        self.reloads = 0
        # Resources this broker wrote (``written``), to re-read once.
        self._reread: set[ResourcePattern] = set()
        self._reread_lock = threading.Lock()
        self._session_lost = False
        self._watches: list[Any] = []

    def start(self) -> None:
        """Blocking (call in a thread): load everything, then watch for changes."""
        store.ensure_paths(self.zk)
        apply = self._read_everything()
        self._loop.call_soon_threadsafe(apply)
        self.zk.add_listener(self._on_state)
        for root in store.ACL_CHANGE_ROOTS:
            self._watches.append(ChildrenWatch(self.zk, root, self._on_children))

    def _on_state(self, state: str) -> None:
        """kazoo's thread. After a lost session, reload everything: notifications older
        than 15 minutes are purged by whichever broker writes next, so a long outage
        can take the only trace of a change with it."""
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            try:
                self._loop.call_soon_threadsafe(self._reload_now)
            except RuntimeError:
                pass  # loop closed: the broker is stopping

    def _reload_now(self) -> None:
        self._reload_all = True
        self._start()

    def _on_children(self, _children: list[str]) -> bool:
        self.trigger()
        return True

    def written(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        """On the loop: this broker has just written ``entries`` as the ACLs of
        ``pattern`` (None of them: deleted). Visible to the next request at once."""
        self.cache.set_acls(pattern, entries)
        self.reread(pattern)

    def reread(self, pattern: ResourcePattern) -> None:
        """Read ``pattern`` from ZooKeeper again (after a write of this broker, or after a
        write whose outcome is unknown)."""
        with self._reread_lock:
            self._reread.add(pattern)
        self.trigger()

    def failed(self) -> None:
        self._reload_all = True

    def read(self) -> Callable[[], None]:
        if self._reload_all:
            return self._read_everything()
        with self._reread_lock:
            patterns, self._reread = self._reread, set()
        try:
            positions = dict(self._positions)
            for root in store.ACL_CHANGE_ROOTS:
                for seq, pattern in store.changes_after(self.zk, root, positions.get(root, -1)):
                    positions[root] = seq
                    if pattern is not None and pattern.resource_type in self.resource_types:
                        patterns.add(pattern)
            updates = [(p, store.read_acls(self.zk, p)[0]) for p in patterns]
        except BaseException:
            with self._reread_lock:  # the reload after the failure covers them anyway
                self._reread |= patterns
            raise

        def apply() -> None:
            for pattern, entries in updates:
                self.cache.set_acls(pattern, entries)
                logger.info("authorizer: ACLs of %s are now %d entries", pattern, len(entries))
            self._positions = positions

        return apply

    def _read_everything(self) -> Callable[[], None]:
        # Positions first: a change made between the two reads is applied twice, never
        # missed.
        positions = store.latest_change_sequence(self.zk)
        acls = store.read_all_acls(self.zk, self.resource_types)

        def apply() -> None:
            self.cache.replace_all(acls)
            self._positions = positions
            if self._reload_all:
                self.reloads += 1
                logger.warning(
                    "authorizer: all ACLs reloaded (after a failed refresh or a "
                    "lost session): %d bindings",
                    len(self.cache),
                )
            else:
                logger.info("authorizer: %d ACL bindings loaded", len(self.cache))
            self._reload_all = False

        return apply

    def authorize(
        self,
        principal: KafkaPrincipal | str,
        host: str,
        op: AclOperation,
        rtype: ResourceType,
        name: str,
    ) -> bool:
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
                self._watches.append(
                    DataWatch(self.zk, f"{store.USERS_ROOT}/{child}", self._on_user)
                )
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
                        logger.warning("user %s: unreadable %s credential; ignored", user, mech)

        def apply() -> None:
            self._creds = creds

        return apply
