"""The leader's side of incremental fetch sessions (KIP-227; Kafka's FetchSession.scala).

A fetch names a session by (``session_id``, ``session_epoch``):

* epoch -1 (``FINAL_EPOCH``): no session (Fetch v4-v6, librdkafka); a non-zero id closes
  that session first. Every partition is named and answered.
* epoch 0 (``INITIAL_EPOCH``): a *full* fetch that opens a new session (closing the named
  one, if any) when the cache has a slot; the response carries the new id, or id 0 when
  there is no room (the client then keeps sending full fetches).
* epoch > 0: an *incremental* fetch on an existing session. The request names only the
  partitions whose fetch state changed (added or updated) and lists removed ones under
  ``forgotten_topics_data``; the session remembers the rest. The response carries only the
  partitions with something to say: records, an error, or a new high watermark, last
  stable offset or log start offset. An unknown id answers FETCH_SESSION_ID_NOT_FOUND, a
  wrong epoch INVALID_FETCH_SESSION_EPOCH; the client then starts over with a full fetch.

Every partition of the session is read on every fetch (not only the named ones), as in
Kafka: a follower's fetch must still count for the partitions it did not name (its fetch
offset there is the cached one, and it keeps the follower caught up, REQ-R6, R16), and
a delayed fetch must wake up for data on any of them (REQ-R17).

FETCH_SESSION_TOPIC_ID_ERROR belongs to Fetch v13+ (topic ids); the broker serves Fetch up
to v12, where topics are named, so it never arises here.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. Kafka's
eviction, simplified: when the cache is full, a new session may take the slot of (1) the
least recently used session idle for ``min.incremental.fetch.session.eviction.ms``, else
(2) the smallest consumer session if the newcomer is a follower (follower sessions are
privileged: replication must not lose its session to consumers), else (3) the smallest
consumer session with fewer partitions than a consumer newcomer. Otherwise no session is
created and the fetch is answered as a sessionless full fetch.

This module is sans-IO: it decides which partitions a fetch reads and which of the
results the response carries; ``ReplicaManager.fetch_messages`` does the reading.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from odradek.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.replication.replica_manager import FetchEntry

logger = logging.getLogger(__name__)

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "FetchKind",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 0x7FFFFFFF

TopicPartition = tuple[str, int]
Topics = list[tuple[str, list["FetchEntry"]]]


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: epochs count up from 1 and wrap to 1, never to 0
    (which would mean "open a new session")."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: the fetch state last named by the client (``entry``) and
    what the last response told it (to decide whether the next one must mention it)."""

    topic: str
    entry: FetchEntry
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData: the partition goes into an
        incremental response when it has records, an error, or a changed HW / LSO / log
        start; the cached values follow what is sent."""
        r = self.entry.result
        # The read leaves ``records`` None unless it found some.
        respond = bool(r.error_code) or r.records is not None
        if r.high_watermark != self.high_watermark:
            self.high_watermark = r.high_watermark
            respond = True
        if r.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = r.last_stable_offset
            respond = True
        if r.log_start_offset != self.log_start_offset:
            self.log_start_offset = r.log_start_offset
            respond = True
        return respond


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's session (replica_id >= 0)
    partitions: dict[TopicPartition, CachedPartition]
    epoch: int  # the epoch the next incremental fetch must carry
    created_ms: int
    last_used_ms: int

    def topics(self) -> Topics:
        """Every partition of the session, grouped by topic (the fetch reads them all)."""
        out: dict[str, list[FetchEntry]] = {}
        for cp in self.partitions.values():
            out.setdefault(cp.topic, []).append(cp.entry)
        return list(out.items())


class FetchKind(Enum):
    SESSIONLESS = "sessionless"  # a full fetch without a session (id 0 in the response)
    FULL = "full"  # a full fetch that opened a session
    INCREMENTAL = "incremental"
    ERROR = "error"  # a session error: top-level error code, no partitions


@dataclass(slots=True)
class FetchContext:
    """How to answer one fetch: the partitions to read and, after the read, which of them
    the response carries (``response_topics``)."""

    kind: FetchKind
    session_id: int = INVALID_SESSION_ID
    error_code: int = 0
    topics: Topics = field(default_factory=list)
    session: FetchSession | None = None

    def response_topics(self) -> Topics:
        """The partitions the response carries (call after the final read). A full
        response carries all, and primes the session's cached values; an incremental one
        only those with something new (KIP-227)."""
        session = self.session
        if session is None:
            return self.topics
        if self.kind is FetchKind.FULL:
            for cp in session.partitions.values():
                cp.must_respond()
            self._rotate()
            return self.topics
        grouped: dict[str, list[FetchEntry]] = {}
        for cp in session.partitions.values():
            if cp.must_respond():
                grouped.setdefault(cp.topic, []).append(cp.entry)
        self._rotate()
        return list(grouped.items())

    def _rotate(self) -> None:
        """Kafka moves the partitions that returned records to the end of the session, so
        that under a byte limit the next fetches serve the others first (no starvation)."""
        session = self.session
        assert session is not None
        moved = [tp for tp, cp in session.partitions.items() if cp.entry.result.records is not None]
        if moved and len(moved) < len(session.partitions):
            for tp in moved:
                session.partitions[tp] = session.partitions.pop(tp)


class FetchSessionCache:
    """Kafka's FetchSessionCache + FetchManager.newContext (see the module docstring)."""

    def __init__(
        self,
        max_slots: int = 1000,
        eviction_ms: int = 120_000,
        rng: random.Random | None = None,
        max_partitions: int = 200_000,
    ) -> None:
        self.max_slots = max_slots
        # Hostile input: an incremental fetch may name any partition, known or not, and the
        # session keeps it. The partitions cached over all sessions are bounded (by default
        # at odradek.max.partitions, what the cluster may have); a fetch that would pass the
        # bound is served without a session, or loses its session (FETCH_SESSION_ID_NOT_FOUND:
        # the client starts over with a full fetch).
        self.max_partitions = max_partitions
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}  # insertion order = LRU order
        self._rng = rng or random.SystemRandom()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def cached_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def new_context(
        self,
        session_id: int,
        epoch: int,
        requested: Topics,
        forgotten: Iterable[tuple[str, Iterable[int]]],
        *,
        follower: bool,
        now_ms: int,
    ) -> FetchContext:
        if epoch == FINAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            return FetchContext(FetchKind.SESSIONLESS, topics=requested)
        if epoch == INITIAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # the client starts over: its old session goes
            session = self._create(requested, follower, now_ms)
            if session is None:
                return FetchContext(FetchKind.SESSIONLESS, topics=requested)
            return FetchContext(FetchKind.FULL, session.id, topics=requested, session=session)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(
                FetchKind.ERROR, error_code=int(ErrorCode.fetch_session_id_not_found)
            )
        if session.epoch != epoch:
            return FetchContext(
                FetchKind.ERROR, error_code=int(ErrorCode.invalid_fetch_session_epoch)
            )
        added = sum(
            1
            for topic, entries in requested
            for e in entries
            if (topic, e.result.index) not in session.partitions
        )
        if added and self.cached_partitions() + added > self.max_partitions:
            self.remove(session_id)
            return FetchContext(
                FetchKind.ERROR, error_code=int(ErrorCode.fetch_session_id_not_found)
            )
        for topic, entries in requested:
            for e in entries:
                tp = (topic, e.result.index)
                cp = session.partitions.get(tp)
                if cp is None:
                    session.partitions[tp] = CachedPartition(topic, e)
                else:
                    # The client's new fetch state; what it was last told stays cached.
                    cp.entry = e
        for topic, indexes in forgotten:
            for i in indexes:
                session.partitions.pop((topic, i), None)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        self.sessions.pop(session.id)  # move to the most recently used end
        self.sessions[session.id] = session
        return FetchContext(
            FetchKind.INCREMENTAL, session.id, topics=session.topics(), session=session
        )

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    # ------------------------------------------------------------------ internals
    def _create(self, requested: Topics, follower: bool, now_ms: int) -> FetchSession | None:
        if self.max_slots <= 0:
            return None
        size = sum(len(entries) for _, entries in requested)
        if self.cached_partitions() + size > self.max_partitions:
            return None  # served without a session (see max_partitions)
        if len(self.sessions) >= self.max_slots and not self._evict_one(follower, size, now_ms):
            return None
        session_id = self._new_id()
        partitions = {
            (topic, e.result.index): CachedPartition(topic, e)
            for topic, entries in requested
            for e in entries
        }
        session = FetchSession(
            session_id, follower, partitions, next_epoch(INITIAL_EPOCH), now_ms, now_ms
        )
        self.sessions[session_id] = session
        return session

    def _evict_one(self, follower: bool, size: int, now_ms: int) -> bool:
        victim: FetchSession | None = None
        for s in self.sessions.values():  # least recently used first
            if now_ms - s.last_used_ms >= self.eviction_ms:
                victim = s
                break
        if victim is None:
            consumers = [
                s
                for s in self.sessions.values()
                if not s.privileged and (follower or len(s.partitions) < size)
            ]
            if consumers:
                victim = min(consumers, key=lambda s: len(s.partitions))
        if victim is None:
            return False
        logger.debug("evicting fetch session %d (%d partitions)", victim.id, len(victim.partitions))
        del self.sessions[victim.id]
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _INT32_MAX)
            if session_id not in self.sessions:
                return session_id
