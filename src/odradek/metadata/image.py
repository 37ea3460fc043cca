"""An immutable snapshot of cluster metadata, as read from ZooKeeper (REQ-R12).

Handlers read the current image without locks; the metadata store replaces it as a
whole when ZooKeeper changes, so a request always sees one consistent view.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from odradek.topics import INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # Every advertised listener: (listener name, host, port) (issue 14).
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """This broker's address on ``listener`` (Kafka answers each client with the
        endpoints of the listener it connected to); None if it has no such listener.
        A broker registered without endpoints is reachable at (host, port)."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Assignment plus the state znode (leader, leader_epoch, isr)."""

    index: int
    replicas: tuple[int, ...]
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    controller_epoch: int = -1
    zk_version: int = -1
    # KIP-455: during a reassignment ``replicas`` is the full set (target + original);
    # these are the target's new members and the original's leaving members.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo]
    configs: dict[str, str] = field(default_factory=dict)
    marked_for_deletion: bool = False

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    # False until the first full read from ZooKeeper: before that, a missing topic means
    # "not loaded yet", never "deleted" (so no local log is removed by mistake).
    complete: bool = False
    # Topics that differ from the previous image (None: anything may have changed, e.g.
    # broker membership); lets appliers skip untouched topics.
    changed_topics: frozenset[str] | None = None
    # Dynamic broker configs (KIP-226, ZooKeeper mode): this broker's
    # /config/brokers/<id> and the cluster-wide /config/brokers/<default>.
    broker_overrides: dict[str, str] = field(default_factory=dict)
    default_broker_overrides: dict[str, str] = field(default_factory=dict)
    # Brokers with a pending controlled-shutdown request (/admin/controlled_shutdown/<id>):
    # a leader adds none of them to an ISR (KIP-841's isBrokerShuttingDown), even while
    # no controller is running to undo it.
    shutting_down: frozenset[int] = frozenset()

    def dynamic_broker_config(self, name: str) -> str | None:
        """The dynamic value of a broker config: per-broker over cluster default."""
        value = self.broker_overrides.get(name)
        return value if value is not None else self.default_broker_overrides.get(name)

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        t = self.topics.get(topic)
        return t.partitions.get(index) if t is not None else None

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)
