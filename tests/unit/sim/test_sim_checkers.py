"""The simulator's invariants (odradek.sim.checkers), on hand-made observations."""

from __future__ import annotations

from odradek.sim.checkers import (
    Ack,
    LeadershipMonitor,
    lost_acks,
    prefix_divergence,
    unledgered_losses,
)


def test_an_acked_record_missing_or_replaced_is_lost() -> None:
    acks = [Ack(0, 0, b"a", 1.0), Ack(0, 1, b"b", 1.5), Ack(0, 2, b"c", 2.0)]
    committed = {0: {0: b"a", 1: b"x"}}
    got = lost_acks(acks, committed)
    assert [v.invariant for v in got] == ["acked-lost", "acked-lost"]
    assert "offset 1" in got[0].detail and "offset 2" in got[1].detail
    assert lost_acks(acks[:1], committed) == []


def test_an_acks_1_loss_must_be_in_the_ledger() -> None:
    """acks=1 may lose acknowledged records, but only ones a truncation quarantined: at
    the offset acknowledged, with the value acknowledged (not another record's)."""
    acks = [Ack(0, 0, b"a", 1.0), Ack(0, 1, b"b", 1.5), Ack(1, 2, b"c", 2.0)]
    committed = {0: {0: b"a", 1: b"x"}, 1: {}}
    assert unledgered_losses(acks, committed, {(0, 1, b"b"), (1, 2, b"c")}) == []
    got = unledgered_losses(acks, committed, {(0, 1, b"x"), (0, 2, b"c")})
    assert [v.invariant for v in got] == ["acked-lost-unledgered"] * 2
    assert "p0 offset 1" in got[0].detail and "p1 offset 2" in got[1].detail


def test_prefixes_may_differ_in_length_never_in_content() -> None:
    assert prefix_divergence(0, {1: b"abcd", 2: b"ab", 3: b""}) == []
    got = prefix_divergence(0, {1: b"abcd", 2: b"abXd"})
    assert len(got) == 1 and "brokers 1 and 2 differ at byte 2" in got[0].detail


def test_two_leaders_in_one_epoch_and_a_receding_hw() -> None:
    m = LeadershipMonitor()
    m.observe_leader(0, 3, 1, 10, 1.0)
    m.observe_leader(0, 3, 1, 12, 1.1)
    m.observe_leader(0, 4, 2, 5, 1.2)  # a new epoch may start lower
    assert m.violations == []
    m.observe_leader(0, 3, 1, 11, 1.3)
    m.observe_leader(0, 4, 3, 5, 1.4)
    assert [v.invariant for v in m.violations] == ["hw-regressed", "two-leaders"]
