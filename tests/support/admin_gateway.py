"""An in-memory ``AdminGateway`` (odradek.zk.admin_gateway) for the handlers' unit tests.

It keeps what ZooKeeper would keep -- existing topics, the ``/config/<entity>`` overrides,
the change notifications written, ACLs, the controller requests -- with the semantics of
``ZkAdminGateway`` that the handlers rely on: a config change is a function of the
current overrides and is re-applied after a lost race, a topic's configs can only be
changed while it exists, ``validate_only`` writes nothing, a notification follows each
write. ``race`` lets a test play the other writer: called once with the entity path
between the read and the write of the next config change, as a concurrent AlterConfigs
on another broker would land.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from odradek.errors import ErrorCode, KafkaError
from odradek.security.acl import AccessControlEntry, ResourcePattern

ConfigChange = Callable[[dict[str, str]], dict[str, str]]
EntityKey = tuple[str | None, str | None]


class FakeAdminGateway:
    def __init__(self, topics: Sequence[str] = ()) -> None:
        self.topics: set[str] = set(topics)
        self.deleting: set[str] = set()
        self.configs: dict[str, dict[str, str]] = {}  # entity path ("topics/T") -> overrides
        self.notifications: list[str] = []  # entity paths, in write order
        self.acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self.reassignments: dict[tuple[str, int], list[int] | None] = {}
        self.elections: dict[str, list[tuple[str, int]]] = {}
        self.race: Callable[[str], None] | None = None
        self.attempts = 0  # config change attempts, lost races included

    # ---------------------------------------------------------------- topics
    def create_topic(self, plan: Any) -> None:
        if plan.name in self.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{plan.name}' already exists.")
        self.topics.add(plan.name)
        self.configs[f"topics/{plan.name}"] = dict(plan.configs)

    def mark_topic_for_deletion(self, topic: str) -> None:
        if topic not in self.topics:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        self.deleting.add(topic)

    def add_partitions(
        self,
        topic: str,
        new_total: int,
        manual: list[list[int]] | None,
        live_brokers: list[int],
        validate_only: bool,
    ) -> None:
        raise NotImplementedError("no handler test needs it yet")

    # ---------------------------------------------------------------- entity configs
    def _change(self, entity: str, change: ConfigChange, validate_only: bool) -> dict[str, str]:
        while True:
            self.attempts += 1
            version = self.configs.get(entity)
            new = dict(change(dict(version or {})))
            if validate_only:
                return new
            if self.race is not None:
                race, self.race = self.race, None
                race(entity)
            if self.configs.get(entity) is not version:
                continue  # the other writer won: re-read, re-apply
            self.configs[entity] = new
            self.notifications.append(entity)
            return new

    def get_topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]:
        return {t: dict(self.configs.get(f"topics/{t}", {})) for t in topics if t in self.topics}

    def alter_topic_config(
        self, topic: str, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]:
        def checked(current: dict[str, str]) -> dict[str, str]:
            if topic not in self.topics:
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition, f"Topic '{topic}' does not exist."
                )
            return change(current)

        return self._change(f"topics/{topic}", checked, validate_only)

    def alter_broker_config(
        self, entity: str, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]:
        return self._change(f"brokers/{entity}", change, validate_only)

    def read_quotas(self) -> dict[EntityKey, dict[str, str]]:
        raise NotImplementedError("no handler test needs it yet")

    def alter_quota(
        self, entity: EntityKey, change: ConfigChange, validate_only: bool
    ) -> dict[str, str]:
        raise NotImplementedError("no handler test needs it yet")

    # ---------------------------------------------------------------- security
    def update_acls(
        self,
        pattern: ResourcePattern,
        add: frozenset[AccessControlEntry],
        remove: frozenset[AccessControlEntry],
    ) -> frozenset[AccessControlEntry]:
        new = (self.acls.get(pattern, frozenset()) | add) - remove
        if new:
            self.acls[pattern] = new
        else:
            self.acls.pop(pattern, None)
        return new

    def read_user_config(self, name: str) -> dict[str, str]:
        return dict(self.configs.get(f"users/{name}", {}))

    def read_all_user_configs(self) -> dict[str, dict[str, str]]:
        return {
            k.split("/", 1)[1]: dict(v)
            for k, v in self.configs.items()
            if k.startswith("users/") and "/clients/" not in k
        }

    def update_user_config(
        self, name: str, set_keys: dict[str, str], delete_keys: set[str]
    ) -> dict[str, str]:
        def change(current: dict[str, str]) -> dict[str, str]:
            return {**{k: v for k, v in current.items() if k not in delete_keys}, **set_keys}

        return self._change(f"users/{name}", change, False)

    # ---------------------------------------------------------------- controller requests
    def merge_reassignment(self, entries: dict[tuple[str, int], list[int] | None]) -> None:
        self.reassignments.update(entries)

    def reassignment_pending(self, entries: dict[tuple[str, int], list[int] | None]) -> bool:
        return any(self.reassignments.get(tp, ...) == t for tp, t in entries.items())

    def request_election(
        self, path: str, partitions: list[tuple[str, int]], deadline: float
    ) -> bool:
        if path in self.elections:
            return False
        self.elections[path] = list(partitions)
        return True

    def election_pending(self, path: str) -> bool:
        return path in self.elections
