"""The simulated world around the real replication code: a seeded network, ZooKeeper and
the controller, broker crashes and restarts, a nemesis, an acks=all workload and the
monitors feeding the checkers (odradek.sim.checkers). One ``random.Random`` per concern,
each derived from the seed, so adding a draw in one does not reshuffle the others.

Model (Kafka's, in ZooKeeper mode):

* A broker is *registered* while its ZooKeeper session lives. A crash, or a cut from
  ZooKeeper, ends it after ``session_timeout_s``; then the controller decides: the
  Odradek's real one over the ZooKeeper model (``WorldConfig.real_controller``, the
  default; ``odradek.sim.zk_cluster``: every broker a controller candidate, and a
  ``controller`` fault that crashes or cuts the active one) or the simulator's model of it
  (``odradek.sim.sim_controller.SimController``, ``--model-controller``).
* A broker cut from ZooKeeper also stops hearing the controller, and its ISR writes fail
  (the leader fences itself, REQ-P4).
* Every fetch and response crosses ``SimNetwork``: a seeded latency, plus the faults in
  force (a cut link, extra delay one way, a loss rate).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from odradek.errors import error_name
from odradek.metadata.image import MetadataImage
from odradek.replication.leader_endpoint import EndpointError, FetchRequestData, FetchResult
from odradek.replication.partition_state import Leader
from odradek.replication.replica_manager import ReplicaManager
from odradek.runtime import clock
from odradek.sim.checkers import Ack, LeadershipMonitor, Violation
from odradek.sim.harness import (
    TOPIC,
    MemoryController,
    MemoryLeaderEndpoint,
    MemoryNetwork,
    ReplicationHarness,
)
from odradek.sim.loop import sleep as sim_sleep
from odradek.sim.schedule import FaultSpec, Step
from odradek.sim.sim_controller import SimController, _SimIsrStore
from odradek.sim.zk_cluster import ZkCluster
from odradek.storage.records import encode_batch

__all__ = [
    "FIRST_WORLD",
    "MODEL_WORLD",
    "SimNetwork",
    "SimController",
    "SimHarness",
    "World",
    "WorldConfig",
]

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
    # The workload's acks: -1 (all; every run of ``sim run``), or 1 (the partition
    # scenarios' acks=1 variants, odradek.sim.scenarios: a loss is then expected and
    # ``ack-under-replicated`` does not apply).
    acks: int = -1
    # Faults that move a replica away and back (a reassignment); ZooKeeper watches
    # reaching each broker after its own seeded delay; the workload stopping before the
    # faults heal, so the cluster recovers idle (idle fetch sessions, no write to wake a
    # partition). All three off: FIRST_WORLD, where the seeds up to 308 were found.
    reassignments: bool = True
    watch_latency_s: tuple[float, float] = (0.0005, 0.03)
    quiet_heal: bool = True
    # The controller: True (the default since issue 26's "real controller by default"),
    # Odradek's real ``Controller``, metadata store and ISR store over the ZooKeeper model
    # (odradek.sim.zk_cluster), with every broker a controller candidate and a
    # ``controller`` fault (crash or ZooKeeper cut of the active controller): what a
    # seed finds is then what the shipped code does. False (``--model-controller``),
    # ``SimController``, the hand-written model the first seeds of docs/faults.md were
    # recorded with (FIRST_WORLD keeps it: those seeds replay there byte for byte).
    real_controller: bool = True
    first_controller: int = 0  # with real_controller: the first one elected (0: brokers[0])
    # With real_controller: how long a restarted broker takes to reach ZooKeeper (loading
    # its logs); its old session ended as it restarted.
    restart_delay_s: tuple[float, float] = (0.05, 0.3)
    # 0: the monitors look at the world at the end of every virtual instant; else on a
    # timer of this period (FIRST_WORLD's 10 ms: its timers decide the order of other
    # timers due at the same instant, so its seeds replay only with it).
    sample_every_s: float = 0.0
    # The producers: "plain" (World.producer), or odradek.sim.clients' "idempotent" or
    # "transactional" (with consumers and a transaction coordinator).
    workload: str = "plain"
    # segment.bytes (None: the default; the idempotent and transactional workloads then
    # roll every 4 KiB outside the power-loss profile, so producer snapshots and
    # aborted-transaction indexes span segments).
    segment_bytes: int | None = None
    # The idempotent workload's batches in flight per partition and producer (1-5;
    # odradek.sim.inflight). 1: one batch at a time per producer, the model the seeds
    # before it were recorded with.
    in_flight: int = 5
    # The client workloads' request.timeout.ms and delivery.timeout.ms, in seconds
    # (odradek.sim.inflight, "Timeouts"). None: not armed -- the clients' defaults (30 s
    # and 120 s) outlast every wait a run has (pauses <= 3 s, produce timeout 2 s), and
    # no timer is scheduled, so the runs recorded before them replay byte for byte.
    request_timeout_s: float | None = None
    delivery_timeout_s: float | None = None


# The world the first seeds (up to 308) were found in: no reassignments, no watch
# delays, no quiet heal, a 10 ms sampling timer, and the modelled controller.
FIRST_WORLD = WorldConfig(
    reassignments=False,
    watch_latency_s=(0.0, 0.0),
    quiet_heal=False,
    sample_every_s=0.01,
    real_controller=False,
)
# Today's world with the modelled controller (``--model-controller``): the world the seeds
# docs/faults.md records before the real controller became the default were found in.
MODEL_WORLD = WorldConfig(real_controller=False)


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
        # A count back at 0 leaves the table (a missing link counts 0 all the same), so
        # that a network with no cut in force is an empty table: ``_broken``'s fast path.
        link = frozenset((a, b))
        n = self.cuts[link] - 1
        if n:
            self.cuts[link] = n
        else:
            del self.cuts[link]

    def heal(self) -> None:
        self.cuts.clear()
        self.delays.clear()
        self.loss.clear()

    def delay(self, src: int, dst: int, seconds: float) -> None:
        self.delays[(src, dst)] = seconds

    def _broken(self, src: int, dst: int) -> bool:
        dead = self.dead
        if src in dead or dst in dead:
            return True
        cuts, loss = self.cuts, self.loss
        if not cuts and not loss:
            return False  # no fault on any link (most hops): no frozenset to build
        link = frozenset((src, dst))
        if cuts.get(link, 0) > 0:
            return True
        p = loss.get(link, 0.0)
        return p > 0 and self.rng.random() < p

    async def hop(self, src: int, dst: int) -> None:
        lo, hi = self.latency_s
        # A message on the wire arrives even if its sender dies meanwhile (kill -9 recalls
        # nothing): only a sender dead when sending loses it.
        sent = src not in self.dead
        delays = self.delays
        extra = delays.get((src, dst), 0.0) if delays else 0.0
        # ``rng.uniform(lo, hi)`` inlined (random.py's own formula: the same draw and the
        # same float), and the simulator's sleep: ~9,000 hops a schedule.
        await sim_sleep(extra + (lo + (hi - lo) * self.rng.random()))
        if not sent or self._broken(-1 if src in self.dead else src, dst):
            raise EndpointError(f"link {src}->{dst} is down")

    async def back(self, node: int) -> None:
        """The running task is ``node``'s again after a hop that raised (only the ``pause``
        profile's network tracks owners: here it does nothing and never yields)."""


