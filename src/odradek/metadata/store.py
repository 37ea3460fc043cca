"""The broker's view of ZooKeeper: registration, watches, and the metadata image (REQ-R12).

Threading model (Kafka's: watches only enqueue events):

* kazoo runs watch callbacks on its own thread; each callback only puts a typed event on
  ``self._events``.
* One metadata thread drains that queue, re-reads what changed from ZooKeeper (batched:
  ``KafkaZkClient`` multiReads), updates its tables incrementally, builds a new immutable
  ``MetadataImage`` that shares every untouched ``TopicInfo``/``PartitionInfo`` with the
  previous one and hands it to the asyncio loop with ``call_soon_threadsafe``. The
  asyncio loop never blocks on ZooKeeper.
* Admin writes (create/delete topics, add partitions) are synchronous kazoo calls run in
  a worker thread by the handlers (``asyncio.to_thread``).

How a broker learns leaders and ISRs (Odradek's LeaderAndIsr, REQ-R13): not by watching
each state znode — a batch of N state writes would cost every broker N watch events and
N reads — but through ``/leader_and_isr_notification``. Every write of state znodes (the
controller's chunked transactions, a leader's ISR change) creates, in the same
transaction, one sequential child listing the new states with their znode versions. The
store watches that one directory, reads the new children (one multiRead) and applies
their entries: newer znode versions win, entries of an older incarnation of a topic
(other topic id) are ignored. The controller deletes notifications after a while and
records the highest deleted sequence number in the directory's data; a store that had
not processed that far may have missed one, so it re-reads every state znode (also
O(N / chunk) requests). Topic assignments and configs are still watched per topic.

Session loss: when kazoo reports LOST, the ephemeral registration is gone; on the next
CONNECTED we register again, re-read everything and retry the controller election
(kazoo does not recreate ephemeral nodes itself).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, SessionExpiredError

from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import KafkaZkClient

logger = logging.getLogger(__name__)

_NO_TOPIC_ID = uuid.UUID(int=0)


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
class LeaderAndIsrNotified:
    """A child appeared under ``/leader_and_isr_notification`` (watch fired)."""


@dataclass(frozen=True, slots=True)
class PartitionStatesChanged:
    """Emitted to listeners (the controller): the entries of the notifications just read."""

    changes: tuple[znodes.PartitionStateChange, ...]


@dataclass(frozen=True, slots=True)
class StatesReloaded:
    """Emitted to listeners: notifications were missed (purged before we read them) and
    every state znode was read again; a listener with its own cache should do the same."""


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
    """A controller request znode changed (REQ-R5, R13): /admin/preferred_replica_election,
    /admin/unclean_leader_election, /admin/reassign_partitions (KIP-455) or a child of
    /admin/controlled_shutdown."""


@dataclass(frozen=True, slots=True)
class Stop:
    pass


MetadataEvent = (
    BrokersChanged
    | TopicsChanged
    | TopicChanged
    | LeaderAndIsrNotified
    | PartitionStatesChanged
    | StatesReloaded
    | TopicConfigChanged
    | ControllerChanged
    | DeletionsChanged
    | SessionReestablished
    | AdminRequestsChanged
    | BrokerConfigChanged
    | Stop
)

StateAndVersion = tuple[znodes.PartitionState, int]


@dataclass(slots=True)
class _TopicState:
    topic_id: uuid.UUID
    assignment: dict[int, list[int]]
    states: dict[int, StateAndVersion] = field(default_factory=dict)  # with a state znode
    configs: dict[str, str] = field(default_factory=dict)
    adding: dict[int, list[int]] = field(default_factory=dict)  # KIP-455, per partition
    removing: dict[int, list[int]] = field(default_factory=dict)
    # Partitions whose state, as read, names this broker but was written before it
    # registered: no controller has decided on this incarnation yet (see _hold).
    held: set[int] = field(default_factory=set)


class MetadataStore:
    """Owns the broker's ZooKeeper session and produces ``MetadataImage`` snapshots."""

    def __init__(
        self,
        zk: KafkaZkClient,
        broker_id: int,
        registration: znodes.BrokerRegistration,
        publish: Callable[[MetadataImage], None],
    ) -> None:
        self.zkc = zk
        self.zk = zk.zk  # the kazoo client: registration, watches, session state
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
        self._broker_overrides: dict[str, str] = {}  # /config/brokers/<id> (KIP-226)
        self._default_broker_overrides: dict[str, str] = {}  # /config/brokers/<default>
        self._watched_topics: set[str] = set()
        # Highest leader_and_isr notification applied (or reflected in states read after
        # listing it): the next listing applies only newer ones.
        self._notification_seq = -1
        self._broker_epoch = -1  # our registration's czxid (KIP-380's broker epoch)
        self._shutting_down: frozenset[int] = frozenset()  # pending controlled shutdowns
        # Incremental images: untouched topics reuse their TopicInfo, a topic with a few
        # changed partitions copies its partition dict and replaces those entries only.
        self._built: dict[str, TopicInfo] = {}
        self._rebuild: set[str] = set()  # build the TopicInfo from scratch
        self._dirty_topics: set[str] = set()  # configs or deletion flag changed
        self._dirty_parts: dict[str, set[int]] = {}  # replace these PartitionInfos
        self._touched: set[str] = set()  # unchanged TopicInfo, but changed for appliers
        self._cluster_changed = False  # brokers or controller: a new image, no topic change
        self._everything_changed = True
        self._outbox: list[MetadataEvent] = []  # events for listeners made while handling
        self._stopped = threading.Event()
        self._lost = False
        self.listeners: list[Callable[[MetadataEvent], None]] = []  # e.g. the controller

    # ------------------------------------------------------------------ lifecycle
    def start(self, registration_timeout_s: float, *, threaded: bool = True) -> None:
        """``threaded=False``: no thread; whoever drives the store (the simulator,
        odradek.sim.zk_cluster) calls ``take_batch`` and ``step`` on its own schedule."""
        znodes.ensure_base_paths(self.zk)
        self._cluster_id = znodes.get_or_create_cluster_id(self.zk)
        self.register(registration_timeout_s)
        self.zk.add_listener(self._on_state)
        self.zk.ChildrenWatch(znodes.BROKER_IDS, self._watch_children(BrokersChanged()))
        self.zk.ChildrenWatch(znodes.BROKER_TOPICS, self._watch_children(TopicsChanged()))
        self.zk.ChildrenWatch(znodes.DELETE_TOPICS, self._watch_children(DeletionsChanged()))
        self.zk.DataWatch(znodes.CONTROLLER, self._watch_data(ControllerChanged()))
        for entity in (str(self.broker_id), znodes.DEFAULT_BROKER_ENTITY):
            self.zk.DataWatch(
                znodes.broker_config_path(entity), self._watch_data(BrokerConfigChanged())
            )
        # Controller requests (controller.py): watched here so they arrive as events.
        self.zk.ensure_path(znodes.CONTROLLED_SHUTDOWN_PATH)
        for path in (
            znodes.PREFERRED_REPLICA_ELECTION,
            znodes.UNCLEAN_LEADER_ELECTION_PATH,
            znodes.REASSIGN_PARTITIONS,
        ):
            self.zk.DataWatch(path, self._watch_data(AdminRequestsChanged()))
        self.zk.ChildrenWatch(
            znodes.CONTROLLED_SHUTDOWN_PATH, self._watch_children(AdminRequestsChanged())
        )
        # Initial full load before serving, so the first image is complete.
        self._reload_all()
        self._emit()
        if threaded:
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
                logger.info("registered %s", path)
                stat = self.zk.exists(path)
                self._broker_epoch = stat.czxid if stat is not None else -1
                return
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path)
                    if stat.ephemeralOwner == self.zk.client_id[0]:
                        self._broker_epoch = stat.czxid
                        return
                except NoNodeError:
                    continue
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{path} is held by another session (is broker.id "
                        f"{self.broker_id} already running?)"
                    ) from None
                time.sleep(0.2)

    def add_event(self, ev: MetadataEvent) -> None:
        self._events.put(ev)

    # ------------------------------------------------------------------ kazoo callbacks
    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._lost = True
            if not self._stopped.is_set():  # closing our own session is not news
                logger.warning("ZooKeeper session lost")
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

    def _watch_data(
        self, ev: MetadataEvent, alive: Callable[[], bool] = lambda: True
    ) -> Callable[..., bool]:
        def cb(_data: bytes | None, _stat: object, *_: object) -> bool:
            if self._stopped.is_set() or not alive():
                return False
            self._events.put(ev)
            return True

        return cb

    def _on_notification(self, _event: Any) -> None:
        """One-shot watch on the notification directory (re-armed by each listing)."""
        if not self._stopped.is_set():
            self._events.put(LeaderAndIsrNotified())

    # ------------------------------------------------------------------ event loop
    def _run(self) -> None:
        while not self._stopped.is_set():
            batch = self.take_batch(self._events.get())
            if any(isinstance(e, Stop) for e in batch):
                return
            if not self.step(batch):
                time.sleep(0.5)

    def has_events(self) -> bool:
        """Anything queued (the simulator's driver asks before it sleeps)."""
        return not self._events.empty()

    def take_batch(self, first: MetadataEvent | None = None) -> list[MetadataEvent]:
        """``first`` and every event queued after it."""
        batch = [] if first is None else [first]
        try:
            while True:
                batch.append(self._events.get_nowait())
        except queue.Empty:
            pass
        return batch

    def step(self, batch: list[MetadataEvent]) -> bool:
        """Handle one batch, publish the image if it changed and pass the events on to
        the listeners. False: it failed and was queued again (retry after a pause)."""
        self._outbox = []
        ok = True
        try:
            self._handle(batch)
            if self._has_changes():
                self._emit()
        except (ConnectionLoss, SessionExpiredError) as err:
            # Cut from ZooKeeper: an outage, not a bug (no stack trace); read again later.
            logger.warning(
                "metadata update failed, ZooKeeper unreachable (%s); retrying", type(err).__name__
            )
            ok = False
            for e in batch:
                self._events.put(e)
        except Exception:
            logger.exception("metadata update failed; retrying")
            ok = False
            for e in batch:
                self._events.put(e)
        for listener in self.listeners:
            for e in [*batch, *self._outbox]:
                listener(e)
        return ok

    def _handle(self, batch: list[MetadataEvent]) -> None:
        kinds = {type(e) for e in batch}
        if SessionReestablished in kinds:
            self.register(timeout_s=60)
            self._reload_all()
            return
        if BrokersChanged in kinds:
            self._load_brokers()
        if AdminRequestsChanged in kinds:
            self._load_shutdown_requests()
        if ControllerChanged in kinds:
            self._load_controller()
        if BrokerConfigChanged in kinds:
            self._load_broker_configs()
        if TopicsChanged in kinds or DeletionsChanged in kinds:
            self._load_topic_list()
        changed = sorted(
            {e.topic for e in batch if isinstance(e, TopicChanged) and e.topic in self._topics}
        )
        if changed:
            self._load_topics(changed)
        configs = sorted(
            {
                e.topic
                for e in batch
                if isinstance(e, TopicConfigChanged) and e.topic in self._topics
            }
        )
        if configs:
            self._load_configs(configs)
        if LeaderAndIsrNotified in kinds:
            self._load_notifications()

    def _reload_all(self) -> None:
        self._built.clear()
        self._everything_changed = True
        # List the notifications first: every one listed is reflected in the states
        # read below, so only later ones need applying (see _reload_states).
        names, purged = self.zkc.list_leader_and_isr_notifications(watch=self._on_notification)
        self._notification_seq = max([purged] + [s for s, _ in names])
        self._load_brokers()
        self._load_shutdown_requests()
        self._load_controller()
        self._load_broker_configs()
        self._topics.clear()
        self._watched_topics.clear()
        self._load_topic_list()

    def _load_shutdown_requests(self) -> None:
        """The brokers asking for a controlled shutdown (the controller deletes each
        request once it has moved leadership off that broker). Until then a leader must
        not re-admit the broker to an ISR the controller has just shrunk: a stopping
        broker still fetches, and with the controller killed mid-batch nobody would undo
        it (a loaded CI run: "ISR [3, 1] -> [3, 1, 2]" for the stopping broker 2)."""
        children = self.zkc.get_children(znodes.CONTROLLED_SHUTDOWN_PATH)
        requests = frozenset(int(c) for c in children if c.isdigit())
        if requests != self._shutting_down:
            self._shutting_down = requests
            self._cluster_changed = True

    def _load_brokers(self) -> None:
        brokers = {
            b: BrokerInfo(
                reg.broker_id,
                reg.host,
                reg.port,
                reg.rack,
                tuple(znodes.parse_endpoint(e) for e in reg.endpoints),
            )
            for b, reg in self.zkc.get_broker_registrations().items()
        }
        changed = {
            b
            for b in brokers.keys() | self._brokers.keys()
            if brokers.get(b) != self._brokers.get(b)
        }
        self._brokers = brokers
        if not changed:
            return
        self._cluster_changed = True
        # Membership is per broker, not per topic: no TopicInfo changes, but appliers
        # must revisit the partitions those brokers lead (a follower starts fetching once
        # its leader's address is known).
        for name, ts in self._topics.items():
            if any(st.leader in changed for st, _ in ts.states.values()):
                self._touched.add(name)

    def _load_controller(self) -> None:
        got = self.zkc.get_data(znodes.CONTROLLER)
        controller_id = znodes.decode_controller(got[0]).broker_id if got else -1
        self._cluster_changed |= controller_id != self._controller_id
        self._controller_id = controller_id

    def _load_broker_configs(self) -> None:
        def read(entity: str) -> dict[str, str]:
            got = self.zkc.get_data(znodes.broker_config_path(entity))
            return znodes.decode_topic_config(got[0]) if got else {}  # topic configs' JSON

        mine, default = read(str(self.broker_id)), read(znodes.DEFAULT_BROKER_ENTITY)
        self._cluster_changed |= (mine, default) != (
            self._broker_overrides,
            self._default_broker_overrides,
        )
        self._broker_overrides, self._default_broker_overrides = mine, default

    def _load_topic_list(self) -> None:
        names = set(self.zkc.get_children(znodes.BROKER_TOPICS))
        deleting = set(self.zkc.get_children(znodes.DELETE_TOPICS))
        self._dirty_topics |= (deleting ^ self._deleting) & (names | set(self._topics))
        self._deleting = deleting
        for gone in set(self._topics) - names:
            del self._topics[gone]
            self._rebuild.add(gone)
            self._watched_topics.discard(gone)
        self._load_topics(sorted(names - set(self._topics)))

    def _load_topics(self, topics: list[str]) -> None:
        """Assignment (and, for topics new to us, configs and every partition state) of
        ``topics``: three multiReads whatever their number."""
        assignments = self.zkc.get_topic_assignments(topics)
        for gone in set(topics) - set(assignments):
            if self._topics.pop(gone, None) is not None:
                self._rebuild.add(gone)
                self._watched_topics.discard(gone)
        new = [t for t in assignments if t not in self._topics]
        joined: list[tuple[str, int]] = []  # partitions newly assigned to this broker
        for t, a in assignments.items():
            ts = self._topics.get(t)
            if ts is None:
                ts = self._topics[t] = _TopicState(a.topic_id or _NO_TOPIC_ID, a.partitions)
                self._rebuild.add(t)
            elif set(ts.assignment) - set(a.partitions):
                self._rebuild.add(t)  # partitions removed (Kafka never does): start over
            else:  # partitions added (CreatePartitions) or reassigned
                changed = {
                    p
                    for p, r in a.partitions.items()
                    if ts.assignment.get(p) != r
                    or ts.adding.get(p) != a.adding_replicas.get(p)
                    or ts.removing.get(p) != a.removing_replicas.get(p)
                }
                if changed:
                    self._dirty_parts.setdefault(t, set()).update(changed)
                    me = self.broker_id
                    joined += [
                        (t, p)
                        for p in changed
                        if me in a.partitions[p]
                        and me not in ts.assignment.get(p, ())
                        and p in ts.states
                    ]
            ts.assignment = a.partitions
            ts.adding, ts.removing = a.adding_replicas, a.removing_replicas
        if new:
            self._load_configs(new)
        missing = [
            (t, p)
            for t, a in assignments.items()
            for p in a.partitions
            if p not in self._topics[t].states
        ]
        # A partition newly assigned here gets its state read again, after its assignment:
        # the controller writes a state before the assignment that follows from it (a
        # replica is removed only after leadership left it), but the notification of that
        # state may not have been read yet (it is queued behind this event, or, after a
        # reconnect, ZooKeeper fires data watches before child watches). Created from the
        # older state, a replica moved off and straight back would lead the epoch it led
        # before, with an empty log (odradek sim seed 404: HW 307 -> 0).
        for (t, p), (st, version, mzxid) in self.zkc.get_partition_states_mzxid(
            missing + joined
        ).items():
            ts = self._topics[t]
            cur = ts.states.get(p)
            if cur is not None and version <= cur[1]:
                continue
            ts.states[p] = (st, version)
            self._hold(ts, p, st, mzxid)
            self._dirty_parts.setdefault(t, set()).add(p)
        for t in new:
            if t not in self._watched_topics:
                self._watched_topics.add(t)
                alive = lambda t=t: t in self._topics  # noqa: E731
                self.zk.DataWatch(znodes.topic_path(t), self._watch_data(TopicChanged(t), alive))
                self.zk.DataWatch(
                    znodes.topic_config_path(t), self._watch_data(TopicConfigChanged(t), alive)
                )

    def _load_configs(self, topics: list[str]) -> None:
        for t, cfg in self.zkc.get_topic_configs(topics).items():
            ts = self._topics.get(t)
            if ts is not None and ts.configs != cfg:
                ts.configs = cfg
                self._dirty_topics.add(t)

    # ------------------------------------------------------------------ leader_and_isr
    def _load_notifications(self) -> None:
        names, purged = self.zkc.list_leader_and_isr_notifications(
            watch=self._on_notification, after=self._notification_seq
        )
        if self._notification_seq < purged:
            self._reload_states(names, purged, "notifications were purged before we read them")
            return
        new = [(s, n) for s, n in names if s > self._notification_seq]
        if not new:
            return
        got = self.zkc.read_leader_and_isr_notifications([n for _, n in new])
        if got is None:
            self._reload_states(names, purged, "a notification was purged while we read it")
            return
        changes = [ch for entries in got for ch in entries]
        self._apply_changes(changes)
        self._notification_seq = new[-1][0]
        self._outbox.append(PartitionStatesChanged(tuple(changes)))

    def _apply_changes(self, changes: Iterable[znodes.PartitionStateChange]) -> None:
        for ch in changes:
            ts = self._topics.get(ch.topic)
            if ts is None:
                continue  # not loaded yet: its states are read when it is
            if (
                ch.topic_id is not None
                and ts.topic_id != _NO_TOPIC_ID
                and ch.topic_id != ts.topic_id
            ):
                continue  # an older incarnation of the topic: its versions mean nothing
            cur = ts.states.get(ch.partition)
            if cur is None or ch.zk_version > cur[1]:
                ts.states[ch.partition] = (ch.state, ch.zk_version)
                ts.held.discard(ch.partition)  # written after we registered
                self._dirty_parts.setdefault(ch.topic, set()).add(ch.partition)

    def _hold(self, ts: _TopicState, p: int, st: znodes.PartitionState, mzxid: int) -> None:
        """A state naming this broker (leader or ISR member) written before it registered
        is its previous incarnation's: a bounce no controller has decided on yet (the
        controller treats it as a failure, controller.py ``_fail_bounced``). Acting on
        it, a restarted broker would lead its old epoch with its checkpointed HW (and,
        after a power loss, without its unsynced tail) until the controller's decision
        arrives; Kafka's brokers act only on the controller's LeaderAndIsr. The image
        shows no state for it until a newer version comes (odradek sim, instant
        restarts)."""
        if mzxid < self._broker_epoch and (st.leader == self.broker_id or self.broker_id in st.isr):
            ts.held.add(p)
        else:
            ts.held.discard(p)

    def _reload_states(self, names: list[tuple[int, str]], purged: int, why: str) -> None:
        """Every state znode again (the listing just made comes first, see _reload_all)."""
        logger.warning("re-reading every partition state: %s", why)
        self._notification_seq = max([purged] + [s for s, _ in names])
        tps = [(t, p) for t, ts in self._topics.items() for p in ts.assignment]
        fresh = self.zkc.get_partition_states_mzxid(tps)
        for t, p in tps:
            ts = self._topics[t]
            got = fresh.get((t, p))
            sv = None if got is None else (got[0], got[1])
            if got is not None:
                was = p in ts.held
                self._hold(ts, p, got[0], got[2])
                if was != (p in ts.held):
                    self._dirty_parts.setdefault(t, set()).add(p)
            if ts.states.get(p) == sv:
                continue
            if sv is None:
                ts.states.pop(p, None)
                ts.held.discard(p)
            else:
                ts.states[p] = sv
            self._dirty_parts.setdefault(t, set()).add(p)
        self._outbox.append(StatesReloaded())

    # ------------------------------------------------------------------ image
    def _has_changes(self) -> bool:
        return bool(
            self._everything_changed
            or self._cluster_changed
            or self._rebuild
            or self._dirty_topics
            or self._dirty_parts
            or self._touched
        )

    def build_image(self) -> MetadataImage:
        """The next image, sharing everything unchanged with the previous one: a batch of
        N partition changes costs O(N) (plus one dict copy per touched topic), a config
        change O(1), broker membership nothing but the broker table."""
        topics: dict[str, TopicInfo] = {}
        for name, ts in self._topics.items():
            info = self._built.get(name)
            if info is None or name in self._rebuild:
                info = self._topic_info(name, ts)
            else:
                parts = info.partitions
                dirty = self._dirty_parts.get(name)
                if dirty:
                    parts = dict(parts)
                    for p in dirty:
                        if p in ts.assignment:
                            parts[p] = self._partition_info(ts, p)
                if parts is not info.partitions or name in self._dirty_topics:
                    info = TopicInfo(
                        name, ts.topic_id, parts, dict(ts.configs), name in self._deleting
                    )
            self._built[name] = topics[name] = info
        for gone in set(self._built) - set(self._topics):
            del self._built[gone]
        changed = (
            None
            if self._everything_changed
            else frozenset(
                self._rebuild | self._dirty_topics | self._dirty_parts.keys() | self._touched
            )
        )
        self._rebuild.clear()
        self._dirty_topics.clear()
        self._dirty_parts.clear()
        self._touched.clear()
        self._everything_changed = self._cluster_changed = False
        return MetadataImage(
            self._cluster_id,
            self._controller_id,
            dict(self._brokers),
            topics,
            complete=True,
            changed_topics=changed,
            broker_overrides=dict(self._broker_overrides),
            default_broker_overrides=dict(self._default_broker_overrides),
            shutting_down=self._shutting_down,
        )

    @staticmethod
    def _partition_info(ts: _TopicState, p: int) -> PartitionInfo:
        replicas = tuple(ts.assignment[p])
        adding = tuple(ts.adding.get(p, ()))
        removing = tuple(ts.removing.get(p, ()))
        sv = ts.states.get(p)
        if sv is None or p in ts.held:
            return PartitionInfo(p, replicas, adding_replicas=adding, removing_replicas=removing)
        state, version = sv
        return PartitionInfo(
            p,
            replicas,
            state.leader,
            state.leader_epoch,
            tuple(state.isr),
            state.controller_epoch,
            version,
            adding,
            removing,
        )

    def _topic_info(self, name: str, ts: _TopicState) -> TopicInfo:
        parts = {p: self._partition_info(ts, p) for p in ts.assignment}
        return TopicInfo(name, ts.topic_id, parts, dict(ts.configs), name in self._deleting)

    def _emit(self) -> None:
        self._publish(self.build_image())
