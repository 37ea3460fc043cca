"""The simulated controller (odradek.sim.world.SimController): ZooKeeper watches reach
each broker after a seeded delay, in order, and die with the session that set them; a
reassignment's start changes only the replica set, its completion the epoch. The
simulated network (SimNetwork): cuts are counted per link, and a hop draws a loss only
on a lossy link."""

from __future__ import annotations

import asyncio
import random

from odradek.metadata.image import MetadataImage
from odradek.replication.partition_state import IsrWrite
from odradek.sim.harness import TOPIC
from odradek.sim.loop import SimLoop
from odradek.sim.world import SimController, SimNetwork


def _run(main: object) -> None:
    loop = SimLoop(7)
    try:
        loop.run_until_complete(main)  # type: ignore[arg-type]
    finally:
        loop.close()


def test_watches_arrive_in_order_and_never_from_an_ended_session() -> None:
    got: dict[int, list[int]] = {1: [], 2: []}

    async def main() -> None:
        c = SimController((1, 2), 1, seed=7, trace=lambda _l: None, watch_latency_s=(0.01, 0.05))
        for b in (1, 2):
            c.listeners.append(
                lambda image, b=b: got[b].append(image.topics[TOPIC].partitions[0].leader_epoch)
            )
        c.elect(0, 1)  # epoch 0
        c.elect(0, 2)  # epoch 1
        await asyncio.sleep(1)
        assert got == {1: [0, 1], 2: [0, 1]}  # in order, whatever each delay drew
        c.elect(0, 2)  # epoch 2: broker 1's session ends before its watch fires ...
        c.broker_failed(1)  # ... and the expiry publishes epoch 3 (1 out of the ISR)
        await asyncio.sleep(1)
        assert got[1] == [0, 1, 3] and got[2] == [0, 1, 2, 3]
        c.broker_registered(1)  # a new session reads the state afresh
        await asyncio.sleep(1)
        assert got[1] == [0, 1, 3, 3]

    _run(main())


def test_a_reassignment_starts_without_a_new_epoch_and_completes_with_one() -> None:
    images: list[MetadataImage] = []

    async def main() -> None:
        c = SimController((1, 2, 3), 1, seed=7, trace=lambda _l: None)
        c.listeners.append(images.append)
        c.elect(0, 1)
        c.reassign(0, (1, 2))  # 3 leaves: completes at once (1 and 2 are in the ISR)
        z = c.znodes[0]
        assert (c.assignment[0].replicas, z.leader_epoch, z.isr) == ((1, 2), 1, (1, 2))
        c.reassign(0, (1, 2, 3))  # 3 comes back: waits for it to join the ISR
        assert c.assignment[0].adding == (3,) and z.leader_epoch == 1
        z.isr = (1, 2, 3)  # the leader's ISR write
        c.check_reassignments()
        assert not c.assignment[0].in_progress and z.leader_epoch == 2
        await asyncio.sleep(0)
        assert [i.topics[TOPIC].partitions[0].replicas for i in images][-3:] == [
            (1, 2),
            (1, 2, 3),
            (1, 2, 3),
        ]

    _run(main())


def test_a_failover_reaches_each_broker_as_one_state() -> None:
    """The controller writes a failover's elections in one transaction: with 3 partitions
    led by broker 2, its failure must not show a broker a state where some partitions
    moved and others still name broker 2 (a restarted broker 2 led p1 again at its old
    epoch with HW 0 in seed 8 of ``--partitions 3``)."""
    seen: list[list[int]] = []

    async def main() -> None:
        c = SimController((1, 2, 3), 3, seed=7, trace=lambda _l: None, watch_latency_s=(0.01, 0.05))
        c.listeners.append(
            lambda image: seen.append([p.leader for p in image.topics[TOPIC].partitions.values()])
        )
        for p in range(3):
            c.elect(p, 2)
        await asyncio.sleep(1)
        seen.clear()
        c.broker_failed(2)
        await asyncio.sleep(1)
        assert seen == [[1, 1, 1]]

    _run(main())


def test_an_isr_write_naming_an_unregistered_broker_is_undone_kip_841() -> None:
    # The real controller's rule (controller.py): a leader that re-admits a broker whose
    # session expired, from a fetch it sent before dying, has its write undone.
    images: list[MetadataImage] = []

    async def main() -> None:
        c = SimController((1, 2, 3), 1, seed=7, trace=lambda _l: None)
        c.listeners.append(images.append)
        c.elect(0, 1)
        c.broker_failed(2)
        z = c.znodes[0]
        assert z.isr == (1, 3) and z.leader_epoch == 1
        await asyncio.sleep(0)
        assert sorted(images[-1].brokers) == [1, 3]  # /brokers/ids without 2
        store = c.store_for(1, asyncio.get_running_loop())
        store.write_isr(IsrWrite(TOPIC, 0, 1, 1, (1, 2, 3), c.controller_epoch, z.version))
        await asyncio.sleep(0.01)
        assert z.isr == (1, 3) and z.leader == 1 and z.leader_epoch == 2
        store.write_isr(IsrWrite(TOPIC, 0, 1, 2, (1, 3), c.controller_epoch, z.version))
        await asyncio.sleep(0.01)
        assert z.leader_epoch == 2  # an eligible ISR stays as written

    _run(main())


def test_cuts_are_counted_per_link_and_only_a_lossy_link_draws() -> None:
    net = SimNetwork(random.Random(1), (0.001, 0.002))
    net.cut(1, 2)
    net.cut(2, 1)  # a second fault cutting the same link (an isolation, say)
    net.uncut(1, 2)
    assert net._broken(1, 2) and net._broken(2, 1)  # one fault still holds it
    assert not net._broken(1, 3)
    net.uncut(2, 1)
    assert not net._broken(1, 2) and not net.cuts  # healed: no link left in the table
    before = net.rng.getstate()
    assert not net._broken(1, 2)
    assert net.rng.getstate() == before  # no fault anywhere: no draw
    net.loss[frozenset((1, 2))] = 1.0
    assert net._broken(2, 1) and net.rng.getstate() != before
    after = net.rng.getstate()
    assert not net._broken(1, 3) and net.rng.getstate() == after  # another link: no draw
