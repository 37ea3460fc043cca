"""Pure parts of odradek.cluster.roll."""

from __future__ import annotations

from odradek.cluster.roll import procedure_text, roll_order, under_replicated


def test_roll_order_puts_the_controller_last() -> None:
    assert roll_order([3, 1, 2], 2) == [1, 3, 2]
    assert roll_order([1, 2, 3], None) == [1, 2, 3]
    assert roll_order([1, 2], 7) == [1, 2]


def test_under_replicated() -> None:
    states = {("a", 0): ([1, 2, 3], [3, 1, 2]), ("a", 1): ([1, 2, 3], [1, 2]), ("b", 0): ([2], [])}
    assert under_replicated(states) == [("a", 1), ("b", 0)]


def test_procedure_text_names_every_host_in_order() -> None:
    text = procedure_text([(1, "k1"), (2, "k2")], "k1:9092,k2:9092")
    assert text.index("ssh k1 sudo systemctl stop") < text.index("ssh k1 sudo systemctl start")
    assert text.index("ssh k1 sudo systemctl start") < text.index("ssh k2 sudo systemctl stop")
    assert "--under-replicated-partitions" in text and "--election-type preferred" in text
