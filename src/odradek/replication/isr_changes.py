"""A leader's ISR changes (REQ-R6, REQ-P4, REQ-P6; Kafka's Partition.maybeShrinkIsr,
maybeExpandIsr, prepareIsrShrink/prepareIsrExpand and handleAlterPartitionUpdate).

A leader proposes one ISR at a time (``Leader.proposed``): it drops members not caught up
for ``replica.lag.time.max.ms`` and adds candidates whose fetch reached the HW and the
start of the current epoch, if their broker is registered and not shutting down
(KIP-841). The proposal goes out as an ``IsrWrite``, conditional on the state znode's
version; its outcome comes back here: committed, adopted (the controller changed the ISR
at our epoch), or the leader is fenced until a re-assertion of its ISR succeeds or the
controller speaks. Which followers are caught up is recorded by
``follower_fetch_state.py``.

``IsrChanges`` is a base class of ``Partition`` (partition.py), not an object of its
own: the ISR is part of the replica state (``partition_state``) that ``Partition`` alone
assigns. The attributes and methods declared in the class belong to ``Partition``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from odradek.replication.partition_state import (
    Fenced,
    IsrEligibility,
    IsrWrite,
    Leader,
    LeaderAndIsr,
    ReplicaState,
    State,
    Transition,
)

if TYPE_CHECKING:
    from odradek.storage.leader_epoch import LeaderEpochCache
    from odradek.storage.log import Log

__all__ = ["IsrChanges"]


class IsrChanges:
    """The ISR a leader proposes, and the outcomes of its writes (see the module
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

        def _maybe_advance_hw(self) -> bool: ...

    def _isr_eligible(self, replica_id: int) -> bool:
        e = self._eligibility
        return e is None or e.eligible(replica_id)

    def forget_candidates(self, brokers: frozenset[int]) -> None:
        """These brokers left the leader's image (or began a controlled shutdown): a fetch
        they sent before is no reason to add them to the ISR, even once they are back
        (a restarted broker may have lost its log); only a later fetch qualifies them."""
        self._expand_candidates -= brokers

    def _mark_removed(self, old_isr: tuple[int, ...], new_isr: tuple[int, ...]) -> None:
        """Followers that just left the committed ISR: only a fetch after this may bring
        them back through an idle credit (``note_idle_fetch``)."""
        for r in old_isr:
            if r not in new_isr:
                fs = self._followers.get(r)
                if fs is not None:
                    fs.fetch_ms_out_of_isr = fs.last_fetch_ms

    def _caught_up_in_epoch(self, fs: ReplicaState) -> bool:
        # Kafka also requires the follower to have reached the start of the current
        # leader epoch, so a replica is never in sync on the strength of an old epoch.
        epoch = self._state.leader_epoch
        start = next((o for e, o in self.epochs.entries if e == epoch), 0)
        return fs.log_end_offset >= start

    def maybe_shrink_isr(self, now_ms: int, lag_max_ms: int) -> IsrWrite | None:
        """The periodic check (REQ-R6): propose dropping members that have not caught up
        for ``replica.lag.time.max.ms`` (and adding qualified candidates)."""
        return self._propose_isr(now_ms, lag_max_ms)

    def _propose_isr(self, now_ms: int, lag_max_ms: int | None) -> IsrWrite | None:
        st = self._state
        if not isinstance(st, Leader) or st.proposed is not None:
            return None  # one ISR write at a time
        me = self.local_broker_id
        new = [me]
        for r in self._replicas:
            if r == me:
                continue
            if r in st.isr:
                fs = self._followers.get(r)
                if lag_max_ms is None or (
                    fs is not None and now_ms - fs.last_caught_up_ms <= lag_max_ms
                ):
                    new.append(r)
            elif r in self._expand_candidates:
                fs = self._followers.get(r)
                if not self._isr_eligible(r):
                    # KIP-841: its broker is gone or stopping (see forget_candidates)
                    self._expand_candidates.discard(r)
                elif fs is None or fs.log_end_offset < self._hw or not self._caught_up_in_epoch(fs):
                    # In sync when it fetched, but the HW has moved past it since (the
                    # proposal waited for a write in flight, or for the periodic check):
                    # records below the HW it lacks were committed without it, so it
                    # joins only once it has them (Kafka decides on the follower's LEO
                    # against the HW now). The simulator lost an acknowledged record when
                    # such a member was elected (--real-controller --partitions 3, seed 9).
                    self._expand_candidates.discard(r)
                else:
                    new.append(r)
        order = {b: i for i, b in enumerate(self._replicas)}
        new.sort(key=lambda b: order.get(b, len(order)))
        if new == sorted(st.isr, key=lambda b: order.get(b, len(order))):
            return None
        proposed = tuple(new)
        self._state = replace(st, proposed=proposed)
        return IsrWrite(
            self.topic,
            self.index,
            me,
            st.leader_epoch,
            proposed,
            st.controller_epoch,
            st.zk_version,
        )

    def isr_write_succeeded(self, write: IsrWrite, new_zk_version: int) -> Transition:
        t = Transition()
        st = self._state
        if (
            isinstance(st, Leader)
            and st.proposed == write.isr
            and st.leader_epoch == write.leader_epoch
            and st.zk_version == write.zk_version
        ):
            self._state = Leader(
                leader_epoch=st.leader_epoch,
                isr=write.isr,
                zk_version=new_zk_version,
                controller_epoch=st.controller_epoch,
            )
            self._expand_candidates -= set(write.isr)
            self._mark_removed(st.isr, write.isr)
            t.hw_moved = self._maybe_advance_hw()
            # A shrink can only help acks=all waiters via the HW; an expand can turn an
            # ISR below min.insync.replicas into one that is not: both re-check.
            t.state_changed = True
            t.note = f"ISR {list(st.isr)} -> {list(write.isr)}"
            t.isr_change = (st.isr, write.isr)
        elif (
            isinstance(st, Fenced)
            and st.reasserting
            and st.leader_epoch == write.leader_epoch
            and st.zk_version == write.zk_version
        ):
            self._state = Leader(
                leader_epoch=st.leader_epoch,
                isr=write.isr,
                zk_version=new_zk_version,
                controller_epoch=st.controller_epoch,
            )
            t.state_changed = True
            t.hw_moved = self._maybe_advance_hw()
            t.note = "state znode still names us leader; accepting writes again"
        # Otherwise a newer state was applied meanwhile: the result is stale.
        return t

    def isr_write_failed(self, write: IsrWrite, current: LeaderAndIsr | None) -> Transition:
        """``current`` is the znode now (the conditional write lost) or None (ZooKeeper
        unreachable: the outcome is unknown)."""
        t = Transition()
        st = self._state
        if (
            not isinstance(st, (Leader, Fenced))
            or st.leader_epoch != write.leader_epoch
            or st.zk_version != write.zk_version
        ):
            return t  # a newer state was applied meanwhile
        if isinstance(st, Leader) and st.proposed != write.isr:
            return t
        if (
            current is not None
            and current.leader == self.local_broker_id
            and current.leader_epoch == st.leader_epoch
        ):
            # The controller changed the ISR meanwhile; adopt it and decide again.
            self._state = Leader(
                leader_epoch=st.leader_epoch,
                isr=tuple(current.isr),
                zk_version=current.zk_version,
                controller_epoch=st.controller_epoch,
            )
            self._mark_removed(st.isr, tuple(current.isr))
            t.state_changed = isinstance(st, Fenced)
            t.hw_moved = self._maybe_advance_hw()
            t.note = (
                f"ISR write conflicted; adopted {list(current.isr)} (version {current.zk_version})"
            )
            return t
        # REQ-P4 and REQ-P6: we cannot record the ISR change, so we may have been
        # replaced. Stop accepting writes until ZooKeeper says again that we lead.
        self._state = Fenced(
            leader_epoch=st.leader_epoch,
            isr=st.isr,
            zk_version=st.zk_version,
            controller_epoch=st.controller_epoch,
        )
        t.state_changed = True
        t.note = (
            f"ISR update to {list(write.isr)} failed ("
            + (
                "ZooKeeper unreachable"
                if current is None
                else f"state now leader {current.leader} epoch {current.leader_epoch}"
            )
            + "); no longer accepting writes"
        )
        return t

    def reassert_isr(self) -> IsrWrite | None:
        """A fenced leader re-writes its committed ISR: success proves the state znode
        still names it at this epoch, so it may accept writes again."""
        st = self._state
        if not isinstance(st, Fenced) or st.reasserting:
            return None
        self._state = replace(st, reasserting=True)
        return IsrWrite(
            self.topic,
            self.index,
            self.local_broker_id,
            st.leader_epoch,
            st.isr,
            st.controller_epoch,
            st.zk_version,
        )

    def reassert_finished(self) -> None:
        """The re-assertion's outcome was applied (or was stale): allow the next one."""
        st = self._state
        if isinstance(st, Fenced) and st.reasserting:
            self._state = replace(st, reasserting=False)
