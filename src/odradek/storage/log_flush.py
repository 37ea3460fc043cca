"""What a log has made durable, and what a flush must still do: owned by its ``Log``.

Kafka's ``LocalLog`` keeps the recovery point and the unflushed count; here
``FlushState`` keeps them with what odradek adds for a crash-consistent shutdown: whether
the directory (and its parent) need an fsync, whether this incarnation changed files, and
a generation bumped by every truncation so that a flush begun before one does not move
the recovery point over data replaced meanwhile (REQ-R18). It knows nothing of segments
beyond the ones the log hands to ``begin``; the log tells it what happened (``appended``,
``files_changed``, ``truncated``) and asks it what to fsync.

A flush is two halves on the event loop around a worker's ``FlushJob.run()``:
``begin`` captures the files and the LEO to sync, ``complete`` moves the recovery point
to that LEO once the fsyncs succeeded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.durability import FlushJob
from odradek.storage.segment import Segment

__all__ = ["FlushState"]


class FlushState:
    __slots__ = (
        "recovery_point",
        "unflushed_messages",
        "last_flush_ms",
        "dir_dirty",
        "parent_dirty",
        "dir_changed",
        "generation",
        "durable_generation",
    )

    def __init__(self, recovery_point: int) -> None:
        # Every offset below it is fsynced (the durable offset).
        self.recovery_point = recovery_point
        self.unflushed_messages = 0
        self.last_flush_ms: int | None = None
        self.dir_dirty = False
        self.parent_dirty = False  # the partition directory itself is new
        # Files created, renamed or deleted since the last flush (a roll, a truncation or
        # deletion of segments, a cleaner swap): unlike the dirty flags Log.open sets
        # because it cannot know, these are changes this incarnation made.
        self.dir_changed = False
        # Bumped by every truncation: a flush begun before one must not move the
        # recovery point over data that was replaced meanwhile.
        self.generation = 0
        # The generation whose every byte up to the recovery point is durable: the one
        # opened, then each after a full flush (a truncation of the active segment is
        # made durable only by a flush that includes it).
        self.durable_generation = 0

    # ------------------------------------------------------------------ what happened
    def files_changed(self) -> None:
        """A file was created, renamed or deleted: the directory needs an fsync."""
        self.dir_dirty = self.dir_changed = True

    def truncated(self, recovery_point: int) -> None:
        """Data was removed: the recovery point is at most ``recovery_point`` now, and a
        flush begun before must not move it."""
        self.recovery_point = recovery_point
        self.generation += 1

    def appended(self, messages: int, now_ms: int) -> None:
        self.unflushed_messages += messages
        if self.last_flush_ms is None:
            self.last_flush_ms = now_ms

    # ------------------------------------------------------------------ questions
    def due(self, now_ms: int, flush_ms: int | None) -> bool:
        """True when ``flush.ms`` has elapsed with unflushed data."""
        return (
            flush_ms is not None
            and self.unflushed_messages > 0
            and self.last_flush_ms is not None
            and now_ms - self.last_flush_ms >= flush_ms
        )

    def unchanged(self, log_end_offset: int) -> bool:
        """No data past the recovery point, no truncation and no file created, renamed or
        deleted since the last flush (or since open)."""
        return (
            log_end_offset <= self.recovery_point
            and not self.dir_changed
            and self.generation == self.durable_generation
        )

    # ------------------------------------------------------------------ the two halves
    def begin(
        self,
        directory: Path,
        segments: Sequence[Segment],
        log_end_offset: int,
        now_ms: int | None,
        with_indexes: bool,
    ) -> FlushJob | None:
        """Capture what to fsync (the last of ``segments`` is the active one); None when
        there is nothing to do. ``with_indexes=False`` (group commit) syncs only the
        ``.log`` data of the active segment."""
        rp = self.recovery_point
        active = segments[-1]
        job = FlushJob(directory, log_end_offset, self.generation)
        for seg in segments:
            if seg.txn_index.unsynced:
                # Always, group commit included: the entries of every marker below the
                # recovery point must be durable (odradek.storage.txn_index).
                seg.txn_index.unsynced = False
                job.index_paths.append(seg.txn_index.path)
            is_active = seg is active
            if not (seg.next_offset > rp or (is_active and with_indexes)):
                continue
            job.files.append((os.dup(seg.fd), seg.log_path.name, seg.size))
            job.covers_active |= is_active
            # Buffered index entries are written here, on the loop (so a process crash
            # keeps them in the page cache); the worker only fsyncs.
            seg.index.write_pending()
            seg.time_index.write_pending()
            if with_indexes or not is_active:
                job.index_paths += [seg.index.path, seg.time_index.path]
                for ix in (seg.index, seg.time_index):
                    if ix.renamed:  # a rewrite's rename: durable with this job's dir fsync
                        ix.renamed = False
                        self.dir_dirty = True
        job.fsync_dir, self.dir_dirty = self.dir_dirty, False
        self.dir_changed = False
        job.fsync_parent, self.parent_dirty = self.parent_dirty, False
        if not job.files and not job.index_paths and not job.fsync_dir and not job.fsync_parent:
            return None
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms
        return job

    def complete(self, job: FlushJob, log_end_offset: int) -> None:
        """After ``job.run()``: the recovery point moves to the LEO captured before the
        fsync (appends made meanwhile wait for the next flush). A failed job leaves its
        directory fsyncs to the next one and raises KAFKA_STORAGE_ERROR."""
        if job.error is not None:
            self.dir_dirty |= job.fsync_dir
            self.dir_changed |= job.fsync_dir
            self.parent_dirty |= job.fsync_parent
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"fsync in {job.directory} failed: {job.error!r}"
            )
        if job.generation == self.generation:
            self.recovery_point = max(self.recovery_point, min(job.target, log_end_offset))
            if job.covers_active:
                self.durable_generation = job.generation
