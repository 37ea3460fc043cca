"""Requests over many partitions: append, read, delayed produce and delayed fetch.

The replica manager owns this broker's ``Partition`` objects and their logs. It applies
metadata images (the ZooKeeper-era equivalent of LeaderAndIsr, SPEC R13) and implements
Kafka's "purgatory" with asyncio futures:

* **Delayed fetch** (SPEC R17): a fetch that finds fewer than ``min_bytes`` waits up to
  ``max_wait_ms``; every append to a partition wakes the fetches waiting on it at once.
* **Delayed produce** (SPEC R7): an ``acks=all`` produce waits until the HW passes its last
  offset, or answers REQUEST_TIMED_OUT after the request's timeout; if the ISR shrank
  below ``min.insync.replicas`` meanwhile the answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND
  (SPEC R8).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from dataclasses import dataclass
from pathlib import Path

from odradek.replication.fetcher import ReplicaFetcher
from odradek.log_manager.flusher import Flusher
from odradek.metadata.image import MetadataImage, PartitionInfo
from odradek.replication.partition import Partition, Role, rebuild_producer_state
from odradek.storage.producer_state import ProducerStateManager
from odradek.errors import ErrorCode, KafkaError
from odradek.storage.checkpoint import read_checkpoint, write_checkpoint
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.truncation_ledger import (
    DEFAULT_RETENTION_BYTES, RETENTION_CONFIG, TruncationLedger, ledger_root,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
HW_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _ledger_retention_bytes(config: Any) -> int:
    """``odradek.lost.records.retention.bytes`` from a BrokerConfig (default otherwise)."""
    getter = getattr(config, "get", None)
    if getter is None:
        return DEFAULT_RETENTION_BYTES
    try:
        return int(getter(RETENTION_CONFIG))
    except KeyError:  # an older config table without the property
        return DEFAULT_RETENTION_BYTES


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``my-topic-3`` → ("my-topic", 3); None for anything else (Kafka's dir naming)."""
    topic, sep, index = name.rpartition("-")
    if not sep or not topic or not index.isdigit():
        return None
    return topic, int(index)


@dataclass(slots=True)
class PendingAck:
    """One partition of an acks=all produce waiting for the HW (SPEC R7), or, with
    ``durable`` (acks=1 on an ``odradek.ack.fsync`` topic), for the leader's fsync."""

    partition: Partition
    last_offset: int
    durable: bool = False

    def satisfied(self) -> bool:
        if self.durable:
            return self.partition.log.durable_offset > self.last_offset
        return self.partition.acks_all_satisfied(self.last_offset)


class IsrUpdateFailed(Exception):
    """The conditional ISR write lost: ``current`` is the znode as it is now (or None
    when ZooKeeper could not be reached)."""

    def __init__(self, current: tuple[int, int, list[int], int] | None) -> None:
        super().__init__(current)
        self.current = current  # (leader, leader_epoch, isr, zk_version)


