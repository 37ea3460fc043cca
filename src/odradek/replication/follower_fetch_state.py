"""A leader's record of its followers' fetches (Kafka's Replica -- its
updateFetchStateOrThrow and isCaughtUp -- and Partition.updateFollowerFetchState and
lowWatermarkIfLeader).

Each follower fetch reports the follower's LEO (its fetch offset) and its log start
offset (REQ-R16): the leader keeps one ``ReplicaState`` per follower, decides from it
whether the follower is caught up (REQ-R6: its fetch asked for the leader's LEO, or for
at least the LEO the leader had at its previous fetch), and whether a follower outside
the ISR is a candidate to join it (the ISR rules themselves are in ``isr_changes.py``).
An idle follower fetch session's credit (``note_idle_fetch``, issue 13) and
DeleteRecords' low watermark read the same records.

``FollowerFetchState`` is a base class of ``Partition`` (partition.py), not an object of
its own: the follower records are part of the partition's replica state, which
``Partition`` alone assigns, and a fetch may move the HW and propose an ISR in the same
step. The attributes and methods declared in the class belong to ``Partition``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.replication.partition_state import (
    Fenced,
    IsrEligibility,
    IsrWrite,
    Leader,
    ReplicaState,
    State,
    Transition,
)

if TYPE_CHECKING:
    from odradek.storage.leader_epoch import LeaderEpochCache
    from odradek.storage.log import Log

__all__ = ["FollowerFetchState"]


class FollowerFetchState:
    """The followers' fetch positions, as their leader sees them (see the module
    docstring)."""

    # No instance dict: Partition declares every slot (two bases with slots of their own
    # could not be combined). Hidden from mypy, which would otherwise refuse assignments
    # to the attributes below as not being in this class's (empty) slots.
    if not TYPE_CHECKING:
        __slots__ = ()

    # Partition's attributes, read (and some assigned) here.
    topic: str
    index: int
    name: str
    log: Log
    epochs: LeaderEpochCache
    local_broker_id: int
    _replicas: tuple[int, ...]
    _state: State
    _hw: int
    _followers: dict[int, ReplicaState]
    _expand_candidates: set[int]
    _eligibility: IsrEligibility | None

    if TYPE_CHECKING:

        @property
        def isr(self) -> tuple[int, ...]: ...

        def _maybe_advance_hw(self) -> bool: ...

        def _propose_isr(self, now_ms: int, lag_max_ms: int | None) -> IsrWrite | None: ...

        def _isr_eligible(self, replica_id: int) -> bool: ...

        def _caught_up_in_epoch(self, fs: ReplicaState) -> bool: ...

    def follower_state(self, replica_id: int) -> ReplicaState | None:
        """A copy-free view for tests and diagnostics (do not mutate)."""
        return self._followers.get(replica_id)

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1
    ) -> Transition:
        """A follower's fetch offset is its LEO (REQ-R16). May move the HW and propose
        adding the follower to the ISR (REQ-R6, R21)."""
        t = Transition()
        st = self._state
        if replica_id not in self._replicas or not isinstance(st, (Leader, Fenced)):
            return t
        fs = self._followers.get(replica_id)
        if fs is None:
            fs = self._followers[replica_id] = ReplicaState()
        if log_start_offset > fs.log_start_offset:
            t.log_start_moved = True  # DeleteRecords may complete
            fs.log_start_offset = log_start_offset
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            fs.last_caught_up_ms = now_ms
        elif fetch_offset >= fs.leader_leo_at_last_fetch and fs.last_fetch_ms:
            fs.last_caught_up_ms = max(fs.last_caught_up_ms, fs.last_fetch_ms)
        fs.log_end_offset = fetch_offset
        fs.leader_leo_at_last_fetch = leo
        fs.last_fetch_ms = now_ms
        if type(st) is not Leader:
            return t
        assert isinstance(st, Leader)
        if replica_id not in st.isr:
            if (
                fetch_offset >= self._hw
                and self._caught_up_in_epoch(fs)
                and self._isr_eligible(replica_id)
            ):
                self._expand_candidates.add(replica_id)
            else:
                self._expand_candidates.discard(replica_id)
        t.hw_moved = self._maybe_advance_hw()
        if self._expand_candidates - set(st.isr):
            t.isr_write = self._propose_isr(now_ms, None)
        return t

    def follower_recorded_at(self, replica_id: int, fetch_offset: int) -> bool:
        """Has this leader taken ``replica_id``'s fetch at ``fetch_offset`` into account?
        Not when the follower is not (yet) one of its replicas -- a reassignment's new
        replica can fetch before the leader learns the new replica set -- and then its
        fetches must keep visiting the partition, or it never joins the ISR."""
        fs = self._followers.get(replica_id)
        return replica_id in self._replicas and fs is not None and fs.log_end_offset == fetch_offset

    def note_idle_fetch(self, replica_id: int, fetch_offset: int, at_ms: int) -> None:
        """A follower's fetch session skipped this partition as idle (its last read here
        found the follower at the log end, and nothing changed since): the follower's
        fetch at ``at_ms`` counts as one at ``fetch_offset``, the log end then -- it was
        caught up (REQ-R6), without visiting the partition on every fetch (issue 13)."""
        if not isinstance(self._state, (Leader, Fenced)):
            return
        fs = self._followers.get(replica_id)
        if fs is None or fs.log_end_offset != fetch_offset:
            return  # not what this follower last reported here: decide on its next fetch
        if at_ms > fs.last_caught_up_ms:
            fs.last_caught_up_ms = at_ms
        if at_ms > fs.last_fetch_ms:
            fs.last_fetch_ms = at_ms
        st = self._state
        # A caught-up follower outside the ISR rejoins at the next ISR check (REQ-R6), as
        # its fetch would make it a candidate if the partition were read: its last fetch
        # here may have come while the write removing it was in flight (it then still
        # counted as a member), and an idle session never reads the partition again. The
        # simulator's seed 308 kept such a follower out of the ISR for good.
        if (
            type(st) is Leader
            and replica_id not in st.isr
            and at_ms > fs.fetch_ms_out_of_isr
            and fetch_offset >= self._hw
            and self._caught_up_in_epoch(fs)
            and self._isr_eligible(replica_id)
        ):
            self._expand_candidates.add(replica_id)

    def low_watermark(self) -> int:
        """Smallest log start offset over the ISR (-1 while an ISR follower's is unknown):
        DeleteRecords answers once it reaches the requested offset (Kafka's
        lowWatermarkIfLeader, which takes alive replicas; out-of-ISR replicas are left out
        here so a dead follower cannot hold every DeleteRecords until its timeout)."""
        low = self.log.log_start_offset
        for rid in self.isr:
            if rid == self.local_broker_id:
                continue
            fs = self._followers.get(rid)
            low = min(low, fs.log_start_offset if fs is not None else -1)
        return low
