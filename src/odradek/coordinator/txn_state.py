"""Transaction state: pure decisions of the transaction coordinator (KIP-98, KIP-360).

Modelled on Kafka's TransactionMetadata and TransactionCoordinator. One ``TxnMetadata``
per transactional id. Every request is decided here without I/O: the decision is either
an error code or a ``Transition`` (the record to write to ``__transaction_state``); the
asyncio layer (``transaction_coordinator``) writes it with acks=all and only then applies
it (``TxnMetadata.apply``) -- Kafka's pendingState: while a write is in flight, other
requests for the id get CONCURRENT_TRANSACTIONS and retry.

State machine (Kafka's TransactionState byte ids are the enum values)::

    Empty --AddPartitions--> Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
                                     --EndTxn(abort) /
                                       timeout / fencing--> PrepareAbort --markers--> CompleteAbort
    Complete* / Empty --InitProducerId--> Empty (epoch + 1)   (a new transaction may begin)

Fencing (KIP-98): InitProducerId bumps the epoch; requests carrying an older epoch get
PRODUCER_FENCED, and the markers of the bumped epoch fence the zombie's produce requests
at the partitions (INVALID_PRODUCER_EPOCH). An InitProducerId that finds a transaction
Ongoing aborts it first with a bumped epoch (Kafka's PrepareEpochFence) and answers
CONCURRENT_TRANSACTIONS; the client retries and gets the next epoch.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

from odradek.coordinator.state_table import IllegalStateError, TransitionTable
from odradek.coordinator.txn_codec import TxnLogValue
from odradek.errors import ErrorCode

logger = logging.getLogger(__name__)

__all__ = [
    "TxnState",
    "TxnMetadata",
    "Transition",
    "MAX_EPOCH",
    "TXN_TRANSITIONS",
    "IllegalStateError",
]

MAX_EPOCH = 32767 - 1  # Kafka: a new producer id when the epoch would reach Short.MaxValue


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's DescribeTransactions/ListTransactions use."""
        return "".join(w.capitalize() for w in self.name.split("_"))


PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

_T = TxnState
# Kafka's TransactionState.validPreviousStates (TransactionMetadata.scala, before
# KIP-890's second part let PrepareAbort follow Empty/Complete*): every decision below is
# checked against it before its record is written (``_value``, Kafka's
# prepareTransitionTo) and again when applied. DEAD: the id's tombstone (expiration).
# Replaying the log is not a transition (``from_value`` takes the state as written).
TXN_TRANSITIONS: TransitionTable[TxnState] = TransitionTable(
    "transaction",
    {
        _T.EMPTY: frozenset({_T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}),
        _T.ONGOING: frozenset({_T.ONGOING, _T.EMPTY, _T.COMPLETE_COMMIT, _T.COMPLETE_ABORT}),
        _T.PREPARE_COMMIT: frozenset({_T.ONGOING}),
        _T.PREPARE_ABORT: frozenset({_T.ONGOING, _T.PREPARE_EPOCH_FENCE}),
        _T.COMPLETE_COMMIT: frozenset({_T.PREPARE_COMMIT}),
        _T.COMPLETE_ABORT: frozenset({_T.PREPARE_ABORT}),
        _T.DEAD: frozenset({_T.EMPTY, _T.COMPLETE_ABORT, _T.COMPLETE_COMMIT}),
        _T.PREPARE_EPOCH_FENCE: frozenset({_T.ONGOING}),
    },
    ErrorCode.invalid_txn_state,
)


