"""The simulator's hand-written controller (``--model-controller``, ``FIRST_WORLD``'s;
the default runs Odradek's own over the ZooKeeper model instead: odradek.sim.zk_cluster,
``WorldConfig.real_controller``). It is
ZooKeeper's state znodes and the controller's decisions in one object, with Kafka's
rules: on a session's expiry, leadership moves to the first live ISR member and the
broker leaves the ISRs it was in (a new leader epoch each time, as ``newLeaderAndIsr``
does); an ISR of one keeps its last member and the partition waits, leaderless, for it
(no unclean election); a broker that registers again gets the current state and leads
any leaderless partition whose ISR it is in. Every seed docs/faults.md records replays
on it byte for byte.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from odradek.controller.reassignment import ReplicaSets, completion, start
from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.replication.partition_state import IsrConflict, IsrStoreUnavailable, IsrWrite
from odradek.sim.harness import TOPIC, MemoryController, _BrokerIsrStore

__all__ = ["SimController"]

Trace = Callable[[str], None]


class _SimIsrStore(_BrokerIsrStore):
    dead = False  # set when the broker process holding this store crashes

    def write_isr(self, write: IsrWrite) -> int:
        c = self._c
        what = (
            f"ISR write by {write.leader}: p{write.partition} epoch {write.leader_epoch} "
            f"isr {list(write.isr)} at version {write.zk_version}"
        )
        trace = c.trace if isinstance(c, SimController) else None
        try:
            if self.dead:
                raise IsrStoreUnavailable("the process is gone")
            version = super().write_isr(write)
        except (IsrStoreUnavailable, IsrConflict) as e:
            if trace is not None:
                trace(f"{what}: {type(e).__name__}")
            raise
        if trace is not None:
            trace(f"{what}: ok, version {version}")
        if isinstance(c, SimController):
            # The ISR change's notification: the controller undoes an ineligible member
            # (KIP-841) and checks a move.
            self._loop.call_soon(c.undo_ineligible, write.partition)
            if c.assignment[write.partition].in_progress:
                self._loop.call_soon(c.check_reassignments)
        return version


class SimController(MemoryController):
    """The controller and ZooKeeper, with Odradek's reassignment steps (KIP-455,
    ``odradek.controller.reassignment``: the start writes only the topic znode -- the
    replica set, no new leader epoch -- and the completion, once every target replica is
    in the ISR, a new epoch with ISR ∩ target) and watches that reach each broker after
    a seeded delay, in order."""

    def __init__(
        self,
        brokers: tuple[int, ...],
        partitions: int,
        seed: int,
        trace: Trace,
        watch_latency_s: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        super().__init__(brokers, partitions)
        self.topic_id = uuid.UUID(int=random.Random(f"topic-{seed}").getrandbits(128))
        self.registered: set[int] = set(brokers)
        self.trace = trace
        self.assignment: dict[int, ReplicaSets] = {
            p: ReplicaSets(brokers) for p in range(partitions)
        }
        self.watch_latency_s = watch_latency_s
        self._watch_rng = random.Random(f"zk-{seed}")
        self._delivered: list[float] = []  # per listener: when its last watch fires
        # Bumped when a broker's session ends: the watches of a session that ended die
        # with it (a restarted broker reads the state afresh, never an old notification).
        self.sessions: dict[int, int] = dict.fromkeys(brokers, 0)
        self._batch: list[bool] | None = None  # inside a batch: [publish at its end]

    def store_for(self, broker: int, loop: asyncio.AbstractEventLoop) -> _BrokerIsrStore:
        return _SimIsrStore(self, broker, loop)

    # The world's hooks (ZkCluster acts on its clients here; this model needs the set).
    def zk_cut(self, b: int) -> None:
        self.unreachable.add(b)

    def zk_uncut(self, b: int) -> None:
        self.unreachable.discard(b)

    def crashed(self, b: int) -> None:
        pass  # SimHarness.crash_broker marks the broker's ISR store dead

    def image(self) -> MetadataImage:
        parts = {
            p: PartitionInfo(
                index=p,
                replicas=a.replicas,
                leader=z.leader,
                leader_epoch=z.leader_epoch,
                isr=z.isr,
                controller_epoch=self.controller_epoch,
                zk_version=z.version,
                adding_replicas=a.adding,
                removing_replicas=a.removing,
            )
            for (p, z), a in zip(self.znodes.items(), self.assignment.values(), strict=True)
        }
        return MetadataImage(
            cluster_id="harness",
            controller_id=self.brokers[0],
            # /brokers/ids: the registered brokers only (a leader admits no other to an
            # ISR, KIP-841, and no follower fetches from an unregistered leader).
            brokers={b: BrokerInfo(b, "memory", b) for b in self.brokers if b in self.registered},
            topics={TOPIC: TopicInfo(TOPIC, self.topic_id, parts)},
            complete=True,
        )

    @contextmanager
    def _one_transaction(self) -> Iterator[None]:
        """A failover's elections are one ZooKeeper transaction and one notification
        (the controller's ``_write_changes``): no broker sees a state with some of them
        done. (Without watch delays -- FIRST_WORLD -- each is published at once, all in
        the same loop turn, as that world always did.)"""
        if self.watch_latency_s[1] <= 0 or self._batch is not None:
            yield
            return
        self._batch = [False]
        try:
            yield
        finally:
            pending, self._batch = self._batch[0], None
            if pending:
                self.publish()

    def publish(self) -> None:
        if self._batch is not None:
            self._batch[0] = True
            return
        lo, hi = self.watch_latency_s
        if hi <= 0:
            super().publish()
            return
        image = self.image()
        loop = asyncio.get_running_loop()
        now = loop.time()
        while len(self._delivered) < len(self.listeners):
            self._delivered.append(0.0)
        for i, listener in enumerate(self.listeners):
            # A session's watches fire in order: never before the previous one.
            at = max(now + self._watch_rng.uniform(lo, hi), self._delivered[i] + 1e-6)
            self._delivered[i] = at
            b = self.brokers[i]  # the harness adds one listener per broker, in order
            loop.call_at(at, self._deliver, b, self.sessions[b], listener, image)

    def _deliver(
        self, b: int, session: int, listener: Callable[[MetadataImage], None], image: MetadataImage
    ) -> None:
        if self.sessions[b] == session:
            listener(image)

    def elect(self, partition: int, leader: int, isr: Any = None) -> None:
        super().elect(partition, leader, isr)
        z = self.znodes[partition]
        self.trace(
            f"controller: p{partition} leader {leader} epoch {z.leader_epoch} isr {list(z.isr)}"
        )

    def _leaderless(self, partition: int, isr: tuple[int, ...]) -> None:
        z = self.znodes[partition]
        z.leader, z.isr = -1, isr
        z.leader_epoch += 1
        z.version += 1
        self.trace(f"controller: p{partition} offline epoch {z.leader_epoch} isr {list(isr)}")
        self.publish()

    def broker_failed(self, b: int) -> None:
        """The broker's session expired (onBrokerFailure)."""
        if b not in self.registered:
            return
        self.registered.discard(b)
        self.sessions[b] += 1
        self.trace(f"controller: broker {b} session expired")
        with self._one_transaction():
            self._move_off(b)
            self.publish()  # /brokers/ids changed: every broker's watch fires
        self.check_reassignments()

    def undo_ineligible(self, partition: int) -> None:
        """The controller's rule on an ISR change's notification (``controller.py``,
        KIP-841): a leader's write that put an unregistered broker in the ISR -- from a
        fetch that broker sent before it died -- is undone, a new epoch without it."""
        z = self.znodes[partition]
        rest = tuple(r for r in z.isr if r in self.registered)
        if rest == z.isr or z.leader not in self.registered or z.leader not in rest:
            return  # nothing to undo, or a failover's business (_move_off)
        self.trace(
            f"controller: p{partition} isr {list(z.isr)} names unregistered "
            f"{sorted(set(z.isr) - self.registered)}: undone"
        )
        with self._one_transaction():
            self.elect(partition, z.leader, rest)

    def _move_off(self, b: int) -> None:
        for p, z in self.znodes.items():
            if z.leader != b and b not in z.isr:
                continue
            rest = tuple(r for r in z.isr if r != b)
            if z.leader == b or z.leader == -1:
                live = [r for r in self.brokers if r in rest and r in self.registered]
                if live:
                    self.elect(p, live[0], rest)
                else:
                    self._leaderless(p, rest or z.isr)
            elif rest:
                self.elect(p, z.leader, rest)  # Kafka bumps the epoch here too

    def broker_registered(self, b: int) -> None:
        self.registered.add(b)
        self.trace(f"controller: broker {b} registered")
        with self._one_transaction():
            for p, z in self.znodes.items():
                if z.leader == -1 and b in z.isr:
                    self.elect(p, b, z.isr)
            self.publish()
        self.check_reassignments()

    # ---------------------------------------------------------------- reassignment
    def reassign(self, partition: int, target: tuple[int, ...]) -> None:
        cur = self.assignment[partition]
        new = start(cur, target)
        self.assignment[partition] = new
        self.trace(
            f"controller: p{partition} reassigned to {list(target)}: replicas "
            f"{list(new.replicas)} adding {list(new.adding)} removing {list(new.removing)}"
        )
        self.publish()
        self.check_reassignments()

    def check_reassignments(self) -> None:
        """Complete every move whose target replicas are all in the ISR (the controller
        checks on each ISR change and broker change)."""
        for p, cur in self.assignment.items():
            if not cur.in_progress:
                continue
            z = self.znodes[p]
            change = completion(cur, z.leader, z.leader_epoch, z.isr, self.registered)
            if change is None:
                continue
            self.assignment[p] = ReplicaSets(cur.target)
            z.leader, z.leader_epoch, z.isr = change.leader, change.leader_epoch, tuple(change.isr)
            z.version += 1
            self.trace(
                f"controller: p{p} reassignment completed: replicas {list(cur.target)} "
                f"leader {z.leader} epoch {z.leader_epoch} isr {list(z.isr)}"
            )
            self.publish()
