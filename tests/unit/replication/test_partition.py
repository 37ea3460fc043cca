"""Each transition of one partition's state (REQ-R6, R7, R8, R13, R16, R19, scenarios 4
and 6), on a real log: leader/follower/offline from the controller, HW over the maximal
ISR, ISR proposals and their outcomes (commit, conflict adoption, fencing, re-assertion),
min ISR, epochs and truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.errors import ErrorCode, KafkaError
from odradek.replication.partition import Partition, Role
from odradek.replication.partition_state import (
    Fenced,
    Follower,
    IsrEligibility,
    Leader,
    LeaderAndIsr,
    Offline,
)
from odradek.storage.records import encode_batch
from support.partitions import follow, lead, new_partition

LAG = 10_000


def make(tmp_path: Path, broker: int = 1, replicas: tuple[int, ...] = (1, 2, 3)) -> Partition:
    return new_partition(tmp_path / f"t-0-{broker}", broker=broker, replicas=replicas)


def records(n: int = 3) -> bytes:
    return encode_batch([(None, b"x%d" % i) for i in range(n)])


# ------------------------------------------------------------------ roles from the controller
def test_controller_states_make_leader_follower_offline(tmp_path: Path) -> None:
    p = make(tmp_path)
    assert isinstance(p.state, Offline) and p.role is Role.OFFLINE
    t = lead(p, 1, [1, 2, 3])
    assert isinstance(p.state, Leader) and p.is_leader and p.leader_id == 1
    assert t.state_changed and t.stop_fetching and p.isr == (1, 2, 3)
    t = follow(p, 2, 2, [2, 3], zk_version=1)
    assert isinstance(p.state, Follower) and p.leader_id == 2 and p.leader_epoch == 2
    assert t.start_fetching_from == 2 and t.state_changed
    t = p.apply_leader_and_isr(LeaderAndIsr(-1, 3, (), (1, 2, 3), 2), 0)
    assert isinstance(p.state, Offline) and p.leader_epoch == 3 and t.stop_fetching
    with pytest.raises(KafkaError) as e:
        p.check_leader()
    assert e.value.code == ErrorCode.not_leader_or_follower


def test_a_replica_without_a_state_yet_is_offline_without_a_log_line(tmp_path: Path) -> None:
    # A new topic's assignment arrives before the controller's first state: the replica
    # waits offline, and says nothing (10,000 such lines per broker on a big creation).
    p = make(tmp_path)
    t = p.apply_leader_and_isr(LeaderAndIsr(-1, -1, (), (1, 2, 3), -1), 0)
    assert isinstance(p.state, Offline) and t.stop_fetching and t.note == ""
    t = lead(p, 0, [1, 2, 3])
    assert p.is_leader and t.note == "leader at epoch 0, isr [1, 2, 3]"
    t = p.apply_leader_and_isr(LeaderAndIsr(-1, 1, (), (1, 2, 3), 1), 0)
    assert isinstance(p.state, Offline) and t.note == "offline at epoch 1 (no leader)"


def test_stale_states_are_ignored(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 5, [1, 2, 3], zk_version=7)
    t = follow(p, 2, 4, [2], zk_version=9)  # an older epoch
    assert p.is_leader and p.leader_epoch == 5 and not t.state_changed
    t = lead(p, 5, [1], zk_version=6)  # same epoch, older znode
    assert p.isr == (1, 2, 3) and not t.state_changed


def test_same_epoch_newer_znode_adopts_the_controllers_isr(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3], zk_version=0)
    p.append_as_leader(records(3), 1, now_ms=0)
    p.update_follower_fetch_state(2, 3, now_ms=1)
    assert p.high_watermark == 0  # broker 3 holds it
    t = lead(p, 1, [1, 2], zk_version=1)  # controlled shutdown of 3 removed it
    assert p.isr == (1, 2) and p.zk_version == 1 and t.hw_moved and p.high_watermark == 3


def test_follower_same_leader_newer_znode_keeps_fetching(tmp_path: Path) -> None:
    p = make(tmp_path, broker=2)
    follow(p, 1, 1, [1, 2, 3], zk_version=0)
    t = follow(p, 1, 1, [1, 2], zk_version=1)
    assert p.isr == (1, 2) and t.start_fetching_from is None and not t.state_changed


# ------------------------------------------------------------------ HW (REQ-R16)
def test_hw_is_min_leo_over_isr(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3])
    info = p.append_as_leader(records(3), 1, now_ms=1)
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert not p.hw_after_append() and p.high_watermark == 0  # followers have not fetched
    assert not p.update_follower_fetch_state(2, 3, now_ms=2).hw_moved  # 3 is unknown
    t = p.update_follower_fetch_state(3, 2, now_ms=2)
    assert t.hw_moved and p.high_watermark == 2 and not p.acks_all_satisfied(2)
    assert p.produce_completion(2) is None  # still waiting
    p.update_follower_fetch_state(3, 3, now_ms=3)
    assert p.high_watermark == 3 and p.acks_all_satisfied(2)
    assert p.produce_completion(2) == ErrorCode.none


def test_hw_never_moves_backwards_and_isr_of_one_follows_the_leo(tmp_path: Path) -> None:
    p = make(tmp_path, replicas=(1,))
    lead(p, 1, [1])
    p.append_as_leader(records(2), 1, now_ms=0)
    assert p.hw_after_append() and p.high_watermark == 2
    p.update_follower_fetch_state(7, 0, now_ms=1)  # not a replica: ignored
    assert p.high_watermark == 2


# ------------------------------------------------------------------ ISR (REQ-R6)
def test_lagging_follower_is_proposed_out_and_the_hw_waits_for_the_write(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3])
    p.append_as_leader(records(), 1, now_ms=0)
    p.update_follower_fetch_state(2, 3, now_ms=100)
    w = p.maybe_shrink_isr(now_ms=LAG + 50, lag_max_ms=LAG)  # 3 never fetched
    assert w is not None and w.isr == (1, 2) and w.zk_version == 0 and w.leader_epoch == 1
    assert p.pending_isr == (1, 2) and p.isr == (1, 2, 3)
    # PendingShrinkIsr: 3 still holds the HW until ZooKeeper recorded its removal.
    assert not p.update_follower_fetch_state(2, 3, now_ms=LAG + 55).hw_moved
    assert p.high_watermark == 0
    assert p.maybe_shrink_isr(now_ms=LAG + 60, lag_max_ms=LAG) is None  # one at a time
    t = p.isr_write_succeeded(w, 1)
    assert p.isr == (1, 2) and p.zk_version == 1 and p.pending_isr is None
    assert t.hw_moved and p.high_watermark == 3


def test_follower_rejoins_only_by_fetching_to_the_hw(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1, 2])
    p.append_as_leader(records(), 1, now_ms=0)
    p.update_follower_fetch_state(2, 3, now_ms=1)
    assert p.high_watermark == 3
    t = p.update_follower_fetch_state(3, 1, now_ms=2)  # behind the HW: not yet
    assert t.isr_write is None
    t = p.update_follower_fetch_state(3, 3, now_ms=3)
    assert t.isr_write is not None and t.isr_write.isr == (1, 2, 3)
    assert p.pending_isr == (1, 2, 3)
    p.isr_write_succeeded(t.isr_write, 1)
    assert p.isr == (1, 2, 3)


def test_a_candidate_the_hw_moved_past_is_not_added_to_the_isr(tmp_path: Path) -> None:
    """Regression (odradek sim --real-controller --partitions 3, seed 9: an acknowledged
    acks=all record lost). A follower that fetched at the HW while another ISR write was
    in flight stayed a candidate; records committed meanwhile without it moved the HW
    past its LEO, and the next proposal still added it: "in sync" without them, it was
    then elected. Kafka decides on the follower's LEO against the HW when it proposes."""
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3])
    p.append_as_leader(records(), 1, now_ms=0)
    p.update_follower_fetch_state(2, 3, now_ms=LAG + 10)
    w = p.maybe_shrink_isr(now_ms=LAG + 50, lag_max_ms=LAG)  # 3 never fetched
    assert w is not None and w.isr == (1, 2)
    p.isr_write_succeeded(w, 1)
    w = p.maybe_shrink_isr(now_ms=2 * LAG + 100, lag_max_ms=LAG)  # 2 stopped fetching
    assert w is not None and w.isr == (1,)
    t = p.update_follower_fetch_state(3, 3, now_ms=2 * LAG + 110)  # at the HW: a candidate
    assert t.isr_write is None  # one write at a time: the shrink is in flight
    p.isr_write_succeeded(w, 2)
    p.append_as_leader(records(), 1, now_ms=2 * LAG + 120)
    p.hw_after_append()
    assert p.high_watermark == 6  # committed on the ISR of one; 3 is at 3
    w = p.maybe_shrink_isr(now_ms=2 * LAG + 130, lag_max_ms=LAG)
    assert w is None  # before the fix: ISR (1, 3), 3 lacking offsets 3-5
    t = p.update_follower_fetch_state(3, 6, now_ms=2 * LAG + 140)  # caught up: it joins
    assert t.isr_write is not None and t.isr_write.isr == (1, 3)


