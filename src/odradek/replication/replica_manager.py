"""The replica manager: this broker's replicas, and requests over many partitions.

It owns the ``Partition`` objects and their logs, and is the one place where replication
decisions (made by ``Partition``, pure) meet I/O (Kafka's ReplicaManager). Its parts,
each in its own module, the way Kafka's ReplicaManager and LogManager divide the work:

* **Metadata** (REQ-R13, here): ``apply_image`` turns each changed
  partition state znode into a ``LeaderAndIsr`` and lets the partition decide; fetchers
  are then restarted once per leader broker for the whole batch of changes, not once per
  partition.
* **Produce** (REQ-R7, R8, ``produce_serving.py``): ``append_records`` appends as leader
  and, for ``acks=all``, parks a ``DelayedProduce`` in the produce purgatory.
* **Fetch** (REQ-R3, R16, R17, ``fetch_serving.py``): ``fetch_messages`` records a
  follower's fetch offset (its LEO: the HW may move), reads whole batches as file slices,
  and parks a ``DelayedFetch`` when fewer than ``min_bytes`` are available.
* **DeleteRecords** (REQ-R24, ``produce_serving.py``): ``delete_records`` moves the log
  start offset and parks a ``DelayedDeleteRecords`` until the ISR followed.
* **Local logs** (``replica_logs.py``): loading at start-up, the checkpoint files,
  retention (Kafka's LogManager part).
* **ISR writes** (REQ-R6, REQ-P4, REQ-P6, here): a partition proposes an ``IsrWrite``; the
  pending writes of all partitions go to the ``IsrStore`` (ZooKeeper, each conditional on
  its znode version) in batches, in a worker thread (``alter_partition``), and each
  partition's outcome is handed back to it (commit, adopt, or fence).

Every event that can complete a delayed operation -- an append, an HW move, a follower's
log start moving, a role change, a truncation -- calls ``_wake(tp)`` (here), which
re-checks the three purgatories for that partition (``odradek.replication.purgatory``).

The produce, fetch and local-log parts are objects the manager owns (``producing``,
``fetching``, ``logs``), each constructed with the narrow view of the replicas it needs
(the hosted partitions read only, the leader lookup, the wake-up, ...) and handed the rest;
the partitions, the purgatories and the metadata transitions stay here. The produce
methods other modules call are thin delegates on the manager.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from odradek.config import topic_override
from odradek.errors import ErrorCode, KafkaError
from odradek.log_manager.flusher import Flusher
from odradek.metadata.image import MetadataImage, PartitionInfo
from odradek.metrics.stats import BrokerTopicStats, IsrStats
from odradek.replication.alter_partition import AlterPartitionManager
from odradek.replication.delayed import (
    DelayedDeleteRecords,
    DelayedFetch,
    DelayedProduce,
    PendingDelete,
)
from odradek.replication.fetch_serving import (
    FetchEntry,
    FetchParams,
    FetchServing,
    session_key,
)
from odradek.replication.fetch_session import FetchContext, FetchSession, FetchSessionCache
from odradek.replication.fetcher import ReplicaFetcherManager
from odradek.replication.leader_endpoint import EndpointFactory
from odradek.replication.partition import Partition, Role
from odradek.replication.partition_state import (
    IsrConflict,
    IsrEligibility,
    IsrOutcome,
    IsrStore,
    IsrStoreUnavailable,
    IsrWrite,
    LeaderAndIsr,
    Transition,
)
from odradek.replication.produce_serving import ProduceEntry, ProduceServing
from odradek.replication.purgatory import DelayedOperationPurgatory
from odradek.replication.quota import (
    ReplicationQuota,
    apply_throttle_rates,
    apply_throttled_replicas,
)
from odradek.replication.replica_log_ops import quarantine
from odradek.replication.replica_logs import (
    HW_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    ReplicaLogs,
    TopicPartition,
    now_ms,
    parse_partition_dir,
)
from odradek.replication.settings import ReplicaManagerSettings
from odradek.replication.trace import RecordTracer
from odradek.replication.txn_verification import (
    TxnVerification,
    VerificationGuards,
    verification_enabled,
)
from odradek.runtime import clock
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.log_chunks import rebuild_producer_state
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.truncation_ledger import TruncationLedger, ledger_root

logger = logging.getLogger(__name__)

# Names other modules import from here (they lived here before the split).
__all__ = [
    "HW_CHECKPOINT",
    "LOG_START_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "ProduceEntry",
    "ReplicaManager",
    "now_ms",
    "parse_partition_dir",
]

FENCED_RETRY_S = 1.0  # a fenced leader re-asserts its ISR at most this often


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_dir: Path,
        log_config_for: Callable[[str], LogConfig],
        settings: ReplicaManagerSettings,
        source_ip: str | None = None,
        isr_store: IsrStore | None = None,
        endpoint_factory: EndpointFactory | None = None,
        tracer: RecordTracer | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log_dir = log_dir
        self.log_config_for = log_config_for
        self.settings = settings
        self.source_ip = source_ip
        # Conditional writes of the state znode (ZooKeeper in a broker); blocking, run in
        # a worker thread.
        self.isr_store = isr_store
        # Pending ISR changes go to the store in batches, one batch in flight (Kafka's
        # AlterPartitionManager): a restart's thousands of ISR expansions share a few
        # ZooKeeper transactions instead of one each (issue 13).
        self.alter_partition: AlterPartitionManager[Partition] | None = (
            AlterPartitionManager(isr_store, self._isr_write_done)
            if isr_store is not None
            else None
        )
        self.tracer = tracer or RecordTracer(0)
        self.fetchers = ReplicaFetcherManager(
            broker_id,
            settings.fetcher,
            endpoint_factory,
            on_progress=self._on_follower_progress,
            tracer=self.tracer,
            source_ip=source_ip,
        )
        # KIP-227 incremental fetch sessions, for followers and consumers alike.
        self.fetch_sessions = FetchSessionCache(
            settings.fetch_session_cache_slots,
            settings.fetch_session_eviction_ms,
            max_partitions=settings.max_partitions,
        )
        # KIP-73 replication throttles (replication/quota.py).
        window_s = float(settings.quota_window_size_seconds)
        windows = settings.quota_window_num
        self.leader_quota = ReplicationQuota(window_s, windows)
        self.follower_quota = ReplicationQuota(window_s, windows)
        self.fetchers.quota = self.follower_quota
        self.partitions: dict[TopicPartition, Partition] = {}
        self.partitions_removed = 0  # ever (odradek.broker.heap unfreezes on one)
        # KIP-841: the brokers this broker's partitions, when leading, may add to an ISR.
        self.isr_eligibility = IsrEligibility()
        # The local logs and their checkpoint files (replica_logs.py; Kafka's LogManager).
        self.logs = ReplicaLogs(
            log_dir=log_dir,
            log_config_for=log_config_for,
            recovery_threads=settings.recovery_threads,
            partitions=self.partitions,
            on_open=self._attach_flusher,
            on_log_start_moved=self._log_start_moved,
        )
        self._fenced_retry: dict[TopicPartition, float] = {}
        # Metrics (odradek.broker.metrics): ISR changes are rare and always counted;
        # per-topic byte counts only when the broker has a metrics.listener (None: off).
        self.isr_stats = IsrStats()
        # Partitions whose waiters must re-check, in the order they were woken (a dict: a
        # set of (topic, partition) iterates in an order PYTHONHASHSEED decides, and the
        # simulator's runs must not depend on it).
        self._woken: dict[TopicPartition, None] = {}
        self._woken_sessions: set[int] = set()  # follower fetch sessions to re-check
        self._wake_scheduled = False
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("Produce")
        )
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory(
            "Fetch"
        )
        # Fetch requests (fetch_serving.py): an object with a narrow view of the replicas.
        self.fetching = FetchServing(
            partitions=self.partitions,
            leader_partition=self.leader_partition,
            apply_transition=self._apply_transition,
            fetch_sessions=self.fetch_sessions,
            fetch_purgatory=self.fetch_purgatory,
            leader_quota=self.leader_quota,
            tracer=self.tracer,
        )
        self.delete_records_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("DeleteRecords")
        )
        # Produce and DeleteRecords (produce_serving.py), the same way.
        self.producing = ProduceServing(
            partitions=self.partitions,
            leader_partition=self.leader_partition,
            wake=self._wake,
            checkpoint_log_start_offsets=self.logs.checkpoint_log_start_offsets,
            produce_purgatory=self.produce_purgatory,
            delete_records_purgatory=self.delete_records_purgatory,
            tracer=self.tracer,
            txn_verification_enabled=settings.txn_verification_enable,
        )
        # Set by the broker before load_logs: fsyncs off the event loop (flush policy,
        # odradek.ack.fsync group commit). None: logs flush inline (tools, tests).
        self._flusher: Flusher | None = None
        # Truncated suffixes are quarantined here, not discarded (the lost-records ledger).
        self.ledger = TruncationLedger(
            ledger_root(log_dir), broker_id, settings.lost_records_retention_bytes
        )
        # Topic overrides each local log's LogConfig was last built from (dynamic topic
        # configs): a change swaps log.config in _apply_partition.
        self._applied_configs: dict[TopicPartition, dict[str, str]] = {}
        # The leader epoch each replica reassigned away from this broker had when it was
        # deleted (see _apply_partition).
        self._moved_away_at: dict[TopicPartition, int] = {}

    @property
    def flusher(self) -> Flusher | None:
        return self._flusher

    @flusher.setter
    def flusher(self, flusher: Flusher | None) -> None:
        self._flusher = flusher
        # odradek.ack.fsync: a follower's next fetch offset (its LEO) must be durable.
        self.fetchers.wait_durable = flusher.wait_durable if flusher is not None else None

    # ----------------------------------------------------------------- lookups
    @property
    def topic_stats(self) -> BrokerTopicStats | None:
        """Per-topic byte counters (Kafka's BrokerTopicMetrics), attached by a broker
        with a metrics.listener; shared with the fetch side, which counts bytes out."""
        return self.fetching.topic_stats

    @topic_stats.setter
    def topic_stats(self, stats: BrokerTopicStats | None) -> None:
        self.fetching.topic_stats = stats
        self.producing.topic_stats = stats

    @property
    def txn_verification_enabled(self) -> bool:
        """KIP-890's switch (transaction.partition.verification.enable, dynamic: set
        from each image), which the produce side applies."""
        return self.producing.txn_verification_enabled

    @txn_verification_enabled.setter
    def txn_verification_enabled(self, enabled: bool) -> None:
        self.producing.txn_verification_enabled = enabled

    # ----------------------------------------------------------------- delegates
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
        """Serve a Produce (REQ-R7): see ``ProduceServing.append_records``."""
        return self.producing.append_records(
            entries,
            acks,
            timeout_s,
            image,
            internal=internal,
            verification_guards=verification_guards,
        )

    async def append_and_wait(
        self,
        tp: TopicPartition,
        records: bytes,
        timeout_s: float,
        *,
        allow_control: bool = False,
        verification_guard: object | None = None,
    ) -> tuple[ErrorCode, int]:
        """An internal acks=all append: see ``ProduceServing.append_and_wait``."""
        return await self.producing.append_and_wait(
            tp,
            records,
            timeout_s,
            allow_control=allow_control,
            verification_guard=verification_guard,
        )

    def start_txn_verification(
        self, appends: Iterable[tuple[TopicPartition, int, int]]
    ) -> list[TxnVerification]:
        """KIP-890: see ``ProduceServing.start_txn_verification``."""
        return self.producing.start_txn_verification(appends)

    def delete_records(
        self,
        requests: list[tuple[str, list[PendingDelete]]],
        offsets: dict[tuple[str, int], int],
        timeout_s: float,
        image: MetadataImage,
    ) -> DelayedDeleteRecords | None:
        """DeleteRecords (REQ-R24): see ``ProduceServing.delete_records``."""
        return self.producing.delete_records(requests, offsets, timeout_s, image)

    def load_logs(self) -> None:
        """Open the logs on disk at start-up: see ``ReplicaLogs.load_logs``."""
        self.logs.load_logs()

    def has_log(self, tp: TopicPartition) -> bool:
        """A local log exists for ``tp`` (the log cleaner prunes its checkpoint with it)."""
        return self.logs.has_log(tp)

    def fetch_messages(
        self,
        params: FetchParams,
        topics: list[tuple[str, list[FetchEntry]]],
        image: MetadataImage,
        fctx: FetchContext | None = None,
    ) -> DelayedFetch | None:
        """Serve a Fetch (REQ-R3, R16, R17): see ``FetchServing.fetch_messages``."""
        return self.fetching.fetch_messages(params, topics, image, fctx)

    def _credit_idle_followers(
        self, tp: TopicPartition, part: Partition, sessions: Iterable[FetchSession] | None = None
    ) -> None:
        """A follower session skips idle partitions (fetch_session.py): its fetches count
        as fetching them at the log end (REQ-R6) -- credited here, before an ISR check
        that could change something (``Partition.isr_full_and_in_sync``) and when a
        change ends the idle spell (``sessions``: the holders of ``tp``, known to the
        caller), instead of on every fetch."""
        for session in self.fetch_sessions.holders(tp) if sessions is None else sessions:
            offset = session.idle_fetch_offset(tp)
            if offset is not None:
                part.note_idle_fetch(session.replica_id, offset, session.last_used_ms)

    def leader_partition(
        self, topic: str, index: int, image: MetadataImage, current_leader_epoch: int = -1
    ) -> Partition:
        part = self.partitions.get((topic, index))
        if part is None:
            if image.partition(topic, index) is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index}")
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"broker {self.broker_id} hosts no replica of {topic}-{index}",
            )
        part.check_leader(current_leader_epoch)
        return part

    # ----------------------------------------------------------------- wake-ups
    def _wake(self, tp: TopicPartition) -> None:
        """Something changed on ``tp``: re-check the delayed operations watching it -- at
        the end of the current event-loop step, once per partition. Several produce
        requests that arrived in one read are then all in the one fetch response that
        a waiting follower gets, instead of one follower round trip each; the delay is
        the rest of this loop step (microseconds)."""
        # Follower fetch sessions holding tp read it at their next fetch (or at once, if
        # one is waiting); leaving the idle set credits the follower (see check_isr).
        sessions = self.fetch_sessions.holders(tp)
        if sessions:
            part = self.partitions.get(tp)
            if part is not None:
                self._credit_idle_followers(tp, part, sessions)  # before marking
            for session in sessions:
                session.mark(tp)
                self._woken_sessions.add(session.id)
        self._woken[tp] = None
        if self._wake_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tools, unit tests): check at once
            self._check_woken()
            return
        self._wake_scheduled = True
        loop.call_soon(self._check_woken)

    def _check_woken(self) -> None:
        self._wake_scheduled = False
        woken, self._woken = self._woken, {}
        for tp in woken:
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
            self.delete_records_purgatory.check_and_complete(tp)
        sessions, self._woken_sessions = self._woken_sessions, set()
        for session_id in sessions:
            self.fetch_purgatory.check_and_complete(session_key(session_id))

    def notify_append(self, tps: Iterable[TopicPartition]) -> None:
        """Records were appended outside ``append_records`` (the group coordinator)."""
        for tp in tps:
            part = self.partitions.get(tp)
            if part is not None:
                part.hw_after_append()
            self._wake(tp)

    def _log_start_moved(self, tp: TopicPartition) -> None:
        """Retention moved a log start offset."""
        self._wake(tp)  # fetchers learn the new log start (sessions: marked)
        self.fetchers.touch(tp)  # a follower reports it in its next fetch

    def _on_follower_progress(self, part: Partition) -> None:
        """A follower appended (or truncated, or restarted its log): consumers of this
        replica do not exist (REQ-R3), but DeleteRecords and shutdown waiters might."""
        self._wake((part.topic, part.index))

    # ----------------------------------------------------------------- metadata
    def apply_image(self, image: MetadataImage) -> None:
        """Make local replicas match the image (REQ-R13): become leader, follower or
        offline, adopt ISR changes, delete replicas no longer assigned here. Fetchers
        change once per leader broker for the whole batch."""
        changed = image.changed_topics
        t = now_ms()
        self.txn_verification_enabled = verification_enabled(
            self.settings.txn_verification_enable, image
        )
        apply_throttle_rates(self.leader_quota, self.follower_quota, image)
        if image.complete:  # an image before the first full read lists no broker yet
            gone = self.isr_eligibility.update(image.brokers, image.shutting_down)
            if gone:
                for part in self.partitions.values():
                    part.forget_candidates(gone)
        for name in image.topics if changed is None else changed:
            topic = image.topics.get(name)
            if topic is None:
                continue
            apply_throttled_replicas(
                self.leader_quota, self.follower_quota, name, topic.configs, self.broker_id
            )
            for pinfo in topic.partitions.values():
                if self.broker_id in pinfo.replicas:
                    self._apply_partition((topic.name, pinfo.index), pinfo, topic.configs, t)
        if image.complete:
            for tp in self.logs.partitions_with_logs():
                if changed is not None and tp[0] not in changed:
                    continue
                topic = image.topics.get(tp[0])
                assigned = topic.partitions.get(tp[1]) if topic is not None else None
                if assigned is None or self.broker_id not in assigned.replicas:
                    self._delete_partition(tp, moved_to=assigned)
        self.fetchers.apply(image)

    def _apply_partition(
        self, tp: TopicPartition, pinfo: PartitionInfo, configs: dict[str, str], t_ms: int
    ) -> None:
        part = self.partitions.get(tp)
        if part is None:
            fence = self._moved_away_at.get(tp)
            if fence is not None and pinfo.leader == self.broker_id and pinfo.leader_epoch <= fence:
                # A replica moved away and back leads only at an epoch the controller
                # elected it in after the move: it comes back with an empty log, and the
                # state naming it leader at the epoch it was removed in (or before) is
                # a stale read (odradek sim seed 404: HW 307 -> 0). Wait for the newer
                # state, which the metadata store reads after the assignment.
                logger.warning(
                    "%s-%d: not leading epoch %d again, the replica was moved away at %d",
                    tp[0],
                    tp[1],
                    pinfo.leader_epoch,
                    fence,
                )
                return
            self._moved_away_at.pop(tp, None)
            part = self._create_partition(tp, pinfo)
        min_isr = topic_override(configs, "min.insync.replicas")
        part.set_min_insync_replicas(
            min_isr if min_isr is not None else self.settings.min_insync_replicas
        )
        if self._applied_configs.get(tp) != configs:
            # Dynamic topic configs: logs opened by load_logs (before the first image) or
            # before an AlterConfigs carry a stale LogConfig. Storage, retention,
            # compaction and flushing read log.config on each use, so swapping it is the
            # whole change (segment.bytes/segment.ms apply from the next roll, as in Kafka).
            try:
                part.log.config = self.log_config_for(tp[0])
                self._applied_configs[tp] = configs
                if self.flusher is not None:
                    self.flusher.watch(part.log)  # flush.ms / odradek.ack.fsync may differ
            except KafkaError as e:  # an invalid override written behind our back
                logger.warning("%s: keeping the previous log config: %s", part.name, e)
        tr = part.apply_leader_and_isr(
            LeaderAndIsr(
                leader=pinfo.leader,
                leader_epoch=pinfo.leader_epoch,
                isr=tuple(pinfo.isr),
                replicas=tuple(pinfo.replicas),
                zk_version=pinfo.zk_version,
                controller_epoch=pinfo.controller_epoch,
            ),
            t_ms,
        )
        self._apply_transition(part, tr)
        if part.role is Role.FOLLOWER:
            # Also when nothing changed: the leader's address may be known only now.
            self.fetchers.ensure(part)

    def _create_partition(self, tp: TopicPartition, pinfo: PartitionInfo) -> Partition:
        lg = self.logs.open_log(tp)
        directory = self.log_dir / f"{tp[0]}-{tp[1]}"
        producers = ProducerStateManager(directory)
        rebuild_producer_state(producers, lg)
        epochs = LeaderEpochCache(directory)
        # Kafka's load: the cache is cut to the LEO (a power cut can leave a checkpoint
        # naming epochs past the log end) and the recovered batches' epochs assigned (or
        # all of them when the checkpoint was missing or torn).
        epochs.recover_from_log(lg)
        part = Partition(
            tp[0],
            tp[1],
            lg,
            list(pinfo.replicas),
            self.broker_id,
            epochs,
            producers,
            ledger=self.ledger,
            high_watermark=self.logs.checkpointed_hw(tp),
            eligibility=self.isr_eligibility,
        )
        self.partitions[tp] = part
        return part

    def _apply_transition(self, part: Partition, t: Transition) -> None:
        """Carry out what a partition's transition asks for."""
        if t.note:
            logger.info("%s: %s", part.name, t.note)
        tp = (part.topic, part.index)
        if t.stop_fetching:
            self.fetchers.remove(tp)
        if t.start_fetching_from is not None:
            self.fetchers.remove(tp)
            self.fetchers.add(part)
        if t.isr_write is not None:
            self._submit_isr_write(part, t.isr_write)
        if t.isr_change is not None:
            self.isr_stats.record_change(*t.isr_change)
        if t.wakes_waiters:
            self._wake(tp)

    def _delete_partition(self, tp: TopicPartition, moved_to: PartitionInfo | None = None) -> None:
        """``moved_to``: the assignment without this broker (None: the topic is deleted)."""
        part = self.partitions.pop(tp, None)
        self.partitions_removed += part is not None
        if part is not None and moved_to is not None:
            self._quarantine_moved_away(part, moved_to)
            self._moved_away_at[tp] = part.leader_epoch
        elif moved_to is None:
            self._moved_away_at.pop(tp, None)  # the topic is gone: a new one starts over
        self.fetchers.remove(tp)
        if self.alter_partition is not None:
            self.alter_partition.discard(tp)
        if part is not None:
            self._apply_transition(part, part.remove())
        self._applied_configs.pop(tp, None)
        self.logs.delete(tp)

    def _quarantine_moved_away(self, part: Partition, moved_to: PartitionInfo) -> None:
        """A replica reassigned away never truncates: what it holds above its HW may be on
        no other replica (a deposed leader's acks=1 writes, docs/faults.md "Pause and
        stall"), so it goes to the lost-records ledger, as a truncated suffix would."""
        hw = part.high_watermark
        if self.ledger is None or hw >= part.log_end_offset:
            return
        quarantine(
            self.ledger,
            part.log,
            part.topic,
            part.index,
            hw,
            reason=f"replica reassigned away to {list(moved_to.replicas)}: above the "
            f"high watermark {hw}",
            leader_id=moved_to.leader,
            leader_epoch=moved_to.leader_epoch,
            high_watermark=hw,
        )

    # ----------------------------------------------------------------- epochs
    def last_offset_for_leader_epoch(
        self,
        topic: str,
        partition: int,
        current_leader_epoch: int,
        leader_epoch: int,
        replica_id: int,
        image: MetadataImage,
    ) -> tuple[int, int]:
        """OffsetsForLeaderEpoch (REQ-R19; KIP-101, KIP-279, KIP-320): (epoch, end offset)
        of the largest epoch <= ``leader_epoch`` in the leader's cache. Consumers
        (``replica_id`` < 0) never learn of offsets above the HW. Raises KafkaError."""
        p = self.leader_partition(topic, partition, image, current_leader_epoch)
        epoch, end = p.epochs.end_offset_for(leader_epoch, p.log_end_offset)
        if replica_id < 0 and end > p.high_watermark:
            end = p.high_watermark
        return epoch, end

    # ----------------------------------------------------------------- ISR writes
    def check_isr(self) -> None:
        """The periodic ISR check (REQ-R6), every replica.lag.time.max.ms / 2: shrink
        lagging members; a fenced leader re-asserts its ISR (at most once a second)."""
        t = now_ms()
        lag = self.settings.replica_lag_time_max_ms
        for tp, part in self.partitions.items():
            if part.role is not Role.LEADER:
                continue
            if part.fenced:
                last = self._fenced_retry.get(tp, 0.0)
                if clock.monotonic() - last < FENCED_RETRY_S:
                    continue
                write = part.reassert_isr()
                if write is not None:
                    self._fenced_retry[tp] = clock.monotonic()
                    self._submit_isr_write(part, write)
                continue
            if part.isr_full_and_in_sync(t, lag):
                continue  # nothing to decide: the idle credits wait (see the method)
            self._credit_idle_followers(tp, part)
            write = part.maybe_shrink_isr(t, lag)
            if write is not None:
                self._submit_isr_write(part, write)

    def _submit_isr_write(self, part: Partition, write: IsrWrite) -> None:
        if self.alter_partition is not None:
            self.alter_partition.submit(write, part)

    def _isr_write_done(self, write: IsrWrite, part: Partition, outcome: IsrOutcome) -> None:
        """One partition's outcome from a batch of ISR writes, on the loop."""
        if isinstance(outcome, IsrConflict):
            tr = part.isr_write_failed(write, outcome.current)
        elif isinstance(outcome, IsrStoreUnavailable):
            tr = part.isr_write_failed(write, None)
        else:
            tr = part.isr_write_succeeded(write, outcome)
        part.reassert_finished()
        if self.partitions.get((part.topic, part.index)) is part:
            self._apply_transition(part, tr)
            # The write may have been superseded while in flight: decide again now rather
            # than at the next periodic check (it joins the next batch).
            if part.is_leader:
                self._credit_idle_followers((part.topic, part.index), part)
                nxt = part.maybe_shrink_isr(now_ms(), self.settings.replica_lag_time_max_ms)
                if nxt is not None:
                    self._submit_isr_write(part, nxt)

    # ----------------------------------------------------------------- durability
    def _attach_flusher(self, lg: Log) -> None:
        if self.flusher is not None:
            lg.flush_listener = self.flusher.mark
            self.flusher.watch(lg)

    def on_log_flushed(self, lg: Log) -> None:
        """A flush completed (odradek.log_manager.flusher). Under odradek.ack.fsync the
        leader's HW counts its durable offset, and acks=1 produces wait for it: re-check
        both."""
        if not lg.config.ack_fsync:
            return
        tp = parse_partition_dir(lg.directory.name)
        part = self.partitions.get(tp) if tp is not None else None
        if tp is None or part is None or part.log is not lg:
            return
        part.on_log_flushed()
        self._wake(tp)

    def quiesce_fetchers(self) -> None:
        """Controlled shutdown's first step: follow nothing from now on, and start no
        fetcher for images applied later (the controller is about to make us a follower
        of every partition we lead). Synchronous, so the broker can ask the controller
        right after, as Kafka's broker sends ControlledShutdown before it stops its
        fetchers: stopping the fetcher tasks first took 5 s at 10,000 partitions
        (issue 13). What it guards against: a fetch of ours reaching a leader after the
        controller dropped us from its ISR would put us straight back in. Fetchers build
        each request from the partitions they carry, so none is sent after this; one
        already sent is recorded by its leader on arrival, long before the controller's
        ISR change (a ZooKeeper round trip, its decision, a write, a notification) gets
        there."""
        self.fetchers.enabled = False  # ReplicaFetcherManager.apply starts nothing now
        for tp in list(self.partitions):
            self.fetchers.remove(tp)

    async def stop_fetchers(self) -> None:
        self.quiesce_fetchers()
        await self.fetchers.stop_all()

    def shutdown(self) -> None:
        """Clean shutdown: flush everything so the next start needs no recovery scan
        (logs with nothing new since their last flush have nothing to sync)."""
        self.logs.shutdown()
        for purgatory in (
            self.fetch_purgatory,
            self.produce_purgatory,
            self.delete_records_purgatory,
        ):
            purgatory.check_and_complete_all()
