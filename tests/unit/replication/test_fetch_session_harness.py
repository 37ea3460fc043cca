"""KIP-227 fetch sessions end to end in one process (tests/support/replication_harness.py):
three replica managers whose followers keep a session with each leader. Each test is an
edge case of the session: idle partitions, a lost wake-up, an evicted session, a leader
change (the partition is forgotten by one session and joins another)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from odradek.replication.fetch_session import FetchKind
from odradek.replication.fetcher import FetchState
from odradek.storage.records import encode_batch
from support.replication_harness import TOPIC, MemoryLeaderEndpoint, ReplicationHarness


def recs(n: int = 3, tag: str = "v") -> bytes:
    return encode_batch([(None, f"{tag}{i}".encode()) for i in range(n)])


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def endpoint(h: ReplicationHarness, follower: int, leader: int) -> MemoryLeaderEndpoint:
    ep = h.replicas[follower].fetchers.fetchers[leader].endpoint
    assert isinstance(ep, MemoryLeaderEndpoint)
    return ep


def test_incremental_fetches_name_only_the_partition_that_moved(tmp_path: Path) -> None:
    """After one full fetch, a follower names only partitions whose offset changed; the
    leader still reads (and wakes on) the unnamed ones: a produce on partition 3 while
    the follower's fetch names nothing completes within 1 s although replica.fetch.wait.max.ms is
    2 s (and replica.lag.time.max.ms 5 s), so the delayed fetch watched the whole session (REQ-R17)."""

    async def main() -> None:
        async with ReplicationHarness(
            tmp_path, partitions=4, fetch_wait_ms=2_000, lag_ms=5_000
        ) as h:
            for p in range(4):
                await h.elect(p, leader=1)
            for p in range(4):
                res = await h.produce(1, recs(2), partition=p, timeout_s=3)
                assert res.error_code == 0, p
            ep = endpoint(h, 2, 1)
            ep.requests.clear()
            for i in range(3):
                res = await h.produce(1, recs(1, f"x{i}"), partition=3, timeout_s=1)
                assert res.error_code == 0
            await h.wait_until(
                lambda: h.partition(2, 3).high_watermark == 5,
                "the follower learns partition 3's HW",
            )
            kinds = {k for _, k in ep.requests}
            assert kinds == {FetchKind.INCREMENTAL}, kinds
            named = {(p.topic, p.partition) for r, _ in ep.requests for p in r.partitions}
            assert named == {(TOPIC, 3)}, named
            for p in range(4):
                assert h.log_bytes(1, p) == h.log_bytes(2, p) == h.log_bytes(3, p)
            # The idle partitions still count as fetched: nobody left the ISR.
            assert [h.partition(1, p).isr for p in range(4)] == [(1, 2, 3)] * 4

    run(main())


def test_an_evicted_session_costs_one_full_fetch(tmp_path: Path) -> None:
    """The leader lost the session (eviction, restart): FETCH_SESSION_ID_NOT_FOUND, then
    a full fetch at once (no backoff), and replication goes on."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, partitions=2, backoff_ms=5_000) as h:
            for p in range(2):
                await h.elect(p, leader=1)
            assert (await h.produce(1, recs(2))).error_code == 0
            ep = endpoint(h, 2, 1)
            cache = h.replicas[1].fetch_sessions
            for sid in list(cache.sessions):
                cache.remove(sid)
            ep.requests.clear()
            res = await h.produce(1, recs(2, "after"), partition=1, timeout_s=3)
            assert res.error_code == 0
            kinds = [k for _, k in ep.requests]
            assert kinds[:2] == [FetchKind.ERROR, FetchKind.FULL], kinds
            assert h.log_bytes(1, 1) == h.log_bytes(2, 1) == h.log_bytes(3, 1)

    run(main())


