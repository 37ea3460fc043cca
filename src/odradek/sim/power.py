"""The ``power-loss`` profile of ``odradek sim``: a nemesis that also cuts a broker's power.

A power loss is a crash (``World.crash``: the process is gone, its session expires, the
controller moves on) followed by ``SimDisk.power_loss`` on the broker's own directory:
every file back to what its fsyncs made durable plus a torn prefix of what was not,
unsynced creates and renames undone (the model: ``odradek.sim.disk``). The broker later
restarts from that directory, as a machine would after the power came back.

Kafka's safety argument with ``log.flush.*`` left at their defaults (no fsync; REQ-R18)
is replication: a broker that loses its unsynced tail is out of the ISR by the time it is
back, and the other ISR members hold every acknowledged record. It holds only while
those members *stay* in the ISR: the powered-off broker keeps its ZooKeeper session for
the session timeout, and if another member's session expires meanwhile the controller
elects the dead broker, which comes back without the records it alone still "held"
(KIP-966's motivating case; classic Kafka loses them too -- seed 417 of this profile did
exactly that before the rule below). So the nemesis cuts one broker's power at a time,
only while no other broker is down, and only when every partition's ISR has another
member that is up and reaches ZooKeeper; and until the broker restarts it injects no
fault that ends another broker's session (crash, zk, zk-partition). A cut of the last ISR
member loses what it alone acknowledged in Kafka too (only ``odradek.ack.fsync`` saves
that; not scheduled). Under those rules the checkers expect no acknowledged record lost.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from odradek.sim.disk import SimDisk
from odradek.sim.schedule import FaultSpec
from odradek.sim.world import World, _Fault

__all__ = ["PROFILES", "PowerLossWorld"]

PROFILES = ("default", "power-loss", "pause")  # pause: odradek.sim.pause


@dataclass
class PowerLossWorld(World):
    disk: SimDisk = field(default_factory=SimDisk)
    share: float = 0.3  # of injected faults that try a power loss first
    _disk_rng: random.Random | None = None
    _writeback: asyncio.Task[None] | None = None
    powered_off: set[int] = field(default_factory=set)  # down since a power loss

    def fault_kinds(self) -> list[str]:
        kinds = super().fault_kinds()
        if self.powered_off & self.h.down:
            # No other session may end while a powered-off broker could be elected.
            kinds = [k for k in kinds if k not in ("crash", "zk", "zk-partition", "controller")]
        return kinds

    def draw(self, rng: random.Random, fault_id: int) -> FaultSpec:
        if rng.random() < self.share:
            ok = [b for b in self.cfg.brokers if self._may_lose_power(b)]
            if ok:
                target = rng.choice(ok)
                return FaultSpec(fault_id, "power-loss", 0, target, target)
        return super().draw(rng, fault_id)

    async def inject(self, f: FaultSpec) -> _Fault:
        if self._writeback is None:  # the first fault: the kernel's write-back starts too
            self._writeback = asyncio.get_running_loop().create_task(self.writeback())
        if f.kind != "power-loss":
            return await super().inject(f)
        target = f.target
        if not self._may_lose_power(target):
            # A shrinking replay left out a fault this one relied on: Kafka's precondition
            # (above) does not hold now, so the power stays on.
            self.trace(f"nemesis: no power loss on broker {target} (precondition)")
            return _Fault(f"no power loss {target}", lambda: None)
        await self.power_loss(target)
        return _Fault(f"power-loss {target}", lambda: self.power_on(target))

    def _may_lose_power(self, b: int) -> bool:
        """Only while no broker is down, and every ISR has another member that is up and
        in its ZooKeeper session (the module docstring says why)."""
        if self.h.down:
            return False
        cut_off = self.controller.unreachable
        return all(
            any(r != b and r not in cut_off for r in z.isr) for z in self.controller.znodes.values()
        )

    async def writeback(self) -> None:
        """The kernel flushing a live broker's dirty pages on its own now and then
        (odradek.sim.disk: without it nothing but checkpoints would ever be durable)."""
        rng = random.Random(f"writeback-{self.seed}")
        while True:
            await asyncio.sleep(rng.uniform(0.5, 4.0))
            b = rng.choice(self.cfg.brokers)
            if b not in self.h.down:
                self.disk.writeback(self.h.root / f"broker-{b}")

    def power_on(self, b: int) -> None:
        self.powered_off.discard(b)
        self.restart(b)

    async def power_loss(self, b: int) -> None:
        self.trace(f"nemesis: power loss on broker {b}")
        self.powered_off.add(b)
        await self.crash(b)
        if self._disk_rng is None:
            self._disk_rng = random.Random(f"disk-{self.seed}")
        rep = self.disk.power_loss(self.h.root / f"broker-{b}", self._disk_rng)
        self.trace(f"disk of broker {b} after the power loss: {rep}")
