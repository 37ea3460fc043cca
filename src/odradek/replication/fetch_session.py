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

A consumer's session is read whole on every fetch (not only the named partitions), as in
Kafka. A *follower's* session is not: with thousands of idle partitions per leader that
visit was most of an idle broker's CPU (issue 13). The session keeps an ``active`` set --
the partitions the next fetch must read: named ones, ones whose last read had something
to say (records, an error, or a follower not yet at the log end), and ones the replica
manager marks when something changes on them (an append, an HW, log start or role
change: the same events that wake the purgatory). The rest are *idle*: their last read
found the follower at the log end and nothing changed since, so a read now would return
nothing new. They are skipped, and still count as fetched (REQ-R6, R16): the replica
manager credits the follower with being caught up as of the session's last fetch
(``last_used_ms``) when the ISR is checked, and when a partition leaves the idle set. A
delayed follower fetch watches the session as a whole (``marks``), so data on any of its
partitions, named or not, completes it (REQ-R17).

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

from odradek.configdefs import broker_default
from odradek.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.replication.fetch_serving import FetchEntry

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
        start; the cached values follow what is sent. An error caches HW -1, as Kafka's
        does: the follower takes nothing from an error answer (a read that failed after it
        took the HW, OFFSET_OUT_OF_RANGE, carries it), so the answer after the error must
        carry the HW again."""
        r = self.entry.result
        # The read leaves ``records`` None unless it found some.
        respond = bool(r.error_code) or r.records is not None
        if r.high_watermark != self.high_watermark:
            self.high_watermark = r.high_watermark
            respond = True
        if r.error_code:
            self.high_watermark = -1
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
    replica_id: int = -1
    # Follower sessions: the partitions the next read must visit (see the module
    # docstring), in rotation order (a dict: insertion-ordered, O(1) moves).
    active: dict[TopicPartition, None] = field(default_factory=dict)
    marks: int = 0  # changes marked so far (a delayed fetch compares it)

    @property
    def skips_idle(self) -> bool:
        """Only follower sessions skip idle partitions (see the module docstring)."""
        return self.privileged

    def topics(self, only: Iterable[TopicPartition] | None = None) -> Topics:
        """The session's partitions (or ``only`` those), grouped by topic."""
        out: dict[str, list[FetchEntry]] = {}
        if only is None:
            for cp in self.partitions.values():
                out.setdefault(cp.topic, []).append(cp.entry)
        else:
            for tp in only:
                held = self.partitions.get(tp)
                if held is not None:
                    out.setdefault(held.topic, []).append(held.entry)
        return list(out.items())

    def mark(self, tp: TopicPartition) -> bool:
        """Something changed on ``tp`` at the leader: the next read visits it. True when
        it was idle until now (the follower was caught up as of ``last_used_ms``)."""
        self.marks += 1
        if tp in self.active or tp not in self.partitions:
            return False
        self.active[tp] = None
        return True

    def idle_fetch_offset(self, tp: TopicPartition) -> int | None:
        """The follower's fetch offset on an idle partition (None: not idle)."""
        if tp in self.active:
            return None
        cp = self.partitions.get(tp)
        return None if cp is None else cp.entry.fetch_offset

    def settle(self, topics: Topics) -> None:
        """After a read: partitions whose read found nothing to say become idle; the
        others stay active, those that returned records moving to the back (the next
        fetch serves the others first under a byte limit, KIP-74)."""
        active = self.active
        for topic, entries in topics:
            for e in entries:
                tp = (topic, e.result.index)
                if tp not in self.partitions:
                    continue
                if e.idle:
                    active.pop(tp, None)
                else:
                    if e.result.records is not None:
                        active.pop(tp, None)
                    active[tp] = None


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
    # A follower session's partitions read so far by this fetch (it may read again while
    # it waits): the incremental response considers these only.
    read: dict[TopicPartition, None] = field(default_factory=dict)
    reads: int = 0

    @property
    def follower_session(self) -> FetchSession | None:
        """The session, when it skips idle partitions (a follower's)."""
        s = self.session
        return s if s is not None and s.skips_idle else None

    def topics_to_read(self) -> Topics:
        """What the next read of this fetch visits: every partition, or for a follower
        session its active ones (recorded in ``read``)."""
        session = self.follower_session
        if session is None:
            return self.topics
        if self.reads == 0:  # the first read: what new_context chose
            topics = self.topics
        else:
            topics = session.topics(session.active)
        self.reads += 1
        for topic, entries in topics:
            for e in entries:
                self.read[(topic, e.result.index)] = None
        return topics

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
            if not session.skips_idle:
                self._rotate(session.partitions)
            return self.topics
        grouped: dict[str, list[FetchEntry]] = {}
        if session.skips_idle:
            # Idle partitions were not read: nothing about them changed (see the module
            # docstring), so they have nothing to say. Rotation is the active set's.
            for tp in self.read:
                read = session.partitions.get(tp)
                if read is not None and read.must_respond():
                    grouped.setdefault(read.topic, []).append(read.entry)
            return list(grouped.items())
        for cp in session.partitions.values():
            if cp.must_respond():
                grouped.setdefault(cp.topic, []).append(cp.entry)
        self._rotate(session.partitions)
        return list(grouped.items())

    @staticmethod
    def _rotate(partitions: dict[TopicPartition, CachedPartition]) -> None:
        """Kafka moves the partitions that returned records to the end of the session, so
        that under a byte limit the next fetches serve the others first (no starvation)."""
        moved = [tp for tp, cp in partitions.items() if cp.entry.result.records is not None]
        if moved and len(moved) < len(partitions):
            for tp in moved:
                partitions[tp] = partitions.pop(tp)


