"""The ``pause`` profile (odradek.sim.gate, odradek.sim.pause): a paused node runs nothing,
what reached it runs on resume in the order it arrived, a pause longer than the session
timeout expires the broker's ZooKeeper session and the broker registers again on
resume; and the profile finds ``no-isr-eligibility`` (KIP-841 off), which no other
profile does."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from itertools import pairwise
from types import SimpleNamespace
from typing import cast

import pytest

from odradek.errors import ErrorCode
from odradek.sim.gate import ARRIVED, NODE, THREADSAFE, GatedSimLoop, owned_by, run_as
from odradek.sim.pause import GatedNetwork
from odradek.sim.runner import run_seed
from odradek.sim.schedule import FaultSpec, Step
from odradek.sim.txn_coordinator import COORDINATOR, SimTxnCoordinator, SimVerifier
from odradek.sim.world import World, WorldConfig

IDEMPOTENT = replace(WorldConfig(), workload="idempotent")
TRANSACTIONAL = replace(WorldConfig(), workload="transactional", partitions=2)


def _run(loop: GatedSimLoop, coro: object) -> None:
    try:
        loop.run_until_complete(coro)  # type: ignore[arg-type]
    finally:
        loop.close()


def test_a_paused_node_runs_nothing_and_runs_what_it_held_on_resume_in_order() -> None:
    loop = GatedSimLoop(1)
    ran: list[tuple[float, str]] = []

    def note(what: str) -> None:
        ran.append((loop.time(), what))

    async def main() -> None:
        loop.pause(2)
        # Timers of node 2 coming due while it is paused, a message-like call_soon, and
        # node 1's timer in between: node 1 runs on time, node 2 nothing until resume.
        loop.call_later(0.3, note, "2: second", context=owned_by(loop, 2))
        loop.call_later(0.1, note, "2: first", context=owned_by(loop, 2))
        loop.call_later(0.2, note, "1: on time", context=owned_by(loop, 1))
        loop.call_soon(note, "2: arrived", context=owned_by(loop, 2))
        cancelled = loop.call_later(0.15, note, "2: cancelled", context=owned_by(loop, 2))
        await asyncio.sleep(0.5)
        assert ran == [(0.2, "1: on time")]
        assert loop.paused(2)
        cancelled.cancel()  # cancelled while held: it never runs
        assert loop.resume(2) == 4
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    _run(loop, main())
    assert ran == [
        (0.2, "1: on time"),
        (0.5, "2: arrived"),
        (0.5, "2: first"),
        (0.5, "2: second"),
    ]


def test_a_paused_nodes_tasks_stop_and_a_task_moving_to_it_waits() -> None:
    """A task belongs to the node that created it; one that sets NODE (a message crossing
    the network to its receiver) is gated by its new owner from its next step on."""
    loop = GatedSimLoop(1)
    steps: list[tuple[float, str]] = []

    async def ticker() -> None:
        for _ in range(5):
            steps.append((loop.time(), f"tick {NODE.get()}"))
            await asyncio.sleep(0.1)

    async def request() -> None:
        NODE.set(3)  # handed to node 3
        await asyncio.sleep(0)
        steps.append((loop.time(), "request handled by 3"))

    async def main() -> None:
        t = run_as(3, loop.create_task, ticker())
        await asyncio.sleep(0.15)
        loop.pause(3)
        r = loop.create_task(request())
        await asyncio.sleep(1.0)
        assert not r.done()
        loop.resume(3)
        await asyncio.gather(t, r)

    _run(loop, main())
    assert steps == [
        (0.0, "tick 3"),
        (0.1, "tick 3"),
        (1.15, "request handled by 3"),  # arrived at 0.15, before the tick due at 0.2
        (1.15, "tick 3"),
        (pytest.approx(1.25), "tick 3"),
        (pytest.approx(1.35), "tick 3"),
    ]


def test_on_resume_what_threads_queued_runs_first_then_arrivals_then_timers() -> None:
    """asyncio's order after a blocked loop: the ready queue (what other threads handed
    it: the metadata images) before the sockets' data, before the timers that expired."""
    loop = GatedSimLoop(1)
    ran: list[str] = []

    async def main() -> None:
        loop.pause(2)
        loop.call_later(0.1, ran.append, "timer", context=owned_by(loop, 2))
        loop.call_later(0.2, ran.append, "fetch", context=owned_by(loop, 2, ARRIVED))
        loop.call_later(0.3, ran.append, "image", context=owned_by(loop, 2, THREADSAFE))
        loop.call_later(0.4, ran.append, "produce", context=owned_by(loop, 2, ARRIVED))
        await asyncio.sleep(1)
        assert ran == []
        loop.resume(2)
        await asyncio.sleep(0)

    _run(loop, main())
    assert ran == ["image", "fetch", "produce", "timer"]


