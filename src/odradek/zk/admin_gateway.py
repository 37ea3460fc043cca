"""The one door from the request handlers to ZooKeeper (Kafka's AdminZkClient + the parts
of KafkaZkClient its KafkaApis uses).

Handlers (``odradek.server.handlers``) never touch kazoo: ``RequestContext.admin`` is an
``AdminGateway`` -- this module's ``ZkAdminGateway`` in a broker, an in-memory fake in
the handlers' unit tests. Every method is blocking (a ZooKeeper round trip or several):
handlers call them with ``asyncio.to_thread``. ``change`` callbacks get a copy of the
current overrides and return the new ones, validating (and raising KafkaError) as they
go; they may run more than once when another writer wins a race.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from kazoo.client import KazooClient

from odradek.errors import ErrorCode, KafkaError
from odradek.security.acl import AccessControlEntry, ResourcePattern
from odradek.zk import admin, quota_store, security_store, znodes
from odradek.zk.admin import NewTopicPlan, TopicPartition
from odradek.zk.cas import ConcurrentUpdateError, change_entity_config
from odradek.zk.kafka_zk_client import KafkaZkClient
from odradek.zk.quota_store import EntityKey

__all__ = ["AdminGateway", "ConfigChange", "ZkAdminGateway"]

ConfigChange = Callable[[dict[str, str]], dict[str, str]]
Reassignment = dict[TopicPartition, list[int] | None]

# A topic's or broker's configs rewritten concurrently this often: the client retries.
_CONFIG_CAS_ATTEMPTS = 10


class AdminGateway(Protocol):
    """What the request handlers may do to the cluster's ZooKeeper state."""

    # ---------------------------------------------------------------- topics
    def create_topic(self, plan: NewTopicPlan) -> None: ...

    def mark_topic_for_deletion(self, topic: str) -> None: ...

    def add_partitions(
        self,
        topic: str,
        new_total: int,
        manual: list[list[int]] | None,
        live_brokers: list[int],
        validate_only: bool,
    ) -> None: ...

    # ---------------------------------------------------------------- entity configs
    def get_topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]: ...

    def alter_topic_config(
        self, topic: str, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]: ...

    def alter_broker_config(
        self, entity: str, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]: ...

    def read_quotas(self) -> dict[EntityKey, dict[str, str]]: ...

    def alter_quota(
        self, entity: EntityKey, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]: ...

    # ---------------------------------------------------------------- security
    def update_acls(
        self,
        pattern: ResourcePattern,
        add: frozenset[AccessControlEntry],
        remove: frozenset[AccessControlEntry],
    ) -> frozenset[AccessControlEntry]: ...

    def read_user_config(self, name: str) -> dict[str, str]: ...

    def read_all_user_configs(self) -> dict[str, dict[str, str]]: ...

    def update_user_config(
        self, name: str, set_keys: dict[str, str], delete_keys: set[str]
    ) -> dict[str, str]: ...

    # ---------------------------------------------------------------- controller requests
    def merge_reassignment(self, entries: Reassignment) -> None: ...

    def reassignment_pending(self, entries: Reassignment) -> bool: ...

    def request_election(
        self, path: str, partitions: list[TopicPartition], deadline: float
    ) -> bool: ...

    def election_pending(self, path: str) -> bool: ...


class ZkAdminGateway:
    """``AdminGateway`` over one kazoo session (the broker's)."""

    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk

    def create_topic(self, plan: NewTopicPlan) -> None:
        admin.create_topic(self._zk, plan)

    def mark_topic_for_deletion(self, topic: str) -> None:
        admin.mark_topic_for_deletion(self._zk, topic)

    def add_partitions(
        self,
        topic: str,
        new_total: int,
        manual: list[list[int]] | None,
        live_brokers: list[int],
        validate_only: bool,
    ) -> None:
        admin.add_partitions(self._zk, topic, new_total, manual, live_brokers, validate_only)

    def get_topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]:
        return KafkaZkClient(self._zk).get_topic_configs(topics)

    def alter_topic_config(
        self, topic: str, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]:
        def checked(current: dict[str, str]) -> dict[str, str]:
            # Checked on every attempt: a topic deleted meanwhile gets no config znode.
            if not self._zk.exists(znodes.topic_path(topic)):
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition, f"Topic '{topic}' does not exist."
                )
            return change(current)

        try:
            return change_entity_config(
                self._zk,
                f"topics/{topic}",
                checked,
                validate_only=validate_only,
                attempts=_CONFIG_CAS_ATTEMPTS,
            )
        except ConcurrentUpdateError:
            raise KafkaError(
                ErrorCode.request_timed_out,
                f"Topic '{topic}': configs changed concurrently "
                f"{_CONFIG_CAS_ATTEMPTS} times; retry",
            ) from None

    def alter_broker_config(
        self, entity: str, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]:
        try:
            return change_entity_config(
                self._zk,
                f"brokers/{entity}",
                change,
                validate_only=validate_only,
                attempts=_CONFIG_CAS_ATTEMPTS,
            )
        except ConcurrentUpdateError:
            raise KafkaError(
                ErrorCode.request_timed_out,
                f"Broker configs {entity} changed concurrently {_CONFIG_CAS_ATTEMPTS} times; retry",
            ) from None

    def read_quotas(self) -> dict[EntityKey, dict[str, str]]:
        return quota_store.read_all(self._zk)

    def alter_quota(
        self, entity: EntityKey, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]:
        return quota_store.alter_entity(self._zk, entity, change, validate_only)

    def update_acls(
        self,
        pattern: ResourcePattern,
        add: frozenset[AccessControlEntry],
        remove: frozenset[AccessControlEntry],
    ) -> frozenset[AccessControlEntry]:
        return security_store.update_acls(self._zk, pattern, add, remove)

    def read_user_config(self, name: str) -> dict[str, str]:
        return security_store.read_user_config(self._zk, name)

    def read_all_user_configs(self) -> dict[str, dict[str, str]]:
        return security_store.read_all_user_configs(self._zk)

    def update_user_config(
        self, name: str, set_keys: dict[str, str], delete_keys: set[str]
    ) -> dict[str, str]:
        return security_store.update_user_config(self._zk, name, set_keys, delete_keys)

    def merge_reassignment(self, entries: Reassignment) -> None:
        admin.merge_reassignment(self._zk, entries)

    def reassignment_pending(self, entries: Reassignment) -> bool:
        return admin.reassignment_pending(self._zk, entries)

    def request_election(
        self, path: str, partitions: list[TopicPartition], deadline: float
    ) -> bool:
        return admin.request_election(self._zk, path, partitions, deadline)

    def election_pending(self, path: str) -> bool:
        return self._zk.exists(path) is not None
