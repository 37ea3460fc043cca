"""A leader's record of its followers' fetches, owned by its ``Partition``.

Kafka's ``Partition`` keeps one ``Replica`` per remote replica in ``remoteReplicasMap``
(``Replica.updateFetchStateOrThrow``, ``lastCaughtUpTimeMs``, ``logEndOffset``), and the
ISR proposal (``maybeExpandIsr`` / ``getOutOfSyncReplicas``) reads it. Here
``RemoteReplicas`` is that map -- one ``ReplicaState`` per follower -- plus the followers
outside the ISR whose latest fetch qualified them to join it. It knows nothing of the
partition's role, log or leader epoch: the partition passes what a decision needs (its
LEO, HW, the offset its epoch started at, which brokers are eligible) and applies the
result, so the rules below are checked on this object alone.

* **Caught up** (REQ-R6). A follower is caught up at time T if its fetch at T asked for
  the leader's LEO, or asked for at least the LEO the leader had at its previous fetch
  (then it was caught up at the previous fetch's time) -- Kafka's rule.
* **Shrink.** An ISR member not caught up for ``replica.lag.time.max.ms`` is dropped.
* **Expand.** A candidate joins if it is still eligible (KIP-841), has reached the HW and
  the start of the current epoch; only a fetch makes a candidate, never stale knowledge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from odradek.replication.partition_state import ReplicaState

__all__ = ["RemoteReplicas"]


class RemoteReplicas:
    __slots__ = ("_states", "_candidates")

    def __init__(self) -> None:
        self._states: dict[int, ReplicaState] = {}
        # Followers outside the ISR whose latest fetch qualified them (Kafka's
        # maybeExpandIsr decides on a fetch, never on stale knowledge).
        self._candidates: set[int] = set()

    def reset(
        self, replicas: Iterable[int], isr: Iterable[int], local_broker_id: int, now_ms: int
    ) -> None:
        """This replica became leader: followers get the benefit of the doubt for one lag
        period (Kafka does the same)."""
        members = set(isr)
        self._candidates = set()
        self._states = {
            r: ReplicaState(
                last_caught_up_ms=now_ms,
                last_fetch_ms=now_ms,
                fetch_ms_out_of_isr=-1 if r in members else now_ms,
            )
            for r in replicas
            if r != local_broker_id
        }

    def clear(self) -> None:
        """No longer leader: nothing is known of any follower."""
        self._states = {}
        self._candidates = set()

    def get(self, replica_id: int) -> ReplicaState | None:
        return self._states.get(replica_id)

    @property
    def candidates(self) -> frozenset[int]:
        return frozenset(self._candidates)

    # ================================================================= fetches
    def update_fetch_state(
        self,
        replica_id: int,
        fetch_offset: int,
        leader_leo: int,
        now_ms: int,
        log_start_offset: int = -1,
    ) -> tuple[ReplicaState, bool]:
        """A follower's fetch at ``fetch_offset`` (its LEO, REQ-R16) while the leader's LEO
        is ``leader_leo`` (Kafka's Replica.updateFetchStateOrThrow). Returns the follower's
        state and whether its log start offset moved (DeleteRecords may complete)."""
        fs = self._states.get(replica_id)
        if fs is None:
            fs = self._states[replica_id] = ReplicaState()
        log_start_moved = False
        if log_start_offset > fs.log_start_offset:
            log_start_moved = True
            fs.log_start_offset = log_start_offset
        if fetch_offset >= leader_leo:
            fs.last_caught_up_ms = now_ms
        elif fetch_offset >= fs.leader_leo_at_last_fetch and fs.last_fetch_ms:
            fs.last_caught_up_ms = max(fs.last_caught_up_ms, fs.last_fetch_ms)
        fs.log_end_offset = fetch_offset
        fs.leader_leo_at_last_fetch = leader_leo
        fs.last_fetch_ms = now_ms
        return fs, log_start_moved

    def recorded_at(self, replica_id: int, fetch_offset: int) -> bool:
        """Is ``fetch_offset`` what ``replica_id`` last reported?"""
        fs = self._states.get(replica_id)
        return fs is not None and fs.log_end_offset == fetch_offset

    def note_idle(self, replica_id: int, fetch_offset: int, at_ms: int) -> ReplicaState | None:
        """An idle fetch session's credit: the follower's fetch at ``at_ms`` counts as one
        at ``fetch_offset``, the log end then, so it was caught up (REQ-R6). Returns its
        state, or None when ``fetch_offset`` is not what it last reported here (decide on
        its next fetch). A follower outside the ISR that qualifies may become a candidate
        on such a credit, if it fetched after leaving the ISR (``fetch_ms_out_of_isr``):
        its last read may have come while the write removing it was in flight (it still
        counted as a member), and an idle session never reads the partition again -- the
        simulator's seed 308 kept such a follower out of the ISR for good."""
        fs = self._states.get(replica_id)
        if fs is None or fs.log_end_offset != fetch_offset:
            return None
        if at_ms > fs.last_caught_up_ms:
            fs.last_caught_up_ms = at_ms
        if at_ms > fs.last_fetch_ms:
            fs.last_fetch_ms = at_ms
        return fs

    # ================================================================= ISR candidates
    def consider(self, replica_id: int, qualified: bool) -> None:
        """A fetch by a follower outside the ISR: it is a candidate iff it qualified."""
        if qualified:
            self._candidates.add(replica_id)
        else:
            self._candidates.discard(replica_id)

    def forget(self, brokers: Iterable[int]) -> None:
        """These are no candidates any more (joined the ISR, or left the image)."""
        self._candidates.difference_update(brokers)

    def has_candidates_outside(self, isr: Iterable[int]) -> bool:
        # Asked on every follower fetch; there is rarely a candidate (issue 29: CPU per
        # request), so no set is built then.
        return bool(self._candidates) and not self._candidates.issubset(isr)

    def mark_removed(self, old_isr: Iterable[int], new_isr: Iterable[int]) -> None:
        """Followers that just left the committed ISR: only a fetch after this may bring
        them back through an idle credit (``note_idle``)."""
        new = set(new_isr)
        for r in old_isr:
            if r not in new:
                fs = self._states.get(r)
                if fs is not None:
                    fs.fetch_ms_out_of_isr = fs.last_fetch_ms

    # ================================================================= leader decisions
    def min_log_end_offset(
        self, members: Iterable[int], local_broker_id: int, own: int
    ) -> int | None:
        """The smallest LEO over ``members`` given the leader's ``own``; None while one of
        them has not been heard from (it holds the HW, REQ-R16)."""
        low = own
        states = self._states
        for rid in members:
            if rid == local_broker_id:
                continue
            fs = states.get(rid)
            if fs is None or fs.log_end_offset < 0:
                return None
            if fs.log_end_offset < low:
                low = fs.log_end_offset
        return low

    def low_watermark(self, isr: Iterable[int], local_broker_id: int, own: int) -> int:
        """Smallest log start offset over the ISR, -1 while a member's is unknown."""
        low = own
        for rid in isr:
            if rid == local_broker_id:
                continue
            fs = self._states.get(rid)
            low = min(low, fs.log_start_offset if fs is not None else -1)
        return low

    def all_caught_up(
        self,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        local_broker_id: int,
        now_ms: int,
        lag_max_ms: int,
    ) -> bool:
        """Every replica is an ISR member and every follower caught up within the lag."""
        return (
            len(isr) == len(replicas)
            and local_broker_id in isr
            and self._members_in_sync(replicas, isr, local_broker_id, now_ms, lag_max_ms)
        )

    def _members_in_sync(
        self,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        local_broker_id: int,
        now_ms: int,
        lag_max_ms: int | None,
    ) -> bool:
        """Every ISR member but the leader is a replica and (unless ``lag_max_ms`` is
        None) caught up within the lag: with the leader in the ISR and no candidate
        outside it, the ISR stays as it is."""
        for r in isr:
            if r == local_broker_id:
                continue
            if r not in replicas:
                return False
            if lag_max_ms is not None:
                fs = self._states.get(r)
                if fs is None or now_ms - fs.last_caught_up_ms > lag_max_ms:
                    return False
        return True

    def propose_isr(
        self,
        *,
        local_broker_id: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        high_watermark: int,
        epoch_start: int,
        now_ms: int,
        lag_max_ms: int | None,
        eligible: Callable[[int], bool],
    ) -> tuple[int, ...] | None:
        """The ISR this leader should record (REQ-R6): members caught up within
        ``lag_max_ms`` (all of them when None: a fetch-triggered expansion never shrinks)
        plus qualified candidates, in replica order; None when it equals ``isr``.
        Candidates found unqualified now are forgotten."""
        me = local_broker_id
        if (
            me in isr
            and (not self._candidates or self._candidates.issubset(isr))
            and self._members_in_sync(replicas, isr, me, now_ms, lag_max_ms)
        ):
            # The usual case, once per leader partition at every periodic check: no
            # candidate to add and no member to drop. Answered without building and
            # sorting the proposal (issue 29: idle CPU with 10,000 partitions).
            return None
        new = [me]
        for r in replicas:
            if r == me:
                continue
            fs = self._states.get(r)
            if r in isr:
                if lag_max_ms is None or (
                    fs is not None and now_ms - fs.last_caught_up_ms <= lag_max_ms
                ):
                    new.append(r)
            elif r in self._candidates:
                if not eligible(r):
                    # KIP-841: its broker is gone or stopping (see Partition.forget_candidates)
                    self._candidates.discard(r)
                elif (
                    fs is None
                    or fs.log_end_offset < high_watermark
                    or fs.log_end_offset < epoch_start
                ):
                    # In sync when it fetched, but the HW has moved past it since (the
                    # proposal waited for a write in flight, or for the periodic check):
                    # records below the HW it lacks were committed without it, so it
                    # joins only once it has them (Kafka decides on the follower's LEO
                    # against the HW now). The simulator lost an acknowledged record when
                    # such a member was elected (--real-controller --partitions 3, seed 9).
                    self._candidates.discard(r)
                else:
                    new.append(r)
        order = {b: i for i, b in enumerate(replicas)}
        new.sort(key=lambda b: order.get(b, len(order)))
        if new == sorted(isr, key=lambda b: order.get(b, len(order))):
            return None
        return tuple(new)
