"""The documents' failure scenarios as named, runnable cases (issue 6 item 4).

Every scenario runs a fresh cluster (ZooKeeper + 3 brokers, 4 s ZooKeeper sessions,
``replica.lag.time.max.ms`` 2 s) with one topic of one partition, assigned
``[L, X, C]``: ``C`` is the controller, ``L`` (leader) and ``X`` the two other brokers,
so that faults on the leader, a plain follower and the controller stay separate. A
producer (chosen acks/idempotence), a live consumer and a ZooKeeper poller record the
history while the scenario's body injects faults; then everything heals, the final
read and the replicas' segment files are recorded, and ``checker.check_run`` computes
the metrics on Spark. Expectations are predicates over those metrics -- the outcome
docs/requirements.md describes, never a hard-coded count.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.chaos.expectations import (
    LAG_S,
    Check,
    Expect,
    Metrics,
    _cmp,
    _phase,
    final_isr_full,
    isr_always,
    isr_seen,
    leader_changed,
    ledger_accounts,
    no_divergence,
    phase_acks,
    phase_errors,
    report,
    split_brain_bounded,
    zero_loss,
)
from odradek.chaos.faults import Faults
from odradek.chaos.workload import (
    History,
    LiveConsumer,
    MetadataPoller,
    ProducerWorkload,
    client_logging,
    dump_replicas,
    final_read,
    restart_stopped_brokers,
    wind_down,
)

__all__ = [
    "Scenario",
    "Check",
    "Ctx",
    "ScenarioResult",
    "SCENARIOS",
    "get",
    "run_scenario",
    "run_scenarios",
    "evaluate",
    "ScenarioError",
    "FAST_BROKER_CONFIG",
]

FAST_BROKER_CONFIG = {
    "replica.lag.time.max.ms": "2000",
    "zookeeper.session.timeout.ms": "4000",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    # Leadership must move only because of the scenario's faults.
    "auto.leader.rebalance.enable": "false",
}
ZK_SESSION_MS = 4000
NER = ("NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND")
assert int(FAST_BROKER_CONFIG["replica.lag.time.max.ms"]) / 1000 == LAG_S
DEPOSED_WINDOW_S = 7.0


class ScenarioError(RuntimeError):
    """The cluster did not reach a state the scenario waits for (a finding, not a skip)."""


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    spec: str  # docs/requirements.md identifiers (REQ-Rn, REQ-Pn)
    expected: str  # what the documents say happens
    body: Callable[[Ctx], None]
    expect: Expect
    acks: str = "all"
    idempotence: bool = False
    min_isr: int = 1
    unclean: bool = False
    rate: float = 200.0
    size: int = 100
    producer_extra: dict[str, Any] = field(default_factory=dict)
    needs_tc: bool = False
    slow: bool = True  # False: part of the fast suite
    # Extra topic configs (e.g. odradek.ack.fsync) and the brokers' fsync ledger, needed
    # by bodies that simulate a power loss (odradek.storage.durability).
    topic_config: dict[str, str] = field(default_factory=dict)
    fsync_ledger: bool = False


@dataclass
class ScenarioResult:
    name: str
    dir: Path
    seconds: float
    error: str | None = None
    metrics: Metrics = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)


class Ctx:
    """What a scenario body works with: the cluster, faults, history and roles."""

    def __init__(
        self,
        scenario: Scenario,
        cluster: Any,
        faults: Faults,
        history: History,
        poller: MetadataPoller,
        producer: ProducerWorkload,
        topic: str,
        leader: int,
        x: int,
        ctl: int,
    ) -> None:
        self.scenario = scenario
        self.cluster = cluster
        self.faults = faults
        self.history = history
        self.poller = poller
        self.producer = producer
        self.topic = topic
        self.L, self.X, self.C = leader, x, ctl

    def state(self) -> tuple[int, int, list[int]]:
        return self.poller.state.get(0, (-1, -1, []))

    def isr(self) -> list[int]:
        return sorted(self.state()[2])

    def leader(self) -> int:
        return self.state()[0]

    def wait(self, cond: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = cond()
            if got:
                self.history.event("note", f"reached: {what}")
                return got
            time.sleep(0.05)
        self.history.event("note", f"timed out: {what}")
        raise ScenarioError(
            f"timed out after {timeout:.0f} s waiting for {what} "
            f"(state {self.state()}, controller {self.poller.controller})"
        )

    def wait_isr(self, isr: list[int], timeout: float = 20.0) -> None:
        self.wait(lambda: self.isr() == sorted(isr), timeout, f"ISR == {sorted(isr)}")

    def wait_new_leader(self, old: int, timeout: float = 25.0) -> int:
        return int(
            self.wait(
                lambda: self.leader() if self.leader() not in (old, -1) else 0,
                timeout,
                f"a leader other than {old}",
            )
        )

    def run_for(self, seconds: float) -> None:
        """Let the workload run under the current faults (the observation window)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.05)

    def phase(self, name: str) -> None:
        self.history.phase(name)


