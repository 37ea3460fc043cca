"""Delta debugging over a fault schedule (odradek.sim.schedule.ddmin), on predicates whose
minimal failing sets are known."""

from __future__ import annotations

from odradek.sim.schedule import ddmin


def test_a_pair_of_faults_that_fails_only_together_is_found() -> None:
    calls: list[frozenset[int]] = []

    def fails(kept: frozenset[int]) -> bool:
        calls.append(kept)
        return {3, 11} <= kept

    assert sorted(ddmin(list(range(16)), fails)) == [3, 11]
    assert len(calls) == len(set(calls))  # no candidate replayed twice


def test_the_result_is_one_minimal() -> None:
    # Fails with {1, 2} or with {5}: either is 1-minimal; removing any fault passes.
    def fails(kept: frozenset[int]) -> bool:
        return {1, 2} <= kept or 5 in kept

    got = ddmin(list(range(8)), fails)
    assert fails(frozenset(got))
    assert all(not fails(frozenset(got) - {x}) for x in got)


def test_a_failure_that_needs_no_fault_shrinks_to_nothing() -> None:
    assert ddmin([1, 2, 3], lambda kept: True) == []
    assert ddmin([4], lambda kept: 4 in kept) == [4]
