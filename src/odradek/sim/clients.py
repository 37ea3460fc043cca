"""The idempotent and transactional workloads of the simulator (``odradek sim run
--workload idempotent|transactional``), with read_committed and read_uncommitted
consumers; the invariants they feed: odradek.sim.txn_checkers.

Clients are one node of the simulated network (``CLIENT``; faults never name it, as the
documents' clients reach every broker), so each request and each answer has the
network's latency, and a request to a broker that is down -- or whose answer was on the
wire when the broker crashed -- gets no answer: its outcome is unknown to the client.

* **Idempotent producers** (librdkafka's model, ``enable.idempotence``): a producer id
  from the seed, epoch 0, a sequence per partition, one batch (1-3 records) in flight at
  a time. A batch whose outcome is unknown (no answer, REQUEST_TIMED_OUT) or that failed
  retriably (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ...) is sent again, the same
  bytes with the same sequence, to the partition's leader of the moment, until it is
  answered. OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID (the broker lost what the
  producer had acknowledged: only with acks=1) bump the epoch and restart the sequences
  (KIP-360). Once the workload stops, a batch still unanswered is abandoned.
  With ``--in-flight`` 2-5 (the default 5), odradek.sim.inflight's pipelined producer.
* **Timeouts** (``WorldConfig.request_timeout_s`` / ``delivery_timeout_s``, not armed by
  default; odradek.sim.inflight's "Timeouts" for the rules and their sources): a Produce
  unanswered after the request timeout fails (outcome unknown) and is retried, while the
  broker still handles it when it can (a paused one on resume) and answers no one. A batch
  past its delivery timeout expires: never acknowledged. An idempotent producer whose
  expired batch had been sent bumps its epoch (nothing else is in flight: Java's
  maybeResolveSequences finds the sequence unresolved); a transactional one aborts the
  transaction and initialises again, which bumps its epoch (Java's abortable error with
  ``epochBumpRequired``: EndTxn ABORT, then InitProducerId with its id and epoch), so
  the expired batch, if it reaches a partition later, is fenced there.
* **Transactional producers** (KIP-98's client): InitProducerId, then transactions over
  2 or more partitions: AddPartitionsToTxn, 2-5 transactional batches (the first on a
  partition verified by its leader with the coordinator, KIP-890), EndTxn COMMIT or
  ABORT (70% commit, drawn from the seed). A fenced producer (PRODUCER_FENCED,
  INVALID_PRODUCER_EPOCH) initialises again; an abortable error aborts. The coordinator:
  odradek.sim.txn_coordinator (a model with the real decisions and the real marker
  path). A producer stopping mid-transaction leaves it to the coordinator's timeout.
* **Consumers**: per partition one read_committed and one read_uncommitted consumer,
  fetching from the partition's leader of the moment (with its leader epoch, KIP-320)
  through the leader's ``fetch_messages``, decoding as Kafka's consumer does
  (``txn_checkers.consume_records``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from odradek.errors import ErrorCode, error_name
from odradek.protocol.fetch_response import PartitionFetchResult
from odradek.protocol.produce_response import PartitionProduceResult
from odradek.replication.fetch_serving import FetchEntry, FetchParams
from odradek.replication.leader_endpoint import EndpointError
from odradek.runtime import clock
from odradek.sim.checkers import Ack, Violation
from odradek.sim.harness import TOPIC
from odradek.sim.inflight import RESET_SEQUENCES, RETRIABLE, PipelinedProducer
from odradek.sim.txn_checkers import (
    Outcome,
    StableOffsetMonitor,
    TxnKey,
    consume_records,
    duplicates_and_gaps,
    fetch_error,
    fetch_violations,
    read_batches,
    reordered,
    stream_violations,
    transaction_outcomes,
    unexpected_error,
    unplaced_lost,
)
from odradek.sim.txn_coordinator import COORDINATOR, SimTxnCoordinator, SimVerifier
from odradek.sim.world import World
from odradek.storage.records import encode_batch

__all__ = [
    "CLIENT",
    "WORKLOADS",
    "WORKLOAD_SEGMENT_BYTES",
    "Workload",
    "send_order",
    "txn_of",
]

WORKLOADS = ("plain", "idempotent", "transactional")
CLIENT = 0  # the clients' node on SimNetwork
RETRY_BACKOFF_S = 0.1  # retry.backoff.ms
COMMIT_SHARE = 0.7
# segment.bytes of these workloads' runs (WorldConfig.segment_bytes): small, so that a
# run rolls segments and the aborted-transaction index is searched across them.
WORKLOAD_SEGMENT_BYTES = 4096

_FENCED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})
ABANDONED = "abandoned"
EXPIRED = "expired"  # delivery.timeout.ms: failed to the application


def send_order(value: bytes) -> tuple[str, tuple[int, ...]] | None:
    """A record's producer and its place in that producer's send order, from its value:
    ``i<k>-<n>`` (idempotent) or ``t<k>.<n>-<i>.<j>`` (transactional)."""
    head, _, tail = value.partition(b"-")
    if value.startswith(b"i"):
        return head.decode(), (int(tail),)
    if value.startswith(b"t"):
        k, _, n = head[1:].partition(b".")
        i, _, j = tail.partition(b".")
        return f"t{int(k)}", (int(n), int(i), int(j))
    return None


def txn_of(value: bytes) -> TxnKey | None:
    """The transaction a record was produced in, from its value (``t<k>.<n>-<i>``)."""
    if not value.startswith(b"t"):
        return None
    k, _, n = value[1:].partition(b"-")[0].partition(b".")
    return int(k), int(n)


@dataclass
class Consumer:
    name: str
    partition: int
    read_committed: bool
    position: int = 0
    seen: list[tuple[int, bytes]] = field(default_factory=list)


class _Producer:
    """One producer's id, epoch and sequences, and its send-until-answered loop."""

    def __init__(self, wl: Workload, k: int, tid: str | None) -> None:
        self.wl = wl
        self.k = k
        self.tid = tid
        self.pid = -1
        self.epoch = -1
        self.seqs: dict[int, int] = {}

    def _batch(self, values: list[bytes], seq: int, ts: int) -> bytes:
        return encode_batch(
            [(None, v) for v in values],
            timestamp_ms=ts,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=seq,
            transactional=self.tid is not None,
        )

    async def send(self, p: int, values: list[bytes]) -> int | ErrorCode | str:
        """The batch's base offset once acknowledged; the error that ended it (fenced,
        abortable, unexpected); ABANDONED (the workload stopped first); or EXPIRED (the
        delivery timeout passed first)."""
        wl, w = self.wl, self.wl.w
        ts = clock.time_ns() // 1_000_000
        seq = self.seqs.get(p, 0)
        batch = self._batch(values, seq, ts)
        label = values[0].decode()
        first = True
        deadline = float("inf")
        if w.cfg.delivery_timeout_s is not None:
            deadline = w.now() + w.cfg.delivery_timeout_s
        attempted = False
        while True:
            if not first:
                if w.stopping:
                    w.trace(f"produce {label}: abandoned (the workload stopped)")
                    return ABANDONED
                await asyncio.sleep(RETRY_BACKOFF_S)
                if w.now() >= deadline:
                    return self._expired(label, seq, attempted=attempted)
            first = False
            b = w.controller.znodes[p].leader  # the client's metadata
            if b < 0 or b in w.h.down:
                continue
            attempted = True
            res = await wl.request(b, p, batch, self)
            if res is None:
                w.trace(f"produce {label} seq {seq} to {b}: no answer, retrying")
                continue
            code = ErrorCode(res.error_code)
            if code is ErrorCode.none:
                self.seqs[p] = seq + len(values)
                wl.acked(p, res.base_offset, values, b)
                return res.base_offset
            w.trace(f"produce {label} seq {seq} to {b}: {error_name(code)}")
            if code in RETRIABLE:
                continue
            if code in RESET_SEQUENCES and self.tid is None:
                # KIP-360: the producer bumps its epoch; every sequence restarts at 0.
                self.epoch += 1
                self.seqs = {}
                seq = 0
                batch = self._batch(values, seq, ts)
                w.trace(f"producer {self.pid}: epoch bumped to {self.epoch}")
                continue
            return code

    def _expired(self, label: str, seq: int, *, attempted: bool) -> str:
        """delivery.timeout.ms passed with the batch unacknowledged. Sent at least once,
        it may be in the log: its sequence is unresolved, and with nothing else in
        flight (one batch at a time) the idempotent producer bumps its epoch
        (maybeResolveSequences); the transactional one's caller aborts and bumps."""
        w = self.wl.w
        w.trace(f"produce {label} seq {seq}: expired (delivery timeout)")
        if attempted and self.tid is None:
            self.epoch += 1
            self.seqs = {}
            w.trace(f"producer {self.pid}: unresolved sequence: epoch bumped to {self.epoch}")
        return EXPIRED


