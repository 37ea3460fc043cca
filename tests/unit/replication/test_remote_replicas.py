"""RemoteReplicas on its own: the leader's record of its followers' fetches (Kafka's
Replica per remote replica) and the ISR it proposes from it (REQ-R6)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.replication.remote_replicas import RemoteReplicas

ME = 1


def _always(_: int) -> bool:
    return True


def _leading(now_ms: int = 0) -> RemoteReplicas:
    r = RemoteReplicas()
    r.reset((1, 2, 3), (1, 2), ME, now_ms)
    return r


def test_becoming_leader_gives_followers_one_lag_period_and_marks_non_members() -> None:
    r = _leading(now_ms=500)
    assert r.get(ME) is None  # the leader keeps no record of itself
    two, three = r.get(2), r.get(3)
    assert two is not None and three is not None
    assert (two.last_caught_up_ms, two.last_fetch_ms, two.fetch_ms_out_of_isr) == (500, 500, -1)
    assert three.fetch_ms_out_of_isr == 500
    assert two.log_end_offset == -1  # not heard from: holds the HW
    assert r.min_log_end_offset((1, 2), ME, 10) is None


def test_a_fetch_at_the_log_end_is_caught_up_and_one_behind_it_counts_the_previous() -> None:
    r = _leading()
    fs, moved = r.update_fetch_state(2, 10, leader_leo=10, now_ms=100)
    assert not moved and fs.last_caught_up_ms == 100 and fs.log_end_offset == 10
    # Behind the LEO now, but at the LEO the leader had at the previous fetch: caught up
    # as of the previous fetch (Kafka's lastCaughtUpTimeMs rule).
    fs, _ = r.update_fetch_state(2, 10, leader_leo=15, now_ms=200)
    assert fs.last_caught_up_ms == 100 and fs.leader_leo_at_last_fetch == 15
    fs, _ = r.update_fetch_state(2, 15, leader_leo=20, now_ms=300)
    assert fs.last_caught_up_ms == 200
    # Behind what the leader had at the previous fetch: no progress credited.
    fs, _ = r.update_fetch_state(2, 16, leader_leo=25, now_ms=400)
    assert fs.last_caught_up_ms == 200
    assert r.recorded_at(2, 16) and not r.recorded_at(2, 15)


def test_log_start_offset_moves_only_forward_and_feeds_the_low_watermark() -> None:
    r = _leading()
    assert r.low_watermark((1, 2), ME, own=5) == -1  # follower's start still unknown
    _, moved = r.update_fetch_state(2, 10, leader_leo=10, now_ms=1, log_start_offset=3)
    assert moved
    _, moved = r.update_fetch_state(2, 10, leader_leo=10, now_ms=2, log_start_offset=2)
    assert not moved
    assert r.low_watermark((1, 2), ME, own=5) == 3
    assert r.low_watermark((1,), ME, own=5) == 5
    assert r.min_log_end_offset((1, 2), ME, own=12) == 10


def test_idle_credit_applies_only_at_the_last_reported_offset() -> None:
    r = _leading()
    r.update_fetch_state(2, 10, leader_leo=10, now_ms=100)
    assert r.note_idle(2, 9, at_ms=500) is None
    fs = r.note_idle(2, 10, at_ms=500)
    assert fs is not None and (fs.last_caught_up_ms, fs.last_fetch_ms) == (500, 500)
    assert r.note_idle(4, 0, at_ms=500) is None  # never fetched


def test_shrink_drops_members_lagging_past_the_limit_and_keeps_replica_order() -> None:
    r = RemoteReplicas()
    r.reset((3, 1, 2), (3, 1, 2), ME, now_ms=0)
    r.update_fetch_state(3, 10, leader_leo=10, now_ms=900)
    kw = {
        "local_broker_id": ME,
        "replicas": (3, 1, 2),
        "isr": (3, 1, 2),
        "high_watermark": 10,
        "epoch_start": 0,
        "eligible": _always,
    }
    assert r.propose_isr(now_ms=1000, lag_max_ms=None, **kw) is None  # never shrinks
    assert r.propose_isr(now_ms=1000, lag_max_ms=2000, **kw) is None
    assert r.propose_isr(now_ms=1000, lag_max_ms=500, **kw) == (3, 1)


def test_a_candidate_joins_only_while_eligible_at_the_hw_and_in_the_epoch() -> None:
    r = _leading()
    r.update_fetch_state(3, 10, leader_leo=10, now_ms=100)
    r.consider(3, True)
    assert r.has_candidates_outside((1, 2)) and not r.has_candidates_outside((1, 2, 3))
    kw = {
        "local_broker_id": ME,
        "replicas": (1, 2, 3),
        "isr": (1, 2),
        "now_ms": 100,
        "lag_max_ms": None,
    }
    assert r.propose_isr(high_watermark=10, epoch_start=0, eligible=_always, **kw) == (1, 2, 3)
    # The HW moved past it since it fetched: it is forgotten, not added.
    assert r.propose_isr(high_watermark=11, epoch_start=0, eligible=_always, **kw) is None
    assert r.candidates == frozenset()
    r.consider(3, True)
    assert r.propose_isr(high_watermark=10, epoch_start=11, eligible=_always, **kw) is None
    assert r.candidates == frozenset()
    r.consider(3, True)
    assert r.propose_isr(high_watermark=10, epoch_start=0, eligible=lambda b: b != 3, **kw) is None
    assert r.candidates == frozenset()


def test_candidates_are_forgotten_on_request_and_with_the_record_on_clear() -> None:
    r = _leading()
    r.consider(3, True)
    r.consider(2, True)
    r.consider(2, False)
    assert r.candidates == frozenset({3})
    r.forget((3,))
    assert r.candidates == frozenset()
    r.consider(3, True)
    r.clear()
    assert r.candidates == frozenset() and r.get(2) is None


def test_leaving_the_isr_stamps_the_last_fetch() -> None:
    r = _leading()
    r.update_fetch_state(2, 10, leader_leo=10, now_ms=700)
    r.mark_removed((1, 2), (1,))
    fs = r.get(2)
    assert fs is not None and fs.fetch_ms_out_of_isr == 700


def _spec_proposal(
    r: RemoteReplicas,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    now_ms: int,
    lag_max_ms: int | None,
    high_watermark: int,
) -> tuple[int, ...] | None:
    """REQ-R6 stated plainly: the leader, the members caught up within the lag, and the
    qualified candidates, in replica order; None when that is the ISR already."""
    keep = {ME}
    for b in replicas:
        if b == ME:
            continue
        fs = r.get(b)
        if b in isr:
            if lag_max_ms is None or (
                fs is not None and now_ms - fs.last_caught_up_ms <= lag_max_ms
            ):
                keep.add(b)
        elif b in r.candidates and fs is not None and fs.log_end_offset >= high_watermark:
            keep.add(b)
    order = {b: i for i, b in enumerate(replicas)}
    new = tuple(sorted(keep, key=lambda b: order.get(b, len(order))))
    return None if set(new) == set(isr) else new


@settings(max_examples=400, deadline=None)
@given(
    replicas=st.permutations([1, 2, 3, 4]).map(
        lambda p: tuple(p[:3]) if 1 in p[:3] else (1, *p[:2])
    ),
    isr_extra=st.sets(st.sampled_from([2, 3, 4])),
    leader_in_isr=st.booleans(),
    fetches=st.lists(
        st.tuples(st.sampled_from([2, 3, 4]), st.integers(0, 12), st.integers(0, 3000)),
        max_size=6,
    ),
    candidates=st.sets(st.sampled_from([2, 3, 4])),
    lag=st.one_of(st.none(), st.integers(0, 3000)),
)
def test_the_proposal_is_the_members_in_sync_plus_qualified_candidates(
    replicas: tuple[int, ...],
    isr_extra: set[int],
    leader_in_isr: bool,
    fetches: list[tuple[int, int, int]],
    candidates: set[int],
    lag: int | None,
) -> None:
    """The periodic check's fast path (no candidate outside the ISR, every member in sync:
    no proposal) answers exactly what the full computation does, in every state."""
    isr = tuple(sorted(isr_extra | ({ME} if leader_in_isr else set())))
    r = RemoteReplicas()
    r.reset(replicas, isr, ME, now_ms=0)
    for b, offset, at in sorted(fetches, key=lambda f: f[2]):
        r.update_fetch_state(b, offset, leader_leo=10, now_ms=at)
    for b in candidates:
        r.consider(b, True)
    expected = _spec_proposal(r, replicas, isr, 3000, lag, 10)
    if lag is not None and r.all_caught_up(replicas, isr, ME, 3000, lag):
        # The periodic check skips such a partition (and its idle credits) outright.
        assert expected is None
    got = r.propose_isr(
        local_broker_id=ME,
        replicas=replicas,
        isr=isr,
        high_watermark=10,
        epoch_start=0,
        now_ms=3000,
        lag_max_ms=lag,
        eligible=_always,
    )
    assert (None if got is None else set(got)) == (None if expected is None else set(expected))
    if got is not None:
        assert got == expected
