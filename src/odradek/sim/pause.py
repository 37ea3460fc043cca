"""The ``pause`` profile of ``odradek sim``: a nemesis that also freezes a broker, as
SIGSTOP then SIGCONT would (the real-process chaos suite's ``pause`` fault), or blocks
its event loop alone (a ``stall``: a long GC pause, a blocking call on the loop thread).

A paused broker runs nothing (``odradek.sim.gate``): none of its tasks, timers, request
handlers, ZooKeeper threads or image applications. What reaches it waits and is handled
when it resumes; it sends nothing meanwhile. Its ZooKeeper session stops heartbeating, so
a pause longer than the session timeout expires it in ZooKeeper (its ephemeral
registration goes, the others' watches fire, the controller acts); on resume the broker
finds its session expired and does what the real one does after kazoo's LOST: a new
session, registered again (``MetadataStore``). A shorter pause keeps the session, and its
held watch events are delivered on resume, in order. A stalled broker's threads (its
ZooKeeper client, metadata store, controller) run on: its session lives, and the images
they publish wait for the loop, which on resume applies them before it reads what
reached its sockets (asyncio's order).

Both are the setting of KIP-841: a leader frozen with a follower's fetch already
received, the follower dying and its session expiring meanwhile, the controller taking
it out of the ISR; the leader resumes, reads the stale fetch and (without KIP-841) puts
the dead follower back. The invariant that sees an ISR naming an unregistered follower
is ``isr-unregistered`` (``odradek.sim.isr_registered``, checked in every run on the
real controller).

The client workloads (``--workload idempotent|transactional``, odradek.sim.clients) and
the transaction coordinator's model are nodes no pause names (0 and ``COORDINATOR``);
each of their requests crosses the network with ``GatedNetwork.hop``, so from the moment
it arrives it is the broker's (held while the broker is paused, handled on resume in
arrival order) and its answer is the sender's again once it crosses back. A hop that
raises leaves the task with the world (0): a broker's own request that failed (KIP-890's
verification with the coordinator) moves back with ``GatedNetwork.back``.

The ``pause-timeouts`` profile is this one with the clients' ``request.timeout.ms`` and
``delivery.timeout.ms`` shorter than the pauses (``TIMEOUTS_PROFILE``; odradek.sim.inflight,
"Timeouts"): a Produce held by a paused broker times out, the client closes the
connection and retries elsewhere or later, and the broker handles the held request on
resume, answering no one -- the client gave up on a request the broker then writes.

Not modelled: a pause of the whole machine (the other processes on it run on), a clock
jump seen by the paused process (virtual time is one clock), and TCP towards brokers:
a broker's own message (a fetch, a verification) to a paused broker waits however long
the pause lasts, with no timeout. Under ``pause`` the clients have none either (their
``request.timeout.ms``, 30 s by default, is ten times the longest pause drawn, 3 s). A ZooKeeper cut of a paused broker takes effect at once (its client's
listeners run then, a simplification); a ZooKeeper heal waits for its resume. The profile
runs on the real controller only.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.replication.leader_endpoint import EpochRequest, EpochResult
from odradek.replication.replica_manager import ReplicaManager
from odradek.sim.gate import ARRIVED, NODE, RANK, GatedSimLoop, run_as
from odradek.sim.schedule import FaultSpec
from odradek.sim.world import SimHarness, SimNetwork, World, _Fault, _InFlightEndpoint
from odradek.sim.zk_cluster import ZkCluster

__all__ = ["TIMEOUTS_PROFILE", "GatedNetwork", "PauseHarness", "PauseWorld", "check_profile"]

# The pause-timeouts profile's (request.timeout.ms, delivery.timeout.ms), in seconds: a
# request held by a pause of 0.3-3 s often outlasts the first; a pause past 2 s, with the
# retries' back-off, the second (Java requires delivery >= request timeout + linger.ms).
TIMEOUTS_PROFILE = (1.0, 3.0)


async def _arrive(node: int) -> None:
    """The running task is ``node``'s from now: its next step passes that node's gate
    (held, it is a message that reached the node's socket: ``ARRIVED``)."""
    NODE.set(node)
    RANK.set(ARRIVED)
    try:
        await asyncio.sleep(0)
    finally:
        RANK.set(2)


class GatedNetwork(SimNetwork):
    """``SimNetwork`` whose messages belong to the wire while in flight (a paused sender
    does not hold them back) and to the receiver once arrived (a paused receiver holds
    them, in arrival order)."""

    async def hop(self, src: int, dst: int) -> None:
        NODE.set(0)
        await super().hop(src, dst)  # raises on a broken link: the caller moves back (back)
        await _arrive(dst)

    async def back(self, node: int) -> None:
        await _arrive(node)


class _GatedEndpoint(_InFlightEndpoint):
    async def offsets_for_leader_epoch(self, requests: list[EpochRequest]) -> list[EpochResult]:
        # Runs in the follower's fetcher task (a fetch runs in a task of its own): back to
        # the follower whatever the outcome.
        try:
            return await super().offsets_for_leader_epoch(requests)
        finally:
            await _arrive(self.follower)


@dataclass
class PauseHarness(SimHarness):
    """A broker's start belongs to the broker; a client's request to the broker it is sent
    to (held while that broker is paused), its answer back to the client."""

    def start_broker(self, b: int) -> ReplicaManager:
        rm: ReplicaManager = run_as(b, super().start_broker, b)
        return rm

    def _endpoint_factory(self, follower: int) -> Callable[[int, str, int], Any]:
        return lambda leader, _host, _port: _GatedEndpoint(self, follower, leader)

    async def produce(self, broker: int, records: bytes, **kw: Any) -> Any:
        me = NODE.get()
        await _arrive(broker)
        try:
            return await super().produce(broker, records, **kw)
        finally:
            await _arrive(me)


@dataclass
class PauseWorld(World):
    share: float = 0.3  # of injected faults that try a pause or a stall first
    pause_s: tuple[float, float] = (0.3, 3.0)
    # broker -> (its fault's id, "pause" or "stall")
    paused: dict[int, tuple[int, str]] = field(default_factory=dict)
    _heal_on_resume: set[int] = field(default_factory=set)

    @property
    def loop(self) -> GatedSimLoop:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, GatedSimLoop)
        return loop

    # ---------------------------------------------------------------- the fault
    def draw(self, rng: random.Random, fault_id: int) -> FaultSpec:
        if rng.random() < self.share:
            kind = rng.choice(("pause", "stall"))
            p = rng.randrange(self.cfg.partitions)
            leader = self.controller.znodes[p].leader
            # The leader most of the time: a frozen leader holding fetches is KIP-841's case.
            target = leader if leader > 0 and rng.random() < 0.7 else rng.choice(self.cfg.brokers)
            seconds = round(rng.uniform(*self.pause_s), 3)
            return FaultSpec(fault_id, kind, p, target, target, seconds)
        return super().draw(rng, fault_id)

    async def inject(self, f: FaultSpec) -> _Fault:
        if f.kind not in ("pause", "stall"):
            return await super().inject(f)
        b = f.target
        if b in self.h.down or b in self.paused:
            self.trace(f"nemesis: no {f.kind} of broker {b} (down or paused)")
            return _Fault(f"no {f.kind} {b}", lambda: None)
        self.pause(b, f.param, f.id, f.kind)
        return _Fault(f"{f.kind} {b}", lambda: self.resume(b, f.id))

    def pause(self, b: int, seconds: float, fid: int, kind: str = "pause") -> None:
        """``pause``: SIGSTOP, the whole process; ``stall``: its event loop only (its
        ZooKeeper client, metadata store and controller threads run on, so its session
        lives and the images they publish queue up for the loop)."""
        what = "pause broker" if kind == "pause" else "stall the event loop of broker"
        self.trace(f"nemesis: {what} {b} for {seconds:.3f} s")
        self.paused[b] = (fid, kind)
        self.loop.pause(b)
        if kind == "pause":
            self.loop.pause(-b)
            # Its session stops heartbeating: ZooKeeper expires it after the timeout.
            self._expire_later(b, lambda: self.paused.get(b) == (fid, kind))
        self.loop.call_later(seconds, self.resume, b, fid)

    def resume(self, b: int, fid: int) -> None:
        got = self.paused.get(b)
        if got is None or got[0] != fid:
            return  # resumed already (healed early, or crashed)
        del self.paused[b]
        kind = got[1]
        n = self.loop.resume(-b) + self.loop.resume(b)
        self.trace(f"nemesis: resume broker {b} ({n} callbacks held)")
        if kind == "stall":
            return
        c = self.controller
        assert isinstance(c, ZkCluster)
        node = c.nodes.get(b)
        if node is not None and b not in c.unreachable and not node.client.session_alive:
            # kazoo on SIGCONT: the connection is gone (SUSPENDED), the session with it
            # (LOST), then a new session (CONNECTED): the store registers again.
            def renew() -> None:
                node.client.cut()
                c.zk_uncut(b)

            run_as(-b, renew)
        if b in self._heal_on_resume:
            self._heal_on_resume.discard(b)
            run_as(-b, super().zk_heal, b)

    def resume_all(self) -> None:
        for b, (fid, _kind) in sorted(self.paused.items()):
            self.resume(b, fid)

    # ------------------------------------------------------- other faults on a paused node
    async def crash(self, b: int) -> None:
        if b in self.paused:
            # kill -9 of a stopped process: what it held dies with it (its tasks are
            # cancelled at once; a held message finds the process gone).
            del self.paused[b]
            self.loop.resume(-b)
            self.loop.resume(b)
            self._heal_on_resume.discard(b)
        await super().crash(b)

    def zk_heal(self, b: int) -> None:
        if self.paused.get(b, (0, ""))[1] == "pause":
            self._heal_on_resume.add(b)  # its client reconnects once it runs again
            return
        super().zk_heal(b)


def check_profile(real_controller: bool) -> None:
    if not real_controller:
        raise ValueError("the pause profile runs on the real controller")
