"""The fetch side of the replica manager (Kafka's ReplicaManager.fetchMessages): serve
a Fetch for consumers and followers (REQ-R3, R16, R17) -- record a follower's fetch
offsets, read whole batches as file slices, park a ``DelayedFetch`` in the purgatory when
fewer than ``min_bytes`` are available.

A follower's fetch session reads only its active partitions (``fetch_session.py``, issue
13): the idle ones are credited to the follower's ISR standing by the replica manager at
the ISR check, and a waiting follower fetch is watched under the session's own purgatory
key (``session_key``).

``FetchServing`` is an object the replica manager owns (``ReplicaManager.fetching``), and
it sees the replicas only through the narrow view it is constructed with: the hosted
partitions (read only), the leader lookup with its KIP-320 epoch check, and the callback
that applies a partition's transition (a follower's fetch can move the HW or expand the
ISR). Everything else it needs -- the fetch sessions, the fetch purgatory, the leader's
replication quota, the record tracer, the per-topic byte counters -- is handed to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.fetch_response import PartitionFetchResult
from odradek.replication.delayed import DelayedFetch, FetchWatch
from odradek.replication.fetch_session import FetchContext, FetchKind
from odradek.runtime import clock

if TYPE_CHECKING:
    from odradek.metadata.image import MetadataImage
    from odradek.metrics.stats import BrokerTopicStats
    from odradek.replication.fetch_session import FetchSessionCache
    from odradek.replication.partition import Partition
    from odradek.replication.partition_state import Transition
    from odradek.replication.purgatory import DelayedOperationPurgatory
    from odradek.replication.quota import ReplicationQuota
    from odradek.replication.trace import RecordTracer

logger = logging.getLogger(__name__)

__all__ = ["FetchEntry", "FetchParams", "FetchServing", "session_key"]

TopicPartition = tuple[str, int]


def session_key(session_id: int) -> TopicPartition:
    """The fetch purgatory's key for a follower fetch session as a whole. Kafka refuses
    empty topic names, so ("", id) never collides with a partition."""
    return ("", session_id)


@dataclass(slots=True)
class FetchEntry:
    """One partition of a fetch request; ``result`` is filled in by each read."""

    topic: str
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    log_start_offset: int  # a follower's own (DeleteRecords low watermark), else -1
    result: PartitionFetchResult
    # Set by each read: nothing to return and the fetcher is at the readable end (a
    # follower session then skips the partition until it changes: fetch_session.py).
    idle: bool = False


@dataclass(slots=True)
class FetchParams:
    replica_id: int  # >= 0: a follower (reads up to the LEO); -1: a consumer (HW)
    max_wait_s: float
    min_bytes: int
    max_bytes: int
    isolation_level: int = 0  # 1: read_committed (KIP-98), consumers only


class FetchServing:
    """The fetch requests of the replica manager (see the module docstring)."""

    def __init__(
        self,
        *,
        partitions: Mapping[TopicPartition, Partition],
        leader_partition: Callable[[str, int, MetadataImage, int], Partition],
        apply_transition: Callable[[Partition, Transition], None],
        fetch_sessions: FetchSessionCache,
        fetch_purgatory: DelayedOperationPurgatory[TopicPartition],
        leader_quota: ReplicationQuota,
        tracer: RecordTracer,
    ) -> None:
        self.partitions = partitions
        self.leader_partition = leader_partition
        self._apply_transition = apply_transition
        self.fetch_sessions = fetch_sessions
        self.fetch_purgatory = fetch_purgatory
        self.leader_quota = leader_quota
        self.tracer = tracer
        # Kafka's BytesOutPerSec counters: only on a broker with a metrics.listener (the
        # broker attaches them once its metrics exist; None: nothing counted).
        self.topic_stats: BrokerTopicStats | None = None

    def fetch_messages(
        self,
        params: FetchParams,
        topics: list[tuple[str, list[FetchEntry]]],
        image: MetadataImage,
        fctx: FetchContext | None = None,
    ) -> DelayedFetch | None:
        """Serve a fetch (REQ-R3, R16, R17): record a follower's fetch offsets, read,
        and return a delayed fetch to await if fewer than ``min_bytes`` are available
        (None: every result is already filled in). With a follower's fetch session
        (``fctx``), ``topics`` are the session's active partitions and each re-read
        visits the partitions that became active meanwhile (fetch_session.py)."""
        follower = params.replica_id >= 0
        if follower:
            self._record_follower_fetch(params.replica_id, topics, image)
        session = fctx.follower_session if fctx is not None else None
        first = [True]

        def read() -> tuple[list[tuple[str, list[FetchEntry]]], int, bool]:
            if session is None or first[0]:
                first[0] = False
                visited = topics
            else:
                assert fctx is not None
                visited = fctx.topics_to_read()
            total, errored = self._read(params, visited, image)
            if session is not None:
                session.settle(visited)
            return visited, total, errored

        _, total, errored = read()

        def answered() -> list[tuple[str, list[FetchEntry]]]:
            if session is None or fctx is None:
                return topics
            return session.topics(fctx.read)

        # A follower's full fetch (a new session: a restarted or re-pointed follower) is
        # answered at once even with nothing to read: the response tells the follower the
        # high watermark, which it otherwise learns only when this long poll ends. A
        # follower restarted with a stale checkpoint joins the ISR on this very fetch; had
        # it been elected before the parked answer came, it would lead with that stale
        # HW and serve consumers an empty partition (a loaded CI run of
        # test_aborted_transactions_are_served_by_every_replica_and_after_restarts).
        full_follower_fetch = follower and fctx is not None and fctx.kind is FetchKind.FULL
        if total >= params.min_bytes or params.max_wait_s <= 0 or errored or full_follower_fetch:
            self._trace_fetch(params, answered())
            if self.topic_stats is not None:
                self._count_fetched(follower, answered())
            return None
        if session is not None:
            # The session as a whole is watched: any of its partitions changing (named
            # in this fetch or not) marks it (``_wake``) and re-checks this fetch.
            op = DelayedFetch(
                params.max_wait_s, [], not follower, params.min_bytes, read, session=session
            )
            keys = [session_key(session.id)]
        else:
            watches = []
            for topic, entries in topics:
                for e in entries:
                    p = self.partitions.get((topic, e.result.index))
                    watches.append(FetchWatch(p, p.leader_epoch if p else -1, e.fetch_offset))
            op = DelayedFetch(params.max_wait_s, watches, not follower, params.min_bytes, read)
            keys = [(t, e.result.index) for t, entries in topics for e in entries]
        self.fetch_purgatory.try_complete_else_watch(op, keys)
        if self.tracer.enabled:
            op.done.add_done_callback(lambda _f: self._trace_fetch(params, answered()))
        if self.topic_stats is not None:
            op.done.add_done_callback(lambda _f: self._count_fetched(follower, answered()))
        return op

    def _count_fetched(self, follower: bool, topics: list[tuple[str, list[FetchEntry]]]) -> None:
        """Kafka's BytesOutPerSec (consumers) / ReplicationBytesOutPerSec (followers):
        the record bytes of the answer, once it is final."""
        stats = self.topic_stats
        if stats is None:
            return
        for topic, entries in topics:
            if not any((topic, e.result.index) in self.partitions for e in entries):
                continue  # not hosted here: no series (see append_records)
            ts = stats.topic(topic)
            ts.fetch_requests += len(entries)
            n = 0
            for e in entries:
                records = e.result.records
                if records is not None:
                    n += records.size if hasattr(records, "size") else len(records)
            if follower:
                ts.replication_bytes_out += n
            else:
                ts.bytes_out += n

    def _record_follower_fetch(
        self, replica_id: int, topics: list[tuple[str, list[FetchEntry]]], image: MetadataImage
    ) -> None:
        t = clock.time_ns() // 1_000_000  # the replica manager's now_ms
        for topic, entries in topics:
            for e in entries:
                tp = (topic, e.result.index)
                try:
                    p = self.leader_partition(topic, tp[1], image, e.current_leader_epoch)
                except KafkaError:
                    continue  # the read below reports the error for this partition
                hw_before = p.high_watermark
                tr = p.update_follower_fetch_state(
                    replica_id, e.fetch_offset, t, e.log_start_offset
                )
                if tr.hw_moved and self.tracer.enabled:
                    self.tracer.hw_moved(tp, hw_before, p.high_watermark, replica_id)
                self._apply_transition(p, tr)

    def _read(
        self, params: FetchParams, topics: list[tuple[str, list[FetchEntry]]], image: MetadataImage
    ) -> tuple[int, bool]:
        committed_only = params.replica_id < 0  # followers read up to the LEO (REQ-R16)
        read_committed = committed_only and params.isolation_level == 1
        quota = self.leader_quota
        now_s = clock.monotonic()
        remaining = params.max_bytes
        total = 0
        errored = False
        for topic, entries in topics:
            for e in entries:
                res = e.result
                res.error_code = 0
                res.records = None
                e.idle = False
                res.high_watermark = res.last_stable_offset = res.log_start_offset = -1
                try:
                    p = self.leader_partition(topic, res.index, image, e.current_leader_epoch)
                    res.high_watermark = p.high_watermark
                    res.last_stable_offset = p.last_stable_offset
                    res.log_start_offset = p.log.log_start_offset
                    res.aborted_transactions = None
                    limit = min(e.partition_max_bytes, remaining)
                    if limit <= 0 and total > 0:
                        continue
                    # KIP-73: a throttled replica outside the ISR gets nothing while the
                    # leader's replication quota is exceeded (Kafka's shouldLeaderThrottle).
                    throttled = (
                        not committed_only
                        and quota.is_throttled(topic, res.index)
                        and params.replica_id not in p.isr
                    )
                    if throttled and quota.is_exceeded(now_s):
                        continue
                    # KIP-74: the first partition with data returns at least one whole
                    # batch even when it exceeds max_bytes, so a consumer always progresses.
                    sl = p.read(
                        e.fetch_offset,
                        max(limit, 0),
                        min_one_batch=(total == 0),
                        committed_only=committed_only,
                        read_committed=read_committed,
                    )
                    if sl is None:
                        # Nothing to return, the fetcher at the readable end and its fetch
                        # recorded here: a follower session may skip the partition until
                        # it changes. A fetch the leader ignored (a replica it does not
                        # know yet) must come back, or the replica never joins the ISR.
                        e.idle = e.fetch_offset >= p.readable_end(committed_only) and (
                            committed_only
                            or p.follower_recorded_at(params.replica_id, e.fetch_offset)
                        )
                    if sl is not None and sl.size:
                        res.records = sl
                        if read_committed:
                            # KIP-98: the aborted transactions overlapping what is returned,
                            # so the consumer can drop their batches.
                            res.aborted_transactions = p.aborted_transactions(
                                e.fetch_offset, sl, res.last_stable_offset
                            )
                        total += sl.size
                        remaining -= sl.size
                        if throttled:
                            quota.record(sl.size, now_s)
                except KafkaError as err:
                    errored = True
                    res.error_code = int(err.code)
                except Exception:
                    errored = True
                    logger.exception("fetch from %s-%d failed", topic, res.index)
                    res.error_code = int(ErrorCode.unknown_server_error)
        return total, errored

    def _trace_fetch(self, params: FetchParams, topics: list[tuple[str, list[FetchEntry]]]) -> None:
        if not self.tracer.enabled:
            return
        for topic, entries in topics:
            for e in entries:
                p = self.partitions.get((topic, e.result.index))
                if e.result.records is not None and p is not None:
                    self.tracer.fetch_answered(
                        (topic, e.result.index),
                        e.fetch_offset,
                        p.readable_end(params.replica_id < 0),
                        params.replica_id,
                    )
