"""Replication end to end, in one process: three real replica managers on real logs,
connected by an in-memory network and an in-memory ZooKeeper/controller with fault hooks
(tests/support/replication_harness.py). Each test is one rule of the documents."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest

from odradek.errors import ErrorCode
from odradek.replication.partition_state import Fenced, Follower, Leader
from odradek.replication.trace import parse_trace_lines
from odradek.storage.batch import parse_batches
from odradek.storage.records import encode_batch
from odradek.storage.truncation_ledger import ledger_root, list_entries
from support.replication_harness import TOPIC, ReplicationHarness


def recs(n: int = 3, tag: str = "v") -> bytes:
    return encode_batch([(None, f"{tag}{i}".encode()) for i in range(n)])


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def test_acks_all_completes_when_the_whole_isr_has_the_batch(tmp_path: Path) -> None:
    """REQ-R7, R16, R17: the leader's HW is min LEO over the ISR; acks=all answers once
    every member fetched the batch; followers learn the HW from the next response."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path) as h:
            await h.elect(0, leader=1)
            res = await h.produce(1, recs(3))
            assert res.error_code == 0 and res.base_offset == 0
            leader = h.partition(1)
            assert leader.high_watermark == 3
            assert all(h.partition(b).log_end_offset == 3 for b in (2, 3))
            await h.wait_until(
                lambda: all(h.partition(b).high_watermark == 3 for b in (2, 3)),
                "followers learn the HW",
            )
            assert h.log_bytes(1) == h.log_bytes(2) == h.log_bytes(3)

    run(main())


def test_a_waiting_consumer_fetch_completes_on_the_hw_move(tmp_path: Path) -> None:
    """REQ-R17: a long-polling fetch is answered as soon as the HW passes new data (not
    at max_wait), and never sees records above the HW (REQ-R16)."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path) as h:
            await h.elect(0, leader=1)
            fetch = asyncio.ensure_future(h.consume(1, 0, max_wait_s=30))
            await asyncio.sleep(0)
            assert not fetch.done()
            t0 = time.monotonic()
            await h.produce(1, recs(2))
            got = await asyncio.wait_for(fetch, 5)
            assert time.monotonic() - t0 < 5
            assert [h.base_offset for h in parse_batches(got.records)] == [0]
            assert got.high_watermark == 2
            # acks=1 with a follower cut: the record is on the leader but not committed.
            h.net.cut(1, 3)
            await h.produce(1, recs(1), acks=1)
            assert h.partition(1).log_end_offset == 3 and h.partition(1).high_watermark == 2
            got = await h.consume(1, 2)
            assert got.records is None

    run(main())


def test_isr_shrinks_on_a_cut_follower_and_expands_after_healing(tmp_path: Path) -> None:
    """REQ-R6, scenario 1/5: a follower that stops fetching leaves the ISR after
    replica.lag.time.max.ms (a conditional write), writes go on with min ISR 2, and it
    rejoins once caught up."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, lag_ms=300) as h:
            await h.elect(0, leader=1)
            h.net.cut(1, 3)
            await h.wait_until(
                lambda: h.controller.znodes[0].isr == (1, 2), "broker 3 removed from the ISR"
            )
            assert h.partition(1).isr == (1, 2)
            res = await h.produce(1, recs(4))  # acks=all: min ISR 2 is met
            assert res.error_code == 0
            h.net.heal()
            await h.wait_until(
                lambda: h.controller.znodes[0].isr == (1, 2, 3), "broker 3 back in the ISR"
            )
            await h.wait_until(lambda: h.log_bytes(3) == h.log_bytes(1), "3 caught up")

    run(main())