# ----------------------------------------------------------------- bodies


def _kill_leader_failover(ctx: Ctx) -> None:
    ctx.run_for(2)
    ctx.phase("leader-killed")
    ctx.faults.kill(ctx.L)
    ctx.wait_new_leader(ctx.L)
    ctx.phase("failover")
    ctx.run_for(3)
    ctx.faults.restart(ctx.L)


def _kill_leader_ahead_of_followers(ctx: Ctx) -> None:
    """REQ-R4/R7: with acks=1 the leader acknowledges records no follower has fetched yet.
    Cut the leader from both followers for less than replica.lag.time.max.ms (so both stay
    in the ISR and the election stays clean), kill the leader, heal: what it acknowledged
    during the cut is exactly what the new leader lacks. Without the cut, followers are
    milliseconds behind and a SIGKILL almost never catches an unreplicated ack."""
    ctx.run_for(2)
    ctx.phase("followers-cut")
    cuts = [ctx.faults.partition(ctx.L, f) for f in (ctx.X, ctx.C)]
    ctx.run_for(0.4 * LAG_S)  # well inside the lag window: nobody leaves the ISR
    ctx.phase("leader-killed")
    ctx.faults.kill(ctx.L)
    for cut in cuts:
        ctx.faults.heal(cut)
    ctx.wait_new_leader(ctx.L)
    ctx.phase("failover")
    ctx.run_for(3)
    ctx.faults.restart(ctx.L)


def _shrink_then_unclean(ctx: Ctx) -> None:
    """ISR shrinks to the leader (cut from both followers), the leader takes writes alone,
    then dies; the followers come back and one of them is elected uncleanly."""
    ctx.run_for(1)
    cut = ctx.faults.isolate(ctx.L, from_=[ctx.X, ctx.C])
    ctx.wait_isr([ctx.L])
    ctx.phase("isr-leader-only")
    ctx.run_for(3)
    ctx.phase("leader-killed")
    ctx.faults.kill(ctx.L)
    ctx.faults.heal(cut)
    ctx.wait_new_leader(ctx.L)
    ctx.phase("unclean-leader")
    ctx.run_for(3)
    ctx.faults.restart(ctx.L)


def _isr_below_min(ctx: Ctx) -> None:
    ctx.run_for(1)
    ctx.phase("cutting")
    cut = ctx.faults.isolate(ctx.L, from_=[ctx.X, ctx.C])
    ctx.wait_isr([ctx.L])
    ctx.run_for(0.5)  # acks already in flight when the ISR shrank are not counted
    ctx.phase("isr-below-min")
    ctx.run_for(3)
    ctx.faults.heal(cut)
    ctx.phase("healing")
    ctx.wait_isr([ctx.L, ctx.X, ctx.C], 30)


def _slow_follower(ctx: Ctx) -> None:
    ctx.phase("baseline")
    ctx.run_for(3)
    ctx.phase("slow-in-isr")
    slow = ctx.faults.slow(ctx.X, rate="400kbit")
    ctx.wait(lambda: ctx.X not in ctx.isr(), 30, f"slow follower {ctx.X} to leave the ISR")
    ctx.phase("slow-out-of-isr")
    ctx.run_for(3)
    ctx.faults.heal(slow)


def _follower_cut_from_leader(ctx: Ctx) -> None:
    ctx.run_for(1)
    cut = ctx.faults.partition(ctx.X, ctx.L)
    ctx.wait(lambda: ctx.X not in ctx.isr(), 20, f"{ctx.X} to leave the ISR")
    ctx.phase("cut")
    ctx.run_for(3)
    ctx.faults.heal(cut)
    ctx.phase("healing")
    ctx.wait_isr([ctx.L, ctx.X, ctx.C], 30)


def _leader_cut_from_followers(ctx: Ctx) -> None:
    ctx.run_for(1)
    cut = ctx.faults.isolate(ctx.L, from_=[ctx.X, ctx.C])
    ctx.wait_isr([ctx.L])
    ctx.phase("isr-leader-only")
    ctx.run_for(3)
    ctx.faults.heal(cut)
    ctx.phase("healing")
    ctx.wait_isr([ctx.L, ctx.X, ctx.C], 30)