class _InFlightEndpoint(MemoryLeaderEndpoint):
    """A fetch, once sent, is the leader's business: the leader reads it even if the
    follower crashes (or stops its fetcher) before the answer -- the late fetch behind
    KIP-841, which can reach the leader after the controller took its dead sender out
    of the ISR."""

    async def fetch(
        self, request: FetchRequestData, *, max_wait_ms: int, min_bytes: int, max_bytes: int
    ) -> FetchResult:
        loop = asyncio.get_running_loop()
        served = loop.create_task(
            MemoryLeaderEndpoint.fetch(
                self, request, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes
            )
        )
        # asyncio.shield(served), with one callback instead of shield's two and a
        # separate one for an answer nobody waits for (4 callbacks per fetch were a
        # tenth of a run's): the follower wakes in the same loop turn as with shield,
        # so every seed's run is unchanged.
        answer: asyncio.Future[FetchResult] = loop.create_future()
        served.add_done_callback(partial(_deliver, answer))
        return await answer


def _deliver(answer: asyncio.Future[FetchResult], served: asyncio.Task[FetchResult]) -> None:
    if answer.cancelled():
        # Its follower crashed or stopped fetching: the answer's error is no one's.
        if not served.cancelled():
            served.exception()
    elif served.cancelled():
        answer.cancel()
    elif (exc := served.exception()) is not None:
        answer.set_exception(exc)
    else:
        answer.set_result(served.result())


