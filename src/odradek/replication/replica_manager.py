"""The replica manager: this broker's replicas, and requests over many partitions.

It owns the ``Partition`` objects and their logs, and is the one place where replication
decisions (made by ``Partition``, pure) meet I/O (Kafka's ReplicaManager):

* **Metadata** (REQ-R13): ``apply_image`` turns each changed partition state znode into a
  ``LeaderAndIsr`` and lets the partition decide; fetchers are then restarted once per
  leader broker for the whole batch of changes, not once per partition.
* **Produce** (REQ-R7, R8): ``append_records`` appends as leader and, for ``acks=all``,
  parks a ``DelayedProduce`` in the produce purgatory.
* **Fetch** (REQ-R3, R16, R17): ``fetch_messages`` records a follower's fetch offset (its
  LEO: the HW may move), reads whole batches as file slices, and parks a ``DelayedFetch``
  when fewer than ``min_bytes`` are available.
* **DeleteRecords** (REQ-R24): ``delete_records`` moves the log start offset and parks a
  ``DelayedDeleteRecords`` until the ISR followed.
* **ISR writes** (REQ-R6, REQ-P4, REQ-P6): a partition proposes an ``IsrWrite``; the
  pending writes of all partitions go to the ``IsrStore`` (ZooKeeper, each conditional on
  its znode version) in batches, in a worker thread (``alter_partition``), and each
  partition's outcome is handed back to it (commit, adopt, or fence).

Every event that can complete a delayed operation -- an append, an HW move, a follower's
log start moving, a role change, a truncation -- calls ``_wake(tp)``, which re-checks
the three purgatories for that partition (``odradek.replication.purgatory``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import os
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.config import dynamic_broker_value, topic_override
from odradek.configdefs import LONG_MAX
from odradek.errors import ErrorCode, InvalidRecordsError, KafkaError
from odradek.log_limiter import LogLimiter
from odradek.log_manager.flusher import Flusher
from odradek.metadata.image import MetadataImage, PartitionInfo
from odradek.metrics.stats import BrokerTopicStats, IsrStats
from odradek.protocol.produce_response import PartitionProduceResult
from odradek.replication.alter_partition import AlterPartitionManager
from odradek.replication.delayed import (
    DelayedDeleteRecords,
    DelayedFetch,
    DelayedProduce,
    PendingDelete,
    PendingProduce,
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
from odradek.replication.partition import Partition, Role, rebuild_producer_state
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
from odradek.replication.purgatory import DelayedOperationPurgatory
from odradek.replication.quota import ReplicationQuota, throttled_partitions
from odradek.replication.settings import ReplicaManagerSettings
from odradek.replication.trace import RecordTracer
from odradek.replication.txn_verification import (
    TxnVerification,
    VerificationGuards,
    start_verifications,
    verification_enabled,
)
from odradek.runtime import clock
from odradek.storage.checkpoint import read_checkpoint, write_checkpoint
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.truncation_ledger import TruncationLedger, ledger_root
from odradek.topics import INTERNAL_TOPICS

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
HW_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
FENCED_RETRY_S = 1.0  # a fenced leader re-asserts its ISR at most this often
_REJECTED_LOG = LogLimiter(burst=5, interval_s=60.0)


def now_ms() -> int:
    return clock.time_ns() // 1_000_000


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``my-topic-3`` → ("my-topic", 3); None for anything else (Kafka's dir naming)."""
    topic, sep, index = name.rpartition("-")
    if not sep or not topic or not index.isdigit():
        return None
    return topic, int(index)


@dataclass(slots=True)
class ProduceEntry:
    """One partition of a produce request; ``result`` is filled in (the response)."""

    topic: str
    records: Any  # bytes | memoryview | None
    result: PartitionProduceResult


