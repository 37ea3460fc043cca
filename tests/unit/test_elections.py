"""The controller's election rules (odradek.controller.elections): REQ-R4, R5, R10, R13-R15."""

from __future__ import annotations

from odradek.controller.elections import (
    NO_LEADER,
    ElectionResult,
    StateChange,
    controlled_shutdown_election,
    is_preferred_leader,
    isr_after_broker_failure,
    leader_imbalance,
    offline_election,
    partitions_to_rebalance,
    preferred_election,
    reconcile_partition,
)

# ----------------------------------------------------------------- offline election (R14)


def test_offline_first_live_isr_replica_in_assignment_order() -> None:
    # Assignment order wins over ISR order (R14: preferred replica first).
    assert offline_election([1, 2, 3], [3, 2, 1], {2, 3}, False) == ElectionResult(2, [3, 2])


def test_offline_skips_live_replica_outside_isr() -> None:
    assert offline_election([1, 2, 3], [1, 3], {2, 3}, False) == ElectionResult(3, [3])


def test_offline_no_live_isr_member_clean_is_none() -> None:
    # R10/R15: unclean disabled -> offline (caller keeps the ISR).
    assert offline_election([1, 2], [1], {2}, False) is None


def test_offline_no_live_isr_member_unclean_picks_first_live_replica() -> None:
    assert offline_election([1, 2, 3], [1], {3, 2}, True) == ElectionResult(2, [2], unclean=True)


def test_offline_prefers_clean_even_when_unclean_enabled() -> None:
    res = offline_election([1, 2, 3], [1, 3], {2, 3}, True)
    assert res == ElectionResult(3, [3]) and not res.unclean


def test_offline_nobody_alive() -> None:
    assert offline_election([1, 2], [1, 2], set(), True) is None


# ----------------------------------------------------------------- preferred election (R5)


def test_preferred_live_and_in_isr() -> None:
    assert preferred_election([1, 2, 3], [2, 1], {1, 2}) == ElectionResult(1, [2, 1])


def test_preferred_not_in_isr_or_dead() -> None:
    assert preferred_election([1, 2, 3], [2, 3], {1, 2, 3}) is None
    assert preferred_election([1, 2, 3], [1, 2, 3], {2, 3}) is None
    assert preferred_election([], [1], {1}) is None


def test_is_preferred_leader() -> None:
    assert is_preferred_leader([2, 1], 2)
    assert not is_preferred_leader([2, 1], 1)
    assert not is_preferred_leader([], NO_LEADER)


# ----------------------------------------------------------------- controlled shutdown (R13)


