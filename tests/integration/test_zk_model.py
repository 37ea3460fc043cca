"""The simulator's ZooKeeper model (odradek.sim.zookeeper) against a real ZooKeeper: the
same operation sequences on both, comparing results, error codes, the stats that matter
(version, cversion, dataLength, numChildren, which session owns an ephemeral, and the
zxids relative to the sandbox's), children lists and the watch events each client got.

Generated sequences (hypothesis, derandomized, a few dozen) cover create (persistent,
ephemeral, sequential), set/delete with versions, reads with watches, multi and a client
closing its session; hand-written ones cover multi failures, watch firing and a session
that really expires (its client stops heartbeating)."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.exceptions import ZookeeperError
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from odradek.errors import KafkaError
from odradek.runtime import clock
from odradek.sim import zookeeper as zm
from odradek.zk.client import connect_zk
from odradek.zk.server import ZooKeeperServer, zookeeper_jar
from support.polling import wait_until

pytestmark = pytest.mark.integration

ZK_ADDR = "127.0.250.40"  # a block of its own (test_zk.py uses .1-.13)
SESSION_S = 4.0
_sandboxes = itertools.count()


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    try:
        zookeeper_jar()
    except KafkaError as e:
        pytest.skip(str(e))
    with ZooKeeperServer(tmp_path_factory.mktemp("zkmodel"), ZK_ADDR, 2181) as srv:
        yield srv


_EVENT_NAMES = {
    zm.EventType.NodeCreated: "CREATED",
    zm.EventType.NodeDeleted: "DELETED",
    zm.EventType.NodeDataChanged: "CHANGED",
    zm.EventType.NodeChildrenChanged: "CHILD",
}


@dataclass
class _Slot:
    """One client: a kazoo session and the model's session standing for it."""

    index: int
    zk: KazooClient
    sid: int
    real_events: list[tuple[str, str]] = field(default_factory=list)
    model_events: list[tuple[str, str]] = field(default_factory=list)

    def on_real(self, ev: WatchedEvent) -> None:
        self.real_events.append((ev.type, ev.path))

    def on_model(self, ev: zm.WatchedEvent) -> None:
        self.model_events.append((_EVENT_NAMES[ev.type], ev.path.removeprefix("/x")))