def _follower_cut_from_zookeeper(ctx: Ctx) -> None:
    ctx.run_for(1)
    cut = ctx.faults.partition(ctx.X, "zk")
    ctx.wait(lambda: not ctx.cluster.is_registered(ctx.X), 20, f"{ctx.X}'s session to expire")
    ctx.phase("expired")
    ctx.run_for(3)
    ctx.faults.heal(cut)
    ctx.phase("healing")
    ctx.wait(lambda: ctx.cluster.is_registered(ctx.X), 30, f"{ctx.X} to re-register")


def _deposed_leader(ctx: Ctx, cut: Callable[[], Any]) -> None:
    ctx.run_for(1)
    c = cut()
    ctx.wait_new_leader(ctx.L)
    ctx.phase("deposed")
    # Longer than the time the deposed leader needs to notice (its followers stop
    # fetching -> replica.lag.time.max.ms -> failed ISR write), so the split-brain
    # window is measured, not cut short by the heal.
    ctx.run_for(DEPOSED_WINDOW_S)
    ctx.faults.heal(c)
    ctx.phase("healing")
    ctx.wait(lambda: ctx.cluster.is_registered(ctx.L), 30, f"{ctx.L} to re-register")


def _leader_cut_from_zookeeper(ctx: Ctx) -> None:
    _deposed_leader(ctx, lambda: ctx.faults.partition(ctx.L, "zk"))


def _follower_isolated(ctx: Ctx) -> None:
    ctx.run_for(1)
    cut = ctx.faults.isolate(ctx.X)
    ctx.wait(lambda: ctx.X not in ctx.isr(), 20, f"{ctx.X} to leave the ISR")
    ctx.phase("isolated")
    ctx.run_for(3)
    ctx.faults.heal(cut)
    ctx.phase("healing")
    ctx.wait(lambda: ctx.cluster.is_registered(ctx.X), 30, f"{ctx.X} to re-register")
    ctx.wait_isr([ctx.L, ctx.X, ctx.C], 30)


def _leader_isolated(ctx: Ctx) -> None:
    _deposed_leader(ctx, lambda: ctx.faults.isolate(ctx.L))


def _leader_isolated_after_isr_shrank(ctx: Ctx) -> None:
    ctx.run_for(1)
    cut = ctx.faults.isolate(ctx.L, from_=[ctx.X, ctx.C])
    ctx.wait_isr([ctx.L])
    ctx.phase("isr-leader-only")
    ctx.run_for(2)
    zk_cut = ctx.faults.partition(ctx.L, "zk")
    ctx.wait_new_leader(ctx.L)
    ctx.phase("deposed")
    ctx.run_for(4)
    ctx.faults.heal(zk_cut)
    ctx.faults.heal(cut)
    ctx.phase("healing")
    ctx.wait(lambda: ctx.cluster.is_registered(ctx.L), 30, f"{ctx.L} to re-register")


def _controller_cut_from_brokers(ctx: Ctx) -> None:
    ctx.run_for(1)
    cut = ctx.faults.isolate(ctx.C, from_=[ctx.L, ctx.X])
    ctx.wait(lambda: ctx.C not in ctx.isr(), 20, f"controller {ctx.C} to leave the ISR")
    ctx.phase("controller-cut")
    ctx.run_for(2)
    ctx.faults.kill(ctx.L)
    ctx.wait_new_leader(ctx.L)
    ctx.phase("failover-during-cut")
    ctx.run_for(3)
    ctx.faults.heal(cut)
    ctx.faults.restart(ctx.L)
    ctx.phase("healing")


def _controller_cut_from_zookeeper(ctx: Ctx) -> None:
    ctx.run_for(1)
    cut = ctx.faults.partition(ctx.C, "zk")
    ctx.wait(
        lambda: ctx.poller.controller not in (None, ctx.C), 25, f"a controller other than {ctx.C}"
    )
    ctx.phase("new-controller")
    ctx.run_for(3)
    ctx.faults.heal(cut)
    ctx.phase("healing")
    ctx.wait(lambda: ctx.cluster.is_registered(ctx.C), 30, f"{ctx.C} to re-register")


def _all_crash(ctx: Ctx) -> None:
    _crash_all_and_restart(ctx, power_loss=False)


def _all_crash_power_loss(ctx: Ctx) -> None:
    """_all_crash, but between the kill and the restart every broker's log dir is cut
    back to what its fsyncs made durable: a power cut, not just a process crash."""
    _crash_all_and_restart(ctx, power_loss=True)


