"""The controller: one broker, elected through ZooKeeper, reacts to cluster changes (SPEC R13).

It is one event loop on its own thread. ZooKeeper watches (seen through the metadata
store) only enqueue events; the loop decides and then writes ZooKeeper. For each
decision it writes the partition state znode first (SPEC R13); brokers learn the new
state from their watch on that znode.

What it does now (broker-core issue):

* **Election** (SPEC R13): create the ephemeral ``/controller``; on success bump
  ``/controller_epoch`` with a conditional write. Whoever loses watches ``/controller``
  and tries again when it disappears.
* **New partitions**: give every partition without a state znode a leader — the first
  live replica in assignment order, i.e. the preferred leader (SPEC R2) — at
  leader epoch 0. Its ISR starts as the leader alone: followers join it once they have
  caught up, which needs follower fetching (the replication issue); claiming them in
  sync before then would make the HW wait for replicas that never fetch.
* **Topic deletion**: topics listed under ``/admin/delete_topics`` lose their znodes;
  every broker then deletes its local logs.

Leader failover, preferred election and ISR changes arrive with the replication issue.
"""

from __future__ import annotations

import logging
import queue
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from odradek.broker.metadata_store import (
    BrokersChanged, ControllerChanged, DeletionsChanged, MetadataEvent, SessionReestablished,
    Stop, TopicChanged, TopicsChanged,
)
from odradek.zk import znodes

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, zk: KazooClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.epoch = -1
        self.active = False
        self._events: queue.Queue[MetadataEvent] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)

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
            try:
                data, _ = self.zk.get(znodes.CONTROLLER)
                if znodes.decode_controller(data).broker_id == self.broker_id:
                    self.zk.delete(znodes.CONTROLLER)
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass
            self.active = False

    def on_event(self, ev: MetadataEvent) -> None:
        """Called from the metadata thread: only enqueue (never block it)."""
        if isinstance(ev, (BrokersChanged, TopicsChanged, TopicChanged, DeletionsChanged,
                           ControllerChanged, SessionReestablished)):
            self._events.put(ev)

    # ------------------------------------------------------------------ loop
    def _run(self) -> None:
        while True:
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
                if any(isinstance(e, (ControllerChanged, SessionReestablished)) for e in batch):
                    self._elect()
                if self.active:
                    self._process_deletions()
                    self._create_missing_states()
            except Exception:
                log.exception("controller step failed; will retry on the next event")

    def _elect(self) -> None:
        try:
            data, _ = self.zk.get(znodes.CONTROLLER)
            holder = znodes.decode_controller(data).broker_id
            was = self.active
            self.active = holder == self.broker_id and self.zk.exists(znodes.CONTROLLER).ephemeralOwner == self.zk.client_id[0]
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
        self.epoch = self._bump_epoch()
        self.active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)

    def _bump_epoch(self) -> int:
        while True:
            try:
                data, stat = self.zk.get(znodes.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(1))
                    return 1
                except NodeExistsError:
                    continue
            epoch = znodes.decode_controller_epoch(data) + 1
            try:
                self.zk.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch),
                            version=stat.version)
                return epoch
            except BadVersionError:
                continue

    # ------------------------------------------------------------------ decisions
    def _live_brokers(self) -> set[int]:
        return {int(c) for c in self.zk.get_children(znodes.BROKER_IDS) if c.isdigit()}

    def _create_missing_states(self) -> None:
        live = self._live_brokers()
        deleting = set(self.zk.get_children(znodes.DELETE_TOPICS))
        for topic in self.zk.get_children(znodes.BROKER_TOPICS):
            if topic in deleting:
                continue
            try:
                data, _ = self.zk.get(znodes.topic_path(topic))
            except NoNodeError:
                continue
            assignment = znodes.decode_topic(topic, data)
            for p, replicas in sorted(assignment.partitions.items()):
                path = znodes.partition_state_path(topic, p)
                if self.zk.exists(path):
                    continue
                leader = next((r for r in replicas if r in live), None)
                if leader is None:
                    continue  # stays "new" until a replica is alive
                state = znodes.PartitionState(leader=leader, leader_epoch=0, isr=[leader],
                                              controller_epoch=self.epoch)
                try:
                    self.zk.create(path, znodes.encode_partition_state(state), makepath=True)
                    log.info("%s-%d: leader %d (new partition)", topic, p, leader)
                except NodeExistsError:
                    pass

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
