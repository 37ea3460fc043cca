"""The broker's view of ZooKeeper: registration, watches, and the metadata image (SPEC R12).

Threading model (Kafka's: watches only enqueue events):

* kazoo runs watch callbacks on its own thread; each callback only puts a typed event on
  ``self._events``.
* One metadata thread drains that queue, re-reads what changed from ZooKeeper, builds a
  new immutable ``MetadataImage`` and hands it to the asyncio loop with
  ``call_soon_threadsafe``. The asyncio loop never blocks on ZooKeeper.
* Admin writes (create/delete topics, add partitions) are synchronous kazoo calls run in
  a worker thread by the handlers (``asyncio.to_thread``).

Session loss: when kazoo reports LOST, the ephemeral registration is gone; on the next
CONNECTED we register again and retry the controller election (FACTS: kazoo does not
recreate ephemeral nodes itself).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.zk import znodes

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class BrokersChanged:
    pass


@dataclass(frozen=True, slots=True)
class TopicsChanged:
    pass


@dataclass(frozen=True, slots=True)
class TopicChanged:
    topic: str


@dataclass(frozen=True, slots=True)
class PartitionStateChanged:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class TopicConfigChanged:
    topic: str


@dataclass(frozen=True, slots=True)
class ControllerChanged:
    pass


@dataclass(frozen=True, slots=True)
class BrokerConfigChanged:
    """``/config/brokers/<id>`` or ``/config/brokers/<default>`` changed (KIP-226)."""


@dataclass(frozen=True, slots=True)
class DeletionsChanged:
    pass


@dataclass(frozen=True, slots=True)
class SessionReestablished:
    pass


@dataclass(frozen=True, slots=True)
class AdminRequestsChanged:
    """A controller request znode changed (SPEC R5, R13): /admin/preferred_replica_election,
    /admin/unclean_leader_election, /admin/reassign_partitions (KIP-455) or a child of
    /admin/controlled_shutdown."""


@dataclass(frozen=True, slots=True)
class Stop:
    pass


MetadataEvent = (BrokersChanged | TopicsChanged | TopicChanged | PartitionStateChanged
                 | TopicConfigChanged | ControllerChanged | DeletionsChanged
                 | BrokerConfigChanged
                 | SessionReestablished | AdminRequestsChanged | Stop)


@dataclass(slots=True)
class _TopicState:
    topic_id: uuid.UUID
    assignment: dict[int, list[int]]
    states: dict[int, tuple[znodes.PartitionState | None, int]] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)


class MetadataStore:
    """Owns the broker's ZooKeeper session and produces ``MetadataImage`` snapshots."""

    def __init__(self, zk: KazooClient, broker_id: int, registration: znodes.BrokerRegistration,
                 publish: Callable[[MetadataImage], None]) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.registration = registration
        self._publish = publish
        self._events: queue.Queue[MetadataEvent] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="zk-metadata", daemon=True)
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, _TopicState] = {}
        self._deleting: set[str] = set()
        self._controller_id = -1
        self._cluster_id: str | None = None
        self._broker_overrides: dict[str, str] = {}
        self._default_broker_overrides: dict[str, str] = {}
        self._watched_topics: set[str] = set()
        self._watched_states: set[tuple[str, int]] = set()
        # Incremental images: a topic's TopicInfo is rebuilt only when something of it
        # changed, so one state-znode change costs O(that topic), not O(all partitions).
        self._built: dict[str, TopicInfo] = {}
        self._dirty: set[str] = set()
        self._everything_changed = True
        self._stopped = threading.Event()
        self._lost = False
        self.listeners: list[Callable[[MetadataEvent], None]] = []  # e.g. the controller

    # ------------------------------------------------------------------ lifecycle
    def start(self, registration_timeout_s: float) -> None:
        znodes.ensure_base_paths(self.zk)
        self._cluster_id = znodes.get_or_create_cluster_id(self.zk)
        self.register(registration_timeout_s)
        self.zk.add_listener(self._on_state)
        self.zk.ChildrenWatch(znodes.BROKER_IDS, self._watch_children(BrokersChanged()))
        self.zk.ChildrenWatch(znodes.BROKER_TOPICS, self._watch_children(TopicsChanged()))
        self.zk.ChildrenWatch(znodes.DELETE_TOPICS, self._watch_children(DeletionsChanged()))
        self.zk.DataWatch(znodes.CONTROLLER, self._watch_data(ControllerChanged()))
        for entity in (str(self.broker_id), znodes.DEFAULT_BROKER_ENTITY):
            self.zk.DataWatch(znodes.broker_config_path(entity),
                              self._watch_data(BrokerConfigChanged()))
        # Controller requests (controller.py): watched here so they arrive as events.
        self.zk.ensure_path(znodes.CONTROLLED_SHUTDOWN_PATH)
        for path in (znodes.PREFERRED_REPLICA_ELECTION, znodes.UNCLEAN_LEADER_ELECTION_PATH,
                     znodes.REASSIGN_PARTITIONS):
            self.zk.DataWatch(path, self._watch_data(AdminRequestsChanged()))
        self.zk.ChildrenWatch(znodes.CONTROLLED_SHUTDOWN_PATH,
                              self._watch_children(AdminRequestsChanged()))
        # Initial full load before serving, so the first image is complete.
        self._reload_all()
        self._emit()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._events.put(Stop())
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def register(self, timeout_s: float) -> None:
        """Create ``/brokers/ids/N`` (ephemeral). A node left by our previous session
        (e.g. after kill -9) lingers until that session expires, so retry until then."""
        data = znodes.encode_broker(self.registration)
        path = znodes.broker_path(self.broker_id)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                log.info("registered %s", path)
                return
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path)
                    if stat.ephemeralOwner == self.zk.client_id[0]:
                        return
                except NoNodeError:
                    continue
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{path} is held by another session (is broker.id "
                        f"{self.broker_id} already running?)") from None
                time.sleep(0.2)

    def add_event(self, ev: MetadataEvent) -> None:
        self._events.put(ev)

    # ------------------------------------------------------------------ kazoo callbacks
    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._lost = True
            if not self._stopped.is_set():  # closing our own session is not news
                log.warning("ZooKeeper session lost")
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            self._events.put(SessionReestablished())

    def _watch_children(self, ev: MetadataEvent) -> Callable[[list[str]], bool]:
        def cb(_children: list[str]) -> bool:
            if self._stopped.is_set():
                return False
            self._events.put(ev)
            return True
        return cb

    def _watch_data(self, ev: MetadataEvent,
                    alive: Callable[[], bool] = lambda: True) -> Callable[..., bool]:
        def cb(_data: bytes | None, _stat: object, *_: object) -> bool:
            if self._stopped.is_set() or not alive():
                return False
            self._events.put(ev)
            return True
        return cb

    # ------------------------------------------------------------------ event loop
    def _run(self) -> None:
        while not self._stopped.is_set():
            ev = self._events.get()
            batch = [ev]
            try:
                while True:
                    batch.append(self._events.get_nowait())
            except queue.Empty:
                pass
            if any(isinstance(e, Stop) for e in batch):
                return
            try:
                self._handle(batch)
                self._emit()
            except Exception:
                log.exception("metadata update failed; retrying")
                time.sleep(0.5)
                for e in batch:
                    self._events.put(e)
            for listener in self.listeners:
                for e in batch:
                    listener(e)

    def _handle(self, batch: list[MetadataEvent]) -> None:
        kinds = {type(e) for e in batch}
        if SessionReestablished in kinds:
            self.register(timeout_s=60)
            self._reload_all()
            return
        if BrokersChanged in kinds:
            self._load_brokers()
        if ControllerChanged in kinds:
            self._load_controller()
        if BrokerConfigChanged in kinds:
            self._load_broker_configs()
        if TopicsChanged in kinds or DeletionsChanged in kinds:
            self._load_topic_list()
        for e in batch:
            if isinstance(e, TopicChanged) and e.topic in self._topics:
                self._load_topic(e.topic)
            elif isinstance(e, PartitionStateChanged) and e.topic in self._topics:
                self._load_state(e.topic, e.partition)
            elif isinstance(e, TopicConfigChanged) and e.topic in self._topics:
                self._load_config(e.topic)

    def _reload_all(self) -> None:
        self._built.clear()
        self._everything_changed = True
        self._load_brokers()
        self._load_controller()
        self._load_broker_configs()
        self._topics.clear()
        self._watched_topics.clear()
        self._watched_states.clear()
        self._load_topic_list()

    def _load_brokers(self) -> None:
        self._everything_changed = True  # leader addresses and liveness matter everywhere
        brokers: dict[int, BrokerInfo] = {}
        for child in self.zk.get_children(znodes.BROKER_IDS):
            try:
                data, _ = self.zk.get(znodes.broker_path(int(child)))
            except (NoNodeError, ValueError):
                continue
            reg = znodes.decode_broker(int(child), data)
            brokers[reg.broker_id] = BrokerInfo(reg.broker_id, reg.host, reg.port, reg.rack)
        self._brokers = brokers

    def _load_controller(self) -> None:
        try:
            data, _ = self.zk.get(znodes.CONTROLLER)
            self._controller_id = znodes.decode_controller(data).broker_id
        except NoNodeError:
            self._controller_id = -1

    def _load_broker_configs(self) -> None:
        def read(entity: str) -> dict[str, str]:
            try:
                data, _ = self.zk.get(znodes.broker_config_path(entity))
            except NoNodeError:
                return {}
            return znodes.decode_topic_config(data)  # same JSON as topic configs
        self._broker_overrides = read(str(self.broker_id))
        self._default_broker_overrides = read(znodes.DEFAULT_BROKER_ENTITY)

    def _load_topic_list(self) -> None:
        names = set(self.zk.get_children(znodes.BROKER_TOPICS))
        deleting = set(self.zk.get_children(znodes.DELETE_TOPICS))
        self._dirty |= deleting ^ self._deleting
        self._deleting = deleting
        for gone in set(self._topics) - names:
            del self._topics[gone]
            self._dirty.add(gone)
            self._watched_topics.discard(gone)
            self._watched_states = {k for k in self._watched_states if k[0] != gone}
        for name in names - set(self._topics):
            self._load_topic(name)

    def _load_topic(self, topic: str) -> None:
        try:
            data, _ = self.zk.get(znodes.topic_path(topic))
        except NoNodeError:
            self._topics.pop(topic, None)
            return
        assignment = znodes.decode_topic(topic, data)
        self._dirty.add(topic)
        ts = self._topics.get(topic)
        if ts is None:
            ts = _TopicState(topic_id=assignment.topic_id or uuid.UUID(int=0),
                             assignment=assignment.partitions)
            self._topics[topic] = ts
            self._load_config(topic)
        ts.assignment = assignment.partitions
        ts.adding = assignment.adding_replicas
        ts.removing = assignment.removing_replicas
        if topic not in self._watched_topics:
            self._watched_topics.add(topic)
            alive = lambda t=topic: t in self._topics  # noqa: E731
            self.zk.DataWatch(znodes.topic_path(topic), self._watch_data(TopicChanged(topic), alive))
            self.zk.DataWatch(znodes.topic_config_path(topic),
                              self._watch_data(TopicConfigChanged(topic), alive))
        for p in assignment.partitions:
            if p not in ts.states:
                self._load_state(topic, p)
            if (topic, p) not in self._watched_states:
                self._watched_states.add((topic, p))
                alive = lambda t=topic: t in self._topics  # noqa: E731
                self.zk.DataWatch(znodes.partition_state_path(topic, p),
                                  self._watch_data(PartitionStateChanged(topic, p), alive))

    def _load_state(self, topic: str, p: int) -> None:
        ts = self._topics[topic]
        self._dirty.add(topic)
        try:
            data, stat = self.zk.get(znodes.partition_state_path(topic, p))
            ts.states[p] = (znodes.decode_partition_state(data), stat.version)
        except NoNodeError:
            ts.states[p] = (None, -1)

    def _load_config(self, topic: str) -> None:
        self._dirty.add(topic)
        try:
            data, _ = self.zk.get(znodes.topic_config_path(topic))
            self._topics[topic].configs = znodes.decode_topic_config(data)
        except NoNodeError:
            self._topics[topic].configs = {}

    # ------------------------------------------------------------------ image
    def build_image(self) -> MetadataImage:
        topics: dict[str, TopicInfo] = {}
        for name, ts in self._topics.items():
            info = self._built.get(name)
            if info is None or name in self._dirty:
                info = self._built[name] = self._topic_info(name, ts)
            topics[name] = info
        for gone in set(self._built) - set(self._topics):
            del self._built[gone]
        changed = None if self._everything_changed else frozenset(self._dirty)
        self._dirty.clear()
        self._everything_changed = False
        return MetadataImage(self._cluster_id, self._controller_id, dict(self._brokers),
                             topics, complete=True, changed_topics=changed,
                             broker_overrides=dict(self._broker_overrides),
                             default_broker_overrides=dict(self._default_broker_overrides))

    def _topic_info(self, name: str, ts: _TopicState) -> TopicInfo:
        parts: dict[int, PartitionInfo] = {}
        for p, replicas in ts.assignment.items():
            state, version = ts.states.get(p, (None, -1))
            adding = tuple(ts.adding.get(p, ()))
            removing = tuple(ts.removing.get(p, ()))
            if state is None:
                parts[p] = PartitionInfo(p, tuple(replicas), adding_replicas=adding,
                                         removing_replicas=removing)
            else:
                parts[p] = PartitionInfo(p, tuple(replicas), state.leader, state.leader_epoch,
                                         tuple(state.isr), state.controller_epoch, version,
                                         adding, removing)
        return TopicInfo(name, ts.topic_id, parts, dict(ts.configs), name in self._deleting)

    def _emit(self) -> None:
        self._publish(self.build_image())
