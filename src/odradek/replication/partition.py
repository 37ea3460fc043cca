"""One replica of one partition: its log, its role, the HW/LEO and ISR rules.

This module decides; it does no socket or ZooKeeper I/O. The replica manager applies
its decisions (ISR writes to ZooKeeper, waking waiters). Rules, stated once:

* **Roles.** ``LEADER``, ``FOLLOWER`` or ``OFFLINE``. Only a leader that is not
  ``fenced`` accepts produce and consumer fetches (SPEC R3); the others answer
  NOT_LEADER_OR_FOLLOWER. Roles and epochs come from the partition state znode written
  by the controller (SPEC R13); a state with an older leader epoch is ignored.
* **Leader epochs** only increase (SPEC R19). Requests stamped with an older epoch get
  FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (KIP-320). A leader records
  ``(epoch, LEO)`` in the leader-epoch cache when it appends the first batch of its
  epoch; a follower when it appends a batch of a newer epoch.
* **HW** (SPEC R16). Leader: ``min(LEO)`` over the ISR, never decreasing. Follower:
  ``min(leader's HW, own LEO)`` as learnt from each fetch response.
* **ISR** (SPEC R6). A follower is *caught up* at time T if its fetch at T asked for the
  leader's LEO, or asked for at least the LEO the leader had at its previous fetch (then
  it was caught up at the previous fetch's time) — Kafka's rule. An ISR member not caught
  up for ``replica.lag.time.max.ms`` is removed (dead or slow); a follower whose LEO has
  reached the HW is added back. Each change is a conditional write of the state znode;
  if it fails because we are no longer the leader or cannot reach ZooKeeper, the leader
  is **fenced** and stops accepting writes (SPEC scenarios 4 and 6).
* **acks** (SPEC R7, R8). ``acks=all`` completes when the HW passes the batch;
  ``min.insync.replicas`` is checked before the append.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.batch import BatchHeader, parse_batches
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import AppendInfo, FileSlice, Log
from odradek.storage.truncation_ledger import TruncationLedger

_log = logging.getLogger(__name__)


class Role(enum.Enum):
    OFFLINE = "offline"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (SPEC R16)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_leo_at_last_fetch: int = 0
    # The follower's own log start offset, sent in its fetches: the leader's low
    # watermark (DeleteRecords) is the minimum over the ISR (Kafka's lowWatermarkIfLeader).
    log_start_offset: int = -1


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    log: Log
    replicas: list[int]
    local_broker_id: int
    epochs: LeaderEpochCache
    producers: ProducerStateManager
    role: Role = Role.OFFLINE
    leader_id: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    zk_version: int = -1
    controller_epoch: int = -1
    high_watermark: int = 0
    min_insync_replicas: int = 1
    fenced: bool = False
    isr_update_in_flight: bool = False
    followers: dict[int, ReplicaState] = field(default_factory=dict)
    # Followers outside the ISR whose latest fetch reached the HW: only a fetch can
    # qualify a replica for the ISR, never stale knowledge (Kafka's maybeExpandIsr).
    expand_candidates: set[int] = field(default_factory=set)
    # Where truncated suffixes are quarantined before removal (issue 6 item 5); None in
    # tests that build a bare Partition.
    ledger: TruncationLedger | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # ----------------------------------------------------------------- role changes
    def make_leader(self, leader_epoch: int, isr: list[int], replicas: list[int],
                    zk_version: int, controller_epoch: int, now_ms: int) -> None:
        self.role = Role.LEADER
        self.fenced = False
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch
        self.expand_candidates = set()
        # Followers get the benefit of the doubt for one lag period (Kafka does the same).
        self.followers = {r: ReplicaState(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
                          for r in replicas if r != self.local_broker_id}
        # SPEC R20: the new leader keeps its log; its HW never exceeds its LEO.
        self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset),
                                  self.log.log_end_offset)
        self.maybe_advance_high_watermark()

    def make_follower(self, leader_id: int, leader_epoch: int, isr: list[int],
                      replicas: list[int], zk_version: int) -> None:
        self.role = Role.FOLLOWER
        self.fenced = False
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.zk_version = zk_version
        self.followers = {}

    def make_offline(self, leader_epoch: int, zk_version: int) -> None:
        self.role = Role.OFFLINE
        self.leader_id = -1
        self.leader_epoch = max(self.leader_epoch, leader_epoch)
        self.zk_version = zk_version

    def fence(self) -> None:
        """Our ISR write failed: we may have been replaced (SPEC scenarios 4, 6)."""
        self.fenced = True

    # ----------------------------------------------------------------- checks
    def check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise KafkaError(ErrorCode.fenced_leader_epoch,
                                 f"epoch {current_leader_epoch} < {self.leader_epoch}")
            if current_leader_epoch > self.leader_epoch:
                raise KafkaError(ErrorCode.unknown_leader_epoch,
                                 f"epoch {current_leader_epoch} > {self.leader_epoch}")

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise the KIP-320 error a client expects when this replica cannot serve it."""
        self.check_epoch(current_leader_epoch)
        if self.role is not Role.LEADER or self.fenced:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.local_broker_id} does not lead {self.name}")

    # ----------------------------------------------------------------- leader side
    def append_as_leader(self, records: bytes, required_acks: int, now_ms: int) -> AppendInfo:
        self.check_leader()
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            # SPEC R8: refuse before appending, so nothing half-replicated is left behind.
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"ISR {self.isr} smaller than min.insync.replicas={self.min_insync_replicas}",
            )
        headers = parse_batches(records, verify_crc=False)  # 61-byte headers only
        idempotent = any(h.producer_id >= 0 for h in headers)
        if idempotent:
            dup = self.producers.check(headers)
            if dup is not None:
                # A retry of a batch we already have: success with its original offsets.
                return AppendInfo(first_offset=dup.first_offset, last_offset=dup.last_offset,
                                  max_timestamp=-1, offset_of_max_timestamp=-1,
                                  log_append_time=-1, num_batches=0, size_bytes=0,
                                  log_start_offset=self.log.log_start_offset)
        if self.log.config.compact:
            _require_keys(records, self.name)  # SPEC R25; compacted topics only
        leo_before = self.log.log_end_offset
        info = self.log.append_as_leader(records, self.leader_epoch, now_ms)
        if self.leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(self.leader_epoch, leo_before)  # SPEC R19
        if idempotent:
            _assign_offsets(headers, info.first_offset)
            self.producers.update(headers)
        self.maybe_advance_high_watermark()
        return info

    def maybe_advance_high_watermark(self) -> bool:
        """HW = min LEO over the ISR (SPEC R16). Returns True if it moved."""
        if self.role is not Role.LEADER:
            return False
        # odradek.ack.fsync: the leader counts its *durable* LEO (followers already report
        # durable fetch offsets), so everything below the HW is on every ISR member's disk.
        lg = self.log
        hw = lg.durable_offset if lg.config.ack_fsync else lg.log_end_offset
        for rid in self.isr:
            if rid == self.local_broker_id:
                continue
            state = self.followers.get(rid)
            if state is None or state.log_end_offset < 0:
                return False  # an ISR member we have not heard from yet holds the HW
            hw = min(hw, state.log_end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw
            return True
        return False

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                              log_start_offset: int = -1) -> bool:
        """A follower's fetch offset is its LEO (SPEC R16). Returns True if the HW moved."""
        state = self.followers.get(replica_id)
        if state is None:
            state = self.followers[replica_id] = ReplicaState()
        if log_start_offset >= 0:
            state.log_start_offset = log_start_offset
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            state.last_caught_up_ms = now_ms
        elif fetch_offset >= state.leader_leo_at_last_fetch and state.last_fetch_ms:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.leader_leo_at_last_fetch = leo
        state.last_fetch_ms = now_ms
        if replica_id not in self.isr and replica_id in self.replicas:
            if fetch_offset >= self.high_watermark and self._caught_up_in_epoch(state):
                self.expand_candidates.add(replica_id)
            else:
                self.expand_candidates.discard(replica_id)
        return self.maybe_advance_high_watermark()

    def low_watermark(self) -> int:
        """Smallest log start offset over the ISR (-1 while an ISR follower's is unknown):
        DeleteRecords answers once it reaches the requested offset (Kafka's
        lowWatermarkIfLeader, which takes alive replicas; out-of-ISR replicas are left out
        here so a dead follower cannot hold every DeleteRecords until its timeout)."""
        low = self.log.log_start_offset
        for rid in self.isr:
            if rid == self.local_broker_id:
                continue
            st = self.followers.get(rid)
            low = min(low, st.log_start_offset if st is not None else -1)
        return low

    def delete_records_to(self, offset: int) -> int:
        """DeleteRecords on the leader (API 21): ``-1`` means the HW; past the HW is
        OFFSET_OUT_OF_RANGE; the log start offset moves (never backwards). Returns the
        offset the log start must reach on every ISR replica (the answer's low_watermark).
        Kafka refuses it unless cleanup.policy contains "delete"."""
        self.check_leader()
        if not self.log.config.delete:
            raise KafkaError(ErrorCode.policy_violation,
                             f"Records of partition {self.name} can not be deleted due to "
                             f"the configured policy")
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"cannot delete records of {self.name} up to {offset}: the "
                             f"high watermark is {self.high_watermark}")
        self.log.maybe_increment_log_start_offset(target, "DeleteRecords")
        return max(target, self.log.log_start_offset)

    def isr_change_wanted(self, now_ms: int, lag_max_ms: int) -> list[int] | None:
        """The ISR this leader should write, or None if it is right (SPEC R6)."""
        if self.role is not Role.LEADER or self.fenced or self.isr_update_in_flight:
            return None
        new = [self.local_broker_id] if self.local_broker_id in self.isr else []
        for r in self.replicas:
            if r == self.local_broker_id:
                continue
            st = self.followers.get(r)
            if r in self.isr:
                if st is not None and now_ms - st.last_caught_up_ms <= lag_max_ms:
                    new.append(r)
            elif r in self.expand_candidates:
                new.append(r)
        if self.local_broker_id not in new:
            new.insert(0, self.local_broker_id)
        order = {b: i for i, b in enumerate(self.replicas)}
        new.sort(key=lambda b: order.get(b, len(order)))
        current = sorted(self.isr, key=lambda b: order.get(b, len(order)))
        return None if new == current else new

    def _caught_up_in_epoch(self, st: ReplicaState) -> bool:
        # Kafka also requires the follower to have reached the start of the current
        # leader epoch, so a replica is never in sync on the strength of an old epoch.
        start = next((o for e, o in self.epochs.entries if e == self.leader_epoch), 0)
        return st.log_end_offset >= start

    # ----------------------------------------------------------------- follower side
    def append_as_follower(self, records: bytes, leader_hw: int, now_ms: int,
                           leader_log_start: int = -1) -> AppendInfo | None:
        info = None
        if records:
            headers = parse_batches(records, verify_crc=False)
            lg = self.log
            if (headers and lg.log_end_offset == lg.log_start_offset
                    and headers[0].base_offset < lg.log_end_offset <= headers[0].last_offset):
                # Kafka's UnexpectedAppendOffsetException case: our empty log starts at the
                # leader's log start offset, which falls inside the first batch it sent
                # (DeleteRecords cuts batches). Restart the log at the batch's base; the
                # next response's log_start_offset moves our log start up again.
                self.truncate_fully_and_start_at(headers[0].base_offset)
            info = lg.append_as_follower(records, now_ms)
            for h in headers:
                if h.partition_leader_epoch > self.epochs.latest_epoch:
                    self.epochs.assign(h.partition_leader_epoch, h.base_offset)
            self.producers.update(headers)  # so a new leader still deduplicates retries
        self.high_watermark = max(self.high_watermark,
                                  min(leader_hw, self.log.log_end_offset))
        if leader_log_start > self.log.log_start_offset:
            # Kafka: a follower follows its leader's log start offset (retention,
            # DeleteRecords), bounded by its own HW; whole segments below it go at the
            # next retention check.
            self.log.maybe_increment_log_start_offset(
                min(leader_log_start, self.high_watermark), "leader's log start offset")
        return info

    def truncate_to(self, offset: int, *, reason: str = "truncation", leader_id: int = -1,
                    leader_epoch: int = -1) -> None:
        """SPEC R20: drop a suffix the leader does not have (never below our LEO's start).

        The suffix is first copied, durably, to the lost-records ledger with ``reason``
        and the new leader's id/epoch (``quarantine``)."""
        if offset < self.log.log_end_offset:
            self.quarantine(offset, reason=reason, leader_id=leader_id,
                            leader_epoch=leader_epoch)
            self.log.truncate_to(max(offset, self.log.log_start_offset))
        self.epochs.truncate_from_end(self.log.log_end_offset)
        self.producers.truncate_to(self.log.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """A follower whose LEO is below its leader's log start offset (retention or
        DeleteRecords removed what it would fetch next): Kafka's handleOffsetOutOfRange
        empties the log and restarts it at the leader's log start. Nothing is quarantined:
        every local record is below the leader's log start, hence below its HW —
        committed, and deliberately deleted there."""
        self.log.truncate_fully_and_start_at(offset)
        self.epochs.clear()
        self.high_watermark = offset

    def quarantine(self, offset: int, *, reason: str, leader_id: int = -1,
                   leader_epoch: int = -1) -> None:
        """Copy [offset, LEO) to the lost-records ledger, durably, before any removal of
        it (``truncate_to``). A full reset (``truncate_fully_and_start_at``) does not
        call it: everything it removes is below the leader's log start. A ledger that
        cannot be written (disk full) is logged, not fatal: a follower that can never
        truncate would never rejoin."""
        if self.ledger is None or offset >= self.log.log_end_offset:
            return
        try:
            self.ledger.record(self.log, self.topic, self.index, offset, reason=reason,
                               new_leader_id=leader_id, new_leader_epoch=leader_epoch,
                               high_watermark=self.high_watermark)
        except Exception:  # noqa: BLE001
            _log.exception("%s: could not quarantine [%d, %d) before truncating",
                           self.name, offset, self.log.log_end_offset)

    # ----------------------------------------------------------------- acks & reads
    def acks_all_satisfied(self, last_offset: int) -> bool:
        """SPEC R7: acks=all completes once every ISR member has the batch (HW past it)."""
        return self.high_watermark > last_offset

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool,
             committed_only: bool = True) -> FileSlice | None:
        """Consumers read below the HW only (SPEC R16); followers up to the LEO."""
        max_offset = self.high_watermark if committed_only else self.log.log_end_offset
        if offset >= max_offset and offset <= self.log.log_end_offset:
            return None
        return self.log.read(offset, max_bytes, max_offset=max_offset,
                             min_one_batch=min_one_batch)


