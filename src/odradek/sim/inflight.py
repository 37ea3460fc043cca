"""The idempotent producer with up to N batches in flight per partition (``odradek sim
run --workload idempotent --in-flight N``, default 5): what the Java client
(``enable.idempotence=true``, ``max.in.flight.requests.per.connection=5``) and
librdkafka do, and where the broker's sequence checks, its cache of each producer's last
five batches, OUT_OF_ORDER_SEQUENCE_NUMBER and epoch bumps (KIP-360) are exercised.

**The connection.** SimNetwork's ``hop`` gives every message its own seeded latency, so
two messages between the same nodes may overtake each other: it guarantees no order.
A Kafka connection does, so ``Connection`` builds one over it: requests reach the broker
in the order they were sent; the broker reads the next one only once it answered the
previous one (Kafka's SocketServer mutes a channel while a request is processed);
answers reach the client in that same order. A lost message, or the broker crashing
with requests unanswered, breaks the connection: every request still unanswered on it
gets no answer (its outcome is unknown); the next send opens a new connection.

**The client's rules** (Java's RecordAccumulator.drain, Sender.completeBatch and
TransactionManager.canRetry), per partition:

* A batch gets the next sequence when it is first sent, and is sent only if it is at
  most the Nth from the first unfinished batch: a retry is then always among the
  broker's last five batches of the producer when N <= 5 (the Java client refuses more
  than 5; it counts requests, not this window, and may retry a batch past the cache,
  which then fails with a timeout though written -- its "unresolved sequence").
* A batch that got no answer or a retriable error is sent again, same bytes, to the
  partition's leader of the moment -- but only once it is the first unfinished batch:
  while any batch of the partition waits for a retry, nothing else is sent, and later
  batches are sent again after it, one at a time, in sequence order ("this effectively
  reduces our in flight request count to 1").
* OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID for a batch whose predecessor's
  outcome is not known yet (its sequence is past the last acknowledged one + 1) is
  retried like a retriable error: the predecessor decides. For the batch right after
  the last acknowledged one, the broker lost what it had acknowledged (acks=1): the
  producer bumps its epoch (KIP-360), once no request of it is outstanding and no batch
  of another partition has an unknown outcome; every unfinished batch is then sent
  again with sequences from 0 under the new epoch, in the order it was produced. For
  an earlier batch (a successor was acknowledged, so it is in the log, among the last
  five), the broker forgot it: with acks=all an error no fault explains
  (``producer-error``; fatal, as OutOfOrderSequenceException was in Kafka 0.11), with
  acks=1 the same loss as above.
* DUPLICATE_SEQUENCE_NUMBER counts as success, the offset unknown.
* Once the workload stops, nothing more is sent; what is unfinished when the last
  answer is in is abandoned.

**Timeouts** (``WorldConfig.request_timeout_s`` / ``delivery_timeout_s``; not armed by
default). A request unanswered ``request.timeout.ms`` after it was sent fails, and the
client closes its connection to that broker: every other request still unanswered on it
fails too (Java's NetworkClient.handleTimedOutRequests -> processTimeoutDisconnection,
whose inFlightRequests.clearAll answers each with a disconnection; librdkafka logs
"Timed out N in-flight ... requests", then "N request(s) timed out: disconnect" and
fails the broker's connection). What the client
sent before the close was on the wire and still reaches the broker, which handles it in
order (a paused broker on resume) and answers no one. Each failed batch's outcome is
unknown: it is retried like a batch that got no answer, same bytes, same sequence. A
batch not in flight ``delivery.timeout.ms`` after it was produced expires: it is failed
to the application, never acknowledged, never sent again (RecordAccumulator.expiredBatches,
Sender.sendProducerData). If it was sent at least once (Java: ``expiredBatch.inRetry()``)
its sequence is *unresolved* (TransactionManager.markSequenceUnresolved): no new batch of
the partition is sent; retries of the others go on; an OUT_OF_ORDER_SEQUENCE_NUMBER /
UNKNOWN_PRODUCER_ID then fails its batch too (canRetry refuses it while a sequence is
unresolved). Once no sequenced batch of the partition is unfinished
(TransactionManager.maybeResolveSequences), it is resolved if the last sequence given
out was acknowledged (a successor of the expired batch was written, so it was too);
otherwise the epoch is bumped (KIP-360, requestEpochBumpForPartition; librdkafka's
rd_kafka_idemp_drain_epoch_bump after its "unresolved sequence" drain) and the
unfinished batches start again from 0 under it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from odradek.errors import ErrorCode, error_name
from odradek.protocol.produce_response import PartitionProduceResult
from odradek.replication.leader_endpoint import EndpointError
from odradek.sim.world import World
from odradek.storage.records import encode_batch

__all__ = [
    "IN_FLIGHT_MAX",
    "RESET_SEQUENCES",
    "RETRIABLE",
    "Connection",
    "PipelinedProducer",
    "Sink",
]

IN_FLIGHT_MAX = 5  # Kafka's ProducerStateEntry.NumBatchesToRetain, the Java client's cap

RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.network_exception,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.kafka_storage_error,
        ErrorCode.concurrent_transactions,
    }
)
RESET_SEQUENCES = frozenset({ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id})

Answer = PartitionProduceResult | None


class Sink(Protocol):
    """What the producer needs of its workload (odradek.sim.clients.Workload)."""

    w: World

    async def serve(
        self, b: int, p: int, batch: bytes, prod: PipelinedProducer
    ) -> PartitionProduceResult | None: ...

    def acked(self, p: int, base: int, values: list[bytes], b: int) -> None: ...

    def acked_without_offset(self, p: int, values: list[bytes]) -> None: ...

    def unexpected(self, code: ErrorCode, what: str) -> None: ...


class Connection:
    """One producer's connection to broker ``b`` (see the module docstring)."""

    def __init__(
        self,
        sink: Sink,
        b: int,
        prod: PipelinedProducer,
        client: int,
        *,
        timeout_s: float | None = None,  # request.timeout.ms (None: none)
    ) -> None:
        self.sink = sink
        self.timeout_s = timeout_s
        self.b = b
        self.prod = prod
        self.client = client
        self.incarnation = sink.w.h.incarnation[b]
        self.broken = False
        # Closed by the client after a request timeout: what it sent still reaches the
        # broker (a broken stream does not), and no answer reaches the client.
        self.closed = False
        self._served: asyncio.Event | None = None  # the last request's
        self._answered: asyncio.Task[Answer] | None = None
        self._waiting: list[asyncio.Future[Answer]] = []  # the client's, with a timeout

    def _delivering(self) -> bool:
        h = self.sink.w.h
        alive = h.incarnation[self.b] == self.incarnation and self.b not in h.down
        return alive and not self.broken

    def usable(self) -> bool:
        return self._delivering() and not self.closed

    def send(self, p: int, batch: bytes) -> asyncio.Future[Answer]:
        """The request's answer (None: none, or it timed out). Without a request timeout,
        the exchange's own task: the runs recorded before timeouts replay unchanged."""
        served = asyncio.Event()
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._exchange(p, batch, self._served, served, self._answered))
        self._served, self._answered = served, task
        timeout = self.timeout_s
        if timeout is None:
            return task
        answer: asyncio.Future[Answer] = loop.create_future()
        self._waiting.append(answer)
        task.add_done_callback(partial(self._answer, answer))
        loop.call_later(timeout, self._timed_out, answer)
        return answer

    def _answer(self, answer: asyncio.Future[Answer], t: asyncio.Task[Answer]) -> None:
        if not answer.done():
            answer.set_result(t.result())
            self._waiting.remove(answer)

    def _timed_out(self, answer: asyncio.Future[Answer]) -> None:
        """request.timeout.ms: the client closes the connection; every request still
        unanswered on it fails (outcome unknown)."""
        if answer.done():
            return
        self.closed = True
        waiting, self._waiting = self._waiting, []
        who = f"producer {self.prod.pid}" if self.prod is not None else f"client {self.client}"
        self.sink.w.trace(
            f"{who}: request to {self.b} timed out: connection closed, "
            f"{len(waiting)} request(s) failed"
        )
        for a in waiting:
            a.set_result(None)

    async def _exchange(
        self,
        p: int,
        batch: bytes,
        served_before: asyncio.Event | None,
        served: asyncio.Event,
        answered_before: asyncio.Task[Answer] | None,
    ) -> Answer:
        net = self.sink.w.net
        res: Answer = None
        try:
            try:
                await net.hop(self.client, self.b)
            except EndpointError:
                self.broken = True
            if served_before is not None:
                await served_before.wait()  # read in order, one at a time
            if self._delivering():
                res = await self.sink.serve(self.b, p, batch, self.prod)
                if res is None:
                    self.broken = True  # the broker crashed while handling it
        finally:
            served.set()
        if res is not None:
            try:
                await net.hop(self.b, self.client)
            except EndpointError:
                self.broken = True
        if answered_before is not None:
            await asyncio.wait([answered_before])  # answers arrive in order
        return None if self.broken or self.closed else res