# The table's defaults (the broker passes its ReplicaManagerSettings' values).
_DEFAULT_SLOTS: int = broker_default("max.incremental.fetch.session.cache.slots")
_DEFAULT_EVICTION_MS: int = broker_default("min.incremental.fetch.session.eviction.ms")
_DEFAULT_MAX_PARTITIONS: int = broker_default("odradek.max.partitions")


class FetchSessionCache:
    """Kafka's FetchSessionCache + FetchManager.newContext (see the module docstring)."""

    def __init__(
        self,
        max_slots: int = _DEFAULT_SLOTS,
        eviction_ms: int = _DEFAULT_EVICTION_MS,
        rng: random.Random | None = None,
        max_partitions: int = _DEFAULT_MAX_PARTITIONS,
    ) -> None:
        self.max_slots = max_slots
        # Hostile input: an incremental fetch may name any partition, known or not, and the
        # session keeps it. The partitions cached over all sessions are bounded (by default
        # at odradek.max.partitions, what the cluster may have); a fetch that would pass the
        # bound is served without a session, or loses its session (FETCH_SESSION_ID_NOT_FOUND:
        # the client starts over with a full fetch).
        self.max_partitions = max_partitions
        self.eviction_ms = eviction_ms
        # Insertion order = LRU order. Read-only outside this class: a session leaves it
        # only through ``remove`` or eviction, which also take it out of ``_holders``.
        self.sessions: dict[int, FetchSession] = {}
        # Follower sessions by partition, so a change on a partition reaches the sessions
        # that hold it in O(sessions) (``holders``).
        self._holders: dict[TopicPartition, dict[int, FetchSession]] = {}
        self._rng = rng or random.SystemRandom()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def cached_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def holders(self, tp: TopicPartition) -> list[FetchSession]:
        """The follower sessions holding ``tp``."""
        held = self._holders.get(tp)
        return list(held.values()) if held else []

    def new_context(
        self,
        session_id: int,
        epoch: int,
        requested: Topics,
        forgotten: Iterable[tuple[str, Iterable[int]]],
        *,
        follower: bool,
        now_ms: int,
        replica_id: int = -1,
    ) -> FetchContext:
        if epoch == FINAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            return FetchContext(FetchKind.SESSIONLESS, topics=requested)
        if epoch == INITIAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # the client starts over: its old session goes
            session = self._create(requested, follower, now_ms, replica_id)
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
        skips = session.skips_idle
        for topic, entries in requested:
            for e in entries:
                tp = (topic, e.result.index)
                cp = session.partitions.get(tp)
                if cp is None:
                    session.partitions[tp] = CachedPartition(topic, e)
                    if skips:
                        self._holders.setdefault(tp, {})[session.id] = session
                else:
                    # The client's new fetch state; what it was last told stays cached.
                    cp.entry = e
                if skips:
                    session.active[tp] = None  # a named partition is always read
        for topic, indexes in forgotten:
            for i in indexes:
                tp = (topic, i)
                if session.partitions.pop(tp, None) is not None and skips:
                    session.active.pop(tp, None)
                    self._unhold(tp, session.id)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        self.sessions.pop(session.id)  # move to the most recently used end
        self.sessions[session.id] = session
        # A follower's session reads only its active partitions (see the module docstring).
        topics = session.topics(session.active) if skips else session.topics()
        return FetchContext(FetchKind.INCREMENTAL, session.id, topics=topics, session=session)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self._forget_holder(session)
        return session

    def _forget_holder(self, session: FetchSession) -> None:
        if session.skips_idle:
            for tp in session.partitions:
                self._unhold(tp, session.id)

    def _unhold(self, tp: TopicPartition, session_id: int) -> None:
        held = self._holders.get(tp)
        if held is not None:
            held.pop(session_id, None)
            if not held:
                del self._holders[tp]

    # ------------------------------------------------------------------ internals
    def _create(
        self, requested: Topics, follower: bool, now_ms: int, replica_id: int = -1
    ) -> FetchSession | None:
        if self.max_slots <= 0:
            return None
        if follower and replica_id >= 0:
            self._retire_older_sessions(replica_id)
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
            session_id,
            follower,
            partitions,
            next_epoch(INITIAL_EPOCH),
            now_ms,
            now_ms,
            replica_id=replica_id if follower else -1,
        )
        if follower:
            session.active = dict.fromkeys(partitions)  # a full fetch reads them all
            for tp in partitions:
                self._holders.setdefault(tp, {})[session_id] = session
        self.sessions[session_id] = session
        return session

    def _retire_older_sessions(self, replica_id: int) -> None:
        """A follower opens a session: its other sessions here are over. A broker runs
        one fetcher per source broker (``num.replica.fetchers`` is not supported), so an
        older session of the same follower belongs to a connection or an incarnation
        that is gone -- but a fetch it sent may still arrive (delayed on the wire, sent
        just before a crash). Served, it would record the follower's fetch offset as it
        was then, while its live session holds the partition idle at the log end: the
        leader never again sees the follower caught up, and it stays out of the ISR for
        as long as the partition is idle (odradek sim seed 5005). Its session gone, such
        a fetch is answered FETCH_SESSION_ID_NOT_FOUND and records nothing. (Kafka
        fences it with the broker epoch in the fetch, KIP-903, in KRaft mode.)"""
        stale = [
            s.id for s in self.sessions.values() if s.privileged and s.replica_id == replica_id
        ]
        for session_id in stale:
            self.remove(session_id)

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
        self._forget_holder(victim)
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _INT32_MAX)
            if session_id not in self.sessions:
                return session_id
