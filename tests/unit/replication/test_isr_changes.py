"""isr_changes on its own: the state a leader adopts after each ISR write's outcome, a
re-assertion, or the controller's change at its epoch (REQ-R6, REQ-P4, REQ-P6)."""

from __future__ import annotations

from odradek.replication.isr_changes import (
    after_write_failed,
    after_write_succeeded,
    controller_changed_isr,
    propose,
    start_reassertion,
)
from odradek.replication.partition_state import Fenced, Follower, Leader, LeaderAndIsr

ME = 1
LEADER = Leader(leader_epoch=3, isr=(1, 2, 3), zk_version=7, controller_epoch=2)


def test_a_proposal_is_in_flight_until_its_write_succeeds() -> None:
    st, write = propose(LEADER, (1, 2), "t", 0, ME)
    assert st.proposed == (1, 2) and st.maximal_isr == (1, 2, 3)
    assert (write.isr, write.zk_version, write.leader_epoch, write.controller_epoch) == (
        (1, 2),
        7,
        3,
        2,
    )
    update = after_write_succeeded(st, write, 8)
    assert update is not None
    assert update.state == Leader(leader_epoch=3, isr=(1, 2), zk_version=8, controller_epoch=2)
    assert update.transition.state_changed and update.transition.isr_change == ((1, 2, 3), (1, 2))
    assert update.joined == (1, 2) and update.left_from == (1, 2, 3)


def test_a_stale_success_changes_nothing() -> None:
    _, write = propose(LEADER, (1, 2), "t", 0, ME)
    newer = Leader(leader_epoch=4, isr=(1, 2, 3), zk_version=9, controller_epoch=2)
    assert after_write_succeeded(newer, write, 8) is None
    assert after_write_succeeded(LEADER, write, 8) is None  # no proposal in flight
    assert after_write_failed(newer, write, None, ME) is None


def test_an_unreachable_store_or_another_leader_fences_and_a_reassertion_resumes() -> None:
    st, write = propose(LEADER, (1, 2), "t", 0, ME)
    update = after_write_failed(st, write, None, ME)
    assert update is not None and isinstance(update.state, Fenced)
    assert update.state.isr == (1, 2, 3) and "ZooKeeper unreachable" in update.transition.note
    other = LeaderAndIsr(leader=2, leader_epoch=4, isr=(2, 3), replicas=(1, 2, 3), zk_version=8)
    fenced = after_write_failed(st, write, other, ME)
    assert fenced is not None and isinstance(fenced.state, Fenced)
    assert "state now leader 2 epoch 4" in fenced.transition.note
    started = start_reassertion(fenced.state, "t", 0, ME)
    assert started is not None
    reasserting, rewrite = started
    assert reasserting.reasserting and rewrite.isr == (1, 2, 3)
    assert start_reassertion(reasserting, "t", 0, ME) is None  # one at a time
    assert start_reassertion(LEADER, "t", 0, ME) is None
    resumed = after_write_succeeded(reasserting, rewrite, 8)
    assert resumed is not None and resumed.state == Leader(3, (1, 2, 3), 8, 2)
    assert resumed.joined == () and resumed.left_from is None


def test_a_lost_write_at_our_epoch_adopts_the_controllers_isr() -> None:
    st, write = propose(LEADER, (1, 2), "t", 0, ME)
    current = LeaderAndIsr(leader=ME, leader_epoch=3, isr=(1, 3), replicas=(1, 2, 3), zk_version=8)
    update = after_write_failed(st, write, current, ME)
    assert update is not None and update.state == Leader(3, (1, 3), 8, 2)
    assert not update.transition.state_changed and update.left_from == (1, 2, 3)


def test_the_controllers_change_at_our_epoch_resumes_a_fenced_leader() -> None:
    s = LeaderAndIsr(
        leader=ME, leader_epoch=3, isr=(1, 2), replicas=(1, 2, 3), zk_version=8, controller_epoch=2
    )
    fenced = Fenced(leader_epoch=3, isr=(1, 2, 3), zk_version=7, controller_epoch=2)
    update = controller_changed_isr(fenced, s)
    assert update.state == Leader(3, (1, 2), 8, 2) and update.transition.state_changed
    assert update.transition.isr_change is None
    # Our own write seen through the watch first: counted as this leader's change.
    st, _ = propose(LEADER, (1, 2), "t", 0, ME)
    own = controller_changed_isr(st, s)
    assert own.transition.isr_change == ((1, 2, 3), (1, 2))
    assert not controller_changed_isr(LEADER, s).transition.state_changed
    assert (
        after_write_failed(
            Follower(2, 3, (1, 2), 7), propose(LEADER, (1,), "t", 0, ME)[1], None, ME
        )
        is None
    )
