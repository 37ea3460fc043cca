"""KIP-227 fetch sessions, the pure parts: the leader's session cache (FetchSession.scala)
and the follower's session handler (FetchSessionHandler.java), alone and talking to each
other (hypothesis drives random fetch-state changes, removals and evictions)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode
from odradek.protocol.fetch_response import PartitionFetchResult
from odradek.protocol.replica_fetch import ReplicaFetchPartition
from odradek.replication.fetch_serving import FetchEntry
from odradek.replication.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchContext,
    FetchKind,
    FetchSessionCache,
    next_epoch,
)
from odradek.replication.fetch_session_handler import FetchRequestData, FetchSessionHandler

Topics = list[tuple[str, list[FetchEntry]]]


def entry(topic: str, index: int, offset: int = 0) -> FetchEntry:
    return FetchEntry(
        topic, offset, 1 << 20, 0, 0, PartitionFetchResult(index, 0, -1, -1, -1, None)
    )


def topics(*tps: tuple[str, int, int]) -> Topics:
    out: dict[str, list[FetchEntry]] = {}
    for t, i, off in tps:
        out.setdefault(t, []).append(entry(t, i, off))
    return list(out.items())


def answer(
    ts: Topics,
    hw: int = 10,
    records: dict[tuple[str, int], bytes] | None = None,
    errors: dict[tuple[str, int], int] | None = None,
) -> None:
    """What the replica manager's read leaves in each result."""
    for t, es in ts:
        for e in es:
            r = e.result
            r.high_watermark = r.last_stable_offset = hw
            r.log_start_offset = 0
            r.records = (records or {}).get((t, r.index))
            r.error_code = (errors or {}).get((t, r.index), 0)


def names(ts: Topics) -> list[tuple[str, int]]:
    return [(t, e.result.index) for t, es in ts for e in es]


def test_a_full_fetch_opens_a_session_and_incremental_ones_answer_only_news() -> None:
    """A consumer's session (followers': the next test)."""
    cache = FetchSessionCache()
    full = cache.new_context(
        0,
        INITIAL_EPOCH,
        topics(("a", 0, 5), ("a", 1, 7), ("b", 0, 1)),
        [],
        follower=False,
        now_ms=0,
    )
    assert full.kind is FetchKind.FULL and full.session_id != 0
    answer(full.topics)
    assert names(full.response_topics()) == [("a", 0), ("a", 1), ("b", 0)]
    # Nothing named: every partition is still read (with its cached offset)...
    inc = cache.new_context(full.session_id, 1, [], [], follower=False, now_ms=1)
    assert inc.kind is FetchKind.INCREMENTAL
    assert sorted(names(inc.topics)) == [("a", 0), ("a", 1), ("b", 0)]
    assert {e.fetch_offset for _, es in inc.topics for e in es} == {5, 7, 1}
    # ...but only news is answered: records on a-1, a new HW nowhere else.
    answer(inc.topics, records={("a", 1): b"x"})
    assert names(inc.response_topics()) == [("a", 1)]
    inc = cache.new_context(full.session_id, 2, topics(("a", 1, 8)), [], follower=False, now_ms=2)
    assert {(t, e.result.index): e.fetch_offset for t, es in inc.topics for e in es}[("a", 1)] == 8
    answer(inc.topics, hw=11, errors={("b", 0): int(ErrorCode.not_leader_or_follower)})
    assert sorted(names(inc.response_topics())) == [("a", 0), ("a", 1), ("b", 0)]
    inc = cache.new_context(full.session_id, 3, [], [("a", [0, 1])], follower=False, now_ms=3)
    answer(inc.topics, hw=11, errors={("b", 0): int(ErrorCode.not_leader_or_follower)})
    assert names(inc.response_topics()) == [("b", 0)]  # errors are always answered
    assert list(cache.sessions[full.session_id].partitions) == [("b", 0)]


def read(
    ctx: FetchContext,
    idle: set[tuple[str, int]],
    hw: int = 10,
    records: dict[tuple[str, int], bytes] | None = None,
) -> list[tuple[str, int]]:
    """What ReplicaManager.fetch_messages does with a follower's session: read what the
    context says, flag the partitions found idle, settle the session."""
    visited = ctx.topics_to_read()
    answer(visited, hw=hw, records=records)
    for t, es in visited:
        for e in es:
            e.idle = (t, e.result.index) in idle
    assert ctx.session is not None
    ctx.session.settle(visited)
    return names(visited)