def test_a_late_fetch_from_a_broker_gone_from_the_image_does_not_readmit_it_kip_841(
    tmp_path: Path,
) -> None:
    # Found under load: broker 2, SIGKILLed, had a fetch in flight; the leader read it
    # after the controller took 2 out of the ISR and re-admitted it, and 2 was later
    # elected with the empty log it restarted with.
    eligibility = IsrEligibility()
    eligibility.update([1, 2, 3])
    p = new_partition(tmp_path / "t-0-1", eligibility=eligibility)
    lead(p, 1, [1, 2, 3])
    p.append_as_leader(records(), 1, now_ms=0)
    p.update_follower_fetch_state(2, 3, now_ms=1)
    p.update_follower_fetch_state(3, 3, now_ms=1)
    lead(p, 2, [1, 3], zk_version=1)  # the controller: 2's session expired
    assert eligibility.update([1, 3]) == frozenset({2})  # /brokers/ids without 2
    t = p.update_follower_fetch_state(2, 3, now_ms=5)  # the fetch 2 sent before dying
    assert t.isr_write is None and p.pending_isr is None
    assert p.maybe_shrink_isr(now_ms=6, lag_max_ms=LAG) is None
    # A candidate that qualified just before its broker left (its proposal waited for
    # the write in flight) is forgotten with it: once the broker is back -- a restart may
    # have lost its log -- only a new fetch counts.
    lead(p, 3, [1], zk_version=2)
    eligibility.update([1, 2, 3])
    w = p.update_follower_fetch_state(2, 3, now_ms=7).isr_write
    assert w is not None and w.isr == (1, 2)
    assert p.update_follower_fetch_state(3, 3, now_ms=8).isr_write is None  # one at a time
    p.forget_candidates(eligibility.update([1, 2]))
    eligibility.update([1, 2, 3])
    t = p.isr_write_succeeded(w, 3)
    assert t.isr_write is None and p.maybe_shrink_isr(now_ms=9, lag_max_ms=LAG) is None
    t = p.update_follower_fetch_state(3, 3, now_ms=10)
    assert t.isr_write is not None and t.isr_write.isr == (1, 2, 3)


