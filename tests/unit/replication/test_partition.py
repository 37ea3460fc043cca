"""HW, ISR and epoch rules of one partition (SPEC R6, R7, R8, R16, R19), on a real log."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.replication.partition import Partition, Role
from odradek.storage.producer_state import ProducerStateManager
from odradek.errors import ErrorCode, KafkaError
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.records import encode_batch

LAG = 10_000


def make(tmp_path: Path, broker: int = 1, replicas=(1, 2, 3)) -> Partition:
    d = tmp_path / f"t-0-{broker}"
    p = Partition(topic="t", index=0, log=Log.open(d, LogConfig()), replicas=list(replicas),
                  local_broker_id=broker, epochs=LeaderEpochCache(d),
                  producers=ProducerStateManager(d))
    return p


def records(n: int = 3) -> bytes:
    return encode_batch([(None, b"x%d" % i) for i in range(n)])


def test_hw_is_min_leo_over_isr(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(1, [1, 2, 3], [1, 2, 3], zk_version=0, controller_epoch=1, now_ms=0)
    info = p.append_as_leader(records(3), 1, now_ms=1)
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert p.high_watermark == 0  # followers have not fetched
    p.record_follower_fetch(2, 3, now_ms=2)
    assert p.high_watermark == 0  # broker 3 is in the ISR and unknown
    p.record_follower_fetch(3, 2, now_ms=2)
    assert p.high_watermark == 2
    assert not p.acks_all_satisfied(2)
    p.record_follower_fetch(3, 3, now_ms=3)
    assert p.high_watermark == 3 and p.acks_all_satisfied(2)


def test_lagging_follower_is_dropped_and_rejoins_only_by_fetching(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(1, [1, 2, 3], [1, 2, 3], zk_version=0, controller_epoch=1, now_ms=0)
    p.append_as_leader(records(), 1, now_ms=0)
    p.record_follower_fetch(2, 3, now_ms=100)
    assert p.isr_change_wanted(now_ms=LAG + 50, lag_max_ms=LAG) == [1, 2]  # 3 never fetched
    p.isr = [1, 2]
    p.maybe_advance_high_watermark()
    assert p.high_watermark == 3
    assert p.isr_change_wanted(now_ms=LAG + 60, lag_max_ms=LAG) is None
    p.record_follower_fetch(3, 1, now_ms=LAG + 70)  # behind the HW: not yet
    assert p.isr_change_wanted(now_ms=LAG + 70, lag_max_ms=LAG) is None
    p.record_follower_fetch(3, 3, now_ms=LAG + 80)
    assert p.isr_change_wanted(now_ms=LAG + 80, lag_max_ms=LAG) == [1, 2, 3]


def test_min_insync_replicas_refuses_before_append(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(1, [1], [1, 2, 3], zk_version=0, controller_epoch=1, now_ms=0)
    p.min_insync_replicas = 2
    with pytest.raises(KafkaError) as e:
        p.append_as_leader(records(), -1, now_ms=0)
    assert e.value.code == ErrorCode.not_enough_replicas
    assert p.log_end_offset == 0  # nothing appended
    p.append_as_leader(records(), 1, now_ms=0)  # acks=1 is still accepted
    assert p.log_end_offset == 3


def test_fenced_leader_and_epoch_checks(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.make_leader(5, [1, 2, 3], [1, 2, 3], zk_version=0, controller_epoch=1, now_ms=0)
    for epoch, code in ((4, ErrorCode.fenced_leader_epoch), (6, ErrorCode.unknown_leader_epoch)):
        with pytest.raises(KafkaError) as e:
            p.check_leader(epoch)
        assert e.value.code == code
    p.fence()  # SPEC scenarios 4/6: a failed ISR write stops writes
    with pytest.raises(KafkaError) as e:
        p.append_as_leader(records(), 1, now_ms=0)
    assert e.value.code == ErrorCode.not_leader_or_follower


def test_leader_epoch_cache_and_follower_truncation(tmp_path: Path) -> None:
    leader = make(tmp_path, broker=1)
    leader.make_leader(1, [1, 2], [1, 2], zk_version=0, controller_epoch=1, now_ms=0)
    leader.append_as_leader(records(3), 1, now_ms=0)
    leader.make_leader(2, [1, 2], [1, 2], zk_version=1, controller_epoch=1, now_ms=0)
    leader.append_as_leader(records(2), 1, now_ms=0)
    assert leader.epochs.entries == [(1, 0), (2, 3)]
    assert leader.epochs.end_offset_for(1, leader.log_end_offset) == (1, 3)
    assert leader.epochs.end_offset_for(2, leader.log_end_offset) == (2, 5)

    follower = make(tmp_path, broker=2)
    follower.make_follower(1, 2, [1, 2], [1, 2], zk_version=1)
    data = leader.log.read(0, 1 << 20, max_offset=5).read_bytes()
    follower.append_as_follower(data, leader_hw=5, now_ms=0)
    assert follower.epochs.entries == [(1, 0), (2, 3)]
    assert follower.high_watermark == 5 and follower.role is Role.FOLLOWER
    follower.truncate_to(3)  # SPEC R20: drop the suffix the new leader lacks
    assert follower.log_end_offset == 3 and follower.epochs.entries == [(1, 0)]
    assert follower.high_watermark == 3