def test_min_insync_replicas(tmp_path: Path) -> None:
    """REQ-R8: with the ISR below min.insync.replicas acks=all is refused before the
    append (NOT_ENOUGH_REPLICAS); a batch appended while the ISR was large enough but
    committed after it shrank gets NOT_ENOUGH_REPLICAS_AFTER_APPEND; acks=1 still works."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, lag_ms=300) as h:
            await h.elect(0, leader=1)
            h.net.cut(1, 2)
            h.net.cut(1, 3)
            pending = asyncio.ensure_future(h.produce(1, recs(2), timeout_s=20))
            res = await asyncio.wait_for(pending, 10)
            assert res.error_code == ErrorCode.not_enough_replicas_after_append
            assert h.partition(1).isr == (1,)
            res = await h.produce(1, recs(2))
            assert res.error_code == ErrorCode.not_enough_replicas and res.base_offset == -1
            res = await h.produce(1, recs(2), acks=1)
            assert res.error_code == 0 and res.base_offset == 2

    run(main())


def test_delayed_produce_times_out(tmp_path: Path) -> None:
    """REQ-R7: acks=all that the ISR cannot reach in the request timeout (the lag time
    has not expired yet) is answered REQUEST_TIMED_OUT, with the record still stored."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, lag_ms=30_000) as h:
            await h.elect(0, leader=1)
            h.net.cut(1, 3)
            t0 = time.monotonic()
            res = await h.produce(1, recs(1), timeout_s=0.3)
            assert res.error_code == ErrorCode.request_timed_out and res.base_offset == -1
            assert 0.25 < time.monotonic() - t0 < 5
            assert h.partition(1).log_end_offset == 1

    run(main())


def test_leader_cut_from_zookeeper_is_fenced_then_truncated(tmp_path: Path) -> None:
    """REQ-P4 and REQ-P6: a leader that cannot record an ISR change stops accepting
    writes; acks=1 records it took before that are lost when the new leader (elected by
    the controller at a higher epoch) is followed -- and only those; logs converge."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, lag_ms=300) as h:
            await h.elect(0, leader=1)
            assert (await h.produce(1, recs(3, "a"))).error_code == 0  # committed: 0..2
            h.controller.unreachable.add(1)
            h.net.isolate(1, (2, 3))
            lost = await h.produce(1, recs(2, "lost"), acks=1)  # split brain: accepted
            assert lost.error_code == 0 and lost.base_offset == 3
            await h.wait_until(
                lambda: isinstance(h.partition(1).state, Fenced), "the old leader fences itself"
            )
            assert (
                await h.produce(1, recs(1), acks=1)
            ).error_code == ErrorCode.not_leader_or_follower
            # The controller elects 2 from the ISR {2, 3} (broker 1's session expired).
            h.controller.elect(0, leader=2, isr=(2, 3))
            await h.wait_until(lambda: h.partition(2).is_leader, "2 leads")
            assert (await h.produce(2, recs(2, "b"))).error_code == 0
            h.net.heal()
            h.controller.unreachable.clear()
            await h.wait_until(lambda: isinstance(h.partition(1).state, Follower), "1 follows 2")
            await h.wait_until(
                lambda: h.log_bytes(1) == h.log_bytes(2) == h.log_bytes(3), "logs converge (R20)"
            )
            values = [h.base_offset for h in parse_batches(h.log_bytes(1))]
            assert values == [0, 3]  # "a" batch, then "b": the "lost" batch is gone
            assert h.partition(1).ledger is not None

    run(main())


def test_a_replica_reassigned_away_quarantines_what_it_holds_above_its_hw(
    tmp_path: Path,
) -> None:
    """A deposed leader that took acks=1 writes its followers never fetched, then learns
    it was reassigned away (a paused leader resuming: seeds 3 and 35 of ``sim run
    --profile pause --workload idempotent --acks 1``), deletes its log without ever
    truncating: the records above its high watermark go to the lost-records ledger."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, lag_ms=300) as h:
            await h.elect(0, leader=1)
            assert (await h.produce(1, recs(3, "a"))).error_code == 0  # committed: 0..2
            h.net.isolate(1, (2, 3))
            lost = await h.produce(1, recs(2, "lost"), acks=1)
            assert lost.error_code == 0 and lost.base_offset == 3
            image = h.controller.image()
            topic = image.topics[TOPIC]
            moved = replace(topic.partitions[0], replicas=(2, 3), leader=2, leader_epoch=5)
            h.replicas[1].apply_image(
                replace(image, topics={TOPIC: replace(topic, partitions={0: moved})})
            )
            assert (TOPIC, 0) not in h.replicas[1].partitions
            entries = list_entries(ledger_root(tmp_path / "broker-1"))
            assert [r.value for e in entries for r in e.iter_records()] == [b"lost0", b"lost1"]
            assert [(e.new_leader_id, e.new_leader_epoch) for e in entries] == [(2, 5)]

    run(main())


