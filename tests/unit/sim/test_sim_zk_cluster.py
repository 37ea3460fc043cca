"""Odradek's real controller in the simulator (odradek.sim.zk_cluster): every broker runs
its metadata store and a controller candidate over its own session of the ZooKeeper
model, driven by the simulator's loop. A controller failover: the successor is elected
with the next controller epoch, loads its context from ZooKeeper and continues; a deposed
controller's writes are fenced by ``/controller_epoch`` (REQ-P8, REQ-R13). Runs with it
replay to the same timeline and hold every invariant on a fixed seed range."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from typing import Any

import pytest

from odradek.controller.controller import Controller
from odradek.metadata.image import MetadataImage
from odradek.metadata.store import BrokersChanged, MetadataStore, PartitionStatesChanged
from odradek.runtime import clock
from odradek.sim.bugs import injected
from odradek.sim.harness import TOPIC
from odradek.sim.loop import SimLoop
from odradek.sim.runner import run_seed
from odradek.sim.scenarios import SCENARIOS, run_scenario
from odradek.sim.world import MODEL_WORLD, WorldConfig
from odradek.sim.zk_client import SimEnsemble, SimKazooClient
from odradek.sim.zk_cluster import ZkCluster
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import KafkaZkClient, StateWrite

REAL = WorldConfig(real_controller=True)


@pytest.fixture
def loop() -> Iterator[SimLoop]:
    lp = SimLoop(11)
    clock.install(lp.time, lambda: round(lp.time() * 1e9))
    try:
        yield lp
    finally:
        clock.restore()
        lp.close()


def _run(loop: SimLoop, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    loop.run_until_complete(main())


def test_a_controller_failover_continues_from_zookeeper(loop: SimLoop) -> None:
    lines: list[str] = []
    images: dict[int, list[MetadataImage]] = {1: [], 2: [], 3: []}

    async def main() -> None:
        c = ZkCluster((1, 2, 3), 3, 11, lines.append, loop)
        for b in (1, 2, 3):
            c.listeners.append(images[b].append)
        for b in (1, 2, 3):
            c.store_for(b, loop)
        c.started()
        await asyncio.sleep(1)
        assert (c.controller_id, c.controller_epoch) == (1, 1)
        assert [c.znodes[p].leader for p in range(3)] == [1, 2, 3]
        assert c.registered == {1, 2, 3}
        c.crashed(1)  # the controller, and leader of p0
        await asyncio.sleep(1.5)
        c.broker_failed(1)
        await asyncio.sleep(0.5)
        assert c.controller_id in (2, 3) and c.controller_epoch == 2
        z = c.znodes
        # The successor read everything from ZooKeeper: p0 moved to the next ISR
        # member with a new epoch; broker 1 left the other ISRs (same epoch).
        assert (z[0].leader, z[0].leader_epoch, z[0].isr) == (2, 1, (2, 3))
        assert [(z[p].leader, z[p].leader_epoch, z[p].isr) for p in (1, 2)] == [
            (2, 0, (2, 3)),
            (3, 0, (3, 2)),
        ]
        # Brokers learn it from the notifications, as real ones do.
        last = images[3][-1]
        assert last.topics[TOPIC].partitions[0].leader == 2 and sorted(last.brokers) == [2, 3]
        assert last.controller_id == c.controller_id

    _run(loop, main)
    assert f"controller: broker {1} session expired" in lines


def test_a_deposed_controllers_writes_are_fenced(loop: SimLoop) -> None:
    """Controller A loses its session while B takes over; A comes back on a new session
    still believing it leads (its thread had not yet heard of the change: the event
    reaches it after the batch it is in). Its write fails as a whole on the
    ``/controller_epoch`` check, it steps down, and the partition keeps B's state."""

    async def main() -> None:
        ens = SimEnsemble(loop, 11)
        admin = SimKazooClient(ens, "admin", 1e9)
        admin.start()
        znodes.ensure_base_paths(admin)  # type: ignore[arg-type]
        admin.create(
            znodes.topic_path(TOPIC),
            znodes.encode_topic(znodes.TopicAssignment(TOPIC, None, {0: [1, 2, 3]})),
        )
        regs = {}
        for b in (1, 2, 3):
            regs[b] = SimKazooClient(ens, f"registration {b}", 1.5)
            regs[b].start()
            regs[b].create(
                znodes.broker_path(b),
                znodes.encode_broker(znodes.BrokerRegistration.plaintext(b, "memory", b)),
                ephemeral=True,
            )
        a_zk, b_zk = SimKazooClient(ens, "a", 1.5), SimKazooClient(ens, "b", 1.5)
        a_zk.start()
        b_zk.start()
        a = Controller(KafkaZkClient(a_zk), 1)  # type: ignore[arg-type]
        b = Controller(KafkaZkClient(b_zk), 2)  # type: ignore[arg-type]
        a.start(threaded=False)
        assert a.step(a.take_batch()) == 0 and a.active and a.epoch == 1
        state_path = znodes.partition_state_path(TOPIC, 0)
        assert znodes.decode_partition_state(admin.get(state_path)[0]).isr == [1, 2, 3]
        a_zk.cut()
        a_zk.expire()  # /controller goes with A's session
        b.start(threaded=False)
        b.step(b.take_batch())
        assert b.active and b.epoch == 2
        a_zk.reconnect()  # a new session; A's thread is still in its old role
        assert a.active
        regs[3].expire()  # broker 3 dies: both would take it out of the ISR
        version = admin.get(state_path)[1].version
        assert a.step([BrokersChanged()]) == 0  # fenced: NotController, handled
        assert not a.active and a.has_events()  # and a fresh election queued
        assert admin.get(state_path)[1].version == version  # nothing of A's landed
        a.step(a.take_batch())
        assert not a.active  # B holds /controller
        b.step([BrokersChanged()])
        st = znodes.decode_partition_state(admin.get(state_path)[0])
        assert (st.isr, st.controller_epoch) == ([1, 2], 2)

    _run(loop, main)


