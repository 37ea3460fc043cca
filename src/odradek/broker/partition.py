"""One replica of one partition: its log, its role, the HW/LEO rules (SPEC R6, R7, R16).

State rules, stated once:

* A replica is ``LEADER`` or ``FOLLOWER`` (or ``OFFLINE`` before the first
  LeaderAndIsr-equivalent arrives). Only the leader accepts produce and consumer fetches
  (SPEC R3); others answer NOT_LEADER_OR_FOLLOWER.
* Every leadership change carries a ``leader_epoch`` that only increases (SPEC R19);
  requests stamped with an older epoch get FENCED_LEADER_EPOCH, a newer one
  UNKNOWN_LEADER_EPOCH (KIP-320).
* The leader's HW is ``min(LEO)`` over the ISR (SPEC R16). With the ISR equal to the
  leader alone the HW follows the LEO at once. Follower LEOs are reported by their fetch
  offsets (``record_follower_fetch``), which arrive with the replication issue.
* Consumers read only below the HW (SPEC R16); ``acks=all`` completes once the HW passes
  the appended batch's last offset (SPEC R7), and ``min.insync.replicas`` is checked
  before the append (SPEC R8).

This module does no socket I/O: the replica manager calls it and wakes waiters.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.log import AppendInfo, FileSlice, Log


class Role(enum.Enum):
    OFFLINE = "offline"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (SPEC R16)."""

    log_end_offset: int = 0
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    log: Log
    replicas: list[int]
    local_broker_id: int
    role: Role = Role.OFFLINE
    leader_id: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    high_watermark: int = 0
    min_insync_replicas: int = 1
    followers: dict[int, ReplicaState] = field(default_factory=dict)

    # ----------------------------------------------------------------- role changes
    def make_leader(self, leader_epoch: int, isr: list[int], replicas: list[int]) -> None:
        """Become leader at ``leader_epoch`` (SPEC R13: applied after ZooKeeper is updated)."""
        self.role = Role.LEADER
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.followers = {r: ReplicaState() for r in replicas if r != self.local_broker_id}
        # A new leader never lowers its HW below what it already knew, and never raises it
        # beyond its own log end (SPEC R20: the new leader keeps its log).
        self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset),
                                  self.log.log_end_offset)
        self.maybe_advance_high_watermark()

    def make_follower(self, leader_id: int, leader_epoch: int, isr: list[int],
                      replicas: list[int]) -> None:
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.followers = {}

    def make_offline(self) -> None:
        self.role = Role.OFFLINE
        self.leader_id = -1

    # ----------------------------------------------------------------- checks
    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise the KIP-320 error a client expects when this replica cannot serve it."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise KafkaError(ErrorCode.fenced_leader_epoch,
                                 f"epoch {current_leader_epoch} < {self.leader_epoch}")
            if current_leader_epoch > self.leader_epoch:
                raise KafkaError(ErrorCode.unknown_leader_epoch,
                                 f"epoch {current_leader_epoch} > {self.leader_epoch}")
        if self.role is not Role.LEADER:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.local_broker_id} does not lead {self.name}")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # ----------------------------------------------------------------- produce
    def append_as_leader(self, records: bytes, required_acks: int, now_ms: int) -> AppendInfo:
        self.check_leader()
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            # SPEC R8: refuse before appending, so nothing half-replicated is left behind.
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"ISR {self.isr} smaller than min.insync.replicas={self.min_insync_replicas}",
            )
        info = self.log.append_as_leader(records, self.leader_epoch, now_ms)
        self.maybe_advance_high_watermark()
        return info

    def maybe_advance_high_watermark(self) -> bool:
        """HW = min LEO over the ISR (SPEC R16). Returns True if it moved."""
        if self.role is not Role.LEADER:
            return False
        hw = self.log.log_end_offset
        for rid in self.isr:
            if rid == self.local_broker_id:
                continue
            state = self.followers.get(rid)
            hw = min(hw, state.log_end_offset if state is not None else 0)
        if hw > self.high_watermark:
            self.high_watermark = hw
            return True
        return False

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower's fetch offset is its LEO (SPEC R16). Returns True if the HW moved."""
        state = self.followers.setdefault(replica_id, ReplicaState())
        state.log_end_offset = fetch_offset
        state.last_fetch_ms = now_ms
        if fetch_offset >= self.log.log_end_offset:
            state.last_caught_up_ms = now_ms
        return self.maybe_advance_high_watermark()

    def acks_all_satisfied(self, last_offset: int) -> bool:
        """SPEC R7: acks=all completes once every ISR member has the batch (HW past it)."""
        return self.high_watermark > last_offset

    # ----------------------------------------------------------------- fetch
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool,
             committed_only: bool = True) -> FileSlice | None:
        """Consumers read below the HW only (SPEC R16); followers up to the LEO."""
        max_offset = self.high_watermark if committed_only else self.log.log_end_offset
        return self.log.read(offset, max_bytes, max_offset=max_offset,
                             min_one_batch=min_one_batch)
