"""The replica manager's leader/follower transitions (Kafka's
ReplicaManager.becomeLeaderOrFollower, makeLeaders, makeFollowers and stopReplicas):
applying each metadata image to the local replicas (REQ-R13).

Each changed partition state znode becomes a ``LeaderAndIsr`` that the partition decides
on (``Partition.apply_leader_and_isr``, pure); the ``Transition`` it returns is carried
out here (fetchers, ISR writes, wake-ups). Replicas no longer assigned to this broker are
deleted, the replication throttles and the topic configs of the local logs follow the
image, and fetchers change once per leader broker for the whole batch of changes.

``LeaderFollowerTransitions`` is a base class of ``ReplicaManager`` (replica_manager.py),
not an object of its own: a transition creates and deletes the manager's partitions and
logs and reaches its fetchers, quotas and ISR writes, and the fetch side and the ISR
writes apply transitions through it. The attributes and methods declared in the class
belong to ``ReplicaManager``.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.config import dynamic_broker_value, topic_override
from odradek.configdefs import LONG_MAX
from odradek.errors import KafkaError
from odradek.replication.partition import Partition, Role, rebuild_producer_state
from odradek.replication.partition_state import LeaderAndIsr, Transition
from odradek.replication.quota import throttled_partitions
from odradek.replication.replica_logs import TopicPartition, now_ms
from odradek.replication.txn_verification import verification_enabled
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.producer_state import ProducerStateManager

if TYPE_CHECKING:
    from odradek.metadata.image import MetadataImage, PartitionInfo
    from odradek.metrics.stats import IsrStats
    from odradek.replication.alter_partition import AlterPartitionManager
    from odradek.replication.fetcher import ReplicaFetcherManager
    from odradek.replication.partition_state import IsrEligibility, IsrWrite
    from odradek.replication.quota import ReplicationQuota
    from odradek.replication.settings import ReplicaManagerSettings
    from odradek.storage.truncation_ledger import TruncationLedger

logger = logging.getLogger(__name__)

__all__ = ["LeaderFollowerTransitions"]


class LeaderFollowerTransitions:
    """Metadata images applied to the local replicas (see the module docstring)."""

    broker_id: int
    log_dir: Path
    log_config_for: Callable[[str], LogConfig]
    settings: ReplicaManagerSettings
    partitions: dict[TopicPartition, Partition]
    fetchers: ReplicaFetcherManager
    leader_quota: ReplicationQuota
    follower_quota: ReplicationQuota
    isr_eligibility: IsrEligibility
    isr_stats: IsrStats
    alter_partition: AlterPartitionManager[Partition] | None
    ledger: TruncationLedger
    txn_verification_enabled: bool
    _logs: dict[TopicPartition, Log]
    _hw_from_checkpoint: dict[TopicPartition, int]
    _applied_configs: dict[TopicPartition, dict[str, str]]

    if TYPE_CHECKING:

        def _attach_flusher(self, lg: Log) -> None: ...

        def _submit_isr_write(self, part: Partition, write: IsrWrite) -> None: ...

        def _wake(self, tp: TopicPartition) -> None: ...

    def apply_image(self, image: MetadataImage) -> None:
        """Make local replicas match the image (REQ-R13): become leader, follower or
        offline, adopt ISR changes, delete replicas no longer assigned here. Fetchers
        change once per leader broker for the whole batch."""
        changed = image.changed_topics
        t = now_ms()
        self.txn_verification_enabled = verification_enabled(
            self.settings.txn_verification_enable, image
        )
        self._apply_throttle_rates(image)
        if image.complete:  # an image before the first full read lists no broker yet
            gone = self.isr_eligibility.update(image.brokers, image.shutting_down)
            if gone:
                for part in self.partitions.values():
                    part.forget_candidates(gone)
        for name in image.topics if changed is None else changed:
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
        for quota, key in (
            (self.leader_quota, "leader.replication.throttled.rate"),
            (self.follower_quota, "follower.replication.throttled.rate"),
        ):
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
        for quota, key in (
            (self.leader_quota, "leader.replication.throttled.replicas"),
            (self.follower_quota, "follower.replication.throttled.replicas"),
        ):
            quota.set_throttled(
                topic, throttled_partitions(topic_override(configs, key), self.broker_id)
            )

    def _apply_partition(
        self, tp: TopicPartition, pinfo: PartitionInfo, configs: dict[str, str], t_ms: int
    ) -> None:
        part = self.partitions.get(tp)
        if part is None:
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
        part = Partition(
            tp[0],
            tp[1],
            lg,
            list(pinfo.replicas),
            self.broker_id,
            epochs,
            producers,
            ledger=self.ledger,
            high_watermark=self._hw_from_checkpoint.get(tp, 0),
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