def test_real_controller_runs_replay_and_hold_the_invariants() -> None:
    a, b = run_seed(3, cfg=REAL), run_seed(3, cfg=REAL)
    assert a.digest == b.digest and a.acked > 50
    assert any("is the controller (epoch 2)" in line for line in a.timeline)
    assert run_seed(3, cfg=REAL, plan=a.schedule).timeline == a.timeline
    failed = {}
    kinds = set()
    for seed in range(1, 16):
        r = run_seed(seed, cfg=REAL)
        kinds |= {s.fault.kind for s in r.schedule if s.fault is not None}
        if not r.ok:
            failed[seed] = [str(v) for v in r.violations[:3]]
    assert failed == {}
    assert "controller" in kinds


@pytest.mark.parametrize("name", sorted(n for n, sc in SCENARIOS.items() if not sc.real_controller))
def test_every_scenario_holds_with_the_modelled_controller(name: str) -> None:
    """The scenarios run on the real controller by default (test_sim_scenarios.py); the
    model (``--model-controller``) still plays those that do not need the real one."""
    run = run_scenario(SCENARIOS[name], 1, MODEL_WORLD)
    assert run.failures == [], run.failures
    assert not any(" is the controller " in line for line in run.result.timeline)


def _zk_cluster(loop: SimLoop) -> tuple[SimKazooClient, dict[int, SimKazooClient], Controller]:
    """An admin client, topic t (p0 on [1, 2, 3]), one registration session per broker,
    and controller 1 (its own session), elected: p0 led by broker 1 at epoch 0."""
    ens = SimEnsemble(loop, 11)
    admin = SimKazooClient(ens, "admin", 1e9)
    admin.start()
    znodes.ensure_base_paths(admin)  # type: ignore[arg-type]
    admin.create(
        znodes.topic_path(TOPIC),
        znodes.encode_topic(znodes.TopicAssignment(TOPIC, None, {0: [1, 2, 3]})),
    )
    regs = {b: _register(ens, b) for b in (1, 2, 3)}
    zk = SimKazooClient(ens, "controller", 1.5)
    zk.start()
    c = Controller(KafkaZkClient(zk), 9)  # type: ignore[arg-type]
    c.start(threaded=False)
    c.step(c.take_batch())
    assert c.active
    return admin, regs, c


def _register(ens: SimEnsemble, b: int) -> SimKazooClient:
    s = SimKazooClient(ens, f"broker {b}", 1.5)
    s.start()
    reg = znodes.BrokerRegistration.plaintext(b, "memory", b)
    s.create(znodes.broker_path(b), znodes.encode_broker(reg), ephemeral=True)
    return s