def test_a_broker_in_controlled_shutdown_is_not_added_to_the_isr(tmp_path: Path) -> None:
    eligibility = IsrEligibility()
    eligibility.update([1, 2, 3], shutting_down=[2])
    p = new_partition(tmp_path / "t-0-1", eligibility=eligibility)
    lead(p, 1, [1])
    assert p.update_follower_fetch_state(2, 0, now_ms=1).isr_write is None
    t = p.update_follower_fetch_state(3, 0, now_ms=1)
    assert t.isr_write is not None and t.isr_write.isr == (1, 3)


def test_expand_requires_reaching_the_start_of_the_current_epoch(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1])
    p.append_as_leader(records(3), 1, now_ms=0)
    lead(p, 2, [1], zk_version=1)
    p.append_as_leader(records(2), 1, now_ms=0)  # epoch 2 starts at 3
    p.hw_after_append()
    assert p.high_watermark == 5
    assert p.update_follower_fetch_state(2, 2, now_ms=1).isr_write is None
    assert p.update_follower_fetch_state(2, 5, now_ms=2).isr_write is not None


def test_a_new_leader_whose_hw_lags_its_epoch_start_says_so_kip_207(tmp_path: Path) -> None:
    # Broker 2 followed 1 and holds offsets 0-4, but its HW checkpoint says 2 (it had
    # not yet learnt that 2-4 were committed): elected, its "latest" would be 2 while
    # the old leader answered 5. KIP-207: OFFSET_NOT_AVAILABLE until the HW reaches 5.
    p = make(tmp_path, broker=2)
    follow(p, 1, 1, [1, 2, 3])
    p.append_as_follower(records(5), leader_hw=2, now_ms=0)
    assert p.lagging_epoch_start() is None  # followers answer no clients' ListOffsets
    lead(p, 2, [2, 3], zk_version=1)
    assert p.high_watermark == 2 and p.lagging_epoch_start() == 5
    p.update_follower_fetch_state(3, 5, now_ms=1)
    assert p.high_watermark == 5 and p.lagging_epoch_start() is None
    follow(p, 3, 3, [3], zk_version=2)
    assert p.lagging_epoch_start() is None


