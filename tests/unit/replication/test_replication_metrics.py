"""The replica manager's metric hooks (issue 15) on real replica managers and logs, in
one process (tests/support/replication_harness.py): a leader counts the ISR changes it
wrote (Kafka's IsrShrinksPerSec / IsrExpandsPerSec), and its per-topic counters follow
what was produced and fetched (BytesInPerSec, MessagesInPerSec, BytesOutPerSec,
ReplicationBytesOutPerSec)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from odradek.metrics.stats import BrokerTopicStats
from odradek.replication.partition_state import LeaderAndIsr
from odradek.storage.records import encode_batch
from support.partitions import lead, new_partition
from support.replication_harness import TOPIC, ReplicationHarness


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def test_a_leader_counts_its_isr_shrink_and_expand(tmp_path: Path) -> None:
    async def main() -> None:
        async with ReplicationHarness(tmp_path, lag_ms=300) as h:
            await h.elect(0, leader=1)
            leader = h.replicas[1].isr_stats
            shrinks, expands = leader.shrinks, leader.expands
            h.net.cut(1, 3)
            await h.wait_until(
                lambda: h.controller.znodes[0].isr == (1, 2), "broker 3 removed from the ISR"
            )
            await h.wait_until(lambda: leader.shrinks == shrinks + 1, "the shrink counted")
            assert leader.expands == expands
            h.net.heal()
            await h.wait_until(
                lambda: h.controller.znodes[0].isr == (1, 2, 3), "broker 3 back in the ISR"
            )
            await h.wait_until(lambda: leader.expands == expands + 1, "the expand counted")
            assert leader.shrinks == shrinks + 1
            # Followers wrote no ISR change: nothing counted there.
            assert all(
                (h.replicas[b].isr_stats.shrinks, h.replicas[b].isr_stats.expands) == (0, 0)
                for b in (2, 3)
            )

    run(main())


def test_topic_counters_follow_produce_and_fetch(tmp_path: Path) -> None:
    async def main() -> None:
        async with ReplicationHarness(tmp_path) as h:
            stats = {b: BrokerTopicStats() for b in h.replicas}
            for b, rm in h.replicas.items():
                rm.topic_stats = stats[b]
            await h.elect(0, leader=1)
            batches = [
                encode_batch([(None, f"v{i}-{j}".encode()) for j in range(5)]) for i in range(3)
            ]
            for batch in batches:
                res = await h.produce(1, batch)
                assert res.error_code == 0
            led = stats[1].topic(TOPIC)
            assert led.bytes_in == sum(len(b) for b in batches)
            assert led.messages_in == 15
            assert led.produce_requests == 3 and led.failed_produce_requests == 0
            # Followers fetched every batch from the leader: replication bytes, not
            # consumer bytes; nothing was produced to a follower.
            await h.wait_until(
                lambda: led.replication_bytes_out >= 2 * led.bytes_in, "followers' fetches counted"
            )
            assert led.bytes_out == 0
            assert all(stats[b].topic(TOPIC).bytes_in == 0 for b in (2, 3))
            got = await h.consume(1, 0)
            assert got.records is not None
            assert led.bytes_out == len(got.records) == led.bytes_in
            # A produce to a follower fails (NOT_LEADER): counted as a failed request
            # only where the partition is hosted.
            res = await h.produce(2, batches[0])
            assert res.error_code != 0

    run(main())


@pytest.mark.parametrize("watch_first", [False, True])
def test_own_isr_write_is_one_change_whichever_answer_comes_first(
    tmp_path: Path, watch_first: bool
) -> None:
    """The leader's write and the state znode's watch race (a real broker's kazoo thread
    and its metadata thread): either way the change is counted once, as this leader's;
    the controller's own ISR change is not counted."""
    p = new_partition(tmp_path / "t-0", broker=1, replicas=(1, 2, 3))
    lead(p, 1, [1, 2, 3], zk_version=0)
    p.update_follower_fetch_state(2, 0, now_ms=100)
    w = p.maybe_shrink_isr(now_ms=10_050, lag_max_ms=10_000)  # 3 never fetched
    assert w is not None and w.isr == (1, 2)
    watch = LeaderAndIsr(
        leader=1, leader_epoch=1, isr=(1, 2), replicas=(1, 2, 3), zk_version=1, controller_epoch=1
    )
    if watch_first:
        changes = [
            p.apply_leader_and_isr(watch, 10_051).isr_change,
            p.isr_write_succeeded(w, 1).isr_change,
        ]
    else:
        changes = [
            p.isr_write_succeeded(w, 1).isr_change,
            p.apply_leader_and_isr(watch, 10_051).isr_change,
        ]
    assert [c for c in changes if c is not None] == [((1, 2, 3), (1, 2))]
    assert p.isr == (1, 2) and p.zk_version == 1 and p.pending_isr is None
    # The controller removes broker 2 (e.g. its controlled shutdown): not this leader's.
    t = p.apply_leader_and_isr(
        LeaderAndIsr(
            leader=1, leader_epoch=1, isr=(1,), replicas=(1, 2, 3), zk_version=2, controller_epoch=1
        ),
        10_052,
    )
    assert t.isr_change is None and p.isr == (1,)
