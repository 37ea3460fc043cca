"""One replica of one partition: its log, its state, and every replication rule.

``Partition`` owns its replica state (``partition_state``: Offline, Follower, Leader with a
committed and possibly a proposed ISR, Fenced) and the high watermark; nothing outside
assigns them. It does no socket or ZooKeeper I/O: each transition returns a
``Transition`` telling the replica manager what must happen next (write this ISR through
the ``IsrStore``, wake the waiters, start fetching). The rules, stated once:

* **Roles** come from the partition state znode written by the controller (REQ-R13),
  applied by ``apply_leader_and_isr``; a state with an older leader epoch, or the same
  epoch and an older znode version, is ignored. Only a leader that is not fenced accepts
  produce and consumer fetches (REQ-R3); the others answer NOT_LEADER_OR_FOLLOWER.
* **Leader epochs** only increase (REQ-R19). Requests stamped with an older epoch get
  FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (KIP-320). A leader records
  ``(epoch, LEO)`` in the leader-epoch cache when it appends the first batch of its epoch;
  a follower when it appends a batch of a newer epoch.
* **HW** (REQ-R16). Leader: ``min(LEO)`` over the maximal ISR, never decreasing (under
  ``odradek.ack.fsync`` the leader counts its durable offset). Follower:
  ``min(leader's HW, own LEO)`` as learnt from each fetch response.
* **ISR** (REQ-R6). Who is caught up or may join: the owned ``RemoteReplicas`` (Kafka's
  ``Replica`` per follower). One conditional write at a time; ``isr_changes`` decides the
  state after each outcome (a failure **fences** the leader, REQ-P4 and REQ-P6).
* **acks** (REQ-R7, R8). ``acks=all`` completes when the HW passes the batch;
  ``min.insync.replicas`` is checked against the committed ISR before the append and
  again when the produce completes (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
* **Parse once.** A produce or a replicated response is validated batch by batch once
  (sizes, magic, CRC-32C); the same ``BatchHeader`` objects carry the offsets through the
  producer-state checks, offset assignment, the log and its indexes.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Final

from odradek.errors import ErrorCode, KafkaError
from odradek.replication.isr_changes import (
    IsrUpdate,
    after_write_failed,
    after_write_succeeded,
    controller_changed_isr,
    propose,
    start_reassertion,
)
from odradek.replication.leader_append import (
    check_batch_count,
    check_producer_state,
    require_keys,
)
from odradek.replication.partition_state import (
    Fenced,
    Follower,
    IsrEligibility,
    IsrWrite,
    Leader,
    LeaderAndIsr,
    Offline,
    ReplicaState,
    Role,
    State,
    Transition,
)
from odradek.replication.remote_replicas import RemoteReplicas
from odradek.replication.replica_log_ops import (
    append_fetched,
    quarantine,
    record_appended,
    truncate_suffix,
)
from odradek.storage.batch import BatchHeader, parse_batches
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import AppendInfo, FileSlice, Log
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.truncation_ledger import TruncationLedger

logger = logging.getLogger(__name__)

__all__ = ["BatchHeader", "Partition", "Role"]

_NO_ERROR: Final = ErrorCode.none


class Partition:
    __slots__ = (
        "topic",
        "index",
        "name",
        "log",
        "epochs",
        "producers",
        "ledger",
        "local_broker_id",
        "_replicas",
        "_state",
        "_hw",
        "_min_isr",
        "_remotes",
        "_epoch_start_offset",
        "_eligibility",
    )

    def __init__(
        self,
        topic: str,
        index: int,
        log: Log,
        replicas: list[int] | tuple[int, ...],
        local_broker_id: int,
        epochs: LeaderEpochCache,
        producers: ProducerStateManager,
        *,
        ledger: TruncationLedger | None = None,
        high_watermark: int = 0,
        min_insync_replicas: int = 1,
        eligibility: IsrEligibility | None = None,
    ) -> None:
        self.topic = topic
        self.index = index
        self.name = f"{topic}-{index}"
        self.log = log
        self.epochs = epochs
        self.producers = producers
        # Where truncated suffixes are quarantined before removal (the lost-records
        # ledger); None in tests that build a bare Partition.
        self.ledger = ledger
        self.local_broker_id = local_broker_id
        self._replicas: tuple[int, ...] = tuple(replicas)
        self._state: State = Offline(leader_epoch=-1, zk_version=-1)
        # Never above the LEO (a checkpointed HW can be, after a crash lost the tail).
        self._hw = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        self._min_isr = min_insync_replicas
        # The leader's record of its followers (Kafka's remoteReplicasMap): owned, reset
        # on each role change.
        self._remotes = RemoteReplicas()
        # KIP-841: only a registered broker not shutting down joins the ISR.
        self._eligibility = eligibility
        # KIP-207: the LEO when this replica last became leader; None unless leading.
        self._epoch_start_offset: int | None = None

    # ================================================================= read-only views
    @property
    def state(self) -> State:
        return self._state

    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def is_leader(self) -> bool:
        """A leader that may serve produce and consumer fetches (not fenced)."""
        return type(self._state) is Leader

    @property
    def fenced(self) -> bool:
        return type(self._state) is Fenced

    @property
    def leader_id(self) -> int:
        st = self._state
        if isinstance(st, Follower):
            return st.leader_id
        if isinstance(st, (Leader, Fenced)):
            return self.local_broker_id
        return -1

    @property
    def leader_epoch(self) -> int:
        return self._state.leader_epoch

    @property
    def zk_version(self) -> int:
        return self._state.zk_version

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR (what ZooKeeper recorded); empty when offline."""
        st = self._state
        return () if isinstance(st, Offline) else st.isr

    @property
    def pending_isr(self) -> tuple[int, ...] | None:
        st = self._state
        return st.proposed if isinstance(st, Leader) else None

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def min_insync_replicas(self) -> int:
        return self._min_isr

    def follower_state(self, replica_id: int) -> ReplicaState | None:
        """A copy-free view for tests and diagnostics (do not mutate)."""
        return self._remotes.get(replica_id)

    # ================================================================= configuration
    def set_min_insync_replicas(self, value: int) -> None:
        """``min.insync.replicas`` (a topic config, dynamic, REQ-R8)."""
        self._min_isr = value

    # ================================================================= controller state
    def apply_leader_and_isr(self, s: LeaderAndIsr, now_ms: int) -> Transition:
        """Apply the state znode (REQ-R13): become leader, follower or offline, or adopt
        an ISR the controller changed at the current epoch."""
        st = self._state
        t = Transition()
        self._replicas = tuple(s.replicas)
        if s.leader_epoch < st.leader_epoch or (
            s.leader_epoch == st.leader_epoch
            and s.zk_version <= st.zk_version
            and not isinstance(st, Offline)
        ):
            return t  # stale, or already applied
        if s.leader == self.local_broker_id:
            if isinstance(st, (Leader, Fenced)) and s.leader_epoch == st.leader_epoch:
                # Same epoch, newer znode: the controller's ISR change, or our own.
                return self._adopt(controller_changed_isr(st, s))
            self._become_leader(s, now_ms)
            t.state_changed = True
            t.stop_fetching = True
            t.hw_moved = self._maybe_advance_hw()
            t.note = f"leader at epoch {s.leader_epoch}, isr {list(s.isr)}"
            return t
        if s.leader >= 0:
            if (
                isinstance(st, Follower)
                and st.leader_epoch == s.leader_epoch
                and st.leader_id == s.leader
            ):
                self._state = replace(st, isr=tuple(s.isr), zk_version=s.zk_version)
                return t
            self._state = Follower(
                leader_id=s.leader,
                leader_epoch=s.leader_epoch,
                isr=tuple(s.isr),
                zk_version=s.zk_version,
            )
            self._epoch_start_offset = None
            self._remotes.clear()
            t.state_changed = True
            t.start_fetching_from = s.leader
            t.note = f"follower of {s.leader} at epoch {s.leader_epoch}"
            return t
        self._state = Offline(
            leader_epoch=max(st.leader_epoch, s.leader_epoch), zk_version=s.zk_version
        )
        self._epoch_start_offset = None
        t.state_changed = True
        t.stop_fetching = True
        if s.leader_epoch >= 0:
            # Epoch -1: no state znode yet -- a partition just created, whose assignment a
            # broker sees before the controller's first election. Not news, and a line
            # per replica was ~8 % of a broker's CPU creating 10,000 partitions (issue 29,
            # docs/benchmarks.md); its first leader is logged.
            t.note = f"offline at epoch {s.leader_epoch} (no leader)"
        return t

    def remove(self) -> Transition:
        """The replica is being deleted (topic deleted or reassigned away): it serves
        nothing from now on, and every waiter must re-check."""
        st = self._state
        self._state = Offline(leader_epoch=st.leader_epoch, zk_version=st.zk_version)
        self._remotes.clear()
        return Transition(state_changed=True, stop_fetching=True)

    def _become_leader(self, s: LeaderAndIsr, now_ms: int) -> None:
        self._state = Leader(
            leader_epoch=s.leader_epoch,
            isr=tuple(s.isr),
            zk_version=s.zk_version,
            controller_epoch=s.controller_epoch,
        )
        self._remotes.reset(s.replicas, s.isr, self.local_broker_id, now_ms)
        # REQ-R20: the new leader keeps its log; its HW never exceeds its LEO.
        self._hw = min(max(self._hw, self.log.log_start_offset), self.log.log_end_offset)
        self._epoch_start_offset = self.log.log_end_offset

    # ================================================================= request checks
    def check_epoch(self, current: int) -> None:
        epoch = self._state.leader_epoch
        if 0 <= current < epoch:
            raise KafkaError(ErrorCode.fenced_leader_epoch, f"epoch {current} < {epoch}")
        if current >= 0 and current > epoch:
            raise KafkaError(ErrorCode.unknown_leader_epoch, f"epoch {current} > {epoch}")

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise the KIP-320 error a client expects when this replica cannot serve it."""
        self.check_epoch(current_leader_epoch)
        if type(self._state) is not Leader:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.local_broker_id} does not lead {self.name}",
            )

    # ================================================================= leader: appends
    def maybe_start_verification(self, producer_id: int) -> tuple[object, bool]:
        """KIP-890 (Kafka's Partition.maybeStartTransactionVerification): the guard for
        a transactional append of ``producer_id`` here, and whether the transaction
        coordinator must confirm the partition first (no transaction ongoing)."""
        return self.producers.maybe_start_verification(producer_id)

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        required_acks: int,
        now_ms: int,
        *,
        allow_control: bool = False,
        from_coordinator: bool = False,
        require_verification: bool = True,
        verification_guard: object | None = None,
        single_batch: bool = False,
    ) -> AppendInfo:
        """Validate, deduplicate (idempotent producers), assign offsets, write once.
        The caller wakes the fetches waiting on this partition; ``acks=1`` and the HW
        are its business too (``hw_after_append``). ``require_verification``: KIP-890
        is on (by default, as in Kafka, so no caller can forget it): a transactional batch
        opens a transaction only with the guard of its verification
        (``verification_guard``, from ``maybe_start_verification``; see
        ``ProducerStateManager.check_verified``). ``single_batch``: a client's Produce
        (v3+), which must carry exactly one batch."""
        st = self._state
        if type(st) is not Leader:
            self.check_leader()
        assert isinstance(st, Leader)
        if required_acks == -1 and len(st.isr) < self._min_isr:
            # REQ-R8: refuse before appending, so nothing half-replicated is left behind.
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"ISR {list(st.isr)} smaller than min.insync.replicas={self._min_isr}",
            )
        lg = self.log
        headers = parse_batches(
            records, verify_crc=True, max_batch_bytes=lg.config.max_message_bytes, strict_count=True
        )
        if single_batch:
            check_batch_count(headers)
        idempotent, dup = check_producer_state(
            self.producers,
            headers,
            from_coordinator=from_coordinator,
            require_verification=require_verification,
            verification_guard=verification_guard,
            log_start_offset=lg.log_start_offset,
        )
        if dup is not None:
            return dup
        if lg.config.compact:
            require_keys(records, self.name)  # REQ-R25; compacted topics only
        leo_before = lg.log_end_offset
        # The log rewrites baseOffset/partitionLeaderEpoch in these same headers.
        info = lg.append_as_leader(
            records, st.leader_epoch, now_ms, headers=headers, allow_control=allow_control
        )
        if st.leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(st.leader_epoch, leo_before)  # REQ-R19
        if idempotent:
            record_appended(lg, self.producers, headers, records)
        return info

    def hw_after_append(self) -> bool:
        """After an append: with an ISR of one (or acks counted on the leader alone) the
        HW follows the LEO at once. Returns True if it moved."""
        return self._maybe_advance_hw()

    def _maybe_advance_hw(self) -> bool:
        """HW = min LEO over the maximal ISR (REQ-R16). Returns True if it moved."""
        st = self._state
        if type(st) is not Leader:
            return False
        assert isinstance(st, Leader)
        lg = self.log
        # odradek.ack.fsync: the leader counts its *durable* LEO (followers report durable
        # fetch offsets), so everything below the HW is on every ISR member's disk.
        own = lg.durable_offset if lg.config.ack_fsync else lg.log_end_offset
        hw = self._remotes.min_log_end_offset(st.maximal_isr, self.local_broker_id, own)
        if hw is None:
            return False  # an ISR member we have not heard from yet holds the HW
        if hw > self._hw:
            self._hw = hw
            return True
        return False

    def on_log_flushed(self) -> bool:
        """odradek.ack.fsync: the durable offset moved; the HW may follow."""
        return self._maybe_advance_hw()

    # ================================================================= leader: followers
    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1
    ) -> Transition:
        """A follower's fetch offset is its LEO (REQ-R16). May move the HW and propose
        adding the follower to the ISR (REQ-R6, R21)."""
        t = Transition()
        st = self._state
        if replica_id not in self._replicas or not isinstance(st, (Leader, Fenced)):
            return t
        remotes = self._remotes
        fs, t.log_start_moved = remotes.update_fetch_state(
            replica_id, fetch_offset, self.log.log_end_offset, now_ms, log_start_offset
        )
        if type(st) is not Leader:
            return t
        assert isinstance(st, Leader)
        if replica_id not in st.isr:
            remotes.consider(replica_id, self._qualifies(replica_id, fs))
        t.hw_moved = self._maybe_advance_hw()
        if remotes.has_candidates_outside(st.isr):
            t.isr_write = self._propose_isr(now_ms, None)
        return t

    def follower_recorded_at(self, replica_id: int, fetch_offset: int) -> bool:
        """Has this leader taken ``replica_id``'s fetch at ``fetch_offset`` into account?
        Not when the follower is not (yet) one of its replicas -- a reassignment's new
        replica can fetch before the leader learns the new replica set -- and then its
        fetches must keep visiting the partition, or it never joins the ISR."""
        return replica_id in self._replicas and self._remotes.recorded_at(replica_id, fetch_offset)

    def note_idle_fetch(self, replica_id: int, fetch_offset: int, at_ms: int) -> None:
        """A follower's fetch session skipped this partition as idle (its last read here
        found the follower at the log end, and nothing changed since): the follower's
        fetch at ``at_ms`` counts as one at ``fetch_offset``, the log end then -- it was
        caught up (REQ-R6), without visiting the partition on every fetch (issue 13)."""
        if not isinstance(self._state, (Leader, Fenced)):
            return
        fs = self._remotes.note_idle(replica_id, fetch_offset, at_ms)
        if fs is None:
            return  # not what this follower last reported here: decide on its next fetch
        st = self._state
        # A caught-up follower outside the ISR rejoins at the next ISR check (REQ-R6), as
        # a fetch read here would make it a candidate: an idle session never reads the
        # partition again (``RemoteReplicas.note_idle`` says when the credit counts).
        if type(st) is Leader and replica_id not in st.isr and at_ms > fs.fetch_ms_out_of_isr:
            if self._qualifies(replica_id, fs):
                self._remotes.consider(replica_id, True)

    def _isr_eligible(self, replica_id: int) -> bool:
        e = self._eligibility
        return e is None or e.eligible(replica_id)

    def forget_candidates(self, brokers: frozenset[int]) -> None:
        """These brokers left the leader's image (or began a controlled shutdown): a fetch
        they sent before is no reason to add them to the ISR, even once they are back
        (a restarted broker may have lost its log); only a later fetch qualifies them."""
        self._remotes.forget(brokers)

    def _epoch_start(self) -> int:
        """Where the current leader epoch starts in the epoch cache (0 if unknown)."""
        epoch = self._state.leader_epoch
        return next((o for e, o in self.epochs.entries if e == epoch), 0)

    def _qualifies(self, replica_id: int, fs: ReplicaState) -> bool:
        """May this follower outside the ISR join it, as of its latest fetch? Kafka also
        requires it to have reached the start of the current leader epoch, so a replica
        is never in sync on the strength of an old epoch."""
        return (
            fs.log_end_offset >= self._hw
            and fs.log_end_offset >= self._epoch_start()
            and self._isr_eligible(replica_id)
        )

    def isr_full_and_in_sync(self, now_ms: int, lag_max_ms: int) -> bool:
        """Leader, every replica in the ISR and caught up within ``lag_max_ms`` as far as
        the leader knows: the periodic check has nothing to propose, and the idle
        sessions' credits (which only move followers' caught-up times forward) cannot
        change that, so they wait until a member looks behind (issue 29: idle CPU)."""
        st = self._state
        return type(st) is Leader and self._remotes.all_caught_up(
            self._replicas, st.isr, self.local_broker_id, now_ms, lag_max_ms
        )

    def maybe_shrink_isr(self, now_ms: int, lag_max_ms: int) -> IsrWrite | None:
        """The periodic check (REQ-R6): propose dropping members that have not caught up
        for ``replica.lag.time.max.ms`` (and adding qualified candidates)."""
        return self._propose_isr(now_ms, lag_max_ms)

    def _propose_isr(self, now_ms: int, lag_max_ms: int | None) -> IsrWrite | None:
        st = self._state
        if not isinstance(st, Leader) or st.proposed is not None:
            return None  # one ISR write at a time
        proposed = self._remotes.propose_isr(
            local_broker_id=self.local_broker_id,
            replicas=self._replicas,
            isr=st.isr,
            high_watermark=self._hw,
            # Only a candidate outside the ISR needs it (a scan of the epoch cache).
            epoch_start=self._epoch_start() if self._remotes.has_candidates_outside(st.isr) else 0,
            now_ms=now_ms,
            lag_max_ms=lag_max_ms,
            eligible=self._isr_eligible,
        )
        if proposed is None:
            return None
        self._state, write = propose(st, proposed, self.topic, self.index, self.local_broker_id)
        return write

    # ================================================================= leader: ISR writes
    def isr_write_succeeded(self, write: IsrWrite, new_zk_version: int) -> Transition:
        update = after_write_succeeded(self._state, write, new_zk_version)
        return Transition() if update is None else self._adopt(update)

    def isr_write_failed(self, write: IsrWrite, current: LeaderAndIsr | None) -> Transition:
        """``current`` is the znode now (the conditional write lost) or None (ZooKeeper
        unreachable: the outcome is unknown)."""
        update = after_write_failed(self._state, write, current, self.local_broker_id)
        return Transition() if update is None else self._adopt(update)

    def _adopt(self, update: IsrUpdate) -> Transition:
        """Adopt a state decided by ``isr_changes``; the HW is recomputed after it."""
        self._state = update.state
        if update.joined:
            self._remotes.forget(update.joined)
        if update.left_from is not None:
            self._remotes.mark_removed(update.left_from, update.state.isr)
        t = update.transition
        t.hw_moved = self._maybe_advance_hw()
        return t

    def reassert_isr(self) -> IsrWrite | None:
        """A fenced leader re-writes its committed ISR (``start_reassertion``)."""
        started = start_reassertion(self._state, self.topic, self.index, self.local_broker_id)
        if started is None:
            return None
        self._state, write = started
        return write

    def reassert_finished(self) -> None:
        """The re-assertion's outcome was applied (or was stale): allow the next one."""
        st = self._state
        if isinstance(st, Fenced) and st.reasserting:
            self._state = replace(st, reasserting=False)

    # ================================================================= leader: completion
    def produce_completion(self, last_offset: int, durable: bool = False) -> ErrorCode | None:
        """Delayed produce (REQ-R7, R8; Kafka's checkEnoughReplicasReachOffset): None while
        waiting, else the partition's answer."""
        if type(self._state) is not Leader:
            return ErrorCode.not_leader_or_follower
        if durable:  # acks=1 on an odradek.ack.fsync topic: the leader's own fsync
            return _NO_ERROR if self.log.durable_offset > last_offset else None
        if self._hw <= last_offset:
            return None
        if len(self._state.isr) < self._min_isr:
            # REQ-R8: the record is stored but the ISR shrank while we waited.
            return ErrorCode.not_enough_replicas_after_append
        return _NO_ERROR

    def acks_all_satisfied(self, last_offset: int) -> bool:
        """REQ-R7: acks=all completes once every ISR member has the batch (HW past it)."""
        return self._hw > last_offset

    def low_watermark(self) -> int:
        """Smallest log start offset over the ISR (-1 while an ISR follower's is unknown):
        DeleteRecords answers once it reaches the requested offset (Kafka's
        lowWatermarkIfLeader, which takes alive replicas; out-of-ISR replicas are left out
        here so a dead follower cannot hold every DeleteRecords until its timeout)."""
        return self._remotes.low_watermark(
            self.isr, self.local_broker_id, self.log.log_start_offset
        )

    def delete_records_to(self, offset: int) -> int:
        """DeleteRecords on the leader (API 21): ``-1`` means the HW; past the HW is
        OFFSET_OUT_OF_RANGE; the log start offset moves (never backwards). Returns the
        offset the log start must reach on every ISR replica (the answer's low_watermark).
        Kafka refuses it unless cleanup.policy contains "delete"."""
        self.check_leader()
        if not self.log.config.delete:
            raise KafkaError(
                ErrorCode.policy_violation,
                f"Records of partition {self.name} can not be deleted due to the configured policy",
            )
        target = self._hw if offset == -1 else offset
        if target < 0 or target > self._hw:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"cannot delete records of {self.name} up to {offset}: the "
                f"high watermark is {self._hw}",
            )
        self.log.maybe_increment_log_start_offset(target, "DeleteRecords")
        return max(target, self.log.log_start_offset)

    # ================================================================= reads
    def readable_end(self, committed_only: bool) -> int:
        """Where a fetch may read up to: the HW for consumers, the LEO for followers."""
        return self._hw if committed_only else self.log.log_end_offset

    def lagging_epoch_start(self) -> int | None:
        """KIP-207: a new leader's HW can lag the offset its epoch started at (its
        followers' fetch positions are not known yet, and a restarted replica's HW
        checkpoint is stale). Until the HW reaches that start, the answer to a client's
        "latest" may be below one a previous leader gave: this returns the start offset
        while that holds, so that ListOffsets answers OFFSET_NOT_AVAILABLE (retriable)
        instead of letting offsets move back; None once the HW caught up."""
        start = self._epoch_start_offset
        return start if start is not None and start > self._hw else None

    @property
    def last_stable_offset(self) -> int:
        """KIP-98: read_committed consumers read below the first offset of the oldest
        open transaction, and never past the HW."""
        first = self.producers.first_unstable_offset()
        return self._hw if first is None else min(first, self._hw)

    def aborted_transactions(
        self, start: int, returned: FileSlice, lso: int
    ) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping what a
        read_committed fetch from ``start`` returns (the log's .txnindex files). As in
        Kafka, the search stops past the returned batches, not at the LSO: a consumer
        far behind is sent the transactions of its fetch, not of the whole backlog."""
        end = min(lso, self.log.fetch_upper_bound(start, returned))
        return [(a.producer_id, a.first_offset) for a in self.log.collect_aborted(start, end)]

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_batch: bool,
        committed_only: bool = True,
        read_committed: bool = False,
    ) -> FileSlice | None:
        """Consumers read below the HW only (REQ-R16), read_committed ones below the
        LSO (KIP-98); followers up to the LEO."""
        max_offset = self._hw if committed_only else self.log.log_end_offset
        if read_committed:
            max_offset = self.last_stable_offset
        if offset >= max_offset and offset <= self.log.log_end_offset:
            return None
        return self.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)

    # ================================================================= follower side
    def append_as_follower(
        self,
        records: bytes | bytearray | memoryview,
        leader_hw: int,
        now_ms: int,
        leader_log_start: int = -1,
    ) -> AppendInfo | None:
        """Append a fetch response's batches with the leader's offsets and epochs, then
        take ``min(leader HW, own LEO)`` as the HW and follow the leader's log start."""
        info = None
        lg = self.log
        if records:
            headers = parse_batches(records, verify_crc=True)
            if (
                headers
                and lg.log_end_offset == lg.log_start_offset
                and headers[0].base_offset < lg.log_end_offset <= headers[0].last_offset
            ):
                # Kafka's UnexpectedAppendOffsetException case: our empty log starts at the
                # leader's log start offset, which falls inside the first batch it sent
                # (DeleteRecords cuts batches). Restart the log at the batch's base; the
                # next response's log_start_offset moves our log start up again.
                self.truncate_fully_and_start_at(headers[0].base_offset)
            if headers:
                info = append_fetched(lg, self.epochs, self.producers, records, headers, now_ms)
        hw = min(leader_hw, lg.log_end_offset)
        if hw > self._hw:
            self._hw = hw
        if leader_log_start > lg.log_start_offset:
            # Kafka: a follower follows its leader's log start offset (retention,
            # DeleteRecords), bounded by its own HW; whole segments below it go at the
            # next retention check.
            lg.maybe_increment_log_start_offset(
                min(leader_log_start, self._hw), "leader's log start offset"
            )
        return info

    def truncate_to(
        self,
        offset: int,
        *,
        reason: str = "truncation",
        leader_id: int = -1,
        leader_epoch: int = -1,
    ) -> None:
        """REQ-R20: drop a suffix the leader does not have (never below our log start).

        The suffix is first copied, durably, to the lost-records ledger with ``reason``
        and the new leader's id/epoch (``quarantine``), before any removal of it."""
        if self.ledger is not None and offset < self.log.log_end_offset:
            quarantine(
                self.ledger,
                self.log,
                self.topic,
                self.index,
                offset,
                reason=reason,
                leader_id=leader_id,
                leader_epoch=leader_epoch,
                high_watermark=self._hw,
            )
        truncate_suffix(self.log, self.epochs, self.producers, offset)
        self._hw = min(self._hw, self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """A follower whose LEO is below its leader's log start offset (retention or
        DeleteRecords removed what it would fetch next): Kafka's handleOffsetOutOfRange
        empties the log and restarts it at the leader's log start. Nothing is quarantined:
        every local record is below the leader's log start, hence below its HW --
        committed, and deliberately deleted there."""
        self.log.truncate_fully_and_start_at(offset)
        self.epochs.clear()
        self._hw = offset