def _pause_plan(seconds: float) -> list[Step]:
    # Broker 1 leads p0 (the first controller elects it); pause it 2 s into the run.
    return [Step(2.0, fault=FaultSpec(0, "pause", 0, 1, 1, seconds)), Step(6.0)]


def _between(timeline: list[str], start: str, end: str) -> list[str]:
    i = next(k for k, line in enumerate(timeline) if start in line)
    j = next(k for k, line in enumerate(timeline) if k > i and end in line)
    return timeline[i + 1 : j]


def test_a_paused_leader_handles_nothing_and_keeps_a_short_pauses_session() -> None:
    r = run_seed(1, profile="pause", plan=_pause_plan(1.0))
    assert r.ok, r.violations
    during = _between(r.timeline, "nemesis: pause broker 1", "nemesis: resume broker 1")
    # Nothing acknowledged (the leader handles no produce, no follower fetch), no ISR
    # write and no state change of broker 1, and its session lives (1.0 s < 1.5 s).
    assert during == [], during
    resumed = next(line for line in r.timeline if "nemesis: resume broker 1" in line)
    assert int(resumed.split("(")[1].split()[0]) >= 3  # the followers' fetches, at least
    assert not any("broker 1 session expired" in line for line in r.timeline)
    after = r.timeline[r.timeline.index(resumed) + 1 :]
    assert any(line.split()[1] == "ack" and "from 1" in line for line in after[:20])


def test_a_pause_longer_than_the_session_timeout_expires_the_session() -> None:
    r = run_seed(1, profile="pause", plan=_pause_plan(2.5))
    assert r.ok, r.violations
    during = _between(r.timeline, "nemesis: pause broker 1", "nemesis: resume broker 1")
    # ZooKeeper expires the session 1.5 s in (the registration goes, the controller
    # elects another leader); broker 1 itself does nothing until it resumes.
    assert any("controller: broker 1 session expired" in line for line in during), during
    assert any("controller: p0 leader" in line for line in during), during
    assert not any(line.split()[1:3] == ["broker", "1"] for line in during), during
    after = _between(r.timeline, "nemesis: resume broker 1", "end:")
    # On resume it finds its session gone, and registers again (a new session).
    assert any("session lost" in line for line in after[:5]), after[:5]
    assert any("controller: broker 1 registered" in line for line in after[:5]), after[:5]


def test_a_pause_run_replays_to_the_same_timeline() -> None:
    a = run_seed(2, profile="pause")
    assert any("nemesis: pause broker" in line for line in a.timeline)
    assert run_seed(2, profile="pause").digest == a.digest
    assert run_seed(2, profile="pause", plan=a.schedule).timeline == a.timeline


def test_the_pause_profile_finds_no_isr_eligibility() -> None:
    """KIP-841 off (``no-isr-eligibility``), caught by ``isr-unregistered``: the first
    failing seed of ``sim run --profile pause --inject-bug no-isr-eligibility``
    (docs/faults.md, "Pause and stall"). Broker 3, cut from ZooKeeper, keeps fetching;
    its session expires, the controller takes it out of the ISR and the leader puts it
    back at its next fetch: without KIP-841 nothing takes it out again."""
    assert run_seed(10, profile="pause").ok
    r = run_seed(10, profile="pause", bug="no-isr-eligibility")
    assert "isr-unregistered" in {v.invariant for v in r.violations}, r.violations


