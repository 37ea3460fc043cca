"""The metadata store against a real ZooKeeper: images follow leader_and_isr notifications
incrementally (issue 13 item 2) — untouched topics and partitions are shared with the
previous image, broker membership rebuilds nothing — and a store that missed purged
notifications re-reads every state.

The store is driven step by step (``_handle`` on the test's thread) so each step's image
is known; watches still fire, into a queue nobody drains.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from odradek.metadata.image import MetadataImage
from odradek.metadata.store import (
    AdminRequestsChanged,
    BrokersChanged,
    LeaderAndIsrNotified,
    MetadataStore,
    PartitionStatesChanged,
    StatesReloaded,
    TopicChanged,
    TopicConfigChanged,
)
from odradek.zk import admin, znodes
from odradek.zk.kafka_zk_client import KafkaZkClient, StateWrite

TOPICS = {"a": 4, "b": 4, "c": 4}


class Harness:
    def __init__(self, connect: Callable[..., KazooClient]) -> None:
        self.connect = connect
        self.zk = connect()
        znodes.ensure_base_paths(self.zk)
        self.zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(1))
        self.writer = KafkaZkClient(self.zk, max_ops=5)
        self.images: list[MetadataImage] = []
        reg = znodes.BrokerRegistration.plaintext(1, "127.0.0.1", 9092)
        self.store = MetadataStore(KafkaZkClient(connect(), max_ops=5), 1, reg, self.images.append)
        znodes.ensure_base_paths(self.store.zk)
        # Registered before any state names broker 1, as a controller writes them: a state
        # naming it written before it registered is a previous incarnation's, which the
        # store holds back until a newer one (MetadataStore._hold).
        self.store.register(5)
        self.ids: dict[str, uuid.UUID | None] = {}
        for t, n in TOPICS.items():
            admin.create_topic(self.zk, admin.NewTopicPlan(t, {p: [1, 2, 3] for p in range(n)}, {}))
            self.ids[t] = znodes.decode_topic(t, self.zk.get(znodes.topic_path(t))[0]).topic_id
            self.writer.create_partition_states(
                [
                    StateWrite(t, p, self.ids[t], znodes.PartitionState(1, 0, [1, 2, 3], 1), -1)
                    for p in range(n)
                ],
                fence=0,
                writer=1,
            )
        self.store._reload_all()
        self.store._emit()

    def step(self, *events: object) -> MetadataImage:
        """Handle events as the store's thread would; the image it published."""
        before = len(self.images)
        self.store._outbox = []
        self.store._handle(list(events))  # type: ignore[arg-type]
        if self.store._has_changes():
            self.store._emit()
        assert len(self.images) == before + 1, "no new image"
        return self.images[-1]

    def move(self, topic: str, partitions: list[int], leader: int, epoch: int) -> None:
        cur = self.writer.get_partition_states([(topic, p) for p in partitions])
        self.writer.update_partition_states(
            [
                StateWrite(
                    topic,
                    p,
                    self.ids[topic],
                    znodes.PartitionState(leader, epoch, [leader], 1),
                    cur[(topic, p)][1],
                )
                for p in partitions
            ],
            fence=0,
            writer=9,
        )


@pytest.fixture
def h(zk_connect: Callable[..., KazooClient]) -> Harness:
    return Harness(zk_connect)


def test_first_image_is_complete(h: Harness) -> None:
    img = h.images[-1]
    assert img.changed_topics is None and set(img.topics) == set(TOPICS)
    assert img.partition("b", 3).leader == 1 and img.partition("b", 3).isr == (1, 2, 3)  # type: ignore[union-attr]
    assert set(img.brokers) == {1}


def test_state_changes_touch_only_their_partitions(h: Harness) -> None:
    old = h.images[-1]
    h.move("b", [1, 2], leader=2, epoch=1)
    img = h.step(LeaderAndIsrNotified())
    assert img.changed_topics == frozenset({"b"})
    assert img.topics["a"] is old.topics["a"] and img.topics["c"] is old.topics["c"]
    b = img.topics["b"].partitions
    assert b[0] is old.topics["b"].partitions[0] and b[3] is old.topics["b"].partitions[3]
    assert (b[1].leader, b[1].leader_epoch, b[1].isr, b[1].zk_version) == (2, 1, (2,), 1)
    assert h.store._outbox and isinstance(h.store._outbox[0], PartitionStatesChanged)
    assert {(c.topic, c.partition) for c in h.store._outbox[0].changes} == {("b", 1), ("b", 2)}


def test_a_batch_of_many_notifications_is_one_image(h: Harness) -> None:
    for t in TOPICS:  # 12 partitions in chunks of 3: 4 notifications per call
        h.move(t, list(range(4)), leader=3, epoch=1)
    img = h.step(LeaderAndIsrNotified())
    assert img.changed_topics == frozenset(TOPICS)
    assert all(p.leader == 3 for t in img.topics.values() for p in t.partitions.values())