def _require_keys(records: bytes, name: str) -> None:
    """Kafka's LogValidator: a compacted topic rejects records without a key (the cleaner
    could never dedupe them). Decodes record keys — done only for cleanup.policy=compact
    topics, so the ordinary produce path stays header-only."""
    from odradek.storage.cleaner import record_key_check

    try:
        ok = record_key_check(records)
    except KafkaError:
        raise
    except Exception as e:  # undecodable compressed payload
        raise KafkaError(ErrorCode.corrupt_message, f"cannot decode records: {e!r}") from e
    if not ok:
        raise KafkaError(ErrorCode.invalid_record,
                         f"Compacted topic cannot accept message without key in topic "
                         f"partition {name}.")


def _assign_offsets(headers: list[BatchHeader], first_offset: int) -> None:
    """Mirror the offsets the log assigned (batches are appended in order)."""
    offset = first_offset
    for h in headers:
        h.base_offset = offset
        offset += h.last_offset_delta + 1


def rebuild_producer_state(producers: ProducerStateManager, log: Log) -> None:
    """Newest snapshot plus the batches after it (never a rescan of the whole log)."""
    start = max(producers.load_latest_snapshot(log.log_end_offset), log.log_start_offset)
    offset = start
    while offset < log.log_end_offset:
        sl = log.read(offset, 8 * 1024 * 1024, max_offset=log.log_end_offset)
        if sl is None:
            break
        headers = parse_batches(sl.read_bytes(), verify_crc=False)
        if not headers:
            break
        producers.update(headers)
        offset = headers[-1].last_offset + 1
    producers.dirty = False
