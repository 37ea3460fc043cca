"""The kazoo facade over the ZooKeeper model (odradek.sim.zk_client): the calls Odradek's
ZooKeeper code makes answer as kazoo's do, results and errors alike; the real
``KafkaZkClient`` runs on it (multiRead, chunked transactions); watch events arrive through
the simulator's loop after a seeded delay, in order, held while the client is cut, dropped
with the session that set them; a new session is announced LOST then CONNECTED."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import EventType, KazooState, ZnodeStat

from odradek.runtime import clock
from odradek.sim.loop import SimLoop
from odradek.sim.zk_client import SimEnsemble, SimKazooClient
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import ControllerMovedError, KafkaZkClient, StateWrite


@pytest.fixture
def loop() -> Iterator[SimLoop]:
    lp = SimLoop(5)
    clock.install(lp.time, lambda: round(lp.time() * 1e9))
    try:
        yield lp
    finally:
        clock.restore()
        lp.close()


def _run(loop: SimLoop, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    loop.run_until_complete(main())


def _client(ens: SimEnsemble, name: str = "c") -> SimKazooClient:
    c = SimKazooClient(ens, name, 1.5)
    c.start()
    return c


def test_reads_and_writes_answer_as_kazoo(loop: SimLoop) -> None:
    async def main() -> None:
        zk = _client(SimEnsemble(loop, 1))
        assert zk.create("/a/b/c", b"x", makepath=True) == "/a/b/c"
        data, stat = zk.get("/a/b/c")
        assert data == b"x" and isinstance(stat, ZnodeStat) and stat.version == 0
        assert zk.set("/a/b/c", b"y", version=0).version == 1
        with pytest.raises(BadVersionError):
            zk.set("/a/b/c", b"z", version=0)
        with pytest.raises(NodeExistsError):
            zk.create("/a/b/c")
        with pytest.raises(NoNodeError):
            zk.get("/nope")
        assert zk.exists("/nope") is None
        assert zk.create("/a/s-", sequence=True) == "/a/s-0000000001"  # b was the first
        assert zk.get_children("/a") == ["b", "s-0000000001"]
        zk.ensure_path("/a/b/d/e")
        assert zk.delete("/a/b", recursive=True) and zk.get_children("/a") == ["s-0000000001"]
        # *_async: already settled; an error is raised by get(), as kazoo's
        assert zk.get_async("/a").get()[0] == b""
        missing = zk.get_async("/nope")
        assert missing.ready() and not missing.successful()
        with pytest.raises(NoNodeError):
            missing.get(timeout=1)
        assert zk.get_children_async("/a").get() == ["s-0000000001"]

    _run(loop, main)


def test_a_transaction_reports_like_kazoo(loop: SimLoop) -> None:
    async def main() -> None:
        zk = _client(SimEnsemble(loop, 1))
        zk.create("/x", b"0")
        tx = zk.transaction()
        tx.check("/x", 0)
        tx.set_data("/x", b"1", version=5)
        tx.create("/y")
        res = tx.commit()
        assert [type(r) for r in res] == [RolledBackError, BadVersionError, RuntimeInconsistency]
        assert zk.exists("/y") is None
        tx = zk.transaction()
        tx.check("/x", 0)
        tx.set_data("/x", b"1", version=0)
        tx.create("/s-", sequence=True)
        tx.delete("/x", version=1)
        res = tx.commit_async().get()
        assert res[0] is True and res[1].version == 1 and res[2] == "/s-0000000001"
        assert res[3] is True and zk.exists("/x") is None

    _run(loop, main)


def test_kafka_zk_client_runs_on_it(loop: SimLoop) -> None:
    """The real client's multiRead (through ``_call``) and its chunked, fenced state
    writes with their notifications."""

    async def main() -> None:
        zk = _client(SimEnsemble(loop, 1))
        znodes.ensure_base_paths(zk)  # type: ignore[arg-type]
        zkc = KafkaZkClient(zk, max_ops=4)  # type: ignore[arg-type]
        assert zkc.register_controller(7) == (1, 1)
        assert zkc.register_controller(8) is None
        zk.ensure_path(znodes.topic_partitions_path("t"))
        for p in range(5):
            zk.ensure_path(znodes.partition_path("t", p))
        writes = [
            StateWrite("t", p, None, znodes.PartitionState(1, 0, [1, 2], 1), -1) for p in range(5)
        ]
        res = zkc.create_partition_states(writes, fence=1, writer=7)
        assert res.versions == {("t", p): 0 for p in range(5)}
        got = zkc.get_partition_states([("t", p) for p in range(6)])
        assert sorted(got) == [("t", p) for p in range(5)]
        assert got[("t", 3)] == (znodes.PartitionState(1, 0, [1, 2], 1), 0)
        names, _ = zkc.list_leader_and_isr_notifications()
        assert len(names) == 3  # 5 writes, 2 per transaction (4 ops: check + note)
        # A deposed controller's writes fail as a whole (the epoch znode moved on).
        zk.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(2))
        new = znodes.PartitionState(2, 1, [2], 1)
        with pytest.raises(ControllerMovedError):
            zkc.update_partition_states([StateWrite("t", 0, None, new, 0)], fence=1, writer=7)
        assert zkc.get_partition_states([("t", 0)])[("t", 0)][1] == 0

    _run(loop, main)


def test_watches_arrive_through_the_loop_in_order(loop: SimLoop) -> None:
    async def main() -> None:
        ens = SimEnsemble(loop, 1, watch_latency_s=(0.01, 0.05))
        writer, reader = _client(ens, "w"), _client(ens, "r")
        seen: list[tuple[float, str, str]] = []
        writer.create("/n", b"0")

        def watch(ev: Any) -> None:
            seen.append((loop.time(), ev.type, ev.path))

        reader.get("/n", watch=watch)
        reader.get_children("/", watch=watch)
        writer.set("/n", b"1")
        writer.create("/m")
        assert seen == []  # never from inside the writer's call
        await asyncio.sleep(1)
        assert [s[1:] for s in seen] == [(EventType.CHANGED, "/n"), (EventType.CHILD, "/")]
        assert 0.01 <= seen[0][0] < seen[1][0] <= 0.2
        writer.set("/n", b"2")
        await asyncio.sleep(1)
        assert len(seen) == 2  # one-shot: not set again

    _run(loop, main)


def test_a_cut_holds_events_and_an_expiry_drops_them(loop: SimLoop) -> None:
    async def main() -> None:
        ens = SimEnsemble(loop, 1, watch_latency_s=(0.01, 0.01))
        writer, reader = _client(ens, "w"), _client(ens, "r")
        states: list[str] = []
        reader.add_listener(states.append)
        seen: list[str] = []
        reader.create("/eph", ephemeral=True)
        writer.create("/n")
        reader.get("/n", watch=lambda ev: seen.append(ev.path))
        reader.cut()
        assert not reader.connected and states == [KazooState.SUSPENDED]
        with pytest.raises(ConnectionLoss):
            reader.get("/n")
        writer.set("/n", b"1")
        await asyncio.sleep(1)
        assert seen == []  # held while cut
        reader.reconnect()  # the same session: the held event arrives
        assert seen == ["/n"] and states[-1] == KazooState.CONNECTED
        reader.get("/n", watch=lambda ev: seen.append("again"))
        reader.cut()
        writer.set("/n", b"2")
        assert reader.expire()  # the session ends: its ephemeral goes, its events die
        assert writer.exists("/eph") is None
        await asyncio.sleep(1)
        old = reader.client_id
        reader.reconnect()
        assert seen == ["/n"] and reader.client_id != old
        assert states[-2:] == [KazooState.LOST, KazooState.CONNECTED]

    _run(loop, main)


def test_the_recipes_rearm_and_report_changes_only(loop: SimLoop) -> None:
    async def main() -> None:
        ens = SimEnsemble(loop, 1, watch_latency_s=(0.001, 0.002))
        writer, reader = _client(ens, "w"), _client(ens, "r")
        datas: list[bytes | None] = []
        kids: list[list[str]] = []
        reader.DataWatch("/d", lambda data, _stat, *_: datas.append(data))
        writer.create("/p")
        reader.ChildrenWatch("/p", kids.append)
        writer.create("/d", b"1")
        writer.create("/p/a")
        await asyncio.sleep(0.1)
        writer.set("/d", b"2")
        writer.create("/p/b")
        await asyncio.sleep(0.1)
        writer.delete("/d")
        await asyncio.sleep(0.1)
        assert datas == [None, b"1", b"2", None]
        assert kids == [[], ["a"], ["a", "b"]]
        reader.cut()  # a new session re-reads; nothing changed, so nothing is reported
        reader.expire()
        reader.reconnect()
        await asyncio.sleep(0.1)
        assert datas == [None, b"1", b"2", None] and kids == [[], ["a"], ["a", "b"]]

    _run(loop, main)


def test_children_watch_reports_every_event_but_not_an_unchanged_reconnection(
    loop: SimLoop,
) -> None:
    """kazoo's ChildrenWatch: every watch event calls back, even when the children read
    are the ones already reported (a child deleted and created again before the read:
    a broker's registration gone and back); only the recipe's own read on reconnecting
    skips an unchanged list. The model skipped every unchanged read until sim seed 18448
    had a controller that never saw a broker come back: not a broker bug, the model's."""

    async def main() -> None:
        ens = SimEnsemble(loop, 1, watch_latency_s=(0.05, 0.05))
        writer, reader = _client(ens, "w"), _client(ens, "r")
        writer.create("/p")
        writer.create("/p/a")
        kids: list[list[str]] = []
        reader.ChildrenWatch("/p", kids.append)
        writer.delete("/p/a")
        writer.create("/p/a")  # back before the event reaches the reader
        await asyncio.sleep(0.2)
        assert kids == [["a"], ["a"]]
        reader.cut()
        writer.delete("/p/a")
        writer.create("/p/a")
        # The same session: the recipe's own read on reconnecting finds the list it
        # reported and says nothing; the watch set before the cut then fires for the
        # change made meanwhile (ZooKeeper's SetWatches), and that read is reported.
        reader.reconnect()
        await asyncio.sleep(0.2)
        assert kids == [["a"], ["a"], ["a"]]

    _run(loop, main)
