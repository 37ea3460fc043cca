"""The documents' network-partition scenarios (REQ-P1 to REQ-P8) as simulator schedules.

Each is the fault of its ``odradek chaos`` twin (odradek.chaos.scenarios,
docs/failure-scenarios.md) as an explicit plan for ``World.nemesis``: which broker (the
leader or a follower of partition 0), when, for how long; the workload is the
simulator's (acks=all) with the document's min.insync.replicas. Its documented outcome
is a predicate over the run's timeline: the controller's elections, the leaders' ISR
writes, every acknowledgement with the broker that gave it, and the fault's window.

The roles are resolved against the assignment the run starts with (the runner elects
broker ``brokers[p % n]`` for partition p); the predicate also checks that the fault
hit the broker it meant to (the leader when the fault landed, per the controller).

For the acks=1 variants an acknowledged record lost is the documented outcome, not a
violation: their predicate checks that each one is in the lost-records ledger.
Not simulated (``SKIPPED`` says why): the variant needing an unclean election (the
simulated controller never elects one) and scenarios 7 and 8 (the simulated controller
is ZooKeeper's model, not a broker that can be cut off).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from odradek.sim.runner import RunResult, run_seed
from odradek.sim.schedule import FaultSpec, Step
from odradek.sim.world import WorldConfig

__all__ = ["SCENARIOS", "SKIPPED", "Observed", "Scenario", "ScenarioRun", "run_scenario"]

_LINE = re.compile(r"^\s*(?P<t>\d+\.\d+) (?P<msg>.*)$")
_ELECT = re.compile(r"^controller: p0 leader (\d+) epoch (\d+) isr \[([\d, ]*)\]$")
_OFFLINE = re.compile(r"^controller: p0 offline epoch (\d+) isr \[([\d, ]*)\]$")
_ISR_WRITE = re.compile(r"^ISR write by (\d+): p0 epoch \d+ isr \[([\d, ]*)\] .*: ok")
_ACK = re.compile(r"^ack \S+ p0 offset \d+ from (\d+) on")
_EXPIRED = re.compile(r"^controller: broker (\d+) session expired$")
_CONTROLLER = re.compile(r"^controller: broker (\d+) is the controller \(epoch (\d+)\)$")
_REGISTERED = re.compile(r"^controller: broker (\d+) registered$")
_FAULT = re.compile(r"^nemesis: (crash broker|cut broker|isolate) (\d+)")
_REFUSED = re.compile(r"^produce \S+ to (\d+): (\w+)$")
_LEDGER = re.compile(
    r"^log WARNING: odradek\.storage\.truncation_ledger: \S+-0: \d+ record\(s\) "
    r"at offsets \[(\d+), (\d+)\)"
)
_LOST = re.compile(r"^p0 offset (\d+): acked")


def _ids(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


@dataclass
class Observed:
    """What a scenario's predicate looks at, read back from the run's timeline."""

    fault_at: float = -1.0
    heal_at: float = -1.0
    leaders: list[tuple[float, int, tuple[int, ...]]] = field(default_factory=list)  # -1: none
    isr_writes: list[tuple[float, int, tuple[int, ...]]] = field(default_factory=list)
    acks: list[tuple[float, int]] = field(default_factory=list)  # (when, by which broker)
    expired: list[tuple[float, int]] = field(default_factory=list)
    refused: list[tuple[float, int, str]] = field(default_factory=list)
    quarantined: list[tuple[int, int]] = field(default_factory=list)  # the ledger: [a, b)
    lost: list[int] = field(default_factory=list)  # offsets of acknowledged records lost
    controllers: list[tuple[float, int]] = field(default_factory=list)  # (when, elected)
    registered: list[tuple[float, int]] = field(default_factory=list)
    faults: list[tuple[float, str, int]] = field(default_factory=list)  # (when, what, broker)

    @classmethod
    def parse(cls, timeline: list[str]) -> Observed:
        o = cls()
        for line in timeline:
            m = _LINE.match(line)
            if m is None:
                continue
            t, msg = float(m["t"]), m["msg"]
            if f := _FAULT.match(msg):
                o.faults.append((t, f[1], int(f[2])))
            if msg.startswith("nemesis: heal ") and o.heal_at < 0:
                o.heal_at = t
            elif msg.startswith("nemesis: ") and o.fault_at < 0:
                o.fault_at = t
            elif e := _ELECT.match(msg):
                o.leaders.append((t, int(e[1]), _ids(e[3])))
            elif e := _OFFLINE.match(msg):
                o.leaders.append((t, -1, _ids(e[2])))
            elif e := _ISR_WRITE.match(msg):
                o.isr_writes.append((t, int(e[1]), _ids(e[2])))
            elif e := _ACK.match(msg):
                o.acks.append((t, int(e[1])))
            elif e := _EXPIRED.match(msg):
                o.expired.append((t, int(e[1])))
            elif e := _CONTROLLER.match(msg):
                o.controllers.append((t, int(e[1])))
            elif e := _REGISTERED.match(msg):
                o.registered.append((t, int(e[1])))
            elif e := _REFUSED.match(msg):
                o.refused.append((t, int(e[1]), e[2]))
            elif e := _LEDGER.match(msg):
                o.quarantined.append((int(e[1]), int(e[2])))
        return o

    def leader_at(self, t: float) -> int:
        cur = -1
        for at, leader, _isr in self.leaders:
            if at <= t:
                cur = leader
        return cur

    def isr_changes(self) -> list[tuple[float, tuple[int, ...]]]:
        """Every ISR ZooKeeper held, in time order (leader ISR writes and controller
        decisions both)."""
        changes = [(t, isr) for t, _b, isr in self.isr_writes]
        changes += [(t, isr) for t, _l, isr in self.leaders]
        return sorted(changes)

    def isrs_during_fault(self) -> list[tuple[int, ...]]:
        """Every ISR ZooKeeper held between the fault and its heal."""
        return [isr for t, isr in self.isr_changes() if self.fault_at <= t <= self.heal_at]

    def acks_by(self, broker: int, start: float, end: float) -> int:
        return sum(1 for t, b in self.acks if b == broker and start <= t <= end)


# A predicate: (observed, leader, follower, the world's configuration) -> what failed.
Check = Callable[[Observed, int, int, WorldConfig], list[str]]


@dataclass(frozen=True)
class Scenario:
    name: str
    requirement: str
    outcome: str  # the documents' outcome, as asserted
    faults: tuple[tuple[str, str], ...]  # (FaultSpec kind, "leader" | "follower"), in turn
    check: Check
    min_insync_replicas: int = 1  # the document's (docs/failure-scenarios.md)
    acks: int = -1  # the workload's: -1 (all) or 1
    start_s: float = 2.0  # virtual seconds of workload before the first fault
    then_s: float = 3.0  # between two faults (the first one's effect settles)
    hold_s: float = 6.0  # the last fault lasts this long (> replica lag and session timeout)
    after_s: float = 3.0  # workload after the heal, before the runner's final heal
    note: str = ""  # how the simulated scenario differs from its chaos twin
    # Needs Odradek's real controller (odradek.sim.zk_cluster), whatever the base world
    # says: its broker, the third replica of partition 0 ([L, X, C], as in the chaos
    # twins), is the "controller" role. Every scenario runs on the real controller by
    # default (WorldConfig's); the others may also run on the model (MODEL_WORLD).
    real_controller: bool = False

    def roles(self, cfg: WorldConfig) -> tuple[int, int]:
        """(leader, follower) of partition 0 at the start of the run."""
        return cfg.brokers[0], cfg.brokers[1]

    def config(self, base: WorldConfig | None = None) -> WorldConfig:
        cfg = replace(
            base or WorldConfig(),
            partitions=1,
            min_insync_replicas=self.min_insync_replicas,
            acks=self.acks,
        )
        if self.real_controller:
            cfg = replace(cfg, real_controller=True)
        if cfg.real_controller:
            # The controller on the third replica, as in the chaos twins: a fault on the
            # leader or the follower is not also a controller failover.
            cfg = replace(cfg, first_controller=cfg.brokers[2])
        return cfg

    def plan(self, cfg: WorldConfig) -> list[Step]:
        leader, follower = self.roles(cfg)
        steps = []
        for i, (kind, role) in enumerate(self.faults):
            if role == "controller":
                target, other = cfg.brokers[2], leader
            elif role == "leader":
                target, other = leader, follower
            else:
                target, other = follower, leader
            gap = self.start_s if i == 0 else self.then_s
            steps.append(Step(gap, fault=FaultSpec(i, kind, 0, target, other)))
        steps.append(Step(self.hold_s, heals=0))
        steps += [Step(0.0, heals=i) for i in range(1, len(self.faults))]
        steps.append(Step(self.after_s))  # neither a fault nor a heal: the workload goes on
        return steps


@dataclass
class ScenarioRun:
    scenario: Scenario
    result: RunResult
    observed: Observed
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


def run_scenario(
    sc: Scenario, seed: int, base: WorldConfig | None = None, *, bug: str | None = None
) -> ScenarioRun:
    """Play ``sc`` on ``seed`` (``bug``: with a known replication bug injected,
    odradek.sim.bugs) and check its documented outcome and every invariant."""
    cfg = sc.config(base)
    r = run_seed(seed, bug=bug, cfg=cfg, plan=sc.plan(cfg))
    o = Observed.parse(r.timeline)
    leader, follower = sc.roles(cfg)
    failures = []  # every invariant: no loss, no split brain, liveness...
    for v in r.violations:
        lost = _LOST.match(v.detail) if v.invariant == "acked-lost" else None
        if lost is not None and sc.acks == 1:  # ...but acks=1 may lose: its predicate checks
            o.lost.append(int(lost[1]))
        else:
            failures.append(f"invariant {v}")
    if o.fault_at < 0 or o.heal_at < 0:
        failures.append("the fault or its heal is missing from the timeline")
    elif o.leader_at(o.fault_at) != leader:
        failures.append(f"the fault landed when broker {o.leader_at(o.fault_at)} led, not {leader}")
    else:
        failures += sc.check(o, leader, follower, cfg)
    return ScenarioRun(sc, r, o, failures)


# ------------------------------------------------------------------ predicates
def _no_leader_change(o: Observed, leader: int) -> list[str]:
    others = [(t, b) for t, b, _ in o.leaders if b != leader]
    return [f"leadership moved: {others}"] if others else []


def _shrinks_without(o: Observed, gone: int, what: str) -> list[str]:
    if not any(gone not in isr for isr in o.isrs_during_fault()):
        return [f"{what}: broker {gone} never left the ISR during the fault"]
    return []


def _writes_go_on(o: Observed, leader: int) -> list[str]:
    if o.acks_by(leader, o.fault_at, o.heal_at) == 0:
        return [f"no write acknowledged by leader {leader} during the fault"]
    return []


def _failover(o: Observed, leader: int, cfg: WorldConfig) -> list[str]:
    """A new leader within the session timeout (plus a fetch's slack), and the deposed
    leader acknowledges nothing once its followers can have heard of it: the election's
    watch reaches them within ``watch_latency_s``, and a fetch sent just before crosses
    one more hop. What it acknowledged in that window its followers had fetched, so the
    new leader has it (``acked-lost`` checks that)."""
    new = [(t, b) for t, b, _ in o.leaders if o.fault_at <= t and b not in (leader, -1)]
    if not new:
        return ["no new leader elected"]
    at, b = new[0]
    out = []
    bound = cfg.session_timeout_s + 0.5
    if at - o.fault_at > bound:
        out.append(f"broker {b} elected {at - o.fault_at:.3f} s after the fault (> {bound} s)")
    heard = at + cfg.watch_latency_s[1] + cfg.hop_latency_s[1]
    late = o.acks_by(leader, heard, o.heal_at)
    if late:
        out.append(f"the deposed leader {leader} acknowledged {late} writes after {heard:.3f}")
    return out


def _acks1_failover(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    """The failover, and what acks=1 lost is in the deposed leader's lost-records ledger
    (odradek.storage.truncation_ledger: it quarantines what it truncates on rejoining)."""
    out = _failover(o, leader, cfg)
    missing = [x for x in o.lost if not any(a <= x < b for a, b in o.quarantined)]
    if missing:
        out.append(f"lost offsets not in the lost-records ledger: {missing}")
    return out


def _p6_acks1(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    """As scenario 4's, and here a loss is certain: nothing the isolated leader took
    after the fault reached a follower."""
    out = _acks1_failover(o, leader, follower, cfg)
    return out if o.lost else [*out, "no acknowledged write was lost"]


def _p1(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    return (
        _shrinks_without(o, follower, "cut follower")
        + _no_leader_change(o, leader)
        + _writes_go_on(o, leader)
    )


def _p2(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    out = _no_leader_change(o, leader) + _writes_go_on(o, leader)
    if (leader,) not in o.isrs_during_fault():
        out.append(f"the ISR never shrank to the leader alone: {o.isrs_during_fault()}")
    return out


# The follower kept fetching while cut from ZooKeeper, so once registered again it is
# caught up and its leader takes it back at its next fetch: well within this.
P3_REJOIN_BOUND_S = 1.0


def _p3(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    """The follower's session expires; leadership and writes are untouched. On Odradek's
    controller (docs/requirements.md, P3, where it differs from the documents) the
    follower leaves the ISR at its expiry, same leader and epoch, stays out while
    unregistered (KIP-841) and rejoins within ``P3_REJOIN_BOUND_S`` of registering again,
    having kept fetching. (The model does not keep it fetching: the scenario's ``note``.)"""
    out = _no_leader_change(o, leader) + _writes_go_on(o, leader)
    expiries = [t for t, b in o.expired if b == follower and t >= o.fault_at]
    if not expiries:
        out.append(f"broker {follower}'s session never expired")
        return out
    if not cfg.real_controller:
        return out
    expired_at = expiries[0]
    back = [t for t, b in o.registered if b == follower and t > expired_at]
    back_at = back[0] if back else float("inf")
    changes = o.isr_changes()
    while_out = [isr for t, isr in changes if expired_at <= t < back_at]
    first_out = next((i for i, isr in enumerate(while_out) if follower not in isr), None)
    if first_out is None:
        out.append(f"broker {follower} stayed in the ISR after its session expired")
    elif any(follower in isr for isr in while_out[first_out:]):
        out.append(f"broker {follower} was taken back into the ISR while unregistered (KIP-841)")
    rejoined = [t for t, isr in changes if t >= back_at and follower in isr]
    if not rejoined or rejoined[0] - back_at > P3_REJOIN_BOUND_S:
        out.append(
            f"broker {follower} did not rejoin the ISR within {P3_REJOIN_BOUND_S} s "
            f"of registering again ({rejoined[:1]})"
        )
    return out


def _p4_p6(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    return _failover(o, leader, cfg)


def _p5(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    return (
        _shrinks_without(o, follower, "isolated follower")
        + _no_leader_change(o, leader)
        + _writes_go_on(o, leader)
    )


def _p6_minisr2(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    """The ISR shrinks to the leader (still reaching ZooKeeper), which refuses acks=all
    writes from then on (NOT_ENOUGH_REPLICAS); then it is cut from ZooKeeper too: with
    no other ISR member and no unclean election the partition goes offline."""
    shrunk = [t for t, _b, isr in o.isr_writes if isr == (leader,) and t >= o.fault_at]
    if not shrunk:
        return ["the ISR never shrank to the leader alone"]
    out = []
    late = sum(1 for t, _b in o.acks if shrunk[0] <= t <= o.heal_at)
    if late:
        out.append(f"{late} writes acknowledged after the ISR shrank to the leader alone")
    if not any(e.startswith("NOT_ENOUGH_REPLICAS") for t, _b, e in o.refused if t >= shrunk[0]):
        out.append("no write refused with NOT_ENOUGH_REPLICAS")
    if not any(b == -1 and t >= shrunk[0] for t, b, _isr in o.leaders):
        out.append("the partition never went offline (an unclean or wrong election?)")
    others = [(t, b) for t, b, _ in o.leaders if b not in (leader, -1)]
    if others:
        out.append(f"an out-of-sync replica was elected: {others}")
    return out


def _p7(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    """The controller, cut from every broker but not from ZooKeeper, stays controller and
    still moves leadership when the leader dies: brokers learn it from ZooKeeper."""
    controller = cfg.brokers[2]
    out = []
    crashed = [t for t, what, b in o.faults if what == "crash broker" and b == leader]
    if not crashed:
        return [f"leader {leader} was never killed"]
    new = [(t, b) for t, b, _ in o.leaders if t >= crashed[0] and b not in (leader, -1)]
    if not new:
        return ["no new leader elected after the leader died"]
    at, b = new[0]
    bound = cfg.session_timeout_s + 0.5
    if at - crashed[0] > bound:
        out.append(f"broker {b} elected {at - crashed[0]:.3f} s after the leader died (> {bound})")
    moved = [(t, c) for t, c in o.controllers if o.fault_at <= t <= o.heal_at]
    if moved:
        out.append(f"the controller moved during the cut: {moved}")
    if o.acks_by(b, at, o.heal_at) == 0:
        out.append(f"no write acknowledged by the new leader {b}")
    if o.controllers and o.controllers[0][1] != controller:
        out.append(f"broker {o.controllers[0][1]} was the first controller, not {controller}")
    return out


def _p8(o: Observed, leader: int, follower: int, cfg: WorldConfig) -> list[str]:
    """ZooKeeper elects another controller; the old one does nothing, and rejoins as a
    normal broker; leadership never changes."""
    controller = cfg.brokers[2]
    out = _no_leader_change(o, leader) + _writes_go_on(o, leader)
    new = [(t, c) for t, c in o.controllers if t >= o.fault_at]
    if not new or new[0][1] == controller:
        out.append(f"no other controller elected after broker {controller} was cut: {new}")
    elif new[0][0] > o.heal_at:
        out.append(f"the new controller was elected after the heal: {new}")
    if [c for _t, c in new if c == controller]:
        out.append(f"the old controller {controller} was elected again: {new}")
    if not any(b == controller and t >= o.heal_at for t, b in o.registered):
        out.append(f"broker {controller} never registered again after the heal")
    return out


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "p1-follower-cut-from-leader",
            "REQ-P1, R6, R21",
            "the follower leaves the ISR and rejoins after healing; no leader change, "
            "writes go on, no loss",
            (("cut", "follower"),),
            _p1,
        ),
        Scenario(
            "p2-leader-cut-from-followers",
            "REQ-P2, R6, R8",
            "the ISR shrinks to the leader alone; no leader change, writes go on (min ISR 1), "
            "no loss",
            (("isolate", "leader"),),
            _p2,
        ),
        Scenario(
            "p3-follower-cut-from-zk",
            "REQ-P3, R12",
            "ZooKeeper expires the follower's session; no leader change, writes go on, no loss",
            (("zk", "follower"),),
            _p3,
            note="Odradek's controller (the default) drops the follower from the ISR "
            "keeping the epoch (controller/elections.py); it keeps fetching and rejoins "
            "once it registers again (KIP-841). With --model-controller it does not keep "
            "fetching: the model drops it with a new leader epoch (SimController._move_off, "
            "as Kafka's onBrokerFailure), which the follower, hearing nothing from "
            "ZooKeeper, never learns, so the leader fences its fetches until it re-registers",
        ),
        Scenario(
            "p4-leader-cut-from-zk-acksall",
            "REQ-P4, R7",
            "a new leader within the session timeout; the deposed leader's acks=all "
            "writes fail once the followers follow the new leader; no loss",
            (("zk", "leader"),),
            _p4_p6,
        ),
        Scenario(
            "p4-leader-cut-from-zk-acks1",
            "REQ-P4, R13",
            "a new leader within the session timeout; acks=1 writes the deposed leader "
            "took and its followers had not fetched are lost, every one in its "
            "lost-records ledger",
            (("zk", "leader"),),
            _acks1_failover,
            acks=1,
        ),
        Scenario(
            "p5-follower-isolated",
            "REQ-P5, R6, R21",
            "the follower leaves the ISR and rejoins after healing; no leader change, "
            "writes go on, no loss",
            (("zk-partition", "follower"),),
            _p5,
        ),
        Scenario(
            "p6-leader-isolated-acksall",
            "REQ-P6, R7",
            "a new leader within the session timeout; the isolated leader acknowledges "
            "nothing after it; no loss",
            (("zk-partition", "leader"),),
            _p4_p6,
        ),
        Scenario(
            "p6-leader-isolated-acks1",
            "REQ-P6",
            "it accepts acks=1 writes until a new leader is elected (within the session "
            "timeout); on healing it truncates them: lost, every one in its lost-records "
            "ledger",
            (("zk-partition", "leader"),),
            _p6_acks1,
            acks=1,
        ),
        Scenario(
            "p6-shrunk-isolated-minisr2",
            "REQ-P6, R8",
            "the ISR shrinks to the leader alone, which refuses every write from then on "
            "(NOT_ENOUGH_REPLICAS); nothing acknowledged, nothing lost",
            (("isolate", "leader"), ("zk", "leader")),
            _p6_minisr2,
            min_insync_replicas=2,
            note="no unclean election in the simulator: the partition stays offline "
            "until the leader is back, instead of electing the out-of-sync follower",
        ),
        Scenario(
            "p7-controller-cut-from-brokers",
            "REQ-P7, R13",
            "the controller, cut from the brokers, still moves leadership when the leader "
            "dies (propagated through ZooKeeper); no split brain, no loss",
            (("isolate", "controller"), ("crash", "leader")),
            _p7,
            real_controller=True,
            note="Odradek's real controller over the ZooKeeper model; the controller is "
            "the third replica of the partition, as in the chaos twin",
        ),
        Scenario(
            "p8-controller-cut-from-zk",
            "REQ-P8, R12, R13",
            "ZooKeeper elects a new controller; the old one does nothing and rejoins as a "
            "normal broker; no leader change, no loss",
            (("zk", "controller"),),
            _p8,
            real_controller=True,
            note="Odradek's real controller over the ZooKeeper model; the controller is "
            "the third replica of the partition, as in the chaos twin",
        ),
    )
}

SKIPPED: dict[str, str] = {
    "p6-shrunk-isolated-minisr1": "needs an unclean election; the simulated controller "
    "never elects an out-of-sync replica",
}
