"""The replica manager's local logs: opening them at start-up, their checkpoint files,
and retention (Kafka splits this between LogManager -- loadLogs, cleanupLogs,
checkpointLogRecoveryOffsets, checkpointLogStartOffsets -- and ReplicaManager's
checkpointHighWatermarks).

``ReplicaLogs`` is an object the replica manager owns (``ReplicaManager.logs``), as
Kafka's ReplicaManager holds a LogManager: it owns the open logs, the HWs read from the
checkpoint at start-up and what the checkpoint files last got, and is the manager's
disk-facing half -- what is on disk in each log dir (the three broker-level checkpoint
files, Kafka's names and format) and how it gets there, with no replication decision in
it. It sees the replicas only through what it is constructed with: the hosted partitions
(read only: their HWs and producer state are checkpointed), a hook for each newly opened
log (the flusher) and one for a log start offset that retention moved (wake-ups, the
follower fetchers).

Also here: the partition-directory naming and ``now_ms``, shared by the manager's parts.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.runtime import clock
from odradek.storage.checkpoint import read_checkpoint, write_checkpoint
from odradek.storage.deleted_logs import DeletedLogs, is_delete_dir
from odradek.storage.log import Log, LogConfig

if TYPE_CHECKING:
    from odradek.replication.partition import Partition

logger = logging.getLogger(__name__)

__all__ = [
    "HW_CHECKPOINT",
    "LOG_START_CHECKPOINT",
    "RECOVERY_POINT_CHECKPOINT",
    "ReplicaLogs",
    "TopicPartition",
    "now_ms",
    "parse_partition_dir",
]

TopicPartition = tuple[str, int]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
HW_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"


now_ms = clock.wall_ms  # the replication runtime's "now" in ms (virtual in the simulator)


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``my-topic-3`` → ("my-topic", 3); None for anything else (Kafka's dir naming),
    e.g. a deleted log's ``my-topic-3.<id>-delete``."""
    topic, sep, index = name.rpartition("-")  # a ``-delete`` name's index is "delete"
    if not sep or not topic or not index.isdigit():
        return None
    return topic, int(index)