def test_broker_membership_rebuilds_no_topic(h: Harness) -> None:
    old = h.images[-1]
    other = h.connect()
    other.create(
        znodes.broker_path(2),
        znodes.encode_broker(znodes.BrokerRegistration.plaintext(2, "127.0.0.2", 9092)),
        ephemeral=True,
    )
    img = h.step(BrokersChanged())
    assert set(img.brokers) == {1, 2}
    assert all(img.topics[t] is old.topics[t] for t in TOPICS)
    assert img.changed_topics == frozenset()  # nobody leads anything on broker 2 yet
    h.move("c", [0], leader=2, epoch=1)
    h.step(LeaderAndIsrNotified())
    other.stop()
    other.close()
    img = h.step(BrokersChanged())
    assert set(img.brokers) == {1}
    assert img.changed_topics == frozenset({"c"})  # its leader's registration went away


def test_config_change_keeps_the_partitions(h: Harness) -> None:
    old = h.images[-1]
    h.zk.set(znodes.topic_config_path("a"), znodes.encode_topic_config({"retention.ms": "1"}))
    img = h.step(TopicConfigChanged("a"))
    assert img.topics["a"].configs == {"retention.ms": "1"}
    assert img.topics["a"].partitions is old.topics["a"].partitions
    assert img.changed_topics == frozenset({"a"})


def test_purged_notifications_make_the_store_reread_every_state(h: Harness) -> None:
    h.move("a", [0, 1, 2, 3], leader=2, epoch=1)
    h.move("c", [3], leader=3, epoch=1)
    names, _ = h.writer.list_leader_and_isr_notifications()
    h.writer.purge_leader_and_isr_notifications(names, fence=0)  # before the store read them
    img = h.step(LeaderAndIsrNotified())
    assert any(isinstance(e, StatesReloaded) for e in h.store._outbox)
    assert [img.partition("a", p).leader for p in range(4)] == [2, 2, 2, 2]  # type: ignore[union-attr]
    assert img.partition("c", 3).leader == 3 and img.partition("c", 2).leader == 1  # type: ignore[union-attr]
    assert img.changed_topics == frozenset({"a", "c"})


def test_a_notification_of_an_older_incarnation_is_ignored(h: Harness) -> None:
    stale = znodes.PartitionStateChange(
        "a", uuid.uuid4(), 0, znodes.PartitionState(3, 7, [3], 1), 99
    )
    h.zk.create(
        znodes.LEADER_AND_ISR_PREFIX, znodes.encode_leader_and_isr([stale], 9), sequence=True
    )
    h.move("b", [0], leader=2, epoch=1)  # something real in the same batch
    img = h.step(LeaderAndIsrNotified())
    assert img.partition("a", 0).leader == 1 and img.partition("b", 0).leader == 2  # type: ignore[union-attr]


def test_a_controlled_shutdown_request_is_in_the_image_until_answered(h: Harness) -> None:
    """KIP-841: a leader must not re-admit a broker that is shutting down. The leader's
    only source is its image, so a pending /admin/controlled_shutdown/<id> must be in it
    (and gone once the controller deletes the request)."""
    assert h.images[-1].shutting_down == frozenset()
    h.zk.create(f"{znodes.CONTROLLED_SHUTDOWN_PATH}/2", b'{"version":1,"broker":2}', makepath=True)
    img = h.step(AdminRequestsChanged())
    assert img.shutting_down == frozenset({2})
    h.zk.delete(f"{znodes.CONTROLLED_SHUTDOWN_PATH}/2")
    img = h.step(AdminRequestsChanged())
    assert img.shutting_down == frozenset()


def test_a_partition_assigned_here_again_gets_its_state_read_after_its_assignment(
    h: Harness,
) -> None:
    """The controller writes a state before the assignment that follows from it, but the
    store may read the assignment first (its watch event was queued ahead, or after a
    reconnect ZooKeeper fired data watches before child watches). A replica moved off
    broker 1 and straight back was re-created from the state it had led: leader 1 at
    epoch 0 with an empty log (odradek sim seed 404: its HW went 307 -> 0)."""

    def assign(replicas: list[int]) -> None:
        t = znodes.TopicAssignment("a", h.ids["a"], {p: [1, 2, 3] for p in range(4)})
        t.partitions[0] = replicas
        h.zk.set(znodes.topic_path("a"), znodes.encode_topic(t))

    h.move("a", [0], leader=2, epoch=1)  # leadership leaves broker 1 ...
    assign([2, 3])  # ... then broker 1 leaves the replicas
    img = h.step(TopicChanged("a"))  # the notification is not read yet
    assert img.partition("a", 0).replicas == (2, 3)  # type: ignore[union-attr]
    assign([1, 2, 3])  # moved back
    img = h.step(TopicChanged("a"))
    p0 = img.partition("a", 0)
    assert p0 is not None and p0.replicas == (1, 2, 3)
    assert (p0.leader, p0.leader_epoch) == (2, 1)
    # The notification, read later, changes nothing: its version is not newer.
    h.store._handle([LeaderAndIsrNotified()])
    assert not h.store._has_changes()
    # A partition that stays assigned here is not read again (no cost per assignment).
    assert h.store._topics["a"].states[1][1] == 0