@dataclass
class SimHarness(ReplicationHarness):
    seed: int = 0
    trace: Trace = print
    incarnation: dict[int, int] = field(default_factory=dict)

    watch_latency_s: tuple[float, float] = (0.0, 0.0)
    real_controller: bool = False
    session_timeout_s: float = 1.5
    first_controller: int = 0
    restart_delay_s: tuple[float, float] = (0.05, 0.3)
    tracing: bool = True  # False: the timeline is not kept (the controller's lines not built)

    def make_controller(self) -> MemoryController:
        if self.real_controller:
            # Not a MemoryController: the same interface over the ZooKeeper model.
            return ZkCluster(  # type: ignore[return-value]
                self.brokers,
                self.partitions,
                self.seed,
                self.trace,
                asyncio.get_running_loop(),
                watch_latency_s=self.watch_latency_s,
                session_timeout_s=self.session_timeout_s,
                first_controller=self.first_controller or None,
                startup_s=self.restart_delay_s,
                tracing=self.tracing,
            )
        return SimController(
            self.brokers, self.partitions, self.seed, self.trace, self.watch_latency_s
        )

    async def __aenter__(self) -> SimHarness:
        await super().__aenter__()
        c: Any = self.controller
        if isinstance(c, ZkCluster):
            c.started()
        return self

    def _applier(self, broker: int) -> Callable[[MetadataImage], None]:
        inner = super()._applier(broker)

        def apply(image: MetadataImage) -> None:
            # SimController publishes to every broker: one cut from ZooKeeper must not
            # hear it. A ZkCluster broker's image is what its own metadata store read
            # while it could (e.g. at its start, just before a cut): always applied.
            if isinstance(self.controller, ZkCluster) or broker not in self.controller.unreachable:
                inner(image)

        return apply

    def _endpoint_factory(self, follower: int) -> Callable[[int, str, int], Any]:
        return lambda leader, _host, _port: _InFlightEndpoint(self, follower, leader)

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
        c: Any = self.controller
        c.crashed(b)
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
    tracing: bool = True  # False: the timeline is not kept (hot lines are not built)
    schedule: list[Step] = field(default_factory=list)  # what the nemesis did
    workload: list[asyncio.Task[None]] = field(default_factory=list)  # the producers
    _seen: dict[tuple[int, int], tuple[str, int, int]] = field(default_factory=dict)
    _changed: dict[int, tuple[object, int]] = field(default_factory=dict)

    @property
    def controller(self) -> SimController | ZkCluster:
        c: Any = self.h.controller
        assert isinstance(c, (SimController, ZkCluster))
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
        self.controller.zk_cut(b)
        self._expire_later(b, lambda: b in self.controller.unreachable)

    def zk_heal(self, b: int) -> None:
        if b not in self.controller.unreachable:
            return
        self.trace(f"nemesis: broker {b} reaches ZooKeeper again")
        self.controller.zk_uncut(b)
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
        """What ``draw`` may pick now (a profile may narrow it: odradek.sim.power)."""
        kinds = ["cut", "isolate", "slow", "lossy", "crash", "zk", "zk-partition"]
        if self.cfg.reassignments:
            kinds.append("reassign")
        if self.cfg.real_controller:
            kinds.append("controller")
        return kinds

    def draw(self, rng: random.Random, fault_id: int) -> FaultSpec:
        """The next fault, resolved against the world now ("the leader": who leads)."""
        brokers = list(self.cfg.brokers)
        p = rng.randrange(self.cfg.partitions)
        leader = self.controller.znodes[p].leader
        live = [b for b in brokers if b not in self.h.down]
        target = leader if leader in live and rng.random() < 0.5 else rng.choice(brokers)
        kind = rng.choice(self.fault_kinds())
        other = rng.choice([b for b in brokers if b != target])
        param = 0.0
        if kind == "controller":
            # The active controller: crashed (param 0) or cut from ZooKeeper (1).
            cid = self.controller.controller_id if isinstance(self.controller, ZkCluster) else -1
            target = cid if cid in brokers else target
            other = rng.choice([b for b in brokers if b != target])
            param = float(rng.randrange(2))
        elif kind == "slow":
            param = round(rng.uniform(0.05, 1.0), 3)
        elif kind == "lossy":
            param = round(rng.uniform(0.2, 0.9), 2)
        return FaultSpec(fault_id, kind, p, target, other, param)

    async def inject(self, f: FaultSpec) -> _Fault:
        brokers = list(self.cfg.brokers)
        kind, target, other = f.kind, f.target, f.other
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
            self.trace(f"nemesis: delay {target}->{other} by {f.param} s")
            self.net.delay(target, other, f.param)
            return _Fault(
                f"slow {target}->{other}", lambda: self.net.delays.pop((target, other), None)
            )
        if kind == "lossy":
            link = frozenset((target, other))
            self.trace(f"nemesis: drop {f.param:.0%} on {target}-{other}")
            self.net.loss[link] = f.param
            return _Fault(f"lossy {target}-{other}", lambda: self.net.loss.pop(link, None))
        if kind == "controller":
            self.trace(f"nemesis: fail the controller, broker {target}")
            kind = "crash" if f.param == 0 else "zk"
        if kind == "crash" and target not in self.h.down:
            await self.crash(target)
            return _Fault(f"crash {target}", lambda: self.restart(target))
        if kind == "reassign":
            # Move one replica away (its log is deleted), and back when healed: it then
            # starts from an empty log, fetching from a leader that may not know it yet.
            p, c = f.partition, self.controller
            cur = c.assignment[p]
            if not cur.in_progress and set(cur.replicas) == set(brokers):
                self.trace(f"nemesis: move p{p} off broker {target}")
                c.reassign(p, tuple(b for b in brokers if b != target))

                def move_back() -> None:
                    self.trace(f"nemesis: move p{p} back to broker {target}")
                    c.reassign(p, tuple(brokers))

                return _Fault(f"reassign p{p} {target}", move_back)
        # "zk", a crash of a broker already down, or a move while another one runs: cut
        # the broker from ZooKeeper instead.
        self.zk_isolate(target)
        return _Fault(f"zk {target}", lambda: self.zk_heal(target))

    async def nemesis(
        self, plan: list[Step] | None = None, skip: frozenset[int] = frozenset()
    ) -> None:
        """Draw faults from the seed and record them in ``self.schedule``, or replay
        ``plan`` (a recorded schedule) leaving out the faults whose ids are in ``skip``."""
        rng = random.Random(f"nemesis-{self.seed}")
        active: list[tuple[int, _Fault]] = []
        lo, hi = self.cfg.fault_gap_s
        end = self.now() + self.cfg.duration_s
        steps = iter(plan) if plan is not None else None
        n = 0
        while True:
            if steps is not None:
                step = next(steps, None)
                if step is None:
                    break
                await asyncio.sleep(step.gap)
            else:
                if self.now() >= end:
                    break
                gap = rng.uniform(lo, hi)
                await asyncio.sleep(gap)
                if active and (len(active) >= 2 or rng.random() < 0.5):
                    step = Step(gap, heals=active[0][0])
                else:
                    step = Step(gap, fault=self.draw(rng, n))
                    n += 1
                self.schedule.append(step)
            if step.fault is not None:
                if step.fault.id not in skip:
                    active.append((step.fault.id, await self.inject(step.fault)))
            else:
                i = next((k for k, (fid, _) in enumerate(active) if fid == step.heals), None)
                if i is not None:
                    _, f = active.pop(i)
                    self.trace(f"nemesis: heal {f.name}")
                    f.heal()
        if self.cfg.quiet_heal:
            self.trace("nemesis: stop the workload")
            self.stopping = True
            await asyncio.gather(*self.workload)
        self.trace("nemesis: heal everything")
        for _, f in active:
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
            await sim_sleep(rng.uniform(lo, hi))
            p = rng.randrange(self.cfg.partitions)
            b = self.controller.znodes[p].leader  # the client's metadata
            if b < 0 or b in self.h.down:
                continue
            value = f"w{k}-{n}".encode()
            n += 1
            inc = self.h.incarnation[b]
            batch = encode_batch([(None, value)], timestamp_ms=clock.time_ns() // 1_000_000)
            res = await self.h.produce(
                b, batch, acks=self.cfg.acks, timeout_s=self.cfg.produce_timeout_s, partition=p
            )
            if self.h.incarnation[b] != inc or b in self.h.down:
                self.trace(f"produce {value.decode()} to {b}: connection lost")
                continue
            if res.error_code != 0:
                self.trace(f"produce {value.decode()} to {b}: {error_name(res.error_code)}")
                continue
            off = res.base_offset
            holders = [r for r in self.cfg.brokers if self.leo(r, p) > off]
            if self.tracing:
                self.trace(f"ack {value.decode()} p{p} offset {off} from {b} on {holders}")
            self.acks.append(Ack(p, off, value, self.now()))
            if self.cfg.acks == -1 and len(holders) < self.cfg.min_insync_replicas:
                self.violations.append(
                    Violation(
                        "ack-under-replicated",
                        f"p{p} offset {off} acked by {b} at {self.now():.3f} with only "
                        f"{holders} holding it (min.insync.replicas "
                        f"{self.cfg.min_insync_replicas})",
                    )
                )

    # ---------------------------------------------------------------- monitor
    async def watch(self, every_s: float) -> None:
        while True:
            self.sample()
            await asyncio.sleep(every_s)

    def sample(self) -> None:
        """Look at every live replica (the runner calls this at the end of each virtual
        instant: whatever state lasted any virtual time is seen). Replica states are
        frozen values replaced on each change, so an unchanged replica costs a lookup."""
        changed = self._changed
        down = self.h.down
        replicas = self.h.replicas
        for b in self.cfg.brokers:
            if b in down:
                continue
            # Keyed by id(Partition) (cheaper than a (b, p) tuple, ~7,000 times a
            # schedule): a replica's new Partition (a restart, a move back) has a new
            # state object, so it is looked at either way -- even if it reuses a dead
            # one's id, as the entry keeps that one's state object alive.
            for part in replicas[b].partitions.values():
                # ``part.state`` and ``part.high_watermark`` without their property
                # calls: ~60,000 of each a schedule, most of them for an unchanged replica.
                st = part._state
                hw = part._hw
                last = changed.get(id(part))
                if last is not None and last[0] is st and last[1] == hw:
                    continue
                changed[id(part)] = (st, hw)
                p = part.index
                seen = (type(st).__name__, st.leader_epoch, hw)
                if self.tracing and self._seen.get((b, p)) != seen:
                    self._seen[(b, p)] = seen
                    self.trace(
                        f"broker {b} p{p}: {seen[0]} epoch {seen[1]} hw {seen[2]} "
                        f"leo {part.log_end_offset}"
                    )
                if type(st) is Leader:
                    self.monitor.observe_leader(p, st.leader_epoch, b, hw, self.now())
