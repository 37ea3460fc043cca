"""The pure health assessment (``odradek cluster health``)."""

from __future__ import annotations

from odradek.cluster.health import ClusterView, PartitionView, assess, format_report


def _view(**kw: object) -> ClusterView:
    base = dict(
        controller=1,
        live={1: "h:1", 2: "h:2", 3: "h:3"},
        known={1, 2, 3},
        partitions=[
            PartitionView("t", 0, 1, (1, 2, 3), (1, 2, 3)),
            PartitionView("t", 1, 2, (2, 3, 1), (2, 3, 1)),
        ],
        min_isr={"t": 2},
    )
    base.update(kw)
    return ClusterView(**base)  # type: ignore[arg-type]


def test_healthy() -> None:
    r = assess(_view())
    assert r.healthy and r.reasons == [] and r.all_nodes == [1, 2, 3]
    assert "Healthy:" in format_report(r)[2] and format_report(r)[2].endswith("true")


def test_a_dead_broker_and_its_partitions() -> None:
    r = assess(
        _view(
            live={1: "h:1", 2: "h:2"},
            partitions=[
                PartitionView("t", 0, 1, (1, 2, 3), (1, 2)),
                PartitionView("t", 1, 3, (3, 1, 2), (3,)),
                PartitionView("u", 0, -1, (3,), (3,)),
            ],
        )
    )
    assert not r.healthy
    assert r.nodes_down == [3]
    assert r.leaderless == ["t/1", "u/0"]
    assert r.under_replicated == ["t/0", "t/1"]
    assert r.under_min_isr == ["t/1"]  # u's min ISR defaults to 1: its ISR (3,) is enough
    assert r.reasons == [
        "nodes_down",
        "leaderless_partitions",
        "under_replicated_partitions",
        "under_min_isr_partitions",
    ]


def test_no_controller_and_known_down() -> None:
    r = assess(_view(controller=-1, known_down={2}))
    assert r.reasons[:2] == ["no_elected_controller", "nodes_down"] and r.nodes_down == [2]
    # a partition led by a broker known to be down is leaderless
    assert r.leaderless == ["t/1"]