class ReplicaLogs:
    """Loading, checkpointing and retention of the local logs (see the module docstring)."""

    def __init__(
        self,
        *,
        log_dir: Path,
        log_config_for: Callable[[str], LogConfig],
        recovery_threads: int,
        partitions: Mapping[TopicPartition, Partition],
        on_open: Callable[[Log], None],
        on_log_start_moved: Callable[[TopicPartition], None],
    ) -> None:
        self.log_dir = log_dir
        self.log_config_for = log_config_for
        self.recovery_threads = max(1, recovery_threads)
        self.partitions = partitions
        self._on_open = on_open
        self._on_log_start_moved = on_log_start_moved
        self._logs: dict[TopicPartition, Log] = {}
        # The HWs of the checkpoint read at start-up: a partition created later starts
        # from its own, an offline replica's retention is bounded by it.
        self._hw_from_checkpoint: dict[TopicPartition, int] = {}
        # What the checkpoint files hold (capture_checkpoints skips unchanged rewrites).
        self._written_hws: dict[TopicPartition, int] | None = None
        self._written_starts: dict[TopicPartition, int] | None = None
        # Deleted logs: renamed directories and kept descriptors, until due (``delete``).
        self._deleted = DeletedLogs()
        # Logs with segments waiting for file.delete.delay.ms (``Log.deletion_listener``).
        self._deleting: set[Log] = set()

    # ----------------------------------------------------------------- the logs
    def get(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def open_log(self, tp: TopicPartition) -> Log:
        """The local log of ``tp``: the one loaded at start-up, else a new (empty) one."""
        lg = self._logs.get(tp)
        if lg is None:
            lg = Log.open(self.log_dir / f"{tp[0]}-{tp[1]}", self.log_config_for(tp[0]))
            self._adopt(tp, lg)
        return lg

    def _adopt(self, tp: TopicPartition, lg: Log) -> None:
        self._logs[tp] = lg
        lg.deletion_listener = self._deleting.add
        self._on_open(lg)

    def run_pending_deletions(self, now_ms: int | None = None) -> int:
        """Close and unlink the segments whose file.delete.delay.ms has passed, visiting
        only the logs that scheduled deletions (the broker's retention loop calls it
        every second). Returns how many segments."""
        n = 0
        for lg in list(self._deleting):
            n += lg.run_pending_deletions(now_ms)
            if not lg.pending_deletions or lg.closed:
                self._deleting.discard(lg)
        return n

    def delete(self, tp: TopicPartition) -> None:
        """Close and delete the local log of ``tp`` (its topic was deleted or it was
        reassigned away), if there is one, as Kafka's ``LogManager.asyncDelete``: its
        directory is renamed to ``<topic>-<partition>.<id>-delete`` now (the name is free
        for a replica moved back), and removed after file.delete.delay.ms off the loop
        (``release_deleted``). Its file descriptors stay open until then, as those of
        segments retention removes: a fetch read from it before the image that deleted it
        may not have sent its answer yet (its FileSlices; closed at once, the answer's
        read fails, or reads another file that got the descriptor's number)."""
        lg = self._logs.pop(tp, None)
        if lg is not None:
            logger.info("deleting log of %s-%d (topic deleted)", *tp)
            fds: list[int] = []
            lg.close(keep_fds=fds)
            self._deleted.schedule(lg.directory, fds, lg.config.file_delete_delay_ms)

    def release_deleted(
        self, now_ms: int | None = None, *, force: bool = False
    ) -> Callable[[], int] | None:
        """Close the descriptors of deleted logs whose delay has passed (all with
        ``force``) and return the blocking rest -- their directories' removal, the
        fsync that makes the renames durable -- for a worker thread; it returns how
        many logs (None: nothing to do). The broker's retention loop calls it."""
        return self._deleted.release(now_ms, force=force)

    def partitions_with_logs(self) -> list[TopicPartition]:
        return list(self._logs)

    def checkpointed_hw(self, tp: TopicPartition) -> int:
        return self._hw_from_checkpoint.get(tp, 0)

    # ----------------------------------------------------------------- start-up
    def load_logs(self) -> None:
        """Open (and, past the recovery point, recover) every partition dir on disk,
        with ``num.recovery.threads.per.data.dir`` threads (Kafka's; default 1): recovery
        scans of large logs wait on the disk, which threads overlap."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        recovery = read_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT)
        starts = read_checkpoint(self.log_dir / LOG_START_CHECKPOINT)
        self._hw_from_checkpoint = read_checkpoint(self.log_dir / HW_CHECKPOINT)
        # Logs deleted before a crash or a shutdown (Kafka's loadLogs): not loaded, and
        # removed off the loop by the first ``release_deleted``.
        names = sorted(os.listdir(self.log_dir))
        for entry in names:
            if is_delete_dir(entry) and (self.log_dir / entry).is_dir():
                logger.info("removing %s, a log deleted before the last start", entry)
                self._deleted.leftover(self.log_dir / entry)
        entries = [
            (entry, tp)
            for entry in names
            if (tp := parse_partition_dir(entry)) is not None and (self.log_dir / entry).is_dir()
        ]
        # One LogConfig per topic, copied per log: building one from the broker and topic
        # configs costs ~1 ms, which 3,000 partitions of 30 topics paid 3,000 times.
        configs: dict[str, LogConfig] = {}
        for _, (topic, _p) in entries:
            if topic not in configs:
                configs[topic] = self.log_config_for(topic)

        def open_one(entry: str, tp: TopicPartition) -> Log:
            t0 = clock.monotonic()
            lg = Log.open(
                self.log_dir / entry,
                copy.copy(configs[tp[0]]),
                recovery_point=recovery.get(tp, 0),
                log_start_offset=starts.get(tp),
            )
            logger.info(
                "loaded %s: log start %d, LEO %d in %.0f ms",
                entry,
                lg.log_start_offset,
                lg.log_end_offset,
                (clock.monotonic() - t0) * 1e3,
            )
            return lg

        threads = self.recovery_threads
        if threads > 1 and len(entries) > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="log-recovery") as pool:
                opened = list(pool.map(lambda e: open_one(*e), entries))
        else:
            opened = [open_one(entry, tp) for entry, tp in entries]
        for (_, tp), lg in zip(entries, opened):
            self._adopt(tp, lg)

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
        snaps = [
            (p.producers, *p.producers.capture_snapshot())
            for p in self.partitions.values()
            if producers and p.producers.dirty
        ]
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
                hw = (
                    part.high_watermark
                    if part is not None
                    else min(self._hw_from_checkpoint.get(tp, 0), lg.log_end_offset)
                )
                before = lg.log_start_offset
                n = lg.delete_old_segments(hw, t).count
                deleted += n
                if lg.log_start_offset != before:
                    moved = True
                    self._on_log_start_moved(tp)
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

    def shutdown(self) -> None:
        """Flush what changed since the last flush (the next start then needs no recovery
        scan), write the producer-state snapshots and the checkpoint files, close every
        log. Deleted logs' descriptors are closed and their renames made durable; their
        ``-delete`` directories are left for the next start-up to remove (as Kafka's
        LogManager.shutdown leaves them): removing them could take seconds."""
        for lg in self._logs.values():
            if not lg.unchanged_since_flush:
                lg.flush()
        self.snapshot_producer_state()
        self.checkpoint_high_watermarks()
        self.checkpoint_recovery_points()
        for lg in self._logs.values():
            lg.close()
        self._deleted.sync_and_close_all()
