"""ZooKeeper (the model) and each broker's ZooKeeper side, running Odradek's real code
(issue 26 item 2): the simulator's alternative to the hand-written ``SimController``.

Every broker process has one ``SimKazooClient`` (one session) and, over it, what a real
broker runs (``broker/broker.py``): a ``MetadataStore`` (registers the ephemeral
``/brokers/ids/N``, watches, reads the ``leader_and_isr`` notifications, builds the
``MetadataImage`` its replica manager applies), a ``Controller`` candidate (elected through
``/controller`` and ``/controller_epoch``; its writes fenced by the epoch znode's version)
and the ``ZkIsrStore`` its leaders write ISR changes through (conditional on the state
znode's version, in the same ``KafkaZkClient`` transactions). Their threads are replaced
by ``_Node._pump``, run by the simulator's loop whenever a watch event or a session change
reached the node, or a controller timer is due: the store's ``step`` then the
controller's ``step`` over everything queued (``take_batch``), exactly the batches their
threads would take.

The world's interface is ``SimController``'s (``odradek.sim.world``): ``znodes``,
``assignment`` and ``registered`` read the model; ``broker_failed`` expires the broker's
session (a crash or a cut from ZooKeeper, after the session timeout); ``zk_cut`` /
``zk_uncut`` cut and restore its connection; ``reassign`` writes
``/admin/reassign_partitions`` as ``kafka-reassign-partitions`` does. Every committed
write of a partition state, of ``/controller`` and of the topic znode is traced in the
timeline's words (the scenarios' predicates read the same lines).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from odradek.controller.controller import Controller
from odradek.controller.reassignment import ReplicaSets
from odradek.metadata.image import MetadataImage
from odradek.metadata.store import MetadataStore
from odradek.replication.isr_store import ZkIsrStore
from odradek.sim import zookeeper as m
from odradek.sim.gate import THREADSAFE, owned_by
from odradek.sim.harness import TOPIC, _PartitionZnode
from odradek.sim.zk_client import SimEnsemble, SimKazooClient
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import KafkaZkClient

__all__ = ["ZkCluster"]

Trace = Callable[[str], None]

_STATE_SUFFIX = "/state"
_TOPIC_PATH = znodes.topic_path(TOPIC)


class _Node:
    """One broker process's ZooKeeper side: client, metadata store, controller."""

    def __init__(self, cluster: ZkCluster, b: int, publish: Callable[[MetadataImage], None]):
        self.cluster = cluster
        self.b = b
        self.loop = cluster.ensemble.loop
        self._scheduled = False
        self._started = False
        self._timer: asyncio.TimerHandle | None = None
        # Each thread's pause after a failed step (its ``time.sleep``): virtual time.
        self._store_resume = 0.0
        self._controller_resume = 0.0
        self.client = SimKazooClient(
            cluster.ensemble,
            f"broker {b}",
            cluster.session_timeout_s,
            on_activity=self.poke,
            on_commit=cluster._committed,
        )
        self.client.node = -b  # its threads (odradek.sim.gate)
        self.isr_zkc = KafkaZkClient(self.client)
        reg = znodes.BrokerRegistration.plaintext(b, "memory", b)
        self.store = MetadataStore(KafkaZkClient(self.client), b, reg, self._publish)
        self._deliver = publish
        self.controller: Controller | None = None
        if b in cluster.candidates:
            self.controller = Controller(KafkaZkClient(self.client), b)
            self.store.listeners.append(self.controller.on_event)

    def start(self) -> None:
        """What ``Broker.start`` does with ZooKeeper: connect, start the metadata store
        (registration, watches, first image), then the controller."""
        if self.client.dead:
            return
        self.client.start()
        self.cluster._sessions[self.client.session or -1] = self.b
        self.store.start(0.0, threaded=False)
        if self.controller is not None:
            self.controller.start(threaded=False)
        self._started = True
        self.poke()

    def _publish(self, image: MetadataImage) -> None:
        # The broker applies an image on its event loop (call_soon_threadsafe).
        def apply() -> None:
            if not self.client.dead:
                self._deliver(image)

        self.loop.call_soon(apply, context=owned_by(self.loop, self.b, THREADSAFE))

    def poke(self) -> None:
        if not self._scheduled and not self.client.dead:
            self._scheduled = True
            self.loop.call_soon(self._pump, context=owned_by(self.loop, -self.b))

    def _pump(self) -> None:
        """One turn of the store's thread, then of the controller's."""
        self._scheduled = False
        if self.client.dead or not self._started:
            return
        now = self.loop.time()
        if now >= self._store_resume:
            batch = self.store.take_batch()
            if batch and not self.store.step(batch):
                self._store_resume = now + 0.5  # MetadataStore._run's pause
        c = self.controller
        if c is not None and now >= self._controller_resume:
            cbatch = c.take_batch()
            if cbatch:
                pause = c.step(cbatch)
                if pause:
                    self._controller_resume = now + pause
                elif c.has_events():
                    self.poke()  # fenced: its fresh election is queued
        self._arm(now)

    def _arm(self, now: float) -> None:
        """The next wake-up: a controller timer, or the end of a thread's pause."""
        wake = []
        c = self.controller
        if c is not None:
            wake.append(now + max(0.0, c.next_tick_in()))
            if c.has_events() and self._controller_resume > now:
                wake.append(self._controller_resume)
        if self.store.has_events() and self._store_resume > now:
            wake.append(self._store_resume)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if wake:
            self._timer = self.loop.call_at(
                min(wake), self.poke, context=owned_by(self.loop, -self.b)
            )

    def kill(self) -> None:
        self.client.kill()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class ZkCluster:
    """The model ensemble, the brokers' nodes, and an admin client (the operator's
    tools: creates the topic, requests reassignments; never cut)."""

    def __init__(
        self,
        brokers: tuple[int, ...],
        partitions: int,
        seed: int,
        trace: Trace,
        loop: asyncio.AbstractEventLoop,
        *,
        watch_latency_s: tuple[float, float] = (0.0005, 0.03),
        session_timeout_s: float = 1.5,
        candidates: tuple[int, ...] | None = None,
        startup_s: tuple[float, float] = (0.05, 0.3),
        first_controller: int | None = None,
        tracing: bool = True,
    ) -> None:
        self.brokers = brokers
        self.partitions = partitions
        self.trace = trace
        # False: the timeline is not kept (``run_seed(timeline=False)``), so committed
        # writes are not decoded into lines nobody reads.
        self.tracing = tracing
        self.session_timeout_s = session_timeout_s
        self.candidates = brokers if candidates is None else candidates
        self.ensemble = SimEnsemble(loop, seed, watch_latency_s)
        self.topic_id = uuid.UUID(int=random.Random(f"topic-{seed}").getrandbits(128))
        self.listeners: list[Callable[[MetadataImage], None]] = []  # per broker, in order
        self.unreachable: set[int] = set()
        self.nodes: dict[int, _Node] = {}
        self.writes = 0  # committed transactions (benchmarks)
        self._sessions: dict[int, int] = {}  # session id -> broker
        self._started = False
        self._initial: list[_Node] = []
        self.first_controller = brokers[0] if first_controller is None else first_controller
        self._wanted: dict[int, tuple[int, ...]] = {}  # the moves asked for, per partition
        self.startup_s = startup_s
        self._startup_rng = random.Random(f"startup-{seed}")
        self._cache: tuple[int, dict[int, _PartitionZnode], dict[int, ReplicaSets]] | None = None
        self._topic_decoded: tuple[bytes, dict[int, ReplicaSets]] | None = None
        self._states_decoded: dict[int, tuple[bytes, _PartitionZnode]] = {}
        self._state_paths = [znodes.partition_state_path(TOPIC, p) for p in range(partitions)]
        admin = self.admin = SimKazooClient(self.ensemble, "admin", 1e9, on_commit=self._committed)
        admin.start()
        znodes.ensure_base_paths(admin)
        # A fixed cluster id (get_or_create_cluster_id would draw a random one).
        admin.ensure_path("/cluster")
        admin.create(znodes.CLUSTER_ID, znodes.encode_cluster_id(f"sim-{seed}"))
        n = len(brokers)
        assignment = {p: [brokers[(p + i) % n] for i in range(n)] for p in range(partitions)}
        admin.create(
            _TOPIC_PATH,
            znodes.encode_topic(znodes.TopicAssignment(TOPIC, self.topic_id, assignment)),
        )

    # ---------------------------------------------------------------- the world's view
    def _read(self) -> tuple[dict[int, _PartitionZnode], dict[int, ReplicaSets]]:
        model = self.ensemble.model
        if self._cache is not None and self._cache[0] == model.zxid:
            return self._cache[1], self._cache[2]
        nodes = model._t.nodes
        # Any write moves the zxid (a notification, a registration), but most leave the
        # topic and the states as they were: each is decoded again only when its bytes
        # (or a state's version) changed. The values are not mutated by anyone.
        data = nodes[_TOPIC_PATH].data
        if self._topic_decoded is None or self._topic_decoded[0] != data:
            a = znodes.decode_topic(TOPIC, data)
            decoded = {
                p: ReplicaSets(
                    tuple(a.partitions[p]),
                    tuple(a.adding_replicas.get(p, ())),
                    tuple(a.removing_replicas.get(p, ())),
                )
                for p in range(self.partitions)
            }
            self._topic_decoded = (data, decoded)
        sets = dict(self._topic_decoded[1])
        states: dict[int, _PartitionZnode] = {}
        for p in range(self.partitions):
            node = nodes.get(self._state_paths[p])
            if node is None:
                states[p] = _PartitionZnode(-1, -1, ())
                continue
            got = self._states_decoded.get(p)
            if got is None or got[0] != node.data or got[1].version != node.stat.version:
                st = znodes.decode_partition_state(node.data)
                z = _PartitionZnode(st.leader, st.leader_epoch, tuple(st.isr), node.stat.version)
                got = self._states_decoded[p] = (node.data, z)
            states[p] = got[1]
        self._cache = (model.zxid, states, sets)
        return states, sets

    @property
    def znodes(self) -> dict[int, _PartitionZnode]:
        return self._read()[0]

    @property
    def assignment(self) -> dict[int, ReplicaSets]:
        return self._read()[1]

    @property
    def registered(self) -> set[int]:
        node = self.ensemble.model._t.nodes.get(znodes.BROKER_IDS)
        return {int(c) for c in node.children} if node is not None else set()

    @property
    def controller_id(self) -> int:
        node = self.ensemble.model._t.nodes.get(znodes.CONTROLLER)
        return znodes.decode_controller(node.data).broker_id if node is not None else -1

    @property
    def controller_epoch(self) -> int:
        node = self.ensemble.model._t.nodes.get(znodes.CONTROLLER_EPOCH)
        return znodes.decode_controller_epoch(node.data) if node is not None else 0

    # ---------------------------------------------------------------- processes
    def store_for(self, broker: int, loop: asyncio.AbstractEventLoop) -> ZkIsrStore:
        """A broker process starts (``ReplicationHarness.start_broker``): its node joins
        ZooKeeper (a new session, its registration) and its leaders' ISR store writes
        through that session."""
        listener = self.listeners[self.brokers.index(broker)]
        node = self.nodes[broker] = _Node(self, broker, listener)
        if not self._started:
            self._initial.append(node)  # started together by started()
        else:
            # A restart: the process loads its logs before it reaches ZooKeeper (a
            # seeded delay). It also keeps the old session's failure visible: a broker
            # re-registering in the same instant would look to a controller as if it
            # had never gone (a bounce no controller saw).
            loop.call_later(
                self._startup_rng.uniform(*self.startup_s),
                self._start,
                node,
                context=owned_by(loop, broker),
            )
        return ZkIsrStore(lambda: node.isr_zkc, lambda _t: self.topic_id, broker)

    def _start(self, node: _Node) -> None:
        node.start()
        b = node.b
        if b in self.unreachable and not node.client.dead:
            # Started while cut from ZooKeeper: it registered just before the cut (a
            # simplification), and that session expires unless the cut heals first.
            node.client.cut()

            def expire() -> None:
                if b in self.unreachable and self.nodes.get(b) is node:
                    self.broker_failed(b)

            # ZooKeeper's timer, not the broker's: it runs while the broker is paused.
            loop = self.ensemble.loop
            loop.call_later(self.session_timeout_s, expire, context=owned_by(loop, 0))

    def started(self) -> None:
        """Every broker process of the first start exists: their nodes join ZooKeeper,
        ``first_controller``'s first (it wins the first election); later starts are
        restarts."""
        self._started = True
        first = [n for n in self._initial if n.b == self.first_controller]
        for node in first + [n for n in self._initial if n.b != self.first_controller]:
            self._start(node)
        self._initial.clear()

    def crashed(self, b: int) -> None:
        """kill -9: the node stops; its session lives until ``broker_failed``."""
        node = self.nodes.get(b)
        if node is not None:
            node.kill()

    def broker_failed(self, b: int) -> None:
        """The broker's session expires (its timeout after a crash or a cut)."""
        node = self.nodes.get(b)
        if node is not None and node.client.expire():
            self.trace(f"controller: broker {b} session expired")

    def broker_registered(self, b: int) -> None:
        """Nothing to do: a started node registers itself, and a reconnected one whose
        session ended registers again (``MetadataStore``, SessionReestablished)."""

    def publish(self) -> None:
        """Nothing to do: a reconnected session gets the events it missed."""

    def zk_cut(self, b: int) -> None:
        self.unreachable.add(b)
        node = self.nodes.get(b)
        if node is not None:
            node.client.cut()

    def zk_uncut(self, b: int) -> None:
        self.unreachable.discard(b)
        node = self.nodes.get(b)
        if node is None or node.client.dead:
            return
        old = node.client.session
        node.client.reconnect()
        if node.client.session != old and node.client.session is not None:
            self._sessions[node.client.session] = b

    def reassign(self, partition: int, target: tuple[int, ...]) -> None:
        """``kafka-reassign-partitions --execute``: the request znode (merged into one
        already pending, as the admin client does)."""
        self._wanted[partition] = target
        self._request(partition, target, "")

    def _request(self, partition: int, target: tuple[int, ...], again: str) -> None:
        path = znodes.REASSIGN_PARTITIONS
        entries: dict[tuple[str, int], list[int] | None] = {(TOPIC, partition): list(target)}
        self.trace(f"admin: reassign p{partition} to {list(target)}{again}")
        # The controller refuses a target that adds an unregistered broker (as Kafka's
        # does): the operator runs the tool again until the move is accepted.
        self.ensemble.loop.call_later(1.0, self._reassigned, partition, target)
        try:
            data, stat = self.admin.get(path)
        except Exception:  # noqa: BLE001 - NoNodeError: no request pending
            self.admin.create(path, znodes.encode_reassignment(entries))
            return
        merged = {**znodes.decode_reassignment(data), **entries}
        self.admin.set(path, znodes.encode_reassignment(merged), version=stat.version)

    def _reassigned(self, partition: int, target: tuple[int, ...]) -> None:
        if self._wanted.get(partition) != target:
            return  # another move was asked for since
        a = self.assignment[partition]
        if set(a.target) == set(target):
            return  # accepted (it completes on its own)
        # (A move still running toward another target was not replaced by this one.)
        if znodes.REASSIGN_PARTITIONS in self.ensemble.model._t.nodes:
            self.ensemble.loop.call_later(1.0, self._reassigned, partition, target)
            return  # not processed yet
        self._request(partition, target, " (again)")

    # ---------------------------------------------------------------- the timeline
    def _who(self, client: SimKazooClient) -> str:
        return client.name

    def _committed(
        self, client: SimKazooClient, ops: Sequence[m.Op], results: list[m.Result]
    ) -> None:
        """Trace what a transaction did to the znodes the timeline follows."""
        ok = not any(isinstance(r, m.ZkError) for r in results)
        if ok:
            self.writes += 1
        if not self.tracing:
            return  # what follows only writes timeline lines
        fenced = any(isinstance(op, m.Check) and op.path == znodes.CONTROLLER_EPOCH for op in ops)
        b = self._sessions.get(client.session or -1, -1)
        for op in ops:
            path = op.path
            if path.endswith(_STATE_SUFFIX) and isinstance(op, (m.SetData, m.Create)):
                p = int(path.rsplit("/", 2)[1])
                st = znodes.decode_partition_state(op.data)
                isr = list(st.isr)
                if not fenced:  # a leader's ISR change (ZkIsrStore)
                    assert isinstance(op, m.SetData)
                    what = (
                        f"ISR write by {b}: p{p} epoch {st.leader_epoch} isr {isr} at "
                        f"version {op.version}"
                    )
                    self.trace(
                        f"{what}: ok, version {op.version + 1}"
                        if ok
                        else f"{what}: {_failure(ops, results)}"
                    )
                elif not ok:
                    self.trace(f"controller {b}: p{p} write refused: {_failure(ops, results)}")
                elif st.leader < 0:
                    self.trace(f"controller: p{p} offline epoch {st.leader_epoch} isr {isr}")
                else:
                    self.trace(
                        f"controller: p{p} leader {st.leader} epoch {st.leader_epoch} isr {isr}"
                    )
            elif not ok:
                continue
            elif path == znodes.CONTROLLER and isinstance(op, m.Create):
                epoch = next(
                    (
                        znodes.decode_controller_epoch(o.data)
                        for o in ops
                        if isinstance(o, m.SetData) and o.path == znodes.CONTROLLER_EPOCH
                    ),
                    -1,
                )
                self.trace(f"controller: broker {b} is the controller (epoch {epoch})")
            elif path == znodes.CONTROLLER and isinstance(op, m.Delete):
                self.trace(f"controller: broker {b} resigned")
            elif path.startswith(znodes.BROKER_IDS + "/") and isinstance(op, m.Create):
                self.trace(f"controller: broker {path.rsplit('/', 1)[1]} registered")
            elif path == _TOPIC_PATH and isinstance(op, m.SetData):
                a = znodes.decode_topic(TOPIC, op.data)
                for p in sorted(a.partitions):
                    self.trace(
                        f"controller: p{p} replicas {a.partitions[p]} adding "
                        f"{a.adding_replicas.get(p, [])} removing {a.removing_replicas.get(p, [])}"
                    )


def _failure(ops: Sequence[m.Op], results: list[Any]) -> str:
    for op, r in zip(ops, results):
        if isinstance(r, m.ZkError) and not isinstance(r, (m.RolledBack, m.RuntimeInconsistency)):
            if isinstance(op, m.Check) and op.path == znodes.CONTROLLER_EPOCH:
                return "fenced (controller epoch moved)"
            return type(r).__name__
    return "failed"
