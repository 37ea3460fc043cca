"""Leader election rules: pure functions of (assignment, ISR, live brokers, flags).

The controller (``controller.py``) reads ZooKeeper, calls these, and writes the result
conditionally; the ElectLeaders handler uses the same rules to answer per partition.
Nothing here does I/O, so every branch has a fast unit test (tests/unit/test_elections.py).

The rules, stated once (REQ-R14, R10, R15, R5, R13; Kafka's
``PartitionLeaderElectionAlgorithms``):

* **Offline election** (the leader died, REQ-R4/R14): the new leader is the first replica
  *in assignment order* that is live and in the ISR, so the preferred replica wins when it
  can. The ISR becomes the live members of the old ISR (dead members would only make the
  HW wait). If no ISR member is live:
    - unclean election disabled (default, REQ-R10): no leader (-1). The ISR is *kept as
      it was*, so that whichever ISR member returns first is elected (REQ-R15: wait, lose
      nothing).
    - unclean enabled: the first live replica in assignment order leads, ISR = [it]
      (records it lacks are lost, REQ-R10).
  No live replica at all: no leader either way.
* **Preferred election** (REQ-R5): the preferred replica (first in the assignment) leads
  if it is live and in the ISR; the ISR is unchanged. Already leading: nothing to do.
* **Controlled shutdown** (REQ-R13, Kafka's ControlledShutdown): the first live ISR replica
  that is not shutting down leads; the ISR loses the shutting-down brokers.
* **Follower failure**: a dead follower leaves the ISR; the leader and its epoch stay.
* **Leader imbalance** (REQ-R5, ``leader.imbalance.per.broker.percentage``): for broker B,
  the fraction of partitions whose preferred replica is B but which B does not lead.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ElectionResult:
    leader: int  # NO_LEADER (-1) when the partition is offline
    isr: list[int]
    unclean: bool = False


def offline_election(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], unclean_enabled: bool
) -> ElectionResult | None:
    """New leader for a partition whose leader is gone (REQ-R4, R14). None: offline —
    the caller writes leader -1 and keeps the ISR (REQ-R15)."""
    for r in replicas:
        if r in live and r in isr:
            return ElectionResult(r, [b for b in isr if b in live])
    if unclean_enabled:
        for r in replicas:
            if r in live:
                return ElectionResult(r, [r], unclean=True)
    return None


def preferred_election(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> ElectionResult | None:
    """The preferred replica if it can lead (live, in the ISR), else None (Kafka:
    PREFERRED_LEADER_NOT_AVAILABLE). The caller answers ELECTION_NOT_NEEDED when it
    already leads (see ``is_preferred_leader``)."""
    if not replicas:
        return None
    preferred = replicas[0]
    if preferred in live and preferred in isr:
        return ElectionResult(preferred, list(isr))
    return None


def is_preferred_leader(replicas: Sequence[int], leader: int) -> bool:
    return bool(replicas) and replicas[0] == leader


def controlled_shutdown_election(
    replicas: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> ElectionResult | None:
    """Move leadership off shutting-down brokers: first live, in-sync replica that is not
    shutting down; ISR minus the shutting-down brokers. None: nobody can take over (the
    partition stays with its leader until that broker dies — then it is an offline
    election)."""
    for r in replicas:
        if r in live and r in isr and r not in shutting_down:
            return ElectionResult(r, [b for b in isr if b not in shutting_down])
    return None


def isr_after_broker_failure(isr: Sequence[int], dead: Collection[int]) -> list[int]:
    """ISR minus dead followers. Never empty: if every member is dead the ISR is returned
    unchanged — that is the offline case, where the ISR is kept (REQ-R15)."""
    remaining = [b for b in isr if b not in dead]
    return remaining if remaining else list(isr)


def leader_imbalance(
    assignments: Mapping[tuple[str, int], Sequence[int]],
    leaders: Mapping[tuple[str, int], int],
    broker: int,
) -> float:
    """Fraction of the partitions preferring ``broker`` that ``broker`` does not lead
    (Kafka's imbalance ratio, compared with ``leader.imbalance.per.broker.percentage``/100).
    0.0 when no partition prefers it."""
    preferring = [tp for tp, r in assignments.items() if r and r[0] == broker]
    if not preferring:
        return 0.0
    elsewhere = sum(1 for tp in preferring if leaders.get(tp, NO_LEADER) != broker)
    return elsewhere / len(preferring)


def partitions_to_rebalance(
    assignments: Mapping[tuple[str, int], Sequence[int]],
    leaders: Mapping[tuple[str, int], int],
    isrs: Mapping[tuple[str, int], Sequence[int]],
    live: Collection[int],
    percentage: int,
) -> list[tuple[str, int]]:
    """Auto rebalance (REQ-R5): for every live broker whose imbalance exceeds
    ``percentage`` %, its partitions not led by it where it is live and in the ISR."""
    out: list[tuple[str, int]] = []
    for broker in sorted(live):
        if leader_imbalance(assignments, leaders, broker) * 100 <= percentage:
            continue
        for tp, replicas in sorted(assignments.items()):
            if (
                replicas
                and replicas[0] == broker
                and leaders.get(tp, NO_LEADER) != broker
                and preferred_election(replicas, isrs.get(tp, ()), live) is not None
            ):
                out.append(tp)
    return out


@dataclass(frozen=True, slots=True)
class StateChange:
    """What the controller writes to a partition's state znode, and why (for the log)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    kind: str  # "election" | "unclean" | "offline" | "isr" | "controlled-shutdown"


def initial_leader_and_isr(
    replicas: Sequence[int], eligible: Collection[int]
) -> ElectionResult | None:
    """A new partition (REQ-R2, R13): the first eligible replica in assignment order
    leads (the preferred one when it can), and every eligible replica starts in the ISR
    (Kafka's initial ISR: followers that do not keep up are dropped by the leader after
    ``replica.lag.time.max.ms``, REQ-R6). None: no replica can lead yet; the partition
    stays new until one registers."""
    live = [r for r in replicas if r in eligible]
    return ElectionResult(live[0], live) if live else None


def preferred_change(
    replicas: Sequence[int],
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    eligible: Collection[int],
) -> StateChange | None:
    """Preferred election of one partition (REQ-R5); None when the preferred replica
    already leads (ELECTION_NOT_NEEDED) or cannot (PREFERRED_LEADER_NOT_AVAILABLE)."""
    if is_preferred_leader(replicas, leader):
        return None
    res = preferred_election(replicas, isr, eligible)
    if res is None:
        return None
    return StateChange(res.leader, leader_epoch + 1, res.isr, "preferred")


def unclean_change(
    replicas: Sequence[int],
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    registered: Collection[int],
    eligible: Collection[int],
) -> StateChange | None:
    """ElectLeaders UNCLEAN for one partition (REQ-R10): only a partition without a live
    leader; an ISR member is still preferred, else any live replica (records it lacks
    are lost). None: it has a leader, or no replica is live."""
    if leader in registered:
        return None
    res = offline_election(replicas, isr, eligible, unclean_enabled=True)
    if res is None:
        return None
    return StateChange(
        res.leader, leader_epoch + 1, res.isr, "unclean" if res.unclean else "election"
    )


def reconcile_partition(
    replicas: Sequence[int],
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    registered: Collection[int],
    shutting_down: Collection[int],
    unclean_enabled: bool,
) -> StateChange | None:
    """The controller's full-pass rule for one partition (REQ-R4, R13-R15); None when
    the state is already right. ``registered``: brokers with a live ZooKeeper session;
    ``shutting_down``: those in a controlled shutdown (alive, but never elected).

    * leader dead (or none): offline election among eligible brokers; a new leader (or
      going offline) bumps the leader epoch (REQ-R19: every leader change); an already
      offline partition with nobody eligible is left alone.
    * leader shutting down: controlled-shutdown election; nobody eligible → it keeps
      leading, only the ISR loses dead/shutting-down followers.
    * leader fine: dead or shutting-down followers leave the ISR (same epoch).
    """
    eligible = [b for b in registered if b not in shutting_down]
    if leader not in registered:
        res = offline_election(replicas, isr, eligible, unclean_enabled)
        if res is None:
            if leader == NO_LEADER:
                return None
            return StateChange(NO_LEADER, leader_epoch + 1, list(isr), "offline")
        return StateChange(
            res.leader, leader_epoch + 1, res.isr, "unclean" if res.unclean else "election"
        )
    if leader in shutting_down:
        res = controlled_shutdown_election(replicas, isr, eligible, shutting_down)
        if res is not None:
            return StateChange(res.leader, leader_epoch + 1, res.isr, "controlled-shutdown")
    gone = [b for b in isr if b != leader and (b not in registered or b in shutting_down)]
    new_isr = isr_after_broker_failure(isr, gone)
    if new_isr != list(isr):
        return StateChange(leader, leader_epoch, new_isr, "isr")
    return None