class ReplicaManager:
    def __init__(self, broker_id: int, log_dir: Path,
                 log_config_for: "LogConfigFactory", config: Any = None,
                 source_ip: str | None = None,
                 isr_writer: Callable[[Partition, list[int]], int] | None = None) -> None:
        self.broker_id = broker_id
        self.log_dir = log_dir
        self.log_config_for = log_config_for
        self.config = config
        self.source_ip = source_ip
        # Blocking conditional write of the state znode; returns the new znode version or
        # raises IsrUpdateFailed. Run in a worker thread.
        self.isr_writer = isr_writer
        self.fetchers: dict[int, ReplicaFetcher] = {}
        # Set once shutdown stops the fetchers: a metadata image applied during controlled
        # shutdown must not start new ones (they would keep the process alive).
        self._fetching_stopped = False
        self.partitions: dict[TopicPartition, Partition] = {}
        self._logs: dict[TopicPartition, Log] = {}
        self._waiters: dict[TopicPartition, list[asyncio.Future[None]]] = {}
        self._hw_from_checkpoint: dict[TopicPartition, int] = {}
        self._fenced_retry: dict[TopicPartition, float] = {}
        # Set by the broker before load_logs: fsyncs off the event loop (flush policy,
        # odradek.ack.fsync group commit). None: logs flush inline (tools, tests).
        self.flusher: Flusher | None = None
        # Truncated suffixes are quarantined here, not discarded (issue 6 item 5).
        self.ledger = TruncationLedger(ledger_root(log_dir), broker_id,
                                       _ledger_retention_bytes(config))
        # Topic overrides each local log's LogConfig was last built from (dynamic topic
        # configs, issue 5): a change swaps log.config in _apply_partition.
        self._applied_configs: dict[TopicPartition, dict[str, str]] = {}

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
            t0 = time.monotonic()
            lg = Log.open(self.log_dir / entry, copy.copy(configs[tp[0]]),
                          recovery_point=recovery.get(tp, 0), log_start_offset=starts.get(tp))
            log.info("loaded %s: log start %d, LEO %d in %.0f ms", entry,
                     lg.log_start_offset, lg.log_end_offset, (time.monotonic() - t0) * 1e3)
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
        getter = getattr(self.config, "get", None)
        try:
            return max(1, int(getter("num.recovery.threads.per.data.dir"))) if getter else 1
        except KeyError:
            return 1

    # ----------------------------------------------------------------- metadata
    def apply_image(self, image: MetadataImage) -> None:
        """Make local replicas match the image: become leader/follower, delete old logs."""
        changed = image.changed_topics
        for name in (image.topics if changed is None else changed):
            topic = image.topics.get(name)
            if topic is None:
                continue
            for pinfo in topic.partitions.values():
                if self.broker_id in pinfo.replicas:
                    self._apply_partition((topic.name, pinfo.index), pinfo, topic.configs,
                                          image)
        if not image.complete:
            return
        for tp in list(self._logs):
            if changed is not None and tp[0] not in changed:
                continue
            t = image.topics.get(tp[0])
            pinfo = t.partitions.get(tp[1]) if t is not None else None
            if pinfo is None or self.broker_id not in pinfo.replicas:
                self._delete_partition(tp)

    def _apply_partition(self, tp: TopicPartition, pinfo: PartitionInfo,
                         configs: dict[str, str], image: MetadataImage) -> None:
        part = self.partitions.get(tp)
        if part is None:
            lg = self._logs.get(tp)
            directory = self.log_dir / f"{tp[0]}-{tp[1]}"
            if lg is None:
                lg = Log.open(directory, self.log_config_for(tp[0]))
                self._logs[tp] = lg
                self._attach_flusher(lg)
            producers = ProducerStateManager(directory)
            rebuild_producer_state(producers, lg)
            part = Partition(topic=tp[0], index=tp[1], log=lg, replicas=list(pinfo.replicas),
                             local_broker_id=self.broker_id, epochs=LeaderEpochCache(directory),
                             producers=producers, ledger=self.ledger)
            part.high_watermark = min(self._hw_from_checkpoint.get(tp, 0), lg.log_end_offset)
            # Kafka truncates the epoch cache to the LEO on load: after a power cut the
            # (fsynced) leader-epoch-checkpoint can name epochs starting past the log end.
            part.epochs.truncate_from_end(lg.log_end_offset)
            self.partitions[tp] = part
        part.min_insync_replicas = int(configs.get(
            "min.insync.replicas",
            getattr(self.config, "min_insync_replicas", 1) if self.config else 1))
        if self._applied_configs.get(tp) != configs:
            # Dynamic topic configs (issue 5): logs opened by load_logs (before the first
            # image) or before an AlterConfigs carry a stale LogConfig. Storage, retention,
            # compaction and flushing read log.config on each use, so swapping it is the
            # whole change (segment.bytes/segment.ms apply from the next roll, as in Kafka).
            try:
                part.log.config = self.log_config_for(tp[0])
                self._applied_configs[tp] = configs
            except KafkaError as e:  # an invalid override written behind our back
                log.warning("%s: keeping the previous log config: %s", part.name, e)
        if pinfo.leader_epoch < part.leader_epoch or (
                pinfo.leader_epoch == part.leader_epoch and pinfo.zk_version <= part.zk_version
                and part.role is not Role.OFFLINE):
            return  # stale or already applied (a state older than what we hold)
        if pinfo.leader == self.broker_id:
            if part.role is not Role.LEADER or pinfo.leader_epoch != part.leader_epoch:
                self._stop_fetching(tp)
                part.make_leader(pinfo.leader_epoch, list(pinfo.isr), list(pinfo.replicas),
                                 pinfo.zk_version, pinfo.controller_epoch, now_ms())
                log.info("%s: leader at epoch %d, isr %s", part.name, pinfo.leader_epoch,
                         list(pinfo.isr))
            else:
                # Same epoch, newer znode: an ISR change made by the controller (which
                # also proves the state still names us: a fenced leader may resume).
                part.isr = list(pinfo.isr)
                part.zk_version = pinfo.zk_version
                part.fenced = False
                part.maybe_advance_high_watermark()
        elif pinfo.leader >= 0:
            if (part.role is not Role.FOLLOWER or pinfo.leader_epoch != part.leader_epoch
                    or pinfo.leader != part.leader_id):
                part.make_follower(pinfo.leader, pinfo.leader_epoch, list(pinfo.isr),
                                   list(pinfo.replicas), pinfo.zk_version)
                log.info("%s: follower of %d at epoch %d", part.name, pinfo.leader,
                         pinfo.leader_epoch)
                self._start_fetching(part, image)
            else:
                part.isr = list(pinfo.isr)
                part.zk_version = pinfo.zk_version
                if (tp not in self.fetchers.get(part.leader_id, _NO_FETCHER).states):
                    self._start_fetching(part, image)  # leader's address may be known now
        else:
            self._stop_fetching(tp)
            part.make_offline(pinfo.leader_epoch, pinfo.zk_version)
        self._wake(tp)

    # ----------------------------------------------------------------- fetchers
    def _start_fetching(self, part: Partition, image: MetadataImage) -> None:
        tp = (part.topic, part.index)
        self._stop_fetching(tp)
        leader = image.brokers.get(part.leader_id)
        if leader is None or self.config is None or self._fetching_stopped:
            return  # the leader is not registered (yet): retried on the next image
        fetcher = self.fetchers.get(part.leader_id)
        if fetcher is not None and fetcher.address != (leader.host, leader.port):
            asyncio.get_running_loop().create_task(fetcher.stop())
            fetcher = None
        if fetcher is None:
            fetcher = ReplicaFetcher(self.broker_id, part.leader_id, leader.host, leader.port,
                                     self.source_ip, self.config, self._on_follower_progress)
            if self.flusher is not None:
                fetcher.wait_durable = self.flusher.wait_durable  # odradek.ack.fsync
            self.fetchers[part.leader_id] = fetcher
            fetcher.start()
        fetcher.add(part)

    def _stop_fetching(self, tp: TopicPartition) -> None:
        for f in self.fetchers.values():
            f.remove(tp)

    def _on_follower_progress(self, part: Partition) -> None:
        self._wake((part.topic, part.index))

    # ----------------------------------------------------------------- leader side
    def record_follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int,
                              log_start_offset: int = -1) -> None:
        st = part.followers.get(replica_id)
        lso_moved = (log_start_offset >= 0 and st is not None
                     and log_start_offset > st.log_start_offset)
        if part.record_follower_fetch(replica_id, fetch_offset, now_ms(), log_start_offset) \
                or lso_moved:
            # HW moved: acks=all and consumers; follower log start moved: DeleteRecords.
            self._wake((part.topic, part.index))
        if self.config is not None and part.isr_change_wanted(
                now_ms(), self.config.replica_lag_time_max_ms) is not None:
            self._schedule_isr_update(part)

    def check_isr(self) -> None:
        """Periodic ISR shrink check (SPEC R6), every replica.lag.time.max.ms / 2."""
        if self.config is None:
            return
        t = now_ms()
        for part in self.partitions.values():
            if part.role is not Role.LEADER:
                continue
            if part.fenced or part.isr_change_wanted(
                    t, self.config.replica_lag_time_max_ms) is not None:
                self._schedule_isr_update(part)

    def _schedule_isr_update(self, part: Partition) -> None:
        if part.isr_update_in_flight or self.isr_writer is None:
            return
        if part.fenced and not self._may_retry_fenced(part):
            return
        part.isr_update_in_flight = True
        asyncio.get_running_loop().create_task(self._update_isr(part))

    def _may_retry_fenced(self, part: Partition) -> bool:
        # Re-assert at most once per second per partition.
        t = time.monotonic()
        last = self._fenced_retry.get((part.topic, part.index), 0.0)
        if t - last < 1.0:
            return False
        self._fenced_retry[(part.topic, part.index)] = t
        return True

    async def _update_isr(self, part: Partition) -> None:
        tp = (part.topic, part.index)
        try:
            part.isr_update_in_flight = False
            # A fenced leader re-asserts its current ISR: success proves the state znode
            # still names it at this epoch, so it may accept writes again.
            reassert = part.fenced
            new_isr = (list(part.isr) if reassert else
                       part.isr_change_wanted(now_ms(), self.config.replica_lag_time_max_ms))
            if new_isr is None:
                return
            part.isr_update_in_flight = True
            epoch = part.leader_epoch
            writer = self.isr_writer
            assert writer is not None
            try:
                version = await asyncio.to_thread(writer, part, new_isr)
            except IsrUpdateFailed as e:
                cur = e.current
                if (cur is not None and cur[0] == self.broker_id and cur[1] == epoch
                        and part.leader_epoch == epoch):
                    # The controller changed the ISR meanwhile; adopt it and decide again.
                    part.isr, part.zk_version = list(cur[2]), cur[3]
                    part.fenced = False
                    log.info("%s: ISR write conflicted; adopted %s (version %d)", part.name,
                             cur[2], cur[3])
                else:
                    # SPEC scenarios 4 and 6: we cannot record the ISR change, so we may
                    # have been replaced. Stop accepting writes until ZooKeeper says again
                    # that we lead.
                    part.fence()
                    log.warning("%s: ISR update to %s failed (%s); no longer accepting "
                                "writes", part.name, new_isr,
                                "ZooKeeper unreachable" if cur is None else
                                f"state now leader {cur[0]} epoch {cur[1]}")
                return
            if part.leader_epoch == epoch and part.role is Role.LEADER:
                if part.fenced:
                    log.info("%s: state znode still names us leader; accepting writes again",
                             part.name)
                part.fenced = False
                old = part.isr
                part.isr, part.zk_version = list(new_isr), version
                part.expand_candidates -= set(new_isr)
                log.info("%s: ISR %s -> %s", part.name, old, new_isr)
                part.maybe_advance_high_watermark()
        finally:
            part.isr_update_in_flight = False
            self._wake(tp)

    def _delete_partition(self, tp: TopicPartition) -> None:
        self._stop_fetching(tp)
        part = self.partitions.pop(tp, None)
        lg = self._logs.pop(tp, None)
        self._wake(tp)
        if lg is not None:
            log.info("deleting log of %s-%d (topic deleted)", *tp)
            lg.close()
            shutil.rmtree(self.log_dir / f"{tp[0]}-{tp[1]}", ignore_errors=True)
        del part

    # ----------------------------------------------------------------- lookups
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
    def notify_append(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._wake(tp)

    def _wake(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_change(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Wait until any of ``tps`` gets an append / HW move / role change, or timeout."""
        if timeout_s <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(tps)
        for tp in keys:
            self._waiters.setdefault(tp, []).append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for tp in keys:
                lst = self._waiters.get(tp)
                if lst is not None:
                    try:
                        lst.remove(fut)
                    except ValueError:
                        pass
                    if not lst:
                        self._waiters.pop(tp, None)

    async def wait_for_acks(self, pending: list[PendingAck], timeout_s: float) -> dict[
            TopicPartition, ErrorCode]:
        """Delayed produce: wait until the HW passes each batch (SPEC R7) or time out.

        Returns the error for each partition that did not complete cleanly.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [p for p in pending if not p.satisfied()
                       and p.partition.role is Role.LEADER]
            if not waiting:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await self.wait_for_change([(p.partition.topic, p.partition.index)
                                        for p in waiting], remaining)
        errors: dict[TopicPartition, ErrorCode] = {}
        for p in pending:
            part = p.partition
            tp = (part.topic, part.index)
            if part.role is not Role.LEADER:
                errors[tp] = ErrorCode.not_leader_or_follower
            elif not p.satisfied():
                errors[tp] = ErrorCode.request_timed_out
            elif not p.durable and len(part.isr) < part.min_insync_replicas:
                # SPEC R8: the record is stored but the ISR shrank while we waited.
                errors[tp] = ErrorCode.not_enough_replicas_after_append
        return errors

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

        def write() -> None:
            write_checkpoint(self.log_dir / HW_CHECKPOINT, hws)
            write_checkpoint(self.log_dir / LOG_START_CHECKPOINT, starts)
            for mgr, path, body in snaps:
                mgr.write_snapshot_file(path, body)
        return write

    def run_retention(self, now: int | None = None) -> int:
        """One retention pass over every local log (SPEC R24; Kafka's cleanupLogs, every
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
                moved |= n > 0 or lg.log_start_offset != before
                lg.run_pending_deletions(t)
            except Exception:  # noqa: BLE001 - one bad log must not stop the others
                log.exception("retention check of %s-%d failed", *tp)
        if moved:
            self.checkpoint_log_start_offsets()
        return deleted

    def checkpoint_log_start_offsets(self) -> None:
        write_checkpoint(self.log_dir / LOG_START_CHECKPOINT,
                         {tp: lg.log_start_offset for tp, lg in self._logs.items()})

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
        """A flush completed (odradek.log_manager.flusher). Under odradek.ack.fsync the leader's
        HW counts its durable offset, and acks=1 produces wait for it: re-check both."""
        if not lg.config.ack_fsync:
            return
        tp = parse_partition_dir(lg.directory.name)
        part = self.partitions.get(tp) if tp is not None else None
        if part is None or part.log is not lg:
            return
        part.maybe_advance_high_watermark()
        self._wake((part.topic, part.index))

    async def stop_fetchers(self) -> None:
        self._fetching_stopped = True
        for f in list(self.fetchers.values()):
            await f.stop()
        self.fetchers.clear()

    def shutdown(self) -> None:
        """Clean shutdown: flush everything so the next start needs no recovery scan."""
        for lg in self._logs.values():
            lg.flush()
        self.snapshot_producer_state()
        self.checkpoint_high_watermarks()
        self.checkpoint_recovery_points()
        for lg in self._logs.values():
            lg.close()
        for tp in list(self._waiters):
            self._wake(tp)


class _NoFetcher:
    states: dict[TopicPartition, Any] = {}


_NO_FETCHER = _NoFetcher()


class LogConfigFactory:  # pragma: no cover - typing protocol stand-in
    def __call__(self, topic: str) -> LogConfig: ...
