"""Keeps the broker's ``QuotaManager`` in step with the quota configs in ZooKeeper.

Kafka's ``ZkConfigManager`` for the ``users`` and ``clients`` entity types: at start every
quota entity is read; then the broker watches ``/config/changes`` and, for each new
notification naming a user, client-id or (user, client-id) entity, re-reads that one
znode and swaps its quotas in. A change made through any broker (or by another tool that
writes Kafka's layout) therefore applies on every broker without a restart. Reads run in
a worker thread; the manager is only touched on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch

from odradek.server.authorizer import _ZkFollower
from odradek.server.client_quotas import QuotaManager
from odradek.zk import quota_store, znodes

logger = logging.getLogger(__name__)

__all__ = ["QuotaFollower"]


class QuotaFollower(_ZkFollower):
    def __init__(
        self, zk: KazooClient, loop: asyncio.AbstractEventLoop, quotas: QuotaManager
    ) -> None:
        super().__init__(loop)
        self.zk = zk
        self.quotas = quotas
        self._position = -1
        self._watches: list[Any] = []

    def start(self) -> None:
        """Blocking (call in a thread): load every entity, then follow notifications."""
        self.zk.ensure_path(znodes.CONFIG_CHANGES)
        # Position first: a change made between the two reads is applied twice, never
        # missed.
        self._position = quota_store.latest_change_sequence(self.zk)
        configs = quota_store.read_all(self.zk)
        self._loop.call_soon_threadsafe(self.quotas.replace_all, configs)
        self._watches.append(ChildrenWatch(self.zk, znodes.CONFIG_CHANGES, self._on_children))

    def _on_children(self, _children: list[str]) -> bool:
        self.trigger()
        return True

    def read(self) -> Callable[[], None]:
        updates = []
        seen = set()
        for seq, path in quota_store.changes_after(self.zk, self._position):
            self._position = seq
            entity = quota_store.parse_entity_path(path) if path else None
            if entity is None or entity in seen:
                continue
            seen.add(entity)
            updates.append((entity, quota_store.read_entity(self.zk, entity)))

        def apply() -> None:
            for entity, config in updates:
                self.quotas.set_entity(entity, config)

        return apply