def _crash_all_and_restart(ctx: Ctx, *, power_loss: bool) -> None:
    ctx.run_for(3)
    ctx.phase("all-killed")
    brokers = (ctx.L, ctx.X, ctx.C)
    ctx.faults.kill_all(list(brokers))
    if power_loss:
        from odradek.storage.durability import simulate_power_loss

        for b in brokers:
            rep = simulate_power_loss(ctx.cluster.broker(b).log_dir)
            ctx.history.event("fault", f"power loss on {b}: {rep}")
    for b in brokers:
        ctx.faults.restart(b, wait=False)
    for b in brokers:
        ctx.cluster.wait_broker_ready(b, 40)
    ctx.wait(lambda: ctx.leader() >= 0 and ctx.state()[1] >= 0, 30, "a leader after restart")
    ctx.phase("restarted")
    ctx.run_for(3)


_DURABLE = {"odradek.ack.fsync": "true"}


# ----------------------------------------------------------------- the catalogue


def _safe_kill_expect(m: Metrics) -> list[Check]:
    return [
        *zero_loss(m),
        _cmp(m, "duplicated", "==", 0),
        _cmp(m, "out_of_order", "==", 0),
        leader_changed(m),
        phase_acks(m, "failover", ">", 0),
    ]


_SAFE = dict(acks="all", idempotence=True, min_isr=2, unclean=False)
_NO_RETRY = {"retries": 0}  # so NOT_ENOUGH_REPLICAS reaches the history as such

