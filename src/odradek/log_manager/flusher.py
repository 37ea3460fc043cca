"""The broker's log flusher: flush policy, group commit, recovery-point checkpoints.

Three jobs, all off the request path (REQ-R18, R27):

* **Flush policy** (Kafka's ``flush.messages`` / ``flush.ms``, broker defaults
  ``log.flush.interval.messages`` / ``log.flush.interval.ms``). A log asks to be flushed
  through ``Log.flush_listener`` when ``flush.messages`` unflushed messages piled up or it
  rolled a segment (Kafka flushes the rolled segment in the background); a scheduler
  looks for logs whose ``flush.ms`` elapsed every ``log.flush.scheduler.interval.ms``.
  Kafka's default for that interval is Long.MAX_VALUE, which makes ``flush.ms`` inert
  unless the operator also sets it; here an unset interval means "check every second",
  so the topic config works on its own. With both unset (the default) nothing is
  fsynced except at roll, close and clean shutdown: Kafka's "leave it to the OS".
* **Durable acknowledgement** (``odradek.ack.fsync=true``, beyond Kafka). Every append
  to such a log marks it dirty; the flusher fsyncs it in a worker thread, at most one
  job per log at a time and different logs in parallel (group commit: one fsync covers
  every batch that arrived while the previous one ran), and advances the log's durable
  offset to the LEO captured before its fsync.
  The leader's HW then counts its own *durable* offset instead of its LEO
  (``Partition.maybe_advance_high_watermark``), followers fsync before reporting a fetch
  offset (``ReplicaFetcher``), and acks=1 answers after the leader's fsync — so an
  acknowledged record, and anything a consumer can read (below the HW), is on the disk
  of the leader (acks=1) or of every ISR member (acks=all).
* **Recovery-point checkpoint** every ``log.flush.offset.checkpoint.interval.ms``
  (60 s): after a crash, only the data past it is CRC-scanned.

fsync never runs on the event loop; the loop only captures what to sync
(``Log.begin_flush``) and publishes the result (``Log.complete_flush``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from odradek.configdefs import broker_default
from odradek.errors import KafkaError
from odradek.storage.checkpoint import write_checkpoint
from odradek.storage.durability import FlushJob
from odradek.storage.log import Log

__all__ = ["Flusher", "scheduler_interval_s", "LONG_MAX"]

logger = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
FLUSH_THREADS = 4  # fsyncs of different logs in parallel (they share journal commits)
DEFAULT_CHECK_INTERVAL_S = 1.0  # when log.flush.scheduler.interval.ms is unset (see above)


def scheduler_interval_s(configured_ms: int | None) -> float:
    """The flush.ms check period: the broker setting, or 1 s when unset (Long.MAX)."""
    if configured_ms is None or configured_ms >= LONG_MAX or configured_ms <= 0:
        return DEFAULT_CHECK_INTERVAL_S
    return max(configured_ms / 1000, 0.01)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Flusher:
    """One per broker. ``mark`` is cheap and callable from any code on the event loop."""

    def __init__(
        self,
        *,
        logs: Callable[[], Iterable[Log]],
        on_flushed: Callable[[Log], None],
        recovery_points: Callable[[], dict[tuple[str, int], int]] | None = None,
        checkpoint_path: Path | None = None,
        scheduler_interval_ms: int | None = None,
        checkpoint_interval_ms: int = broker_default("log.flush.offset.checkpoint.interval.ms"),
    ) -> None:
        self._logs = logs
        self._on_flushed = on_flushed
        self._recovery_points = recovery_points
        self._checkpoint_path = checkpoint_path
        self.check_interval_s = scheduler_interval_s(scheduler_interval_ms)
        self.checkpoint_interval_s = max(checkpoint_interval_ms / 1000, 0.1)
        self._dirty: dict[int, Log] = {}
        # The logs the flush.ms scheduler checks: those with flush.ms set (below
        # Long.MAX) or odradek.ack.fsync (``watch``). With Kafka's defaults none is, and
        # a tick visits nothing: looking at every log each second was a third of an idle
        # broker's CPU with 10,000 partitions (issue 29).
        self._scheduled: dict[int, Log] = {}
        self._in_flight: set[int] = set()
        self._event = asyncio.Event()
        self._waiters: list[tuple[list[tuple[Log, int]], asyncio.Future[None]]] = []
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Counters for tests and benchmarks: flush jobs finished, and completed.
        self.rounds = 0
        self.syncs = 0

    # ------------------------------------------------------------------ API
    def watch(self, lg: Log) -> None:
        """(Re)consider ``lg`` for the scheduler: when it opens, and when its config
        changes (the replica manager swaps ``log.config`` on a topic config change)."""
        cfg = lg.config
        if (cfg.flush_ms is not None and cfg.flush_ms < LONG_MAX) or cfg.ack_fsync:
            self._scheduled[id(lg)] = lg
        else:
            self._scheduled.pop(id(lg), None)

    def mark(self, lg: Log) -> None:
        """``lg`` wants an fsync (its ``flush_listener``); coalesced until the next round."""
        self._dirty[id(lg)] = lg
        self._event.set()

    async def wait_durable(self, items: Sequence[tuple[Log, int]]) -> None:
        """Return once each log's durable offset reaches its ``end`` (exclusive), or the
        log was closed or truncated below it. Marks the logs dirty."""
        pending = [(lg, end) for lg, end in items if not _settled(lg, end)]
        if not pending:
            return
        for lg, _ in pending:
            self.mark(lg)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((pending, fut))
        await fut

    def start(self) -> None:
        for lg in self._logs():  # those opened before (the broker also watches each open)
            self.watch(lg)
        loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="log-flusher")
        self._tasks = [
            loop.create_task(self._run()),
            loop.create_task(self._schedule()),
            loop.create_task(self._checkpoints()),
        ]

    def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        self._tasks = []
        if self._executor is not None:
            # A job in flight finishes on its own and closes its fds; the clean
            # shutdown's synchronous flush covers the rest.
            self._executor.shutdown(wait=False)
            self._executor = None
        for _, fut in self._waiters:
            if not fut.done():
                fut.cancel()
        self._waiters = []

    # ------------------------------------------------------------------ group commit
    async def _run(self) -> None:
        while True:
            await self._event.wait()
            self._event.clear()
            self._start_ready()

    def _start_ready(self) -> None:
        """Start one job per dirty log that has none in flight. A log marked again while
        its fsync runs waits for it: the next job then covers every batch that arrived
        meanwhile (group commit per log). Logs sync in parallel (a few threads), so a
        leader's fsync never queues behind the followers' of other partitions."""
        loop = asyncio.get_running_loop()
        now = _now_ms()
        for key, lg in list(self._dirty.items()):
            if key in self._in_flight:
                continue
            del self._dirty[key]
            if lg.closed:
                continue
            try:
                # Durable-ack logs skip the active segment's index fsync (rebuilt or
                # checked on load); Kafka's flush policy syncs everything.
                job = lg.begin_flush(now, with_indexes=not lg.config.ack_fsync)
            except Exception:
                logger.exception("flush of %s could not start", lg.directory.name)
                continue
            if job is None:
                continue
            try:
                fut = loop.run_in_executor(self._executor, job.run)
            except RuntimeError:  # executor shut down: the clean shutdown flushes
                job.close()
                return
            self._in_flight.add(key)
            fut.add_done_callback(
                lambda _f, key=key, lg=lg, job=job: (  # type: ignore[misc]
                    self._finished(key, lg, job)
                )
            )
        self._resolve()

    def _finished(self, key: int, lg: Log, job: FlushJob) -> None:
        self._in_flight.discard(key)
        self.rounds += 1
        if job.done or job.error is not None:
            try:
                lg.complete_flush(job)
                self.syncs += 1
                self._on_flushed(lg)
            except KafkaError as e:
                # Kafka takes the log dir offline; we keep the log and retry on the next
                # scheduler tick (waiters keep waiting meanwhile).
                logger.error("%s", e)
            except Exception:
                logger.exception("after flushing %s", lg.directory.name)
        else:
            job.close()  # cancelled before it ran
        self._resolve()
        if key in self._dirty:
            self._event.set()

    def _resolve(self) -> None:
        if not self._waiters:
            return
        keep = []
        for pending, fut in self._waiters:
            if fut.done():
                continue
            if all(_settled(lg, end) for lg, end in pending):
                fut.set_result(None)
            else:
                keep.append((pending, fut))
        self._waiters = keep

    # ------------------------------------------------------------------ scheduler
    async def _schedule(self) -> None:
        """flush.ms (Kafka's kafka-log-flusher task), plus a safety net for durable logs
        whose appends did not reach ``mark`` (e.g. a failed fsync to retry)."""
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                now = _now_ms()
                for key, lg in list(self._scheduled.items()):
                    if lg.closed:
                        del self._scheduled[key]
                        continue
                    if lg.flush_due(now) or (
                        lg.config.ack_fsync and lg.durable_offset < lg.log_end_offset
                    ):
                        self.mark(lg)
            except Exception:
                logger.exception("flush scheduler failed")

    async def _checkpoints(self) -> None:
        """log.flush.offset.checkpoint.interval.ms: the recovery-point checkpoint."""
        while True:
            await asyncio.sleep(self.checkpoint_interval_s)
            if self._recovery_points is None or self._checkpoint_path is None:
                continue
            try:
                entries = self._recovery_points()  # on the loop: a consistent snapshot
                await asyncio.to_thread(write_checkpoint, self._checkpoint_path, entries)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("recovery-point checkpoint failed")


def _settled(lg: Log, end: int) -> bool:
    return lg.closed or lg.durable_offset >= end or lg.log_end_offset < end