def test_a_fixed_pause_seed_range_holds_every_invariant() -> None:
    """CI's range of the profile (beside test_sim_runs.py's default range)."""
    failed = {}
    for seed in range(1, 7):
        r = run_seed(seed, profile="pause", timeline=False)
        if not r.ok:
            failed[seed] = [str(v) for v in r.violations[:3]]
    assert failed == {}


def test_a_stalled_loop_keeps_its_session_and_its_controller_thread_runs() -> None:
    """``stall``: broker 1's event loop is blocked 3 s (its partition's leader, and the
    controller). Broker 3 crashes meanwhile: broker 1's controller thread still takes it
    out of the ISR when its session expires, broker 1's own session lives, and its loop
    handles nothing until it resumes."""
    plan = [
        Step(2.0, fault=FaultSpec(0, "stall", 0, 1, 1, 3.0)),
        Step(0.1, fault=FaultSpec(1, "crash", 0, 3, 1)),
        Step(6.0),
    ]
    r = run_seed(1, profile="pause", plan=plan)
    assert r.ok, r.violations
    during = _between(r.timeline, "nemesis: stall the event loop of broker 1", "resume broker 1")
    assert any("controller: broker 3 session expired" in line for line in during), during
    assert any("controller: p0 leader 1" in line and "isr [1, 2]" in line for line in during)
    assert not any("broker 1 session expired" in line for line in r.timeline)
    assert not any(
        line.split()[1:3] == ["broker", "1"] or "ISR write by 1" in line for line in during
    ), during


def test_a_stalled_leader_reads_a_dead_followers_late_fetch_kip_841() -> None:
    """The production interleaving behind KIP-841, as a fixed schedule: leader 1 (also the
    controller) stalls 3 s with follower 3's fetch arrived; 3 crashes; its session expires
    and 1's controller thread takes it out of the ISR. On resume 1 applies that image
    first, then reads the stale fetch: without KIP-841 it puts the dead broker back (seed
    5 of this schedule; 10 of seeds 1-120), with it the write leaves 3 out."""
    plan = [
        Step(2.0, fault=FaultSpec(0, "stall", 0, 1, 1, 3.0)),
        Step(0.05, fault=FaultSpec(1, "crash", 0, 3, 1)),
        Step(8.0),
    ]
    bad = run_seed(5, profile="pause", plan=plan, bug="no-isr-eligibility")
    assert "isr-unregistered" in {v.invariant for v in bad.violations}, bad.violations
    after = _between(bad.timeline, "controller: broker 3 session expired", "end:")
    resumed = next(k for k, line in enumerate(after) if "resume broker 1" in line)
    assert any("ISR write by 1: p0 epoch 0 isr [1, 2, 3]" in x for x in after[resumed:][:10])
    good = run_seed(5, profile="pause", plan=plan)
    assert good.ok, good.violations
    after = _between(good.timeline, "controller: broker 3 session expired", "restart broker 3")
    assert not any("ISR write by 1" in x and "3]" in x for x in after), after


def _acked(lines: list[str], producer: str) -> list[tuple[int, int]]:
    """``producer``'s acknowledged batches in acknowledgement order: (first record, last)."""
    out = []
    for line in lines:
        f = line.split()
        if f[1] == "ack" and f[2].startswith(producer + "-"):
            first = int(f[2].split("-")[1])
            out.append((first, first + int(f[3])))
    return out


