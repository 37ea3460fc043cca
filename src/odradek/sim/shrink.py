"""Shrinking a failing seed (``odradek sim run|replay --shrink``): the fewest of its
faults that still break the same invariant.

The failing run's fault schedule (``RunResult.schedule``) is replayed with faults left out
(``run_seed(..., plan=, skip=)``: everything else -- latencies, drops, the workload, the
executor, the watches -- drawn from the same streams, each left-out fault's sleep kept),
and delta debugging (``odradek.sim.schedule.ddmin``) narrows the set down until removing
any one of the remaining faults makes the invariant hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.sim.runner import RunResult, run_seed
from odradek.sim.schedule import ddmin, fault_ids
from odradek.sim.world import WorldConfig

__all__ = ["Shrunk", "fault_lines", "shrink"]


@dataclass
class Shrunk:
    invariant: str
    faults_before: int
    kept: list[int]  # fault ids of the minimal schedule
    result: RunResult  # the run with only those faults
    runs: int  # replays it took


def shrink(first: RunResult, cfg: WorldConfig | None = None) -> Shrunk:
    """``first``: a failing run of ``run_seed`` (its seed, bug and schedule)."""
    if first.ok:
        raise ValueError(f"seed {first.seed} did not fail: nothing to shrink")
    invariant = first.violations[0].invariant
    ids = fault_ids(first.schedule)
    runs = 0

    def run(kept: frozenset[int], timeline: bool = False) -> RunResult:
        nonlocal runs
        runs += 1
        skip = frozenset(ids) - kept
        return run_seed(
            first.seed,
            bug=first.bug,
            cfg=cfg,
            profile=first.profile,
            plan=first.schedule,
            skip=skip,
            timeline=timeline,
        )

    def fails(kept: frozenset[int]) -> bool:
        return invariant in {v.invariant for v in run(kept).violations}

    kept = ddmin(ids, fails)
    final = run(frozenset(kept), timeline=True)
    return Shrunk(invariant, len(ids), kept, final, runs)


def fault_lines(result: RunResult) -> list[str]:
    """The run's faults and heals, as its timeline prints them."""
    return [line for line in result.timeline if line[10:].startswith("nemesis: ")]
