"""ZkIsrStore against a real ZooKeeper: a leader's ISR write leaves its leader_and_isr
notification in the same transaction (brokers learn partition states only from those,
REQ-R13), and a lost race or a missing znode maps to the replica manager's outcomes."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from odradek.replication.isr_store import ZkIsrStore
from odradek.replication.partition_state import (
    IsrConflict,
    IsrStoreUnavailable,
    IsrWrite,
)
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import KafkaZkClient, StateWrite

TOPIC = "orders"
TID = uuid.UUID(int=7)


def setup_topic(zk: KazooClient) -> KafkaZkClient:
    znodes.ensure_base_paths(zk)
    zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(1))
    zk.create(
        znodes.topic_path(TOPIC),
        znodes.encode_topic(znodes.TopicAssignment(TOPIC, TID, {0: [1, 2, 3]})),
    )
    zkc = KafkaZkClient(zk)
    zkc.create_partition_states(
        [StateWrite(TOPIC, 0, TID, znodes.PartitionState(1, 4, [1, 2, 3], 1), -1)],
        fence=0,
        writer=1,
    )
    return zkc


def isr_write(isr: tuple[int, ...], version: int, partition: int = 0) -> IsrWrite:
    return IsrWrite(
        topic=TOPIC,
        partition=partition,
        leader=1,
        leader_epoch=4,
        isr=isr,
        controller_epoch=1,
        zk_version=version,
    )


def test_isr_write_carries_its_notification(zk_connect: Callable[..., KazooClient]) -> None:
    zkc = setup_topic(zk_connect())
    before, _ = zkc.list_leader_and_isr_notifications()
    store = ZkIsrStore(lambda: zkc, lambda t: TID if t == TOPIC else None, writer=1)
    assert store.write_isr(isr_write((1, 2), 0)) == 1
    names, _ = zkc.list_leader_and_isr_notifications()
    new = [n for _, n in names[len(before) :]]
    assert len(new) == 1
    got = zkc.read_leader_and_isr_notifications(new)
    assert got == [
        [znodes.PartitionStateChange(TOPIC, TID, 0, znodes.PartitionState(1, 4, [1, 2], 1), 1)]
    ]


def test_lost_race_and_missing_znode(zk_connect: Callable[..., KazooClient]) -> None:
    zkc = setup_topic(zk_connect())
    store = ZkIsrStore(lambda: zkc, lambda t: TID, writer=1)
    assert store.write_isr(isr_write((1, 2), 0)) == 1
    with pytest.raises(IsrConflict) as e:
        store.write_isr(isr_write((1,), 0))  # decided from a version that moved on
    assert e.value.current.isr == (1, 2) and e.value.current.zk_version == 1
    with pytest.raises(IsrStoreUnavailable):
        store.write_isr(isr_write((1,), 0, partition=9))
    with pytest.raises(IsrStoreUnavailable):
        ZkIsrStore(lambda: None, lambda t: TID, writer=1).write_isr(isr_write((1,), 1))


def test_a_batch_is_chunked_and_one_conflict_fails_no_other(
    zk_connect: Callable[..., KazooClient],
) -> None:
    """Issue 13: N ISR writes cost O(N / chunk) ZooKeeper requests, each write still
    conditional on its own version (REQ-R13): the one decided from a stale version gets
    its conflict with the znode as it is now, a missing znode is unreachable, and the
    rest commit, each with its notification entry."""
    zk = zk_connect()
    znodes.ensure_base_paths(zk)
    zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(1))
    n = 120
    zk.create(
        znodes.topic_path(TOPIC),
        znodes.encode_topic(znodes.TopicAssignment(TOPIC, TID, {p: [1, 2, 3] for p in range(n)})),
    )
    zkc = KafkaZkClient(zk, max_ops=25)
    zkc.create_partition_states(
        [StateWrite(TOPIC, p, TID, znodes.PartitionState(1, 4, [1], 1), -1) for p in range(n)],
        fence=0,
        writer=1,
    )
    zk.set(
        znodes.partition_state_path(TOPIC, 7),
        znodes.encode_partition_state(znodes.PartitionState(2, 5, [2, 3], 1)),
    )  # the controller moved partition 7 on
    before, _ = zkc.list_leader_and_isr_notifications()
    requests = zkc.stats.requests
    store = ZkIsrStore(lambda: zkc, lambda t: TID, writer=1)
    writes = [isr_write((1, 2, 3), 0, partition=p) for p in range(n)]
    got = store.write_isrs(writes + [isr_write((1, 2), 0, partition=n)])  # no such znode
    conflict = got.pop((TOPIC, 7))
    assert isinstance(conflict, IsrConflict)
    assert (
        conflict.current.leader,
        conflict.current.leader_epoch,
        conflict.current.isr,
        conflict.current.zk_version,
    ) == (2, 5, (2, 3), 1)
    assert isinstance(got.pop((TOPIC, n)), IsrStoreUnavailable)
    assert got == {(TOPIC, p): 1 for p in range(n) if p != 7}
    # 121 writes in chunks of at most 24 (plus the notification): 6 transactions, one
    # rolled back by the conflict and resent, a probe read, the conflict's read, and
    # the missing znode's chunk resent likewise -- a dozen requests, not 121.
    assert zkc.stats.requests - requests <= 14, zkc.stats.requests - requests
    states = zkc.get_partition_states([(TOPIC, p) for p in range(n)])
    assert all(
        states[(TOPIC, p)] == (znodes.PartitionState(1, 4, [1, 2, 3], 1), 1)
        for p in range(n)
        if p != 7
    )
    names, _ = zkc.list_leader_and_isr_notifications()
    notes = zkc.read_leader_and_isr_notifications([nm for _, nm in names[len(before) :]])
    noted = sorted(c.partition for note in notes for c in note)
    assert noted == [p for p in range(n) if p != 7]
