"""What a leader's state becomes when an ISR changes: pure functions over explicit inputs.

A leader proposes one ISR write at a time (``RemoteReplicas.propose_isr``), each
conditional on the state znode's version. These functions decide, from the replica's
current ``State`` and what happened (the write's outcome, a re-assertion, the controller's
change at the same epoch), the state to adopt -- or None when the news is stale because a
newer state was applied meanwhile. ``Partition`` adopts an ``IsrUpdate`` (its owned
``RemoteReplicas`` forgets the candidates that joined and marks the followers that left)
and recomputes the high watermark; nothing here does I/O or reads a clock.

* A lost write whose znode still names us at this epoch (the controller changed the
  ISR) is adopted; any other failure **fences** the leader (REQ-P4 and REQ-P6) until a
  re-assertion succeeds or the controller speaks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from odradek.replication.partition_state import (
    Fenced,
    IsrWrite,
    Leader,
    LeaderAndIsr,
    State,
    Transition,
)

__all__ = [
    "IsrUpdate",
    "after_write_failed",
    "after_write_succeeded",
    "controller_changed_isr",
    "propose",
    "start_reassertion",
]


@dataclass(frozen=True, slots=True)
class IsrUpdate:
    """The state to adopt, and what else follows from it."""

    state: Leader | Fenced
    # For the caller; ``hw_moved`` is left to the partition, which recomputes the HW.
    transition: Transition
    joined: tuple[int, ...] = ()  # members that are no longer ISR candidates
    left_from: tuple[int, ...] | None = None  # the ISR before: its leavers are marked


def controller_changed_isr(st: Leader | Fenced, s: LeaderAndIsr) -> IsrUpdate:
    """The state znode at our epoch, at a newer version: an ISR change made by the
    controller, which also proves the znode still names us -- a fenced leader resumes --
    or our own ISR write, seen through the watch before the write's answer (which will
    then be stale and ignored)."""
    isr = tuple(s.isr)
    own_write = isinstance(st, Leader) and st.proposed == isr and s.zk_version == st.zk_version + 1
    t = Transition(state_changed=isinstance(st, Fenced) or own_write)
    if own_write:
        # As after_write_succeeded would have: waiters re-check, and the change is this
        # leader's (IsrShrinksPerSec / IsrExpandsPerSec count it whichever of the two
        # arrives first).
        t.note = f"ISR {list(st.isr)} -> {list(isr)}"
        t.isr_change = (st.isr, isr)
    elif t.state_changed:
        t.note = "state znode still names us leader; accepting writes"
    new = Leader(
        leader_epoch=s.leader_epoch,
        isr=isr,
        zk_version=s.zk_version,
        controller_epoch=s.controller_epoch,
    )
    return IsrUpdate(new, t, joined=isr, left_from=st.isr)


def after_write_succeeded(st: State, write: IsrWrite, new_zk_version: int) -> IsrUpdate | None:
    """``write`` was recorded at ``new_zk_version``; None when the result is stale."""
    if (
        isinstance(st, Leader)
        and st.proposed == write.isr
        and st.leader_epoch == write.leader_epoch
        and st.zk_version == write.zk_version
    ):
        new = Leader(
            leader_epoch=st.leader_epoch,
            isr=write.isr,
            zk_version=new_zk_version,
            controller_epoch=st.controller_epoch,
        )
        # A shrink can only help acks=all waiters via the HW; an expand can turn an ISR
        # below min.insync.replicas into one that is not: both re-check.
        t = Transition(
            state_changed=True,
            note=f"ISR {list(st.isr)} -> {list(write.isr)}",
            isr_change=(st.isr, write.isr),
        )
        return IsrUpdate(new, t, joined=write.isr, left_from=st.isr)
    if (
        isinstance(st, Fenced)
        and st.reasserting
        and st.leader_epoch == write.leader_epoch
        and st.zk_version == write.zk_version
    ):
        new = Leader(
            leader_epoch=st.leader_epoch,
            isr=write.isr,
            zk_version=new_zk_version,
            controller_epoch=st.controller_epoch,
        )
        note = "state znode still names us leader; accepting writes again"
        return IsrUpdate(new, Transition(state_changed=True, note=note))
    return None  # a newer state was applied meanwhile


def after_write_failed(
    st: State, write: IsrWrite, current: LeaderAndIsr | None, local_broker_id: int
) -> IsrUpdate | None:
    """``current`` is the znode now (the conditional write lost) or None (ZooKeeper
    unreachable: the outcome is unknown). None when the result is stale."""
    if (
        not isinstance(st, (Leader, Fenced))
        or st.leader_epoch != write.leader_epoch
        or st.zk_version != write.zk_version
    ):
        return None  # a newer state was applied meanwhile
    if isinstance(st, Leader) and st.proposed != write.isr:
        return None
    if (
        current is not None
        and current.leader == local_broker_id
        and current.leader_epoch == st.leader_epoch
    ):
        # The controller changed the ISR meanwhile; adopt it and decide again.
        isr = tuple(current.isr)
        new = Leader(
            leader_epoch=st.leader_epoch,
            isr=isr,
            zk_version=current.zk_version,
            controller_epoch=st.controller_epoch,
        )
        note = f"ISR write conflicted; adopted {list(current.isr)} (version {current.zk_version})"
        t = Transition(state_changed=isinstance(st, Fenced), note=note)
        return IsrUpdate(new, t, left_from=st.isr)
    # REQ-P4 and REQ-P6: we cannot record the ISR change, so we may have been replaced.
    # Stop accepting writes until ZooKeeper says again that we lead.
    fenced = Fenced(
        leader_epoch=st.leader_epoch,
        isr=st.isr,
        zk_version=st.zk_version,
        controller_epoch=st.controller_epoch,
    )
    why = (
        "ZooKeeper unreachable"
        if current is None
        else f"state now leader {current.leader} epoch {current.leader_epoch}"
    )
    note = f"ISR update to {list(write.isr)} failed ({why}); no longer accepting writes"
    return IsrUpdate(fenced, Transition(state_changed=True, note=note))


def start_reassertion(
    st: State, topic: str, index: int, local_broker_id: int
) -> tuple[Fenced, IsrWrite] | None:
    """A fenced leader re-writes its committed ISR: success proves the state znode still
    names it at this epoch, so it may accept writes again. None when not fenced or a
    re-assertion is already in flight."""
    if not isinstance(st, Fenced) or st.reasserting:
        return None
    write = IsrWrite(
        topic, index, local_broker_id, st.leader_epoch, st.isr, st.controller_epoch, st.zk_version
    )
    return replace(st, reasserting=True), write


def propose(
    st: Leader, proposed: tuple[int, ...], topic: str, index: int, local_broker_id: int
) -> tuple[Leader, IsrWrite]:
    """The leader with ``proposed`` in flight, and the conditional write recording it."""
    write = IsrWrite(
        topic, index, local_broker_id, st.leader_epoch, proposed, st.controller_epoch, st.zk_version
    )
    return replace(st, proposed=proposed), write