def test_an_idempotent_producers_request_to_a_paused_leader_is_answered_after_resume() -> None:
    """The client workloads' requests pass the broker's gate (``GatedNetwork.hop``): the
    producers' batches to paused leader 1 wait in its socket, nothing is answered or
    retried during the pause, and on resume they are handled in the order sent -- each
    producer's next batch is the one after its last acknowledged (no loss, no retry)."""
    r = run_seed(1, profile="pause", plan=_pause_plan(1.0), cfg=IDEMPOTENT)
    assert r.ok, r.violations
    during = _between(r.timeline, "nemesis: pause broker 1", "nemesis: resume broker 1")
    assert during == [], during
    resumed = next(line for line in r.timeline if "nemesis: resume broker 1" in line)
    assert int(resumed.split("(")[1].split()[0]) >= 2  # the producers' batches, at least
    i = r.timeline.index(resumed)
    for k in ("i0", "i1"):
        before, after = _acked(r.timeline[:i], k), _acked(r.timeline[i + 1 :], k)
        assert before and after, k
        # Answered the moment broker 1 runs again (a few ms of network), in send order.
        first_after = next(line for line in r.timeline[i + 1 :] if f" ack {k}-" in line)
        assert float(first_after.split()[0]) - float(resumed.split()[0]) < 0.05, first_after
        assert "from 1" in first_after, first_after
        assert after[0][0] == before[-1][1] + 1, (k, before[-1], after[:3])
        assert all(b[0] == a[1] + 1 for a, b in pairwise(after)), after
    assert not any("no answer" in line for line in r.timeline), "a held request was lost"


@pytest.mark.parametrize(("cfg", "seed"), [(IDEMPOTENT, 2), (TRANSACTIONAL, 2)])
def test_a_client_workloads_pause_run_replays_to_the_same_digest(
    cfg: WorldConfig, seed: int
) -> None:
    a = run_seed(seed, profile="pause", cfg=cfg)
    assert a.ok, a.violations
    assert any(w in line for line in a.timeline for w in ("nemesis: pause", "nemesis: stall"))
    assert run_seed(seed, profile="pause", cfg=cfg).digest == a.digest


def test_a_brokers_verification_over_a_cut_link_stays_the_brokers() -> None:
    """KIP-890's verification is broker 2's request to the coordinator: when the link is
    cut the hop raises with the task handed to the wire (0); the produce handler goes on
    as broker 2's (``GatedNetwork.back``), so a pause of 2 still holds it."""
    loop = GatedSimLoop(1)
    net = GatedNetwork(random.Random(1), (0.001, 0.002))
    net.cut(2, COORDINATOR)
    # The verifier reaches the world only for its network; the coordinator is never asked.
    w = cast(World, SimpleNamespace(net=net))
    verifier = SimVerifier(w, 2, cast(SimTxnCoordinator, None))
    seen: list[tuple[int, object]] = []

    async def handler() -> None:
        codes = await verifier.verify("tx-0", 1000, 0, [("t", 0)], 1.0)
        seen.append((NODE.get(), codes[("t", 0)]))

    async def main() -> None:
        await loop.create_task(handler(), context=owned_by(loop, 2))

    _run(loop, main())
    assert seen == [(2, ErrorCode.network_exception)], seen


def test_a_paused_leader_reassigned_away_ledgers_its_acks_1_writes() -> None:
    """Seed 35 of ``sim run --profile pause --workload idempotent --acks 1``: leader 1 is
    paused 2.3 s with produce requests in its socket; p0 is moved off it and 2 elected
    meanwhile. On resume it acknowledges two held batches (acks=1) as the leader of epoch
    0 before it learns of the move, then deletes its replica: those records were on no
    other replica and, with no truncation, went to no ledger (``acked-lost-unledgered``).
    A replica reassigned away now quarantines what it holds above its high watermark."""
    r = run_seed(35, profile="pause", cfg=replace(IDEMPOTENT, acks=1))
    assert r.ok, r.violations[:3]
    resumed = _between(r.timeline, "nemesis: resume broker 1 (16", "nemesis: heal pause 1")
    assert any("ack i1-167 +2 p0 offset 326 from 1" in line for line in resumed), resumed[:10]
