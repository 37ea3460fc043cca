"""Batched ISR writes (odradek.replication.alter_partition, Kafka's AlterPartitionManager):
what goes into a batch, one batch in flight, per-partition outcomes -- and, end to end in
the replication harness, that a leader's ISR expansions over many partitions take a few
batched writes, not one write each (issue 13)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from odradek.replication.alter_partition import (
    AlterPartitionManager,
    AlterPartitionQueue,
    outcome_of,
)
from odradek.replication.partition_state import (
    IsrConflict,
    IsrOutcome,
    IsrStoreUnavailable,
    IsrWrite,
    LeaderAndIsr,
)
from support.replication_harness import TOPIC, ReplicationHarness


def w(p: int, isr: tuple[int, ...] = (1, 2, 3), version: int = 0) -> IsrWrite:
    return IsrWrite("t", p, 1, 5, isr, 1, version)


# ------------------------------------------------------------------ the queue (pure)
def test_a_batch_takes_everything_queued() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    for p in range(5):
        q.submit(w(p), f"p{p}")
    batch = q.take()
    assert [(x.partition, payload) for x, payload in batch] == [(p, f"p{p}") for p in range(5)]
    assert q.in_flight and len(q) == 0


def test_one_batch_in_flight_later_writes_wait_for_the_next() -> None:
    q: AlterPartitionQueue[None] = AlterPartitionQueue()
    q.submit(w(0), None)
    first = q.take()
    q.submit(w(1), None)
    q.submit(w(2), None)
    assert q.take() == []  # the first is still in flight
    q.finish()
    assert [x.partition for x, _ in q.take()] == [1, 2]
    q.finish()
    assert q.take() == [] and not q.in_flight
    assert [x.partition for x, _ in first] == [0]


def test_a_newer_decision_replaces_the_queued_one_and_discard_drops_it() -> None:
    q: AlterPartitionQueue[None] = AlterPartitionQueue()
    q.submit(w(0, (1, 2)), None)
    q.submit(w(0, (1, 2, 3)), None)
    q.submit(w(1), None)
    q.discard(("t", 1))
    batch = q.take()
    assert [(x.partition, x.isr) for x, _ in batch] == [(0, (1, 2, 3))]


def test_a_partition_without_an_outcome_counts_as_unreachable() -> None:
    conflict = IsrConflict(LeaderAndIsr(2, 6, (2, 3), (), 4))
    results: dict[tuple[str, int], IsrOutcome] = {("t", 0): 7, ("t", 1): conflict}
    assert outcome_of(w(0), results) == 7
    assert outcome_of(w(1), results) is conflict
    assert isinstance(outcome_of(w(2), results), IsrStoreUnavailable)


# ------------------------------------------------------------------ the manager (asyncio)
class GatedStore:
    """An in-memory store whose batches wait for ``gate`` (so a test can submit while
    one is in flight); partition 13 always conflicts."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()

    def write_isrs(self, writes: Sequence[IsrWrite]) -> dict[tuple[str, int], IsrOutcome]:
        self.gate.wait(10)
        self.batches.append([x.partition for x in writes])
        out: dict[tuple[str, int], IsrOutcome] = {}
        for x in writes:
            out[(x.topic, x.partition)] = (
                IsrConflict(LeaderAndIsr(1, 5, (1,), (), 9))
                if x.partition == 13
                else x.zk_version + 1
            )
        return out