class Differential:
    """Runs each operation on the real ZooKeeper and on the model, normalizing both."""

    def __init__(self, server: ZooKeeperServer, clients: int = 2) -> None:
        self.server = server
        self.model = zm.ZkModel()
        self.slots: list[_Slot] = []
        self.closed: list[_Slot] = []
        self.owners: dict[tuple[str, int], str] = {}
        for i in range(clients):
            self.slots.append(self._open(i))
        self.root = f"/sandbox{next(_sandboxes)}"
        s0 = self.slots[0]
        # The sandbox: the model's tree gets the same path, so the sandbox's own stats
        # (cversion, numChildren) compare too; zxids compare relative to its czxid.
        self.model.create(s0.sid, "/x")  # stands for whatever the server holds already
        self.model.create(s0.sid, self.root.replace("/", "/x/", 1))
        s0.zk.create(self.root)
        self.real_base = s0.zk.exists(self.root).czxid
        self.model_base = self.model.exists(s0.sid, self._m(self.root)).czxid

    def _m(self, path: str) -> str:
        return "/x" + path  # the model's sandbox lives under /x (see __init__)

    def _open(self, index: int) -> _Slot:
        zk = connect_zk(self.server.connect, source_ip=None, session_timeout_s=SESSION_S)
        sid = self.model.connect(SESSION_S)
        slot = _Slot(index, zk, sid)
        gen = sum(1 for s in self.closed if s.index == index)
        self.owners[("real", zk.client_id[0])] = self.owners[("model", sid)] = f"c{index}.{gen}"
        return slot

    def close(self) -> None:
        for s in self.slots:
            s.zk.stop()
            s.zk.close()

    # --------------------------------------------------------------- normalizing
    def _stat(self, side: str, stat: Any) -> tuple[Any, ...] | None:
        if stat is None:
            return None
        base = self.real_base if side == "real" else self.model_base
        if isinstance(stat, ZnodeStat):
            fields = (
                stat.version,
                stat.cversion,
                stat.dataLength,
                stat.numChildren,
                stat.ephemeralOwner,
                stat.czxid,
                stat.mzxid,
                stat.pzxid,
            )
        else:
            fields = (
                stat.version,
                stat.cversion,
                stat.data_length,
                stat.num_children,
                stat.ephemeral_owner,
                stat.czxid,
                stat.mzxid,
                stat.pzxid,
            )
        owner = self.owners.get((side, fields[4]), "none") if fields[4] else "none"
        return (*fields[:4], owner, *(z - base for z in fields[5:]))

    def _norm(self, side: str, value: Any) -> Any:
        if isinstance(value, (ZookeeperError, zm.ZkError)):
            return ("error", value.code)
        if isinstance(value, (ZnodeStat, zm.Stat)):
            return self._stat(side, value)
        if isinstance(value, str):
            return value.removeprefix("/x") if side == "model" else value
        if isinstance(value, tuple):
            return tuple(self._norm(side, v) for v in value)
        if isinstance(value, list):
            return [self._norm(side, v) for v in value]
        return value

    @staticmethod
    def _call(fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except (ZookeeperError, zm.ZkError) as e:
            return e

    # --------------------------------------------------------------- operations
    def run(self, op: tuple[Any, ...]) -> None:
        kind, k, *args = op
        s = self.slots[k]
        zk, m, sid = s.zk, self.model, s.sid
        if kind == "close":
            self.sync_events()
            zk.stop()  # closes the session: its ephemerals go
            zk.close()
            m.close(sid)
            self.closed.append(s)
            self.slots[k] = self._open(k)
            return
        p = self.root + args[0] if args and isinstance(args[0], str) else self.root
        mp = self._m(p)
        if kind == "create":
            data, eph, seq = args[1:]
            real = self._call(zk.create, p, data, ephemeral=eph, sequence=seq)
            model = self._call(m.create, sid, mp, data, ephemeral=eph, sequence=seq)
        elif kind == "set":
            data, version = args[1:]
            real = self._call(zk.set, p, data, version=version)
            model = self._call(m.set, sid, mp, data, version)
        elif kind == "delete":
            real = self._call(zk.delete, p, version=args[1])
            model = self._call(m.delete, sid, mp, args[1])
            model = True if model is None else model  # kazoo's delete returns True
        elif kind == "get":
            w = args[1]
            real = self._call(zk.get, p, watch=s.on_real if w else None)
            model = self._call(m.get, sid, mp, s.on_model if w else None)
        elif kind == "exists":
            w = args[1]
            real = self._call(zk.exists, p, watch=s.on_real if w else None)
            model = self._call(m.exists, sid, mp, s.on_model if w else None)
        elif kind == "children":
            w = args[1]
            real = self._call(zk.get_children, p, watch=s.on_real if w else None)
            if isinstance(real, list):
                real = sorted(real)
            model = self._call(m.get_children, sid, mp, s.on_model if w else None)
        elif kind == "multi":
            t = zk.transaction()
            mops: list[zm.Op] = []
            for sub in args[0]:
                sk, sp, *sa = sub
                full = self.root + sp
                if sk == "create":
                    t.create(full, sa[0], ephemeral=sa[1], sequence=sa[2])
                    mops.append(zm.Create(self._m(full), sa[0], sa[1], sa[2]))
                elif sk == "delete":
                    t.delete(full, version=sa[0])
                    mops.append(zm.Delete(self._m(full), sa[0]))
                elif sk == "set":
                    t.set_data(full, sa[0], version=sa[1])
                    mops.append(zm.SetData(self._m(full), sa[0], sa[1]))
                else:
                    t.check(full, sa[0])
                    mops.append(zm.Check(self._m(full), sa[0]))
            real = t.commit()
            model = m.multi(sid, mops)
        else:
            raise AssertionError(kind)
        assert self._norm("real", real) == self._norm("model", model), op

    def sync_events(self) -> None:
        """Every watch event the model fired has reached the kazoo clients, and no more:
        wait for the count, then a sync round trip (a session's responses and events
        arrive in order) before comparing."""
        for s in self.slots:
            wait_until(
                lambda s=s: len(s.real_events) >= len(s.model_events),  # type: ignore[misc]
                f"client {s.index}'s watch events {s.model_events}",
                timeout=10,
            )
            s.zk.sync("/")
            assert s.real_events == s.model_events

    def check_tree(self) -> None:
        """Walk both sandboxes: the same nodes, data and stats."""
        zk, sid = self.slots[0].zk, self.slots[0].sid

        def walk(path: str) -> None:
            rdata, rstat = zk.get(path)
            mdata, mstat = self.model.get(sid, self._m(path))
            assert (rdata, self._stat("real", rstat)) == (mdata, self._stat("model", mstat)), path
            rkids = sorted(zk.get_children(path))
            assert rkids == self.model.get_children(sid, self._m(path)), path
            for c in rkids:
                walk(f"{path}/{c}")

        walk(self.root)


@pytest.fixture
def diff(zk_server: ZooKeeperServer) -> Iterator[Differential]:
    d = Differential(zk_server)
    try:
        yield d
    finally:
        d.close()


# ------------------------------------------------------------------ generated sequences
_PATHS = ["/a", "/b", "/a/c", "/a/c/d", "/b/e", "/a/s-"]
_path = st.sampled_from(_PATHS)
_data = st.sampled_from([b"", b"x", b"yy"])
_version = st.sampled_from([-1, 0, 1, 2])
_client = st.integers(0, 1)
_sub = st.one_of(
    st.tuples(st.just("create"), _path, _data, st.booleans(), st.booleans()),
    st.tuples(st.just("delete"), _path, _version),
    st.tuples(st.just("set"), _path, _data, _version),
    st.tuples(st.just("check"), _path, _version),
)
_op = st.one_of(
    st.tuples(st.just("create"), _client, _path, _data, st.booleans(), st.booleans()),
    st.tuples(st.just("set"), _client, _path, _data, _version),
    st.tuples(st.just("delete"), _client, _path, _version),
    st.tuples(st.sampled_from(["get", "exists", "children"]), _client, _path, st.booleans()),
    st.tuples(st.just("multi"), _client, st.lists(_sub, min_size=1, max_size=3)),
    st.tuples(st.just("close"), _client),
)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_op, min_size=5, max_size=25))
def test_generated_sequences_match(zk_server: ZooKeeperServer, ops: list[tuple[Any, ...]]) -> None:
    d = Differential(zk_server)
    try:
        for op in ops:
            d.run(op)
        d.sync_events()
        d.check_tree()
    finally:
        d.close()


