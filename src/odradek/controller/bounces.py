"""Bounced brokers as pure decisions (Kafka's ``bouncedBrokerIds``; KIP-380's broker
epoch): a broker whose ZooKeeper session ended and that registered again before a
controller decided on its failure -- restarted, or its session expired and came back.

Its replicas lost their in-memory state (and, after a power loss, their unsynced tail), so
it must not go on leading its old epoch nor count as in sync. A running controller sees a
bounce as a changed broker epoch: the ``czxid`` of ``/brokers/ids/N`` differs from the one
it read before (``bounced``). A controller elected after the bounce (maybe the bounced
broker itself) cannot see it happen; it finds it in ZooKeeper instead: a leader or ISR
member registered after the state naming it was last written (its czxid above the state
znode's ``mzxid``: every legitimate return to an ISR is a write made after the broker
registered; ``stale_members``). Either way the partition is decided as if the broker had
failed, then started (``after_bounce``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from odradek.controller import elections
from odradek.controller.elections import StateChange
from odradek.zk import znodes

__all__ = ["after_bounce", "bounced", "naming", "stale_members"]

TopicPartition = tuple[str, int]


def bounced(old: Mapping[int, int], new: Mapping[int, int]) -> set[int]:
    """Brokers registered in both readings with another epoch (gone and back between)."""
    return {b for b, e in new.items() if b in old and old[b] != e}


def naming(
    states: Iterable[tuple[TopicPartition, znodes.PartitionState]], brokers: Collection[int]
) -> dict[TopicPartition, set[int]]:
    """The partitions whose leader or ISR names any of ``brokers``, with those it names."""
    out: dict[TopicPartition, set[int]] = {}
    for tp, st in states:
        hit = {b for b in (st.leader, *st.isr) if b in brokers}
        if hit:
            out[tp] = hit
    return out


def stale_members(st: znodes.PartitionState, mzxid: int, epochs: Mapping[int, int]) -> set[int]:
    """Members (leader, ISR) registered after the state was last written (``mzxid``)."""
    return {b for b in (st.leader, *st.isr) if epochs.get(b, -1) > mzxid}


def after_bounce(
    replicas: Sequence[int],
    st: znodes.PartitionState,
    registered: set[int],
    gone: Collection[int],
    shutting: Collection[int],
    unclean_enabled: bool,
) -> StateChange | None:
    """The state after ``gone`` (bounced brokers named by ``st``) failed, then started:
    ``reconcile_partition`` without them (a new leader and epoch if one led; out of the
    ISR), decided without unclean election -- a bounce is no reason to elect an
    out-of-sync replica; a partition left without any eligible ISR member (every member
    bounced: a cold start of the cluster) is elected among them at once, one epoch
    later, instead of going offline first."""
    alive = registered - set(gone)
    ch = elections.reconcile_partition(
        replicas, st.leader, st.leader_epoch, st.isr, alive, shutting, False
    )
    if ch is not None and ch.leader == elections.NO_LEADER:
        back = elections.reconcile_partition(
            replicas,
            elections.NO_LEADER,
            st.leader_epoch,
            st.isr,
            registered,
            shutting,
            unclean_enabled,
        )
        if back is not None:
            return back
    return ch
