"""Crash recovery: SIGKILL the broker under load, restart it, prove nothing acked is lost.

REQ-R18 (acknowledge from the page cache), R23 (segmented log), R27 (page cache): a
SIGKILL ends the process but not the kernel, so every record acknowledged before the kill
(acks=1 or acks=all) is in the page cache and must be served after the restart, exactly
once, at its acknowledged offset. Segments roll every 16 KiB so kills land around
segment boundaries too. Between kill and restart the files are checked directly: every
batch CRC-valid, offsets contiguous within and across segments, index entries pointing
at real batch boundaries; a torn tail is tolerated only as the very last bytes of the
newest segment (a SIGKILL can interrupt a page-cache write between pages) and the
restarted broker must have cut it off.

Then torn tails written by hand while the broker is down (truncated batch, appended
garbage, a flipped bit in the last batch): the broker restarts, serves exactly the valid
prefix, never serves corrupt bytes, and appends new records at the right offset.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from rawclient import RawClient, create_topics_request, fetch_request, produce_request
from tests.support.polling import wait_until

from odradek.cluster.local import LocalCluster
from odradek.errors import ErrorCode
from odradek.storage.batch import LOG_OVERHEAD, parse_batches, scan_batches
from odradek.storage.log import Log, LogConfig
from odradek.storage.records import COMPRESSION_LZ4, decode_batch_records, encode_batch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PARTITIONS = 3
SEGMENT_BYTES = 16 * 1024
ITERATIONS = 5
TOPICS = {"acks1": "1", "acksall": "all"}  # topic -> producer acks
COMPRESSION = {"acks1": "lz4", "acksall": "gzip"}
BROKER_CONFIG = {
    "log.segment.bytes": str(SEGMENT_BYTES),
    "log.index.interval.bytes": "4096",
    "auto.create.topics.enable": "false",
}

Acked = dict[tuple[str, int, int], bytes]  # (topic, partition, offset) -> value


# =============================================================================== producer
class LoadProducer:
    """One librdkafka producer writing as fast as it can until stopped.

    Retries are off: a record is sent at most once, so "exactly once at its acknowledged
    offset" is checkable (with retries a request whose response died with the broker
    would be appended twice, which Kafka without idempotence also does)."""

    def __init__(self, bootstrap: str, topic: str, tag: str, sent: set[bytes]) -> None:
        self.topic = topic
        self.tag = tag
        self.sent = sent
        self.acked: Acked = {}
        self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": TOPICS[topic],
                "compression.type": COMPRESSION[topic],
                "linger.ms": 2,
                "batch.num.messages": 200,
                "message.send.max.retries": 0,
                "retries": 0,
                "message.timeout.ms": 20000,
                "queue.buffering.max.messages": 20000,
            }
        )
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}", daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.acked[(self.topic, msg.partition(), msg.offset())] = msg.value()
            else:
                self.failed += 1

    def _run(self) -> None:
        rnd = random.Random(self.tag)
        seq = 0
        while not self._stop.is_set():
            value = f"{self.topic}|{self.tag}|{seq}|".encode() + b"x" * rnd.randrange(50, 400)
            try:
                self.producer.produce(
                    self.topic, value, partition=seq % PARTITIONS, on_delivery=self._on_delivery
                )
            except BufferError:
                self.producer.poll(0.01)
                continue
            self.sent.add(value)
            seq += 1
            self.producer.poll(0)

    def start(self) -> None:
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop_after_crash(self) -> None:
        """The broker is dead: drop whatever was not acknowledged and collect callbacks."""
        self._stop.set()
        self._thread.join(10)
        self.producer.purge(in_queue=True, in_flight=True, blocking=False)
        deadline = time.monotonic() + 30
        while len(self.producer) and time.monotonic() < deadline:
            self.producer.poll(0.1)
        assert len(self.producer) == 0, "producer never settled after the kill"


# =============================================================================== disk checks
def partition_dirs(cluster: LocalCluster) -> list[Path]:
    data = Path(cluster.broker(1).log_dir)
    return sorted(p for p in data.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] in TOPICS)


def check_partition_files(pdir: Path, *, allow_torn_tail: bool) -> int:
    """Verify every segment of one partition directly on disk; return its log end offset.

    Every batch CRC-valid, offsets contiguous within and across segments, each segment's
    base offset equal to its first batch's, offset-index entries at real batch starts with
    the batch's last offset, time-index entries non-decreasing and inside the segment."""
    logs = sorted(pdir.glob("*.log"))
    assert logs, f"no segments in {pdir}"
    expected: int | None = None
    for i, seg in enumerate(logs):
        base = int(seg.stem)
        data = seg.read_bytes()
        scan = scan_batches(data, verify_crc=True)
        last = i == len(logs) - 1
        if scan.error is not None:
            torn = data[scan.valid_bytes :]
            assert allow_torn_tail and last, (
                f"{seg}: invalid batch at {scan.valid_bytes}: {scan.error}"
            )
            # Only an incomplete final batch is acceptable (a write cut short by SIGKILL).
            claimed = (
                struct.unpack_from(">i", torn, 8)[0] + LOG_OVERHEAD
                if len(torn) >= 12
                else len(torn) + 1
            )
            assert len(torn) < claimed, (
                f"{seg}: complete but invalid batch at the tail: {scan.error}"
            )
        if expected is None:
            expected = base
        assert base == expected, f"{seg}: segment base {base}, previous segment ended at {expected}"
        starts: dict[int, int] = {}
        for h in scan.batches:
            assert h.base_offset == expected, (
                f"{seg}: batch at {h.position} has offset {h.base_offset}, expected {expected}"
            )
            starts[h.position] = h.last_offset
            expected = h.next_offset
        check_index_files(seg, base, starts, expected)
    assert expected is not None
    return expected


