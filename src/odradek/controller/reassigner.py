"""The controller's side of partition reassignment (KIP-455): ZooKeeper in, ZooKeeper out.

Requests arrive in ``/admin/reassign_partitions`` (Kafka's JSON; written by
AlterPartitionReassignments on any broker, ``server/handlers/reassign.py``). The
controller moves each entry into the topic znode (RS, ``adding_replicas``,
``removing_replicas``: the durable state, so a new controller resumes a move) and deletes
the request znode. Completion is checked on every full pass and whenever a
``leader_and_isr`` notification names a partition being moved (the leader's ISR
expansion is what completes it).

Each step is one ZooKeeper transaction fenced by the controller epoch (REQ-R13,
scenario 8): the state znodes (new leader epoch, ISR ∩ TRS, leader moved), their
``leader_and_isr`` notification (how brokers learn states) and the topic znode change
together, each conditional on its znode version (``KafkaZkClient.update_topic_and_states``),
so no crash between two writes can leave a half-finished step, and no step is decided on
stale data. The controller's context is updated from what was written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NoNodeError

from odradek.controller import reassignment
from odradek.controller.context import ControllerContext
from odradek.controller.elections import StateChange
from odradek.controller.reassignment import ReplicaSets
from odradek.errors import KafkaError
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import ControllerMovedError, StateWrite

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


# (topic znode, its partitions' states) -> the steps to write.
Decide = Callable[
    [znodes.TopicAssignment, dict[int, tuple[znodes.PartitionState, int]]], list[_Step]
]


def replica_sets(ta: znodes.TopicAssignment, p: int) -> ReplicaSets:
    return ReplicaSets(
        tuple(ta.partitions[p]),
        tuple(ta.adding_replicas.get(p, ())),
        tuple(ta.removing_replicas.get(p, ())),
    )


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
    """Runs on the controller's thread, with its context and fenced KafkaZkClient."""

    def __init__(self, controller: Controller) -> None:
        self._ctl = controller

    # ------------------------------------------------------------------ requests
    def process_requests(self, ctx: ControllerContext) -> None:
        """Move ``/admin/reassign_partitions`` into the topic znodes, then delete it
        (conditionally: a request merged in meanwhile is processed by the next round)."""
        zkc = self._ctl.zkc
        for _ in range(_MAX_CAS_ATTEMPTS):
            got = zkc.get_data(znodes.REASSIGN_PARTITIONS)
            if got is None:
                return
            data, stat = got
            try:
                entries = znodes.decode_reassignment(data)
            except KafkaError as e:
                logger.warning("dropping malformed %s: %s", znodes.REASSIGN_PARTITIONS, e)
                entries = {}
            by_topic: dict[str, dict[int, list[int] | None]] = {}
            for (topic, p), target in entries.items():
                by_topic.setdefault(topic, {})[p] = target
            for topic, wanted in sorted(by_topic.items()):
                self._update_topic(ctx, topic, self._request_decider(ctx, topic, wanted))
            # A target inside the ISR already (e.g. a smaller replication factor) is
            # complete at once: no ISR change will come to tell us.
            self.check(ctx, [tp for tp, target in entries.items() if target is not None])
            try:
                zkc.zk.delete(znodes.REASSIGN_PARTITIONS, version=stat.version)
                return
            except NoNodeError:
                return
            except BadVersionError:
                continue  # a new request was merged in: process the znode again

    def _request_decider(
        self, ctx: ControllerContext, topic: str, wanted: dict[int, list[int] | None]
    ) -> Decide:
        live = ctx.live_brokers

        def decide(
            ta: znodes.TopicAssignment, states: dict[int, tuple[znodes.PartitionState, int]]
        ) -> list[_Step]:
            steps: list[_Step] = []
            for p, target in sorted(wanted.items()):
                if p not in ta.partitions:
                    logger.warning("reassignment of unknown partition %s-%d ignored", topic, p)
                    continue
                cur = replica_sets(ta, p)
                if target is None:
                    if not cur.in_progress:
                        continue
                    sv = states.get(p)
                    change = (
                        None
                        if sv is None
                        else reassignment.revert(
                            cur.original, sv[0].leader, sv[0].leader_epoch, sv[0].isr, live
                        )
                    )
                    steps.append(
                        _Step(
                            p,
                            reassignment.cancel(cur),
                            change,
                            sv[0] if sv else None,
                            sv[1] if sv else -1,
                            "cancelled",
                        )
                    )
                    continue
                # Kafka's validateReassignment: the brokers being added must be alive; a
                # replica that stays may be down (it rejoins the ISR when it is back,
                # and the move completes then).
                dead = [b for b in target if b not in cur.original and b not in live]
                if not target or dead:
                    logger.warning(
                        "reassignment of %s-%d to %s ignored: brokers %s are not registered",
                        topic,
                        p,
                        target,
                        dead,
                    )
                    continue
                new = reassignment.start(cur, target)
                if new != cur:
                    steps.append(_Step(p, new, None, None, -1, "started"))
            return steps

        return decide

    # ------------------------------------------------------------------ completion
    def check_all(self, ctx: ControllerContext) -> None:
        """Complete every move that can be completed."""
        self.check(ctx, sorted(ctx.moving()))

    def check(self, ctx: ControllerContext, partitions: Iterable[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        for topic, parts in sorted(by_topic.items()):
            self._update_topic(ctx, topic, self._completion_decider(ctx, parts))

    @staticmethod
    def _completion_decider(ctx: ControllerContext, parts: list[int]) -> Decide:
        live = ctx.live_brokers

        def decide(
            ta: znodes.TopicAssignment, states: dict[int, tuple[znodes.PartitionState, int]]
        ) -> list[_Step]:
            steps: list[_Step] = []
            for p in sorted(set(parts)):
                if p not in ta.partitions or p not in states:
                    continue
                cur = replica_sets(ta, p)
                if not cur.in_progress:
                    continue
                st, version = states[p]
                change = reassignment.completion(cur, st.leader, st.leader_epoch, st.isr, live)
                if change is not None:
                    steps.append(
                        _Step(p, ReplicaSets(cur.target), change, st, version, "completed")
                    )
            return steps

        return decide

    # ------------------------------------------------------------------ writing
    def _update_topic(self, ctx: ControllerContext, topic: str, decide: Decide) -> None:
        """Read the topic znode and its states, decide, write everything in one fenced
        transaction; re-read and decide again when a znode changed underneath."""
        ctl = self._ctl
        zkc = ctl.zkc
        for _ in range(_MAX_CAS_ATTEMPTS):
            got = zkc.get_data(znodes.topic_path(topic))
            if got is None:
                return
            data, stat = got
            ta = znodes.decode_topic(topic, data)
            read = zkc.get_partition_states([(topic, p) for p in ta.partitions])
            states = {p: sv for (_, p), sv in read.items()}
            steps = decide(ta, states)
            if not steps:
                return
            new_ta = _with_sets(ta, steps)
            writes = [
                StateWrite(
                    topic,
                    s.partition,
                    ta.topic_id,
                    znodes.PartitionState(
                        s.state.leader, s.state.leader_epoch, s.state.isr, ctl.epoch
                    ),
                    s.state_version,
                )
                for s in steps
                if s.state is not None and s.old_state is not None
            ]
            try:
                ok = zkc.update_topic_and_states(
                    topic,
                    znodes.encode_topic(new_ta),
                    stat.version,
                    writes,
                    fence=ctl._epoch_zk_version,
                    writer=ctl.broker_id,
                )
            except ControllerMovedError:
                from odradek.controller.controller import NotController  # noqa: PLC0415

                raise NotController() from None
            if ok:
                ctx.set_topic(new_ta)
                for w in writes:
                    ctx.states[w.tp] = (w.state, w.expected_version + 1)
                for s in steps:
                    self._log_step(topic, s)
                return
        logger.warning(
            "topic %s: reassignment step gave up after %d conflicting writes",
            topic,
            _MAX_CAS_ATTEMPTS,
        )

    @staticmethod
    def _log_step(topic: str, s: _Step) -> None:
        tp = f"{topic}-{s.partition}"
        if s.what == "started":
            logger.info(
                "reassignment of %s started: replicas %s, adding %s, removing %s",
                tp,
                list(s.sets.replicas),
                list(s.sets.adding),
                list(s.sets.removing),
            )
        else:
            logger.info("reassignment of %s %s: replicas %s", tp, s.what, list(s.sets.replicas))
        if s.state is not None and s.old_state is not None:
            logger.info(
                "partition %s: leader %d -> %d at epoch %d, isr %s -> %s (%s)",
                tp,
                s.old_state.leader,
                s.state.leader,
                s.state.leader_epoch,
                s.old_state.isr,
                s.state.isr,
                s.state.kind,
            )
