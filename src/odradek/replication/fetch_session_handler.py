"""The follower's side of incremental fetch sessions (KIP-227; Kafka's
FetchSessionHandler.java), sans-IO: one handler per leader connection.

The first fetch is *full* (epoch 0): it names every partition and the leader answers with
a session id. Each later fetch is *incremental* (the session's next epoch): it names only
the partitions whose fetch state changed since they were last sent -- a new fetch offset
after an append, a new leader epoch, log start offset or byte limit -- and lists the
partitions no longer fetched (removed, or backing off) as forgotten. The leader remembers
the rest and answers only partitions with news. With 50 idle ``__consumer_offsets``
partitions on a leader, a fetch then carries the one partition that moved instead of 51.

Any session error (FETCH_SESSION_ID_NOT_FOUND after an eviction or a leader restart,
INVALID_FETCH_SESSION_EPOCH), a failed round trip, or a leader answering session id 0
makes the next fetch full again (epoch 0, naming the old id so the leader frees it).

So does an answer the fetcher *dropped* (``answer_dropped``): the partition was re-added
(a new leader epoch: it truncates first) or removed while the fetch was in flight. The
leader's session counts what it sent -- the HW, the log start -- as delivered and sends
it again only when it changes, so on an idle partition the follower would never hear it
(sim seeds 7591, 15334, 17297: a follower's HW one behind the leader's for good). Kafka's
fetcher keeps such an answer when the re-added partition fetches from the same offset
(truncation on fetch, KIP-595's protocol); this follower truncates with
OffsetsForLeaderEpoch first (Kafka's older protocol) and cannot, so it starts over with a
full fetch, which the leader answers whole and at once (``FetchServing``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from odradek.errors import ErrorCode, error_name
from odradek.protocol.replica_fetch import ReplicaFetchPartition
from odradek.replication.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    next_epoch,
)

logger = logging.getLogger(__name__)

__all__ = ["FetchRequestData", "FetchSessionHandler"]

TopicPartition = tuple[str, int]
# What the leader caches per partition; a change in any of them must be sent (Kafka's
# FetchRequest.PartitionData equality).
_State = tuple[int, int, int, int, int]


def _state(p: ReplicaFetchPartition) -> _State:
    return (
        p.fetch_offset,
        p.current_leader_epoch,
        p.last_fetched_epoch,
        p.log_start_offset,
        p.partition_max_bytes,
    )


@dataclass(slots=True)
class FetchRequestData:
    """One fetch to send: its session fields, the partitions to name, the forgotten ones."""

    session_id: int
    epoch: int
    partitions: list[ReplicaFetchPartition]
    forgotten: list[tuple[str, list[int]]] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    def __init__(self, name: str = "") -> None:
        self.name = name
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # of the next request
        self._sent: dict[TopicPartition, _State] = {}  # what the leader's session holds
        # Partitions whose answer the fetcher dropped since the last fetch was built.
        self._dropped: set[TopicPartition] = set()
        self.full_fetches = 0
        self.incremental_fetches = 0

    def build(self, partitions: Iterable[ReplicaFetchPartition]) -> FetchRequestData:
        """The next fetch for the partitions to fetch now (all of them, in order)."""
        wanted = {(p.topic, p.partition): p for p in partitions}
        return self.build_from_states(
            {tp: _state(p) for tp, p in wanted.items()}, wanted.__getitem__
        )

    def build_from_states(
        self,
        states: dict[TopicPartition, _State],
        make: Callable[[TopicPartition], ReplicaFetchPartition],
    ) -> FetchRequestData:
        """``build`` for a fetcher with thousands of partitions: ``states`` holds each
        partition's fetch state as a plain tuple (fetch offset, current leader epoch,
        last fetched epoch, log start offset, partition max bytes), and ``make`` builds
        the request entry only for the partitions the fetch names -- on an idle
        incremental fetch, none (issue 13)."""
        dropped, self._dropped = self._dropped, set()
        if any(tp in states for tp in dropped):
            # See ``answer_dropped``; one no longer fetched is forgotten below, and the
            # leader answers it whole when it is added again.
            self.epoch = INITIAL_EPOCH
        if self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH:
            self._sent = dict(states)
            self.full_fetches += 1
            return FetchRequestData(self.session_id, INITIAL_EPOCH, [make(tp) for tp in states])
        return self._incremental(states, [tp for tp in self._sent if tp not in states], make)

    def build_changes(
        self,
        states: dict[TopicPartition, _State],
        gone: Iterable[TopicPartition],
        make: Callable[[TopicPartition], ReplicaFetchPartition],
    ) -> FetchRequestData | None:
        """``build_from_states`` when the caller knows which partitions changed since
        the last fetch it built: ``states`` those still fetched (named when their state
        differs from what the session holds), ``gone`` those no longer fetched
        (forgotten). Every other partition is as it was sent, so the fetch is built
        without a pass over them (issue 29). None when that is not the answer -- no
        session yet, a full fetch due, or an answer dropped."""
        if self._dropped or self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH:
            return None
        return self._incremental(states, gone, make)

    def _incremental(
        self,
        states: dict[TopicPartition, _State],
        gone: Iterable[TopicPartition],
        make: Callable[[TopicPartition], ReplicaFetchPartition],
    ) -> FetchRequestData:
        """The session's next incremental fetch: names the partitions of ``states`` whose
        state differs from what the session holds, forgets those of ``gone`` it holds."""
        sent = self._sent
        named = []
        for tp, state in states.items():
            if sent.get(tp) != state:
                sent[tp] = state
                named.append(make(tp))
        forgotten: dict[str, list[int]] = {}
        for tp in gone:
            if sent.pop(tp, None) is not None:
                forgotten.setdefault(tp[0], []).append(tp[1])
        self.incremental_fetches += 1
        return FetchRequestData(self.session_id, self.epoch, named, list(forgotten.items()))

    def handle_response(self, request: FetchRequestData, error_code: int, session_id: int) -> bool:
        """Update the session from the response's top-level fields; False when the fetch
        failed as a whole (its partitions carry nothing; the next fetch is full)."""
        if error_code != ErrorCode.none:
            if error_code == ErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID  # nothing left to close
            logger.info(
                "%s: fetch session %d epoch %d: %s; the next fetch is full",
                self.name,
                request.session_id,
                request.epoch,
                error_name(error_code),
            )
            self.epoch = INITIAL_EPOCH
            return False
        if request.full:
            # Id 0: the leader keeps no session (cache full, or sessions disabled).
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id else INITIAL_EPOCH
            return True
        if session_id != request.session_id:
            logger.info(
                "%s: leader answered session %d to session %d; the next fetch is full",
                self.name,
                session_id,
                request.session_id,
            )
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH
            return True
        self.epoch = next_epoch(self.epoch)
        return True

    def answer_dropped(self, tp: TopicPartition) -> None:
        """The fetcher dropped ``tp``'s part of the last answer (see the module
        docstring): the next fetch naming ``tp`` is full."""
        self._dropped.add(tp)

    def handle_error(self) -> None:
        """The round trip failed (connection lost, timeout, malformed response): the
        leader may or may not have advanced the session, so start over with a full fetch
        that closes it."""
        self.epoch = INITIAL_EPOCH