SCENARIOS: list[Scenario] = [
    Scenario(
        "acks1-leader-failover",
        "acks=1, leader SIGKILL while followers lag (still in the ISR), clean failover",
        "REQ-R4, R7, R19",
        "loss: records acknowledged by the leader alone and not yet fetched are lost, "
        "although the election is clean; replicas never diverge",
        _kill_leader_ahead_of_followers,
        lambda m: [
            _cmp(m, "lost", ">=", 1),
            *no_divergence(m),
            leader_changed(m),
            phase_acks(m, "failover", ">", 0),
            *ledger_accounts(m),
        ],
        acks="1",
    ),
    Scenario(
        "acks1-unclean-after-shrink",
        "acks=1, ISR shrank to the leader, leader dies, unclean election",
        "REQ-R10, R14, R15",
        "large loss: everything acknowledged while the ISR was the leader alone",
        _shrink_then_unclean,
        lambda m: [
            _cmp(m, "lost", ">=", max(1, _phase(m, "isr-leader-only").get("acks", 0))),
            *no_divergence(m, unclean=True),
            leader_changed(m),
            *ledger_accounts(m),
        ],
        acks="1",
        unclean=True,
    ),
    Scenario(
        "acksall-unclean-after-shrink",
        "acks=all, min ISR 1, unclean on, ISR shrank, leader dies",
        "REQ-R10, R14",
        "loss: acks=all only waits for the ISR, which was the leader alone; the unclean "
        "leader lacks those records",
        _shrink_then_unclean,
        lambda m: [
            _cmp(m, "lost", ">=", max(1, _phase(m, "isr-leader-only").get("acks", 0))),
            *no_divergence(m, unclean=True),
            leader_changed(m),
            *ledger_accounts(m),
        ],
        acks="all",
        unclean=True,
    ),
    Scenario(
        "safe-leader-kill",
        "acks=all, min ISR 2, unclean off, idempotent; leader SIGKILL",
        "REQ-R4, R7, R8, R19",
        "zero loss, no duplicates, no reordering",
        _kill_leader_failover,
        _safe_kill_expect,
        slow=False,
        **_SAFE,
    ),
    Scenario(
        "safe-min-isr-refuses",
        "acks=all, min ISR 2: ISR below the minimum",
        "REQ-R8",
        "NOT_ENOUGH_REPLICAS while the ISR < 2, nothing acknowledged then; "
        "writes resume after healing; zero loss",
        _isr_below_min,
        lambda m: [
            phase_errors(m, "isr-below-min", NER, ">", 0),
            phase_acks(m, "isr-below-min", "==", 0),
            phase_acks(m, "healing", ">", 0),
            *zero_loss(m),
        ],
        acks="all",
        min_isr=2,
        producer_extra=_NO_RETRY,
    ),
    Scenario(
        "safe-slow-follower",
        "acks=all: a slow follower (tc htb) leaves the ISR",
        "REQ-R6, R9",
        "acks=all latency is high while the slow follower is in the ISR "
        "and drops once it is removed; zero loss",
        _slow_follower,
        lambda m: [
            Check(
                "p50 latency drops after the slow follower leaves the ISR",
                (_phase(m, "slow-in-isr").get("p50_ms") or 0)
                > 2 * (_phase(m, "slow-out-of-isr").get("p50_ms") or 1e9),
                f"in ISR {_phase(m, 'slow-in-isr').get('p50_ms')} ms, out "
                f"{_phase(m, 'slow-out-of-isr').get('p50_ms')} ms, baseline "
                f"{_phase(m, 'baseline').get('p50_ms')} ms",
            ),
            *zero_loss(m),
        ],
        acks="all",
        rate=250,
        size=1000,
        needs_tc=True,
    ),
    Scenario(
        "p1-follower-cut-from-leader",
        "scenario 1: follower cannot reach the leader",
        "REQ-P1, R6, R21",
        "the follower leaves the ISR, rejoins after healing; no split brain, no loss",
        _follower_cut_from_leader,
        lambda m: [
            leader_changed(m, False),
            phase_acks(m, "cut", ">", 0),
            final_isr_full(m),
            *zero_loss(m),
        ],
    ),
    Scenario(
        "p2-leader-cut-from-followers",
        "scenario 2: leader reaches no follower",
        "REQ-P2, R6, R8",
        "ISR shrinks to the leader; no split brain; writes "
        "go on without redundancy (min ISR 1); no loss",
        _leader_cut_from_followers,
        lambda m: [
            leader_changed(m, False),
            phase_acks(m, "isr-leader-only", ">", 0),
            final_isr_full(m),
            *zero_loss(m),
        ],
    ),
    Scenario(
        "p3-follower-cut-from-zk",
        "scenario 3: follower reaches the leader, not ZooKeeper",
        "REQ-P3, R12",
        "ZooKeeper marks the follower dead; the controller takes it out of the ISR "
        "(same epoch) and it rejoins once registered again; nothing else happens",
        _follower_cut_from_zookeeper,
        lambda m: [
            leader_changed(m, False),
            phase_acks(m, "expired", ">", 0),
            # Where Odradek differs from the documents' "it stays in the ISR": as Kafka's
            # controller does on a broker failure, a follower whose session ended leaves
            # the ISR, and (KIP-841) its leader takes it back only once it is registered
            # again -- a broker without a session may come back with any log, and an ISR
            # naming it could elect it (docs/requirements.md, P3). What was checked before,
            # "an ISR of 3 seen during the phase", held only when the poller read the
            # state znode before the controller's write: a race, which failed once.
            isr_seen(
                m,
                "expired",
                lambda i: len(i) == 2,
                "the controller takes the expired follower out",
            ),
            isr_always(
                m, "expired", lambda i: len(i) >= 2, "the leader and the other follower stay"
            ),
            final_isr_full(m),
            *zero_loss(m),
        ],
    ),
    Scenario(
        "p4-leader-cut-from-zk-acks1",
        "scenario 4, acks=1: leader reaches followers, not ZooKeeper",
        "REQ-P4, R13",
        "a new leader is elected; the old one accepts acks=1 writes until its ISR shrink "
        "fails, then rejects; those records are lost on healing (brief split brain)",
        _leader_cut_from_zookeeper,
        lambda m: [
            leader_changed(m),
            _cmp(m, "lost", ">", 0),
            _cmp(m, "split_brain_acks", ">", 0),
            split_brain_bounded(m),
            *no_divergence(m),
            final_isr_full(m),
            *ledger_accounts(m, with_isr=False),
        ],
        acks="1",
    ),
    Scenario(
        "p4-leader-cut-from-zk-acksall",
        "scenario 4, acks=all",
        "REQ-P4, R7",
        "acks=all writes to the deposed leader fail; no loss",
        _leader_cut_from_zookeeper,
        lambda m: [leader_changed(m), *zero_loss(m), final_isr_full(m)],
    ),
    Scenario(
        "p5-follower-isolated",
        "scenario 5: follower cut off from everyone",
        "REQ-P5, R6, R21",
        "it leaves the ISR and rejoins after healing; no loss",
        _follower_isolated,
        lambda m: [
            leader_changed(m, False),
            phase_acks(m, "isolated", ">", 0),
            final_isr_full(m),
            *zero_loss(m),
        ],
    ),
    Scenario(
        "p6-leader-isolated-acks1",
        "scenario 6, acks=1: leader cut off from everyone (clients still reach it)",
        "REQ-P6",
        "it accepts acks=1 writes briefly, fails to shrink the ISR and stops; a new leader "
        "is elected; on healing it truncates: those records are lost",
        _leader_isolated,
        lambda m: [
            leader_changed(m),
            _cmp(m, "lost", ">", 0),
            split_brain_bounded(m),
            *no_divergence(m),
            final_isr_full(m),
            *ledger_accounts(m, with_isr=False),
        ],
        acks="1",
    ),
    Scenario(
        "p6-leader-isolated-acksall",
        "scenario 6, acks=all",
        "REQ-P6, R7",
        "acks=all writes to the isolated leader fail; no loss",
        _leader_isolated,
        lambda m: [leader_changed(m), *zero_loss(m), final_isr_full(m)],
    ),
    Scenario(
        "p6-shrunk-isolated-minisr1",
        "scenario 6 variant: ISR already the leader alone, "
        "then isolated; acks=all, min ISR 1, unclean on",
        "REQ-P6, R8, R10",
        "the isolated leader keeps accepting even acks=all writes (its ISR is itself); "
        "all lost once the new leader takes over",
        _leader_isolated_after_isr_shrank,
        lambda m: [
            leader_changed(m),
            _cmp(m, "lost", ">", 0),
            _cmp(m, "split_brain_acks", ">", 0),
            *no_divergence(m, unclean=True),
            *ledger_accounts(m),
        ],
        acks="all",
        unclean=True,
    ),
    Scenario(
        "p6-shrunk-isolated-minisr2",
        "scenario 6 variant with min ISR 2",
        "REQ-P6, R8",
        "min.insync.replicas=2 refuses the writes "
        "(NOT_ENOUGH_REPLICAS): nothing acknowledged, nothing lost",
        _leader_isolated_after_isr_shrank,
        lambda m: [
            phase_errors(m, "isr-leader-only", NER, ">", 0),
            phase_acks(m, "isr-leader-only", "==", 0),
            _cmp(m, "lost", "==", 0),
            *no_divergence(m, unclean=True),
        ],
        acks="all",
        unclean=True,
        min_isr=2,
        producer_extra=_NO_RETRY,
    ),
    Scenario(
        "p7-controller-cut-from-brokers",
        "scenario 7: controller cannot reach the brokers; the leader dies meanwhile",
        "REQ-P7, R13",
        "leadership still changes (propagated through ZooKeeper here); no split brain, no loss",
        _controller_cut_from_brokers,
        lambda m: [
            leader_changed(m),
            phase_acks(m, "failover-during-cut", ">", 0),
            _cmp(m, "split_brain_acks", "==", 0),
            *zero_loss(m),
        ],
    ),
    Scenario(
        "p8-controller-cut-from-zk",
        "scenario 8: controller cannot reach ZooKeeper",
        "REQ-P8, R12, R13",
        "ZooKeeper elects a new controller; the old one does "
        "nothing and rejoins as a normal broker; no leader change, no loss",
        _controller_cut_from_zookeeper,
        lambda m: [
            Check(
                "a new controller was elected",
                len(set(m.get("controllers_seen") or [])) >= 2,
                str(m.get("controllers_seen")),
            ),
            leader_changed(m, False),
            phase_acks(m, "new-controller", ">", 0),
            *zero_loss(m),
        ],
    ),
    Scenario(
        "all-replicas-crash",
        "every replica SIGKILLed at once, then restarted",
        "REQ-R15, R18, R22",
        "records only in the page cache may be lost on a machine "
        "crash (a process kill keeps the page cache); replicas must converge without "
        "divergence",
        _all_crash,
        lambda m: [
            report(m, "lost", "R18: acknowledged from memory"),
            *no_divergence(m),
            phase_acks(m, "restarted", ">", 0),
            final_isr_full(m),
        ],
        acks="all",
        min_isr=2,
    ),
    Scenario(
        "all-crash-durable",
        "every replica SIGKILLed at once; odradek.ack.fsync=true",
        "REQ-R7, R18, R22 (beyond Kafka)",
        "nothing acknowledged is lost: acks=all "
        "answers only once every ISR member fsynced the record",
        _all_crash,
        lambda m: [*zero_loss(m), phase_acks(m, "restarted", ">", 0), final_isr_full(m)],
        acks="all",
        min_isr=2,
        topic_config=_DURABLE,
    ),
    Scenario(
        "all-crash-power-loss",
        "every replica SIGKILLed at once, then a simulated "
        "power loss (unflushed data cut); Kafka's default flush policy",
        "REQ-R18, R22, R27",
        "acknowledged records that were only in the page cache "
        "are lost; replicas still converge without divergence",
        _all_crash_power_loss,
        lambda m: [
            _cmp(m, "lost", ">", 0),
            *no_divergence(m, unclean=True),
            phase_acks(m, "restarted", ">", 0),
            final_isr_full(m),
        ],
        acks="all",
        min_isr=2,
        fsync_ledger=True,
    ),
    Scenario(
        "all-crash-durable-power-loss",
        "every replica SIGKILLed at once, then a simulated power loss; odradek.ack.fsync=true",
        "REQ-R7, R18, R22 (beyond Kafka)",
        "zero loss, and no dirty reads: consumers only ever see fsynced data (below the HW)",
        _all_crash_power_loss,
        lambda m: [*zero_loss(m), phase_acks(m, "restarted", ">", 0), final_isr_full(m)],
        acks="all",
        min_isr=2,
        topic_config=_DURABLE,
        fsync_ledger=True,
    ),
]