def test_conflicting_write_with_us_still_leader_is_adopted(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3])
    w = p.maybe_shrink_isr(now_ms=LAG + 1, lag_max_ms=LAG)
    assert w is not None
    t = p.isr_write_failed(w, LeaderAndIsr(1, 1, (1, 3), (), 4))
    assert p.is_leader and p.isr == (1, 3) and p.zk_version == 4 and p.pending_isr is None
    assert not t.state_changed


def test_failed_write_fences_the_leader_until_reasserted(tmp_path: Path) -> None:
    """REQ-P4 and REQ-P6: ZooKeeper unreachable → no more writes or reads."""
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3])
    w = p.maybe_shrink_isr(now_ms=LAG + 1, lag_max_ms=LAG)
    assert w is not None
    t = p.isr_write_failed(w, None)
    assert isinstance(p.state, Fenced) and p.fenced and t.state_changed
    assert p.role is Role.LEADER and not p.is_leader
    with pytest.raises(KafkaError) as e:
        p.append_as_leader(records(), 1, now_ms=0)
    assert e.value.code == ErrorCode.not_leader_or_follower
    assert p.produce_completion(0) == ErrorCode.not_leader_or_follower
    r = p.reassert_isr()
    assert r is not None and r.isr == (1, 2, 3) and p.reassert_isr() is None  # in flight
    t = p.isr_write_succeeded(r, 1)
    assert p.is_leader and t.state_changed and p.zk_version == 1


def test_write_lost_to_another_leader_fences(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3])
    w = p.maybe_shrink_isr(now_ms=LAG + 1, lag_max_ms=LAG)
    assert w is not None
    p.isr_write_failed(w, LeaderAndIsr(2, 2, (2, 3), (), 5))
    assert p.fenced
    r = p.reassert_isr()
    assert r is not None
    p.isr_write_failed(r, LeaderAndIsr(2, 2, (2, 3), (), 5))
    p.reassert_finished()
    assert p.fenced and p.reassert_isr() is not None  # may try again later
    t = follow(p, 2, 2, [2, 3], zk_version=5)  # the controller's state arrives
    assert isinstance(p.state, Follower) and t.start_fetching_from == 2