@dataclass(frozen=True, slots=True)
class Transition:
    """A record to write; ``apply`` it once it is replicated."""

    value: TxnLogValue


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: bool = False  # a write for this id is in flight (Kafka's pendingState)

    # ------------------------------------------------------------ log records
    @classmethod
    def from_value(cls, txn_id: str, v: TxnLogValue) -> TxnMetadata:
        return cls(
            txn_id,
            v.producer_id,
            v.producer_epoch,
            v.timeout_ms,
            TxnState(v.status),
            set(v.partitions or ()),
            v.start_ms,
            v.last_update_ms,
        )

    def _value(
        self,
        state: TxnState,
        now_ms: int,
        *,
        epoch: int | None = None,
        producer_id: int | None = None,
        partitions: set[tuple[str, int]] | None = None,
        start_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> Transition:
        """The record of a transition to ``state``; IllegalStateError if the table does
        not allow it from the current state."""
        TXN_TRANSITIONS.check(self.state, state)
        parts = self.partitions if partitions is None else partitions
        return Transition(
            TxnLogValue(
                self.producer_id if producer_id is None else producer_id,
                self.producer_epoch if epoch is None else epoch,
                self.timeout_ms if timeout_ms is None else timeout_ms,
                int(state),
                None if state is TxnState.EMPTY else tuple(sorted(parts)),
                now_ms,
                self.start_ms if start_ms is None else start_ms,
            )
        )

    def apply(self, t: Transition) -> None:
        """The written transition takes effect (checked again: the state must not have
        moved since ``_value`` decided it; Kafka's completeTransitionTo)."""
        v = t.value
        TXN_TRANSITIONS.check(self.state, TxnState(v.status))
        self.producer_id, self.producer_epoch = v.producer_id, v.producer_epoch
        self.timeout_ms, self.state = v.timeout_ms, TxnState(v.status)
        self.partitions = set(v.partitions or ())
        self.start_ms, self.last_update_ms = v.start_ms, v.last_update_ms

    # ------------------------------------------------------------ requests
    def _check_producer(self, producer_id: int, epoch: int) -> ErrorCode:
        if producer_id != self.producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if epoch != self.producer_epoch:
            return ErrorCode.producer_fenced  # a zombie with an older epoch (KIP-98)
        if self.pending:
            return ErrorCode.concurrent_transactions
        return ErrorCode.none

    def init_producer_id(
        self,
        timeout_ms: int,
        producer_id: int,
        epoch: int,
        now_ms: int,
        new_producer_id: int | None,
    ) -> ErrorCode | Transition:
        """InitProducerId for an existing id. ``producer_id``/``epoch`` come from the
        request (KIP-360: -1 unless the producer recovers); ``new_producer_id`` is a fresh
        id to use when the epoch is exhausted."""
        if self.pending or self.state in PREPARE:
            return ErrorCode.concurrent_transactions
        if producer_id >= 0 and (producer_id, epoch) != (self.producer_id, self.producer_epoch):
            return ErrorCode.producer_fenced
        if self.state is TxnState.ONGOING:
            return ErrorCode.concurrent_transactions  # the caller aborts it first (fence)
        if self.producer_epoch + 1 >= MAX_EPOCH and new_producer_id is not None:
            return self._value(
                TxnState.EMPTY,
                now_ms,
                epoch=0,
                producer_id=new_producer_id,
                partitions=set(),
                start_ms=-1,
                timeout_ms=timeout_ms,
            )
        return self._value(
            TxnState.EMPTY,
            now_ms,
            epoch=self.producer_epoch + 1,
            partitions=set(),
            start_ms=-1,
            timeout_ms=timeout_ms,
        )

    def needs_epoch_bump(self) -> bool:
        return self.producer_epoch + 1 >= MAX_EPOCH

    def add_partitions(
        self, producer_id: int, epoch: int, parts: set[tuple[str, int]], now_ms: int
    ) -> ErrorCode | Transition | None:
        """AddPartitionsToTxn / AddOffsetsToTxn. None: nothing to write (all present)."""
        err = self._check_producer(producer_id, epoch)
        if err is not ErrorCode.none:
            return err
        if self.state in PREPARE:
            return ErrorCode.concurrent_transactions
        if self.state is TxnState.ONGOING and parts <= self.partitions:
            return None
        start = self.start_ms if self.state is TxnState.ONGOING else now_ms
        return self._value(
            TxnState.ONGOING, now_ms, partitions=self.partitions | parts, start_ms=start
        )

    def verify_partitions(
        self, producer_id: int, epoch: int, parts: set[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 verification (AddPartitionsToTxn v4+, verify_only), asked by a leader
        before a transactional batch opens a transaction on one of its partitions.
        Kafka's order of checks; a write in flight is not a reason to refuse (the
        leader's append checks again). A partition not in the transaction -- never
        added, or the transaction already ended: a late or stray batch -- gets
        TRANSACTION_ABORTABLE."""
        if producer_id != self.producer_id:
            err = ErrorCode.invalid_producer_id_mapping
        elif epoch != self.producer_epoch:
            err = ErrorCode.producer_fenced
        elif self.state in PREPARE:
            err = ErrorCode.concurrent_transactions
        else:
            return {
                tp: ErrorCode.none if tp in self.partitions else ErrorCode.transaction_abortable
                for tp in parts
            }
        return dict.fromkeys(parts, err)

    def end_txn(
        self, producer_id: int, epoch: int, commit: bool, now_ms: int
    ) -> ErrorCode | Transition | None:
        """EndTxn. None: already complete in the requested way (a retry): success."""
        if producer_id != self.producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if epoch != self.producer_epoch:
            return ErrorCode.producer_fenced
        if self.pending:
            return ErrorCode.concurrent_transactions
        want_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        want_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if self.state is TxnState.ONGOING:
            return self._value(want_prepare, now_ms)
        if self.state is want_complete:
            return None
        if self.state is want_prepare:
            return ErrorCode.concurrent_transactions
        return ErrorCode.invalid_txn_state

    def abort_for_fence(self, now_ms: int) -> Transition | None:
        """Timeout or a new producer instance: abort the Ongoing transaction with a bumped
        epoch, so the old producer is fenced (Kafka's PrepareEpochFence -> PrepareAbort)."""
        if self.state is not TxnState.ONGOING or self.pending:
            return None
        return self._value(TxnState.PREPARE_ABORT, now_ms, epoch=self.producer_epoch + 1)

    def complete(self, now_ms: int) -> Transition | None:
        """After every marker is written: PrepareX -> CompleteX with no partitions."""
        if self.state is TxnState.PREPARE_COMMIT:
            return self._value(TxnState.COMPLETE_COMMIT, now_ms, partitions=set())
        if self.state is TxnState.PREPARE_ABORT:
            return self._value(TxnState.COMPLETE_ABORT, now_ms, partitions=set())
        return None

    # ------------------------------------------------------------ timers
    def timed_out(self, now_ms: int) -> bool:
        """transaction.timeout.ms: an Ongoing transaction older than its timeout."""
        return (
            self.state is TxnState.ONGOING
            and not self.pending
            and self.start_ms >= 0
            and now_ms > self.start_ms + self.timeout_ms
        )

    def expired(self, now_ms: int, expiration_ms: int) -> bool:
        """transactional.id.expiration.ms: an idle id (no transaction in flight)."""
        return (
            not self.pending
            and self.state in (TxnState.EMPTY, *COMPLETE)
            and now_ms > self.last_update_ms + expiration_ms
        )