def test_leader_change_forgets_the_partition_in_the_old_session(tmp_path: Path) -> None:
    """Partition 1 moves from leader 1 to leader 2: broker 3's session with 1 forgets it,
    its new fetcher for 2 opens a session with a full fetch, and both partitions keep
    replicating."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, partitions=2) as h:
            for p in range(2):
                await h.elect(p, leader=1)
            assert (await h.produce(1, recs(2), partition=1)).error_code == 0
            await h.elect(1, leader=2)
            assert (await h.produce(2, recs(2, "new"), partition=1, timeout_s=3)).error_code == 0
            assert (await h.produce(1, recs(2, "p0"), partition=0, timeout_s=3)).error_code == 0

            def forgotten() -> bool:
                sessions = h.replicas[1].fetch_sessions.sessions.values()
                return all((TOPIC, 1) not in s.partitions for s in sessions)

            await h.wait_until(forgotten, "leader 1's sessions forget partition 1")
            assert any(r.forgotten == [(TOPIC, [1])] for r, _ in endpoint(h, 3, 1).requests)
            assert next(k for _, k in endpoint(h, 3, 2).requests) is FetchKind.FULL
            for p in range(2):
                assert h.log_bytes(1, p) == h.log_bytes(2, p) == h.log_bytes(3, p)

    run(main())


async def _settled(h: ReplicationHarness, partitions: int) -> None:
    """Every partition led by 1, replicated, and both followers' sessions idle."""
    # A follower adds a newly led partition to its fetch session with its next fetch,
    # once the one parked at the leader returns (up to fetch_wait_ms: Kafka's fetcher
    # does not cut its in-flight fetch short either), so the first acks=all produce may
    # wait that long before replication even starts. A 3 s timeout against the 3 s wait
    # of test_data_on_an_idle_partition_completes_the_waiting_fetch failed 1 run in 10.
    timeout_s = 3 + h.fetch_wait_ms / 1000
    for p in range(partitions):
        await h.elect(p, leader=1)
        assert (await h.produce(1, recs(1), partition=p, timeout_s=timeout_s)).error_code == 0

    def idle() -> bool:
        sessions = list(h.replicas[1].fetch_sessions.sessions.values())
        return len(sessions) == 2 and all(
            not s.active and len(s.partitions) == partitions for s in sessions
        )

    await h.wait_until(idle, "both followers' sessions idle")


def test_idle_partitions_are_not_read_and_stay_in_the_isr(tmp_path: Path) -> None:
    """Issue 13: once replicated, idle partitions cost a follower's fetch nothing -- the
    leader reads none of them -- and still count as fetched: over 6 lag periods nobody
    leaves the ISR (the credit comes from the session's last fetch, REQ-R6)."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, partitions=6) as h:
            await _settled(h, 6)
            leader = h.replicas[1]
            visited: list[int] = []
            real_read = leader.fetching._read

            def counting_read(params, topics, image):  # type: ignore[no-untyped-def]
                visited.append(sum(len(es) for _, es in topics))
                return real_read(params, topics, image)

            leader.fetching._read = counting_read  # type: ignore[method-assign]
            ep = endpoint(h, 2, 1)
            ep.requests.clear()
            loop = asyncio.get_running_loop()
            end = loop.time() + 6 * h.lag_ms / 1000
            while loop.time() < end:
                assert [h.partition(1, p).isr for p in range(6)] == [(1, 2, 3)] * 6
                await asyncio.sleep(0.05)
            assert len(ep.requests) >= 5  # the follower kept fetching...
            assert sum(visited) == 0, visited  # ...and no partition was read

    run(main())


def test_data_on_an_idle_partition_completes_the_waiting_fetch(tmp_path: Path) -> None:
    """REQ-R17 with idle partitions: the followers' fetches wait 3 s and name nothing;
    an acks=all produce to one idle partition is replicated well within 1 s, so the
    parked fetches were woken through their session, not by their timeout."""

    async def main() -> None:
        async with ReplicationHarness(
            tmp_path, partitions=4, fetch_wait_ms=3_000, lag_ms=10_000
        ) as h:
            await _settled(h, 4)
            # Each follower's current fetch started with nothing to read (it was sent after
            # every partition went idle): a re-read must look at what changed since.
            sent = {f: len(endpoint(h, f, 1).requests) for f in (2, 3)}
            await h.wait_until(
                lambda: all(len(endpoint(h, f, 1).requests) > sent[f] for f in (2, 3)),
                "a fetch sent while idle",
                timeout_s=8,
            )
            for i in range(3):
                res = await h.produce(1, recs(1, f"late{i}"), partition=i + 1, timeout_s=1)
                assert res.error_code == 0, i
                assert h.log_bytes(1, i + 1) == h.log_bytes(2, i + 1) == h.log_bytes(3, i + 1)

    run(main())


def test_a_follower_that_stops_fetching_leaves_the_isr_of_idle_partitions(tmp_path: Path) -> None:
    """The idle credit must not outlive the follower: once broker 3 stops fetching (its
    link to the leader cut), every idle partition drops it from the ISR after
    replica.lag.time.max.ms, and takes it back when it returns (REQ-R6)."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, partitions=4) as h:
            await _settled(h, 4)
            h.net.cut(1, 3)
            await h.wait_until(
                lambda: all(h.partition(1, p).isr == (1, 2) for p in range(4)),
                "broker 3 leaves every ISR",
                timeout_s=5,
            )
            h.net.heal()
            await h.wait_until(
                lambda: all(h.partition(1, p).isr == (1, 2, 3) for p in range(4)),
                "broker 3 rejoins every ISR",
                timeout_s=5,
            )

    run(main())


