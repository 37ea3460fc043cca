"""Batched ISR writes (Kafka's ``AlterPartitionManager``, KIP-497): a leader's ISR
changes are queued and written together, one batch in flight at a time.

Why: at a restart every leader's followers rejoin the ISR within the same few fetches,
and one ZooKeeper transaction (plus a worker-thread hop) per partition made the ISRs of
3,000 partitions take 15-20 s to fill (issue 13). Kafka's leaders send their pending ISR
changes in one AlterPartition request, and a change proposed while one is in flight waits
for the next; here the batch goes to ``IsrStore.write_isrs``, which writes it as chunked
ZooKeeper multi transactions (``KafkaZkClient.update_partition_states``).

What does not change (REQ-R6, REQ-R13, REQ-P4, REQ-P6): each write stays conditional on
the znode version its leader decided from, and its outcome is per partition -- a conflict
or an unreachable ZooKeeper for one partition is handed to that partition alone, which
adopts the controller's ISR or fences itself exactly as it did for a single write.

Two layers, as elsewhere: ``AlterPartitionQueue`` decides what goes into the next batch
(pure, unit-tested), ``AlterPartitionManager`` runs the batch in a worker thread and hands
each outcome back to its caller on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from odradek.replication.partition_state import (
    IsrConflict,
    IsrOutcome,
    IsrStore,
    IsrStoreUnavailable,
    IsrWrite,
)

logger = logging.getLogger(__name__)

__all__ = ["AlterPartitionManager", "AlterPartitionQueue", "outcome_of"]

TopicPartition = tuple[str, int]
P = TypeVar("P")


class AlterPartitionQueue(Generic[P]):
    """The pending ISR writes and whether a batch is in flight (pure).

    ``submit`` queues a write with its caller's payload (the ``Partition``); ``take``
    returns every queued write as the next batch, or nothing while a batch is in flight
    (Kafka's ``inflightRequest``: one AlterPartition at a time, so changes proposed
    meanwhile collect into the next one); ``finish`` ends the batch in flight.

    A partition has at most one write queued: its state machine proposes the next only
    after the outcome of the last (``Leader.proposed`` / ``Fenced.reasserting``). Should
    a second arrive anyway, the newer decision replaces the queued one; a write already
    in flight is not affected (its outcome is checked against the partition's state when
    it comes back).
    """

    def __init__(self) -> None:
        self._pending: dict[TopicPartition, tuple[IsrWrite, P]] = {}
        self._in_flight: list[tuple[IsrWrite, P]] | None = None

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def in_flight(self) -> bool:
        return self._in_flight is not None

    def submit(self, write: IsrWrite, payload: P) -> None:
        self._pending[(write.topic, write.partition)] = (write, payload)

    def take(self) -> list[tuple[IsrWrite, P]]:
        if self._in_flight is not None or not self._pending:
            return []
        batch = list(self._pending.values())
        self._pending.clear()
        self._in_flight = batch
        return batch

    def finish(self) -> None:
        self._in_flight = None

    def discard(self, tp: TopicPartition) -> None:
        """The partition is gone (deleted topic, removed replica): drop its queued write."""
        self._pending.pop(tp, None)


def outcome_of(write: IsrWrite, results: dict[TopicPartition, IsrOutcome]) -> IsrOutcome:
    """One partition's outcome from a batch's results. A partition the store reported
    nothing for has an unknown outcome: treated as unreachable (the partition fences
    itself, then re-asserts), never as success."""
    got = results.get((write.topic, write.partition))
    if got is None:
        return IsrStoreUnavailable("no outcome reported for this partition")
    return got


OnOutcome = Callable[[IsrWrite, P, IsrOutcome], None]


class AlterPartitionManager(Generic[P]):
    """Runs ``AlterPartitionQueue`` batches against an ``IsrStore`` (asyncio layer).

    ``submit`` may be called many times in one event-loop turn (one follower fetch covers
    every partition of its leader; one ISR check covers every leader): the batch is sent
    on the next turn, so those writes share it. ``on_outcome`` is called on the loop for
    each write of a finished batch; writes it submits go into the next batch.
    """

    def __init__(self, store: IsrStore, on_outcome: OnOutcome[P]) -> None:
        self.store = store
        self._on_outcome = on_outcome
        self.queue: AlterPartitionQueue[P] = AlterPartitionQueue()
        self._scheduled = False
        self._task: asyncio.Task[None] | None = None
        self.batches_sent = 0  # read by tests and benchmarks
        self.writes_sent = 0

    def submit(self, write: IsrWrite, payload: P) -> None:
        self.queue.submit(write, payload)
        self._schedule()

    def discard(self, tp: TopicPartition) -> None:
        self.queue.discard(tp)

    def _schedule(self) -> None:
        if self._scheduled or self.queue.in_flight:
            return
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._send_next)

    def _send_next(self) -> None:
        self._scheduled = False
        batch = self.queue.take()
        if not batch:
            return
        self.batches_sent += 1
        self.writes_sent += len(batch)
        self._task = asyncio.get_running_loop().create_task(self._run(batch))

    async def _run(self, batch: list[tuple[IsrWrite, P]]) -> None:
        writes = [w for w, _ in batch]
        try:
            results = await asyncio.to_thread(self.store.write_isrs, writes)
        except Exception as e:
            logger.exception("ISR write batch of %d partitions failed", len(writes))
            results = {(w.topic, w.partition): IsrStoreUnavailable(repr(e)) for w in writes}
        finally:
            self.queue.finish()
        for write, payload in batch:
            try:
                self._on_outcome(write, payload, outcome_of(write, results))
            except Exception:
                logger.exception(
                    "%s-%d: applying the ISR write outcome failed", write.topic, write.partition
                )
        if len(self.queue):
            self._schedule()

    async def drain(self) -> None:
        """Wait until nothing is queued or in flight (tests, shutdown)."""
        while self.queue.in_flight or len(self.queue) or self._scheduled:
            task = self._task
            if task is not None and not task.done():
                await asyncio.shield(task)
            else:
                await asyncio.sleep(0)


def write_each(
    store: Callable[[IsrWrite], int], writes: Sequence[IsrWrite]
) -> dict[TopicPartition, IsrOutcome]:
    """A batch as single writes, for stores without a batched form (the in-memory store
    of the replication harness): each write's result or exception is its outcome."""
    out: dict[TopicPartition, IsrOutcome] = {}
    for w in writes:
        try:
            out[(w.topic, w.partition)] = store(w)
        except (IsrConflict, IsrStoreUnavailable) as e:
            out[(w.topic, w.partition)] = e
    return out