def check_index_files(seg: Path, base: int, starts: dict[int, int], next_offset: int) -> None:
    index = seg.with_suffix(".index")
    if index.exists():
        raw = index.read_bytes()
        assert len(raw) % 8 == 0, f"{index}: size {len(raw)}"
        prev = (-1, -1)
        for rel, pos in struct.iter_unpack(">ii", raw):
            assert (rel, pos) > prev and rel > prev[0] and pos > prev[1], f"{index}: not increasing"
            assert starts.get(pos) == base + rel, (
                f"{index}: entry ({base + rel}, {pos}) is not a batch start with that last offset"
            )
            prev = (rel, pos)
    tindex = seg.with_suffix(".timeindex")
    if tindex.exists():
        raw = tindex.read_bytes()
        assert len(raw) % 12 == 0, f"{tindex}: size {len(raw)}"
        prev_ts = None
        for ts, rel in struct.iter_unpack(">qi", raw):
            assert base <= base + rel < next_offset, (
                f"{tindex}: offset {base + rel} outside segment"
            )
            assert prev_ts is None or ts >= prev_ts, f"{tindex}: timestamps decrease"
            prev_ts = ts


# =============================================================================== reading back


def fetch_partition(rc: RawClient, topic: str, partition: int, offset: int) -> Any:
    r = rc.request(fetch_request(topic, partition, offset, max_bytes=4 << 20))
    return r.responses[0].partitions[0]


def wait_leader(cluster: LocalCluster, topics: list[str], partitions: int) -> None:
    with RawClient.to(cluster.bootstrap_servers) as rc:
        wait_until(
            lambda: all(
                fetch_partition(rc, t, p, 0).error_code == ErrorCode.none
                for t in topics
                for p in range(partitions)
            ),
            "the restarted broker to lead every partition",
        )