def test_a_follower_session_reads_only_partitions_that_changed() -> None:
    """Issue 13: a follower's incremental fetch visits its named partitions, those whose
    last read had something to say, and those marked changed -- not the idle rest, which
    keep their cached fetch offset (the ISR credit uses it) and answer nothing."""
    cache = FetchSessionCache()
    tps = [("a", 0), ("a", 1), ("b", 0)]
    full = cache.new_context(
        0,
        INITIAL_EPOCH,
        topics(("a", 0, 5), ("a", 1, 7), ("b", 0, 1)),
        [],
        follower=True,
        now_ms=0,
        replica_id=2,
    )
    session = full.session
    assert session is not None and session.replica_id == 2 and session.skips_idle
    assert read(full, idle={("a", 0), ("b", 0)}, records={("a", 1): b"x"}) == tps
    assert names(full.response_topics()) == tps
    assert [list(cache.holders(tp)) for tp in tps] == [[session]] * 3
    # a-1 returned records: still active; the idle ones are skipped.
    inc = cache.new_context(full.session_id, 1, [], [], follower=True, now_ms=1, replica_id=2)
    assert read(inc, idle={("a", 1)}) == [("a", 1)]
    assert names(inc.response_topics()) == []  # no records, HW unchanged
    assert session.idle_fetch_offset(("a", 0)) == 5 and session.last_used_ms == 1
    # Nothing active, nothing named: the fetch reads nothing at all.
    inc = cache.new_context(full.session_id, 2, [], [], follower=True, now_ms=2, replica_id=2)
    assert read(inc, idle=set(tps)) == []
    # An append on b-0 (the replica manager marks it): read, answered, idle again.
    assert session.mark(("b", 0)) is True and session.mark(("b", 0)) is False
    assert session.idle_fetch_offset(("b", 0)) is None
    inc = cache.new_context(full.session_id, 3, [], [], follower=True, now_ms=3, replica_id=2)
    assert read(inc, idle=set(), records={("b", 0): b"y"}) == [("b", 0)]
    assert names(inc.response_topics()) == [("b", 0)]
    # A marked partition read again during the same fetch (a delayed re-read) joins it.
    inc = cache.new_context(
        full.session_id, 4, topics(("b", 0, 2)), [], follower=True, now_ms=4, replica_id=2
    )
    assert read(inc, idle={("b", 0)}, hw=12) == [("b", 0)]
    session.mark(("a", 0))
    assert read(inc, idle={("a", 0)}, hw=12) == [("a", 0)]
    assert sorted(names(inc.response_topics())) == [("a", 0), ("b", 0)]  # new HW
    # Forgetting and closing drop the partitions from the index.
    inc = cache.new_context(
        full.session_id, 5, [], [("a", [0])], follower=True, now_ms=5, replica_id=2
    )
    assert list(cache.holders(("a", 0))) == [] and session.mark(("a", 0)) is False
    cache.remove(full.session_id)
    assert [list(cache.holders(tp)) for tp in tps] == [[], [], []]


def test_consumer_sessions_are_not_indexed() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(0, INITIAL_EPOCH, topics(("a", 0, 0)), [], follower=False, now_ms=0)
    assert ctx.follower_session is None and list(cache.holders(("a", 0))) == []


def test_session_errors_and_closing() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(0, INITIAL_EPOCH, topics(("a", 0, 0)), [], follower=False, now_ms=0)
    sid = ctx.session_id
    assert (
        cache.new_context(sid + 1, 1, [], [], follower=False, now_ms=1).error_code
        == ErrorCode.fetch_session_id_not_found
    )
    assert (
        cache.new_context(sid, 2, [], [], follower=False, now_ms=1).error_code
        == ErrorCode.invalid_fetch_session_epoch
    )
    assert cache.new_context(sid, 1, [], [], follower=False, now_ms=1).kind is FetchKind.INCREMENTAL
    # A replayed epoch is refused (the epoch moved on).
    assert (
        cache.new_context(sid, 1, [], [], follower=False, now_ms=1).error_code
        == ErrorCode.invalid_fetch_session_epoch
    )
    # Epoch 0 with the old id: the old session goes, a new one comes.
    again = cache.new_context(sid, INITIAL_EPOCH, topics(("a", 0, 0)), [], follower=False, now_ms=2)
    assert again.kind is FetchKind.FULL and again.session_id != sid
    assert list(cache.sessions) == [again.session_id]
    # Epoch -1: sessionless; with an id, that session is closed.
    closed = cache.new_context(
        again.session_id, FINAL_EPOCH, topics(("a", 0, 0)), [], follower=False, now_ms=3
    )
    assert closed.kind is FetchKind.SESSIONLESS and closed.session_id == 0
    assert len(cache) == 0


