"""The in-process replication harness, now part of the simulator (odradek.sim.harness):
re-exported here for the replication unit tests that drive it on a real asyncio loop."""

from odradek.sim.harness import (
    TOPIC,
    MemoryController,
    MemoryLeaderEndpoint,
    MemoryNetwork,
    ReplicationHarness,
)

__all__ = [
    "TOPIC",
    "MemoryController",
    "MemoryLeaderEndpoint",
    "MemoryNetwork",
    "ReplicationHarness",
]