def get(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(f"no scenario {name!r}; `odradek chaos list` shows them")


# ----------------------------------------------------------------- running


def _create_topic(
    bootstrap: str,
    topic: str,
    assignment: list[int],
    config: dict[str, str],
    security: Mapping[str, str] | None = None,
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **client_logging(), **(security or {})})
    nt = NewTopic(topic, num_partitions=1, replica_assignment=[assignment], config=config)
    admin.create_topics([nt], operation_timeout=30)[topic].result(30)


def run_scenario(
    scn: Scenario,
    run_dir: Path,
    *,
    log: Callable[[str], None] = print,
    security: str = "plaintext",
    hosts: str = "loopback",
) -> ScenarioResult:
    """Run one scenario; its history goes to ``run_dir/<name>/``. Faults are always
    healed and the cluster always brought down, even on failure. ``security``:
    ``sasl_ssl`` runs it on a secured cluster (TLS + SCRAM, as ``cluster up
    --security sasl_ssl``): the same faults, every client authenticated. ``hosts``:
    ``netns`` puts every node in its own network namespace (``cluster up --hosts
    netns``); links are then cut inside the namespaces."""
    d = Path(run_dir) / scn.name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    h = History(scn.name)
    t0 = time.monotonic()
    res = ScenarioResult(scn.name, d, 0.0)
    topic = f"chaos-{scn.name}"
    log(f"== {scn.name}: {scn.title}")
    from odradek.storage.durability import LEDGER_ENV

    saved = os.environ.get(LEDGER_ENV)
    if scn.fsync_ledger:
        os.environ[LEDGER_ENV] = "1"  # inherited by every broker process of this run
    try:
        _run_on_cluster(scn, d, h, res, topic, log, security, hosts)
    except Exception as e:  # the cluster did not start, faults unavailable...
        res.error = res.error or f"{type(e).__name__}: {e}"
        log(f"   error: {res.error}")
        h.write(d)
    finally:
        if scn.fsync_ledger:
            if saved is None:
                os.environ.pop(LEDGER_ENV, None)
            else:
                os.environ[LEDGER_ENV] = saved
    res.seconds = time.monotonic() - t0
    return res