def test_a_followers_new_session_retires_its_older_ones() -> None:
    """One fetcher per source broker: a follower opening a session here (a restart, a new
    connection) leaves its older session behind, and a fetch still on the wire for it
    must not record that follower's old fetch offset (odradek sim seed 5005: a restarted
    follower, caught up on its new session, stayed out of the ISR of an idle partition
    because its previous incarnation's fetch at an older offset arrived late)."""
    cache = FetchSessionCache()

    def full(replica: int, follower: bool = True) -> int:
        ctx = cache.new_context(
            0,
            INITIAL_EPOCH,
            topics(("a", 0, 5)),
            [],
            follower=follower,
            now_ms=0,
            replica_id=replica if follower else -1,
        )
        assert ctx.kind is FetchKind.FULL
        return ctx.session_id

    old, other, consumer = full(3), full(2), full(-1, follower=False)
    new = full(3)
    assert set(cache.sessions) == {other, consumer, new}
    assert [s.id for s in cache.holders(("a", 0))] == [other, new]
    late = cache.new_context(old, 1, topics(("a", 0, 1)), [], follower=True, now_ms=1, replica_id=3)
    assert late.kind is FetchKind.ERROR and late.error_code == ErrorCode.fetch_session_id_not_found
    assert cache.new_context(new, 1, [], [], follower=True, now_ms=2, replica_id=3).kind is (
        FetchKind.INCREMENTAL
    )


def test_next_epoch_wraps_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1


def test_eviction_stale_first_followers_privileged_bigger_consumers_win() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1000)
    f = cache.new_context(0, 0, topics(("a", 0, 0)), [], follower=True, now_ms=0).session_id
    c = cache.new_context(
        0, 0, topics(("a", 0, 0), ("a", 1, 0)), [], follower=False, now_ms=0
    ).session_id
    # Full, nothing stale: a consumer with no more partitions gets no session.
    small = cache.new_context(0, 0, topics(("a", 0, 0)), [], follower=False, now_ms=10)
    assert small.kind is FetchKind.SESSIONLESS and set(cache.sessions) == {f, c}
    # A consumer with more partitions takes the smaller consumer's slot, never a follower's.
    big = cache.new_context(
        0, 0, topics(("a", 0, 0), ("a", 1, 0), ("a", 2, 0)), [], follower=False, now_ms=20
    ).session_id
    assert set(cache.sessions) == {f, big}
    # A follower takes a consumer's slot whatever its size.
    f2 = cache.new_context(0, 0, topics(("b", 0, 0)), [], follower=True, now_ms=30).session_id
    assert set(cache.sessions) == {f, f2}
    # Two followers: neither goes until one is idle for eviction_ms (LRU first).
    assert (
        cache.new_context(0, 0, topics(("c", 0, 0)), [], follower=True, now_ms=40).kind
        is FetchKind.SESSIONLESS
    )
    cache.new_context(f, 1, [], [], follower=True, now_ms=1500)  # f used: f2 is the LRU
    f3 = cache.new_context(0, 0, topics(("c", 0, 0)), [], follower=True, now_ms=1500)
    assert f3.kind is FetchKind.FULL and set(cache.sessions) == {f, f3.session_id}
    assert cache.evictions == 3
    assert_index_agrees(cache, [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("c", 0)])
    assert (
        FetchSessionCache(max_slots=0)
        .new_context(0, 0, topics(("a", 0, 0)), [], follower=True, now_ms=0)
        .kind
        is FetchKind.SESSIONLESS
    )


