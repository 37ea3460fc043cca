"""The transaction coordinator of the simulated world (the transactional workload,
odradek.sim.clients).

Modelled, not run: Odradek's ``TransactionCoordinator`` needs its ``__transaction_state``
partitions, a producer-id block in ZooKeeper and a broker's connection pool, none of
which the simulator has. What *is* real here is every decision: one
``TxnMetadata`` (odradek.coordinator.txn_state, the coordinator's own state machine) per
transactional id, asked exactly as ``transaction_coordinator.py`` asks it --
InitProducerId (fencing an ongoing transaction with a bumped epoch first, answering
CONCURRENT_TRANSACTIONS meanwhile), AddPartitionsToTxn, KIP-890's verify-only
AddPartitionsToTxn, EndTxn, the transaction timeout (abort with a bumped epoch) -- and
the markers: a control batch (``txn_markers.control_batch``) appended through the
partition leader's own WriteTxnMarkers path (``leader_partition``, then
``append_and_wait`` with acks=all), retried on the partition's *current* leader until
it answers success, as Kafka's TransactionMarkerChannelManager does.

What is modelled: the coordinator is one node that faults never hit (``COORDINATOR`` on
the simulated network: its messages have the network's latency, and a broker that is
down answers nothing) and its log is durable the moment a transition is decided (Kafka
writes it with acks=all first; a coordinator failover is not simulated). Its epoch
(``coordinator_epoch`` in the markers) is therefore always 0.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from odradek.coordinator.state_table import IllegalStateError
from odradek.coordinator.txn_markers import RETRY_BACKOFF_S, control_batch
from odradek.coordinator.txn_state import COMPLETE, Transition, TxnMetadata, TxnState
from odradek.coordinator.txn_verifier import produce_error
from odradek.errors import ErrorCode, KafkaError, error_name
from odradek.replication.leader_endpoint import EndpointError
from odradek.runtime import clock
from odradek.sim.harness import TOPIC
from odradek.sim.world import World

__all__ = ["COORDINATOR", "SimTxnCoordinator", "SimVerifier"]

logger = logging.getLogger(__name__)

COORDINATOR = 100  # the coordinator's node on SimNetwork (no fault names it)
TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return clock.time_ns() // 1_000_000


class SimTxnCoordinator:
    """One coordinator for every transactional id of the run (see the module
    docstring). ``on_decision(tid, commit)``: called when a transaction's outcome is
    decided (EndTxn, a timeout, a fence), before any marker is written."""

    def __init__(
        self,
        w: World,
        timeout_ms: int,
        on_decision: Callable[[str, bool], None],
        check_every_s: float = 0.5,
    ) -> None:
        self.w = w
        self.timeout_ms = timeout_ms
        self.on_decision = on_decision
        self.check_every_s = check_every_s
        self.txns: dict[str, TxnMetadata] = {}
        self._completing: dict[str, asyncio.Task[None]] = {}
        # Producer ids from the seed (Kafka's come from a ZooKeeper block).
        self._next_pid = random.Random(f"producer-ids-{w.seed}").randrange(1000, 1 << 40)

    def new_producer_id(self) -> int:
        pid, self._next_pid = self._next_pid, self._next_pid + 1
        return pid

    # ------------------------------------------------------------ durable "log"
    def _write(self, m: TxnMetadata, t: Transition) -> None:
        m.apply(t)
        self.w.trace(
            f"coordinator: {m.transactional_id} producer {m.producer_id} epoch "
            f"{m.producer_epoch} {m.state.kafka_name} {sorted(p for _t, p in m.partitions)}"
        )

    def _decide(self, m: TxnMetadata, decision: Callable[[], object]) -> object:
        try:
            return decision()
        except IllegalStateError as e:
            return e.code

    # ------------------------------------------------------------ requests
    def init_producer_id(self, tid: str) -> tuple[ErrorCode, int, int]:
        m = self.txns.get(tid)
        t = _now_ms()
        if m is None:
            m = self.txns[tid] = TxnMetadata(tid, self.new_producer_id(), -1, self.timeout_ms)
            self._write(m, m._value(TxnState.EMPTY, t, epoch=0, partitions=set(), start_ms=-1))
            return ErrorCode.none, m.producer_id, m.producer_epoch
        if m.state is TxnState.ONGOING:
            self._fence_and_abort(m)  # a new instance: abort the old one's transaction
            return ErrorCode.concurrent_transactions, -1, -1
        new_pid = self.new_producer_id() if m.needs_epoch_bump() else None
        tr = self._decide(m, lambda: m.init_producer_id(self.timeout_ms, -1, -1, t, new_pid))
        if isinstance(tr, ErrorCode):
            return tr, -1, -1
        assert isinstance(tr, Transition)
        self._write(m, tr)
        return ErrorCode.none, m.producer_id, m.producer_epoch

    def add_partitions(
        self, tid: str, pid: int, epoch: int, parts: set[TopicPartition]
    ) -> ErrorCode:
        m = self.txns.get(tid)
        if m is None:
            return ErrorCode.invalid_producer_id_mapping
        tr = self._decide(m, lambda: m.add_partitions(pid, epoch, parts, _now_ms()))
        if isinstance(tr, ErrorCode):
            return tr
        if isinstance(tr, Transition):
            self._write(m, tr)
        return ErrorCode.none

    def verify_partitions(
        self, tid: str, pid: int, epoch: int, parts: set[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        m = self.txns.get(tid)
        if m is None:
            return dict.fromkeys(parts, ErrorCode.invalid_producer_id_mapping)
        return m.verify_partitions(pid, epoch, parts)

    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        m = self.txns.get(tid)
        if m is None:
            return ErrorCode.invalid_producer_id_mapping
        tr = self._decide(m, lambda: m.end_txn(pid, epoch, commit, _now_ms()))
        if isinstance(tr, ErrorCode):
            return tr
        if isinstance(tr, Transition):
            self._write(m, tr)
            self.on_decision(tid, commit)
            self._start_completion(m)
        return ErrorCode.none

    def _fence_and_abort(self, m: TxnMetadata) -> None:
        tr = m.abort_for_fence(_now_ms())
        if tr is None:
            return
        self._write(m, tr)
        self.on_decision(m.transactional_id, False)
        self._start_completion(m)

    # ------------------------------------------------------------ timers
    async def expire_loop(self) -> None:
        """transaction.timeout.ms: Ongoing transactions older than it are aborted with a
        bumped epoch (the producer is fenced), as ``_abort_timed_out`` does."""
        while True:
            await asyncio.sleep(self.check_every_s)
            t = _now_ms()
            for tid in sorted(self.txns):
                m = self.txns[tid]
                if m.timed_out(t):
                    self.w.trace(f"coordinator: {tid} timed out: aborting")
                    self._fence_and_abort(m)

    def settled(self) -> bool:
        """Every transaction ended (its markers written): liveness."""
        return all(m.state in (TxnState.EMPTY, *COMPLETE) for m in self.txns.values())

    def state(self) -> str:
        return ", ".join(f"{tid} {m.state.kafka_name}" for tid, m in sorted(self.txns.items()))

    # ------------------------------------------------------------ markers
    def _start_completion(self, m: TxnMetadata) -> None:
        tid = m.transactional_id
        task = self._completing.get(tid)
        if task is None or task.done():
            self._completing[tid] = asyncio.get_running_loop().create_task(self._complete(m))

    async def _complete(self, m: TxnMetadata) -> None:
        commit = m.state is TxnState.PREPARE_COMMIT
        await asyncio.gather(
            *(
                self._marker(p, m.producer_id, m.producer_epoch, commit)
                for _t, p in sorted(m.partitions)
            )
        )
        tr = m.complete(_now_ms())
        if tr is not None:
            self._write(m, tr)

    async def _marker(self, p: int, pid: int, epoch: int, commit: bool) -> None:
        """Until the partition's current leader wrote the marker (acks=all)."""
        w, h = self.w, self.w.h
        batch = control_batch(pid, epoch, commit, 0)
        kind = "COMMIT" if commit else "ABORT"
        while True:
            b = w.controller.znodes[p].leader  # the coordinator's metadata
            code = None
            if b >= 0 and b not in h.down:
                code = await self._write_marker(b, p, batch)
                w.trace(
                    f"marker {kind} producer {pid} epoch {epoch} p{p} on {b}: "
                    f"{'no answer' if code is None else error_name(code)}"
                )
                if code is ErrorCode.none:
                    return
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _write_marker(self, b: int, p: int, batch: bytes) -> ErrorCode | None:
        """WriteTxnMarkers to broker ``b`` for one partition: the handler's checks and
        append (``handle_write_txn_markers``). None: no answer (lost, or the broker
        crashed meanwhile)."""
        w, h = self.w, self.w.h
        try:
            await w.net.hop(COORDINATOR, b)
        except EndpointError:
            return None
        if b in h.down:
            return None
        inc = h.incarnation[b]
        rm = h.replicas[b]
        try:
            rm.leader_partition(TOPIC, p, h.images[b])
            code, _ = await rm.append_and_wait(
                (TOPIC, p), batch, w.cfg.produce_timeout_s, allow_control=True
            )
        except KafkaError as e:
            code = e.code
        if h.incarnation[b] != inc or b in h.down:
            return None
        try:
            await w.net.hop(b, COORDINATOR)
        except EndpointError:
            return None
        return code


class SimVerifier:
    """KIP-890 for one broker: what its ``TxnVerifier`` does, over the simulated network
    to the modelled coordinator (``PartitionVerifier``)."""

    def __init__(self, w: World, broker: int, coordinator: SimTxnCoordinator) -> None:
        self.w = w
        self.broker = broker
        self.coordinator = coordinator

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
        timeout_s: float,
    ) -> dict[TopicPartition, ErrorCode]:
        try:
            await self.w.net.hop(self.broker, COORDINATOR)
            codes = self.coordinator.verify_partitions(
                transactional_id, producer_id, epoch, set(partitions)
            )
            await self.w.net.hop(COORDINATOR, self.broker)
        except EndpointError:
            # The broker's produce handler goes on with the error (its request held while
            # the broker is paused, under the pause profile).
            await self.w.net.back(self.broker)
            codes = dict.fromkeys(partitions, ErrorCode.network_exception)
        return {tp: produce_error(c) for tp, c in codes.items() if c is not ErrorCode.none}
