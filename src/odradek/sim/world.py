"""The simulated world around the real replication code: a seeded network, ZooKeeper and
the controller, broker crashes and restarts, a nemesis, an acks=all workload and the
monitors feeding the checkers (odradek.sim.checkers). One ``random.Random`` per concern,
each derived from the seed, so adding a draw in one does not reshuffle the others.

Model (Kafka's, in ZooKeeper mode):

* A broker is *registered* while its ZooKeeper session lives. A crash, or a cut from
  ZooKeeper, ends it after ``session_timeout_s``; then the controller moves leadership
  of the partitions it led to the first live ISR member and drops it from the ISRs it
  was in (a new leader epoch each time, as ``newLeaderAndIsr`` does); an ISR of one
  keeps its last member and the partition waits, leaderless, for it (no unclean
  election). A broker that registers again gets the current state, and leads any
  leaderless partition whose ISR it is in.
* A broker cut from ZooKeeper also stops hearing the controller, and its ISR writes fail
  (the leader fences itself, REQ-P4).
* Every fetch and response crosses ``SimNetwork``: a seeded latency, plus the faults in
  force (a cut link, extra delay one way, a loss rate).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.errors import error_name
from odradek.metadata.image import MetadataImage
from odradek.replication.leader_endpoint import EndpointError
from odradek.replication.partition_state import (
    IsrConflict,
    IsrStoreUnavailable,
    IsrWrite,
    Leader,
)
from odradek.replication.replica_manager import ReplicaManager
from odradek.runtime import clock
from odradek.sim.checkers import Ack, LeadershipMonitor, Violation
from odradek.sim.harness import (
    TOPIC,
    MemoryController,
    MemoryNetwork,
    ReplicationHarness,
    _BrokerIsrStore,
)
from odradek.storage.records import encode_batch

__all__ = ["SimNetwork", "SimController", "SimHarness", "World", "WorldConfig"]

Trace = Callable[[str], None]


@dataclass(frozen=True)
class WorldConfig:
    brokers: tuple[int, ...] = (1, 2, 3)
    partitions: int = 1
    min_insync_replicas: int = 2
    lag_ms: int = 1500
    fetch_wait_ms: int = 200
    backoff_ms: int = 50
    session_timeout_s: float = 1.5
    duration_s: float = 20.0  # faults are injected this long, then all heal
    liveness_bound_s: float = 30.0
    hop_latency_s: tuple[float, float] = (0.0002, 0.003)
    fault_gap_s: tuple[float, float] = (0.3, 2.5)
    producers: int = 2
    produce_gap_s: tuple[float, float] = (0.02, 0.15)
    produce_timeout_s: float = 2.0


class SimNetwork(MemoryNetwork):
    """Seeded latency, cuts (counted: two faults may cut one link), one-way delays,
    loss rates, and dead brokers (a crashed process answers nothing)."""

    def __init__(self, rng: random.Random, latency_s: tuple[float, float]) -> None:
        super().__init__()
        self.rng = rng
        self.latency_s = latency_s
        self.cuts: Counter[frozenset[int]] = Counter()
        self.delays: dict[tuple[int, int], float] = {}
        self.loss: dict[frozenset[int], float] = {}
        self.dead: set[int] = set()

    def cut(self, a: int, b: int) -> None:
        self.cuts[frozenset((a, b))] += 1

    def uncut(self, a: int, b: int) -> None:
        self.cuts[frozenset((a, b))] -= 1

    def heal(self) -> None:
        self.cuts.clear()
        self.delays.clear()
        self.loss.clear()

    def delay(self, src: int, dst: int, seconds: float) -> None:
        self.delays[(src, dst)] = seconds

    def _broken(self, src: int, dst: int) -> bool:
        link = frozenset((src, dst))
        if src in self.dead or dst in self.dead or self.cuts[link] > 0:
            return True
        p = self.loss.get(link, 0.0)
        return p > 0 and self.rng.random() < p

    async def hop(self, src: int, dst: int) -> None:
        lo, hi = self.latency_s
        await asyncio.sleep(self.delays.get((src, dst), 0.0) + self.rng.uniform(lo, hi))
        if self._broken(src, dst):
            raise EndpointError(f"link {src}->{dst} is down")


class _SimIsrStore(_BrokerIsrStore):
    dead = False  # set when the broker process holding this store crashes

    def write_isr(self, write: IsrWrite) -> int:
        c = self._c
        what = (
            f"ISR write by {write.leader}: p{write.partition} epoch {write.leader_epoch} "
            f"isr {list(write.isr)} at version {write.zk_version}"
        )
        trace = c.trace if isinstance(c, SimController) else None
        try:
            if self.dead:
                raise IsrStoreUnavailable("the process is gone")
            version = super().write_isr(write)
        except (IsrStoreUnavailable, IsrConflict) as e:
            if trace is not None:
                trace(f"{what}: {type(e).__name__}")
            raise
        if trace is not None:
            trace(f"{what}: ok, version {version}")
        return version


class SimController(MemoryController):
    def __init__(self, brokers: tuple[int, ...], partitions: int, seed: int, trace: Trace) -> None:
        super().__init__(brokers, partitions)
        self.topic_id = uuid.UUID(int=random.Random(f"topic-{seed}").getrandbits(128))
        self.registered: set[int] = set(brokers)
        self.trace = trace

    def store_for(self, broker: int, loop: asyncio.AbstractEventLoop) -> _BrokerIsrStore:
        return _SimIsrStore(self, broker, loop)

    def elect(self, partition: int, leader: int, isr: Any = None) -> None:
        super().elect(partition, leader, isr)
        z = self.znodes[partition]
        self.trace(
            f"controller: p{partition} leader {leader} epoch {z.leader_epoch} isr {list(z.isr)}"
        )

    def _leaderless(self, partition: int, isr: tuple[int, ...]) -> None:
        z = self.znodes[partition]
        z.leader, z.isr = -1, isr
        z.leader_epoch += 1
        z.version += 1
        self.trace(f"controller: p{partition} offline epoch {z.leader_epoch} isr {list(isr)}")
        self.publish()

    def broker_failed(self, b: int) -> None:
        """The broker's session expired (onBrokerFailure)."""
        if b not in self.registered:
            return
        self.registered.discard(b)
        self.trace(f"controller: broker {b} session expired")
        for p, z in self.znodes.items():
            if z.leader != b and b not in z.isr:
                continue
            rest = tuple(r for r in z.isr if r != b)
            if z.leader == b or z.leader == -1:
                live = [r for r in self.brokers if r in rest and r in self.registered]
                if live:
                    self.elect(p, live[0], rest)
                else:
                    self._leaderless(p, rest or z.isr)
            elif rest:
                self.elect(p, z.leader, rest)  # Kafka bumps the epoch here too

    def broker_registered(self, b: int) -> None:
        self.registered.add(b)
        self.trace(f"controller: broker {b} registered")
        for p, z in self.znodes.items():
            if z.leader == -1 and b in z.isr:
                self.elect(p, b, z.isr)
        self.publish()


