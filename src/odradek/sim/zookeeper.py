"""An in-memory model of ZooKeeper's client-visible semantics, for the simulator (issue 26).

One ``ZkModel`` is one ensemble seen by its clients: a single, totally ordered history of
write transactions (ZooKeeper's linearizable writes; every read sees the latest state,
i.e. as if each client ``sync``-ed first), each with its own zxid. What it keeps of ZooKeeper,
checked against the real server by ``tests/integration/test_zk_model.py``:

* znodes: ``create`` (persistent, ephemeral, sequential: the suffix is the parent's
  count of children *created* so far, ``%010d``: ZooKeeper stores that count and reports
  ``cversion`` as ``2 * created - numChildren``, i.e. creates plus deletes),
  ``get``/``exists``/``set``/``delete`` with
  version checks (-1: any), ``get_children`` (unordered in ZooKeeper; sorted here);
* errors and the order ZooKeeper's ``PrepRequestProcessor`` checks them in: create:
  parent missing (NoNode), node exists (NodeExists), ephemeral parent
  (NoChildrenForEphemerals); delete: NoNode, BadVersion, NotEmpty; set/check: NoNode,
  BadVersion;
* stats: czxid/mzxid/pzxid, version, cversion (+1 per child created or deleted),
  ephemeralOwner (the session id), dataLength, numChildren, ctime/mtime;
* ``multi``: all or nothing, one zxid; on failure ZooKeeper's report -- the ops before the
  failing one ``RolledBack`` (code 0), the failing one its own error, the ops after it
  ``RuntimeInconsistency`` (code -2);
* sessions with a timeout on the runtime clock (``odradek.runtime.clock``: virtual time in
  the simulator): a session not heard from (``touch``) for its timeout expires at the
  next ``expire_due``; closing or expiring a session deletes its ephemerals in one
  transaction (one zxid) and drops its watches;
* one-shot watches with ZooKeeper's firing rules: a data watch (``get``, or ``exists`` on
  an existing node) fires NodeDataChanged on set, NodeDeleted on delete; an exists watch
  on a missing node fires NodeCreated; a child watch (``get_children``) fires
  NodeChildrenChanged when a child is created or deleted and NodeDeleted when the node
  goes. A session holds at most one watch per (path, kind): the server dedups, so one
  event per session (ZooKeeper's ``WatchManager``). A failed read sets no watch.

Not modelled: ACLs, quotas, containers/TTL nodes, the follower lag a client may observe
without ``sync``, connection loss as distinct from expiry (a client here is either in
its session or the session is gone), and the order of ephemeral deletions inside one
close (their stats do not depend on it).

Pure: no I/O, no asyncio. Watch events are appended to ``events`` and handed to the
callback the watch was set with, synchronously, after the transaction is applied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from odradek.runtime import clock

__all__ = [
    "ZkError",
    "NoNode",
    "NodeExists",
    "BadVersion",
    "NotEmpty",
    "NoChildrenForEphemerals",
    "SessionExpired",
    "RolledBack",
    "RuntimeInconsistency",
    "BadArguments",
    "EventType",
    "WatchedEvent",
    "Stat",
    "Create",
    "Delete",
    "SetData",
    "Check",
    "Op",
    "ZkModel",
]


class ZkError(Exception):
    """A ZooKeeper error: ``code`` is ZooKeeper's (``KeeperException.Code``)."""

    code = -1

    def __init__(self, path: str = "") -> None:
        super().__init__(f"{type(self).__name__}: {path}")
        self.path = path


class RolledBack(ZkError):
    code = 0  # a multi's op before the one that failed


class RuntimeInconsistency(ZkError):
    code = -2  # a multi's op after the one that failed


class BadArguments(ZkError):
    code = -8


class NoNode(ZkError):
    code = -101


class BadVersion(ZkError):
    code = -103


class NoChildrenForEphemerals(ZkError):
    code = -108


class NodeExists(ZkError):
    code = -110


class NotEmpty(ZkError):
    code = -111


class SessionExpired(ZkError):
    code = -112


