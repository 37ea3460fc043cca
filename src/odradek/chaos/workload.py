"""Workload and history (issue 6 item 2): what clients did and saw, as Parquet.

Every record value is ``<scenario>:<seq>:`` padded to the record size, so a record read
back (by a consumer or from a replica's segment files) names the send it came from.

Tables written per scenario directory (one row per event; ``ts`` = Unix seconds):

* ``producer.parquet`` -- scenario, seq, kind (send | ack | error), ts, partition,
  offset, error.  A seq may get several errors (retries) but at most one ack.
* ``reads.parquet``    -- scenario, phase (live | final), partition, offset, seq, ts.
* ``events.parquet``   -- scenario, ts, kind (fault | heal | phase | state |
  controller | note), detail, partition, leader, epoch, isr.
* ``replicas.parquet`` -- scenario, broker, partition, offset, seq, epoch, hw, leo:
  every record in each replica's segment files (read with ``odradek.storage``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

LIBRDKAFKA_LOGGER = "odradek.librdkafka"


def client_logging() -> dict[str, Any]:
    """librdkafka's logging for the workload's clients: through the Python logger that
    ``odradek chaos`` points at RUN_DIR/librdkafka.log (everything kept there); without
    that file, critical lines only, since faults make librdkafka chatty and the history
    has the errors anyway."""
    lg = logging.getLogger(LIBRDKAFKA_LOGGER)
    if lg.handlers:
        return {"logger": lg}
    return {"logger": lg, "log_level": 2}


__all__ = [
    "History",
    "ProducerWorkload",
    "LiveConsumer",
    "MetadataPoller",
    "encode_value",
    "decode_seq",
    "final_read",
    "dump_replicas",
    "PRODUCER_SCHEMA",
    "READS_SCHEMA",
    "EVENTS_SCHEMA",
    "REPLICAS_SCHEMA",
]

PRODUCER_SCHEMA = pa.schema(
    [
        ("scenario", pa.string()),
        ("seq", pa.int64()),
        ("kind", pa.string()),
        ("ts", pa.float64()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("error", pa.string()),
    ]
)
READS_SCHEMA = pa.schema(
    [
        ("scenario", pa.string()),
        ("phase", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("seq", pa.int64()),
        ("ts", pa.float64()),
    ]
)
EVENTS_SCHEMA = pa.schema(
    [
        ("scenario", pa.string()),
        ("ts", pa.float64()),
        ("kind", pa.string()),
        ("detail", pa.string()),
        ("partition", pa.int32()),
        ("leader", pa.int32()),
        ("epoch", pa.int32()),
        ("isr", pa.string()),
    ]
)
REPLICAS_SCHEMA = pa.schema(
    [
        ("scenario", pa.string()),
        ("broker", pa.int32()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("seq", pa.int64()),
        ("epoch", pa.int32()),
        ("hw", pa.int64()),
        ("leo", pa.int64()),
    ]
)


def encode_value(scenario: str, seq: int, size: int) -> bytes:
    head = f"{scenario}:{seq}:".encode()
    return head + b"x" * max(0, size - len(head))


def decode_seq(value: bytes | None) -> int:
    """The seq in a record value; -1 for a value this workload did not write."""
    if not value:
        return -1
    parts = value.split(b":", 2)
    try:
        return int(parts[1]) if len(parts) >= 3 else -1
    except ValueError:
        return -1


@dataclass
class History:
    """Append-only, thread-safe event lists of one scenario, written once as Parquet."""

    scenario: str
    producer: list[tuple[Any, ...]] = field(default_factory=list)
    reads: list[tuple[Any, ...]] = field(default_factory=list)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    replicas: list[tuple[Any, ...]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def event(
        self,
        kind: str,
        detail: str = "",
        *,
        partition: int | None = None,
        leader: int | None = None,
        epoch: int | None = None,
        isr: str | None = None,
        ts: float | None = None,
    ) -> None:
        with self.lock:
            self.events.append(
                (self.scenario, ts or time.time(), kind, detail, partition, leader, epoch, isr)
            )

    def phase(self, name: str) -> None:
        """Start a named phase (the checker splits acks/errors/latency by phase)."""
        self.event("phase", name)

    def events_of(self, kind: str) -> list[tuple[Any, ...]]:
        with self.lock:
            return [e for e in self.events if e[2] == kind]

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        with self.lock:
            tables = {
                "producer": (self.producer, PRODUCER_SCHEMA),
                "reads": (self.reads, READS_SCHEMA),
                "events": (self.events, EVENTS_SCHEMA),
                "replicas": (self.replicas, REPLICAS_SCHEMA),
            }
            for name, (rows, schema) in tables.items():
                cols = list(zip(*rows)) if rows else [[] for _ in schema.names]
                t = pa.table(
                    {
                        n: pa.array(list(c), type=schema.field(n).type)
                        for n, c in zip(schema.names, cols)
                    },
                    schema=schema,
                )
                pq.write_table(t, directory / f"{name}.parquet")


class ProducerWorkload:
    """A confluent-kafka producer in its own thread sending ``rate`` records/s of ``size``
    bytes; every send, ack (partition, offset) and error is recorded with a timestamp."""

    def __init__(
        self,
        history: History,
        bootstrap: str,
        topic: str,
        *,
        acks: str,
        idempotence: bool = False,
        rate: float = 200.0,
        size: int = 100,
        extra: dict[str, Any] | None = None,
        partitions: int = 1,
    ) -> None:
        from confluent_kafka import Producer

        self.h = history
        self.topic = topic
        # seq i goes to partition i % partitions: each partition's seqs still increase,
        # so the checker's per-partition out-of-order test applies (nemesis, REQ-R19).
        self.partitions = max(1, partitions)
        self.rate = rate
        self.size = size
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": idempotence,
            "linger.ms": 5,
            "message.timeout.ms": 10000,
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 500,
            "socket.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 60000,
            **client_logging(),
        }
        conf.update(extra or {})
        self._p = Producer(conf)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)
        self.sent = 0
        self.acked = 0
        self.failed = 0

    def _cb(self, err: Any, msg: Any) -> None:
        seq = decode_seq(msg.value())
        now = time.time()
        with self.h.lock:
            if err is not None:
                self.failed += 1
                self.h.producer.append(
                    (self.h.scenario, seq, "error", now, msg.partition(), None, err.name())
                )
            else:
                self.acked += 1
                self.h.producer.append(
                    (self.h.scenario, seq, "ack", now, msg.partition(), msg.offset(), None)
                )

    def _run(self) -> None:
        start = time.monotonic()
        seq = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * self.rate) + 1
            while seq < due and not self._stop.is_set():
                v = encode_value(self.h.scenario, seq, self.size)
                part = seq % self.partitions
                try:
                    self._p.produce(self.topic, value=v, partition=part, on_delivery=self._cb)
                except BufferError:
                    break  # the local queue is full (leader unavailable): retry later
                with self.h.lock:
                    self.h.producer.append(
                        (self.h.scenario, seq, "send", time.time(), part, None, None)
                    )
                seq += 1
                self.sent = seq
            self._p.poll(0.005)
        # Every outstanding record resolves: acked, or failed at message.timeout.ms.
        self._p.flush(30)

    def start(self) -> ProducerWorkload:
        self._t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._t.join(60)

    def acked_since(self, ts: float) -> int:
        with self.h.lock:
            return sum(1 for r in self.h.producer if r[2] == "ack" and r[3] >= ts)

    def errors_since(self, ts: float, names: Iterable[str] | None = None) -> int:
        wanted = set(names) if names is not None else None
        with self.h.lock:
            return sum(
                1
                for r in self.h.producer
                if r[2] == "error" and r[3] >= ts and (wanted is None or r[6] in wanted)
            )


class LiveConsumer:
    """Reads partitions 0..partitions-1 from the start while the scenario runs (reads
    below the HW)."""

    def __init__(
        self,
        history: History,
        bootstrap: str,
        topic: str,
        partitions: int = 1,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.h = history
        self._c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"chaos-{topic}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "socket.timeout.ms": 5000,
                "session.timeout.ms": 10000,
                **client_logging(),
                **(extra or {}),
            }
        )
        self._c.assign([TopicPartition(topic, p, 0) for p in range(max(1, partitions))])
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name=f"consumer-{topic}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(500, 0.2):
                if m.error() is not None:
                    continue
                now = time.time()
                with self.h.lock:
                    self.h.reads.append(
                        (
                            self.h.scenario,
                            "live",
                            m.partition(),
                            m.offset(),
                            decode_seq(m.value()),
                            now,
                        )
                    )
        self._c.close()

    def start(self) -> LiveConsumer:
        self._t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._t.join(30)


class MetadataPoller:
    """Records every change of the partition state znode (leader, epoch, ISR) and of
    ``/controller``, polled from the cluster manager's own ZooKeeper session (127.0.0.1,
    outside the fault rules)."""

    def __init__(
        self, history: History, cluster: Any, topic: str, partitions: int = 1, interval: float = 0.1
    ) -> None:
        self.h = history
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.interval = interval
        self.state: dict[int, tuple[int, int, list[int]]] = {}
        self.controller: int | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name=f"meta-{topic}", daemon=True)

    def poll_once(self) -> None:
        zk = self.cluster.zk_client()
        for p in range(self.partitions):
            try:
                data, _ = zk.get(f"/brokers/topics/{self.topic}/partitions/{p}/state")
            except Exception:
                continue
            st = json.loads(data)
            cur = (int(st["leader"]), int(st["leader_epoch"]), [int(b) for b in st["isr"]])
            if self.state.get(p) != cur:
                self.state[p] = cur
                self.h.event(
                    "state",
                    f"leader={cur[0]} epoch={cur[1]} isr={cur[2]}",
                    partition=p,
                    leader=cur[0],
                    epoch=cur[1],
                    isr=json.dumps(cur[2]),
                )
        ctl = self.cluster.controller_id()
        if ctl != self.controller:
            self.controller = ctl
            self.h.event("controller", f"controller={ctl}", leader=ctl)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception as e:  # the manager's session may blip; keep polling
                self.h.event("note", f"metadata poll failed: {e!r}")
            self._stop.wait(self.interval)

    def start(self) -> MetadataPoller:
        self.poll_once()
        self._t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._t.join(10)


def _high_watermark(c: Any, tp: Any, deadline: float) -> int:
    """The partition's HW, asked again until ``deadline`` while the answer is an error:
    a leader elected moments ago answers OFFSET_NOT_AVAILABLE until its HW has caught up
    with its epoch's start (KIP-207), and librdkafka hands that error to the caller."""
    from confluent_kafka import KafkaException

    while True:
        try:
            return int(c.get_watermark_offsets(tp, timeout=10)[1])
        except KafkaException:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)  # a retry backoff, as a client's retry.backoff.ms


