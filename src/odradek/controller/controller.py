"""The controller: one broker, elected through ZooKeeper, decides leaders and ISRs (SPEC R13).

It is one event loop on its own thread. ZooKeeper watches (seen through the metadata
store) only enqueue events; the loop reads ZooKeeper, decides with the pure rules of
``elections.py`` and writes each partition's state znode (SPEC R13: ZooKeeper first;
every broker's watch on the state znode is Odradek's LeaderAndIsr).

* **Controller election**: create the ephemeral ``/controller``; on success bump
  ``/controller_epoch`` (conditional write) and remember its znode version. Losers watch
  ``/controller`` and retry when it disappears. A new controller starts with a full pass,
  so whatever happened during a failover is fixed (SPEC R13).
* **Fencing** (SPEC scenario 8): every state write is a ZooKeeper transaction
  ``check(/controller_epoch, our version) + set_data(state, znode version)``, as Kafka's
  ZooKeeper controller does: a deposed controller's writes fail as a whole. The znode
  version makes each write conditional on what we read; on BadVersion (a leader changed
  the ISR meanwhile) we re-read and decide again.
* **Full pass** (on broker/topic/config changes and admin requests) — for every
  partition, ``elections.reconcile_partition``: new partitions get the first live replica
  as leader and all live replicas as ISR (Kafka's initial ISR; followers that do not keep
  up are dropped by the leader after ``replica.lag.time.max.ms``, SPEC R6); a dead leader
  is replaced (offline election, SPEC R4, R14; ``unclean.leader.election.enable`` from
  ``/config/topics/T`` else the broker default, SPEC R10); a partition with no eligible
  replica goes offline (leader -1, ISR kept) and is elected when an ISR member returns
  (SPEC R15); dead followers leave the ISR.
* **Preferred election** (SPEC R5): ``/admin/preferred_replica_election`` (Kafka's JSON)
  → preferred elections for the listed partitions, then the znode is deleted. The same
  for ``/admin/unclean_leader_election`` (Odradek's, for ElectLeaders UNCLEAN).
* **Auto rebalance** (SPEC R5): with ``auto.leader.rebalance.enable``, every
  ``leader.imbalance.check.interval.seconds`` brokers whose imbalance exceeds
  ``leader.imbalance.per.broker.percentage`` get their preferred partitions back.
* **Controlled shutdown** (SPEC R13): see ``controlled_shutdown.py``.
* **Topic deletion**: topics listed under ``/admin/delete_topics`` lose their znodes.
* **Partition reassignment** (KIP-455): ``reassigner.py`` moves
  ``/admin/reassign_partitions`` into the topic znodes and completes each move once the
  target replicas are in the ISR; a change of a moving partition's state znode (the
  leader's ISR expansion) triggers that check without a full pass.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError,
)

from odradek.controller import elections
from odradek.controller.elections import StateChange
from odradek.controller.reassigner import Reassigner
from odradek.metadata.store import (
    AdminRequestsChanged, BrokersChanged, ControllerChanged, DeletionsChanged, MetadataEvent,
    PartitionStateChanged, SessionReestablished, Stop, TopicChanged, TopicConfigChanged,
    TopicsChanged,
)
from odradek.zk import znodes

log = logging.getLogger(__name__)

_MAX_CAS_ATTEMPTS = 10
_RETRY_DELAY_S = 0.5


@dataclass(frozen=True, slots=True)
class _RebalanceTick:
    pass


@dataclass(frozen=True, slots=True)
class _Retry:
    pass


class NotController(Exception):
    """Our /controller_epoch fence failed: another broker is the controller now."""


Decide = Callable[[list[int], znodes.PartitionState], StateChange | None]


class Controller:
    def __init__(self, zk: KazooClient, broker_id: int, config: Any = None) -> None:
        """``config``: the broker's ``BrokerConfig`` (defaults: Kafka's, if None)."""
        self.zk = zk
        self.broker_id = broker_id
        self.epoch = -1
        self.active = False
        self._epoch_zk_version = -1  # /controller_epoch's version when we won
        self.unclean_default = bool(getattr(config, "unclean_leader_election_enable", False))
        self.auto_rebalance = bool(getattr(config, "auto_leader_rebalance_enable", True))
        self.imbalance_interval_s = float(
            getattr(config, "leader_imbalance_check_interval_seconds", 300))
        self.imbalance_percentage = int(
            getattr(config, "leader_imbalance_per_broker_percentage", 10))
        # Brokers in a controlled shutdown, kept until their registration vanishes so
        # that no later pass elects them again (Kafka's shuttingDownBrokerIds).
        self._shutting_down: set[int] = set()
        self._events: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._reassigner = Reassigner(self)
        self._topic_znodes: dict[str, znodes.TopicAssignment] = {}  # from the last pass

    def start(self) -> None:
        self._events.put(ControllerChanged())
        self._thread.start()

    def stop(self) -> None:
        self._events.put(Stop())
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.active:
            # Resign so another broker takes over at once instead of after our session
            # times out.
            self._resign()
            self.active = False

    def _resign(self) -> None:
        try:
            data, stat = self.zk.get(znodes.CONTROLLER)
            if (znodes.decode_controller(data).broker_id == self.broker_id
                    and stat.ephemeralOwner == self.zk.client_id[0]):
                self.zk.delete(znodes.CONTROLLER, version=stat.version)
        except Exception:  # noqa: BLE001 - best effort: the session's end removes it too
            pass

    def on_event(self, ev: MetadataEvent) -> None:
        """Called from the metadata thread: only enqueue (never block it)."""
        if isinstance(ev, (BrokersChanged, TopicsChanged, TopicChanged, DeletionsChanged,
                           ControllerChanged, SessionReestablished, TopicConfigChanged,
                           AdminRequestsChanged)):
            self._events.put(ev)
        elif (isinstance(ev, PartitionStateChanged)
              and (ev.topic, ev.partition) in self._reassigner.in_progress):
            # A moving partition's ISR changed: its reassignment may be complete.
            self._events.put(ev)

    # ------------------------------------------------------------------ loop
    def _run(self) -> None:
        next_check = time.monotonic() + self.imbalance_interval_s
        while True:
            timeout = max(0.0, next_check - time.monotonic()) if self.auto_rebalance else None
            try:
                batch: list[Any] = [self._events.get(timeout=timeout)]
            except queue.Empty:
                batch = [_RebalanceTick()]
                # The next check is due one interval from now whatever our role: a
                # non-controller that skipped this would spin on an expired timeout.
                next_check = time.monotonic() + self.imbalance_interval_s
            try:
                while True:
                    batch.append(self._events.get_nowait())
            except queue.Empty:
                pass
            if any(isinstance(e, Stop) for e in batch):
                return
            try:
                if any(isinstance(e, (ControllerChanged, SessionReestablished)) for e in batch):
                    self._elect()
                if not self.active:
                    continue
                if any(not isinstance(e, (_RebalanceTick, PartitionStateChanged))
                       for e in batch):
                    self._full_pass()
                elif any(isinstance(e, PartitionStateChanged) for e in batch):
                    self._reassigner.check(
                        {(e.topic, e.partition) for e in batch
                         if isinstance(e, PartitionStateChanged)},
                        self._registered_brokers())
                if any(isinstance(e, _RebalanceTick) for e in batch):
                    self._auto_rebalance()
            except NotController:
                log.warning("broker %d is no longer the controller (epoch %d fenced)",
                            self.broker_id, self.epoch)
                self.active = False
                self._epoch_zk_version = -1
                self._resign()  # a fresh election gives whoever wins a fresh epoch
                self._events.put(ControllerChanged())
            except Exception:
                log.exception("controller step failed; retrying")
                time.sleep(_RETRY_DELAY_S)
                self._events.put(_Retry())

    # ------------------------------------------------------------------ election
    def _elect(self) -> None:
        try:
            data, stat = self.zk.get(znodes.CONTROLLER)
            holder = znodes.decode_controller(data).broker_id
            was = self.active
            self.active = (holder == self.broker_id
                           and stat.ephemeralOwner == self.zk.client_id[0]
                           and self._epoch_zk_version >= 0)
            if was and not self.active:
                log.warning("controller role lost to broker %d", holder)
            return
        except NoNodeError:
            pass
        try:
            self.zk.create(znodes.CONTROLLER,
                           znodes.encode_controller(znodes.ControllerRegistration(self.broker_id)),
                           ephemeral=True)
        except NodeExistsError:
            self.active = False
            return
        self.epoch, self._epoch_zk_version = self._bump_epoch()
        self._shutting_down.clear()
        self.active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        self._events.put(_Retry())  # full pass (SPEC R13: a failover fixes what happened)

    def _bump_epoch(self) -> tuple[int, int]:
        """-> (controller epoch, /controller_epoch znode version after our write)."""
        while True:
            try:
                data, stat = self.zk.get(znodes.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(1))
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = znodes.decode_controller_epoch(data) + 1
            try:
                new = self.zk.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch),
                                  version=stat.version)
                return epoch, new.version
            except BadVersionError:
                continue

    # ------------------------------------------------------------------ reading
    def _registered_brokers(self) -> set[int]:
        return {int(c) for c in self.zk.get_children(znodes.BROKER_IDS) if c.isdigit()}

    def _assignments(self) -> dict[str, dict[int, list[int]]]:
        deleting = set(self.zk.get_children(znodes.DELETE_TOPICS))
        out: dict[str, dict[int, list[int]]] = {}
        topic_znodes: dict[str, znodes.TopicAssignment] = {}
        for topic in self.zk.get_children(znodes.BROKER_TOPICS):
            if topic in deleting:
                continue
            try:
                data, _ = self.zk.get(znodes.topic_path(topic))
            except NoNodeError:
                continue
            topic_znodes[topic] = znodes.decode_topic(topic, data)
            out[topic] = topic_znodes[topic].partitions
        self._topic_znodes = topic_znodes
        return out

    def _read_state(self, topic: str, p: int) -> tuple[znodes.PartitionState, int] | None:
        try:
            data, stat = self.zk.get(znodes.partition_state_path(topic, p))
        except NoNodeError:
            return None
        return znodes.decode_partition_state(data), stat.version

    def _unclean_enabled(self, topic: str) -> bool:
        """Topic override of ``unclean.leader.election.enable``, else the broker's (R10)."""
        try:
            data, _ = self.zk.get(znodes.topic_config_path(topic))
            value = znodes.decode_topic_config(data).get("unclean.leader.election.enable")
        except NoNodeError:
            value = None
        if value is None:
            return self.unclean_default
        return value.strip().lower() == "true"

    # ------------------------------------------------------------------ writing
    def _commit(self, ops: Callable[[Any], None]) -> bool:
        """Run ``ops`` in a transaction fenced by our /controller_epoch version.
        False: the partition op failed (BadVersion / NoNode / NodeExists)."""
        tx = self.zk.transaction()
        tx.check(znodes.CONTROLLER_EPOCH, self._epoch_zk_version)
        ops(tx)
        results = tx.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise NotController()
        return not any(isinstance(r, Exception) for r in results)

    def _update_partition(self, topic: str, p: int, replicas: list[int], decide: Decide) -> bool:
        """Read-decide-write loop for one state znode. True if we wrote a change."""
        path = znodes.partition_state_path(topic, p)
        for _ in range(_MAX_CAS_ATTEMPTS):
            current = self._read_state(topic, p)
            if current is None:
                return False  # not created yet (or topic deleted): the full pass handles it
            state, version = current
            change = decide(replicas, state)
            if change is None:
                return False
            new = znodes.PartitionState(change.leader, change.leader_epoch, change.isr,
                                        self.epoch)
            data = znodes.encode_partition_state(new)
            if self._commit(lambda tx: tx.set_data(path, data, version)):
                self._log_change(topic, p, state, change)
                return True
        log.warning("%s-%d: gave up after %d conflicting writes", topic, p, _MAX_CAS_ATTEMPTS)
        return False

    @staticmethod
    def _log_change(topic: str, p: int, old: znodes.PartitionState, ch: StateChange) -> None:
        tp = f"{topic}-{p}"
        if ch.kind == "isr":
            log.info("partition %s: isr %s -> %s (leader %d, epoch %d)", tp, old.isr, ch.isr,
                     ch.leader, ch.leader_epoch)
        elif ch.kind == "unclean":
            log.warning("unclean election for %s: leader %d -> %d at epoch %d, isr %s "
                        "(records not on the new leader are lost, SPEC R10)",
                        tp, old.leader, ch.leader, ch.leader_epoch, ch.isr)
        elif ch.kind == "offline":
            log.warning("partition %s is offline: leader %d -> -1 at epoch %d, no live "
                        "replica in isr %s", tp, old.leader, ch.leader_epoch, ch.isr)
        else:
            log.info("partition %s: leader %d -> %d at epoch %d, isr %s (%s)", tp, old.leader,
                     ch.leader, ch.leader_epoch, ch.isr, ch.kind)

    # ------------------------------------------------------------------ full pass
    def _full_pass(self) -> None:
        self._process_deletions()
        registered = self._registered_brokers()
        shutdown_requests = self._shutdown_requests()
        # Forget brokers whose session ended (their next incarnation may lead again).
        self._shutting_down = (self._shutting_down & registered) | (shutdown_requests & registered)
        assignments = self._assignments()
        eligible = registered - self._shutting_down
        for topic, parts in sorted(assignments.items()):
            unclean = self._unclean_enabled(topic)
            for p, replicas in sorted(parts.items()):
                self._reconcile(topic, p, replicas, registered, eligible, unclean)
        self._process_elections(znodes.PREFERRED_REPLICA_ELECTION, assignments, registered)
        self._process_elections(znodes.UNCLEAN_LEADER_ELECTION_PATH, assignments, registered)
        self._reassigner.check_all(self._topic_znodes, registered)
        self._reassigner.process_requests(registered)
        for broker_id in shutdown_requests:
            # Every partition has been reconciled with the broker shutting down: done.
            try:
                self.zk.delete(f"{znodes.CONTROLLED_SHUTDOWN_PATH}/{broker_id}")
                log.info("controlled shutdown of broker %d: leadership moved", broker_id)
            except NoNodeError:
                pass

    def _reconcile(self, topic: str, p: int, replicas: list[int], registered: set[int],
                   eligible: set[int], unclean: bool) -> None:
        if self._read_state(topic, p) is None:
            self._create_state(topic, p, replicas, eligible)
            return
        shutting = self._shutting_down

        def decide(reps: list[int], st: znodes.PartitionState) -> StateChange | None:
            return elections.reconcile_partition(reps, st.leader, st.leader_epoch, st.isr,
                                                 registered, shutting, unclean)

        self._update_partition(topic, p, replicas, decide)

    def _create_state(self, topic: str, p: int, replicas: list[int], eligible: set[int]) -> None:
        live = [r for r in replicas if r in eligible]
        if not live:
            return  # stays "new" until a replica is alive
        state = znodes.PartitionState(leader=live[0], leader_epoch=0, isr=live,
                                      controller_epoch=self.epoch)
        path = znodes.partition_state_path(topic, p)
        self.zk.ensure_path(znodes.partition_path(topic, p))
        data = znodes.encode_partition_state(state)
        if self._commit(lambda tx: tx.create(path, data)):
            log.info("partition %s-%d: leader %d at epoch 0, isr %s (new partition)", topic, p,
                     live[0], live)

    def _shutdown_requests(self) -> set[int]:
        try:
            children = self.zk.get_children(znodes.CONTROLLED_SHUTDOWN_PATH)
        except NoNodeError:
            return set()
        return {int(c) for c in children if c.isdigit()}

    # ------------------------------------------------------------------ admin elections
    def _process_elections(self, path: str, assignments: dict[str, dict[int, list[int]]],
                           registered: set[int]) -> None:
        """``/admin/preferred_replica_election`` or ``/admin/unclean_leader_election``:
        elect the listed partitions, then delete the znode (Kafka's protocol)."""
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return
        try:
            wanted = znodes.decode_partition_list(data)
        except Exception:  # noqa: BLE001 - garbage in an admin znode: drop it
            log.warning("ignoring malformed %s: %r", path, data[:200])
            wanted = []
        kind = "unclean" if path == znodes.UNCLEAN_LEADER_ELECTION_PATH else "preferred"
        log.info("%s election requested for %s", kind,
                 ", ".join(f"{t}-{p}" for t, p in wanted) or "nothing")
        eligible = registered - self._shutting_down
        for topic, p in wanted:
            replicas = assignments.get(topic, {}).get(p)
            if replicas is None:
                continue
            if kind == "preferred":
                self._update_partition(topic, p, replicas, _preferred_decider(eligible))
            else:
                self._update_partition(topic, p, replicas, _unclean_decider(registered, eligible))
        try:
            self.zk.delete(path)
        except NoNodeError:
            pass

    def _auto_rebalance(self) -> None:
        """SPEC R5: move leadership back to preferred replicas of imbalanced brokers."""
        registered = self._registered_brokers()
        eligible = registered - self._shutting_down
        assignments = self._assignments()
        flat: dict[tuple[str, int], list[int]] = {}
        leaders: dict[tuple[str, int], int] = {}
        isrs: dict[tuple[str, int], list[int]] = {}
        for topic, parts in assignments.items():
            for p, replicas in parts.items():
                current = self._read_state(topic, p)
                if current is None:
                    continue
                flat[(topic, p)] = replicas
                leaders[(topic, p)] = current[0].leader
                isrs[(topic, p)] = current[0].isr
        todo = elections.partitions_to_rebalance(flat, leaders, isrs, eligible,
                                                 self.imbalance_percentage)
        if todo:
            log.info("auto leader rebalance: preferred election for %s",
                     ", ".join(f"{t}-{p}" for t, p in todo))
        for topic, p in todo:
            self._update_partition(topic, p, flat[(topic, p)], _preferred_decider(eligible))

    # ------------------------------------------------------------------ deletion
    def _process_deletions(self) -> None:
        for topic in self.zk.get_children(znodes.DELETE_TOPICS):
            log.info("deleting topic %s", topic)
            for path in (znodes.topic_path(topic), znodes.topic_config_path(topic)):
                try:
                    self.zk.delete(path, recursive=True)
                except NoNodeError:
                    pass
                except NotEmptyError:
                    self.zk.delete(path, recursive=True)
            try:
                self.zk.delete(znodes.delete_topic_path(topic))
            except NoNodeError:
                pass


def _preferred_decider(eligible: set[int]) -> Decide:
    def decide(replicas: list[int], st: znodes.PartitionState) -> StateChange | None:
        if elections.is_preferred_leader(replicas, st.leader):
            return None  # ELECTION_NOT_NEEDED
        res = elections.preferred_election(replicas, st.isr, eligible)
        if res is None:
            return None  # PREFERRED_LEADER_NOT_AVAILABLE
        return StateChange(res.leader, st.leader_epoch + 1, res.isr, "preferred")
    return decide


def _unclean_decider(registered: set[int], eligible: set[int]) -> Decide:
    def decide(replicas: list[int], st: znodes.PartitionState) -> StateChange | None:
        if st.leader in registered:
            return None  # has a leader: ELECTION_NOT_NEEDED
        res = elections.offline_election(replicas, st.isr, eligible, unclean_enabled=True)
        if res is None:
            return None  # ELIGIBLE_LEADERS_NOT_AVAILABLE
        return StateChange(res.leader, st.leader_epoch + 1, res.isr,
                           "unclean" if res.unclean else "election")
    return decide
