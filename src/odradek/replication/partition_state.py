"""The states of one replica and what a transition asks of its caller (pure data).

A replica is in exactly one of four states, each a frozen value (Kafka's
``PartitionState`` with ``CommittedPartitionState`` / ``PendingExpandIsr`` /
``PendingShrinkIsr``, plus the roles):

* ``Offline`` -- no leader is known for the partition, or it has none (REQ-R10, R15).
* ``Follower`` -- replicates from ``leader_id`` at ``leader_epoch`` (REQ-R3).
* ``Leader`` -- accepts writes. Its ISR is *committed* (what the state znode says, at
  ``zk_version``) and, while an ISR write is in flight, *proposed*. The high watermark
  is computed over the **maximal** ISR (committed ∪ proposed): a replica being removed
  still holds the HW until the removal is recorded, a replica being added already
  counts -- so no record is called committed on the strength of an ISR that ZooKeeper
  never recorded (Kafka's ``maximalIsr``).
* ``Fenced`` -- a leader whose ISR write failed because ZooKeeper could not be reached or
  names someone else (REQ-P4 and REQ-P6): it may have been replaced, so it accepts
  no writes and serves no reads until a re-assertion of its committed ISR succeeds or a
  new state arrives from the controller.

Transitions are methods of ``Partition``; each returns a ``Transition`` saying what the
caller (the replica manager) must do next: write an ISR through the ``IsrStore``, let
waiters re-check (the HW moved, data arrived, the role changed), start or stop fetching.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "Fenced",
    "Follower",
    "IsrConflict",
    "IsrOutcome",
    "IsrStore",
    "IsrStoreUnavailable",
    "IsrWrite",
    "Leader",
    "LeaderAndIsr",
    "Offline",
    "ReplicaState",
    "Role",
    "State",
    "Transition",
]


class Role(enum.Enum):
    OFFLINE = "offline"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """The partition state znode as the controller wrote it (REQ-R13), plus the
    assignment: what a replica applies on every metadata change."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Offline:
    leader_epoch: int
    zk_version: int
    role = Role.OFFLINE


@dataclass(frozen=True, slots=True)
class Follower:
    leader_id: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    role = Role.FOLLOWER


@dataclass(frozen=True, slots=True)
class Leader:
    leader_epoch: int
    isr: tuple[int, ...]  # committed: as recorded in ZooKeeper at zk_version
    zk_version: int
    controller_epoch: int
    proposed: tuple[int, ...] | None = None  # an ISR write in flight
    role = Role.LEADER

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.proposed is None:
            return self.isr
        return self.isr + tuple(r for r in self.proposed if r not in self.isr)


@dataclass(frozen=True, slots=True)
class Fenced:
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    controller_epoch: int
    reasserting: bool = False  # a re-assertion write is in flight
    role = Role.LEADER


State = Offline | Follower | Leader | Fenced


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (REQ-R16)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_leo_at_last_fetch: int = 0
    # The follower's own log start offset, sent in its fetches: the leader's low
    # watermark (DeleteRecords) is the minimum over the ISR (Kafka's lowWatermarkIfLeader).
    log_start_offset: int = -1
    # ``last_fetch_ms`` when the follower last left the committed ISR: an idle session's
    # credit brings it back only for a fetch after that (a dead follower's last fetch,
    # made while it was a member, must not re-admit it).
    fetch_ms_out_of_isr: int = -1


@dataclass(frozen=True, slots=True)
class IsrWrite:
    """A conditional write of the state znode proposed by a leader (REQ-R6, R13):
    applies only if the znode is still at ``zk_version``."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int


@dataclass(slots=True)
class Transition:
    """What the replica manager must do after a transition."""

    hw_moved: bool = False  # acks=all produces and consumer fetches may complete
    state_changed: bool = False  # role, epoch or fencing changed: waiters re-check
    isr_write: IsrWrite | None = None  # write it through the IsrStore, report back
    start_fetching_from: int | None = None  # became (or re-pointed) a follower
    stop_fetching: bool = False  # no longer a follower
    log_start_moved: bool = False  # a follower's log start moved (DeleteRecords)
    note: str = ""  # what to log, once (a transition changes one thing)
    # (old, new) committed ISR when this leader's ISR write was recorded: the replica
    # manager counts it as an ISR shrink and/or expand (Kafka's IsrShrinksPerSec).
    isr_change: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def merge(self, other: Transition) -> Transition:
        self.hw_moved |= other.hw_moved
        self.state_changed |= other.state_changed
        self.isr_write = other.isr_write or self.isr_write
        if other.start_fetching_from is not None:
            self.start_fetching_from = other.start_fetching_from
        self.stop_fetching |= other.stop_fetching
        self.log_start_moved |= other.log_start_moved
        self.note = "; ".join(n for n in (self.note, other.note) if n)
        self.isr_change = other.isr_change or self.isr_change
        return self

    @property
    def wakes_waiters(self) -> bool:
        return self.hw_moved or self.state_changed or self.log_start_moved


class IsrConflict(Exception):
    """The conditional write lost: ``current`` is the state znode as it is now."""

    def __init__(self, current: LeaderAndIsr) -> None:
        super().__init__(current)
        self.current = current


class IsrStoreUnavailable(Exception):
    """ZooKeeper could not be reached (or the znode is gone): the outcome is unknown."""


IsrOutcome = int | IsrConflict | IsrStoreUnavailable  # the new znode version, or why not


class IsrStore(Protocol):
    """Where leaders record ISR changes (ZooKeeper in a broker, memory in the
    replication harness). Blocking: the replica manager calls it from a worker thread
    with a batch of writes (``odradek.replication.alter_partition``), at most one per
    partition, each conditional on its own znode version. Returns each partition's
    outcome: its znode's new version, or ``IsrConflict`` / ``IsrStoreUnavailable`` --
    one partition's failure never fails the others."""

    def write_isrs(self, writes: Sequence[IsrWrite]) -> dict[tuple[str, int], IsrOutcome]: ...


class IsrEligibility:
    """Which brokers a leader may add to an ISR (KIP-841, Kafka's
    ``Partition.isReplicaIsrEligible``): those its metadata image shows registered
    (alive in /brokers/ids) and not in a controlled shutdown. A fetch that a broker sent
    before it died can reach the leader after the controller took it out of the ISR; it
    must not bring the dead broker back, or the controller may elect it with whatever log
    it restarts with. One object per replica manager, shared by its partitions and
    updated with each image; ``None`` (a bare Partition in tests) knows no broker list."""

    __slots__ = ("_alive", "_shutting_down")

    def __init__(self) -> None:
        self._alive: frozenset[int] | None = None
        self._shutting_down: frozenset[int] = frozenset()

    def update(self, alive: Iterable[int], shutting_down: Iterable[int] = ()) -> frozenset[int]:
        """Adopt an image's broker lists; returns the brokers that just became ineligible."""
        before = self._alive
        self._alive = frozenset(alive)
        was_down = self._shutting_down
        self._shutting_down = frozenset(shutting_down)
        if before is None:
            return frozenset(self._shutting_down)
        return (before - self._alive) | (self._shutting_down - was_down)

    def eligible(self, broker: int) -> bool:
        alive = self._alive
        return (alive is None or broker in alive) and broker not in self._shutting_down