# ------------------------------------------------------------------ hand-written
def test_multi_failures_report_like_zookeeper(diff: Differential) -> None:
    for op in [
        ("create", 0, "/a", b"1", False, False),
        (
            "multi",
            0,
            [("create", "/a/b", b"", False, False), ("set", "/a", b"2", 7), ("delete", "/a", -1)],
        ),  # BadVersion in the middle
        ("multi", 0, [("check", "/a", 0), ("create", "/a", b"", False, False)]),  # NodeExists
        (
            "multi",
            1,
            [("create", "/e", b"", True, False), ("create", "/e/x", b"", False, False)],
        ),  # NoChildrenForEphemerals
        ("multi", 1, [("delete", "/zz", -1), ("check", "/a", 0)]),  # NoNode first
        (
            "multi",
            0,
            [
                ("create", "/a/q-", b"", False, True),
                ("create", "/a/q-", b"", False, True),
                ("set", "/a", b"3", 0),
                ("check", "/a", 1),
            ],
        ),  # all applied, one zxid
        ("children", 0, "/a", False),
        ("delete", 0, "/a/q-0000000001", -1),
        ("create", 1, "/a/e", b"", True, False),
        ("close", 1),  # the ephemeral goes: cversion counts it, the sequence does not
        ("create", 0, "/a/q-", b"", False, True),
        ("exists", 0, "/a", False),
    ]:
        diff.run(op)
    diff.check_tree()