def read_partition(
    rc: RawClient, topic: str, partition: int
) -> tuple[list[tuple[int, bytes]], int]:
    """Every (offset, value) below the high watermark, each fetched batch CRC-checked."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    hw = 0
    while True:
        p = fetch_partition(rc, topic, partition, offset)
        assert p.error_code == ErrorCode.none, (topic, partition, offset, p.error_code)
        hw = p.high_watermark
        if offset >= hw:
            return out, hw
        data = bytes(p.records or b"")
        assert data, f"{topic}-{partition}: nothing served at {offset} below HW {hw}"
        # parse_batches raises on any CRC mismatch: corrupt bytes must never be served.
        for h in parse_batches(data, verify_crc=True):
            assert h.base_offset <= offset < h.next_offset or h.base_offset > offset, h
            for rec in decode_batch_records(data[h.position : h.position + h.size]):
                if rec.offset >= offset:
                    out.append((rec.offset, rec.value or b""))
            offset = h.next_offset


def verify_consumed(
    cluster: LocalCluster, acked: Acked, sent: set[bytes], disk_leo: dict[tuple[str, int], int]
) -> int:
    """Every acked record exactly once at its offset; nothing unsent; HW == LEO on disk."""
    total = 0
    with RawClient.to(cluster.bootstrap_servers) as rc:
        for topic in TOPICS:
            for p in range(PARTITIONS):
                records, hw = read_partition(rc, topic, p)
                offsets = [o for o, _ in records]
                assert offsets == list(range(len(offsets))), f"{topic}-{p}: offsets not contiguous"
                assert hw == disk_leo[(topic, p)] == len(records), (
                    f"{topic}-{p}: HW {hw}, LEO on disk {disk_leo[(topic, p)]}"
                )
                values = [v for _, v in records]
                assert len(set(values)) == len(values), f"{topic}-{p}: a record is stored twice"
                stored = dict(records)
                for v in values:
                    assert v in sent, f"{topic}-{p}: a record nobody sent: {v[:40]!r}"
                for (t, part, off), v in acked.items():
                    if t == topic and part == p:
                        assert stored.get(off) == v, (
                            f"{topic}-{p}@{off}: acknowledged record lost or moved"
                        )
                total += len(records)
    return total


def disk_state(
    cluster: LocalCluster, *, allow_torn_tail: bool, scratch: Path | None = None
) -> dict[tuple[str, int], int]:
    """LEO of every partition, checked on disk. With ``scratch``, a copy of each partition
    is also opened with ``Log.open`` (full recovery scan from offset 0), which must agree."""
    out: dict[tuple[str, int], int] = {}
    for pdir in partition_dirs(cluster):
        topic, part = pdir.name.rsplit("-", 1)
        leo = check_partition_files(pdir, allow_torn_tail=allow_torn_tail)
        out[(topic, int(part))] = leo
        if scratch is not None:
            copy = scratch / pdir.name
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(pdir, copy)
            lg = Log.open(copy, LogConfig(segment_bytes=SEGMENT_BYTES))
            try:
                assert lg.log_end_offset == leo, (pdir.name, lg.log_end_offset, leo)
                sl = lg.read(0, 1 << 20) if leo else None
                assert sl is None or parse_batches(sl.read_bytes())[0].base_offset == 0
            finally:
                lg.close()
            check_partition_files(copy, allow_torn_tail=False)  # recovery left it clean
    assert len(out) == len(TOPICS) * PARTITIONS, sorted(out)
    return out


# =============================================================================== tests
def test_sigkill_under_load_loses_nothing_acknowledged(make_cluster: Any, tmp_path: Path) -> None:
    cluster: LocalCluster = make_cluster(1, broker_config=BROKER_CONFIG, zk_session_timeout_ms=3000)
    with RawClient.to(cluster.bootstrap_servers) as rc:
        r = rc.request(create_topics_request([(t, PARTITIONS, 1, {}) for t in TOPICS]))
        assert all(t.error_code == ErrorCode.none for t in r.topics), r
    rnd = random.Random(20240611)
    acked: Acked = {}
    sent: set[bytes] = set()
    rolled = 0
    for it in range(ITERATIONS):
        producers = [LoadProducer(cluster.bootstrap_servers, t, f"it{it}", sent) for t in TOPICS]
        for pr in producers:
            pr.start()
        # Kill at a random moment: once each producer has a random number of acks.
        targets = [rnd.randrange(500, 4000) for _ in producers]
        wait_until(
            lambda: all(pr.count() >= n for pr, n in zip(producers, targets)),  # noqa: B023 - called only within this iteration
            "the producers to get their acks",
            timeout=60,
        )
        cluster.stop_broker(1, signal.SIGKILL)
        for pr in producers:
            pr.stop_after_crash()
            acked.update(pr.acked)
        # (a) the files as the dead broker left them
        before = disk_state(cluster, allow_torn_tail=True, scratch=tmp_path / "scratch")
        cluster.start_broker(1)
        wait_leader(cluster, list(TOPICS), PARTITIONS)
        # ... and as the restarted broker recovered them: no torn tail any more.
        after = disk_state(cluster, allow_torn_tail=False)
        assert after == before, "recovery changed the log end offset of a clean prefix"
        # (b) consume everything
        total = verify_consumed(cluster, acked, sent, after)
        assert total >= len(acked)
        rolled = max(rolled, max(len(list(p.glob("*.log"))) for p in partition_dirs(cluster)))
        print(f"iteration {it}: {len(acked)} acked so far, {total} stored, {rolled} segments max")
    assert rolled >= 3, "segments never rolled: the test does not cover segment boundaries"


def _last_segment(pdir: Path) -> Path:
    return sorted(pdir.glob("*.log"))[-1]


def _valid_prefix_leo(seg: Path, keep_batches: int | None = None) -> tuple[int, int]:
    """(log end offset, byte size) after keeping ``keep_batches`` batches of ``seg``."""
    batches = scan_batches(seg.read_bytes()).batches
    if keep_batches is not None:
        batches = batches[:keep_batches]
    if not batches:
        return int(seg.stem), 0
    return batches[-1].next_offset, batches[-1].position + batches[-1].size


def test_torn_tails_written_by_hand(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(1, broker_config=BROKER_CONFIG, zk_session_timeout_ms=3000)
    topic = "torn"
    with RawClient.to(cluster.bootstrap_servers) as rc:
        r = rc.request(create_topics_request([(topic, 4, 1, {})]))
        assert r.topics[0].error_code == ErrorCode.none
        # Enough batches per partition to roll a few 16 KiB segments.
        for p in range(4):
            for b in range(60):
                batch = encode_batch(
                    [(None, f"{p}-{b}-{i}".encode() + b"y" * 300) for i in range(10)],
                    compression=COMPRESSION_LZ4 if b % 2 else 0,
                )
                resp = rc.request(produce_request(topic, p, batch, acks=1))
                pr = resp.responses[0].partition_responses[0]
                assert pr.error_code == ErrorCode.none and pr.base_offset == b * 10
    cluster.stop_broker(1, signal.SIGKILL)
    data_dir = Path(cluster.broker(1).log_dir)
    pdirs = [data_dir / f"{topic}-{p}" for p in range(4)]
    expected: dict[int, int] = {}

    # p0: the last batch cut in half.
    seg = _last_segment(pdirs[0])
    n = len(scan_batches(seg.read_bytes()).batches)
    expected[0], size = _valid_prefix_leo(seg, n - 1)
    full = seg.stat().st_size
    os.truncate(seg, size + (full - size) // 2)
    # p1: garbage appended after valid data.
    seg = _last_segment(pdirs[1])
    expected[1], _ = _valid_prefix_leo(seg)
    with open(seg, "ab") as f:
        f.write(random.Random(7).randbytes(1000))
    # p2: a flipped bit inside the last batch (a complete batch with a bad CRC).
    seg = _last_segment(pdirs[2])
    n = len(scan_batches(seg.read_bytes()).batches)
    expected[2], size = _valid_prefix_leo(seg, n - 1)
    with open(seg, "r+b") as f:
        f.seek(size + 100)
        byte = f.read(1)
        f.seek(size + 100)
        f.write(bytes([byte[0] ^ 0x10]))
    # p3: a half-written batch header only (12 bytes: offset + a large length).
    seg = _last_segment(pdirs[3])
    expected[3], _ = _valid_prefix_leo(seg)
    with open(seg, "ab") as f:
        f.write(struct.pack(">qi", expected[3], 5000))

    cluster.start_broker(1)
    wait_leader(cluster, [topic], 4)
    with RawClient.to(cluster.bootstrap_servers) as rc:
        for p in range(4):
            assert check_partition_files(pdirs[p], allow_torn_tail=False) == expected[p]
            records, hw = read_partition(rc, topic, p)
            assert hw == expected[p] == len(records), (p, hw, expected[p])
            assert [o for o, _ in records] == list(range(hw))
            for off, value in records:
                b, i = divmod(off, 10)
                assert value == f"{p}-{b}-{i}".encode() + b"y" * 300
            # New produce goes exactly after the valid prefix.
            batch = encode_batch([(None, b"after-recovery")])
            resp = rc.request(produce_request(topic, p, batch, acks=-1))
            pr = resp.responses[0].partition_responses[0]
            assert pr.error_code == ErrorCode.none and pr.base_offset == expected[p]
            records, hw = read_partition(rc, topic, p)
            assert hw == expected[p] + 1 and records[-1] == (expected[p], b"after-recovery")
