"""The replica manager's write side (Kafka's ReplicaManager.appendRecords and
deleteRecords): Produce (REQ-R7, R8) and DeleteRecords (REQ-R24) as leader, and the
internal acks=all appends of the group coordinator.

* **Produce**: ``append_records`` appends each partition's records as leader and, for
  ``acks=all`` (or acks=1 on an ``odradek.ack.fsync`` topic), parks a ``DelayedProduce``
  in the produce purgatory; errors are per partition, in each entry's result. KIP-890:
  ``start_txn_verification`` hands out the guards a transactional append must bring.
* **DeleteRecords**: ``delete_records`` moves the log start offset and parks a
  ``DelayedDeleteRecords`` until the ISR followed.

``ProduceServing`` is an object the replica manager owns (``ReplicaManager.producing``),
like ``FetchServing`` (fetch_serving.py), and it sees the replicas only through the narrow
view it is constructed with: the hosted partitions (read only), the leader lookup with
its KIP-320 epoch check, the wake-up of a partition's waiters, and the log-start-offset
checkpoint a DeleteRecords writes. The produce and DeleteRecords purgatories and the
record tracer are handed to it. Its two dynamic settings are its own: the KIP-890 switch
(the manager sets it from each image) and the per-topic byte counters (a broker attaches
them once its metrics exist).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.errors import ErrorCode, InvalidRecordsError, KafkaError
from odradek.log_limiter import LogLimiter
from odradek.protocol.produce_response import PartitionProduceResult
from odradek.replication.delayed import (
    DelayedDeleteRecords,
    DelayedProduce,
    PendingDelete,
    PendingProduce,
)
from odradek.replication.replica_logs import TopicPartition, now_ms
from odradek.replication.txn_verification import (
    TxnVerification,
    VerificationGuards,
    start_verifications,
)
from odradek.topics import INTERNAL_TOPICS

if TYPE_CHECKING:
    from odradek.metadata.image import MetadataImage
    from odradek.metrics.stats import BrokerTopicStats
    from odradek.replication.partition import Partition
    from odradek.replication.purgatory import DelayedOperationPurgatory
    from odradek.replication.trace import RecordTracer

logger = logging.getLogger(__name__)

__all__ = ["ProduceEntry", "ProduceServing"]

_REJECTED_LOG = LogLimiter(burst=5, interval_s=60.0)


@dataclass(slots=True)
class ProduceEntry:
    """One partition of a produce request; ``result`` is filled in (the response)."""

    topic: str
    records: Any  # bytes | memoryview | None
    result: PartitionProduceResult


class ProduceServing:
    """Produce, internal appends and DeleteRecords (see the module docstring)."""

    def __init__(
        self,
        *,
        partitions: Mapping[TopicPartition, Partition],
        leader_partition: Callable[[str, int, MetadataImage, int], Partition],
        wake: Callable[[TopicPartition], None],
        checkpoint_log_start_offsets: Callable[[], None],
        produce_purgatory: DelayedOperationPurgatory[TopicPartition],
        delete_records_purgatory: DelayedOperationPurgatory[TopicPartition],
        tracer: RecordTracer,
        txn_verification_enabled: bool,
    ) -> None:
        self.partitions = partitions
        self.leader_partition = leader_partition
        self._wake = wake
        self._checkpoint_log_start_offsets = checkpoint_log_start_offsets
        self.produce_purgatory = produce_purgatory
        self.delete_records_purgatory = delete_records_purgatory
        self.tracer = tracer
        # KIP-890 (transaction.partition.verification.enable, dynamic: the manager
        # follows it from each image): a transactional append then needs its guard.
        self.txn_verification_enabled = txn_verification_enabled
        # Kafka's BytesInPerSec counters: only on a broker with a metrics.listener (the
        # broker attaches them once its metrics exist; None: nothing counted).
        self.topic_stats: BrokerTopicStats | None = None

    def start_txn_verification(
        self, appends: Iterable[tuple[TopicPartition, int, int]]
    ) -> list[TxnVerification]:
        """KIP-890 (Kafka's maybeStartTransactionVerificationForPartitions): for each
        transactional append (partition, producer id, epoch), the guard the append must
        bring, grouped by producer, with the partitions the transaction coordinator must
        confirm first (``TxnVerification.verify``). Empty when verification is off; a
        partition not led here is left to the append's own error."""
        if not self.txn_verification_enabled:
            return []
        led: list[tuple[Partition, int, int]] = []
        for tp, pid, epoch in appends:
            p = self.partitions.get(tp)
            if p is not None and p.is_leader:
                led.append((p, pid, epoch))
        return start_verifications(led)

    def append_records(
        self,
        entries: list[ProduceEntry],
        acks: int,
        timeout_s: float,
        image: MetadataImage,
        *,
        internal: bool = False,
        verification_guards: VerificationGuards | None = None,
    ) -> DelayedProduce | None:
        """Append each entry's records as leader (REQ-R7). Errors are per partition, in
        each entry's result. Returns the delayed produce to await for ``acks=all`` (or
        acks=1 on an ``odradek.ack.fsync`` topic), None when every answer is known.
        ``verification_guards``: KIP-890, each transactional append's guard
        (``start_txn_verification``); with verification on, a transactional batch
        without a valid one opens no transaction (INVALID_TXN_STATE)."""
        guards = verification_guards or {}
        require = self.txn_verification_enabled
        t_now = now_ms()
        pending: list[PendingProduce] = []
        tracer = self.tracer
        stats = self.topic_stats
        for e in entries:
            res = e.result
            ts = None
            try:
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks}")
                if e.records is None:
                    raise KafkaError(ErrorCode.invalid_record, "null records")
                if not internal and e.topic in INTERNAL_TOPICS:
                    # Kafka (ReplicaManager.appendToLocalLog): clients never write to
                    # internal topics; the coordinators append to them locally.
                    raise KafkaError(
                        ErrorCode.invalid_topic_exception,
                        f"Cannot append to internal topic {e.topic}",
                    )
                p = self.leader_partition(e.topic, res.index, image, -1)
                if stats is not None:
                    # Only topics this broker hosts get series: a client naming random
                    # topics must not grow the broker's memory (or its scrapes).
                    ts = stats.topic(e.topic)
                    ts.produce_requests += 1
                info = p.append_as_leader(
                    e.records,
                    acks,
                    t_now,
                    require_verification=require,
                    verification_guard=guards.get((e.topic, res.index)),
                    single_batch=True,
                )
                res.base_offset = info.first_offset
                res.log_append_time_ms = info.log_append_time
                res.log_start_offset = p.log.log_start_offset
                if ts is not None:  # Kafka's BytesInPerSec / MessagesInPerSec
                    ts.bytes_in += info.size_bytes
                    ts.messages_in += info.last_offset - info.first_offset + 1
                tp = (e.topic, res.index)
                if p.hw_after_append() or info.num_batches:
                    self._wake(tp)  # followers' long polls (and acks=all if ISR == {me})
                if tracer.enabled:
                    tracer.appended_as_leader(
                        tp, info.first_offset, info.last_offset, info.max_timestamp
                    )
                if acks == -1:
                    pp = PendingProduce(p, info.last_offset, res)
                    if not pp.check():
                        pending.append(pp)
                elif (
                    acks == 1
                    and p.log.config.ack_fsync
                    and p.log.durable_offset <= info.last_offset
                ):
                    # odradek.ack.fsync: acks=1 answers after the leader's (group) fsync.
                    pending.append(PendingProduce(p, info.last_offset, res, durable=True))
            except KafkaError as err:
                res.error_code = int(err.code)
                res.error_message = err.message or None
                res.base_offset = -1
                if ts is not None:
                    ts.failed_produce_requests += 1
                if isinstance(err, InvalidRecordsError):
                    res.record_errors = err.record_errors
                if err.code not in (
                    ErrorCode.not_leader_or_follower,
                    ErrorCode.unknown_topic_or_partition,
                ):
                    # Rate-limited per error code: a client repeating a bad produce must
                    # not be able to fill the log disk.
                    _REJECTED_LOG.log(
                        logger,
                        logging.INFO,
                        err.code,
                        "produce to %s-%d rejected: %s",
                        e.topic,
                        res.index,
                        err,
                    )
            except Exception as err:  # never let one partition take the broker down
                logger.exception("produce to %s-%d failed", e.topic, res.index)
                if ts is not None:
                    ts.failed_produce_requests += 1
                res.error_code = int(ErrorCode.unknown_server_error)
                res.error_message = str(err)[:200]
                res.base_offset = -1
        if not pending:
            return None
        op = DelayedProduce(timeout_s, pending)
        keys = [(pp.partition.topic, pp.partition.index) for pp in pending]
        self.produce_purgatory.try_complete_else_watch(op, keys)
        return op

    async def append_and_wait(
        self,
        tp: TopicPartition,
        records: bytes,
        timeout_s: float,
        *,
        allow_control: bool = False,
        verification_guard: object | None = None,
    ) -> tuple[ErrorCode, int]:
        """An internal acks=all append (the group coordinator's ``__consumer_offsets``):
        (error, first offset) once replicated, or the error that stopped it.
        ``verification_guard``: a transactional offset commit's (KIP-890,
        ``start_txn_verification``)."""
        part = self.partitions.get(tp)
        if part is None:
            return ErrorCode.not_leader_or_follower, -1
        try:
            info = part.append_as_leader(
                records,
                -1,
                now_ms(),
                allow_control=allow_control,
                from_coordinator=True,
                require_verification=self.txn_verification_enabled,
                verification_guard=verification_guard,
            )
        except KafkaError as e:
            return e.code, -1
        res = PartitionProduceResult(index=tp[1], error_code=0, base_offset=info.first_offset)
        part.hw_after_append()
        self._wake(tp)
        pp = PendingProduce(part, info.last_offset, res)
        if not pp.check():
            op = DelayedProduce(timeout_s, [pp])
            self.produce_purgatory.try_complete_else_watch(op, [tp])
            await op.done
        return ErrorCode(res.error_code), info.first_offset

    def delete_records(
        self,
        requests: list[tuple[str, list[PendingDelete]]],
        offsets: dict[tuple[str, int], int],
        timeout_s: float,
        image: MetadataImage,
    ) -> DelayedDeleteRecords | None:
        """Move each partition's log start offset (REQ-R24, API 21) and return the
        delayed operation to await until the ISR followed (None if all are known)."""
        moved = False
        for topic, plist in requests:
            for st in plist:
                try:
                    if topic in INTERNAL_TOPICS:
                        # Kafka (ReplicaManager.deleteRecordsOnLocalLog): clients never
                        # move the log start of internal topics.
                        raise KafkaError(
                            ErrorCode.invalid_topic_exception,
                            f"Cannot delete records of internal topic {topic}",
                        )
                    p = self.leader_partition(topic, st.index, image, -1)
                    before = p.log.log_start_offset
                    st.target = p.delete_records_to(offsets[(topic, st.index)])
                    st.partition = p
                    if p.log.log_start_offset != before:
                        self._wake((topic, st.index))  # followers learn the log start
                    moved |= p.log.log_start_offset != before
                    logger.info(
                        "DeleteRecords %s-%d: log start offset %d -> %d",
                        topic,
                        st.index,
                        before,
                        p.log.log_start_offset,
                    )
                except KafkaError as e:
                    st.error = e.code
                except Exception:
                    logger.exception("DeleteRecords on %s-%d failed", topic, st.index)
                    st.error = ErrorCode.unknown_server_error
        if moved:
            try:
                self._checkpoint_log_start_offsets()
            except Exception:
                logger.exception("log-start-offset checkpoint after DeleteRecords failed")
        pending = [st for _, plist in requests for st in plist]
        op = DelayedDeleteRecords(timeout_s, pending)
        keys = [
            (st.partition.topic, st.partition.index) for st in pending if st.partition is not None
        ]
        if self.delete_records_purgatory.try_complete_else_watch(op, keys):
            return None
        return op