def test_writes_of_one_loop_turn_share_a_batch_and_outcomes_stay_per_partition() -> None:
    async def main() -> None:
        store = GatedStore()
        seen: dict[int, IsrOutcome] = {}
        mgr: AlterPartitionManager[int] = AlterPartitionManager(
            store, lambda x, payload, outcome: seen.__setitem__(payload, outcome)
        )
        for p in range(100):  # one follower fetch over 100 partitions
            mgr.submit(w(p), p)
        await asyncio.sleep(0)  # the batch leaves on the next turn
        for p in range(100, 150):  # proposed while the first batch is in flight
            mgr.submit(w(p), p)
        store.gate.set()
        await asyncio.wait_for(mgr.drain(), 10)
        assert store.batches == [list(range(100)), list(range(100, 150))]
        assert (mgr.batches_sent, mgr.writes_sent) == (2, 150)
        assert isinstance(seen.pop(13), IsrConflict)  # one conflict fails no other
        assert seen == {p: 1 for p in range(150) if p != 13}

    asyncio.run(main())


def test_a_store_failure_makes_every_outcome_unreachable() -> None:
    class Broken:
        def write_isrs(self, writes: Sequence[IsrWrite]) -> dict[tuple[str, int], IsrOutcome]:
            raise RuntimeError("session lost mid-batch")

    async def main() -> None:
        seen: dict[int, IsrOutcome] = {}
        mgr: AlterPartitionManager[int] = AlterPartitionManager(
            Broken(), lambda x, payload, outcome: seen.__setitem__(payload, outcome)
        )
        for p in range(3):
            mgr.submit(w(p), p)
        await asyncio.wait_for(mgr.drain(), 10)
        assert sorted(seen) == [0, 1, 2]
        assert all(isinstance(o, IsrStoreUnavailable) for o in seen.values())

    asyncio.run(main())


# ------------------------------------------------------------------ end to end
def test_isr_expansion_of_many_partitions_is_batched(tmp_path: Path) -> None:
    """A restart in miniature: 60 partitions led by broker 1 with only itself in the ISR
    (its followers were down). Both followers rejoin every ISR -- 120 expansions -- in a
    handful of batched writes, not one store round trip per expansion."""
    n = 60

    async def main() -> None:
        async with ReplicationHarness(tmp_path, partitions=n) as h:
            for p in range(n):
                h.controller.elect(p, leader=1, isr=(1,))
            # The leader applies a write's outcome after the store answered: wait for both
            # the znodes and the leader's own view (checking the second after the first
            # raced under load).
            await h.wait_until(
                lambda: all(
                    h.controller.znodes[p].isr == (1, 2, 3) and h.partition(1, p).isr == (1, 2, 3)
                    for p in range(n)
                ),
                "every ISR full, in ZooKeeper and at the leader",
                timeout_s=20,
            )
            mgr = h.replicas[1].alter_partition
            assert mgr is not None
            expansions = [x for x in h.controller.writes if x.topic == TOPIC]
            assert len(expansions) >= n  # each partition's ISR grew (once or twice)
            assert mgr.batches_sent <= 12, (mgr.batches_sent, mgr.writes_sent)
            assert all(h.partition(1, p).isr == (1, 2, 3) for p in range(n))

    asyncio.run(asyncio.wait_for(main(), 60))


def test_quiesced_fetchers_fetch_nothing_and_start_nothing(tmp_path: Path) -> None:
    """Controlled shutdown asks the controller right after ``quiesce_fetchers``: from then
    on the broker sends no fetch (so its leaders drop it from the ISR and never re-admit
    it) and an image that makes it a follower starts no fetcher."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, lag_ms=300) as h:
            await h.elect(0, leader=1)
            rm3 = h.replicas[3]
            assert rm3.fetchers.fetching((TOPIC, 0))
            rm3.quiesce_fetchers()
            assert not rm3.fetchers.fetching((TOPIC, 0))
            await h.wait_until(
                lambda: h.controller.znodes[0].isr == (1, 2),
                "broker 3 out of the ISR: it fetches no more",
            )
            await h.elect(0, leader=2, isr=(1, 2))  # broker 3 applies it as a follower
            assert h.partition(3).leader_id == 2
            assert not rm3.fetchers.fetching((TOPIC, 0)) and not rm3.fetchers.fetchers.get(2)

    asyncio.run(asyncio.wait_for(main(), 60))