class EventType(Enum):
    NodeCreated = 1
    NodeDeleted = 2
    NodeDataChanged = 3
    NodeChildrenChanged = 4


@dataclass(frozen=True)
class WatchedEvent:
    session: int
    type: EventType
    path: str


Watcher = Callable[[WatchedEvent], None]


@dataclass
class Stat:
    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    version: int = 0
    cversion: int = 0
    aversion: int = 0
    ephemeral_owner: int = 0
    data_length: int = 0
    num_children: int = 0


def _copy_stat(stat: Stat) -> Stat:
    """``copy.copy(stat)`` without ``copy``'s ``__reduce_ex__`` round trip (a read
    returns a copy: ~2,000 a schedule)."""
    out = object.__new__(Stat)
    out.__dict__.update(stat.__dict__)
    return out


@dataclass
class _Node:
    data: bytes
    stat: Stat
    children: set[str] = field(default_factory=set)
    created: int = 0  # children ever created: the next sequential suffix


# Multi operations (kazoo's TransactionRequest ops).
@dataclass(frozen=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class Check:
    path: str
    version: int


Op = Create | Delete | SetData | Check
Result = str | Stat | bool | ZkError  # create: its path; set: its stat; delete/check: True


@dataclass
class _Session:
    timeout_s: float
    last_heard: float


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


# Paths that passed ``_check_path``: a run asks for the same few hundred again and again
# (~1,500 requests a schedule). Bounded, in case a long-lived process makes many.
_VALID_PATHS: set[str] = set()
_VALID_PATHS_MAX = 100_000


def _check_path(path: str) -> None:
    # What the client library refuses before sending (kazoo raises ValueError; the
    # server's PathUtils.validatePath answers BadArguments): the model raises
    # BadArguments for both.
    if path in _VALID_PATHS:
        return
    if not path.startswith("/") or (path != "/" and path.endswith("/")):
        raise BadArguments(path)
    if path != "/" and any(p in ("", ".", "..") for p in path[1:].split("/")):
        raise BadArguments(path)
    if len(_VALID_PATHS) < _VALID_PATHS_MAX:
        _VALID_PATHS.add(path)


@dataclass
class _Tree:
    nodes: dict[str, _Node]
    zxid: int
    # A multi's scratch tree shares the nodes of the live one until it changes them
    # (copy on write): ``own`` copies a node the first time. None: the live tree itself.
    owned: set[str] | None = None

    def own(self, path: str) -> _Node:
        node = self.nodes[path]
        if self.owned is not None and path not in self.owned:
            node = _Node(node.data, _copy_stat(node.stat), set(node.children), node.created)
            self.nodes[path] = node
            self.owned.add(path)
        return node


class ZkModel:
    """The ensemble. Session ids start at ``first_session`` (any positive ids will do:
    only their equality matters)."""

    def __init__(self, first_session: int = 0x1000) -> None:
        now = clock.time_ns() // 1_000_000
        self._t = _Tree({"/": _Node(b"", Stat(0, 0, 0, now, now))}, 0)
        self._next_session = first_session
        self.sessions: dict[int, _Session] = {}
        self._data_watches: dict[str, dict[int, list[Watcher | None]]] = {}
        self._child_watches: dict[str, dict[int, list[Watcher | None]]] = {}
        self.events: list[WatchedEvent] = []

    @property
    def zxid(self) -> int:
        return self._t.zxid

    # ------------------------------------------------------------------ sessions
    def connect(self, timeout_s: float) -> int:
        sid = self._next_session
        self._next_session += 1
        self._t.zxid += 1  # createSession is a transaction
        self.sessions[sid] = _Session(timeout_s, clock.monotonic())
        return sid

    def touch(self, session: int) -> None:
        """A heartbeat (or any request) from the session's client."""
        self._live(session).last_heard = clock.monotonic()

    def expire_due(self) -> list[int]:
        """Expire every session not heard from for its timeout; returns their ids."""
        now = clock.monotonic()
        due = [s for s, st in self.sessions.items() if now - st.last_heard >= st.timeout_s]
        for s in due:
            self.close(s)
        return due

    def close(self, session: int) -> None:
        """Close (or expire) a session: its ephemerals go in one transaction."""
        self._live(session)
        del self.sessions[session]
        for table in (self._data_watches, self._child_watches):
            for path in list(table):
                table[path].pop(session, None)
                if not table[path]:
                    del table[path]
        mine = sorted(
            (p for p, n in self._t.nodes.items() if n.stat.ephemeral_owner == session),
            reverse=True,
        )
        t = self._t
        t.zxid += 1  # closeSession is a transaction, ephemerals or not
        fired: list[tuple[str, EventType, str]] = []
        for p in mine:
            self._apply_delete(t, p, -1, fired)
        self._fire(fired)

    def _live(self, session: int) -> _Session:
        st = self.sessions.get(session)
        if st is None:
            raise SessionExpired()
        return st

    # ------------------------------------------------------------------ reads
    def exists(
        self, session: int, path: str, watch: Watcher | None = None, *, set_watch: bool = False
    ) -> Stat | None:
        self.touch(session)
        _check_path(path)
        node = self._t.nodes.get(path)
        if watch is not None or set_watch:
            # ZooKeeper keeps exists watches on missing nodes with the data watches.
            self._add(self._data_watches, path, session, watch)
        return _copy_stat(node.stat) if node is not None else None

    def get(
        self, session: int, path: str, watch: Watcher | None = None, *, set_watch: bool = False
    ) -> tuple[bytes, Stat]:
        self.touch(session)
        node = self._node(path)
        if watch is not None or set_watch:
            self._add(self._data_watches, path, session, watch)
        return node.data, _copy_stat(node.stat)

    def get_children(
        self, session: int, path: str, watch: Watcher | None = None, *, set_watch: bool = False
    ) -> list[str]:
        self.touch(session)
        node = self._node(path)
        if watch is not None or set_watch:
            self._add(self._child_watches, path, session, watch)
        return sorted(node.children)

    def _node(self, path: str) -> _Node:
        _check_path(path)
        node = self._t.nodes.get(path)
        if node is None:
            raise NoNode(path)
        return node

    @staticmethod
    def _add(
        table: dict[str, dict[int, list[Watcher | None]]],
        path: str,
        session: int,
        watch: Watcher | None,
    ) -> None:
        cbs = table.setdefault(path, {}).setdefault(session, [])
        if watch not in cbs:
            cbs.append(watch)

    # ------------------------------------------------------------------ writes
    def create(
        self,
        session: int,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
    ) -> str:
        res = self._single(session, Create(path, data, ephemeral, sequence))
        assert isinstance(res, str)
        return res

    def set(self, session: int, path: str, data: bytes, version: int = -1) -> Stat:
        res = self._single(session, SetData(path, data, version))
        assert isinstance(res, Stat)
        return res

    def delete(self, session: int, path: str, version: int = -1) -> None:
        self._single(session, Delete(path, version))

    def multi(self, session: int, ops: Sequence[Op]) -> list[Result]:
        """All or nothing, one zxid. On failure nothing changes and the list says why
        (ZooKeeper's per-op ErrorResults); it is returned, not raised, as kazoo's
        ``transaction().commit()`` returns it."""
        self.touch(session)
        scratch = _Tree(dict(self._t.nodes), self._t.zxid + 1, set())
        fired: list[tuple[str, EventType, str]] = []
        results: list[Result] = []
        for i, op in enumerate(ops):
            try:
                results.append(self._apply(scratch, session, op, fired))
            except ZkError as e:
                self._t.zxid += 1  # the failed multi is logged (an error txn): a zxid
                report: list[Result] = [RolledBack(o.path) for o in ops[:i]]
                return report + [e] + [RuntimeInconsistency(o.path) for o in ops[i + 1 :]]
        if not ops:
            return []
        self._t = scratch
        self._fire(fired)
        return results

    def _single(self, session: int, op: Op) -> Result:
        self.touch(session)
        # Checks precede every change, so a failed op leaves the tree as it was; it still
        # takes a zxid (ZooKeeper logs an error txn for it).
        self._t.zxid += 1
        fired: list[tuple[str, EventType, str]] = []
        res = self._apply(self._t, session, op, fired)
        self._fire(fired)
        return res

    def _apply(
        self, t: _Tree, session: int, op: Op, fired: list[tuple[str, EventType, str]]
    ) -> Result:
        _check_path(op.path)
        if isinstance(op, Create):
            return self._apply_create(t, session, op, fired)
        if isinstance(op, Delete):
            self._apply_delete(t, op.path, op.version, fired)
            return True
        node = t.nodes.get(op.path)
        if node is None:
            raise NoNode(op.path)
        if op.version != -1 and op.version != node.stat.version:
            raise BadVersion(op.path)
        if isinstance(op, Check):
            return True
        node = t.own(op.path)
        node.data = op.data
        node.stat.version += 1
        node.stat.mzxid = t.zxid
        node.stat.mtime = clock.time_ns() // 1_000_000
        node.stat.data_length = len(op.data)
        fired.append(("data", EventType.NodeDataChanged, op.path))
        return _copy_stat(node.stat)

    def _apply_create(
        self, t: _Tree, session: int, op: Create, fired: list[tuple[str, EventType, str]]
    ) -> str:
        if op.path == "/":
            raise NodeExists(op.path)
        ppath = _parent(op.path)
        parent = t.nodes.get(ppath)
        if parent is None:
            raise NoNode(op.path)
        path = op.path + (f"{parent.created:010d}" if op.sequence else "")
        if path in t.nodes:
            raise NodeExists(path)
        if parent.stat.ephemeral_owner != 0:
            raise NoChildrenForEphemerals(path)
        now = clock.time_ns() // 1_000_000
        parent = t.own(ppath)
        if t.owned is not None:
            t.owned.add(path)
        t.nodes[path] = _Node(
            op.data,
            Stat(
                t.zxid,
                t.zxid,
                t.zxid,
                now,
                now,
                ephemeral_owner=session if op.ephemeral else 0,
                data_length=len(op.data),
            ),
        )
        parent.children.add(path.rsplit("/", 1)[1])
        parent.created += 1
        parent.stat.cversion += 1
        parent.stat.pzxid = t.zxid
        parent.stat.num_children = len(parent.children)
        fired.append(("data", EventType.NodeCreated, path))
        fired.append(("child", EventType.NodeChildrenChanged, ppath))
        return path

    @staticmethod
    def _apply_delete(
        t: _Tree, path: str, version: int, fired: list[tuple[str, EventType, str]]
    ) -> None:
        if path == "/":
            raise BadArguments(path)  # ZooKeeper refuses to delete the root
        node = t.nodes.get(path)
        if node is None:
            raise NoNode(path)
        if version != -1 and version != node.stat.version:
            raise BadVersion(path)
        if node.children:
            raise NotEmpty(path)
        ppath = _parent(path)
        parent = t.own(ppath)
        del t.nodes[path]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.stat.cversion += 1
        parent.stat.pzxid = t.zxid
        parent.stat.num_children = len(parent.children)
        fired.append(("data", EventType.NodeDeleted, path))
        fired.append(("child", EventType.NodeDeleted, path))
        fired.append(("child", EventType.NodeChildrenChanged, ppath))

    # ------------------------------------------------------------------ watches
    def _fire(self, fired: list[tuple[str, EventType, str]]) -> None:
        """Deliver the events of one applied transaction, in its order; a session gets
        one event per (path, event type) and each watch fires once."""
        sent: set[tuple[int, EventType, str]] = set()
        calls: list[tuple[Watcher, WatchedEvent]] = []
        for kind, etype, path in fired:
            table = self._data_watches if kind == "data" else self._child_watches
            by_session = table.pop(path, None)
            if not by_session:
                continue
            for session in sorted(by_session):
                ev = WatchedEvent(session, etype, path)
                if (session, etype, path) not in sent:
                    sent.add((session, etype, path))
                    self.events.append(ev)
                calls += [(cb, ev) for cb in by_session[session] if cb is not None]
        for cb, ev in calls:
            cb(ev)
