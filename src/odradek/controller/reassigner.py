"""The controller's side of partition reassignment (KIP-455): ZooKeeper in, ZooKeeper out.

Requests arrive in ``/admin/reassign_partitions`` (Kafka's JSON; written by
AlterPartitionReassignments on any broker, ``server/handlers/reassign.py``). The
controller moves each entry into the topic znode (RS, ``adding_replicas``,
``removing_replicas``: the durable state, so a new controller resumes a move) and deletes
the request znode. Completion is checked on every full pass and whenever the state znode
of a partition being moved changes (the leader's ISR expansion is what completes it).

Each step is one ZooKeeper transaction fenced by the controller epoch (SPEC R13,
scenario 8): the state znode (new leader epoch, ISR ∩ TRS, leader moved) and the topic
znode change together, conditional on both znode versions, so no crash between two writes
can leave a half-finished step, and no step is decided on stale data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NoNodeError

from odradek.controller import reassignment
from odradek.controller.elections import StateChange
from odradek.controller.reassignment import ReplicaSets
from odradek.errors import KafkaError
from odradek.zk import znodes

if TYPE_CHECKING:
    from odradek.controller.controller import Controller

logger = logging.getLogger(__name__)

_MAX_CAS_ATTEMPTS = 10

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class _Step:
    """One partition's change: its new topic-znode entry and, maybe, a state write."""

    partition: int
    sets: ReplicaSets
    state: StateChange | None
    old_state: znodes.PartitionState | None
    state_version: int
    what: str


Decide = Callable[[znodes.TopicAssignment], list[_Step]]


def replica_sets(ta: znodes.TopicAssignment, p: int) -> ReplicaSets:
    return ReplicaSets(tuple(ta.partitions[p]), tuple(ta.adding_replicas.get(p, ())),
                       tuple(ta.removing_replicas.get(p, ())))


def _with_sets(ta: znodes.TopicAssignment, steps: list[_Step]) -> znodes.TopicAssignment:
    partitions = dict(ta.partitions)
    adding = dict(ta.adding_replicas)
    removing = dict(ta.removing_replicas)
    for s in steps:
        partitions[s.partition] = list(s.sets.replicas)
        adding.pop(s.partition, None)
        removing.pop(s.partition, None)
        if s.sets.adding:
            adding[s.partition] = list(s.sets.adding)
        if s.sets.removing:
            removing[s.partition] = list(s.sets.removing)
    return znodes.TopicAssignment(ta.topic, ta.topic_id, partitions, adding, removing)


