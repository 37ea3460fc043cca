"""Partition reassignment (KIP-455) as pure decisions: replica sets in, znode contents out.

Kafka's terms, per partition: ORS = the original replicas, TRS = the target replicas,
RS = the full replica set written to the topic znode while the reassignment runs,
``adding_replicas`` = TRS - ORS and ``removing_replicas`` = ORS - TRS (both kept in the
topic znode, version 3, so a controller fail-over resumes where the last one stopped).

1. **Start**: RS = (TRS ++ ORS).distinct (Kafka's order: target first, so an election
   during the move prefers the target). Every broker in RS hosts a replica, so the
   adding replicas start fetching from the leader at once.
2. **Catch-up**: the leader adds each adding replica to the ISR once it has caught up
   (REQ-R6, the ordinary ISR expansion).
3. **Completion** (all of TRS in the ISR): the state znode gets ISR ∩ TRS, the leader
   moved to the first live TRS member in the ISR if the current one leaves (or is
   dead), and a new leader epoch (Kafka bumps it here so removed replicas are fenced);
   then the topic znode gets RS = TRS and no adding/removing. Brokers no longer in RS
   stop their replicas and delete the logs (``ReplicaManager.apply_image``).
4. **Cancel**: RS = ORS; the adding replicas leave the ISR (and leadership, if one of
   them leads) before the topic znode drops them.

A target that is only a reordering of ORS completes at once (nothing to copy).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from odradek.controller.elections import StateChange

logger = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ReplicaSets:
    """One partition's entry in the topic znode: RS, adding and removing."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def in_progress(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """ORS: RS without the replicas being added."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """TRS: RS without the replicas being removed."""
        return tuple(r for r in self.replicas if r not in self.removing)


def start(current: ReplicaSets, target: Sequence[int]) -> ReplicaSets:
    """The topic-znode entry for a new reassignment to ``target``. A reassignment already
    running is replaced: its ORS stays the original (KIP-455), so replicas it was adding
    that the new target drops are removed again."""
    original = current.original
    trs = tuple(dict.fromkeys(target))
    if set(trs) == set(original):
        return ReplicaSets(trs)  # a reordering (or no change): complete at once
    full = tuple(dict.fromkeys(trs + original))
    return ReplicaSets(
        full,
        adding=tuple(r for r in trs if r not in original),
        removing=tuple(r for r in original if r not in trs),
    )


def cancel(current: ReplicaSets) -> ReplicaSets:
    """Back to ORS (AlterPartitionReassignments with null replicas)."""
    return ReplicaSets(current.original)


def completion(
    current: ReplicaSets, leader: int, leader_epoch: int, isr: Sequence[int], live: Collection[int]
) -> StateChange | None:
    """The state-znode write that finishes a reassignment, or None while some TRS member
    is not in the ISR yet (or no TRS member could lead)."""
    if not current.in_progress:
        return None
    trs = current.target
    if any(r not in isr for r in trs):
        return None
    new_isr = [r for r in trs if r in isr]
    if leader in trs and leader in live:
        new_leader = leader
    else:
        new_leader = next((r for r in new_isr if r in live), NO_LEADER)
        if new_leader == NO_LEADER:
            return None  # every target replica is down: wait (the full pass retries)
    return StateChange(new_leader, leader_epoch + 1, new_isr, "reassignment")


def revert(
    original: Sequence[int],
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    live: Collection[int],
) -> StateChange | None:
    """The state-znode write a cancellation needs before RS shrinks back to ORS: the
    replicas being added leave the ISR and the leadership. None: nothing to change."""
    new_isr = [r for r in isr if r in original]
    if leader in original and new_isr == list(isr):
        return None
    if leader in original and leader in live:
        return StateChange(leader, leader_epoch + 1, new_isr, "reassignment-cancel")
    new_leader = next((r for r in original if r in new_isr and r in live), NO_LEADER)
    return StateChange(
        new_leader,
        leader_epoch + 1,
        new_isr if new_isr else list(isr),
        "reassignment-cancel" if new_leader != NO_LEADER else "offline",
    )