class ReplicaManager:
    def __init__(self, broker_id: int, log_dir: Path,
                 log_config_for: Callable[[str], LogConfig], settings: ReplicaManagerSettings,
                 source_ip: str | None = None, isr_store: IsrStore | None = None,
                 endpoint_factory: EndpointFactory | None = None,
                 tracer: RecordTracer | None = None) -> None:
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
            if isr_store is not None else None)
        self.tracer = tracer or RecordTracer(0)
        self.fetchers = ReplicaFetcherManager(broker_id, settings.fetcher, endpoint_factory,
                                              on_progress=self._on_follower_progress,
                                              tracer=self.tracer, source_ip=source_ip)
        # KIP-227 incremental fetch sessions, for followers and consumers alike.
        self.fetch_sessions = FetchSessionCache(
            settings.fetch_session_cache_slots, settings.fetch_session_eviction_ms,
            max_partitions=settings.max_partitions)
        # KIP-73 replication throttles (replication/quota.py).
        window_s = float(settings.quota_window_size_seconds)
        windows = settings.quota_window_num
        self.leader_quota = ReplicationQuota(window_s, windows)
        self.follower_quota = ReplicationQuota(window_s, windows)
        self.fetchers.quota = self.follower_quota
        self.partitions: dict[TopicPartition, Partition] = {}
        # KIP-841: the brokers this broker's partitions, when leading, may add to an ISR.
        self.isr_eligibility = IsrEligibility()
        self._logs: dict[TopicPartition, Log] = {}
        self._hw_from_checkpoint: dict[TopicPartition, int] = {}
        self._fenced_retry: dict[TopicPartition, float] = {}
        # What the checkpoint files hold (capture_checkpoints skips unchanged rewrites).
        self._written_hws: dict[TopicPartition, int] | None = None
        self._written_starts: dict[TopicPartition, int] | None = None
        # Metrics (odradek.broker.metrics): ISR changes are rare and always counted;
        # per-topic byte counts only when the broker has a metrics.listener (None: off).
        self.isr_stats = IsrStats()
        # Partitions whose waiters must re-check, in the order they were woken (a dict: a
        # set of (topic, partition) iterates in an order PYTHONHASHSEED decides, and the
        # simulator's runs must not depend on it).
        self._woken: dict[TopicPartition, None] = {}
        self._woken_sessions: set[int] = set()  # follower fetch sessions to re-check
        self._wake_scheduled = False
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = \
            DelayedOperationPurgatory("Produce")
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = \
            DelayedOperationPurgatory("Fetch")
        # Fetch requests (fetch_serving.py): an object with a narrow view of the replicas.
        self.fetching = FetchServing(
            partitions=self.partitions, leader_partition=self.leader_partition,
            apply_transition=self._apply_transition, fetch_sessions=self.fetch_sessions,
            fetch_purgatory=self.fetch_purgatory, leader_quota=self.leader_quota,
            tracer=self.tracer)
        self.delete_records_purgatory: DelayedOperationPurgatory[TopicPartition] = \
            DelayedOperationPurgatory("DeleteRecords")
        # Set by the broker before load_logs: fsyncs off the event loop (flush policy,
        # odradek.ack.fsync group commit). None: logs flush inline (tools, tests).
        self._flusher: Flusher | None = None
        # Truncated suffixes are quarantined here, not discarded (the lost-records ledger).
        self.ledger = TruncationLedger(ledger_root(log_dir), broker_id,
                                       settings.lost_records_retention_bytes)
        # Topic overrides each local log's LogConfig was last built from (dynamic topic
        # configs): a change swaps log.config in _apply_partition.
        self._applied_configs: dict[TopicPartition, dict[str, str]] = {}
        # KIP-890 (transaction.partition.verification.enable, dynamic: followed from
        # each image): a transactional append then needs its verification guard.
        self.txn_verification_enabled = settings.txn_verification_enable

    @property
    def flusher(self) -> Flusher | None:
        return self._flusher

    @flusher.setter
    def flusher(self, flusher: Flusher | None) -> None:
        self._flusher = flusher
        # odradek.ack.fsync: a follower's next fetch offset (its LEO) must be durable.
        self.fetchers.wait_durable = flusher.wait_durable if flusher is not None else None

    # ----------------------------------------------------------------- start-up
    def load_logs(self) -> None:
        """Open (and, past the recovery point, recover) every partition dir on disk,
        with ``num.recovery.threads.per.data.dir`` threads (Kafka's; default 1): recovery
        scans of large logs wait on the disk, which threads overlap."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        recovery = read_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT)
        starts = read_checkpoint(self.log_dir / LOG_START_CHECKPOINT)
        self._hw_from_checkpoint = read_checkpoint(self.log_dir / HW_CHECKPOINT)
        entries = [(entry, tp) for entry in sorted(os.listdir(self.log_dir))
                   if (tp := parse_partition_dir(entry)) is not None
                   and (self.log_dir / entry).is_dir()]
        # One LogConfig per topic, copied per log: building one from the broker and topic
        # configs costs ~1 ms, which 3,000 partitions of 30 topics paid 3,000 times.
        configs: dict[str, LogConfig] = {}
        for _, (topic, _p) in entries:
            if topic not in configs:
                configs[topic] = self.log_config_for(topic)

        def open_one(entry: str, tp: TopicPartition) -> Log:
            t0 = clock.monotonic()
            lg = Log.open(self.log_dir / entry, copy.copy(configs[tp[0]]),
                          recovery_point=recovery.get(tp, 0), log_start_offset=starts.get(tp))
            logger.info("loaded %s: log start %d, LEO %d in %.0f ms", entry,
                     lg.log_start_offset, lg.log_end_offset, (clock.monotonic() - t0) * 1e3)
            return lg

        threads = self._recovery_threads()
        if threads > 1 and len(entries) > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="log-recovery") as pool:
                opened = list(pool.map(lambda e: open_one(*e), entries))
        else:
            opened = [open_one(entry, tp) for entry, tp in entries]
        for (_, tp), lg in zip(entries, opened):
            self._logs[tp] = lg
            self._attach_flusher(lg)

    def _recovery_threads(self) -> int:
        return max(1, self.settings.recovery_threads)

    # ----------------------------------------------------------------- metadata
    def apply_image(self, image: MetadataImage) -> None:
        """Make local replicas match the image (REQ-R13): become leader, follower or
        offline, adopt ISR changes, delete replicas no longer assigned here. Fetchers
        change once per leader broker for the whole batch."""
        changed = image.changed_topics
        t = now_ms()
        self.txn_verification_enabled = verification_enabled(
            self.settings.txn_verification_enable, image)
        self._apply_throttle_rates(image)
        if image.complete:  # an image before the first full read lists no broker yet
            gone = self.isr_eligibility.update(image.brokers, image.shutting_down)
            if gone:
                for part in self.partitions.values():
                    part.forget_candidates(gone)
        for name in (image.topics if changed is None else changed):
            topic = image.topics.get(name)
            if topic is None:
                continue
            self._apply_throttled_replicas(name, topic.configs)
            for pinfo in topic.partitions.values():
                if self.broker_id in pinfo.replicas:
                    self._apply_partition((topic.name, pinfo.index), pinfo, topic.configs, t)
        if image.complete:
            for tp in list(self._logs):
                if changed is not None and tp[0] not in changed:
                    continue
                topic = image.topics.get(tp[0])
                assigned = topic.partitions.get(tp[1]) if topic is not None else None
                if assigned is None or self.broker_id not in assigned.replicas:
                    self._delete_partition(tp)
        self.fetchers.apply(image)

    def _apply_throttle_rates(self, image: MetadataImage) -> None:
        for quota, key in ((self.leader_quota, "leader.replication.throttled.rate"),
                           (self.follower_quota, "follower.replication.throttled.rate")):
            rate = dynamic_broker_value(key, image.dynamic_broker_config(key))
            if rate is not None and rate >= LONG_MAX:
                rate = None  # Kafka's default: unthrottled
            if (None if quota.rate_limit == math.inf else quota.rate_limit) != rate:
                logger.info("%s is now %s", key, "unlimited" if rate is None else f"{rate} B/s")
                quota.set_rate(rate)
        if image.changed_topics is None:
            self.leader_quota.retain_topics(image.topics)
            self.follower_quota.retain_topics(image.topics)

    def _apply_throttled_replicas(self, topic: str, configs: dict[str, str]) -> None:
        for quota, key in ((self.leader_quota, "leader.replication.throttled.replicas"),
                           (self.follower_quota, "follower.replication.throttled.replicas")):
            quota.set_throttled(topic, throttled_partitions(topic_override(configs, key),
                                                            self.broker_id))

    def _apply_partition(self, tp: TopicPartition, pinfo: PartitionInfo,
                         configs: dict[str, str], t_ms: int) -> None:
        part = self.partitions.get(tp)
        if part is None:
            part = self._create_partition(tp, pinfo)
        min_isr = topic_override(configs, "min.insync.replicas")
        part.set_min_insync_replicas(
            min_isr if min_isr is not None else self.settings.min_insync_replicas)
        if self._applied_configs.get(tp) != configs:
            # Dynamic topic configs: logs opened by load_logs (before the first image) or
            # before an AlterConfigs carry a stale LogConfig. Storage, retention,
            # compaction and flushing read log.config on each use, so swapping it is the
            # whole change (segment.bytes/segment.ms apply from the next roll, as in Kafka).
            try:
                part.log.config = self.log_config_for(tp[0])
                self._applied_configs[tp] = configs
            except KafkaError as e:  # an invalid override written behind our back
                logger.warning("%s: keeping the previous log config: %s", part.name, e)
        tr = part.apply_leader_and_isr(LeaderAndIsr(
            leader=pinfo.leader, leader_epoch=pinfo.leader_epoch, isr=tuple(pinfo.isr),
            replicas=tuple(pinfo.replicas), zk_version=pinfo.zk_version,
            controller_epoch=pinfo.controller_epoch), t_ms)
        self._apply_transition(part, tr)
        if part.role is Role.FOLLOWER:
            # Also when nothing changed: the leader's address may be known only now.
            self.fetchers.ensure(part)

    def _create_partition(self, tp: TopicPartition, pinfo: PartitionInfo) -> Partition:
        lg = self._logs.get(tp)
        directory = self.log_dir / f"{tp[0]}-{tp[1]}"
        if lg is None:
            lg = Log.open(directory, self.log_config_for(tp[0]))
            self._logs[tp] = lg
            self._attach_flusher(lg)
        producers = ProducerStateManager(directory)
        rebuild_producer_state(producers, lg)
        epochs = LeaderEpochCache(directory)
        # Kafka's load: the cache is cut to the LEO (a power cut can leave a checkpoint
        # naming epochs past the log end) and the recovered batches' epochs assigned (or
        # all of them when the checkpoint was missing or torn).
        epochs.recover_from_log(lg)
        part = Partition(tp[0], tp[1], lg, list(pinfo.replicas), self.broker_id, epochs,
                         producers, ledger=self.ledger,
                         high_watermark=self._hw_from_checkpoint.get(tp, 0),
                         eligibility=self.isr_eligibility)
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

    def _delete_partition(self, tp: TopicPartition) -> None:
        part = self.partitions.pop(tp, None)
        self.fetchers.remove(tp)
        if self.alter_partition is not None:
            self.alter_partition.discard(tp)
        if part is not None:
            self._apply_transition(part, part.remove())
        lg = self._logs.pop(tp, None)
        self._applied_configs.pop(tp, None)
        if lg is not None:
            logger.info("deleting log of %s-%d (topic deleted)", *tp)
            lg.close()
            shutil.rmtree(self.log_dir / f"{tp[0]}-{tp[1]}", ignore_errors=True)

    # ----------------------------------------------------------------- lookups
    @property
    def topic_stats(self) -> BrokerTopicStats | None:
        """Per-topic byte counters (Kafka's BrokerTopicMetrics), attached by a broker
        with a metrics.listener; shared with the fetch side, which counts bytes out."""
        return self.fetching.topic_stats

    @topic_stats.setter
    def topic_stats(self, stats: BrokerTopicStats | None) -> None:
        self.fetching.topic_stats = stats

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
        as fetching them at the log end (REQ-R6) -- credited here, before the ISR check
        and when a change ends the idle spell (``sessions``: the holders of ``tp``, known
        to the caller), instead of on every fetch."""
        for session in self.fetch_sessions.holders(tp) if sessions is None else sessions:
            offset = session.idle_fetch_offset(tp)
            if offset is not None:
                part.note_idle_fetch(session.replica_id, offset, session.last_used_ms)

    def leader_partition(self, topic: str, index: int, image: MetadataImage,
                         current_leader_epoch: int = -1) -> Partition:
        part = self.partitions.get((topic, index))
        if part is None:
            if image.partition(topic, index) is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index}")
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.broker_id} hosts no replica of {topic}-{index}")
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

    def _on_follower_progress(self, part: Partition) -> None:
        """A follower appended (or truncated, or restarted its log): consumers of this
        replica do not exist (REQ-R3), but DeleteRecords and shutdown waiters might."""
        self._wake((part.topic, part.index))

    # ----------------------------------------------------------------- produce
    def start_txn_verification(self, appends: Iterable[tuple[TopicPartition, int, int]]
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

    def append_records(self, entries: list[ProduceEntry], acks: int, timeout_s: float,
                       image: MetadataImage, *, internal: bool = False,
                       verification_guards: VerificationGuards | None = None
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
                    raise KafkaError(ErrorCode.invalid_topic_exception,
                                     f"Cannot append to internal topic {e.topic}")
                p = self.leader_partition(e.topic, res.index, image)
                if stats is not None:
                    # Only topics this broker hosts get series: a client naming random
                    # topics must not grow the broker's memory (or its scrapes).
                    ts = stats.topic(e.topic)
                    ts.produce_requests += 1
                info = p.append_as_leader(e.records, acks, t_now,
                                          require_verification=require,
                                          verification_guard=guards.get((e.topic, res.index)),
                                          single_batch=True)
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
                    tracer.appended_as_leader(tp, info.first_offset, info.last_offset,
                                              info.max_timestamp)
                if acks == -1:
                    pp = PendingProduce(p, info.last_offset, res)
                    if not pp.check():
                        pending.append(pp)
                elif acks == 1 and p.log.config.ack_fsync \
                        and p.log.durable_offset <= info.last_offset:
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
                if err.code not in (ErrorCode.not_leader_or_follower,
                                    ErrorCode.unknown_topic_or_partition):
                    # Rate-limited per error code: a client repeating a bad produce must
                    # not be able to fill the log disk.
                    _REJECTED_LOG.log(logger, logging.INFO, err.code,
                                      "produce to %s-%d rejected: %s", e.topic, res.index,
                                      err)
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

    async def append_and_wait(self, tp: TopicPartition, records: bytes, timeout_s: float,
                              *, allow_control: bool = False,
                              verification_guard: object | None = None
                              ) -> tuple[ErrorCode, int]:
        """An internal acks=all append (the group coordinator's ``__consumer_offsets``):
        (error, first offset) once replicated, or the error that stopped it.
        ``verification_guard``: a transactional offset commit's (KIP-890,
        ``start_txn_verification``)."""
        part = self.partitions.get(tp)
        if part is None:
            return ErrorCode.not_leader_or_follower, -1
        try:
            info = part.append_as_leader(records, -1, now_ms(), allow_control=allow_control,
                                         from_coordinator=True,
                                         require_verification=self.txn_verification_enabled,
                                         verification_guard=verification_guard)
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

    # ----------------------------------------------------------------- epochs
    def last_offset_for_leader_epoch(self, topic: str, partition: int,
                                     current_leader_epoch: int, leader_epoch: int,
                                     replica_id: int, image: MetadataImage
                                     ) -> tuple[int, int]:
        """OffsetsForLeaderEpoch (REQ-R19; KIP-101, KIP-279, KIP-320): (epoch, end offset)
        of the largest epoch <= ``leader_epoch`` in the leader's cache. Consumers
        (``replica_id`` < 0) never learn of offsets above the HW. Raises KafkaError."""
        p = self.leader_partition(topic, partition, image, current_leader_epoch)
        epoch, end = p.epochs.end_offset_for(leader_epoch, p.log_end_offset)
        if replica_id < 0 and end > p.high_watermark:
            end = p.high_watermark
        return epoch, end

    # ----------------------------------------------------------------- DeleteRecords
    def delete_records(self, requests: list[tuple[str, list[PendingDelete]]],
                       offsets: dict[tuple[str, int], int], timeout_s: float,
                       image: MetadataImage) -> DelayedDeleteRecords | None:
        """Move each partition's log start offset (REQ-R24, API 21) and return the
        delayed operation to await until the ISR followed (None if all are known)."""
        moved = False
        for topic, plist in requests:
            for st in plist:
                try:
                    if topic in INTERNAL_TOPICS:
                        # Kafka (ReplicaManager.deleteRecordsOnLocalLog): clients never
                        # move the log start of internal topics.
                        raise KafkaError(ErrorCode.invalid_topic_exception,
                                         f"Cannot delete records of internal topic {topic}")
                    p = self.leader_partition(topic, st.index, image)
                    before = p.log.log_start_offset
                    st.target = p.delete_records_to(offsets[(topic, st.index)])
                    st.partition = p
                    if p.log.log_start_offset != before:
                        self._wake((topic, st.index))  # followers learn the log start
                    moved |= p.log.log_start_offset != before
                    logger.info("DeleteRecords %s-%d: log start offset %d -> %d", topic,
                                st.index, before, p.log.log_start_offset)
                except KafkaError as e:
                    st.error = e.code
                except Exception:
                    logger.exception("DeleteRecords on %s-%d failed", topic, st.index)
                    st.error = ErrorCode.unknown_server_error
        if moved:
            try:
                self.checkpoint_log_start_offsets()
            except Exception:
                logger.exception("log-start-offset checkpoint after DeleteRecords failed")
        pending = [st for _, plist in requests for st in plist]
        op = DelayedDeleteRecords(timeout_s, pending)
        keys = [(st.partition.topic, st.partition.index) for st in pending
                if st.partition is not None]
        if self.delete_records_purgatory.try_complete_else_watch(op, keys):
            return None
        return op

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

    # ----------------------------------------------------------------- checkpoints
    def snapshot_producer_state(self) -> None:
        for p in self.partitions.values():
            if p.producers.dirty:
                p.producers.write_snapshot()

    def checkpoint_high_watermarks(self) -> None:
        self.capture_checkpoints(producers=False)()

    def capture_checkpoints(self, *, producers: bool = True) -> Callable[[], None]:
        """Take the HWs, log start offsets and (``producers``) dirty producer-state
        snapshots now, on the loop; return the blocking writes (fsyncs) to run in a worker
        thread. An fsync on the event loop stalls every request behind it — on ext4 a small
        file's fsync can wait for unrelated dirty data, hundreds of ms under load."""
        hws = {tp: p.high_watermark for tp, p in self.partitions.items()}
        starts = {tp: lg.log_start_offset for tp, lg in self._logs.items()}
        snaps = [(p.producers, *p.producers.capture_snapshot())
                 for p in self.partitions.values() if producers and p.producers.dirty]
        # A file whose content would not change is not rewritten: with thousands of idle
        # partitions the two fsynced rewrites every few seconds were a visible share of
        # an idle broker's CPU (issue 13). What is on disk is what was last written.
        hw_due = hws != self._written_hws
        starts_due = starts != self._written_starts

        def write() -> None:
            if hw_due:
                write_checkpoint(self.log_dir / HW_CHECKPOINT, hws)
                self._written_hws = hws
            if starts_due:
                write_checkpoint(self.log_dir / LOG_START_CHECKPOINT, starts)
                self._written_starts = starts
            for mgr, path, body in snaps:
                mgr.write_snapshot_file(path, body)
        return write

    def run_retention(self, now: int | None = None) -> int:
        """One retention pass over every local log (REQ-R24; Kafka's cleanupLogs, every
        log.retention.check.interval.ms): leaders and followers alike delete whole old
        segments by time/size and those below the log start offset, bounded by the HW —
        all metadata work on the loop; unlinks are deferred by file.delete.delay.ms
        (``Log.run_pending_deletions``, also run here). The log start offsets are
        checkpointed when any moved, so a restart does not resurrect deleted records.
        Returns the number of segments deleted."""
        t = now_ms() if now is None else now
        deleted = 0
        moved = False
        for tp, lg in list(self._logs.items()):
            try:
                part = self.partitions.get(tp)
                # A replica without a known role (offline) keeps everything below its
                # HW-checkpoint bound only.
                hw = part.high_watermark if part is not None else \
                    min(self._hw_from_checkpoint.get(tp, 0), lg.log_end_offset)
                before = lg.log_start_offset
                n = lg.delete_old_segments(hw, t).count
                deleted += n
                if lg.log_start_offset != before:
                    moved = True
                    self._wake(tp)  # fetchers learn the new log start (sessions: marked)
                    self.fetchers.touch(tp)  # a follower reports it in its next fetch
                moved |= n > 0
                lg.run_pending_deletions(t)
            except Exception:
                logger.exception("retention check of %s-%d failed", *tp)
        if moved:
            self.checkpoint_log_start_offsets()
        return deleted

    def checkpoint_log_start_offsets(self) -> None:
        starts = {tp: lg.log_start_offset for tp, lg in self._logs.items()}
        write_checkpoint(self.log_dir / LOG_START_CHECKPOINT, starts)
        self._written_starts = starts

    def checkpoint_recovery_points(self) -> None:
        write_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT, self.recovery_points())

    def recovery_points(self) -> dict[TopicPartition, int]:
        return {tp: lg.recovery_point for tp, lg in self._logs.items()}

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def has_log(self, tp: TopicPartition) -> bool:
        """A local log exists for ``tp`` (the log cleaner prunes its checkpoint with it)."""
        return tp in self._logs

    # ----------------------------------------------------------------- durability
    def _attach_flusher(self, lg: Log) -> None:
        if self.flusher is not None:
            lg.flush_listener = self.flusher.mark

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
        for lg in self._logs.values():
            if not lg.unchanged_since_flush:
                lg.flush()
        self.snapshot_producer_state()
        self.checkpoint_high_watermarks()
        self.checkpoint_recovery_points()
        for lg in self._logs.values():
            lg.close()
        for purgatory in (self.fetch_purgatory, self.produce_purgatory,
                          self.delete_records_purgatory):
            purgatory.check_and_complete_all()


