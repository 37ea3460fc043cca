"""The broker's log cleaner: schedules compaction passes (REQ-R25, Kafka's LogCleaner).

Threads (``log.cleaner.threads``) loop: every ``log.cleaner.backoff.ms`` without work
they ask the event loop to *pick* a log (``choose_log``, pure) among those whose
``cleanup.policy`` contains ``compact`` and whose dirty ratio reaches
``min.cleanable.dirty.ratio`` (or whose dirty data is older than
``max.compaction.lag.ms``). Picking runs on the loop because it reads ``Log`` state and
``dup``-s the fds of the segments to clean; the heavy work (``odradek.storage.cleaner``)
then runs in the thread on those immutable segments, and each cleaned group is swapped in
by ``Log.replace_segments``, again on the loop. Produce and fetch are never blocked beyond
those two short calls.

Progress is kept in ``cleaner-offset-checkpoint`` in the log dir (Kafka's name and text
format): the first dirty offset of every compacted partition. Leaders and followers clean
their own copies, as in Kafka; only data below the high watermark (and never the active
segment) is cleaned, so replication truncation never races a rewrite.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from odradek.configdefs import setting
from odradek.storage.checkpoint import read_checkpoint, write_checkpoint
from odradek.storage.cleaner import (
    CleanedGroup,
    CleanParams,
    CleanStats,
    SegmentView,
    build_offset_map,
    clean_segments,
    discard_cleaned,
)
from odradek.storage.log import Log
from odradek.storage.segment import Segment

__all__ = [
    "LogCleanerManager",
    "CleanerCandidate",
    "choose_log",
    "cleanable_range",
    "CLEANER_CHECKPOINT",
]

logger = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
TopicPartition = tuple[str, int]
T = TypeVar("T")


@dataclass
class CleanerCandidate:
    """What ``cleanable_range`` found for one log (pure data; no fds yet)."""

    tp: TopicPartition
    first_dirty: int
    stop: int  # first uncleanable offset: end of the last cleanable segment
    clean_bytes: int
    dirty_bytes: int
    forced: bool  # max.compaction.lag.ms exceeded

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(
    tp: TopicPartition, lg: Log, checkpoint: int | None, high_watermark: int, now_ms: int
) -> CleanerCandidate | None:
    """Kafka's ``cleanableOffsets`` + dirty ratio, over non-active segments fully below the
    high watermark and older than ``min.compaction.lag.ms``."""
    cfg = lg.config
    segs = lg.segments
    first_dirty = lg.log_start_offset if checkpoint is None else checkpoint
    if first_dirty < lg.log_start_offset or first_dirty > lg.log_end_offset:
        first_dirty = lg.log_start_offset  # truncated or recreated log: start over
    lag_horizon = now_ms - cfg.min_compaction_lag_ms
    clean = dirty = 0
    stop = first_dirty
    forced = False
    for seg in segs[:-1]:  # never the active segment
        if seg.next_offset > high_watermark:
            break
        if seg.next_offset <= first_dirty:
            clean += seg.size
            continue
        if cfg.min_compaction_lag_ms > 0 and seg.max_timestamp > lag_horizon:
            break  # min.compaction.lag.ms: this and later segments must wait
        if seg.max_timestamp >= 0 and now_ms - seg.max_timestamp > cfg.max_compaction_lag_ms:
            forced = True
        dirty += seg.size
        stop = seg.next_offset
    if stop <= first_dirty or dirty == 0:
        return None
    return CleanerCandidate(tp, first_dirty, stop, clean, dirty, forced)


def choose_log(
    candidates: list[CleanerCandidate], ratios: dict[TopicPartition, float]
) -> CleanerCandidate | None:
    """The dirtiest eligible log (Kafka's grabFilthiestCompactedLog): forced ones first."""
    eligible = [c for c in candidates if c.forced or c.ratio >= ratios.get(c.tp, 0.5)]
    if not eligible:
        return None
    return max(eligible, key=lambda c: (c.forced, c.ratio))


@dataclass
class _Job:
    tp: TopicPartition
    lg: Log
    first_dirty: int
    stop: int
    views: list[SegmentView]
    segments: list[Segment]
    params: CleanParams
    snapshot: list[tuple[int, int]] = field(default_factory=list)  # (size, next_offset)


class CleanableReplica(Protocol):
    """What the cleaner reads of a replica: its log and how far it is committed."""

    # Read-only properties: a Protocol attribute would be invariant, and Partition's
    # fields are narrower than the cleaner needs.
    @property
    def log(self) -> Log: ...
    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...


class ReplicaLogs(Protocol):
    """The replica manager as the cleaner sees it (it must not import replication:
    the cleaner is storage upkeep, below the replication layer)."""

    @property
    def partitions(self) -> Mapping[TopicPartition, CleanableReplica]: ...

    def has_log(self, tp: TopicPartition) -> bool: ...


class CleanerStopped(Exception):
    pass


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The broker's log.cleaner.* settings (names and defaults: the table)."""

    enable: bool = setting("log.cleaner.enable")
    threads: int = setting("log.cleaner.threads")
    backoff_ms: int = setting("log.cleaner.backoff.ms")
    dedupe_buffer_size: int = setting("log.cleaner.dedupe.buffer.size")


class LogCleanerManager:
    def __init__(
        self, replicas: ReplicaLogs, log_dir: Path, settings: CleanerSettings | None = None
    ) -> None:
        settings = settings if settings is not None else CleanerSettings()
        self.replicas = replicas
        self.log_dir = log_dir
        self.enabled = settings.enable and settings.threads > 0
        self.threads = settings.threads
        self.backoff_s = max(settings.backoff_ms, 1) / 1000
        self.dedupe_buffer_bytes = settings.dedupe_buffer_size
        self._lock = threading.Lock()
        self._checkpoint: dict[TopicPartition, int] = {}
        self._busy: set[TopicPartition] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.passes = 0  # completed passes (tests, metrics)
        self.last_stats: CleanStats | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        try:
            self._checkpoint = read_checkpoint(self.log_dir / CLEANER_CHECKPOINT)
        except Exception:
            logger.exception("unreadable %s; cleaning from the log starts", CLEANER_CHECKPOINT)
            self._checkpoint = {}
        if not self.enabled:
            return
        for i in range(self.threads):
            t = threading.Thread(target=self._run, name=f"log-cleaner-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads.clear()

    def checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._checkpoint)

    # ------------------------------------------------------------------ thread side
    def _run(self) -> None:
        while not self._stop.is_set():
            worked = False
            try:
                job = self._on_loop(self._pick)
                if job is not None:
                    try:
                        self._clean(job)
                        worked = True
                    finally:
                        for v in job.views:
                            v.close()
                        with self._lock:
                            self._busy.discard(job.tp)
            except CleanerStopped:
                return
            except Exception:
                logger.exception("log cleaner pass failed")
            if not worked:
                self._stop.wait(self.backoff_s)

    def _on_loop(self, fn: Callable[[], T], timeout_s: float = 30.0) -> T:
        """Run a short ``fn`` on the broker's event loop and wait for its result."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._stop.is_set():
            raise CleanerStopped()
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                fut.set_exception(e)

        try:
            loop.call_soon_threadsafe(call)
        except RuntimeError as e:  # loop closed
            raise CleanerStopped() from e
        while True:
            try:
                return fut.result(timeout=min(timeout_s, 0.5))
            except concurrent.futures.TimeoutError:
                timeout_s -= 0.5
                if self._stop.is_set() or timeout_s <= 0:
                    raise CleanerStopped() from None

    def _clean(self, job: _Job) -> None:
        stats = CleanStats()
        t0 = time.monotonic()
        omap = build_offset_map(
            job.views, job.first_dirty, job.stop, job.params.max_map_entries, job.params.aborted
        )
        stats.map_seconds = time.monotonic() - t0
        if omap.end <= job.first_dirty:
            return
        # Rewrite from the log start through the last segment the map reached.
        n = sum(1 for v in job.views if v.base_offset < omap.end)
        groups = clean_segments(job.lg.directory, job.views[:n], omap, job.params, stats)
        swapped = 0
        k = 0
        stopped = False
        for g in groups:
            olds = job.segments[k : k + len(g.sources)]
            snap = job.snapshot[k : k + len(g.sources)]
            k += len(g.sources)
            if stopped or self._stop.is_set():
                stopped = True
                discard_cleaned(job.lg.directory, g.base_offset)
                continue
            try:
                ok = self._on_loop(lambda: self._swap(job, olds, snap, g))  # noqa: B023
            except CleanerStopped:
                stopped = True
                discard_cleaned(job.lg.directory, g.base_offset)
                continue
            except Exception:
                for rest in groups:  # leave no .cleaned files behind (open would drop them)
                    discard_cleaned(job.lg.directory, rest.base_offset)
                raise
            # False: retention/deletion removed those segments meanwhile — nothing to keep.
            swapped += ok
        if stopped:
            return  # an interrupted pass does not move the checkpoint; the next one redoes it
        with self._lock:
            self._checkpoint[job.tp] = omap.end
            entries = dict(self._checkpoint)
        write_checkpoint(self.log_dir / CLEANER_CHECKPOINT, entries)
        self.passes += 1
        self.last_stats = stats
        secs = time.monotonic() - t0
        logger.info(
            "cleaned %s-%d [%d, %d): %d -> %d bytes in %.2f s (%.1f MB/s), %d/%d groups swapped%s",
            job.tp[0],
            job.tp[1],
            job.first_dirty,
            omap.end,
            stats.bytes_read,
            stats.bytes_written,
            secs,
            stats.bytes_read / 1e6 / max(secs, 1e-9),
            swapped,
            len(groups),
            " (map full)" if omap.full else "",
        )

    # ------------------------------------------------------------------ loop side
    def _pick(self) -> _Job | None:
        """On the loop: choose the filthiest compacted log and snapshot its segments."""
        now = int(time.time() * 1000)
        cands: list[CleanerCandidate] = []
        ratios: dict[TopicPartition, float] = {}
        logs: dict[TopicPartition, Log] = {}
        with self._lock:
            # Kafka drops a deleted partition's entry: a recreated topic starts clean.
            for tp in [tp for tp in self._checkpoint if not self.replicas.has_log(tp)]:
                del self._checkpoint[tp]
            busy = set(self._busy)
            ckpt = dict(self._checkpoint)
        for tp, part in list(self.replicas.partitions.items()):
            lg = part.log
            if tp in busy or lg.closed or not lg.config.compact:
                continue
            # KIP-98: never clean past the LSO (an open transaction may still abort).
            c = cleanable_range(tp, lg, ckpt.get(tp), min(part.high_watermark, _lso(part)), now)
            if c is not None:
                cands.append(c)
                ratios[tp] = lg.config.min_cleanable_dirty_ratio
                logs[tp] = lg
        best = choose_log(cands, ratios)
        if best is None:
            return None
        lg = logs[best.tp]
        cfg = lg.config
        segs = [s for s in lg.segments[:-1] if s.next_offset <= best.stop]
        views = [
            SegmentView(s.base_offset, s.next_offset, s.size, s.max_timestamp, _dup(s.fd))
            for s in segs
        ]
        params = CleanParams(
            segment_bytes=cfg.segment_bytes,
            index_interval_bytes=cfg.index_interval_bytes,
            delete_retention_ms=cfg.delete_retention_ms,
            now_ms=now,
            dedupe_buffer_bytes=max(1, self.dedupe_buffer_bytes // max(self.threads, 1)),
            aborted=tuple(lg.aborted_entries()),
        )
        with self._lock:
            self._busy.add(best.tp)
        return _Job(
            best.tp,
            lg,
            best.first_dirty,
            best.stop,
            views,
            segs,
            params,
            [(s.size, s.next_offset) for s in segs],
        )

    def _swap(
        self, job: _Job, olds: list[Segment], snap: list[tuple[int, int]], g: CleanedGroup
    ) -> bool:
        """On the loop: the segments must be unchanged (no truncation) and still present.
        The cleaned segment's .txnindex, written with it, leaves out the ABORT markers
        the group dropped, so no fetch sees one without the other."""
        lg = job.lg
        if any((s.size, s.next_offset) != sn or s.closed for s, sn in zip(olds, snap)):
            discard_cleaned(lg.directory, g.base_offset)
            return False
        return lg.replace_segments(olds, g.base_offset)


def _dup(fd: int) -> int:
    import os

    return os.dup(fd)


def _lso(part: CleanableReplica) -> int:
    lso = getattr(part, "last_stable_offset", None)
    return part.high_watermark if lso is None else int(lso)
