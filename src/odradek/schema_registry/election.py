"""One primary among several registry instances: the one holding the ephemeral znode
``/odradek/schema-registry/<group>/primary`` (its data: the primary's URL; the group
defaults to the topic's name: instances of one registry share a topic). Losing the
ZooKeeper session deletes the znode and the others race to create it. Before a new primary
accepts writes it fences its predecessor's producer and reads ``_schemas`` to the end
(``on_elected``: ``SchemasTopic.become_primary``), so its next id and next version account
for everything its predecessor wrote, and nothing the predecessor writes afterwards (not
having heard yet that it lost its session) is accepted by the brokers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent

from odradek.schema_registry import errors
from odradek.schema_registry.errors import RegistryError
from odradek.zk.acls import ZkAuth
from odradek.zk.client import connect_zk

__all__ = ["PrimaryElection", "primary_path", "find_primary"]

logger = logging.getLogger(__name__)


def primary_path(group: str) -> str:
    return f"/odradek/schema-registry/{group}/primary"


def find_primary(zk_connect: str, group: str, timeout_s: float = 10.0) -> str | None:
    """The URL of the primary registry of ``group`` (None: no registry elected one)."""
    zk = connect_zk(zk_connect, source_ip=None, session_timeout_s=6.0, timeout_s=timeout_s)
    try:
        data, _ = zk.get(primary_path(group))
        return str(data.decode())
    except NoNodeError:
        return None
    finally:
        zk.stop()
        zk.close()


class PrimaryElection:
    def __init__(
        self,
        zk_connect: str,
        my_url: str,
        *,
        group: str = "default",
        on_elected: Callable[[], None] = lambda: None,
        session_timeout_s: float = 6.0,
        auth: ZkAuth | None = None,
    ) -> None:
        self.my_url = my_url
        self.path = primary_path(group)
        self._on_elected = on_elected
        self._lock = threading.Lock()
        self._primary: str | None = None
        self._ready = False  # elected and caught up with the topic
        self._recampaign = False  # set while disconnected: campaign again on reconnection
        self._zk = connect_zk(
            zk_connect,
            source_ip=None,
            session_timeout_s=session_timeout_s,
            auth=auth,
            secure_acls=auth is not None,
        )
        self._zk.add_listener(self._state_changed)
        self._zk.ensure_path(self.path.rsplit("/", 1)[0])
        self._campaign()

    def _state_changed(self, state: str) -> None:
        """kazoo's connection listener (must not block). Disconnected, this instance may
        have lost the role without hearing of it: it stops acting as primary at once. A
        LOST session also lost its ephemeral znode and every watch, so on reconnection it
        campaigns again (a SUSPENDED one too, to become ready again if it still holds the
        znode)."""
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self._lock:
                self._ready = False
                if state == KazooState.LOST:
                    self._primary = None
                self._recampaign = True
        elif state == KazooState.CONNECTED and self._recampaign:
            self._recampaign = False
            self._zk.handler.spawn(self._campaign)

    def _campaign(self, event: WatchedEvent | None = None) -> None:
        try:
            self._try_campaign()
        except KazooException as e:
            # Disconnected meanwhile: the listener campaigns again on reconnection.
            logger.warning("schema registry election interrupted: %r", e)

    def _try_campaign(self) -> None:
        won = False
        try:
            self._zk.create(self.path, self.my_url.encode(), ephemeral=True)
            won = True
        except NodeExistsError:
            pass
        try:
            data, _ = self._zk.get(self.path, watch=self._changed)
        except NoNodeError:
            self._zk.handler.spawn(self._campaign)
            return
        with self._lock:
            self._primary = data.decode()
            if self._primary != self.my_url:
                self._ready = False
        if won or (self._primary == self.my_url and not self._ready):
            logger.info("schema registry %s is the primary", self.my_url)
            try:
                self._on_elected()
            except RegistryError as e:
                # Not caught up with _schemas: never hand out ids from a stale view. Give
                # the role up; the deletion fires the watches and everyone campaigns again.
                logger.error("primary %s cannot read _schemas (%s); resigning", self.my_url, e)
                self._resign()
                return
            with self._lock:
                self._ready = self._primary == self.my_url
        else:
            logger.info("schema registry primary: %s", self._primary)

    def _resign(self) -> None:
        try:
            data, _ = self._zk.get(self.path)
            if data.decode() == self.my_url:
                self._zk.delete(self.path)
        except NoNodeError:
            pass

    def _changed(self, event: WatchedEvent) -> None:
        # Watches fire on kazoo's event thread; campaigning blocks (catch-up), so spawn.
        self._zk.handler.spawn(self._campaign, event)

    def primary_url(self) -> str | None:
        """None when this instance is the (caught-up) primary; else the primary's URL.
        Raises 50003 while this instance holds the role but is still reading _schemas, or
        no primary is known: a write now could reuse an id."""
        with self._lock:
            if self._primary == self.my_url and self._ready:
                return None
            if self._primary is None or self._primary == self.my_url:
                raise errors.RegistryError(
                    503, 50003, "No schema registry primary is ready yet; retry shortly"
                )
            return self._primary

    @property
    def zk(self) -> Any:
        """The session (shared with the registry's credential and ACL caches)."""
        return self._zk

    def info(self) -> dict[str, Any]:
        with self._lock:
            return {"primary": self._primary, "ready": self._ready}

    def close(self) -> None:
        try:
            self._zk.stop()
        finally:
            self._zk.close()
