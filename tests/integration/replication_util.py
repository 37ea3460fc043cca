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


def partition_meta(
    bootstrap: str, topic: str, security: dict[str, str] | None = None
) -> dict[int, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **(security or {})})
    md = admin.list_topics(topic, timeout=10)
    return dict(md.topics[topic].partitions)


def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    *,
    acks: str = "all",
    partition: int | None = None,
    extra: dict[str, Any] | None = None,
    timeout: float = 60,
) -> tuple[dict[bytes, tuple[int, int]], list[str]]:
    """Produce; returns ({value: (partition, offset)} for acknowledged records, errors)."""
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err.name() if hasattr(err, "name") else str(err))
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())

    conf = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": 5,
        "enable.idempotence": False,
        "message.timeout.ms": int(timeout * 1000) - 1000,
    }
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


def consume_all(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    timeout: float = 30,
    security: dict[str, str] | None = None,
) -> dict[int, list[tuple[int, bytes]]]:
    """Read every partition from offset 0 up to its current end (HW).

    Never returns a short read silently: if a partition has not reached the end it was
    given within ``timeout``, or the consumer's position jumps past records it did not
    return (an offset reset), this raises with the consumer's own log of where it
    fetched from -- a short read-back is a possible loss until the log explains it."""
    log = _ClientLog()
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replication-test",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "logger": log.logger,
            "debug": "metadata,topic,fetch",
            **(security or {}),
        }
    )
    ends = {}
    for p in partitions:
        # A broker that just came back may answer from stale metadata (NOT_LEADER) until
        # it has caught up with ZooKeeper: retry like a client would.
        def hw(p: int = p) -> int | None:
            try:
                return c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            except Exception:
                return None

        ends[p] = wait_for(
            lambda: (lambda v: (v,) if v is not None else None)(hw()),
            30,
            f"the high watermark of {topic}-{p}",
        )[0]
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    done = {p for p in partitions if ends[p] == 0}
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(done) < len(partitions) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is not None:
                    if m.error().code() == -191:  # _PARTITION_EOF
                        if m.offset() >= ends[m.partition()]:
                            done.add(m.partition())
                    else:
                        errors.append(f"{m.partition()}@{m.offset()}: {m.error()}")
                    continue
                out[m.partition()].append((m.offset(), m.value()))
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
    finally:
        c.close()
    short = {p: (out[p][-1][0] + 1 if out[p] else 0, ends[p]) for p in partitions if p not in done}
    if short:
        raise AssertionError(
            f"read-back of {topic} stopped short within {timeout:.0f} s: "
            f"{{partition: (next offset, end from ListOffsets)}} = {short}; "
            f"consumer errors {errors[-10:]}; the consumer's log:\n" + log.tail(80)
        )
    return out


class _ClientLog:
    """librdkafka's log lines of one client, kept in memory for a failure message."""

    def __init__(self) -> None:
        import collections
        import logging

        self.lines: collections.deque[str] = collections.deque(maxlen=400)
        self.logger = logging.getLogger(f"rdkafka.readback.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        lines = self.lines

        class _Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(f"{record.created:.3f} {record.getMessage()}")

        self.logger.addHandler(_Keep())

    def tail(self, n: int) -> str:
        return "\n".join(list(self.lines)[-n:])


def replica_log_bytes(
    cluster: LocalCluster,
    broker_id: int,
    topic: str,
    partition: int,
    upto_offset: int | None = None,
) -> bytes:
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


def broker_views(cluster: LocalCluster, topic: str, partition: int = 0) -> dict[int, Any]:
    """What each broker says of one partition, asked of that broker alone: its own
    Metadata answer (leader, epoch, ISR), its ListOffsets latest answer (the HW, or the
    error a non-leader gives) and the log end of its replica on disk. A read-back that
    misses records names who answered what with this (plaintext clusters)."""
    from rawclient import RawClient, list_offsets_request, metadata_request

    views: dict[int, Any] = {}
    for b in sorted(x.id for x in cluster.brokers):
        view: dict[str, Any] = {}
        try:
            with RawClient.to(cluster.broker(b).address, timeout=5) as rc:
                md = rc.request(metadata_request([topic])).topics[0].partitions
                mp = next(x for x in md if int(x.partition_index) == partition)
                view["metadata"] = (
                    int(mp.leader_id),
                    int(mp.leader_epoch),
                    sorted(int(r) for r in mp.isr_nodes),
                )
                lo = rc.request(list_offsets_request(topic, partition, -1))
                lp = lo.topics[0].partitions[0]
                view["list_offsets"] = (int(lp.error_code), int(lp.offset))
        except Exception as e:  # a dead or paused broker: say so, do not fail the report
            view["error"] = repr(e)[:120]
        try:
            view["disk_leo"] = replica_leo(cluster, b, topic, partition)
        except Exception as e:
            view["disk_leo"] = repr(e)[:120]
        views[b] = view
    return views


def every_broker_agrees(
    cluster: LocalCluster, topic: str, partition: int, leader: int, isr: list[int]
) -> bool:
    """True when every broker's own Metadata answer names ``leader`` and ``isr``.

    Asking one broker picked by a client is not enough after a pause: a broker that was
    SIGSTOPped still answers from the view it had when it froze (leader itself, the old
    ISR) until ZooKeeper tells it otherwise, and a reader that bootstraps from it sees
    that view -- two separate client calls can each be answered by a different broker."""
    views = broker_views(cluster, topic, partition)
    return all(
        v.get("metadata", (None, None, None))[0] == leader and v["metadata"][2] == sorted(isr)
        for v in views.values()
    )
