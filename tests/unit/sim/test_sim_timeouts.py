"""Client request and delivery timeouts in the simulator (odradek.sim.inflight, "Timeouts";
the ``pause-timeouts`` profile): a request unanswered within the request timeout fails
with every other one unanswered on its connection, which the client closes, while the
broker still handles what was sent; a timed-out batch is retried with its sequence; a
batch expired with its outcome unknown makes the idempotent producer bump its epoch."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field, replace

from odradek.errors import ErrorCode
from odradek.protocol.produce_response import PartitionProduceResult
from odradek.sim.inflight import Connection, PipelinedProducer
from odradek.sim.loop import SimLoop
from odradek.sim.runner import run_seed
from odradek.sim.schedule import FaultSpec, Step
from odradek.sim.world import SimNetwork, WorldConfig
from support.sim_stubs import BROKER, CLIENT, StubWorld

IDEMPOTENT = replace(WorldConfig(), workload="idempotent")


@dataclass
class _SlowBroker:
    """Takes ``busy_until`` - now to handle what reaches it before then (a paused
    broker's socket), 5 ms otherwise; notes what it handled and when."""

    w: StubWorld
    busy_until: float
    served: list[tuple[float, bytes]] = field(default_factory=list)

    async def serve(
        self, b: int, p: int, batch: bytes, prod: PipelinedProducer
    ) -> PartitionProduceResult | None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(self.busy_until - loop.time(), 0.005))
        self.served.append((loop.time(), batch))
        return PartitionProduceResult(p, int(ErrorCode.none), len(self.served) - 1)


def test_a_request_timeout_closes_the_connection_and_fails_every_request_on_it() -> None:
    """Three requests to a broker that answers nothing for 3 s; the request timeout is
    1 s: at 1 s the first times out, the connection closes and all three fail at once
    (Java's NetworkClient fails every in-flight request of the node it disconnects); the
    broker still handles all three, in order, once it runs again, answering no one; the
    next request goes on a new connection and is answered."""
    loop = SimLoop(3)
    sink = _SlowBroker(StubWorld(SimNetwork(random.Random(3), (0.001, 0.002))), busy_until=3.0)
    conn = Connection(sink, BROKER, None, CLIENT, timeout_s=1.0)  # type: ignore[arg-type]
    failed_at: list[tuple[float, object]] = []

    async def main() -> None:
        sent = []
        for i in range(3):
            a = conn.send(0, f"b{i}".encode())
            a.add_done_callback(lambda a: failed_at.append((loop.time(), a.result())))
            sent.append(a)
            await asyncio.sleep(0.1)
        await asyncio.gather(*sent)
        assert not conn.usable()
        fresh = Connection(sink, BROKER, None, CLIENT, timeout_s=1.0)  # type: ignore[arg-type]
        assert fresh.usable()
        await asyncio.sleep(3.0)  # the broker runs again meanwhile
        res = await fresh.send(0, b"b3")
        assert res is not None and res.error_code == 0

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [r for _, r in failed_at] == [None, None, None]
    assert {round(t, 3) for t, _ in failed_at} == {1.0}  # the first one's timeout, all
    assert [b for _, b in sink.served] == [b"b0", b"b1", b"b2", b"b3"]
    assert all(t >= 3.0 for t, _ in sink.served[:3])
    assert any("timed out: connection closed, 3 request(s) failed" in x for x in sink.w.lines)


def test_without_a_request_timeout_a_request_waits_for_its_answer() -> None:
    loop = SimLoop(3)
    sink = _SlowBroker(StubWorld(SimNetwork(random.Random(3), (0.001, 0.002))), busy_until=3.0)
    conn = Connection(sink, BROKER, None, CLIENT)  # type: ignore[arg-type]

    async def main() -> PartitionProduceResult | None:
        return await conn.send(0, b"b0")

    try:
        res = loop.run_until_complete(main())
    finally:
        loop.close()
    assert res is not None and res.error_code == 0
    assert conn.usable()


def _after(timeline: list[str], start: str) -> list[str]:
    i = next(k for k, line in enumerate(timeline) if start in line)
    return timeline[i + 1 :]


def test_a_timed_out_batch_is_retried_with_its_sequence_and_written_once() -> None:
    """Leader 1 paused 1.3 s (its session lives): the producers' requests time out 1 s
    in, each connection is closed and its batches retried -- same bytes, same sequence --
    to 1 again, where they wait behind the originals. On resume 1 writes the originals
    (answering no one) and finds each retry a duplicate of its last five: the retry is
    acknowledged at the original's offset, and the record is in the log once."""
    plan = [Step(2.0, fault=FaultSpec(0, "pause", 0, 1, 1, 1.3)), Step(6.0)]
    r = run_seed(1, profile="pause-timeouts", plan=plan, cfg=IDEMPOTENT)
    assert r.ok, r.violations
    after = _after(r.timeline, "nemesis: pause broker 1")
    timed_out = [x for x in after if "request to 1 timed out" in x]
    assert len(timed_out) == 2, timed_out  # one connection per producer
    assert all(3.02 < float(x.split()[0]) < 3.05 for x in timed_out), timed_out
    # i1-42 (seq 42) was among the first producer's failed requests, retried, and
    # acknowledged once, at the offset its original got on resume.
    assert "    3.030 produce i1-42 seq 42 to 1: no answer, retrying" in r.timeline
    acks = [x for x in r.timeline if " ack i1-42 " in x]
    assert acks == ["    3.339 ack i1-42 +2 p0 offset 97 from 1"], acks


