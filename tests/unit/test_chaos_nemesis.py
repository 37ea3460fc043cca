"""The nemesis schedule generator is pure and deterministic (issue 6 item 6)."""

from __future__ import annotations

import pytest

from odradek.chaos.nemesis import (
    KINDS,
    MAX_ACTIVE,
    PROCESS_KINDS,
    NemesisCase,
    Op,
    actions,
    describe,
    nemesis_checks,
    parse_case,
    parse_seeds,
    schedule,
)

NODES = ["b1", "b2", "b3", "zk"]


def test_same_seed_same_schedule() -> None:
    for seed in range(1, 21):
        assert schedule(seed, 30, NODES) == schedule(seed, 30, list(reversed(NODES)))


def test_different_seeds_differ() -> None:
    assert len({tuple(schedule(s, 30, NODES)) for s in range(1, 21)}) == 20


@pytest.mark.parametrize("seed", range(1, 51))
def test_constraints_hold(seed: int) -> None:
    ops = schedule(seed, 30, NODES)
    assert ops, "a 30 s window has faults"
    for o in ops:
        assert o.kind in KINDS
        assert 0 <= o.at < o.end <= 30.0 + 1e-9
        assert "zk" not in o.nodes or o.kind not in PROCESS_KINDS  # lone ZooKeeper: never
    # Sweep every instant where something starts: bounded faults, one node down at most.
    for t in sorted({o.at for o in ops}):
        active = [o for o in ops if o.at <= t < o.end]
        assert len(active) <= MAX_ACTIVE, (t, active)
        assert sum(1 for o in active if o.kind in PROCESS_KINDS) <= 1, (t, active)
        assert sum(1 for o in active if o.kind == "slow") <= 1


def test_every_kind_appears_over_twenty_seeds() -> None:
    kinds = {o.kind for s in range(1, 21) for o in schedule(s, 30, NODES)}
    assert kinds == set(KINDS)
    dirs = {
        o.direction
        for s in range(1, 21)
        for o in schedule(s, 30, NODES)
        if o.kind.startswith("partition")
    }
    assert dirs == {"both", "a->b", "b->a"}


def test_ensemble_member_may_be_killed_but_one_at_a_time() -> None:
    nodes = ["b1", "b2", "b3", "zk", "zk2", "zk3"]
    ops = [o for s in range(1, 40) for o in schedule(s, 30, nodes)]
    assert any(o.kind in PROCESS_KINDS and o.nodes[0].startswith("zk") for o in ops)


def test_partitions_name_two_distinct_nodes() -> None:
    for s in range(1, 21):
        for o in schedule(s, 30, NODES):
            if o.kind.startswith("partition"):
                assert len(o.nodes) == 2 and o.nodes[0] != o.nodes[1]
                assert o.nodes[0].startswith("b")


def test_actions_heal_before_start_at_same_time() -> None:
    ops = [Op(0.0, "kill", ("b1",), 2.0), Op(2.0, "pause", ("b2",), 1.0)]
    assert actions(ops) == [(0.0, "start", 0), (2.0, "end", 0), (2.0, "start", 1), (3.0, "end", 1)]


def test_describe() -> None:
    assert (
        describe(Op(1.0, "partition-bb", ("b1", "b2"), 2.5, "a->b"))
        == "t=  1.0s..  3.5s  partition b1 -> b2"
    )
    assert "SIGKILL b3, restart" in describe(Op(0.5, "kill", ("b3",), 1.0))


def test_parse_seeds_and_cases() -> None:
    assert parse_seeds("1-3,7") == [1, 2, 3, 7]
    assert parse_seeds("5") == [5]
    assert parse_case("nemesis:12") == 12 and parse_case("nemesis-3") == 3
    assert parse_case("safe-leader-kill") is None
    assert NemesisCase(4).name == "nemesis-4"


def test_too_few_brokers() -> None:
    with pytest.raises(ValueError):
        schedule(1, 30, ["b1", "zk"])


def test_checks_pass_and_fail() -> None:
    good = {
        "lost": 0,
        "duplicated": 0,
        "out_of_order": 0,
        "divergent": 0,
        "dirty_reads": 0,
        "never_sent_read": 0,
        "acked": 10,
        "final_isrs_full": True,
    }
    assert all(c.ok for c in nemesis_checks(good))
    bad = [
        c.what for c in nemesis_checks({**good, "lost": 2, "final_isrs_full": False}) if not c.ok
    ]
    assert bad == ["lost == 0", "every partition's ISR full after healing (R21)"]