@dataclass
class SimHarness(ReplicationHarness):
    seed: int = 0
    trace: Trace = print
    incarnation: dict[int, int] = field(default_factory=dict)

    def make_controller(self) -> MemoryController:
        return SimController(self.brokers, self.partitions, self.seed, self.trace)

    def _applier(self, broker: int) -> Callable[[MetadataImage], None]:
        inner = super()._applier(broker)

        def apply(image: MetadataImage) -> None:
            if broker not in self.controller.unreachable:
                inner(image)

        return apply

    def start_broker(self, b: int) -> ReplicaManager:
        rm = super().start_broker(b)
        n = self.incarnation[b] = self.incarnation.get(b, 0) + 1
        # Fetch session ids come from the seed, not the OS (determinism).
        rm.fetch_sessions._rng = random.Random(f"sessions-{self.seed}-{b}-{n}")
        return rm

    async def crash_broker(self, b: int) -> None:
        store = self.replicas[b].isr_store
        if isinstance(store, _SimIsrStore):
            store.dead = True
        await super().crash_broker(b)


@dataclass
class _Fault:
    name: str
    heal: Callable[[], Any]


@dataclass
class World:
    """One run: the cluster, the nemesis, the workload and the monitors."""

    h: SimHarness
    cfg: WorldConfig
    seed: int
    trace: Trace
    net: SimNetwork
    acks: list[Ack] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    monitor: LeadershipMonitor = field(default_factory=LeadershipMonitor)
    stopping: bool = False
    _seen: dict[tuple[int, int], tuple[str, int, int]] = field(default_factory=dict)

    @property
    def controller(self) -> SimController:
        c = self.h.controller
        assert isinstance(c, SimController)
        return c

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    # ---------------------------------------------------------------- faults
    async def crash(self, b: int) -> None:
        self.trace(f"nemesis: crash broker {b}")
        self.net.dead.add(b)
        await self.h.crash_broker(b)
        self._expire_later(b, lambda: b in self.h.down)

    def restart(self, b: int) -> None:
        if b not in self.h.down:
            return
        self.trace(f"nemesis: restart broker {b}")
        self.controller.broker_failed(b)  # a bounce is a failure, then a registration
        self.h.start_broker(b)
        self.net.dead.discard(b)
        self.controller.broker_registered(b)

    def zk_isolate(self, b: int) -> None:
        self.trace(f"nemesis: cut broker {b} from ZooKeeper and the controller")
        self.controller.unreachable.add(b)
        self._expire_later(b, lambda: b in self.controller.unreachable)

    def zk_heal(self, b: int) -> None:
        if b not in self.controller.unreachable:
            return
        self.trace(f"nemesis: broker {b} reaches ZooKeeper again")
        self.controller.unreachable.discard(b)
        if b in self.h.down:
            return
        if b in self.controller.registered:
            self.controller.publish()
        else:
            self.controller.broker_registered(b)

    def _expire_later(self, b: int, still: Callable[[], bool]) -> None:
        def expire() -> None:
            if still():
                self.controller.broker_failed(b)

        asyncio.get_running_loop().call_later(self.cfg.session_timeout_s, expire)

    def fault_kinds(self) -> list[str]:
        """What ``inject`` may pick now (a profile may narrow it: odradek.sim.power)."""
        return ["cut", "isolate", "slow", "lossy", "crash", "zk", "zk-partition"]

    async def inject(self, rng: random.Random) -> _Fault:
        brokers = list(self.cfg.brokers)
        leader = self.controller.znodes[rng.randrange(self.cfg.partitions)].leader
        live = [b for b in brokers if b not in self.h.down]
        target = leader if leader in live and rng.random() < 0.5 else rng.choice(brokers)
        kind = rng.choice(self.fault_kinds())
        other = rng.choice([b for b in brokers if b != target])
        if kind == "cut":
            self.trace(f"nemesis: cut {target}-{other}")
            self.net.cut(target, other)
            return _Fault(f"cut {target}-{other}", lambda: self.net.uncut(target, other))
        if kind == "isolate" or kind == "zk-partition":
            if kind == "zk-partition":
                self.zk_isolate(target)
            self.trace(f"nemesis: isolate {target} from its peers")
            for o in brokers:
                if o != target:
                    self.net.cut(target, o)

            def heal_isolation() -> None:
                for o in brokers:
                    if o != target:
                        self.net.uncut(target, o)
                if kind == "zk-partition":
                    self.zk_heal(target)

            return _Fault(f"{kind} {target}", heal_isolation)
        if kind == "slow":
            d = round(rng.uniform(0.05, 1.0), 3)
            self.trace(f"nemesis: delay {target}->{other} by {d} s")
            self.net.delay(target, other, d)
            return _Fault(
                f"slow {target}->{other}", lambda: self.net.delays.pop((target, other), None)
            )
        if kind == "lossy":
            p = round(rng.uniform(0.2, 0.9), 2)
            link = frozenset((target, other))
            self.trace(f"nemesis: drop {p:.0%} on {target}-{other}")
            self.net.loss[link] = p
            return _Fault(f"lossy {target}-{other}", lambda: self.net.loss.pop(link, None))
        if kind == "crash" and target in live:
            await self.crash(target)
            return _Fault(f"crash {target}", lambda: self.restart(target))
        # "zk", or a crash of a broker already down: cut it from ZooKeeper instead.
        self.zk_isolate(target)
        return _Fault(f"zk {target}", lambda: self.zk_heal(target))

    async def nemesis(self) -> None:
        rng = random.Random(f"nemesis-{self.seed}")
        active: list[_Fault] = []
        lo, hi = self.cfg.fault_gap_s
        end = self.now() + self.cfg.duration_s
        while self.now() < end:
            await asyncio.sleep(rng.uniform(lo, hi))
            if active and (len(active) >= 2 or rng.random() < 0.5):
                f = active.pop(0)
                self.trace(f"nemesis: heal {f.name}")
                f.heal()
            else:
                active.append(await self.inject(rng))
        self.trace("nemesis: heal everything")
        for f in active:
            f.heal()
        self.net.heal()
        for b in sorted(self.controller.unreachable):
            self.zk_heal(b)
        for b in sorted(self.h.down):
            self.restart(b)

    # ---------------------------------------------------------------- workload
    def leo(self, b: int, p: int) -> int:
        part = self.h.replicas[b].partitions.get((TOPIC, p))
        return part.log_end_offset if part is not None else -1

    async def producer(self, k: int) -> None:
        rng = random.Random(f"producer-{self.seed}-{k}")
        lo, hi = self.cfg.produce_gap_s
        n = 0
        while not self.stopping:
            await asyncio.sleep(rng.uniform(lo, hi))
            p = rng.randrange(self.cfg.partitions)
            b = self.controller.znodes[p].leader  # the client's metadata
            if b < 0 or b in self.h.down:
                continue
            value = f"w{k}-{n}".encode()
            n += 1
            inc = self.h.incarnation[b]
            batch = encode_batch([(None, value)], timestamp_ms=clock.time_ns() // 1_000_000)
            res = await self.h.produce(b, batch, timeout_s=self.cfg.produce_timeout_s, partition=p)
            if self.h.incarnation[b] != inc or b in self.h.down:
                self.trace(f"produce {value.decode()} to {b}: connection lost")
                continue
            if res.error_code != 0:
                self.trace(f"produce {value.decode()} to {b}: {error_name(res.error_code)}")
                continue
            off = res.base_offset
            holders = [r for r in self.cfg.brokers if self.leo(r, p) > off]
            self.trace(f"ack {value.decode()} p{p} offset {off} from {b} on {holders}")
            self.acks.append(Ack(p, off, value, self.now()))
            if len(holders) < self.cfg.min_insync_replicas:
                self.violations.append(
                    Violation(
                        "ack-under-replicated",
                        f"p{p} offset {off} acked by {b} at {self.now():.3f} with only "
                        f"{holders} holding it (min.insync.replicas "
                        f"{self.cfg.min_insync_replicas})",
                    )
                )

    # ---------------------------------------------------------------- monitor
    async def watch(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.01)

    def sample(self) -> None:
        t = self.now()
        for b in self.cfg.brokers:
            if b in self.h.down:
                continue
            for (_topic, p), part in self.h.replicas[b].partitions.items():
                st = part.state
                seen = (type(st).__name__, part.leader_epoch, part.high_watermark)
                if self._seen.get((b, p)) != seen:
                    self._seen[(b, p)] = seen
                    self.trace(
                        f"broker {b} p{p}: {seen[0]} epoch {seen[1]} hw {seen[2]} "
                        f"leo {part.log_end_offset}"
                    )
                if type(st) is Leader:
                    self.monitor.observe_leader(p, part.leader_epoch, b, part.high_watermark, t)