@dataclass(eq=False)
class _Batch:
    values: list[bytes]
    ts: int
    seq: int = -1  # -1: not sequenced yet (new, or reset by an epoch bump)
    encoded: bytes = b""  # the batch as sent (its sequence fixed), empty until sequenced
    sent: bool = False  # a request carrying it is outstanding
    done: bool = False  # acknowledged
    expired: bool = False  # failed to the application (delivery.timeout.ms): given up
    attempted: bool = False  # sent at least once (Java's inRetry once it failed)
    deadline: float = float("inf")  # delivery.timeout.ms after it was produced
    retry: bool = False  # its last attempt failed: send it again
    unknown: bool = False  # its last attempt may have written it
    not_before: float = 0.0  # retry.backoff.ms

    @property
    def label(self) -> str:
        return self.values[0].decode()


@dataclass(eq=False)
class _Partition:
    queue: deque[_Batch] = field(default_factory=deque)  # not sequenced yet
    # Sequenced batches from the first unfinished one on (acknowledged ones stay until
    # their predecessors are: the window of at most N).
    window: list[_Batch] = field(default_factory=list)
    next_seq: int = 0
    last_acked: int = -1
    bump: bool = False  # the broker lost acknowledged batches: needs a new epoch
    unresolved: bool = False  # a batch sent at least once expired (see "Timeouts")
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def unfinished(self) -> list[_Batch]:
        return [bt for bt in self.window if not bt.done and not bt.expired]


