"""Log compaction on a real replicated cluster (REQ-R25, issue #5 item 2).

Keyed updates and tombstones go to a cleanup.policy=compact topic with small segments and
a fast cleaner. Checked: after cleaning, every replica's log on disk yields exactly the
newest value per key (against a model), offsets strictly increase, a consumer reading
while the cleaner runs never sees a key's version go backwards, keyless records are
refused, and committed offsets survive compaction of __consumer_offsets plus a
coordinator failover.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from replication_util import create_topic, partition_meta, wait_for

from odradek.log_manager.log_cleaner import CLEANER_CHECKPOINT
from odradek.storage.batch import scan_batches
from odradek.storage.checkpoint import read_checkpoint
from odradek.storage.records import decode_batch_records

pytestmark = pytest.mark.integration

CLEANER = {
    "replica.lag.time.max.ms": "3000",
    "zookeeper.session.timeout.ms": "4000",
    "log.cleaner.backoff.ms": "200",
}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "min.cleanable.dirty.ratio": "0.01",
    "compression.type": "producer",
}


def _value(key: bytes, version: int) -> bytes:
    return b"%s|%08d|" % (key, version) + os.urandom(30).hex().encode()  # incompressible


def _version(value: bytes) -> int:
    return int(value.split(b"|")[1])


def _disk_records(log_dir: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """Records of a replica's segment files, read straight from disk."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for f in sorted(log_dir.glob("*.log")):
        scan = scan_batches(f.read_bytes(), verify_crc=True)
        assert scan.error is None, f"{f}: {scan.error}"
        data = f.read_bytes()
        for h in scan.batches:
            if h.is_control:
                continue
            out += [
                (r.offset, r.key, r.value)
                for r in decode_batch_records(data[h.position : h.position + h.size])
            ]
    return out


def _disk_records_or_none(log_dir: Path) -> list[tuple[int, bytes | None, bytes | None]] | None:
    """``_disk_records``, or None while the cleaner swaps segments."""
    try:
        return _disk_records(log_dir)
    except (FileNotFoundError, AssertionError):
        return None


def _replica_matches(log_dir: Path, model: dict[bytes, bytes | None], max_records: int) -> Any:
    recs = _disk_records_or_none(log_dir)
    if recs is None:
        return None  # a swap in progress: look again
    offsets = [o for o, _, _ in recs]
    assert offsets == sorted(set(offsets)), f"{log_dir}: offsets not strictly increasing"
    latest = {k: v for _, k, v in recs}
    if latest != model or len(recs) > max_records:
        return None
    return len(recs)


class _Reader(threading.Thread):
    """Reads the partition from offset 0 to its end again and again while the cleaner
    runs; within each pass a key's version must only grow and offsets must increase."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()
        self.passes = 0
        self.records = 0
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            # Small fetches: many round trips, so reads interleave with segment swaps.
            c = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": "compaction-reader",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "max.partition.fetch.bytes": 8192,
                }
            )
        except Exception as e:
            self.errors.append(repr(e))
            return
        try:
            while not self.stop.is_set():
                c.assign([TopicPartition(self.topic, 0, 0)])
                seen: dict[bytes, int] = {}
                last = -1
                deadline = time.monotonic() + 30
                while not self.stop.is_set() and time.monotonic() < deadline:
                    m = c.poll(0.2)
                    if m is None:
                        continue
                    if m.error() is not None:
                        if m.error().code() == -191:  # _PARTITION_EOF: one pass done
                            break
                        continue
                    if m.offset() <= last:
                        self.errors.append(f"offset {m.offset()} after {last}")
                    last = m.offset()
                    self.records += 1
                    if m.value() is not None:
                        v = _version(m.value())
                        if v <= seen.get(m.key(), 0):
                            self.errors.append(
                                f"key {m.key()!r} went from v{seen[m.key()]} "
                                f"to v{v} at offset {m.offset()}"
                            )
                        seen[m.key()] = v
                self.passes += 1
        except Exception as e:
            self.errors.append(repr(e))
        finally:
            c.close()


def _cleaner_checkpoint(c: Any, broker_id: int, topic: str) -> int:
    """The first dirty offset the broker's cleaner recorded for ``topic``-0."""
    path = Path(c.broker(broker_id).log_dir) / CLEANER_CHECKPOINT
    return read_checkpoint(path).get((topic, 0), 0)


