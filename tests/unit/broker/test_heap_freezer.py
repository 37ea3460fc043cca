"""odradek.broker.heap: when a broker's settled heap is frozen out of full garbage
collections, and unfrozen again (the policy is pure; the freezer applies it to gc)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from odradek.broker.heap import MAX_FROZEN_S, FreezePolicy, HeapAction, HeapFreezer

NONE, FREEZE, UNFREEZE = HeapAction.NONE, HeapAction.FREEZE, HeapAction.UNFREEZE


def test_frozen_once_the_partitions_settle_and_again_after_more_are_added() -> None:
    p = FreezePolicy(settle_s=30)
    assert p.decide(0, 100, 0, 0) is NONE
    assert p.decide(29, 100, 0, 0) is NONE  # settling
    assert p.decide(30, 100, 0, 0) is FREEZE
    assert p.decide(35, 100, 0, 0) is NONE  # nothing new to freeze
    assert p.decide(40, 150, 0, 0) is NONE  # more partitions: settle again
    assert p.decide(69, 150, 0, 0) is NONE
    assert p.decide(70, 150, 0, 0) is FREEZE  # the new ones join the frozen heap
    assert p.decide(75, 150, 0, 0) is NONE


def test_removing_a_tenth_of_the_partitions_unfreezes_and_refreezing_waits_for_a_collection() -> (
    None
):
    """Removed partitions' objects must reach a full collection: once a tenth of the
    partitions frozen are removed the heap is unfrozen, and not frozen again until a
    full collection has run after the unfreeze (else their cycles would be frozen
    again, never reclaimed). Fewer removals wait for MAX_FROZEN_S: an unfreeze costs a
    full-heap collection."""
    p = FreezePolicy(settle_s=30)
    p.decide(0, 100, 0, 5)
    assert p.decide(30, 100, 0, 5) is FREEZE
    assert p.decide(40, 97, 3, 5) is NONE  # a topic of 3 deleted
    assert p.decide(70, 97, 3, 5) is FREEZE  # settled again: nothing new, cheap
    assert p.decide(80, 90, 10, 5) is UNFREEZE  # 10 of the 100 frozen now
    assert p.decide(110, 90, 10, 5) is NONE  # settled, but no full collection yet
    assert p.decide(200, 90, 10, 5) is NONE
    assert p.decide(205, 90, 10, 6) is FREEZE
    # Counted from this freeze: 9 more removals of 90 do it.
    assert p.decide(210, 84, 16, 6) is NONE
    assert p.decide(215, 81, 19, 6) is UNFREEZE


def test_nothing_stays_frozen_longer_than_the_maximum() -> None:
    """Other frozen objects can become garbage too (a connection closed, a request that
    was in flight at the freeze): every MAX_FROZEN_S the heap is unfrozen for a full
    collection, then frozen again once settled."""
    p = FreezePolicy(settle_s=30)
    p.decide(0, 100, 0, 0)
    assert p.decide(30, 100, 0, 0) is FREEZE
    assert p.decide(100, 120, 0, 0) is NONE
    assert p.decide(130, 120, 0, 0) is FREEZE  # a second freeze does not restart the clock
    assert p.decide(30 + MAX_FROZEN_S - 1, 120, 0, 3) is NONE
    assert p.decide(30 + MAX_FROZEN_S, 120, 0, 3) is UNFREEZE
    t = 30 + MAX_FROZEN_S
    assert p.decide(t + 30, 120, 0, 3) is NONE  # no full collection since
    assert p.decide(t + 35, 120, 0, 4) is FREEZE


@pytest.mark.parametrize("removed", [1, 50])
def test_a_removal_while_nothing_is_frozen_changes_nothing_but_the_settle_clock(
    removed: int,
) -> None:
    p = FreezePolicy(settle_s=30)
    p.decide(0, 100, 0, 0)
    left = 100 - removed
    assert p.decide(20, left, removed, 0) is NONE
    assert p.decide(49, left, removed, 0) is NONE
    assert p.decide(50, left, removed, 0) is FREEZE  # never frozen: no collection to wait for


class _Gc:
    """The parts of the gc module the freezer uses, recording calls."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.full = 0
        self.frozen = 0

    def get_stats(self) -> list[dict[str, int]]:
        return [{"collections": 0}, {"collections": 0}, {"collections": self.full}]

    def collect(self, generation: int) -> int:
        self.calls.append(("collect", generation))
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.frozen += 1000

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")
        self.frozen = 0


def test_the_freezer_collects_the_young_generations_before_freezing() -> None:
    fake = _Gc()
    f = HeapFreezer(settle_s=10, gc_module=fake)
    assert f.tick(50, 0, now=0) is NONE
    assert f.tick(50, 0, now=10) is FREEZE
    assert fake.calls == [("collect", 1), "freeze"]
    assert (f.frozen, f.freezes) == (True, 1)
    assert f.tick(40, 10, now=11) is UNFREEZE
    assert fake.calls[-1] == "unfreeze"
    assert (f.frozen, f.unfreezes) == (False, 1)
    fake.full = 1
    assert f.tick(40, 10, now=21) is FREEZE
    f.stop()
    assert fake.calls[-1] == "unfreeze" and not f.frozen


def test_the_real_gc_skips_what_was_frozen() -> None:
    """What gc.freeze does for the broker: objects frozen are not scanned by a full
    collection (it reports fewer objects collected from the oldest generation)."""
    f = HeapFreezer(settle_s=1)
    held = [[i] for i in range(20_000)]  # tracked objects, alive
    try:
        f.tick(1, 0, now=0)
        assert f.tick(1, 0, now=1) is FREEZE
        assert gc.get_freeze_count() >= len(held)  # (a frozen object may still be freed)
        oldest = gc.get_objects(generation=2)
        assert len(oldest) < len(held)  # the held lists are out of the oldest generation
    finally:
        f.stop()
    assert gc.get_freeze_count() == 0
    assert len(gc.get_objects(generation=2)) >= len(held)


def test_partitions_added_to_a_broker_that_hosted_none_do_not_unfreeze() -> None:
    p = FreezePolicy(settle_s=30)
    p.decide(0, 0, 0, 0)
    assert p.decide(30, 0, 0, 0) is FREEZE
    assert p.decide(40, 4, 0, 0) is NONE
    assert p.decide(70, 4, 0, 0) is FREEZE
    assert p.decide(80, 0, 4, 0) is UNFREEZE
