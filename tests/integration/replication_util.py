"""Helpers for replication tests: produce with a real client, read replicas from disk.

``create_topic`` and ``wait_for`` are tests.support's, re-exported: most replication
modules import them from here with the helpers below."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.support.polling import wait_for
from tests.support.topics import create_topic as create_topic

from odradek.cluster.local import LocalCluster
from odradek.storage.batch import scan_batches


def partition_meta(bootstrap: str, topic: str,
                   security: dict[str, str] | None = None) -> dict[int, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **(security or {})})
    md = admin.list_topics(topic, timeout=10)
    return dict(md.topics[topic].partitions)


def produce(bootstrap: str, topic: str, values: list[bytes], *, acks: str = "all",
            partition: int | None = None, extra: dict[str, Any] | None = None,
            timeout: float = 60) -> tuple[dict[bytes, tuple[int, int]], list[str]]:
    """Produce; returns ({value: (partition, offset)} for acknowledged records, errors)."""
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err.name() if hasattr(err, "name") else str(err))
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())

    conf = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
            "enable.idempotence": False, "message.timeout.ms": int(timeout * 1000) - 1000}
    conf.update(extra or {})
    p = Producer(conf)
    for v in values:
        kw = {"partition": partition} if partition is not None else {}
        while True:
            try:
                p.produce(topic, key=v[-8:], value=v, on_delivery=cb, **kw)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(timeout)
    return acked, errors


def consume_all(bootstrap: str, topic: str, partitions: list[int],
                timeout: float = 30, security: dict[str, str] | None = None,
                ) -> dict[int, list[tuple[int, bytes]]]:
    """Read every partition from offset 0 up to its current end (HW)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "replication-test",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  **(security or {})})
    ends = {}
    for p in partitions:
        # A broker that just came back may answer from stale metadata (NOT_LEADER) until
        # it has caught up with ZooKeeper: retry like a client would.
        def hw(p: int = p) -> int | None:
            try:
                return c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            except Exception:
                return None
        ends[p] = wait_for(lambda: (lambda v: (v,) if v is not None else None)(hw()),
                           30, f"the high watermark of {topic}-{p}")[0]
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    done = {p for p in partitions if ends[p] == 0}
    deadline = time.monotonic() + timeout
    while len(done) < len(partitions) and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is not None:
                if m.error().code() == -191:  # _PARTITION_EOF
                    if m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                continue
            out[m.partition()].append((m.offset(), m.value()))
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
    c.close()
    return out


def replica_log_bytes(cluster: LocalCluster, broker_id: int, topic: str, partition: int,
                      upto_offset: int | None = None) -> bytes:
    """A replica's batches (concatenated segment files), optionally only below an offset."""
    d = Path(cluster.broker(broker_id).log_dir) / f"{topic}-{partition}"
    data = b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))
    if upto_offset is None:
        return data
    scan = scan_batches(data, verify_crc=True)
    end = 0
    for h in scan.batches:
        if h.last_offset >= upto_offset:
            break
        end = h.position + h.size
    return data[:end]


def replica_leo(cluster: LocalCluster, broker_id: int, topic: str, partition: int) -> int:
    data = replica_log_bytes(cluster, broker_id, topic, partition)
    scan = scan_batches(data, verify_crc=True)
    return scan.batches[-1].last_offset + 1 if scan.batches else 0