def test_a_batch_expired_with_its_outcome_unknown_bumps_the_epoch() -> None:
    """Broker 3 crashes, then leader 1 is paused 2.9 s: the requests time out, the
    retries go to 1 (still leader) and time out too, then to 2, elected alone in the ISR
    (NOT_ENOUGH_REPLICAS). Each batch expires 3 s after it was produced, its outcome
    unknown: its sequence is unresolved, so no new batch of the partition is sent; a
    later batch refused as OUT_OF_ORDER_SEQUENCE_NUMBER fails with it. Once none is
    unfinished, the last sequence given out was not acknowledged: the producer bumps its
    epoch, and its next batches start from sequence 0 under epoch 1 and are acknowledged.
    No expired record counts as lost; the log stays gap-free and duplicate-free."""
    plan = [
        Step(1.9, fault=FaultSpec(0, "crash", 0, 3, 1)),
        Step(0.1, fault=FaultSpec(1, "pause", 0, 1, 1, 2.9)),
        Step(6.0),
    ]
    r = run_seed(1, profile="pause-timeouts", plan=plan, cfg=IDEMPOTENT)
    assert r.ok, r.violations
    after = _after(r.timeline, "nemesis: pause broker 1")
    i1 = [x.split(maxsplit=1)[1] for x in after if "i1-40 " in x or "505717519925" in x]
    assert i1[:3] == [
        "producer 505717519925: request to 1 timed out: connection closed, 5 request(s) failed",
        "produce i1-40 seq 40 to 1: no answer, retrying",
        "producer 505717519925: request to 1 timed out: connection closed, 1 request(s) failed",
    ], i1
    assert "produce i1-40 seq 40 to 2: NOT_ENOUGH_REPLICAS" in i1  # the same sequence
    expired = i1.index("produce i1-40 seq 40: expired (delivery timeout)")
    bump = i1.index("producer 505717519925 p0: unresolved sequence: bumping the epoch")
    assert expired < bump
    assert i1[bump + 1] == "producer 505717519925: epoch bumped to 1"
    assert "produce i0-62 seq 62: failed (a sequence is unresolved)" in " ".join(after)
    # Nothing of the expired batches is acknowledged; the next batches are (and the
    # run's sequence-gap check holds: epoch 1's sequences start from 0).
    assert not any(" ack i1-40 " in x or " ack i0-54 " in x for x in r.timeline)
    bumped = _after(r.timeline, "producer 224111778424: epoch bumped to 1")
    assert any(" ack i1-51 " in x for x in bumped[:10]), bumped[:10]


def test_a_transactional_batch_expired_aborts_the_transaction_and_bumps_the_epoch() -> None:
    """The same faults under the transactional workload: tx-0's batch on p0 times out
    (its partition leader's acks wait for crashed broker 3), is retried with its sequence,
    and expires 3 s after it was produced. As Java's abortable error with
    ``epochBumpRequired``: EndTxn ABORT (the transaction is never committed with a batch
    of unknown outcome), then InitProducerId, which bumps the epoch, so the expired
    batch would be fenced wherever it lands late; the next transaction commits."""
    plan = [
        Step(1.9, fault=FaultSpec(0, "crash", 0, 3, 1)),
        Step(0.1, fault=FaultSpec(1, "pause", 0, 1, 1, 2.9)),
        Step(6.0),
    ]
    cfg = replace(WorldConfig(), workload="transactional", partitions=2)
    r = run_seed(1, profile="pause-timeouts", plan=plan, cfg=cfg)
    assert r.ok, r.violations
    tx0 = [
        x.split(maxsplit=1)[1]
        for x in _after(r.timeline, "nemesis: pause broker 1")
        if "tx-0" in x or "t0.4-1.0" in x or "producer 595059073328:" in x
    ]
    assert tx0[:3] == [
        "producer 595059073328: request to 2 timed out: connection closed",
        "produce t0.4-1.0 seq 10 to 2: no answer, retrying",
        "produce t0.4-1.0 seq 10 to 2: NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    ], tx0[:3]
    expired = tx0.index("produce t0.4-1.0 seq 10: expired (delivery timeout)")
    assert tx0[expired + 1 : expired + 4] == [
        "txn tx-0 #4: a batch expired: aborting, then a new epoch",
        "coordinator: tx-0 producer 595059073328 epoch 0 PrepareAbort [0, 1]",
        "txn tx-0 #4: ABORT decided",
    ], tx0[expired:]
    rest = tx0[expired + 4 :]
    assert "coordinator: tx-0 producer 595059073328 epoch 1 Empty []" in rest, rest
    assert "txn tx-0 #5: COMMIT decided" in rest, rest


def test_a_pause_timeouts_run_replays_to_the_same_digest() -> None:
    a = run_seed(2, profile="pause-timeouts", cfg=IDEMPOTENT)
    assert a.ok, a.violations
    assert any("timed out: connection closed" in line for line in a.timeline)
    assert run_seed(2, profile="pause-timeouts", cfg=IDEMPOTENT).digest == a.digest


def test_a_fixed_pause_timeouts_seed_range_holds_every_invariant() -> None:
    """CI's range of the profile (docs/faults.md, "Client request timeouts", for the
    ranges run by hand)."""
    txn = replace(WorldConfig(), workload="transactional", partitions=2)
    failed = {}
    for cfg, seeds in ((IDEMPOTENT, range(1, 4)), (replace(IDEMPOTENT, acks=1), (1,)), (txn, (1,))):
        for seed in seeds:
            r = run_seed(seed, profile="pause-timeouts", cfg=cfg, timeline=False)
            if not r.ok:
                failed[(cfg.workload, cfg.acks, seed)] = [str(v) for v in r.violations[:3]]
    assert failed == {}
