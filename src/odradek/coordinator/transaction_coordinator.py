"""The transaction coordinator: asyncio around the pure ``txn_state`` decisions (KIP-98).

Kafka's TransactionCoordinator + TransactionStateManager. A transactional id belongs to
partition ``abs(java_hashCode(id)) % partitions`` of the compacted ``__transaction_state``
topic (like groups on ``__consumer_offsets``); the leader of that partition is the id's
coordinator. Every state change is a record (``txn_codec``, Kafka's TransactionLog
format) appended with acks=all before it takes effect or is answered, so a new leader of
the partition -- after a failover -- replays the partition and knows every transaction.
Transactions it finds in PrepareCommit/PrepareAbort are resumed: the markers are sent
again (they are idempotent at the partitions: a second marker for a closed transaction
changes nothing) and the transaction is completed.

Timers (one ticker): Ongoing transactions older than their transaction.timeout.ms are
aborted with a bumped epoch (the producer is fenced; Kafka's proactive abort), and ids
idle for transactional.id.expiration.ms are removed with a tombstone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from odradek.configdefs import setting
from odradek.coordinator.group_coordinator import OFFSETS_TOPIC
from odradek.coordinator.runtime import (
    APPEND_ERRORS,
    ClusterView,
    CoordinatorRuntime,
    CoordinatorTopic,
    LoadStats,
    create_internal_topic,
)
from odradek.coordinator.txn_codec import (
    TRANSACTION_TOPIC,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from odradek.coordinator.txn_markers import MARKER_TIMEOUT_S, TxnMarkerChannel
from odradek.coordinator.txn_state import (
    PREPARE,
    TXN_TRANSITIONS,
    IllegalStateError,
    Transition,
    TxnMetadata,
    TxnState,
)
from odradek.coordinator.txn_verifier import TxnVerifier
from odradek.errors import ErrorCode, KafkaError
from odradek.replication.broker_connection import BrokerConnectionPool
from odradek.replication.replica_manager import now_ms
from odradek.storage.batch import CONTROL_BIT
from odradek.storage.records import decode_batch_records, encode_batch

if TYPE_CHECKING:
    from odradek.config import BrokerConfig
    from odradek.coordinator.group_coordinator import GroupCoordinator
    from odradek.coordinator.producer_ids import ProducerIdManager
    from odradek.metadata.image import BrokerInfo, MetadataImage
    from odradek.replication.replica_manager import ReplicaManager
    from odradek.storage.batch import BatchHeader

logger = logging.getLogger(__name__)

__all__ = ["TRANSACTION_TOPIC", "TransactionCoordinator"]

TICK_S = 0.1
_D = TypeVar("_D")
IDLE_TICK_S = 1.0  # the longest sleep of the timer loop


class TxnClusterView(ClusterView, Protocol):
    @property
    def producer_ids(self) -> ProducerIdManager | None: ...


@dataclass(frozen=True, slots=True)
class TxnCoordinatorSettings:
    """The broker settings of the transaction coordinator and its log (names and
    defaults: the table)."""

    max_timeout_ms: int = setting("transaction.max.timeout.ms")
    abort_timed_out_cleanup_interval_ms: int = setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    )
    id_expiration_ms: int = setting("transactional.id.expiration.ms")
    remove_expired_cleanup_interval_ms: int = setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms"
    )
    log_num_partitions: int = setting("transaction.state.log.num.partitions")
    log_replication_factor: int = setting("transaction.state.log.replication.factor")
    log_min_isr: int = setting("transaction.state.log.min.isr")
    log_segment_bytes: int = setting("transaction.state.log.segment.bytes")


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        replicas: ReplicaManager,
        groups: GroupCoordinator,
        cluster: TxnClusterView,
        source_ip: str | None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.replicas = replicas
        self.groups = groups
        self.cluster = cluster
        self.txns: dict[str, TxnMetadata] = {}
        # Which __transaction_state partitions we coordinate, at which epoch; their loads.
        self.runtime: CoordinatorRuntime[_TxnLoader] = CoordinatorRuntime(
            TRANSACTION_TOPIC,
            replicas,
            new_loader=_TxnLoader,
            install=self._install,
            unload=self._unload,
        )
        self.settings = settings = config.settings(TxnCoordinatorSettings)
        self.topic = CoordinatorTopic(
            self.runtime,
            cluster,
            configured_partitions=settings.log_num_partitions,
            create=self._create_topic,
        )
        self.max_timeout_ms = settings.max_timeout_ms
        self.abort_interval_ms = settings.abort_timed_out_cleanup_interval_ms
        self.expiration_ms = settings.id_expiration_ms
        self.expire_interval_ms = settings.remove_expired_cleanup_interval_ms
        self.write_timeout_s = groups.settings.commit_timeout_ms / 1000
        # Requests to other brokers go to their inter-broker listener, in its protocol.
        self.pool = BrokerConnectionPool(
            self._inter_broker_address,
            source_ip,
            f"txn-coordinator-{broker_id}",
            MARKER_TIMEOUT_S,
            security=lambda: replicas.fetchers.security,
        )
        self.markers = TxnMarkerChannel(
            broker_id, replicas, groups, lambda: self.cluster.image, self.pool
        )
        self.verifier = TxnVerifier(broker_id, self, self.pool)
        self._completing: dict[str, asyncio.Task[None]] = {}
        self._ticker: asyncio.Task[None] | None = None

    # ================================================================= lifecycle
    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())
        self.on_metadata()

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self.runtime.stop()
        self.pool.close()

    async def _tick_loop(self) -> None:
        next_abort = next_expire = 0
        while True:
            # Sleep until the next check is due (at most a second, at least a tick): the
            # checks run every few seconds, and a 10 Hz wake-up cost an idle broker CPU.
            due_s = (min(next_abort, next_expire) - now_ms()) / 1000
            await asyncio.sleep(min(max(due_s, TICK_S), IDLE_TICK_S))
            try:
                t = now_ms()
                if t >= next_abort:
                    next_abort = t + self.abort_interval_ms
                    self._abort_timed_out(t)
                if t >= next_expire:
                    next_expire = t + self.expire_interval_ms
                    self._expire_ids(t)
            except Exception:
                logger.exception("transaction timer failed")

    def _abort_timed_out(self, t: int) -> None:
        for tid, m in list(self.txns.items()):
            if m.timed_out(t):
                logger.info(
                    "transaction %s (producer %d epoch %d) timed out after %d ms: aborting",
                    tid,
                    m.producer_id,
                    m.producer_epoch,
                    m.timeout_ms,
                )
                self._spawn(self._fence_and_abort(tid, m))

    def _expire_ids(self, t: int) -> None:
        for tid, m in list(self.txns.items()):
            if m.expired(t, self.expiration_ms):
                self._spawn(self._remove_expired(tid, m))

    def _spawn(self, coro: object) -> None:
        asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]

    def _inter_broker_address(self, broker_id: int) -> tuple[str, int] | None:
        node = self.cluster.image.brokers.get(broker_id)
        return None if node is None else self.replicas.fetchers.address_of(node)

    # ================================================================= ownership
    def num_partitions(self) -> int | None:
        return self.topic.num_partitions()

    def partition_of(self, transactional_id: str) -> int:
        return self.topic.partition_of(transactional_id)

    def on_metadata(self, image: MetadataImage | None = None) -> None:
        """Load the partitions we now lead, unload the others (``CoordinatorRuntime``)."""
        self.runtime.on_metadata(image)

    def _install(self, idx: int, epoch: int, loader: _TxnLoader, stats: LoadStats) -> None:
        """A load finished: its transactions become ours. Loading is not a transition
        (Kafka's loading path sets each id's state as the log has it)."""
        resumed = 0
        for tid, m in loader.values.items():
            if m is None:
                self.txns.pop(tid, None)
                continue
            self.txns[tid] = m
            if m.state in PREPARE:
                # Fail-over (KIP-98): the previous coordinator wrote PrepareCommit/Abort
                # but may not have written every marker; finish the transaction.
                resumed += 1
                self._start_completion(tid, m)
        logger.info(
            "transaction coordinator for %s-%d (epoch %d): %d ids, %d resumed, "
            "%d records in %d ms (longest hold of the event loop %.1f ms)",
            TRANSACTION_TOPIC,
            idx,
            epoch,
            sum(1 for v in loader.values.values() if v is not None),
            resumed,
            stats.records,
            stats.elapsed_s * 1000,
            stats.longest_slice_s * 1000,
        )

    def _unload(self, idx: int) -> None:
        for tid in [t for t in self.txns if self.partition_of(t) == idx]:
            del self.txns[tid]
            task = self._completing.pop(tid, None)
            if task is not None:
                task.cancel()

    def _check_owner(self, transactional_id: str) -> int:
        if not transactional_id:
            raise KafkaError(ErrorCode.invalid_request, "empty transactional id")
        return self.topic.owner_of(transactional_id)

    # ================================================================= FindCoordinator
    def coordinator_for(self, transactional_id: str) -> tuple[int, str, int]:
        return self.topic.coordinator_for(transactional_id)

    def coordinator_node(self, transactional_id: str) -> BrokerInfo | None:
        """The registered broker leading the id's ``__transaction_state`` partition, if
        any (no side effect: FindCoordinator creates the topic, this does not)."""
        return self.topic.coordinator_node(transactional_id)

    async def _create_topic(self) -> None:
        cfg = self.settings
        rf = min(cfg.log_replication_factor, len(self.cluster.image.live_broker_ids()))
        min_isr = min(cfg.log_min_isr, rf)
        await create_internal_topic(
            self.cluster,
            TRANSACTION_TOPIC,
            cfg.log_num_partitions,
            rf,
            {
                "cleanup.policy": "compact",
                "min.insync.replicas": str(min_isr),
                "unclean.leader.election.enable": "false",
                "segment.bytes": str(cfg.log_segment_bytes),
            },
        )

    # ================================================================= persistence
    async def _write(self, tid: str, m: TxnMetadata, t: Transition | None) -> ErrorCode:
        """Append the transition (acks=all), then apply it. ``None``: a tombstone (the
        id goes Dead: only from a state that allows it)."""
        idx = self._check_owner(tid)
        if t is None:
            TXN_TRANSITIONS.check(m.state, TxnState.DEAD)
        epoch = self.runtime.epoch(idx)
        m.pending = True
        try:
            record = (encode_txn_key(tid), None if t is None else encode_txn_value(t.value))
            code, _ = await self.replicas.append_and_wait(
                (TRANSACTION_TOPIC, idx), encode_batch([record]), self.write_timeout_s
            )
        finally:
            m.pending = False
        if code is not ErrorCode.none:
            logger.info("transaction state write for %s failed: %s", tid, code.name)
            return APPEND_ERRORS.get(code, ErrorCode.unknown_server_error)
        if self.runtime.epoch(idx) != epoch or self.txns.get(tid) is not m:
            return ErrorCode.not_coordinator  # lost the partition while waiting
        if t is None:
            del self.txns[tid]
        else:
            m.apply(t)
        return ErrorCode.none

    # ================================================================= requests
    async def init_producer_id(
        self, tid: str, timeout_ms: int, producer_id: int, epoch: int
    ) -> tuple[ErrorCode, int, int]:
        self._check_owner(tid)
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        m = self.txns.get(tid)
        t = now_ms()
        if m is None:
            pid = await self._new_producer_id()
            m = self.txns[tid] = TxnMetadata(tid, pid, -1, timeout_ms)
            tr: ErrorCode | Transition = m._value(
                TxnState.EMPTY, t, epoch=0, partitions=set(), start_ms=-1
            )
        else:
            if m.state is TxnState.ONGOING and not m.pending:
                # A new instance of the producer: abort the zombie's transaction with a
                # bumped epoch first; the client retries on CONCURRENT_TRANSACTIONS.
                self._spawn(self._fence_and_abort(tid, m))
                return ErrorCode.concurrent_transactions, -1, -1
            new_pid = await self._new_producer_id() if m.needs_epoch_bump() else None
            tr = _decide(m, lambda: m.init_producer_id(timeout_ms, producer_id, epoch, t, new_pid))
        if isinstance(tr, ErrorCode):
            return tr, -1, -1
        code = await self._write(tid, m, tr)
        if code is not ErrorCode.none:
            if m.producer_epoch < 0:
                self.txns.pop(tid, None)  # never written: forget the new id
            return code, -1, -1
        return ErrorCode.none, m.producer_id, m.producer_epoch

    async def _new_producer_id(self) -> int:
        ids = self.cluster.producer_ids
        if ids is None:
            raise KafkaError(ErrorCode.coordinator_not_available, "not connected")
        return await asyncio.to_thread(ids.next_id)

    async def add_partitions(
        self, tid: str, producer_id: int, epoch: int, parts: set[tuple[str, int]]
    ) -> ErrorCode:
        self._check_owner(tid)
        m = self.txns.get(tid)
        if m is None:
            return ErrorCode.invalid_producer_id_mapping
        tr = _decide(m, lambda: m.add_partitions(producer_id, epoch, parts, now_ms()))
        if tr is None:
            return ErrorCode.none
        if isinstance(tr, ErrorCode):
            return tr
        return await self._write(tid, m, tr)

    def verify_partitions(
        self, tid: str, producer_id: int, epoch: int, parts: set[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890: is each partition in the producer's ongoing transaction? (Kafka's
        handleVerifyPartitionsInTransaction; ownership errors are per partition too.)"""
        if not tid:
            return dict.fromkeys(parts, ErrorCode.invalid_request)  # as Kafka
        try:
            self._check_owner(tid)
        except KafkaError as e:
            return dict.fromkeys(parts, e.code)
        m = self.txns.get(tid)
        if m is None:
            return dict.fromkeys(parts, ErrorCode.invalid_producer_id_mapping)
        return m.verify_partitions(producer_id, epoch, parts)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        return OFFSETS_TOPIC, self.groups.topic.partition_of(group_id)

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        self._check_owner(tid)
        m = self.txns.get(tid)
        if m is None:
            return ErrorCode.invalid_producer_id_mapping
        tr = _decide(m, lambda: m.end_txn(producer_id, epoch, commit, now_ms()))
        if tr is None:
            return ErrorCode.none
        if isinstance(tr, ErrorCode):
            return tr
        code = await self._write(tid, m, tr)
        if code is ErrorCode.none:
            # Kafka answers EndTxn once PrepareCommit/Abort is in the log: the outcome
            # is decided; the markers follow asynchronously (and survive a failover).
            self._start_completion(tid, m)
        return code

    async def _fence_and_abort(self, tid: str, m: TxnMetadata) -> None:
        tr = m.abort_for_fence(now_ms())
        if tr is None:
            return
        try:
            code = await self._write(tid, m, tr)
        except KafkaError as e:
            code = e.code
        if code is ErrorCode.none:
            self._start_completion(tid, m)

    async def _remove_expired(self, tid: str, m: TxnMetadata) -> None:
        try:
            if await self._write(tid, m, None) is ErrorCode.none:
                logger.info("transactional id %s expired", tid)
        except KafkaError:
            pass

    # ================================================================= markers
    def _start_completion(self, tid: str, m: TxnMetadata) -> None:
        if tid in self._completing and not self._completing[tid].done():
            return
        self._completing[tid] = asyncio.get_running_loop().create_task(self._complete(tid, m))

    async def _complete(self, tid: str, m: TxnMetadata) -> None:
        commit = m.state is TxnState.PREPARE_COMMIT
        idx = self.partition_of(tid)
        loaded_at = self.runtime.epoch(idx)
        coordinator_epoch = -1 if loaded_at is None else loaded_at

        def still_owner() -> bool:
            return self.runtime.epoch(idx) == coordinator_epoch and self.txns.get(tid) is m

        try:
            done = await self.markers.send(
                m.producer_id,
                m.producer_epoch,
                commit,
                coordinator_epoch,
                set(m.partitions),
                still_owner,
            )
            if not done:
                return
            while still_owner():
                tr = m.complete(now_ms())
                if tr is None:
                    return
                code = await self._write(tid, m, tr)
                if code is ErrorCode.none:
                    logger.info(
                        "transaction %s (producer %d epoch %d) %s",
                        tid,
                        m.producer_id,
                        m.producer_epoch,
                        "committed" if commit else "aborted",
                    )
                    return
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            raise
        except KafkaError as e:
            logger.info("completing transaction %s stopped: %s", tid, e)
        except Exception:
            logger.exception("completing transaction %s failed", tid)
        finally:
            if self._completing.get(tid) is asyncio.current_task():
                del self._completing[tid]

    # ================================================================= admin
    def describe(self, tid: str) -> TxnMetadata | None:
        self._check_owner(tid)
        return self.txns.get(tid)

    def list(self) -> tuple[ErrorCode, list[TxnMetadata]]:
        """ListTransactions: while a partition of ours loads, COORDINATOR_LOAD_IN_PROGRESS
        and nothing (Kafka's listTransactionStates)."""
        if self.runtime.loading():
            return ErrorCode.coordinator_load_in_progress, []
        return ErrorCode.none, [
            m
            for tid, m in self.txns.items()
            if self.runtime.epoch(self.partition_of(tid)) is not None
        ]


def _decide(m: TxnMetadata, decision: Callable[[], _D]) -> _D | ErrorCode:
    """A request's decision; a transition the table refuses becomes its error code
    (INVALID_TXN_STATE), never a state change -- as Kafka's IllegalStateException from
    prepareTransitionTo, logged."""
    try:
        return decision()
    except IllegalStateError as e:
        logger.warning(
            "transactional id %s (producer %d epoch %d): %s",
            m.transactional_id,
            m.producer_id,
            m.producer_epoch,
            e,
        )
        return e.code


class _TxnLoader:
    """Folds a ``__transaction_state`` partition: the last value of each transactional id
    (None: a tombstone). Control batches carry no state here."""

    def __init__(self, idx: int) -> None:
        self.values: dict[str, TxnMetadata | None] = {}

    def replay(self, h: BatchHeader, batch: memoryview) -> int:
        if h.attributes & CONTROL_BIT:
            return 0
        n = 0
        for rec in decode_batch_records(batch):
            n += 1
            if rec.key is None:
                continue
            tid = decode_txn_key(rec.key)
            self.values[tid] = (
                None
                if rec.value is None
                else TxnMetadata.from_value(tid, decode_txn_value(rec.value))
            )
        return n