def final_read(
    history: History,
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    timeout: float = 30.0,
    extra: Mapping[str, Any] | None = None,
) -> dict[int, int]:
    """Read every partition from offset 0 to its HW after the faults healed; returns the
    high watermarks. ``extra``: client properties (a secured cluster's TLS/SASL)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-final-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **client_logging(),
            **(extra or {}),
        }
    )
    try:
        deadline = time.monotonic() + timeout
        ends = {
            p: _high_watermark(c, TopicPartition(topic, p), deadline) for p in range(partitions)
        }
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        pos = {p: 0 for p in range(partitions)}
        while any(pos[p] < ends[p] for p in pos) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is not None:
                    continue
                pos[m.partition()] = m.offset() + 1
                with history.lock:
                    history.reads.append(
                        (
                            history.scenario,
                            "final",
                            m.partition(),
                            m.offset(),
                            decode_seq(m.value()),
                            time.time(),
                        )
                    )
        if any(pos[p] < ends[p] for p in pos):
            history.event("note", f"final read incomplete: at {pos}, HW {ends}")
        return ends
    finally:
        c.close()


def dump_replicas(history: History, cluster: Any, topic: str, partitions: int = 1) -> None:
    """Every record of every replica's segment files, with the replica's checkpointed HW
    (``replication-offset-checkpoint``) -- read from disk with ``odradek.storage`` after
    the brokers stopped, so the checker can compare replicas below their HW."""
    from odradek.storage.batch import scan_batches
    from odradek.storage.checkpoint import read_checkpoint
    from odradek.storage.records import decode_batch_records

    for b in cluster.brokers:
        log_dir = Path(b.log_dir)
        try:
            hws = read_checkpoint(log_dir / "replication-offset-checkpoint")
        except Exception:
            hws = {}
        for p in range(partitions):
            d = log_dir / f"{topic}-{p}"
            if not d.is_dir():
                continue
            data = b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))
            scan = scan_batches(data, verify_crc=True)
            leo = scan.batches[-1].last_offset + 1 if scan.batches else 0
            hw = min(hws.get((topic, p), 0), leo)
            rows = []
            for h in scan.batches:
                for r in decode_batch_records(data[h.position : h.position + h.size]):
                    rows.append(
                        (
                            history.scenario,
                            b.id,
                            p,
                            r.offset,
                            decode_seq(r.value),
                            h.partition_leader_epoch,
                            hw,
                            leo,
                        )
                    )
            with history.lock:
                history.replicas.extend(rows)


def wind_down(faults: Any, producer: Any, consumer: Any) -> None:
    """End of a run's fault phase: heal every fault, stop the workload's clients."""
    faults.heal_all()
    if producer is not None:
        producer.stop()
    if consumer is not None:
        consumer.stop()


def restart_stopped_brokers(cluster: Any, timeout_s: float = 30) -> None:
    """Bring back every broker a run left killed or stopped, so all replicas can rejoin
    (and truncate) before the final read."""
    for b in cluster.brokers:
        if cluster.broker_state(b.id) != "running":
            cluster.start_broker(b.id, timeout_s)