def _state(admin: SimKazooClient) -> tuple[int, int, list[int]]:
    st = znodes.decode_partition_state(admin.get(znodes.partition_state_path(TOPIC, 0))[0])
    return st.leader, st.leader_epoch, st.isr


def test_a_bounce_the_controller_did_not_see_happen_is_a_failure(loop: SimLoop) -> None:
    """Kafka's bounced brokers (KIP-380): the leader's session ends and its restart
    registers again before the controller reads /brokers/ids. The set of ids is the
    same, but the registration (its czxid, the broker epoch) is new: the leader lost its
    in-memory state (and after a power loss its unsynced tail), so it must not go on
    leading its old epoch. Failed before the controller compared broker epochs: no
    change, broker 1 kept leading epoch 0."""

    async def main() -> None:
        admin, regs, c = _zk_cluster(loop)
        assert _state(admin) == (1, 0, [1, 2, 3])
        regs[1].expire()
        regs[1] = _register(regs[1].ensemble, 1)  # back before the controller looked
        c.step([BrokersChanged()])
        assert _state(admin) == (2, 1, [2, 3])  # failed: a new leader and epoch
        regs[3].expire()
        regs[3] = _register(regs[3].ensemble, 3)
        c.step([BrokersChanged()])
        assert _state(admin) == (2, 1, [2])  # a bounced follower leaves the ISR

    _run(loop, main)


def test_no_isr_eligibility_switches_off_the_real_controllers_kip_841_undo(
    loop: SimLoop,
) -> None:
    """The mutation table's ``no-isr-eligibility`` reaches the real controller (the
    simulator's default), not only the model: a leader's ISR write re-admitting broker 3
    after its session ended is undone (KIP-841), and let stand with the bug injected.
    Before the bug switched off ``Controller._undo_ineligible``, only ``SimController``'s
    undo: on the real controller the write was undone, bug or not."""

    async def main() -> None:
        for bug, isr in ((None, [1, 2]), ("no-isr-eligibility", [1, 2, 3])):
            admin, regs, c = _zk_cluster(loop)
            regs[3].expire()
            c.step([BrokersChanged()])
            path = znodes.partition_state_path(TOPIC, 0)
            data, stat = admin.get(path)
            st = znodes.decode_partition_state(data)
            assert st.isr == [1, 2]
            back = znodes.PartitionState(st.leader, st.leader_epoch, [1, 2, 3], st.controller_epoch)
            KafkaZkClient(admin).update_isr(  # type: ignore[arg-type]
                StateWrite(TOPIC, 0, None, back, stat.version), writer=1
            )
            change = znodes.PartitionStateChange(TOPIC, None, 0, back, stat.version + 1)
            with injected(bug):
                c.step([PartitionStatesChanged((change,))])
            assert _state(admin)[2] == isr, bug

    _run(loop, main)


def test_a_new_controller_finds_a_bounce_in_zookeeper(loop: SimLoop) -> None:
    """The same bounce while no controller runs (the controller was the bounced broker
    itself, or cut off): the next one sees, at load, that broker 1 registered after the
    state naming it leader was written (its czxid > the state's mzxid). Failed before:
    the new controller kept broker 1 leading epoch 0."""

    async def main() -> None:
        admin, regs, c = _zk_cluster(loop)
        regs[1].expire()
        regs[1] = _register(regs[1].ensemble, 1)
        c.zkc.zk.cut()  # type: ignore[attr-defined]
        c.zkc.zk.expire()  # type: ignore[attr-defined]
        new_zk = SimKazooClient(regs[1].ensemble, "controller 2", 1.5)
        new_zk.start()
        d = Controller(KafkaZkClient(new_zk), 2)  # type: ignore[arg-type]
        d.start(threaded=False)
        d.step(d.take_batch())
        assert d.active and d.epoch == 2
        assert _state(admin) == (2, 1, [2, 3])
        # Written after broker 1's registration: not stale any more (a third controller
        # changes nothing).
        new_zk.cut()
        new_zk.expire()
        third = SimKazooClient(regs[1].ensemble, "controller 3", 1.5)
        third.start()
        e = Controller(KafkaZkClient(third), 3)  # type: ignore[arg-type]
        e.start(threaded=False)
        e.step(e.take_batch())
        assert e.active and _state(admin) == (2, 1, [2, 3])

    _run(loop, main)