def test_follower_truncates_by_leader_epoch_not_hw(tmp_path: Path) -> None:
    """REQ-R19: a follower with a suffix of an old epoch that the new leader never got
    truncates to where that epoch ends on the new leader -- keeping the records the new
    leader does have above the old HW."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, lag_ms=30_000, min_insync_replicas=1) as h:
            await h.elect(0, leader=1)
            await h.produce(1, recs(2, "a"))  # 0..1 everywhere
            h.net.cut(1, 3)
            await h.produce(1, recs(2, "b"), acks=1)  # 2..3 reach 2 only
            await h.wait_until(lambda: h.partition(2).log_end_offset == 4, "2 has 2..3")
            h.net.cut(1, 2)
            await h.produce(1, recs(2, "c"), acks=1)  # 4..5 on 1 only
            h.controller.elect(0, leader=2, isr=(2, 3))
            await h.wait_until(lambda: h.partition(2).is_leader, "2 leads")
            h.net.heal()
            await h.wait_until(
                lambda: h.log_bytes(1) == h.log_bytes(2) == h.log_bytes(3), "logs converge"
            )
            p1 = h.partition(1)
            assert p1.log_end_offset == 4  # 4..5 truncated; 2..3 kept (above the old HW)
            assert isinstance(h.partition(2).state, Leader)

    run(main())


def test_fetch_min_bytes_and_max_wait_are_honoured(tmp_path: Path) -> None:
    """REQ-R17: a fetch asking for min_bytes waits until that much is committed (each
    HW move re-checks it) or until max_wait, then answers with what there is."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path) as h:
            await h.elect(0, leader=1)
            one = len(recs(1))
            t0 = time.monotonic()
            got = await h.consume(1, 0, max_wait_s=0.3, min_bytes=one)
            assert got.records is None and 0.25 < time.monotonic() - t0 < 5  # max_wait
            fetch = asyncio.ensure_future(h.consume(1, 0, max_wait_s=30, min_bytes=3 * one))
            await h.produce(1, recs(1))
            await h.produce(1, recs(1))
            for _ in range(5):  # let the coalesced wake-ups run: no time passes here
                await asyncio.sleep(0)
            assert not fetch.done()  # 2 batches committed: below min_bytes
            await h.produce(1, recs(1))
            got = await asyncio.wait_for(fetch, 5)
            assert len(parse_batches(got.records)) == 3

    run(main())


def test_record_tracing_follows_sampled_records_through_the_followers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """odradek.trace.records.every: each follower logs received, appended and next.fetch
    for every sampled offset, and tracing changes nothing else: no fetch round fails
    (issue 25: a stale loop variable made the first sampled record raise, dropping the
    round, backing the fetcher off and never logging next.fetch)."""
    caplog.set_level(logging.INFO, logger="odradek.trace")
    caplog.set_level(logging.INFO, logger="odradek.replication.fetcher")

    def hops() -> set[tuple[int, str, str]]:
        return {
            (e.offset, e.hop, e.detail.split()[0])
            for e in parse_trace_lines(r.getMessage() for r in caplog.records)
        }

    async def main() -> None:
        async with ReplicationHarness(tmp_path, trace_every=3) as h:
            await h.elect(0, leader=1)
            for _ in range(3):
                res = await h.produce(1, recs(2))
                assert res.error_code == 0
            want = {
                (off, hop, f"broker={b}")
                for off in (0, 3)
                for b in (2, 3)
                for hop in ("received", "appended", "next.fetch")
            }
            await h.wait_until(lambda: want <= hops(), "each follower's hops of 0 and 3")
            assert {(0, "append", "broker=1"), (3, "append", "broker=1")} <= hops()
            assert h.log_bytes(1) == h.log_bytes(2) == h.log_bytes(3)

    run(main())
    failed = [
        r.getMessage()
        for r in caplog.records
        if r.name == "odradek.replication.fetcher" and r.levelno >= logging.WARNING
    ]
    assert failed == []  # no fetch round failed (nor an append: also a fetcher warning)