def assert_index_agrees(cache: FetchSessionCache, tps: list[tuple[str, int]]) -> None:
    """``holders`` names exactly the cached follower sessions holding each partition (an
    evicted or removed session is never among them)."""
    for tp in tps:
        want = {s.id for s in cache.sessions.values() if s.skips_idle and tp in s.partitions}
        assert {s.id for s in cache.holders(tp)} == want, tp


def rfp(topic: str, index: int, offset: int) -> ReplicaFetchPartition:
    return ReplicaFetchPartition(topic, index, offset, 0, 0, 0, 1 << 20)


def test_handler_full_then_only_changes_then_full_after_an_error() -> None:
    h = FetchSessionHandler("test")
    first = h.build([rfp("a", 0, 0), rfp("a", 1, 0)])
    assert first.full and first.epoch == 0 and len(first.partitions) == 2
    assert h.handle_response(first, 0, 77)
    second = h.build([rfp("a", 0, 3), rfp("a", 1, 0)])
    assert (second.session_id, second.epoch) == (77, 1)
    assert [(p.partition, p.fetch_offset) for p in second.partitions] == [(0, 3)]
    assert h.handle_response(second, 0, 77)
    third = h.build([rfp("a", 0, 3)])  # a-1 stopped (backing off, or moved away)
    assert third.epoch == 2 and third.partitions == [] and third.forgotten == [("a", [1])]
    assert not h.handle_response(third, int(ErrorCode.invalid_fetch_session_epoch), 0)
    fourth = h.build([rfp("a", 0, 3)])
    assert fourth.full and fourth.session_id == 77  # names the old id: the leader frees it
    assert h.handle_response(fourth, 0, 0)  # the leader has no slot: stay full
    assert h.build([rfp("a", 0, 3)]).full
    h.handle_error()
    assert h.build([rfp("a", 0, 3)]).full


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["advance", "drop", "add", "evict", "lose"]), st.integers(0, 5)),
        max_size=40,
    )
)
def test_handler_and_cache_agree_on_every_partitions_fetch_state(
    steps: list[tuple[str, int]],
) -> None:
    """Whatever happens, after each accepted fetch the leader's session holds exactly the
    partitions the follower fetches, each at the follower's current offset (nothing is
    lost or stale), and a session error costs one full fetch."""
    cache = FetchSessionCache(max_slots=4)
    h = FetchSessionHandler("model")
    offsets = {i: 0 for i in range(3)}
    for op, i in steps:
        if op == "advance" and i in offsets:
            offsets[i] += 1 + i
        elif op == "drop":
            offsets.pop(i, None)
        elif op == "add":
            offsets.setdefault(i, 0)
        elif op == "evict":  # the leader loses every session (eviction, restart)
            for sid in list(cache.sessions):
                cache.remove(sid)
        req: FetchRequestData = h.build([rfp("t", p, o) for p, o in sorted(offsets.items())])
        requested = topics(*[("t", p.partition, p.fetch_offset) for p in req.partitions])
        ctx = cache.new_context(
            req.session_id, req.epoch, requested, req.forgotten, follower=True, now_ms=0
        )
        assert_index_agrees(cache, [("t", i) for i in range(6)])
        if op == "lose":  # the response never arrives
            h.handle_error()
            continue
        ok = h.handle_response(req, ctx.error_code, ctx.session_id)
        if ctx.kind is FetchKind.ERROR:
            assert not ok and h.build([]).full
            h.handle_error()
            continue
        assert ok
        read = {e.result.index: e.fetch_offset for _, es in ctx.topics for e in es}
        assert read == offsets
        if ctx.kind is not FetchKind.SESSIONLESS:
            answer(ctx.topics)
            ctx.response_topics()