def test_seed_9_three_partitions_a_stale_isr_candidate_is_not_admitted() -> None:
    """Regression (docs/faults.md): with the real controller and 3 partitions, leader 3
    of p2 admitted broker 1 to the ISR on a fetch made before offset 28 was committed
    without it; broker 1 was elected and the acknowledged record was lost (acked-lost).
    Failed before ``Partition._propose_isr`` checked a candidate against the HW again."""
    r = run_seed(9, cfg=replace(REAL, partitions=3))
    assert r.ok, [str(v) for v in r.violations[:3]]


@pytest.mark.parametrize("seed", [5, 22, 23])
def test_instant_restarts_are_bounces_the_cluster_handles(seed: int) -> None:
    """Regression (docs/faults.md, "bounced brokers"): restarts that reach ZooKeeper in
    the instant their old session ends (power-loss profile). Failed (hw-regressed) before
    the controller compared broker epochs and before the restarted broker's metadata
    store held back states written before it registered."""
    cfg = replace(REAL, restart_delay_s=(0.0, 0.0))
    r = run_seed(seed, cfg=cfg, profile="power-loss")
    assert r.ok, [str(v) for v in r.violations[:3]]


def test_a_cold_start_re_elects_at_one_new_epoch(loop: SimLoop) -> None:
    """Every broker restarted (every ISR member bounced): the next controller elects
    among them at once, one epoch later -- not offline first, and the ISR is kept."""

    async def main() -> None:
        admin, regs, c = _zk_cluster(loop)
        c.zkc.zk.cut()  # type: ignore[attr-defined]
        c.zkc.zk.expire()  # type: ignore[attr-defined]
        for b in (1, 2, 3):
            regs[b].expire()
        for b in (1, 2, 3):
            regs[b] = _register(admin.ensemble, b)
        zk = SimKazooClient(admin.ensemble, "controller 2", 1.5)
        zk.start()
        d = Controller(KafkaZkClient(zk), 2)  # type: ignore[arg-type]
        d.start(threaded=False)
        d.step(d.take_batch())
        assert _state(admin) == (1, 1, [1, 2, 3])
        assert admin.get(znodes.partition_state_path(TOPIC, 0))[1].version == 1  # one write

    _run(loop, main)


def test_a_restarted_broker_waits_for_a_decision_on_its_old_states(loop: SimLoop) -> None:
    """A restarted broker's metadata store reads a state naming it that was written
    before it registered (no controller has decided on this incarnation): its image shows
    no leader for that partition until a newer state comes, so its replica does not lead
    its old epoch meanwhile."""
    images: list[MetadataImage] = []

    async def main() -> None:
        admin, regs, c = _zk_cluster(loop)
        regs[1].expire()
        zk = SimKazooClient(admin.ensemble, "broker 1", 1.5)
        zk.start()
        reg = znodes.BrokerRegistration.plaintext(1, "memory", 1)
        store = MetadataStore(KafkaZkClient(zk), 1, reg, images.append)  # type: ignore[arg-type]
        store.start(0.0, threaded=False)
        p0 = images[-1].topics[TOPIC].partitions[0]
        assert (p0.leader, p0.leader_epoch, p0.isr) == (-1, -1, ())
        c.step([BrokersChanged()])  # the controller decides: 2 leads epoch 1
        await asyncio.sleep(0.1)  # the notification's watch
        store.step(store.take_batch())
        p0 = images[-1].topics[TOPIC].partitions[0]
        assert (p0.leader, p0.leader_epoch, p0.isr) == (2, 1, (2, 3))

    _run(loop, main)


def test_seed_134_a_broker_restarted_while_cut_applies_its_first_image() -> None:
    """Regression (the simulator's own bug): broker 1 restarted while cut from ZooKeeper
    read its first image just before the cut, and the harness dropped it (the hand-written
    controller's rule: a cut broker hears nothing); the partition's assignment was the
    same once it reconnected, so no later image came: it never hosted p0 (liveness)."""
    r = run_seed(134, cfg=REAL)
    assert r.ok, [str(v) for v in r.violations[:3]]