def test_stale_write_results_are_ignored(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3])
    w = p.maybe_shrink_isr(now_ms=LAG + 1, lag_max_ms=LAG)
    assert w is not None
    lead(p, 1, [1, 3], zk_version=1)  # the controller wrote meanwhile
    assert not p.isr_write_succeeded(w, 1).state_changed and p.isr == (1, 3)
    assert not p.isr_write_failed(w, None).state_changed and p.is_leader


def test_fenced_leader_resumes_when_the_controller_restates_it(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1, 2, 3])
    w = p.maybe_shrink_isr(now_ms=LAG + 1, lag_max_ms=LAG)
    assert w is not None
    p.isr_write_failed(w, None)
    t = lead(p, 1, [1, 2], zk_version=1)
    assert p.is_leader and t.state_changed and p.isr == (1, 2)


# ------------------------------------------------------------------ acks, min ISR (REQ-R7, R8)
def test_min_insync_replicas_refuses_before_append_and_after(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 1, [1])
    p.set_min_insync_replicas(2)
    with pytest.raises(KafkaError) as e:
        p.append_as_leader(records(), -1, now_ms=0)
    assert e.value.code == ErrorCode.not_enough_replicas
    assert p.log_end_offset == 0  # nothing appended
    info = p.append_as_leader(records(), 1, now_ms=0)  # acks=1 is still accepted
    p.hw_after_append()
    assert p.log_end_offset == 3
    # Reached the HW, but the ISR is below the minimum: stored, not fully replicated.
    assert p.produce_completion(info.last_offset) == ErrorCode.not_enough_replicas_after_append


def test_epoch_checks(tmp_path: Path) -> None:
    p = make(tmp_path)
    lead(p, 5, [1, 2, 3])
    for epoch, code in ((4, ErrorCode.fenced_leader_epoch), (6, ErrorCode.unknown_leader_epoch)):
        with pytest.raises(KafkaError) as e:
            p.check_leader(epoch)
        assert e.value.code == code
    p.check_leader(5)


# ------------------------------------------------------------------ epochs, truncation (R19, R20)
def test_leader_epoch_cache_and_follower_truncation(tmp_path: Path) -> None:
    leader = make(tmp_path, broker=1, replicas=(1, 2))
    lead(leader, 1, [1, 2])
    leader.append_as_leader(records(3), 1, now_ms=0)
    lead(leader, 2, [1, 2], zk_version=1)
    leader.append_as_leader(records(2), 1, now_ms=0)
    assert leader.epochs.entries == [(1, 0), (2, 3)]
    assert leader.epochs.end_offset_for(1, leader.log_end_offset) == (1, 3)
    assert leader.epochs.end_offset_for(2, leader.log_end_offset) == (2, 5)

    follower = make(tmp_path, broker=2, replicas=(1, 2))
    follow(follower, 1, 2, [1, 2], zk_version=1)
    data = leader.log.read(0, 1 << 20, max_offset=5).read_bytes()
    follower.append_as_follower(data, leader_hw=5, now_ms=0)
    assert follower.epochs.entries == [(1, 0), (2, 3)]
    assert follower.high_watermark == 5 and follower.role is Role.FOLLOWER
    follower.truncate_to(3)  # REQ-R20: drop the suffix the new leader lacks
    assert follower.log_end_offset == 3 and follower.epochs.entries == [(1, 0)]
    assert follower.high_watermark == 3


def test_a_batch_is_parsed_once_and_corrupt_input_is_refused(tmp_path: Path) -> None:
    p = make(tmp_path, replicas=(1,))
    lead(p, 1, [1])
    bad = bytearray(records(2))
    bad[-1] ^= 0xFF  # payload byte: the CRC no longer matches
    with pytest.raises(KafkaError) as e:
        p.append_as_leader(bytes(bad), 1, now_ms=0)
    assert e.value.code == ErrorCode.corrupt_message
    assert p.log_end_offset == 0