def test_cached_partitions_are_bounded_over_all_sessions() -> None:
    """Hostile input: incremental fetches naming ever more (even unknown) partitions cannot
    grow the cache past ``max_partitions``: the session is dropped (the client starts over
    with a full fetch), and a full fetch too big for what is left gets no session."""
    cache = FetchSessionCache(max_partitions=5)
    full = cache.new_context(
        0,
        INITIAL_EPOCH,
        topics(("a", 0, 0), ("a", 1, 0), ("a", 2, 0)),
        [],
        follower=False,
        now_ms=0,
    )
    assert full.kind is FetchKind.FULL and cache.cached_partitions() == 3
    inc = cache.new_context(
        full.session_id, 1, topics(("x", 0, 0), ("x", 1, 0)), [], follower=False, now_ms=1
    )
    assert inc.kind is FetchKind.INCREMENTAL and cache.cached_partitions() == 5
    inc = cache.new_context(
        full.session_id, 2, topics(("a", 0, 4)), [], follower=False, now_ms=2
    )  # a partition already cached: no growth, fine
    assert inc.kind is FetchKind.INCREMENTAL
    bad = cache.new_context(full.session_id, 3, topics(("y", 0, 0)), [], follower=False, now_ms=3)
    assert bad.kind is FetchKind.ERROR
    assert bad.error_code == int(ErrorCode.fetch_session_id_not_found)
    assert full.session_id not in cache.sessions and cache.cached_partitions() == 0
    big = cache.new_context(
        0, INITIAL_EPOCH, topics(*[("z", i, 0) for i in range(6)]), [], follower=False, now_ms=4
    )
    assert big.kind is FetchKind.SESSIONLESS and len(cache) == 0


def test_an_error_answer_is_followed_by_the_high_watermark_again() -> None:
    """Kafka's CachedPartition.maybeUpdateResponseData: an error resets the cached HW to
    -1, so the partition is answered again once the error is gone. A read that fails
    after it took the HW (OFFSET_OUT_OF_RANGE) cached that HW although the follower
    applies nothing from an error; its next fetch then did not hear the HW."""
    cache = FetchSessionCache()
    full = cache.new_context(0, INITIAL_EPOCH, topics(("a", 0, 5)), [], follower=False, now_ms=0)
    answer(full.topics, hw=10)
    assert names(full.response_topics()) == [("a", 0)]
    inc = cache.new_context(full.session_id, 1, topics(("a", 0, 50)), [], follower=False, now_ms=1)
    answer(inc.topics, hw=10, errors={("a", 0): int(ErrorCode.offset_out_of_range)})
    assert names(inc.response_topics()) == [("a", 0)]
    inc = cache.new_context(full.session_id, 2, topics(("a", 0, 10)), [], follower=False, now_ms=2)
    answer(inc.topics, hw=10)
    assert names(inc.response_topics()) == [("a", 0)]  # the HW, sent again


def test_an_answer_the_follower_dropped_is_sent_again_by_a_full_fetch() -> None:
    """Seeds 7591, 15334, 17297: a follower re-added a partition to its fetcher (a new
    leader epoch) while a fetch was in flight, and dropped that partition's answer -- the
    leader's new HW -- because the partition was truncating. The leader's session counted
    the HW as sent, so no later answer carried it while the HW stood still. The fetcher
    reports the drop; the next fetch naming the partition is full, and the leader's new
    session answers it whole."""
    cache = FetchSessionCache()
    h = FetchSessionHandler("test")

    def fetch(offsets: dict[int, int], hw: int) -> list[tuple[str, int]]:
        req = h.build([rfp("a", p, o) for p, o in sorted(offsets.items())])
        requested = topics(*[("a", p.partition, p.fetch_offset) for p in req.partitions])
        ctx = cache.new_context(
            req.session_id,
            req.epoch,
            requested,
            req.forgotten,
            follower=True,
            now_ms=0,
            replica_id=2,
        )
        assert h.handle_response(req, ctx.error_code, ctx.session_id)
        read(ctx, idle=set(), hw=hw)
        return names(ctx.response_topics())

    both = [("a", 0), ("a", 1)]
    assert fetch({0: 5, 1: 5}, hw=5) == both
    assert fetch({0: 6, 1: 6}, hw=6) == both  # the new HW...
    h.answer_dropped(("a", 0))  # ... which the follower dropped on a-0
    assert fetch({0: 6, 1: 6}, hw=6) == both  # a full fetch: answered whole
    assert fetch({0: 6, 1: 6}, hw=6) == []  # incremental again: nothing new
    # A dropped partition no longer fetched is only forgotten (a later add is answered).
    h.answer_dropped(("a", 1))
    req = h.build([rfp("a", 0, 6)])
    assert not req.full and req.forgotten == [("a", [1])]