@dataclass
class Workload:
    """The idempotent or transactional workload of one run (see the module docstring)."""

    w: World
    kind: str
    txn_timeout_ms: int = 3000
    outcomes: dict[TxnKey, Outcome] = field(default_factory=dict)
    current: dict[str, TxnKey] = field(default_factory=dict)  # tid -> its transaction
    violations: list[Violation] = field(default_factory=list)
    consumers: list[Consumer] = field(default_factory=list)
    lso_monitor: StableOffsetMonitor = field(default_factory=StableOffsetMonitor)
    coordinator: SimTxnCoordinator | None = None
    background: list[asyncio.Task[None]] = field(default_factory=list)
    # Records acknowledged with DUPLICATE_SEQUENCE_NUMBER: (partition, value, when).
    unplaced: list[tuple[int, bytes, float]] = field(default_factory=list)

    def start(self) -> list[asyncio.Task[None]]:
        """Start the consumers (and the coordinator's timer); return the producers'
        tasks (the nemesis waits for them once it stops the workload)."""
        w = self.w
        loop = asyncio.get_running_loop()
        if self.kind not in WORKLOADS[1:]:
            raise ValueError(f"unknown workload {self.kind!r}; known: {', '.join(WORKLOADS)}")
        if self.kind == "transactional":
            if w.cfg.partitions < 2:
                raise ValueError("the transactional workload needs 2 or more partitions")
            self.coordinator = SimTxnCoordinator(w, self.txn_timeout_ms, self._decided)
            self.background.append(loop.create_task(self.coordinator.expire_loop()))
        for p in range(w.cfg.partitions):
            for rc in (True, False):
                c = Consumer(f"{'read_committed' if rc else 'read_uncommitted'}", p, rc)
                self.consumers.append(c)
                self.background.append(loop.create_task(self.consume(c)))
        make = self.txn_producer if self.kind == "transactional" else self.idempotent_producer
        return [loop.create_task(make(k)) for k in range(w.cfg.producers)]

    def _decided(self, tid: str, commit: bool) -> None:
        txn = self.current.get(tid)
        if txn is not None and txn not in self.outcomes:
            self.outcomes[txn] = (commit, self.w.now())
            self.w.trace(f"txn {tid} #{txn[1]}: {'COMMIT' if commit else 'ABORT'} decided")

    # ---------------------------------------------------------------- requests
    async def request(
        self, b: int, p: int, batch: bytes, prod: _Producer
    ) -> PartitionProduceResult | None:
        """``produce`` as the client sees it: with a request timeout, None once it passes
        (the client closes the connection; the request, on the wire or in the broker's
        socket, is still handled -- its answer reaches no one)."""
        timeout = self.w.cfg.request_timeout_s
        if timeout is None:
            return await self.produce(b, p, batch, prod)
        task = asyncio.get_running_loop().create_task(self.produce(b, p, batch, prod))
        done, _ = await asyncio.wait([task], timeout=timeout)
        if not done:
            self.w.trace(f"producer {prod.pid}: request to {b} timed out: connection closed")
            return None
        return task.result()

    async def produce(
        self, b: int, p: int, batch: bytes, prod: _Producer
    ) -> PartitionProduceResult | None:
        """One Produce to broker ``b`` (None: no answer). A transactional batch goes
        through KIP-890 verification first, as the broker's produce handler does."""
        w, h = self.w, self.w.h
        try:
            await w.net.hop(CLIENT, b)
        except EndpointError:
            return None
        if b in h.down:
            return None
        res = await self.serve(b, p, batch, prod)
        if res is None:
            return None
        try:
            await w.net.hop(b, CLIENT)
        except EndpointError:
            return None
        return res

    async def serve(
        self, b: int, p: int, batch: bytes, prod: _Producer | PipelinedProducer
    ) -> PartitionProduceResult | None:
        """Broker ``b`` handling a Produce that reached it (None: it crashed meanwhile)."""
        w, h = self.w, self.w.h
        inc = h.incarnation[b]
        guards = None
        res: PartitionProduceResult | None = None
        if prod.tid is not None and self.coordinator is not None:
            verifications = h.replicas[b].start_txn_verification(
                [((TOPIC, p), prod.pid, prod.epoch)]
            )
            if verifications:
                v = verifications[0]
                verifier = SimVerifier(w, b, self.coordinator)
                failed = await v.verify(verifier, prod.tid, w.cfg.produce_timeout_s)
                if h.incarnation[b] != inc or b in h.down:
                    return None
                guards = v.guards
                if (TOPIC, p) in failed:
                    res = PartitionProduceResult(p, int(failed[(TOPIC, p)]), -1)
        if res is None:
            res = await h.produce(
                b,
                batch,
                acks=w.cfg.acks if prod.tid is None else -1,
                timeout_s=w.cfg.produce_timeout_s,
                partition=p,
                verification_guards=guards,
            )
        if h.incarnation[b] != inc or b in h.down:
            return None
        return res

    async def _to_coordinator(self) -> bool:
        try:
            await self.w.net.hop(CLIENT, COORDINATOR)
        except EndpointError:
            return False
        return True

    def acked(self, p: int, base: int, values: list[bytes], b: int) -> None:
        w = self.w
        last = base + len(values) - 1
        holders = [r for r in w.cfg.brokers if w.leo(r, p) > last]
        if w.tracing:
            w.trace(f"ack {values[0].decode()} +{len(values) - 1} p{p} offset {base} from {b}")
        now = w.now()
        for i, v in enumerate(values):
            w.acks.append(Ack(p, base + i, v, now))
        if w.cfg.acks == -1 and len(holders) < w.cfg.min_insync_replicas:
            w.violations.append(
                Violation(
                    "ack-under-replicated",
                    f"p{p} offsets {base}-{last} acked by {b} at {now:.3f} with only "
                    f"{holders} holding them",
                )
            )

    # ---------------------------------------------------------------- producers
    async def idempotent_producer(self, k: int) -> None:
        w = self.w
        rng = random.Random(f"idempotent-{w.seed}-{k}")
        pid = random.Random(f"producer-id-{w.seed}-{k}").randrange(1000, 1 << 40)
        if w.cfg.in_flight > 1:
            return await self._pipelined_producer(k, pid, rng)
        prod = _Producer(self, k, None)
        prod.pid = pid
        prod.epoch = 0
        lo, hi = w.cfg.produce_gap_s
        n = 0
        while not w.stopping:
            await asyncio.sleep(rng.uniform(lo, hi))
            p = rng.randrange(w.cfg.partitions)
            values = [f"i{k}-{n + i}".encode() for i in range(rng.randint(1, 3))]
            n += len(values)
            r = await prod.send(p, values)
            if r == ABANDONED:
                return
            if isinstance(r, ErrorCode):
                self._expect(r, frozenset(), f"idempotent producer {k} on p{p}")
                return
            # EXPIRED: failed to the application, which goes on with the next records.

    async def _pipelined_producer(self, k: int, pid: int, rng: random.Random) -> None:
        """``in_flight`` > 1: the same records, drawn alike, sent without waiting for
        the previous batch's answer (odradek.sim.inflight)."""
        w = self.w
        prod = PipelinedProducer(
            self,
            k,
            pid,
            w.cfg.in_flight,
            client=CLIENT,
            backoff_s=RETRY_BACKOFF_S,
            acks_all=w.cfg.acks == -1,
        )
        lo, hi = w.cfg.produce_gap_s
        n = 0
        while not w.stopping and not prod.failed:
            await asyncio.sleep(rng.uniform(lo, hi))
            if w.stopping or prod.failed:
                break
            p = rng.randrange(w.cfg.partitions)
            values = [f"i{k}-{n + i}".encode() for i in range(rng.randint(1, 3))]
            n += len(values)
            prod.add(p, values, clock.time_ns() // 1_000_000)
        await prod.close()

    def acked_without_offset(self, p: int, values: list[bytes]) -> None:
        """DUPLICATE_SEQUENCE_NUMBER: acknowledged, at an offset the client never learns."""
        now = self.w.now()
        self.unplaced += [(p, v, now) for v in values]

    def unexpected(self, code: ErrorCode, what: str) -> None:
        self._expect(code, frozenset(), what)

    async def txn_producer(self, k: int) -> None:
        w = self.w
        assert self.coordinator is not None
        coord = self.coordinator
        rng = random.Random(f"transactional-{w.seed}-{k}")
        tid = f"tx-{k}"
        prod = _Producer(self, k, tid)
        lo, hi = w.cfg.produce_gap_s
        n = 0
        while not w.stopping:
            if prod.pid < 0 and not await self._init(prod):
                return
            await asyncio.sleep(rng.uniform(lo, hi))
            txn = (k, n)
            n += 1
            parts = sorted(rng.sample(range(w.cfg.partitions), rng.randint(2, w.cfg.partitions)))
            self.current[tid] = txn
            wanted = {(TOPIC, p) for p in parts}
            code = await self._until_settled(
                partial(coord.add_partitions, tid, prod.pid, prod.epoch, wanted)
            )
            if code is None:
                return
            if code is not ErrorCode.none:
                w.trace(f"txn {tid} #{txn[1]}: AddPartitionsToTxn {error_name(code)}")
                self._expect(code, _FENCED, f"{tid} AddPartitionsToTxn")
                prod.pid = -1
                continue
            status: ErrorCode = ErrorCode.none
            expired = False
            for i in range(rng.randint(2, 5)):
                await asyncio.sleep(rng.uniform(lo, hi))
                p = parts[i] if i < len(parts) else rng.choice(parts)
                values = [f"t{k}.{txn[1]}-{i}.{j}".encode() for j in range(rng.randint(1, 3))]
                r = await prod.send(p, values)
                if r == ABANDONED:
                    return  # the transaction stays open: the coordinator's timeout ends it
                if r == EXPIRED:
                    # Java: an abortable error with epochBumpRequired (the batch may be
                    # in the log, its sequence unresolved).
                    expired, status = True, ErrorCode.transaction_abortable
                    break
                if isinstance(r, ErrorCode):
                    status = r
                    break
            commit = status is ErrorCode.none and rng.random() < COMMIT_SHARE
            if expired:
                w.trace(f"txn {tid} #{txn[1]}: a batch expired: aborting, then a new epoch")
            elif status in (ErrorCode.invalid_txn_state, ErrorCode.transaction_abortable):
                w.trace(f"txn {tid} #{txn[1]}: {error_name(status)}: aborting")
            elif status is not ErrorCode.none:
                w.trace(f"txn {tid} #{txn[1]}: {error_name(status)}: initialising again")
                self._expect(status, _FENCED | RESET_SEQUENCES, f"{tid} Produce")
                prod.pid = -1
                continue
            if not await self._to_coordinator():
                prod.pid = -1
                continue
            code = coord.end_txn(tid, prod.pid, prod.epoch, commit)
            if code is not ErrorCode.none:
                w.trace(f"txn {tid} #{txn[1]}: EndTxn {error_name(code)}")
                self._expect(code, _FENCED, f"{tid} EndTxn")
                prod.pid = -1
            elif expired:
                prod.pid = -1  # InitProducerId bumps the epoch: the expired batch is fenced

    def _expect(self, code: ErrorCode, expected: frozenset[ErrorCode], what: str) -> None:
        """An error no fault explains (the client would report it to the application)."""
        bad = unexpected_error(what, code, expected, self.w.now())
        if bad is not None:
            self.violations.append(bad)

    async def _until_settled(self, call: Callable[[], ErrorCode]) -> ErrorCode | None:
        """A coordinator request, retried on CONCURRENT_TRANSACTIONS (the previous
        transaction's markers are being written). None: the workload stopped first."""
        while True:
            if not await self._to_coordinator():
                code = ErrorCode.network_exception
            else:
                code = call()
            if code is not ErrorCode.concurrent_transactions and code is not (
                ErrorCode.network_exception
            ):
                return code
            if self.w.stopping:
                return None
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _init(self, prod: _Producer) -> bool:
        """InitProducerId until it succeeds (False: the workload stopped first)."""
        assert self.coordinator is not None and prod.tid is not None
        coord, tid = self.coordinator, prod.tid
        got: list[int] = []

        def init() -> ErrorCode:
            code, pid, epoch = coord.init_producer_id(tid)
            got[:] = [pid, epoch]
            return code

        code = await self._until_settled(init)
        if code is not ErrorCode.none:
            return False
        prod.pid, prod.epoch = got
        prod.seqs = {}
        return True

    # ---------------------------------------------------------------- consumers
    async def consume(self, c: Consumer) -> None:
        w, h = self.w, self.w.h
        rng = random.Random(f"consumer-{w.seed}-{c.partition}-{c.name}")
        p = c.partition
        params = FetchParams(-1, 0.0, 1, 1 << 20, isolation_level=1 if c.read_committed else 0)
        while True:
            await asyncio.sleep(rng.uniform(0.05, 0.25))
            z = w.controller.znodes[p]
            b = z.leader
            if b < 0 or b in h.down:
                continue
            try:
                await w.net.hop(CLIENT, b)
            except EndpointError:
                continue
            if b in h.down:
                continue
            e = FetchEntry(
                TOPIC, c.position, 1 << 20, z.leader_epoch, -1,
                PartitionFetchResult(p, 0, -1, -1, -1, None),
            )  # fmt: skip
            h.replicas[b].fetch_messages(params, [(TOPIC, [e])], h.images[b])
            res = e.result  # max_wait 0: answered at once
            read_at = w.now()
            if not res.error_code:
                # Observed as the leader serves it: answers to the two consumers may
                # arrive in another order than they were served (seed 228).
                v = self.lso_monitor.observe(p, z.leader_epoch, b, res.last_stable_offset, read_at)
                if v is not None:
                    self.violations.append(v)
            buf = b""
            if res.records is not None:
                buf = res.records if isinstance(res.records, bytes) else res.records.read_bytes()
            try:
                await w.net.hop(b, CLIENT)
            except EndpointError:
                continue
            bad = fetch_error(c.name, p, res.error_code, c.position, b, read_at)
            if bad is not None:
                self.violations.append(bad)
                return
            if res.error_code or not buf:
                continue
            records, nxt = consume_records(
                read_batches(bytes(buf)),
                c.position,
                read_committed=c.read_committed,
                aborted=res.aborted_transactions,
            )
            self.violations += fetch_violations(
                c.name,
                p,
                records,
                read_committed=c.read_committed,
                high_watermark=res.high_watermark,
                last_stable_offset=res.last_stable_offset,
                at=read_at,
                txn_of=txn_of,
                outcomes=self.outcomes,
            )
            c.seen += records
            c.position = nxt

    # ---------------------------------------------------------------- the end
    def settled(self) -> bool:
        """Every transaction ended and every consumer read to its leader's log end."""
        if self.coordinator is not None and not self.coordinator.settled():
            return False
        w = self.w
        for c in self.consumers:
            b = w.controller.znodes[c.partition].leader
            if b < 0 or c.position != w.leo(b, c.partition):
                return False
        return True

    def state(self) -> str:
        out = [f"{c.name} p{c.partition} at {c.position}" for c in self.consumers]
        if self.coordinator is not None:
            out.append(self.coordinator.state())
        return "; ".join(out)

    def final_checks(self, committed: dict[int, dict[int, bytes]]) -> list[Violation]:
        """``committed``: partition -> broker -> that replica's committed log."""
        out = list(self.violations)
        w = self.w
        for p, logs in sorted(committed.items()):
            leader = w.controller.znodes[p].leader
            for b, buf in sorted(logs.items()):
                replica = read_batches(buf)
                out += duplicates_and_gaps(p, b, replica)
                out += reordered(p, b, replica, send_order)
            source = leader if leader in logs else max(logs, key=lambda b: len(logs[b]))
            batches = read_batches(logs[source])
            if self.kind == "transactional":
                out += transaction_outcomes(p, batches, txn_of, self.outcomes)
            data = [r for bt in batches for r in bt.records]
            if w.cfg.acks == -1:
                unplaced = [(v, at) for q, v, at in self.unplaced if q == p]
                out += unplaced_lost(p, unplaced, (v for _, v in data))
            committed_only = [r for r in data if self._committed(r[1])]
            for c in self.consumers:
                if c.partition == p:
                    want = committed_only if c.read_committed else data
                    out += stream_violations(c.name, p, c.seen, want)
        return out

    def _committed(self, value: bytes) -> bool:
        key = txn_of(value)
        if key is None:
            return True
        decided = self.outcomes.get(key)
        return decided is not None and decided[0]
