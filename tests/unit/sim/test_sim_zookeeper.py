"""The simulator's ZooKeeper model (odradek.sim.zookeeper), alone; the same semantics are
checked against a real ZooKeeper in tests/integration/test_zk_model.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.runtime import clock
from odradek.sim.zookeeper import (
    BadVersion,
    Check,
    Create,
    Delete,
    EventType,
    NoChildrenForEphemerals,
    NodeExists,
    NoNode,
    NotEmpty,
    RolledBack,
    RuntimeInconsistency,
    SessionExpired,
    SetData,
    WatchedEvent,
    ZkModel,
)


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t

    def time_ns(self) -> int:
        return int(self.t * 1e9)


@pytest.fixture
def vclock() -> Iterator[_Clock]:
    c = _Clock()
    clock.install(c.monotonic, c.time_ns)
    try:
        yield c
    finally:
        clock.restore()


def test_create_get_set_delete_with_versions(vclock: _Clock) -> None:
    zk = ZkModel()
    s = zk.connect(10)
    assert zk.create(s, "/a", b"x") == "/a"
    data, st = zk.get(s, "/a")
    assert (data, st.version, st.data_length, st.ephemeral_owner) == (b"x", 0, 1, 0)
    assert st.czxid == st.mzxid == st.pzxid == zk.zxid
    with pytest.raises(NodeExists):
        zk.create(s, "/a")
    with pytest.raises(NoNode):
        zk.create(s, "/b/c")
    with pytest.raises(BadVersion):
        zk.set(s, "/a", b"y", version=3)
    assert zk.set(s, "/a", b"yy", version=0).version == 1
    zk.create(s, "/a/c")
    with pytest.raises(NotEmpty):
        zk.delete(s, "/a")
    with pytest.raises(BadVersion):
        zk.delete(s, "/a/c", version=1)
    root = zk.exists(s, "/a")
    assert root is not None and (root.cversion, root.num_children) == (1, 1)
    zk.delete(s, "/a/c", version=0)
    after = zk.exists(s, "/a")
    assert after is not None and (after.cversion, after.num_children) == (2, 0)
    zk.delete(s, "/a")
    assert zk.exists(s, "/a") is None
    with pytest.raises(NoNode):
        zk.delete(s, "/a")


def test_failed_writes_take_a_zxid_and_change_nothing(vclock: _Clock) -> None:
    zk = ZkModel()
    s = zk.connect(10)
    zk.create(s, "/a", b"x")
    z = zk.zxid
    with pytest.raises(NodeExists):
        zk.create(s, "/a")
    assert zk.zxid == z + 1
    assert zk.get(s, "/a")[1].mzxid == z


def test_sequential_suffix_counts_the_children_created(vclock: _Clock) -> None:
    # Not the cversion (creates + deletes): ZooKeeper 3.8 answered n-0000000001 here.
    zk = ZkModel()
    s = zk.connect(10)
    zk.create(s, "/q")
    zk.create(s, "/q/x")
    zk.delete(s, "/q/x")
    assert zk.create(s, "/q/n-", sequence=True) == "/q/n-0000000001"
    assert zk.create(s, "/q/n-", sequence=True) == "/q/n-0000000002"
    assert zk.get_children(s, "/q") == ["n-0000000001", "n-0000000002"]
    st = zk.exists(s, "/q")
    assert st is not None and st.cversion == 4


def test_ephemerals_go_with_their_session_on_expiry(vclock: _Clock) -> None:
    zk = ZkModel()
    a, b = zk.connect(2.0), zk.connect(2.0)
    zk.create(a, "/e", ephemeral=True)
    with pytest.raises(NoChildrenForEphemerals):
        zk.create(a, "/e/child")
    st = zk.exists(b, "/e")
    assert st is not None and st.ephemeral_owner == a
    got: list[WatchedEvent] = []
    zk.exists(b, "/e", got.append)
    vclock.t += 1.5
    zk.touch(b)
    assert zk.expire_due() == []
    vclock.t += 0.5
    assert zk.expire_due() == [a]  # a was last heard 2 s ago; b 0.5 s ago
    assert zk.exists(b, "/e") is None
    assert got == [WatchedEvent(b, EventType.NodeDeleted, "/e")]
    with pytest.raises(SessionExpired):
        zk.get(a, "/")


def test_watches_fire_once_with_zookeepers_event_types(vclock: _Clock) -> None:
    zk = ZkModel()
    w, s = zk.connect(10), zk.connect(10)
    got: list[WatchedEvent] = []
    assert zk.exists(w, "/n", got.append) is None
    zk.create(s, "/n", b"1")
    zk.get(w, "/n", got.append)
    zk.get_children(w, "/n", got.append)
    zk.get_children(w, "/", got.append)
    zk.set(s, "/n", b"2")
    zk.set(s, "/n", b"3")  # the data watch fired already: one-shot
    zk.create(s, "/n/c")  # child watch on /n
    zk.get(w, "/n", got.append)
    zk.get_children(w, "/n", got.append)
    zk.delete(s, "/n/c")
    zk.get_children(w, "/n", got.append)
    zk.delete(s, "/n")  # data + child watch on /n: one NodeDeleted; / changed
    assert [(e.type, e.path) for e in got] == [
        (EventType.NodeCreated, "/n"),
        (EventType.NodeDataChanged, "/n"),
        (EventType.NodeChildrenChanged, "/n"),
        (EventType.NodeChildrenChanged, "/n"),
        (EventType.NodeDeleted, "/n"),
        (EventType.NodeDeleted, "/n"),  # the same event, handed to both callbacks
        (EventType.NodeChildrenChanged, "/"),
    ]
    # The session saw one event per (type, path) at a time.
    assert [(e.type, e.path) for e in zk.events if e.session == w][-2:] == [
        (EventType.NodeDeleted, "/n"),
        (EventType.NodeChildrenChanged, "/"),
    ]


def test_failed_read_sets_no_watch(vclock: _Clock) -> None:
    zk = ZkModel()
    s = zk.connect(10)
    got: list[WatchedEvent] = []
    with pytest.raises(NoNode):
        zk.get(s, "/x", got.append)
    zk.create(s, "/x")
    assert got == []


def test_multi_is_all_or_nothing_with_zookeepers_report(vclock: _Clock) -> None:
    zk = ZkModel()
    s = zk.connect(10)
    zk.create(s, "/m", b"0")
    before = zk.zxid
    res = zk.multi(s, [Create("/m/a"), SetData("/m", b"1", 5), Delete("/m/a"), Check("/m", 0)])
    assert [type(r) for r in res] == [
        RolledBack,
        BadVersion,
        RuntimeInconsistency,
        RuntimeInconsistency,
    ]
    assert zk.get_children(s, "/m") == [] and zk.get(s, "/m")[0] == b"0"
    assert zk.zxid == before + 1
    ok = zk.multi(
        s, [Create("/m/a", b"a"), SetData("/m", b"1", 0), Create("/m/a/b"), Check("/m", 1)]
    )
    assert ok[0] == "/m/a" and ok[3] is True
    a = zk.get(s, "/m/a")[1]
    m = zk.get(s, "/m")[1]
    assert a.czxid == m.mzxid == m.pzxid == zk.zxid == before + 2  # one zxid for all
    assert (a.num_children, a.cversion) == (1, 1)
