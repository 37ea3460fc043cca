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
from odradek.sim.world import World, _Fault

__all__ = ["PROFILES", "PowerLossWorld"]

PROFILES = ("default", "power-loss")


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
            kinds = [k for k in kinds if k not in ("crash", "zk", "zk-partition")]
        return kinds

    async def inject(self, rng: random.Random) -> _Fault:
        if self._writeback is None:  # the first fault: the kernel's write-back starts too
            self._writeback = asyncio.get_running_loop().create_task(self.writeback())
        if rng.random() < self.share:
            target = self._power_loss_target(rng)
            if target is not None:
                await self.power_loss(target)
                return _Fault(f"power-loss {target}", lambda: self.power_on(target))
        return await super().inject(rng)

    def _power_loss_target(self, rng: random.Random) -> int | None:
        if self.h.down:
            return None  # one broker down at a time
        znodes = self.controller.znodes.values()
        cut_off = self.controller.unreachable

        def holder(r: int, b: int) -> bool:
            return r != b and r not in cut_off  # up (nothing is down) and in its session

        ok = [b for b in self.cfg.brokers if all(any(holder(r, b) for r in z.isr) for z in znodes)]
        return rng.choice(ok) if ok else None

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
