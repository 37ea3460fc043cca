"""Bounced brokers (odradek.controller.bounces): Kafka's bouncedBrokerIds with KIP-380's
broker epochs, and the rule a new controller uses to find a bounce it did not see."""

from __future__ import annotations

from odradek.controller.bounces import after_bounce, bounced, naming, stale_members
from odradek.controller.elections import StateChange
from odradek.zk.znodes import PartitionState


def st(leader: int, epoch: int, isr: list[int]) -> PartitionState:
    return PartitionState(leader, epoch, isr, 1)


def test_a_changed_broker_epoch_is_a_bounce() -> None:
    assert bounced({1: 10, 2: 11, 3: 12}, {1: 10, 2: 40, 4: 41}) == {2}  # 3 gone, 4 new


def test_the_partitions_naming_bounced_brokers() -> None:
    states = [
        (("t", 0), st(1, 0, [1, 2, 3])),
        (("t", 1), st(2, 0, [2, 3])),
        (("t", 2), st(3, 0, [3])),
    ]
    assert naming(states, {1, 2}) == {("t", 0): {1, 2}, ("t", 1): {2}}


def test_members_registered_after_the_state_was_written_are_stale() -> None:
    epochs = {1: 50, 2: 5, 3: 30}
    assert stale_members(st(1, 0, [1, 2, 3]), 20, epochs) == {1, 3}
    assert stale_members(st(1, 0, [1, 2, 3]), 60, epochs) == set()  # decided since
    assert stale_members(st(-1, 3, [4]), 20, epochs) == set()  # not registered: not ours


def test_a_bounced_leader_is_replaced_at_a_new_epoch() -> None:
    ch = after_bounce([1, 2, 3], st(1, 4, [1, 2, 3]), {1, 2, 3}, {1}, set(), False)
    assert ch == StateChange(2, 5, [2, 3], "election")


def test_a_bounced_follower_leaves_the_isr_at_the_same_epoch() -> None:
    ch = after_bounce([1, 2, 3], st(1, 4, [1, 2, 3]), {1, 2, 3}, {3}, set(), False)
    assert ch == StateChange(1, 4, [1, 2], "isr")


def test_when_every_isr_member_bounced_they_are_elected_at_once() -> None:
    # A cold start: one election among them, one epoch later, the ISR kept.
    ch = after_bounce([1, 2, 3], st(1, 4, [1, 2, 3]), {1, 2, 3}, {1, 2, 3}, set(), False)
    assert ch is not None and (ch.leader, ch.leader_epoch, ch.isr) == (1, 5, [1, 2, 3])


def test_a_bounce_never_makes_an_unclean_election() -> None:
    # The ISR's only member bounced; 2 is live but out of sync: with unclean election on,
    # the failure step alone would have elected it. The bounced member is elected again.
    ch = after_bounce([1, 2], st(1, 4, [1]), {1, 2}, {1}, set(), True)
    assert ch is not None and (ch.leader, ch.leader_epoch, ch.isr) == (1, 5, [1])