def _run_on_cluster(
    scn: Scenario,
    d: Path,
    h: History,
    res: ScenarioResult,
    topic: str,
    log: Callable[[str], None],
    security: str = "plaintext",
    hosts: str = "loopback",
) -> None:
    from odradek.cluster.local import LocalCluster

    with LocalCluster.start(
        d / "cluster",
        3,
        broker_config=FAST_BROKER_CONFIG,
        zk_session_timeout_ms=ZK_SESSION_MS,
        security=security,
        hosts=hosts,
    ) as c:
        sec = c.client_config()  # {} on a plaintext cluster
        faults = Faults(c, on_event=lambda k, detail: h.event(k, detail), need_tc=scn.needs_tc)
        poller = MetadataPoller(h, c, topic)
        producer: ProducerWorkload | None = None
        consumer: LiveConsumer | None = None
        try:
            deadline = time.monotonic() + 20
            while c.controller_id() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            ctl = c.controller_id() or 1
            L, X = [b.id for b in c.brokers if b.id != ctl][:2]
            _create_topic(
                c.bootstrap_servers,
                topic,
                [L, X, ctl],
                {
                    "min.insync.replicas": str(scn.min_isr),
                    "unclean.leader.election.enable": str(scn.unclean).lower(),
                    **scn.topic_config,
                },
                sec,
            )
            poller.start()
            producer = ProducerWorkload(
                h,
                c.bootstrap_servers,
                topic,
                acks=scn.acks,
                idempotence=scn.idempotence,
                rate=scn.rate,
                size=scn.size,
                extra={**scn.producer_extra, **sec},
            )
            ctx = Ctx(scn, c, faults, h, poller, producer, topic, L, X, ctl)
            ctx.wait(
                lambda: ctx.leader() == L and len(ctx.isr()) == 3, 30, f"leader {L} with a full ISR"
            )
            h.event("note", f"roles: leader {L}, follower {X}, controller {ctl}")
            consumer = LiveConsumer(h, c.bootstrap_servers, topic, extra=sec).start()
            ctx.phase("steady")
            producer.start()
            ctx.wait(lambda: producer.acked >= 50, 30, "50 acknowledged records")
            scn.body(ctx)
            faults.heal_all()
            for b in c.brokers:
                if c.broker_state(b.id) != "running":
                    faults.restart(b.id)
            ctx.phase("healed")
            ctx.wait(
                lambda: len(ctx.isr()) == 3 and ctx.leader() >= 0,
                40,
                "a leader and a full ISR after healing",
            )
            a = producer.acked
            ctx.wait(lambda: producer.acked >= a + 50, 30, "50 acks after healing")
        except Exception as e:  # a finding: recorded, the run goes on to the checker
            res.error = f"{type(e).__name__}: {e}"
            h.event("note", f"scenario error: {res.error}")
            log(f"   error: {res.error}")
        finally:
            wind_down(faults, producer, consumer)
            try:
                restart_stopped_brokers(c)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    poller.poll_once()
                    if len(poller.state.get(0, (0, 0, []))[2]) == 3:
                        break
                    time.sleep(0.1)
                final_read(h, c.bootstrap_servers, topic, extra=sec)
            except Exception as e:
                h.event("note", f"final read failed: {e!r}")
                res.error = res.error or f"final read failed: {e!r}"
            poller.stop()
            c.down()
            dump_replicas(h, c, topic)
            try:
                dump_ledger(d, c, topic, scn.name)
            except Exception as e:  # the checker then reports the ledger as missing
                h.event("note", f"ledger dump failed: {e!r}")
            h.write(d)


