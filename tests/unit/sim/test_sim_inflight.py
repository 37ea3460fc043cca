"""The pipelined idempotent producer's connection (odradek.sim.inflight.Connection): over
SimNetwork, whose messages between two nodes overtake each other (each its own seeded
latency), requests still reach the broker, are served one at a time, and are answered in
the order sent, as on a Kafka connection; a lost message breaks the connection and
leaves every request still unanswered on it without an answer."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from odradek.errors import ErrorCode
from odradek.protocol.produce_response import PartitionProduceResult
from odradek.sim.inflight import Connection, PipelinedProducer
from odradek.sim.loop import SimLoop
from odradek.sim.world import SimNetwork
from support.sim_stubs import BROKER, CLIENT, StubWorld


@dataclass
class _Sink:
    """A broker that takes 5 ms per request and notes what it served when."""

    w: StubWorld
    served: list[bytes] = field(default_factory=list)
    busy: bool = False

    async def serve(
        self, b: int, p: int, batch: bytes, prod: PipelinedProducer
    ) -> PartitionProduceResult | None:
        assert not self.busy, "two requests of one connection served at once"
        self.busy = True
        await asyncio.sleep(0.005)
        self.busy = False
        self.served.append(batch)
        return PartitionProduceResult(p, int(ErrorCode.none), len(self.served) - 1)


def _run(latency: tuple[float, float], loss: float) -> tuple[list[bytes], list[bytes | None]]:
    loop = SimLoop(7)
    net = SimNetwork(random.Random(7), latency)
    net.loss[frozenset((CLIENT, BROKER))] = loss
    sink = _Sink(StubWorld(net))
    conn = Connection(sink, BROKER, None, CLIENT)  # type: ignore[arg-type]
    answered: list[bytes | None] = []

    async def main() -> None:
        tasks = []
        for i in range(8):
            batch = f"b{i}".encode()
            t = conn.send(0, batch)
            t.add_done_callback(
                lambda t, batch=batch: answered.append(None if t.result() is None else batch)
            )
            tasks.append(t)
            await asyncio.sleep(0.0005)  # sent faster than the latency's spread
        await asyncio.gather(*tasks)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return sink.served, answered


def test_requests_are_served_and_answered_in_the_order_sent() -> None:
    # Latencies of 0-20 ms, requests 0.5 ms apart: raw hops overtake each other.
    served, answered = _run((0.0, 0.02), 0.0)
    sent = [f"b{i}".encode() for i in range(8)]
    assert served == sent
    assert answered == sent


def test_a_lost_message_leaves_the_rest_of_the_connection_unanswered() -> None:
    served, answered = _run((0.0, 0.02), 0.3)
    assert None in answered
    first_lost = answered.index(None)
    assert answered[first_lost:] == [None] * (8 - first_lost)
    assert served == [f"b{i}".encode() for i in range(len(served))]  # a prefix, in order