def test_controlled_shutdown_moves_to_next_isr_replica() -> None:
    assert controlled_shutdown_election([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == ElectionResult(
        2, [2, 3]
    )


def test_controlled_shutdown_skips_dead_and_out_of_sync() -> None:
    assert controlled_shutdown_election([1, 2, 3], [1, 3], {1, 2}, {1}) is None
    assert controlled_shutdown_election([1, 2, 3], [1, 2, 3], {1, 3}, {1}) == ElectionResult(
        3, [2, 3]
    )


# ----------------------------------------------------------------- follower failure


def test_isr_after_follower_failure() -> None:
    assert isr_after_broker_failure([1, 2, 3], {3}) == [1, 2]
    assert isr_after_broker_failure([1, 2, 3], set()) == [1, 2, 3]


def test_isr_never_empty() -> None:
    assert isr_after_broker_failure([1], {1}) == [1]


# ----------------------------------------------------------------- imbalance (R5)


def test_leader_imbalance() -> None:
    assignments = {("t", 0): [1, 2], ("t", 1): [1, 2], ("t", 2): [2, 1]}
    leaders = {("t", 0): 1, ("t", 1): 2, ("t", 2): 2}
    assert leader_imbalance(assignments, leaders, 1) == 0.5
    assert leader_imbalance(assignments, leaders, 2) == 0.0
    assert leader_imbalance(assignments, leaders, 9) == 0.0  # prefers nothing


def test_partitions_to_rebalance_threshold_and_isr() -> None:
    assignments = {("t", 0): [1, 2], ("t", 1): [1, 2], ("t", 2): [2, 1]}
    leaders = {("t", 0): 1, ("t", 1): 2, ("t", 2): 2}
    full = {tp: [1, 2] for tp in assignments}
    assert partitions_to_rebalance(assignments, leaders, full, {1, 2}, 10) == [("t", 1)]
    assert partitions_to_rebalance(assignments, leaders, full, {1, 2}, 50) == []  # 50% not > 50
    # preferred replica out of the ISR or dead: nothing to do
    assert partitions_to_rebalance(assignments, leaders, {**full, ("t", 1): [2]}, {1, 2}, 10) == []
    assert partitions_to_rebalance(assignments, leaders, full, {2}, 10) == []


# ----------------------------------------------------------------- the documents' example (R5)


def _round(
    assignments: dict[tuple[str, int], list[int]],
    state: dict[tuple[str, int], tuple[int, int, list[int]]],
    registered: set[int],
) -> None:
    """One controller full pass over every partition (unclean disabled)."""
    for tp, replicas in assignments.items():
        leader, epoch, isr = state[tp]
        ch = reconcile_partition(replicas, leader, epoch, isr, registered, set(), False)
        if ch is not None:
            state[tp] = (ch.leader, ch.leader_epoch, ch.isr)


def test_documents_example_leaders_pile_up_then_preferred_election_restores() -> None:
    # 3 brokers, 4 partitions, RF 3 (R2 figure): preferred leaders spread 1,2,3,1.
    assignments = {
        ("t", 0): [1, 2, 3],
        ("t", 1): [2, 3, 1],
        ("t", 2): [3, 1, 2],
        ("t", 3): [1, 3, 2],
    }
    state = {tp: (r[0], 0, list(r)) for tp, r in assignments.items()}
    _round(assignments, state, {1, 2})  # broker 3 dies
    assert state[("t", 2)][0] == 1 and state[("t", 2)][1] == 1
    assert all(3 not in isr for _, _, isr in state.values())
    _round(assignments, state, {2})  # then broker 1
    assert {leader for leader, _, _ in state.values()} == {2}
    # Both return; once they are back in the ISR (the leader's job, R21) nothing moves
    # by itself: leaders stay on broker 2 ...
    state = {tp: (leader, epoch, [2, 1, 3]) for tp, (leader, epoch, _) in state.items()}
    _round(assignments, state, {1, 2, 3})
    assert {leader for leader, _, _ in state.values()} == {2}
    leaders = {tp: s[0] for tp, s in state.items()}
    assert leader_imbalance(assignments, leaders, 1) == 1.0
    # ... until preferred elections (R5) bring them back.
    isrs = {tp: s[2] for tp, s in state.items()}
    todo = partitions_to_rebalance(assignments, leaders, isrs, {1, 2, 3}, 10)
    assert todo == [("t", 0), ("t", 3), ("t", 2)]
    for tp in todo:
        res = preferred_election(assignments[tp], isrs[tp], {1, 2, 3})
        assert res is not None
        leaders[tp] = res.leader
    assert leaders == {tp: r[0] for tp, r in assignments.items()}


# ----------------------------------------------------------------- reconcile_partition


def test_reconcile_no_change() -> None:
    assert reconcile_partition([1, 2], 1, 3, [1, 2], {1, 2}, set(), False) is None


def test_reconcile_dead_leader_elects_and_bumps_epoch() -> None:
    assert reconcile_partition([1, 2, 3], 1, 3, [1, 2, 3], {2, 3}, set(), False) == StateChange(
        2, 4, [2, 3], "election"
    )


def test_reconcile_offline_keeps_isr_and_bumps_epoch_once() -> None:
    ch = reconcile_partition([1, 2], 1, 3, [1], {2}, set(), False)
    assert ch == StateChange(NO_LEADER, 4, [1], "offline")
    # Already offline, still nobody eligible: no write.
    assert reconcile_partition([1, 2], NO_LEADER, 4, [1], {2}, set(), False) is None
    # The ISR member returns (R15).
    assert reconcile_partition([1, 2], NO_LEADER, 4, [1], {1, 2}, set(), False) == StateChange(
        1, 5, [1], "election"
    )


def test_reconcile_unclean() -> None:
    assert reconcile_partition([1, 2], NO_LEADER, 4, [1], {2}, set(), True) == StateChange(
        2, 5, [2], "unclean"
    )


def test_reconcile_dead_follower_leaves_isr_same_epoch() -> None:
    assert reconcile_partition([1, 2, 3], 1, 3, [1, 2, 3], {1, 2}, set(), False) == StateChange(
        1, 3, [1, 2], "isr"
    )


def test_reconcile_controlled_shutdown() -> None:
    # Leader shutting down: leadership moves, broker leaves the ISR.
    assert reconcile_partition([1, 2, 3], 1, 3, [1, 2, 3], {1, 2, 3}, {1}, False) == StateChange(
        2, 4, [2, 3], "controlled-shutdown"
    )
    # Nobody else in sync: it keeps leading.
    assert reconcile_partition([1, 2], 1, 3, [1], {1, 2}, {1}, False) is None
    # Follower shutting down: leaves the ISR, same epoch.
    assert reconcile_partition([1, 2, 3], 1, 3, [1, 2, 3], {1, 2, 3}, {3}, False) == StateChange(
        1, 3, [1, 2], "isr"
    )
    # A shutting-down broker is never elected for a dead leader.
    assert reconcile_partition([1, 2, 3], 1, 3, [1, 2, 3], {2, 3}, {2}, False) == StateChange(
        3, 4, [3], "election"
    )
