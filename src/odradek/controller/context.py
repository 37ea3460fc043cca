"""What the controller knows of the cluster (Kafka's ``ControllerContext``).

A cache of ZooKeeper: read in full when this broker becomes controller (REQ-R13: a new
controller starts from what ZooKeeper holds, which finishes or redoes whatever batch its
predecessor left half done), then kept current by the controller's own writes, by the
``leader_and_isr`` notifications of leaders' ISR changes, and by re-reading what the
ZooKeeper watches say changed. Decisions are made from it without reading ZooKeeper;
every write stays conditional on the znode version recorded here, so a stale entry
costs one failed write and a re-read, never a lost update (REQ-R13-R14).

No I/O here: the controller fills it through ``KafkaZkClient``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from odradek.config import topic_override
from odradek.zk import znodes

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
StateAndVersion = tuple[znodes.PartitionState, int]


@dataclass(slots=True)
class ControllerContext:
    live_brokers: set[int] = field(default_factory=set)
    # Brokers in a controlled shutdown, kept until their registration vanishes so that no
    # later decision elects them again (Kafka's shuttingDownBrokerIds).
    shutting_down: set[int] = field(default_factory=set)
    assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID | None] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[TopicPartition, StateAndVersion] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    # Each live broker's epoch (its registration's czxid, KIP-380): a change means it
    # re-registered -- it bounced -- since we last looked.
    broker_epochs: dict[int, int] = field(default_factory=dict)
    # Partitions naming (as leader or ISR member) brokers that re-registered since: the
    # next full pass treats those brokers as failed there first (Kafka's bounced brokers:
    # onBrokerFailure, then onBrokerStartup).
    stale: dict[TopicPartition, set[int]] = field(default_factory=dict)
    # KIP-455: the topic znodes' adding/removing replicas of partitions being moved.
    adding: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    removing: dict[str, dict[int, list[int]]] = field(default_factory=dict)

    @property
    def eligible(self) -> set[int]:
        """Brokers that may lead: registered and not shutting down."""
        return self.live_brokers - self.shutting_down

    def replicas(self, tp: TopicPartition) -> list[int] | None:
        parts = self.assignments.get(tp[0])
        return parts.get(tp[1]) if parts is not None else None

    def partitions(self) -> Iterator[tuple[TopicPartition, list[int]]]:
        """Every partition of every topic not being deleted, in (topic, partition) order."""
        for topic in sorted(self.assignments):
            if topic in self.deleting:
                continue
            for p, replicas in sorted(self.assignments[topic].items()):
                yield (topic, p), replicas

    def unclean_enabled(self, topic: str, default: bool) -> bool:
        """Topic override of ``unclean.leader.election.enable``, else the broker's (R10)."""
        value = topic_override(self.configs.get(topic, {}), "unclean.leader.election.enable")
        return default if value is None else bool(value)

    def set_topic(self, assignment: znodes.TopicAssignment) -> None:
        self.assignments[assignment.topic] = assignment.partitions
        self.topic_ids[assignment.topic] = assignment.topic_id
        for moving, given in (
            (self.adding, assignment.adding_replicas),
            (self.removing, assignment.removing_replicas),
        ):
            if given:
                moving[assignment.topic] = given
            else:
                moving.pop(assignment.topic, None)

    def moving(self) -> set[TopicPartition]:
        """Partitions with a reassignment in progress."""
        return {
            (t, p) for m in (self.adding, self.removing) for t, parts in m.items() for p in parts
        }

    def remove_topic(self, topic: str) -> None:
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.adding.pop(topic, None)
        self.removing.pop(topic, None)
        self.configs.pop(topic, None)
        for tp in [tp for tp in self.states if tp[0] == topic]:
            del self.states[tp]

    def put_states(
        self, states: dict[TopicPartition, StateAndVersion], absent: Iterable[TopicPartition] = ()
    ) -> None:
        """Fresh reads from ZooKeeper: they win over what we held; ``absent`` are
        partitions read and found without a state znode."""
        self.states.update(states)
        for tp in absent:
            if tp not in states:
                self.states.pop(tp, None)

    def apply_changes(self, changes: Iterable[znodes.PartitionStateChange]) -> int:
        """Notifications (ours or a leader's ISR change): newer znode versions win; an
        entry of another incarnation of the topic (deleted and re-created under the same
        name, so versions restarted) is ignored. Returns how many entries were newer."""
        applied = 0
        for ch in changes:
            tid = self.topic_ids.get(ch.topic)
            if ch.topic not in self.assignments or (
                tid is not None and ch.topic_id is not None and tid != ch.topic_id
            ):
                continue
            tp = (ch.topic, ch.partition)
            cur = self.states.get(tp)
            if cur is None or ch.zk_version > cur[1]:
                self.states[tp] = (ch.state, ch.zk_version)
                applied += 1
        return applied
