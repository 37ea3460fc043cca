"""A one-broker stand-in for the simulated world: enough of ``odradek.sim.world.World``
(its network, the brokers' incarnations and which are down, the trace) for tests of the
simulator's client connections (``odradek.sim.inflight.Connection``) on their own."""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.sim.world import SimNetwork

BROKER = 1
CLIENT = 0


@dataclass
class StubBrokers:
    incarnation: dict[int, int] = field(default_factory=lambda: {BROKER: 0})
    down: set[int] = field(default_factory=set)


@dataclass
class StubWorld:
    net: SimNetwork
    h: StubBrokers = field(default_factory=StubBrokers)
    lines: list[str] = field(default_factory=list)  # what was traced

    def trace(self, line: str) -> None:
        self.lines.append(line)
