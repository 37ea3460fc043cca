"""A run's fault schedule as an explicit list, and delta debugging over it.

The nemesis (``odradek.sim.world``) draws its faults from the seed; every step it takes
is recorded as a ``Step``: the virtual seconds it slept, then one fault injected (as
resolved: concrete brokers, never "the leader") or one healed. ``World.nemesis`` can
replay such a list instead of drawing, with some faults left out: a left-out fault's
injection and heal do nothing, but their sleeps stay, so every other fault lands at the
same virtual time and every other random stream (network, producers, executor, ZooKeeper
watches) is drawn exactly as before. ``ddmin`` (Zeller's delta debugging) finds a
1-minimal set of faults that still breaks an invariant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["FaultSpec", "Step", "ddmin"]


@dataclass(frozen=True)
class FaultSpec:
    """One fault as the nemesis drew it (``param``: the delay or loss rate, if any)."""

    id: int
    kind: str  # cut | isolate | zk-partition | slow | lossy | crash | zk | reassign | power-loss
    partition: int
    target: int
    other: int
    param: float = 0.0


@dataclass(frozen=True)
class Step:
    """Sleep ``gap`` virtual seconds, then inject ``fault`` or heal the fault ``heals``."""

    gap: float
    fault: FaultSpec | None = None
    heals: int | None = None


def fault_ids(steps: Sequence[Step]) -> list[int]:
    return [s.fault.id for s in steps if s.fault is not None]


def ddmin(items: Sequence[int], fails: Callable[[frozenset[int]], bool]) -> list[int]:
    """The smallest subset of ``items`` (1-minimal: removing any one no longer fails)
    for which ``fails(kept)`` holds; ``fails(frozenset(items))`` must hold. Tests each
    candidate at most once."""
    seen: dict[frozenset[int], bool] = {}

    def test(kept: Sequence[int]) -> bool:
        key = frozenset(kept)
        if key not in seen:
            seen[key] = fails(key)
        return seen[key]

    if test(()):
        return []  # no fault needed at all
    cur = list(items)
    n = 2
    while len(cur) >= 2:
        k = len(cur)
        chunks = [cur[i * k // n : (i + 1) * k // n] for i in range(n)]
        reduced = False
        for c in chunks:  # one chunk alone
            if test(c):
                cur, n, reduced = c, 2, True
                break
        if not reduced and n > 2:
            for c in chunks:  # everything but one chunk
                rest = [x for x in cur if x not in c]
                if test(rest):
                    cur, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= k:
                break
            n = min(k, 2 * n)
    return cur
