"""Durability of a partition's log (REQ-R18): when a flush is due, and the two halves of
one -- ``begin_flush`` on the event loop captures what to fsync (a ``FlushJob``,
``odradek.storage.durability``), a worker thread runs it, ``complete_flush`` back on the
loop moves the recovery point -- plus the blocking ``flush`` tools and tests use, and
whether a log has anything to sync at all (a clean shutdown skips those that do not).

``LogFlush`` is a base class of ``Log`` (log.py), not an object of its own: the
recovery point, the unflushed counters and the dirty flags are the log's state, which
its appends, rolls and truncations set. The attributes declared in the class belong to
``Log``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.durability import FlushJob

if TYPE_CHECKING:
    from odradek.storage.log_types import LogConfig
    from odradek.storage.segment import Segment

__all__ = ["LogFlush"]


class LogFlush:
    """Flush scheduling and the recovery point (see the module docstring)."""

    directory: Path
    config: LogConfig
    segments: list[Segment]
    recovery_point: int
    unflushed_messages: int
    last_flush_ms: int | None
    _dir_dirty: bool
    _parent_dirty: bool
    _dir_changed: bool
    _generation: int
    _durable_generation: int

    if TYPE_CHECKING:

        @property
        def active_segment(self) -> Segment: ...

        @property
        def log_end_offset(self) -> int: ...

    def flush_due(self, now_ms: int) -> bool:
        """True when ``flush.ms`` has elapsed with unflushed data (caller schedules)."""
        fm = self.config.flush_ms
        return (
            fm is not None
            and self.unflushed_messages > 0
            and self.last_flush_ms is not None
            and now_ms - self.last_flush_ms >= fm
        )

    @property
    def durable_offset(self) -> int:
        """Every offset below this one is fsynced: the recovery point (REQ-R18)."""
        return self.recovery_point

    def begin_flush(
        self, now_ms: int | None = None, *, with_indexes: bool = True
    ) -> FlushJob | None:
        """Event-loop half of a flush: capture what to fsync (odradek.storage.durability).

        ``with_indexes=False`` (group commit) syncs only the ``.log`` data of the active
        segment: its indexes are rebuilt or sanity-checked on load, and are synced at roll,
        close and every full flush. Returns None when there is nothing to do.
        """
        leo = self.log_end_offset
        rp = self.recovery_point
        active = self.active_segment
        job = FlushJob(self.directory, leo, self._generation)
        for seg in self.segments:
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
                        self._dir_dirty = True
        job.fsync_dir, self._dir_dirty = self._dir_dirty, False
        self._dir_changed = False
        job.fsync_parent, self._parent_dirty = self._parent_dirty, False
        if not job.files and not job.index_paths and not job.fsync_dir and not job.fsync_parent:
            return None
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms
        return job

    def complete_flush(self, job: FlushJob) -> None:
        """Event-loop half after ``job.run()``: the recovery point moves to the LEO captured
        before the fsync (appends made meanwhile wait for the next flush)."""
        if job.error is not None:
            self._dir_dirty |= job.fsync_dir
            self._dir_changed |= job.fsync_dir
            self._parent_dirty |= job.fsync_parent
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"fsync in {self.directory} failed: {job.error!r}"
            )
        if job.generation == self._generation:
            self.recovery_point = max(self.recovery_point, min(job.target, self.log_end_offset))
            if job.covers_active:
                self._durable_generation = job.generation

    def flush(self, now_ms: int | None = None) -> None:
        """fsync everything up to the LEO and advance the recovery point (REQ-R18).

        Blocking; the broker uses begin/complete_flush around a worker thread instead."""
        job = self.begin_flush(now_ms)
        if job is not None:
            job.run()
            self.complete_flush(job)
        self.recovery_point = max(self.recovery_point, self.log_end_offset)

    @property
    def unchanged_since_flush(self) -> bool:
        """Nothing here needs an fsync: no data past the recovery point, no truncation and
        no file created, renamed or deleted since the last flush (or since open).

        A clean shutdown skips such logs: they were made durable before -- by an earlier
        flush, or by the incarnation that wrote the recovery-point checkpoint they were
        opened with -- so the checkpoint written at shutdown (the marker that lets the
        next start skip their recovery scan) stays true. Re-syncing them cost 2-11 s at
        3,000-10,000 mostly idle logs (issue 13). Indexes are not part of that promise:
        they are sanity-checked on open and their tail rebuilt from the log."""
        return (
            self.log_end_offset <= self.recovery_point
            and not self._dir_changed
            and self._generation == self._durable_generation
        )