class PipelinedProducer:
    """One idempotent producer: a sender task per partition (see the module docstring)."""

    tid: str | None = None

    def __init__(
        self,
        sink: Sink,
        k: int,
        pid: int,
        in_flight: int,
        *,
        client: int,
        backoff_s: float,
        acks_all: bool,
    ) -> None:
        if not 1 <= in_flight <= IN_FLIGHT_MAX:
            raise ValueError(f"in-flight batches must be 1 to {IN_FLIGHT_MAX}, not {in_flight}")
        self.sink = sink
        self.w = sink.w
        self.k = k
        self.pid = pid
        self.epoch = 0
        self.in_flight = in_flight
        self.client = client
        self.backoff_s = backoff_s
        self.acks_all = acks_all
        self.bumping = False
        self.failed = False
        self.parts: dict[int, _Partition] = {}
        self.conns: dict[int, Connection] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def add(self, p: int, values: list[bytes], ts: int) -> None:
        st = self.parts.get(p)
        if st is None:
            st = self.parts[p] = _Partition()
            self.tasks.append(asyncio.get_running_loop().create_task(self._sender(p, st)))
        bt = _Batch(values, ts)
        if self.w.cfg.delivery_timeout_s is not None:
            bt.deadline = self.w.now() + self.w.cfg.delivery_timeout_s
            # The sender must wake to expire it even if nothing else happens.
            asyncio.get_running_loop().call_at(bt.deadline, st.wake.set)
        st.queue.append(bt)
        st.wake.set()

    async def close(self) -> None:
        """The workload stopped: wait for the answers outstanding, abandon the rest."""
        for st in self.parts.values():
            st.wake.set()
        await asyncio.gather(*self.tasks)

    # ---------------------------------------------------------------- sending
    def _next(self, st: _Partition) -> _Batch | None:
        unfinished = st.unfinished
        if any(bt.retry for bt in unfinished):
            first = unfinished[0]
            # While a bump waits, only batches that may be in the log are resolved.
            resolving = not self.bumping or any(bt.unknown for bt in unfinished)
            if first.retry and not first.sent and not st.bump and resolving:
                return first
            return None
        if self.bumping or st.unresolved or not st.queue or len(st.window) >= self.in_flight:
            return None
        return st.queue[0]

    def _expire(self, p: int, st: _Partition) -> None:
        """delivery.timeout.ms: fail every batch not in flight past its deadline (see
        "Timeouts" in the module docstring)."""
        now = self.w.now()
        while st.queue and st.queue[0].deadline <= now:
            bt = st.queue.popleft()  # never sent: certainly not written
            self.w.trace(f"produce {bt.label}: expired (delivery timeout), never sent")
        for bt in st.unfinished:
            if bt.sent or bt.deadline > now:
                continue
            bt.expired, bt.retry = True, False
            if bt.attempted:
                st.unresolved = True
            self.w.trace(f"produce {bt.label} seq {bt.seq}: expired (delivery timeout)")
        self._resolve(p, st)

    def _resolve(self, p: int, st: _Partition) -> None:
        """TransactionManager.maybeResolveSequences, once nothing sequenced is unfinished."""
        while st.window and (st.window[0].done or st.window[0].expired):
            st.window.pop(0)
        if not st.unresolved or st.unfinished:
            return
        st.unresolved = False
        if st.last_acked == st.next_seq - 1:
            self.w.trace(f"producer {self.pid} p{p}: sequence resolved (a successor acked)")
            return
        self.w.trace(f"producer {self.pid} p{p}: unresolved sequence: bumping the epoch")
        st.bump = self.bumping = True
        self._maybe_bump()

    async def _sender(self, p: int, st: _Partition) -> None:
        w = self.w
        timeouts = w.cfg.delivery_timeout_s is not None
        while not self.failed:
            if timeouts and not w.stopping:
                self._expire(p, st)
            bt = None if w.stopping else self._next(st)
            if bt is None:
                if w.stopping and not any(b.sent for b in st.window):
                    for left in [*st.unfinished, *st.queue]:
                        w.trace(f"produce {left.label}: abandoned (the workload stopped)")
                    return
                await st.wake.wait()
                st.wake.clear()
                continue
            if bt.not_before > w.now():
                await asyncio.sleep(bt.not_before - w.now())
                continue
            b = w.controller.znodes[p].leader  # the client's metadata
            if b < 0 or b in w.h.down:
                await asyncio.sleep(self.backoff_s)
                continue
            if bt.seq < 0:
                st.queue.popleft()
                bt.seq = st.next_seq
                st.next_seq += len(bt.values)
                bt.encoded = encode_batch(
                    [(None, v) for v in bt.values],
                    timestamp_ms=bt.ts,
                    producer_id=self.pid,
                    producer_epoch=self.epoch,
                    base_sequence=bt.seq,
                )
                st.window.append(bt)
            bt.sent, bt.retry, bt.attempted = True, False, True
            conn = self.conns.get(b)
            if conn is None or not conn.usable():
                conn = self.conns[b] = Connection(
                    self.sink, b, self, self.client, timeout_s=self.w.cfg.request_timeout_s
                )
            conn.send(p, bt.encoded).add_done_callback(partial(self._answered, p, st, bt, b))

    # ---------------------------------------------------------------- answers
    def _answered(self, p: int, st: _Partition, bt: _Batch, b: int, t: asyncio.Future[Answer]
                  ) -> None:  # fmt: skip
        w = self.w
        bt.sent = False
        st.wake.set()
        res = t.result()
        if res is None:
            w.trace(f"produce {bt.label} seq {bt.seq} to {b}: no answer, retrying")
            self._retry(bt, unknown=True)
            return self._maybe_bump()
        code = ErrorCode(res.error_code)
        if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
            bt.done = True
            while st.window and (st.window[0].done or st.window[0].expired):
                st.window.pop(0)
            st.last_acked = max(st.last_acked, bt.seq + len(bt.values) - 1)
            if code is ErrorCode.none:
                self.sink.acked(p, res.base_offset, bt.values, b)
            else:
                w.trace(f"produce {bt.label} seq {bt.seq} to {b}: {error_name(code)}: acked")
                self.sink.acked_without_offset(p, bt.values)
            self._resolve(p, st)
            return self._maybe_bump()
        w.trace(f"produce {bt.label} seq {bt.seq} to {b}: {error_name(code)}")
        if code in RESET_SEQUENCES and st.unresolved:
            # canRetry refuses it while a sequence is unresolved: the batch fails (the
            # broker did not write it) and the partition's resolution decides the bump.
            bt.expired = True
            w.trace(f"produce {bt.label} seq {bt.seq}: failed (a sequence is unresolved)")
            self._resolve(p, st)
        elif code in RETRIABLE:
            # NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT may answer an appended batch.
            self._retry(bt, unknown=True)
        elif code in RESET_SEQUENCES and bt.seq > st.last_acked + 1:
            self._retry(bt, unknown=bt.unknown)  # a predecessor's outcome decides
        elif code in RESET_SEQUENCES and (bt.seq == st.last_acked + 1 or not self.acks_all):
            self._retry(bt, unknown=False)
            st.bump = self.bumping = True
        else:
            # A successor was acknowledged, so the broker wrote this batch, one of its
            # last five: it forgot it.
            forgot = f": sequence {bt.seq}, {st.last_acked} acknowledged"
            if code not in RESET_SEQUENCES:
                forgot = ""
            self._fail(code, f"idempotent producer {self.k} on p{p}{forgot}")
        return self._maybe_bump()

    def _fail(self, code: ErrorCode, what: str) -> None:
        self.failed = True
        for st in self.parts.values():
            st.wake.set()
        self.sink.unexpected(code, what)

    def _retry(self, bt: _Batch, *, unknown: bool) -> None:
        bt.retry, bt.unknown = True, unknown
        bt.not_before = self.w.now() + self.backoff_s

    def _maybe_bump(self) -> None:
        """KIP-360: once nothing is outstanding and no batch that may be in the log is
        unresolved (but on the partitions whose broker lost them), a new epoch; the
        unfinished batches start again from sequence 0, in their order."""
        if not self.bumping:
            return
        for st in self.parts.values():
            if any(bt.sent or (bt.unknown and not st.bump) for bt in st.unfinished):
                return
        self.epoch += 1
        self.bumping = False
        for st in self.parts.values():
            for bt in reversed(st.unfinished):
                bt.seq, bt.encoded, bt.retry, bt.unknown = -1, b"", False, False
                st.queue.appendleft(bt)
            st.window.clear()
            st.next_seq, st.last_acked, st.bump = 0, -1, False
            st.unresolved = False  # bumpIdempotentProducerEpoch: the sequences are rewritten
            st.wake.set()
        self.w.trace(f"producer {self.pid}: epoch bumped to {self.epoch}")