class Reassigner:
    """Runs on the controller's thread; uses its fenced ``_commit``."""

    def __init__(self, controller: Controller) -> None:
        self._ctl = controller
        # Partitions being moved, for the controller's event filter (read from the
        # metadata thread: replaced as a whole, never mutated).
        self.in_progress: frozenset[TopicPartition] = frozenset()

    # ------------------------------------------------------------------ requests
    def process_requests(self, registered: Collection[int]) -> None:
        """Move ``/admin/reassign_partitions`` into the topic znodes, then delete it
        (conditionally: a request merged in meanwhile is processed by the next round)."""
        zk = self._ctl.zk
        for _ in range(_MAX_CAS_ATTEMPTS):
            try:
                data, stat = zk.get(znodes.REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            try:
                entries = znodes.decode_reassignment(data)
            except KafkaError as e:
                logger.warning("dropping malformed %s: %s", znodes.REASSIGN_PARTITIONS, e)
                entries = {}
            by_topic: dict[str, dict[int, list[int] | None]] = {}
            for (topic, p), target in entries.items():
                by_topic.setdefault(topic, {})[p] = target
            for topic, wanted in sorted(by_topic.items()):
                self._update_topic(topic, self._request_decider(topic, wanted, registered))
            # A target inside the ISR already (e.g. a smaller replication factor) is
            # complete at once: no ISR change will come to tell us.
            self.check([tp for tp, target in entries.items() if target is not None],
                       registered)
            try:
                zk.delete(znodes.REASSIGN_PARTITIONS, version=stat.version)
                return
            except NoNodeError:
                return
            except BadVersionError:
                continue  # a new request was merged in: process the znode again

    def _request_decider(self, topic: str, wanted: dict[int, list[int] | None],
                         live: Collection[int]) -> Decide:
        def decide(ta: znodes.TopicAssignment) -> list[_Step]:
            steps: list[_Step] = []
            for p, target in sorted(wanted.items()):
                if p not in ta.partitions:
                    logger.warning("reassignment of unknown partition %s-%d ignored", topic, p)
                    continue
                cur = replica_sets(ta, p)
                if target is None:
                    if not cur.in_progress:
                        continue
                    read = self._ctl._read_state(topic, p)
                    change = None
                    if read is not None:
                        st, _ = read
                        change = reassignment.revert(cur.original, st.leader, st.leader_epoch,
                                                     st.isr, live)
                    steps.append(_Step(p, reassignment.cancel(cur), change,
                                       read[0] if read else None, read[1] if read else -1,
                                       "cancelled"))
                    continue
                if not target or any(b not in live for b in target):
                    logger.warning("reassignment of %s-%d to %s ignored: not every broker "
                                   "is registered", topic, p, target)
                    continue
                new = reassignment.start(cur, target)
                if new != cur:
                    steps.append(_Step(p, new, None, None, -1, "started"))
            return steps
        return decide

    # ------------------------------------------------------------------ completion
    def check_all(self, topic_znodes: dict[str, znodes.TopicAssignment],
                  live: Collection[int]) -> None:
        """Complete what can be completed; remember what is still moving."""
        moving: set[TopicPartition] = set()
        for topic, ta in sorted(topic_znodes.items()):
            parts = [p for p in ta.partitions if replica_sets(ta, p).in_progress]
            if parts:
                self._update_topic(topic, self._completion_decider(topic, parts, live))
        for topic, ta in topic_znodes.items():
            moving.update((topic, p) for p in ta.partitions if replica_sets(ta, p).in_progress)
        self._refresh_moving(moving)

    def check(self, partitions: Iterable[TopicPartition], live: Collection[int]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        for topic, parts in sorted(by_topic.items()):
            self._update_topic(topic, self._completion_decider(topic, parts, live))

    def _refresh_moving(self, moving: set[TopicPartition]) -> None:
        self.in_progress = frozenset(moving)

    def _completion_decider(self, topic: str, parts: list[int],
                            live: Collection[int]) -> Decide:
        def decide(ta: znodes.TopicAssignment) -> list[_Step]:
            steps: list[_Step] = []
            for p in sorted(set(parts)):
                if p not in ta.partitions:
                    continue
                cur = replica_sets(ta, p)
                read = self._ctl._read_state(topic, p)
                if not cur.in_progress or read is None:
                    continue
                st, version = read
                change = reassignment.completion(cur, st.leader, st.leader_epoch, st.isr, live)
                if change is not None:
                    steps.append(_Step(p, ReplicaSets(cur.target), change, st, version,
                                       "completed"))
            return steps
        return decide

    # ------------------------------------------------------------------ writing
    def _update_topic(self, topic: str, decide: Decide) -> None:
        """Read the topic znode, decide, write everything in one fenced transaction;
        re-read and decide again when a znode changed underneath (BadVersion)."""
        zk = self._ctl.zk
        for _ in range(_MAX_CAS_ATTEMPTS):
            try:
                data, stat = zk.get(znodes.topic_path(topic))
            except NoNodeError:
                return
            ta = znodes.decode_topic(topic, data)
            steps = decide(ta)
            if not steps:
                return
            new_topic = znodes.encode_topic(_with_sets(ta, steps))
            epoch = self._ctl.epoch

            def ops(tx: Any, steps: list[_Step] = steps, version: int = stat.version) -> None:
                for s in steps:
                    if s.state is not None and s.old_state is not None:
                        tx.set_data(znodes.partition_state_path(topic, s.partition),
                                    znodes.encode_partition_state(znodes.PartitionState(
                                        s.state.leader, s.state.leader_epoch, s.state.isr,
                                        epoch)),
                                    s.state_version)
                tx.set_data(znodes.topic_path(topic), new_topic, version)

            if self._ctl._commit(ops):
                for s in steps:
                    self._log_step(topic, s)
                moving = set(self.in_progress)
                for s in steps:
                    if s.sets.in_progress:
                        moving.add((topic, s.partition))
                    else:
                        moving.discard((topic, s.partition))
                self._refresh_moving(moving)
                return
        logger.warning("topic %s: reassignment step gave up after %d conflicting writes",
                       topic, _MAX_CAS_ATTEMPTS)

    @staticmethod
    def _log_step(topic: str, s: _Step) -> None:
        tp = f"{topic}-{s.partition}"
        if s.what == "started":
            logger.info("reassignment of %s started: replicas %s, adding %s, removing %s",
                        tp, list(s.sets.replicas), list(s.sets.adding), list(s.sets.removing))
        else:
            logger.info("reassignment of %s %s: replicas %s", tp, s.what, list(s.sets.replicas))
        if s.state is not None and s.old_state is not None:
            logger.info("partition %s: leader %d -> %d at epoch %d, isr %s -> %s (%s)", tp,
                        s.old_state.leader, s.state.leader, s.state.leader_epoch,
                        s.old_state.isr, s.state.isr, s.state.kind)