def test_a_replica_the_leader_does_not_know_yet_keeps_fetching_until_it_joins(
    tmp_path: Path,
) -> None:
    """A reassignment's new replica may fetch before the leader has the new replica set:
    the leader then ignores its fetch offset. Its session must not skip the partition as
    idle after catching up, or the leader never records it and it never joins the ISR
    (CI saw a reassignment onto an added broker hang so)."""
    from dataclasses import replace

    async def main() -> None:
        async with ReplicationHarness(tmp_path, fetch_wait_ms=100, lag_ms=5_000) as h:
            z = h.controller.znodes[0]
            z.leader, z.leader_epoch, z.isr, z.version = 1, 0, (1, 2), 1
            full = h.controller.image()  # replicas (1, 2, 3)
            topic = full.topics[TOPIC]
            narrow = replace(
                full,
                topics={
                    TOPIC: replace(
                        topic, partitions={0: replace(topic.partitions[0], replicas=(1, 2))}
                    )
                },
            )
            for b, image in ((1, narrow), (2, narrow), (3, full)):
                h.images[b] = image
                h.replicas[b].apply_image(image)
            res = await h.produce(1, recs(5), timeout_s=3)
            assert res.error_code == 0
            leo = h.partition(1).log.log_end_offset
            await h.wait_until(
                lambda: h.partition(3).log.log_end_offset == leo,
                "the unknown replica to copy the log",
            )
            ep = endpoint(h, 3, 1)
            seen = len(ep.requests)
            await h.wait_until(
                lambda: len(ep.requests) >= seen + 3, "three more fetches at the log end"
            )
            assert h.partition(1).isr == (1, 2)
            for b in (1, 2):  # the leader learns the new replica set, same epoch
                h.images[b] = full
                h.replicas[b].apply_image(full)
            await h.wait_until(
                lambda: 3 in h.partition(1).isr, "the new replica to join the ISR", timeout_s=5
            )

    run(main())