def _produce(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]], codec: str = "lz4"
) -> list[str]:
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err.name())

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "compression.type": codec,
            "batch.num.messages": 50,
            "enable.idempotence": False,
            "max.in.flight": 1,
        }
    )
    for k, v in records:
        while True:
            try:
                p.produce(topic, key=k, value=v, partition=0, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    return errors


def test_compaction_on_every_replica_with_concurrent_reader(make_cluster, topic_name) -> None:
    c = make_cluster(3, broker_config=CLEANER)
    create_topic(c.bootstrap_servers, topic_name, 1, 3, config=TOPIC_CONFIG, assignment=[[1, 2, 3]])
    keys = [b"key-%04d" % i for i in range(150)]
    model: dict[bytes, bytes | None] = {}
    reader = _Reader(c.bootstrap_servers, topic_name)
    reader.start()
    ckpt: dict[tuple[str, int], int] = {}
    try:
        total = 0
        for rnd in range(1, 13):
            recs: list[tuple[bytes, bytes | None]] = []
            for i, k in enumerate(keys):
                # Every 5th round deletes a few keys; later rounds bring some back.
                v = None if (rnd % 5 == 0 and i % 7 == 0) else _value(k, rnd)
                recs.append((k, v))
                model[k] = v
            codec = ("none", "lz4", "zstd", "gzip")[rnd % 4]
            assert _produce(c.bootstrap_servers, topic_name, recs, codec) == []
            total += len(recs)
            if rnd % 3 == 0:
                # Three rounds fill more than two segments: wait for a cleaner pass on the
                # leader so cleaning interleaves with producing and with the reader.
                before = ckpt.get((topic_name, 0), 0)
                wait_for(
                    lambda: _cleaner_checkpoint(c, 1, topic_name) > before,  # noqa: B023 - called only within this iteration
                    60,
                    f"a cleaner pass after round {rnd}",
                )
                ckpt[(topic_name, 0)] = _cleaner_checkpoint(c, 1, topic_name)
        # Fillers with their own keys push every update out of the active segment.
        fill = [(b"filler-%04d" % i, _value(b"filler", 1)) for i in range(300)]
        assert _produce(c.bootstrap_servers, topic_name, fill) == []
        model.update(fill)
        total += len(fill)
        # Every replica's log, read from disk, holds exactly the newest value per key and
        # far fewer records than were written (the active segment may hold duplicates).
        for b in (1, 2, 3):
            d = Path(c.broker(b).log_dir) / f"{topic_name}-0"
            n = wait_for(
                lambda d=d: _replica_matches(d, model, total // 3),
                90,
                f"broker {b}'s replica to be compacted",
            )
            assert n < total // 3
        # Keep reading a little after cleaning so passes see compacted segments too.
        passes = reader.passes
        wait_for(lambda: reader.passes >= passes + 2 or reader.errors, 60, "two more full reads")
    finally:
        reader.stop.set()
        reader.join(30)
    assert reader.errors == [], reader.errors[:5]
    assert reader.passes >= 2 and reader.records > 0
    log_text = (
        (Path(c.broker(1).log_dir).parent / "broker.log").read_text()
        if (Path(c.broker(1).log_dir).parent / "broker.log").exists()
        else ""
    )
    assert log_text == "" or log_text.count(f"cleaned {topic_name}-0") >= 4
    # A consumer's full read equals the model (tombstones read as null values).
    cons = Consumer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "group.id": "final-read",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    cons.assign([TopicPartition(topic_name, 0, 0)])
    got: dict[bytes, bytes | None] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() == -191:
                break
            continue
        got[m.key()] = m.value()
    cons.close()
    assert got == model


def test_compacted_topic_rejects_keyless_records(make_cluster, topic_name) -> None:
    c = make_cluster(1, broker_config=CLEANER)
    create_topic(c.bootstrap_servers, topic_name, 1, 1, config=TOPIC_CONFIG)
    assert _produce(c.bootstrap_servers, topic_name, [(None, b"no key")]) == ["INVALID_RECORD"]
    assert _produce(c.bootstrap_servers, topic_name, [(b"k", b"keyed")]) == []


def test_committed_offsets_survive_offsets_topic_compaction_and_failover(
    make_cluster, topic_name
) -> None:
    """__consumer_offsets is compacted; a new coordinator loads offsets from the cleaned
    log after the old one dies."""
    cfg = dict(
        CLEANER,
        **{
            "offsets.topic.segment.bytes": "8192",
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "3",
        },
    )
    c = make_cluster(3, broker_config=cfg)
    create_topic(c.bootstrap_servers, topic_name, 4, 3)
    groups = [f"g{i}" for i in range(3)]
    final: dict[str, dict[int, int]] = {}
    for g in groups:
        cons = Consumer(
            {"bootstrap.servers": c.bootstrap_servers, "group.id": g, "enable.auto.commit": False}
        )
        for n in range(1, 61):
            offs = [TopicPartition(topic_name, p, n * 10 + p) for p in range(4)]
            cons.commit(offsets=offs, asynchronous=False)
        final[g] = {p: 600 + p for p in range(4)}
        cons.close()
    # DeleteGroups writes tombstones for the group and its offsets (Kafka's behaviour):
    # after compaction and failover, the deleted group must stay deleted.
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.delete_consumer_groups([groups[2]], request_timeout=30)[groups[2]].result(30)
    final[groups[2]] = {p: -1001 for p in range(4)}  # OFFSET_INVALID: nothing committed
    # Wait until the offsets partition was cleaned on its leader.
    leader = partition_meta(c.bootstrap_servers, "__consumer_offsets")[0].leader
    d = Path(c.broker(leader).log_dir) / "__consumer_offsets-0"

    def cleaned() -> bool:
        try:
            return len(_disk_records(d)) < 60 * 4 * 3 // 2
        except (FileNotFoundError, AssertionError):
            return False

    wait_for(cleaned, 90, "__consumer_offsets-0 to be compacted")
    c.stop_broker(leader, signal.SIGKILL)
    wait_for(
        lambda: (
            partition_meta(c.bootstrap_servers, "__consumer_offsets")[0].leader not in (-1, leader)
        ),
        60,
        "a new offsets leader",
    )
    for g in groups:
        cons = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": g})

        def committed(cons: Consumer = cons) -> Any:
            try:
                tps = cons.committed([TopicPartition(topic_name, p) for p in range(4)], timeout=5)
            except Exception:
                return None
            got = {tp.partition: tp.offset for tp in tps}
            return got if got == final[g] else None  # noqa: B023 - called only within this iteration

        wait_for(committed, 60, f"committed offsets of {g}")
        cons.close()


def test_far_behind_follower_replicates_a_compacted_leader(make_cluster, topic_name) -> None:
    """A follower that missed many updates fetches the leader's compacted log (offset gaps,
    batches with fewer records than offsets) and ends with the same newest values."""
    c = make_cluster(3, broker_config=CLEANER)
    create_topic(c.bootstrap_servers, topic_name, 1, 3, config=TOPIC_CONFIG, assignment=[[1, 2, 3]])
    keys = [b"key-%04d" % i for i in range(150)]
    model: dict[bytes, bytes | None] = {}

    def round_(rnd: int) -> None:
        recs = [(k, _value(k, rnd)) for k in keys]
        assert _produce(c.bootstrap_servers, topic_name, recs) == []
        model.update(recs)

    round_(1)
    c.stop_broker(3, signal.SIGKILL)
    wait_for(
        lambda: 3 not in partition_meta(c.bootstrap_servers, topic_name)[0].isrs,
        30,
        "broker 3 to leave the ISR",
    )
    for rnd in range(2, 10):
        round_(rnd)
    fill = [(b"filler-%04d" % i, _value(b"filler", 1)) for i in range(300)]
    assert _produce(c.bootstrap_servers, topic_name, fill) == []
    model.update(fill)
    total = 150 * 9 + 300
    d1 = Path(c.broker(1).log_dir) / f"{topic_name}-0"
    wait_for(lambda: _replica_matches(d1, model, total // 3), 90, "the leader to be compacted")
    c.start_broker(3)
    wait_for(
        lambda: sorted(partition_meta(c.bootstrap_servers, topic_name)[0].isrs) == [1, 2, 3],
        60,
        "broker 3 to rejoin the ISR",
    )
    d3 = Path(c.broker(3).log_dir) / f"{topic_name}-0"
    wait_for(lambda: _replica_matches(d3, model, total), 60, "broker 3 to hold the newest values")
    # Above what broker 3 had before it died, it holds exactly the leader's (compacted)
    # records: the gaps were replicated, not filled.
    leader = {o: (k, v) for o, k, v in _disk_records(d1) if o >= 150}
    follower = {o: (k, v) for o, k, v in _disk_records(d3) if o >= 150}
    assert set(follower) <= set(range(150, total)) and len(follower) < total - 150
    assert all(leader.get(o, kv) == kv for o, kv in follower.items())


def _markers_on_disk(log_dir: Path) -> dict[str, int] | None:
    """COMMIT / ABORT control batches in a replica's segment files (None mid-swap)."""
    out = {"abort": 0, "commit": 0}
    try:
        for f in sorted(log_dir.glob("*.log")):
            data = f.read_bytes()
            for h in scan_batches(data, verify_crc=True).batches:
                if h.is_control:
                    key = decode_batch_records(data[h.position : h.position + h.size])[0].key
                    out["abort" if key is not None and key[2:4] == b"\x00\x00" else "commit"] += 1
    except FileNotFoundError:
        return None
    return out


@pytest.mark.timeout(180)
def test_cleaner_removes_aborted_records_then_their_markers(make_cluster, topic_name) -> None:
    """KIP-98's cleaner rules on a real broker: an aborted transaction's records go at the
    first pass, its ABORT marker once delete.retention.ms has passed, and the aborted
    entry goes with the marker -- else a read_committed consumer reading from the start
    would wait for that marker and drop the producer's later committed records."""
    c = make_cluster(1, broker_config=CLEANER)
    create_topic(
        c.bootstrap_servers, topic_name, 1, 1, {**TOPIC_CONFIG, "delete.retention.ms": "300"}
    )
    txn = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": "clean-me"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(20):
        txn.produce(topic_name, key=b"aborted-%d" % i, value=b"never")
    assert txn.flush(30) == 0  # written before the abort: else librdkafka just drops them
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic_name, key=b"kept", value=b"committed-1")
    txn.commit_transaction(30)
    log_dir = Path(c.broker(1).log_dir) / f"{topic_name}-0"
    # Batches well under segment.bytes (16 KiB), or the broker refuses them.
    plain = Producer({"bootstrap.servers": c.bootstrap_servers, "linger.ms": 5, "batch.size": 4096})
    n = 0
    errors: list[Any] = []
    # EndTxn answers once PrepareCommit is replicated; the coordinator writes the markers
    # after that (Kafka's order), so the COMMIT marker reaches the disk a moment later.
    wait_for(
        lambda: _markers_on_disk(log_dir) == {"abort": 1, "commit": 1},
        30,
        "the ABORT and COMMIT markers on disk",
    )

    def abort_marker_gone() -> bool:
        nonlocal n
        # Keyed updates roll segments, so the cleaner keeps running passes.
        for _ in range(200):
            plain.produce(
                topic_name,
                key=b"filler-%d" % (n % 50),
                value=_value(b"f", n),
                on_delivery=lambda err, _m: errors.append(err) if err else None,
            )
            n += 1
        plain.flush(30)
        assert errors == [], errors[:3]
        m = _markers_on_disk(log_dir)
        return m is not None and m["abort"] == 0

    wait_for(abort_marker_gone, 90, "the ABORT marker to be cleaned away", interval=0.3)
    # The cleaner may still be swapping segments: read the files again until one read
    # sees a consistent set (a file renamed away, or read mid-write, means "look again").
    m = wait_for(lambda: _markers_on_disk(log_dir), 20, "a consistent read of the segments")
    assert m["commit"] >= 1, m  # "kept" still has its record: COMMIT stays
    records = wait_for(lambda: _disk_records_or_none(log_dir), 20, "the records on disk")
    assert not any(k.startswith(b"aborted-") for _, k, _ in records if k)
    # The same producer commits again, after the cleaned-away abort.
    txn.begin_transaction()
    txn.produce(topic_name, key=b"later", value=b"committed-2")
    txn.commit_transaction(30)
    cons = Consumer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "group.id": "rc",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    cons.assign([TopicPartition(topic_name, 0, 0)])
    got: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = cons.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == -191:  # _PARTITION_EOF
                break
            continue
        got[msg.key()] = msg.value()
    cons.close()
    assert got.get(b"kept") == b"committed-1"
    assert got.get(b"later") == b"committed-2", sorted(got)[:5]
    assert not any(k.startswith(b"aborted-") for k in got)