def test_watch_firing_rules_match(diff: Differential) -> None:
    for op in [
        ("exists", 0, "/w", True),  # on a missing node: NodeCreated
        ("children", 0, "", True),  # the sandbox's children
        ("create", 1, "/w", b"1", False, False),
        ("get", 0, "/w", True),
        ("get", 0, "/w", True),  # the same watch twice: one event
        ("children", 0, "/w", True),
        ("exists", 1, "/w", True),
        ("set", 1, "/w", b"2", -1),
        ("set", 1, "/w", b"3", -1),  # one-shot: no second event
        ("create", 1, "/w/c", b"", True, False),
        ("get", 0, "/w", True),
        ("children", 0, "/w", True),
        ("delete", 1, "/w/c", -1),
        ("children", 0, "/w", True),
        ("get", 0, "/w/c", True),  # NoNode: no watch set
        ("delete", 1, "/w", -1),  # data + child watch: one NodeDeleted per session
        ("close", 1),
    ]:
        diff.run(op)
    diff.sync_events()
    # Client 1's exists watch fired once; its session's end fires nothing for it.
    assert diff.closed[0].real_events == [("CHANGED", diff.root + "/w")]


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def time_ns(self) -> int:
        return int(self.t * 1e9)


def test_expired_session_loses_its_ephemerals_in_both(zk_server: ZooKeeperServer) -> None:
    """A real expiry: the client stops talking (its socket closed and its only server
    address made unreachable) for longer than the session timeout."""
    vc = _Clock()
    clock.install(vc.monotonic, vc.time_ns)
    timeout = 2.0
    dying = connect_zk(zk_server.connect, source_ip=None, session_timeout_s=timeout)
    watcher = connect_zk(zk_server.connect, source_ip=None, session_timeout_s=SESSION_S)
    try:
        model = zm.ZkModel()
        md, mw = model.connect(timeout), model.connect(SESSION_S)
        root = f"/expiry{next(_sandboxes)}"
        watcher.create(root)
        model.create(mw, root)
        for name in ("e1", "e2"):
            dying.create(f"{root}/{name}", ephemeral=True)
            model.create(md, f"{root}/{name}", ephemeral=True)
        dying.create(f"{root}/kept")
        model.create(md, f"{root}/kept")
        real_events: list[WatchedEvent] = []
        model_events: list[zm.WatchedEvent] = []
        watcher.get_children(root, watch=real_events.append)
        model.get_children(mw, root, model_events.append)

        # Silence the dying client: it can no longer reach any server.
        hosts = dying.hosts
        dying.hosts = [("127.0.250.41", 1)]  # nothing listens there
        # shutdown, not close: kazoo's thread still selects on the descriptor.
        dying._connection._socket.shutdown(socket.SHUT_RDWR)
        vc.t += timeout / 2
        model.touch(mw)
        assert model.expire_due() == []
        vc.t += timeout / 2
        assert model.expire_due() == [md]
        wait_until(
            lambda: watcher.get_children(root) == ["kept"],
            "the real server to expire the session",
            timeout=4 * timeout,
        )
        dying.hosts = hosts
        assert model.get_children(mw, root) == ["kept"]
        wait_until(lambda: real_events, "the child watch", timeout=5)
        assert [(e.type, e.path) for e in real_events] == [("CHILD", root)]
        assert [(_EVENT_NAMES[e.type], e.path) for e in model_events] == [("CHILD", root)]
        r, m = watcher.exists(root), model.exists(mw, root)
        assert m is not None and (r.cversion, r.numChildren) == (m.cversion, m.num_children)
    finally:
        clock.restore()
        for z in (dying, watcher):
            z.stop()
            z.close()
