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
* **ISR** (REQ-R6). A follower is *caught up* at time T if its fetch at T asked for the
  leader's LEO, or asked for at least the LEO the leader had at its previous fetch (then
  it was caught up at the previous fetch's time) -- Kafka's rule. An ISR member not caught
  up for ``replica.lag.time.max.ms`` is removed (dead or slow); a follower whose fetch
  reached the HW and the start of the current epoch is added. One write at a time, each
  conditional on the znode version. A lost write whose znode still names us at this epoch
  (the controller changed the ISR) is adopted; any other failure **fences** the leader
  (REQ-P4 and REQ-P6) until a re-assertion succeeds or the controller speaks.
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

from odradek.errors import ErrorCode, InvalidRecordsError, KafkaError
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
from odradek.storage.batch import BatchHeader, parse_batches
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import AppendInfo, FileSlice, Log
from odradek.storage.log_chunks import read_chunks
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.truncation_ledger import TruncationLedger
from odradek.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

__all__ = ["Partition", "Role", "rebuild_producer_state"]

_NO_ERROR: Final = ErrorCode.none


class Partition:
    __slots__ = ("topic", "index", "name", "log", "epochs", "producers", "ledger",
                 "local_broker_id", "_replicas", "_state", "_hw", "_min_isr", "_followers",
                 "_expand_candidates", "_epoch_start_offset", "_eligibility")

    def __init__(self, topic: str, index: int, log: Log, replicas: list[int] | tuple[int, ...],
                 local_broker_id: int, epochs: LeaderEpochCache,
                 producers: ProducerStateManager, *, ledger: TruncationLedger | None = None,
                 high_watermark: int = 0, min_insync_replicas: int = 1,
                 eligibility: IsrEligibility | None = None) -> None:
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
        self._followers: dict[int, ReplicaState] = {}
        # Followers outside the ISR whose latest fetch qualified them: only a fetch can
        # qualify a replica for the ISR, never stale knowledge (Kafka's maybeExpandIsr).
        self._expand_candidates: set[int] = set()
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
        return self._followers.get(replica_id)

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
                s.leader_epoch == st.leader_epoch and s.zk_version <= st.zk_version
                and not isinstance(st, Offline)):
            return t  # stale, or already applied
        if s.leader == self.local_broker_id:
            if isinstance(st, (Leader, Fenced)) and s.leader_epoch == st.leader_epoch:
                # Same epoch, newer znode: an ISR change made by the controller, which
                # also proves the znode still names us -- a fenced leader resumes -- or
                # our own ISR write, seen through the watch before the write's answer
                # (which will then be stale and ignored).
                own_write = (isinstance(st, Leader) and st.proposed == tuple(s.isr)
                             and s.zk_version == st.zk_version + 1)
                self._state = Leader(leader_epoch=s.leader_epoch, isr=tuple(s.isr),
                                     zk_version=s.zk_version,
                                     controller_epoch=s.controller_epoch)
                self._expand_candidates -= set(s.isr)
                self._mark_removed(st.isr, tuple(s.isr))
                t.state_changed = isinstance(st, Fenced) or own_write
                t.hw_moved = self._maybe_advance_hw()
                if own_write:
                    # As isr_write_succeeded would have: waiters re-check, and the change
                    # is this leader's (IsrShrinksPerSec / IsrExpandsPerSec count it
                    # whichever of the two arrives first).
                    t.note = f"ISR {list(st.isr)} -> {list(s.isr)}"
                    t.isr_change = (st.isr, tuple(s.isr))
                elif t.state_changed:
                    t.note = "state znode still names us leader; accepting writes"
                return t
            self._become_leader(s, now_ms)
            t.state_changed = True
            t.stop_fetching = True
            t.hw_moved = self._maybe_advance_hw()
            t.note = f"leader at epoch {s.leader_epoch}, isr {list(s.isr)}"
            return t
        if s.leader >= 0:
            if isinstance(st, Follower) and st.leader_epoch == s.leader_epoch \
                    and st.leader_id == s.leader:
                self._state = replace(st, isr=tuple(s.isr), zk_version=s.zk_version)
                return t
            self._state = Follower(leader_id=s.leader, leader_epoch=s.leader_epoch,
                                   isr=tuple(s.isr), zk_version=s.zk_version)
            self._epoch_start_offset = None
            self._followers = {}
            self._expand_candidates = set()
            t.state_changed = True
            t.start_fetching_from = s.leader
            t.note = f"follower of {s.leader} at epoch {s.leader_epoch}"
            return t
        self._state = Offline(leader_epoch=max(st.leader_epoch, s.leader_epoch),
                              zk_version=s.zk_version)
        self._epoch_start_offset = None
        t.state_changed = True
        t.stop_fetching = True
        t.note = f"offline at epoch {s.leader_epoch} (no leader)"
        return t

    def remove(self) -> Transition:
        """The replica is being deleted (topic deleted or reassigned away): it serves
        nothing from now on, and every waiter must re-check."""
        st = self._state
        self._state = Offline(leader_epoch=st.leader_epoch, zk_version=st.zk_version)
        self._followers = {}
        return Transition(state_changed=True, stop_fetching=True)

    def _become_leader(self, s: LeaderAndIsr, now_ms: int) -> None:
        self._state = Leader(leader_epoch=s.leader_epoch, isr=tuple(s.isr),
                             zk_version=s.zk_version, controller_epoch=s.controller_epoch)
        self._expand_candidates = set()
        # Followers get the benefit of the doubt for one lag period (Kafka does the same).
        self._followers = {r: ReplicaState(last_caught_up_ms=now_ms, last_fetch_ms=now_ms,
                                           fetch_ms_out_of_isr=-1 if r in s.isr else now_ms)
                           for r in s.replicas if r != self.local_broker_id}
        # REQ-R20: the new leader keeps its log; its HW never exceeds its LEO.
        self._hw = min(max(self._hw, self.log.log_start_offset), self.log.log_end_offset)
        self._epoch_start_offset = self.log.log_end_offset

    # ================================================================= request checks
    def check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch >= 0:
            epoch = self._state.leader_epoch
            if current_leader_epoch < epoch:
                raise KafkaError(ErrorCode.fenced_leader_epoch,
                                 f"epoch {current_leader_epoch} < {epoch}")
            if current_leader_epoch > epoch:
                raise KafkaError(ErrorCode.unknown_leader_epoch,
                                 f"epoch {current_leader_epoch} > {epoch}")

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise the KIP-320 error a client expects when this replica cannot serve it."""
        self.check_epoch(current_leader_epoch)
        if type(self._state) is not Leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.local_broker_id} does not lead {self.name}")

    # ================================================================= leader: appends
    def maybe_start_verification(self, producer_id: int) -> tuple[object, bool]:
        """KIP-890 (Kafka's Partition.maybeStartTransactionVerification): the guard for
        a transactional append of ``producer_id`` here, and whether the transaction
        coordinator must confirm the partition first (no transaction ongoing)."""
        return self.producers.maybe_start_verification(producer_id)

    def append_as_leader(self, records: bytes | bytearray | memoryview, required_acks: int,
                         now_ms: int, *, allow_control: bool = False,
                         from_coordinator: bool = False,
                         require_verification: bool = True,
                         verification_guard: object | None = None,
                         single_batch: bool = False) -> AppendInfo:
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
            raise KafkaError(ErrorCode.not_enough_replicas,
                             f"ISR {list(st.isr)} smaller than min.insync.replicas="
                             f"{self._min_isr}")
        lg = self.log
        headers = parse_batches(records, verify_crc=True,
                                max_batch_bytes=lg.config.max_message_bytes,
                                strict_count=True)
        if single_batch and len(headers) != 1:
            # Kafka's ProduceRequest.validateRecords. The request handler's checks (the
            # TransactionalId's ACL, KIP-890 verification) read the first batch only: a
            # plain batch followed by a transactional one would open a transaction no
            # coordinator knows of, pinning the LSO for good.
            raise KafkaError(ErrorCode.invalid_record,
                             "Produce requests are only allowed to contain exactly one "
                             "record batch per partition" if headers else
                             "Produce requests must have at least one record batch per "
                             "partition")
        idempotent = False
        for h in headers:
            if h.producer_id >= 0:
                idempotent = True
                break
        if idempotent:
            # Coordinator appends (transaction markers, transactional offset commits)
            # carry no sequence numbers: Kafka validates them only for client produces
            # (AppendOrigin.Coordinator). A transactional offset commit is verified.
            dup = None if from_coordinator else self.producers.check(headers)
            if require_verification and dup is None:
                self.producers.check_verified(headers, verification_guard)
            if dup is not None:
                # A retry of a batch we already have: success with its original offsets.
                return AppendInfo(first_offset=dup.first_offset, last_offset=dup.last_offset,
                                  max_timestamp=-1, offset_of_max_timestamp=-1,
                                  log_append_time=-1, num_batches=0, size_bytes=0,
                                  log_start_offset=lg.log_start_offset)
        if lg.config.compact:
            _require_keys(records, self.name)  # REQ-R25; compacted topics only
        leo_before = lg.log_end_offset
        # The log rewrites baseOffset/partitionLeaderEpoch in these same headers.
        info = lg.append_as_leader(records, st.leader_epoch, now_ms, headers=headers,
                                   allow_control=allow_control)
        if st.leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(st.leader_epoch, leo_before)  # REQ-R19
        if idempotent:
            self._update_producers(headers, records)
        return info

    def _update_producers(self, headers: list[BatchHeader],
                          records: bytes | bytearray | memoryview) -> None:
        """Appended batches into the producer state (leaders and followers alike); the
        transactions their ABORT markers completed into the log's .txnindex."""
        aborted = self.producers.update(headers, records)
        if aborted:
            self.log.record_aborted(aborted)

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
        hw = lg.durable_offset if lg.config.ack_fsync else lg.log_end_offset
        me = self.local_broker_id
        followers = self._followers
        for rid in st.maximal_isr:
            if rid == me:
                continue
            fs = followers.get(rid)
            if fs is None or fs.log_end_offset < 0:
                return False  # an ISR member we have not heard from yet holds the HW
            if fs.log_end_offset < hw:
                hw = fs.log_end_offset
        if hw > self._hw:
            self._hw = hw
            return True
        return False

    def on_log_flushed(self) -> bool:
        """odradek.ack.fsync: the durable offset moved; the HW may follow."""
        return self._maybe_advance_hw()

    # ================================================================= leader: followers
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int,
                                    log_start_offset: int = -1) -> Transition:
        """A follower's fetch offset is its LEO (REQ-R16). May move the HW and propose
        adding the follower to the ISR (REQ-R6, R21)."""
        t = Transition()
        st = self._state
        if replica_id not in self._replicas or not isinstance(st, (Leader, Fenced)):
            return t
        fs = self._followers.get(replica_id)
        if fs is None:
            fs = self._followers[replica_id] = ReplicaState()
        if log_start_offset > fs.log_start_offset:
            t.log_start_moved = True  # DeleteRecords may complete
            fs.log_start_offset = log_start_offset
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            fs.last_caught_up_ms = now_ms
        elif fetch_offset >= fs.leader_leo_at_last_fetch and fs.last_fetch_ms:
            fs.last_caught_up_ms = max(fs.last_caught_up_ms, fs.last_fetch_ms)
        fs.log_end_offset = fetch_offset
        fs.leader_leo_at_last_fetch = leo
        fs.last_fetch_ms = now_ms
        if type(st) is not Leader:
            return t
        assert isinstance(st, Leader)
        if replica_id not in st.isr:
            if (fetch_offset >= self._hw and self._caught_up_in_epoch(fs)
                    and self._isr_eligible(replica_id)):
                self._expand_candidates.add(replica_id)
            else:
                self._expand_candidates.discard(replica_id)
        t.hw_moved = self._maybe_advance_hw()
        if self._expand_candidates - set(st.isr):
            t.isr_write = self._propose_isr(now_ms, None)
        return t

    def follower_recorded_at(self, replica_id: int, fetch_offset: int) -> bool:
        """Has this leader taken ``replica_id``'s fetch at ``fetch_offset`` into account?
        Not when the follower is not (yet) one of its replicas -- a reassignment's new
        replica can fetch before the leader learns the new replica set -- and then its
        fetches must keep visiting the partition, or it never joins the ISR."""
        fs = self._followers.get(replica_id)
        return (replica_id in self._replicas and fs is not None
                and fs.log_end_offset == fetch_offset)

    def note_idle_fetch(self, replica_id: int, fetch_offset: int, at_ms: int) -> None:
        """A follower's fetch session skipped this partition as idle (its last read here
        found the follower at the log end, and nothing changed since): the follower's
        fetch at ``at_ms`` counts as one at ``fetch_offset``, the log end then -- it was
        caught up (REQ-R6), without visiting the partition on every fetch (issue 13)."""
        if not isinstance(self._state, (Leader, Fenced)):
            return
        fs = self._followers.get(replica_id)
        if fs is None or fs.log_end_offset != fetch_offset:
            return  # not what this follower last reported here: decide on its next fetch
        if at_ms > fs.last_caught_up_ms:
            fs.last_caught_up_ms = at_ms
        if at_ms > fs.last_fetch_ms:
            fs.last_fetch_ms = at_ms
        st = self._state
        # A caught-up follower outside the ISR rejoins at the next ISR check (REQ-R6), as
        # its fetch would make it a candidate if the partition were read: its last fetch
        # here may have come while the write removing it was in flight (it then still
        # counted as a member), and an idle session never reads the partition again. The
        # simulator's seed 308 kept such a follower out of the ISR for good.
        if (type(st) is Leader and replica_id not in st.isr
                and at_ms > fs.fetch_ms_out_of_isr
                and fetch_offset >= self._hw and self._caught_up_in_epoch(fs)
                and self._isr_eligible(replica_id)):
            self._expand_candidates.add(replica_id)

    def _isr_eligible(self, replica_id: int) -> bool:
        e = self._eligibility
        return e is None or e.eligible(replica_id)

    def forget_candidates(self, brokers: frozenset[int]) -> None:
        """These brokers left the leader's image (or began a controlled shutdown): a fetch
        they sent before is no reason to add them to the ISR, even once they are back
        (a restarted broker may have lost its log); only a later fetch qualifies them."""
        self._expand_candidates -= brokers

    def _mark_removed(self, old_isr: tuple[int, ...], new_isr: tuple[int, ...]) -> None:
        """Followers that just left the committed ISR: only a fetch after this may bring
        them back through an idle credit (``note_idle_fetch``)."""
        for r in old_isr:
            if r not in new_isr:
                fs = self._followers.get(r)
                if fs is not None:
                    fs.fetch_ms_out_of_isr = fs.last_fetch_ms

    def _caught_up_in_epoch(self, fs: ReplicaState) -> bool:
        # Kafka also requires the follower to have reached the start of the current
        # leader epoch, so a replica is never in sync on the strength of an old epoch.
        epoch = self._state.leader_epoch
        start = next((o for e, o in self.epochs.entries if e == epoch), 0)
        return fs.log_end_offset >= start

    def maybe_shrink_isr(self, now_ms: int, lag_max_ms: int) -> IsrWrite | None:
        """The periodic check (REQ-R6): propose dropping members that have not caught up
        for ``replica.lag.time.max.ms`` (and adding qualified candidates)."""
        return self._propose_isr(now_ms, lag_max_ms)

    def _propose_isr(self, now_ms: int, lag_max_ms: int | None) -> IsrWrite | None:
        st = self._state
        if not isinstance(st, Leader) or st.proposed is not None:
            return None  # one ISR write at a time
        me = self.local_broker_id
        new = [me]
        for r in self._replicas:
            if r == me:
                continue
            if r in st.isr:
                fs = self._followers.get(r)
                if lag_max_ms is None or (fs is not None
                                          and now_ms - fs.last_caught_up_ms <= lag_max_ms):
                    new.append(r)
            elif r in self._expand_candidates:
                fs = self._followers.get(r)
                if not self._isr_eligible(r):
                    # KIP-841: its broker is gone or stopping (see forget_candidates)
                    self._expand_candidates.discard(r)
                elif fs is None or fs.log_end_offset < self._hw \
                        or not self._caught_up_in_epoch(fs):
                    # In sync when it fetched, but the HW has moved past it since (the
                    # proposal waited for a write in flight, or for the periodic check):
                    # records below the HW it lacks were committed without it, so it
                    # joins only once it has them (Kafka decides on the follower's LEO
                    # against the HW now). The simulator lost an acknowledged record when
                    # such a member was elected (--real-controller --partitions 3, seed 9).
                    self._expand_candidates.discard(r)
                else:
                    new.append(r)
        order = {b: i for i, b in enumerate(self._replicas)}
        new.sort(key=lambda b: order.get(b, len(order)))
        if new == sorted(st.isr, key=lambda b: order.get(b, len(order))):
            return None
        proposed = tuple(new)
        self._state = replace(st, proposed=proposed)
        return IsrWrite(self.topic, self.index, me, st.leader_epoch, proposed,
                        st.controller_epoch, st.zk_version)

    # ================================================================= leader: ISR writes
    def isr_write_succeeded(self, write: IsrWrite, new_zk_version: int) -> Transition:
        t = Transition()
        st = self._state
        if isinstance(st, Leader) and st.proposed == write.isr \
                and st.leader_epoch == write.leader_epoch and st.zk_version == write.zk_version:
            self._state = Leader(leader_epoch=st.leader_epoch, isr=write.isr,
                                 zk_version=new_zk_version,
                                 controller_epoch=st.controller_epoch)
            self._expand_candidates -= set(write.isr)
            self._mark_removed(st.isr, write.isr)
            t.hw_moved = self._maybe_advance_hw()
            # A shrink can only help acks=all waiters via the HW; an expand can turn an
            # ISR below min.insync.replicas into one that is not: both re-check.
            t.state_changed = True
            t.note = f"ISR {list(st.isr)} -> {list(write.isr)}"
            t.isr_change = (st.isr, write.isr)
        elif isinstance(st, Fenced) and st.reasserting and st.leader_epoch == \
                write.leader_epoch and st.zk_version == write.zk_version:
            self._state = Leader(leader_epoch=st.leader_epoch, isr=write.isr,
                                 zk_version=new_zk_version,
                                 controller_epoch=st.controller_epoch)
            t.state_changed = True
            t.hw_moved = self._maybe_advance_hw()
            t.note = "state znode still names us leader; accepting writes again"
        # Otherwise a newer state was applied meanwhile: the result is stale.
        return t

    def isr_write_failed(self, write: IsrWrite, current: LeaderAndIsr | None) -> Transition:
        """``current`` is the znode now (the conditional write lost) or None (ZooKeeper
        unreachable: the outcome is unknown)."""
        t = Transition()
        st = self._state
        if not isinstance(st, (Leader, Fenced)) or st.leader_epoch != write.leader_epoch \
                or st.zk_version != write.zk_version:
            return t  # a newer state was applied meanwhile
        if isinstance(st, Leader) and st.proposed != write.isr:
            return t
        if (current is not None and current.leader == self.local_broker_id
                and current.leader_epoch == st.leader_epoch):
            # The controller changed the ISR meanwhile; adopt it and decide again.
            self._state = Leader(leader_epoch=st.leader_epoch, isr=tuple(current.isr),
                                 zk_version=current.zk_version,
                                 controller_epoch=st.controller_epoch)
            self._mark_removed(st.isr, tuple(current.isr))
            t.state_changed = isinstance(st, Fenced)
            t.hw_moved = self._maybe_advance_hw()
            t.note = (f"ISR write conflicted; adopted {list(current.isr)} "
                      f"(version {current.zk_version})")
            return t
        # REQ-P4 and REQ-P6: we cannot record the ISR change, so we may have been
        # replaced. Stop accepting writes until ZooKeeper says again that we lead.
        self._state = Fenced(leader_epoch=st.leader_epoch, isr=st.isr,
                             zk_version=st.zk_version, controller_epoch=st.controller_epoch)
        t.state_changed = True
        t.note = (
            f"ISR update to {list(write.isr)} failed ("
            + ("ZooKeeper unreachable" if current is None else
               f"state now leader {current.leader} epoch {current.leader_epoch}")
            + "); no longer accepting writes")
        return t

    def reassert_isr(self) -> IsrWrite | None:
        """A fenced leader re-writes its committed ISR: success proves the state znode
        still names it at this epoch, so it may accept writes again."""
        st = self._state
        if not isinstance(st, Fenced) or st.reasserting:
            return None
        self._state = replace(st, reasserting=True)
        return IsrWrite(self.topic, self.index, self.local_broker_id, st.leader_epoch,
                        st.isr, st.controller_epoch, st.zk_version)

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
        low = self.log.log_start_offset
        for rid in self.isr:
            if rid == self.local_broker_id:
                continue
            fs = self._followers.get(rid)
            low = min(low, fs.log_start_offset if fs is not None else -1)
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
        target = self._hw if offset == -1 else offset
        if target < 0 or target > self._hw:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"cannot delete records of {self.name} up to {offset}: the "
                             f"high watermark is {self._hw}")
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

    def aborted_transactions(self, start: int, returned: FileSlice,
                             lso: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping what a
        read_committed fetch from ``start`` returns (the log's .txnindex files). As in
        Kafka, the search stops past the returned batches, not at the LSO: a consumer
        far behind is sent the transactions of its fetch, not of the whole backlog."""
        end = min(lso, self.log.fetch_upper_bound(start, returned))
        return [(a.producer_id, a.first_offset) for a in self.log.collect_aborted(start, end)]

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool,
             committed_only: bool = True, read_committed: bool = False
             ) -> FileSlice | None:
        """Consumers read below the HW only (REQ-R16), read_committed ones below the
        LSO (KIP-98); followers up to the LEO."""
        max_offset = self._hw if committed_only else self.log.log_end_offset
        if read_committed:
            max_offset = self.last_stable_offset
        if offset >= max_offset and offset <= self.log.log_end_offset:
            return None
        return self.log.read(offset, max_bytes, max_offset=max_offset,
                             min_one_batch=min_one_batch)

    # ================================================================= follower side
    def append_as_follower(self, records: bytes | bytearray | memoryview, leader_hw: int,
                           now_ms: int, leader_log_start: int = -1) -> AppendInfo | None:
        """Append a fetch response's batches with the leader's offsets and epochs, then
        take ``min(leader HW, own LEO)`` as the HW and follow the leader's log start."""
        info = None
        lg = self.log
        if records:
            headers = parse_batches(records, verify_crc=True)
            if (headers and lg.log_end_offset == lg.log_start_offset
                    and headers[0].base_offset < lg.log_end_offset <= headers[0].last_offset):
                # Kafka's UnexpectedAppendOffsetException case: our empty log starts at the
                # leader's log start offset, which falls inside the first batch it sent
                # (DeleteRecords cuts batches). Restart the log at the batch's base; the
                # next response's log_start_offset moves our log start up again.
                self.truncate_fully_and_start_at(headers[0].base_offset)
            if headers:
                info = lg.append_as_follower(records, now_ms, headers=headers)
                latest = self.epochs.latest_epoch
                for h in headers:
                    if h.partition_leader_epoch > latest:
                        self.epochs.assign(h.partition_leader_epoch, h.base_offset)
                        latest = h.partition_leader_epoch
                # A new leader still deduplicates, and serves the aborted transactions.
                self._update_producers(headers, records)
        hw = min(leader_hw, lg.log_end_offset)
        if hw > self._hw:
            self._hw = hw
        if leader_log_start > lg.log_start_offset:
            # Kafka: a follower follows its leader's log start offset (retention,
            # DeleteRecords), bounded by its own HW; whole segments below it go at the
            # next retention check.
            lg.maybe_increment_log_start_offset(min(leader_log_start, self._hw),
                                                "leader's log start offset")
        return info

    def truncate_to(self, offset: int, *, reason: str = "truncation", leader_id: int = -1,
                    leader_epoch: int = -1) -> None:
        """REQ-R20: drop a suffix the leader does not have (never below our log start).

        The suffix is first copied, durably, to the lost-records ledger with ``reason``
        and the new leader's id/epoch (``quarantine``)."""
        aborted_above: list[AbortedTxn] = []
        if offset < self.log.log_end_offset:
            self.quarantine(offset, reason=reason, leader_id=leader_id,
                            leader_epoch=leader_epoch)
            offset = max(offset, self.log.log_start_offset)
            aborted_above = self.log.aborted_entries(offset)  # they go with the log
            self.log.truncate_to(offset)
        self.epochs.truncate_from_end(self.log.log_end_offset)
        self.producers.truncate_to(self.log.log_end_offset, aborted_above)
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

    def quarantine(self, offset: int, *, reason: str, leader_id: int = -1,
                   leader_epoch: int = -1) -> None:
        """Copy [offset, LEO) to the lost-records ledger, durably, before any removal of
        it (``truncate_to``). A ledger that cannot be written (disk full) is logged, not
        fatal: a follower that can never truncate would never rejoin."""
        if self.ledger is None or offset >= self.log.log_end_offset:
            return
        try:
            self.ledger.record(self.log, self.topic, self.index, offset, reason=reason,
                               new_leader_id=leader_id, new_leader_epoch=leader_epoch,
                               high_watermark=self._hw)
        except Exception:
            logger.exception("%s: could not quarantine [%d, %d) before truncating",
                             self.name, offset, self.log.log_end_offset)


def _require_keys(records: bytes | bytearray | memoryview, name: str) -> None:
    """Kafka's LogValidator: a compacted topic rejects records without a key (the cleaner
    could never dedupe them). Decodes record keys -- done only for cleanup.policy=compact
    topics, so the ordinary produce path stays header-only."""
    from odradek.storage.cleaner import keyless_records

    try:
        keyless = keyless_records(records if isinstance(records, bytes) else bytes(records))
    except KafkaError:
        raise
    except Exception as e:  # undecodable compressed payload
        raise KafkaError(ErrorCode.corrupt_message, f"cannot decode records: {e!r}") from e
    if keyless:
        message = (f"Compacted topic cannot accept message without key in topic "
                   f"partition {name}.")
        # KIP-467: name the records, so the client fails only those with INVALID_RECORD.
        raise InvalidRecordsError(message, [(i, message) for i in keyless])


def rebuild_producer_state(producers: ProducerStateManager, log: Log) -> None:
    """Newest snapshot plus the batches after it (never a rescan of the whole log)."""
    start = max(producers.load_latest_snapshot(log.log_end_offset), log.log_start_offset)
    if producers.unindexed:  # a snapshot written before .txnindex files existed
        log.record_aborted(producers.unindexed)
        producers.unindexed = []
    for chunk in read_chunks(log, start):
        # Entries the .txnindex already has (written before the restart) are skipped.
        log.record_aborted(producers.update(chunk.headers, chunk.data))
    producers.dirty = False


# Re-exported for callers that build batches for the log directly.
__all__ += ["BatchHeader"]