def test_a_followers_full_fetch_is_answered_at_once_with_the_high_watermark(tmp_path: Path) -> None:
    """A follower restarted with a stale high watermark (its checkpoint lags) opens a new
    session with a full fetch at its log end: nothing to read, yet the leader answers at
    once, so the follower learns the HW on that fetch -- the one that makes it an ISR
    member again -- instead of when the long poll ends. Elected before that, it would lead
    with the stale HW and serve consumers an empty partition (a loaded CI run did). The
    fetch wait is 8 s and the ISR check far off, so nothing else can wake the fetch."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, fetch_wait_ms=8_000, lag_ms=60_000) as h:
            await h.elect(0, leader=1)
            for i in range(3):
                assert (await h.produce(1, recs(2, f"r{i}"))).error_code == 0
            end = h.partition(1).log.log_end_offset
            await h.wait_until(
                lambda: h.partition(3).high_watermark == end, "broker 3's HW at the log end"
            )
            await h.crash_broker(3)
            h.start_broker(3)  # the harness keeps no HW checkpoint: 3 restarts at HW 0
            h.replicas[3].apply_image(h.images[1])
            assert h.partition(3).high_watermark < end
            await h.wait_until(
                lambda: any(k is FetchKind.FULL for _, k in endpoint(h, 3, 1).requests),
                "broker 3's full fetch",
            )
            await h.wait_until(
                lambda: h.partition(3).high_watermark == end,
                "the restarted follower to learn the HW",
                timeout_s=5,
            )

    run(main())


def test_a_high_watermark_answer_dropped_at_an_epoch_change_is_sent_again(tmp_path: Path) -> None:
    """Sim seeds 7591, 15334, 17297, replayed by hand: follower 2's fetch that moved the
    HW waits at the leader; follower 2 hears of a new leader epoch (same leader) before
    the leader does and re-adds the partition (truncating first), so it drops the answer
    carrying the HW, which the leader's session has cached as sent. With no more writes,
    no later incremental answer carried the HW: follower 2 stayed one behind for good.
    The fetcher reports the drop and its next fetch is full, answered whole."""

    async def main() -> None:
        async with ReplicationHarness(tmp_path, fetch_wait_ms=200, lag_ms=60_000) as h:
            await h.elect(0, leader=1)
            assert (await h.produce(1, recs(2))).error_code == 0
            await h.wait_until(lambda: h.partition(2).high_watermark == 2, "follower 2 at HW 2")
            assert (await h.produce(1, recs(1, "last"))).error_code == 0  # leader HW 3
            # Answers to follower 2 now take 1 s: the one with HW 3 is still to come.
            h.net.delay(1, 2, 1.0)
            assert h.partition(2).high_watermark == 2
            z = h.controller.znodes[0]
            z.leader_epoch += 1
            z.version += 1
            image = h.controller.image()
            h.images[2] = image  # follower 2 hears of the new epoch first
            h.replicas[2].apply_image(image)
            sessions = h.replicas[1].fetch_sessions

            def hw_cached() -> bool:
                return any(
                    s.replica_id == 2 and s.partitions[(TOPIC, 0)].high_watermark == 3
                    for s in sessions.sessions.values()
                )

            await h.wait_until(hw_cached, "the leader's answer with HW 3 to leave")
            h.controller.publish()  # then the leader and broker 3
            await h.wait_until(
                lambda: h.partition(1).leader_epoch == z.leader_epoch, "the leader at the new epoch"
            )
            h.net.heal()
            await h.wait_until(
                lambda: h.partition(2).high_watermark == 3, "follower 2 to learn HW 3", timeout_s=5
            )

    run(main())


@contextlib.contextmanager
def _state_lookups() -> Iterator[list[tuple[str, int]]]:
    """The partitions whose fetch state a follower looks at (``FetchState.current_state``
    calls), in order, while the block runs."""
    looked: list[tuple[str, int]] = []
    real_state = FetchState.current_state

    def counting_state(self: FetchState, max_bytes: int) -> tuple[int, ...]:
        looked.append((self.partition.topic, self.partition.index))
        return real_state(self, max_bytes)

    FetchState.current_state = counting_state  # type: ignore[assignment,method-assign]
    try:
        yield looked
    finally:
        FetchState.current_state = real_state  # type: ignore[method-assign]


def _fetches_visiting_nothing(ep: MemoryLeaderEndpoint, looked: list[Any]) -> Callable[[], bool]:
    """A condition: the follower's last five fetches (at least) named nothing and looked
    at no partition's state. Until then the leader may still answer a partition once
    (its HW moved after the follower's last fetch), which is looked at again in the
    next fetch only. Clears ``ep.requests`` and ``looked`` each time it decides."""

    def cond() -> bool:
        if len(ep.requests) < 5:
            return False
        assert all(not r.partitions for r, _ in ep.requests)
        assert {k for _, k in ep.requests} == {FetchKind.INCREMENTAL}
        idle = not looked
        ep.requests.clear()
        looked.clear()
        return idle

    return cond


def test_an_idle_followers_fetches_visit_none_of_its_partitions(tmp_path: Path) -> None:
    """Issue 29 (idle CPU with 10,000 partitions): once every partition is idle, a
    follower builds its next fetch without looking at any partition's state -- the fetch
    names nothing, as the full computation would -- and the first record on any partition
    ends that: it is replicated, and its partition named, as before."""

    async def main() -> None:
        async with ReplicationHarness(
            tmp_path, partitions=6, fetch_wait_ms=100, lag_ms=10_000
        ) as h:
            await _settled(h, 6)
            fetcher = h.replicas[2].fetchers.fetchers[1]
            with _state_lookups() as looked:
                ep = endpoint(h, 2, 1)
                await h.wait_until(lambda: fetcher._quiet, "a quiet fetch round", timeout_s=5)
                ep.requests.clear()
                looked.clear()
                await h.wait_until(_fetches_visiting_nothing(ep, looked), "five idle fetches", 10)
                res = await h.produce(1, recs(2, "woke"), partition=4, timeout_s=2)
                assert res.error_code == 0
                await h.wait_until(
                    lambda: h.log_bytes(1, 4) == h.log_bytes(2, 4), "partition 4 replicated"
                )
                named = {(p.topic, p.partition) for r, _ in ep.requests for p in r.partitions}
                assert named == {(TOPIC, 4)}, named

    run(main())


def test_a_busy_followers_fetches_visit_only_the_partitions_that_moved(tmp_path: Path) -> None:
    """Issue 29 (CPU per request with 10,000 partitions hosted): a follower builds each
    fetch from the partitions whose fetch state may have changed -- the ones the last
    answer brought -- not from all it follows. At 10,000 partitions and 1,000
    records/s the pass over every partition per fetch was 46 % of the brokers' CPU.
    Records keep arriving on one partition of twelve: every fetch looks at that one
    only, names it, and it is replicated as before."""

    async def main() -> None:
        async with ReplicationHarness(
            tmp_path, partitions=12, fetch_wait_ms=100, lag_ms=10_000
        ) as h:
            await _settled(h, 12)
            fetcher = h.replicas[2].fetchers.fetchers[1]
            with _state_lookups() as looked:
                ep = endpoint(h, 2, 1)
                await h.wait_until(lambda: fetcher._quiet, "a quiet fetch round", timeout_s=5)
                ep.requests.clear()
                await h.wait_until(_fetches_visiting_nothing(ep, looked), "five idle fetches", 10)
                for i in range(10):
                    res = await h.produce(1, recs(1, f"busy{i}"), partition=7, timeout_s=2)
                    assert res.error_code == 0
                    await h.wait_until(
                        lambda: h.log_bytes(1, 7) == h.log_bytes(2, 7), "partition 7 replicated"
                    )
                assert set(looked) == {(TOPIC, 7)}, set(looked)
                assert len(looked) <= 2 * len(ep.requests)
                named = {(p.topic, p.partition) for r, _ in ep.requests for p in r.partitions}
                assert named == {(TOPIC, 7)}, named
                assert {k for _, k in ep.requests} == {FetchKind.INCREMENTAL}

    run(main())
