"""KafkaZkClient against a real ZooKeeper: multiRead, chunked fenced transactions,
per-partition conflicts, leader_and_isr notifications and their purge (issue 13)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from odradek.zk import znodes
from odradek.zk.kafka_zk_client import (
    ControllerMovedError,
    KafkaZkClient,
    StateWrite,
)
from odradek.zk.multi_read import GET_CHILDREN, GET_DATA

TOPIC = "orders"
TID = uuid.UUID(int=42)


def state(
    leader: int, epoch: int = 0, isr: list[int] | None = None, cepoch: int = 1
) -> znodes.PartitionState:
    return znodes.PartitionState(leader, epoch, isr if isr is not None else [leader], cepoch)


def setup_topic(zk: KazooClient, n: int, chunk: int = 50) -> KafkaZkClient:
    znodes.ensure_base_paths(zk)
    zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(1))
    zk.create(
        znodes.topic_path(TOPIC),
        znodes.encode_topic(znodes.TopicAssignment(TOPIC, TID, {p: [1, 2, 3] for p in range(n)})),
    )
    zkc = KafkaZkClient(zk, max_ops=chunk)
    res = zkc.create_partition_states(
        [StateWrite(TOPIC, p, TID, state(1, isr=[1, 2, 3]), -1) for p in range(n)],
        fence=0,
        writer=1,
    )
    assert sorted(res.versions) == [(TOPIC, p) for p in range(n)] and not res.conflicts
    return zkc


def notifications(zkc: KafkaZkClient) -> list[list[znodes.PartitionStateChange]]:
    names, _ = zkc.list_leader_and_isr_notifications()
    got = zkc.read_leader_and_isr_notifications([n for _, n in names])
    assert got is not None
    return got


def test_multi_read_slots_in_order_across_chunks(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    for i in range(7):
        zk.create(f"/n/{i}", f"v{i}".encode(), makepath=True)
    zkc = KafkaZkClient(zk, max_ops=3)
    ops = [(GET_DATA, f"/n/{i}") for i in range(7)] + [
        (GET_DATA, "/n/missing"),
        (GET_CHILDREN, "/n"),
    ]
    got = zkc.read(ops)
    assert [g[0] for g in got[:7]] == [f"v{i}".encode() for i in range(7)]
    assert isinstance(got[7], NoNodeError)
    assert sorted(got[8]) == [str(i) for i in range(7)]
    assert zkc.stats.requests == 3 and zkc.stats.round_trips == 1  # 9 ops / 3, pipelined


def test_created_states_and_their_notifications(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    zkc = setup_topic(zk, 120, chunk=50)
    st = zkc.get_partition_states([(TOPIC, p) for p in range(120)])
    assert st[(TOPIC, 7)] == (state(1, isr=[1, 2, 3]), 0)
    assert znodes.decode_partition_state(zk.get(znodes.partition_state_path(TOPIC, 0))[0]) == state(
        1, isr=[1, 2, 3]
    )
    notes = notifications(zkc)
    # One notification per transaction (48 states each with the fence check and itself).
    assert [len(n) for n in notes] == [48, 48, 24]
    flat = [ch for n in notes for ch in n]
    assert {(ch.topic, ch.partition) for ch in flat} == {(TOPIC, p) for p in range(120)}
    assert all(ch.topic_id == TID and ch.zk_version == 0 for ch in flat)


def test_update_is_chunked_and_fenced(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    n, chunk = 300, 25
    zkc = setup_topic(zk, n, chunk=chunk)
    before = zkc.stats.requests
    writes = [StateWrite(TOPIC, p, TID, state(2, 1, [2, 3]), 0) for p in range(n)]
    res = zkc.update_partition_states(writes, fence=0, writer=1)
    assert res.versions == {(TOPIC, p): 1 for p in range(n)}
    # O(N / chunk), not O(N): each transaction carries chunk - 2 partitions.
    assert zkc.stats.requests - before == math.ceil(n / (chunk - 2))
    last = notifications(zkc)[-1]
    assert last[-1].state == state(2, 1, [2, 3]) and last[-1].zk_version == 1

    # A deposed controller (the epoch znode moved on) writes nothing at all.
    zk.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(2))
    stale = [StateWrite(TOPIC, p, TID, state(3, 2, [3]), 1) for p in range(n)]
    with pytest.raises(ControllerMovedError):
        zkc.update_partition_states(stale, fence=0, writer=1)
    assert all(
        s == (state(2, 1, [2, 3]), 1)
        for s in zkc.get_partition_states([(TOPIC, p) for p in range(n)]).values()
    )


def test_a_conflict_rolls_back_only_its_chunk_and_is_reported(
    zk_connect: Callable[..., KazooClient],
) -> None:
    zk = zk_connect()
    zkc = setup_topic(zk, 40, chunk=12)
    # A leader changed partition 15's ISR meanwhile (version 0 -> 1); 33's topic vanished.
    zkc.update_isr(StateWrite(TOPIC, 15, TID, state(1, 0, [1, 2]), 0), writer=1)
    zk.delete(znodes.partition_state_path(TOPIC, 33))
    writes = [StateWrite(TOPIC, p, TID, state(2, 1, [2]), 0) for p in range(40)]
    res = zkc.update_partition_states(writes, fence=0, writer=1)
    assert res.conflicts == {(TOPIC, 15)} and res.missing == {(TOPIC, 33)}
    assert set(res.versions) == {(TOPIC, p) for p in range(40)} - {(TOPIC, 15), (TOPIC, 33)}
    assert zkc.get_partition_states([(TOPIC, 15)])[(TOPIC, 15)] == (state(1, 0, [1, 2]), 1)
    # Every written partition is in exactly one notification, 15 only in its ISR one.
    written = [
        (ch.partition, ch.zk_version)
        for n in notifications(zkc)
        for ch in n
        if ch.state.leader == 2
    ]
    assert sorted(written) == sorted((p, 1) for p in range(40) if p not in (15, 33))


def test_update_isr_conflict(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    zkc = setup_topic(zk, 1)
    assert zkc.update_isr(StateWrite(TOPIC, 0, TID, state(1, 0, [1, 2]), 0), writer=1) == 1
    with pytest.raises(BadVersionError):
        zkc.update_isr(StateWrite(TOPIC, 0, TID, state(1, 0, [1]), 0), writer=1)
    with pytest.raises(NoNodeError):
        zkc.update_isr(StateWrite(TOPIC, 9, TID, state(1, 0, [1]), 0), writer=1)


def test_purge_sets_the_mark_and_deletes(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    zkc = setup_topic(zk, 30, chunk=12)
    names, purged = zkc.list_leader_and_isr_notifications()
    assert purged == -1 and len(names) == 3
    assert zkc.list_leader_and_isr_notifications(after=names[0][0])[0] == names[1:]
    assert znodes.leader_and_isr_name(names[1][0]) == names[1][1]
    zkc.purge_leader_and_isr_notifications(names[:2], fence=0)
    after, purged = zkc.list_leader_and_isr_notifications()
    assert after == names[2:] and purged == names[1][0]
    # A reader holding names it had listed before the purge sees them gone.
    assert zkc.read_leader_and_isr_notifications([n for _, n in names]) is None


def test_delete_recursive(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    zkc = setup_topic(zk, 30, chunk=10)
    zk.create(znodes.topic_config_path(TOPIC), znodes.encode_topic_config({}), makepath=True)
    zkc.delete_recursive(
        [znodes.topic_path(TOPIC), znodes.topic_config_path(TOPIC), "/not/there"], fence=0
    )
    assert zk.exists(znodes.topic_path(TOPIC)) is None
    assert zk.exists(znodes.topic_config_path(TOPIC)) is None


def test_many_conflicts_cost_two_rounds_not_one_per_conflict(
    zk_connect: Callable[..., KazooClient],
) -> None:
    """ZooKeeper names only the first failing operation of a transaction: the client
    reads the rest of the rolled-back chunk's znodes instead of finding the stale ones
    one rollback at a time (leaders changing ISRs during a controller batch)."""
    zk = zk_connect()
    zkc = setup_topic(zk, 100, chunk=52)  # 50 partitions per transaction
    other = KafkaZkClient(zk)
    stale = set(range(0, 100, 3))
    for p in stale:
        other.update_isr(StateWrite(TOPIC, p, TID, state(1, 0, [1, 2]), 0), writer=1)
    before = zkc.stats.requests
    res = zkc.update_partition_states(
        [StateWrite(TOPIC, p, TID, state(2, 1, [2]), 0) for p in range(100)], fence=0, writer=1
    )
    assert res.conflicts == {(TOPIC, p) for p in stale}
    assert set(res.versions) == {(TOPIC, p) for p in range(100) if p not in stale}
    # Two transactions rolled back, their znodes read (two multiReads), two commits.
    assert zkc.stats.requests - before <= 2 + 2 + 2


def test_controller_registration_and_epoch_are_one_transaction(
    zk_connect: Callable[..., KazooClient],
) -> None:
    a, b = KafkaZkClient(zk_connect()), KafkaZkClient(zk_connect())
    assert a.register_controller(1) == (1, 1)  # epoch znode created at 0, then bumped
    assert b.register_controller(2) is None  # /controller held: the epoch is untouched
    data, stat = a.zk.get(znodes.CONTROLLER_EPOCH)
    assert (znodes.decode_controller_epoch(data), stat.version) == (1, 1)
    a.zk.stop()  # the controller's session ends: its ephemeral /controller goes with it
    a.zk.close()
    assert b.register_controller(2) == (2, 2)
    assert znodes.decode_controller(b.zk.get(znodes.CONTROLLER)[0]).broker_id == 2