def dump_ledger(d: Path, cluster: Any, topic: str, scenario: str) -> None:
    """Every broker's lost-records ledger for ``topic`` as ``d/ledger.parquet``: one row
    per quarantined record (its value names the send), so the checker can tell which
    acknowledged-but-lost records were kept (issue 6 item 5)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from odradek.chaos.workload import decode_seq
    from odradek.storage.truncation_ledger import ledger_root, list_entries

    rows: list[tuple[Any, ...]] = []
    for b in cluster.brokers:
        for e in list_entries(ledger_root(b.log_dir), topic):
            for r in e.iter_records():
                rows.append(
                    (
                        scenario,
                        b.id,
                        r.partition,
                        r.offset,
                        decode_seq(r.value),
                        r.leader_epoch,
                        e.new_leader_epoch,
                        e.below_high_watermark,
                        e.reason,
                        e.time_ms / 1000,
                    )
                )
    names = [
        "scenario",
        "broker",
        "partition",
        "offset",
        "seq",
        "epoch",
        "new_leader_epoch",
        "below_hw",
        "reason",
        "ts",
    ]
    types = [
        pa.string(),
        pa.int32(),
        pa.int32(),
        pa.int64(),
        pa.int64(),
        pa.int32(),
        pa.int32(),
        pa.bool_(),
        pa.string(),
        pa.float64(),
    ]
    cols = list(zip(*rows)) if rows else [[] for _ in names]
    pq.write_table(
        pa.table({n: pa.array(list(c), type=t) for n, c, t in zip(names, cols, types)}),
        d / "ledger.parquet",
    )


def evaluate(scn: Scenario, res: ScenarioResult, metrics: Metrics) -> None:
    res.metrics = metrics
    res.checks = (
        scn.expect(metrics) if metrics else [Check("checker produced metrics", False, "none")]
    )


def run_scenarios(
    names: list[str],
    run_dir: Path,
    *,
    log: Callable[[str], None] = print,
    spark: Any | None = None,
    security: str = "plaintext",
    hosts: str = "loopback",
) -> list[ScenarioResult]:
    """Run the scenarios one after another, then check all of them in one Spark session."""
    from odradek.chaos.checker import check_run

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    scns = [get(n) for n in names]
    results = [run_scenario(s, run_dir, log=log, security=security, hosts=hosts) for s in scns]
    log("== checking the histories on Spark")
    metrics = check_run(run_dir, spark=spark)
    for s, r in zip(scns, results):
        evaluate(s, r, metrics.get(s.name, {}))
    return results
