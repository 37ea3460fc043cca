"""Shared by the hostile-input tests: a real client producing all along, its checks, and
the module fixtures that surround every test with them.

``test_bad_input.py`` and ``test_hostile_input.py`` each start one broker for the module
(``make_broker_fixtures``). Around every test an autouse fixture checks that the broker
still serves normal clients: a *bystander* connection opened before the bad input still
answers, a fresh connection answers, and a confluent-kafka producer running the whole
time in the background keeps getting acks. At the end of the module every record
acknowledged to that producer (and a few produced up front) is consumed back, each
exactly once at its acknowledged offset: no lost data.
"""

from __future__ import annotations

import struct
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from rawclient import (
    RawClient,
    create_topics_request,
    fetch_request,
    frame,
    metadata_request,
    produce_request,
    request_cls,
)

from odradek.cluster.local import LocalCluster
from odradek.errors import ErrorCode
from odradek.storage.batch import parse_batches
from odradek.storage.records import COMPRESSION_GZIP, decode_batch_records, encode_batch

CANARY_TOPIC = "canary"
DATA_TOPIC = "data"  # 2 partitions, used by most tests


class Canary:
    """A real client (librdkafka) producing all along; its acks prove liveness."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 30000,
                "socket.keepalive.enable": True,
            }
        )
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="canary", daemon=True)
        self._seq = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(
                CANARY_TOPIC,
                f"canary-{self._seq}".encode(),
                partition=self._seq % 2,
                on_delivery=self._on_delivery,
            )
            self._seq += 1
            self.producer.poll(0.01)  # ~100 records/s: steady, not a load test

    def start(self) -> None:
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_progress(self, n: int = 5, timeout: float = 20.0) -> None:
        start = self.count()
        deadline = time.monotonic() + timeout
        while self.count() < start + n:
            assert time.monotonic() < deadline, (
                f"background producer made no progress ({self.count() - start} acks in "
                f"{timeout}s); errors: {self.errors[-5:]}"
            )
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        remaining = self.producer.flush(30)
        assert remaining == 0, f"{remaining} canary records never acknowledged"


def create_topic(
    rc: RawClient, name: str, partitions: int, configs: dict[str, str] | None = None, rf: int = 1
) -> None:
    r = rc.request(create_topics_request([(name, partitions, rf, configs or {})]))
    assert r.topics[0].error_code == ErrorCode.none, r


def produce(
    rc: RawClient,
    topic: str,
    partition: int,
    records: bytes | None,
    *,
    acks: int = -1,
    version: int = 9,
) -> Any:
    """Produce one partition's records; returns that partition's response."""
    r = rc.request(produce_request(topic, partition, records, acks=acks, version=version))
    return r.responses[0].partition_responses[0]


def fetch(rc: RawClient, topic: str, partition: int, offset: int, **kw: Any) -> Any:
    r = rc.request(fetch_request(topic, partition, offset, **kw))
    assert r.error_code == ErrorCode.none
    return r.responses[0].partitions[0]


def read_all(rc: RawClient, topic: str, partition: int) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record below the high watermark, CRC-checked."""
    out: list[tuple[int, bytes | None]] = []
    offset = 0
    while True:
        p = fetch(rc, topic, partition, offset)
        assert p.error_code == ErrorCode.none, p.error_code
        if offset >= p.high_watermark:
            return out
        data = bytes(p.records or b"")
        assert data, f"no data at {offset} below HW {p.high_watermark}"
        for h in parse_batches(data, verify_crc=True):  # never corrupt bytes on the wire
            for rec in decode_batch_records(data[h.position : h.position + h.size]):
                if rec.offset >= offset:
                    out.append((rec.offset, rec.value))
            offset = h.next_offset


def legacy_v1_message(value: bytes, key: bytes | None = None) -> bytes:
    """One message-format v1 entry (Kafka <= 0.10 message set): offset, size, then
    crc (CRC-32 of the rest), magic 1, attributes, timestamp, key, value."""
    body = struct.pack(">bbq", 1, 0, int(time.time() * 1000))
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


def api_versions_frame(version: int, correlation_id: int) -> bytes:
    # Hand-built: kio has no schema for ApiVersions v99. Header v2 shape (flexible).
    return frame(
        struct.pack(">hhih", 18, version, correlation_id, 1) + b"x" + b"\x00" + b"\x02a\x021\x00"
    )


def make_broker_fixtures(name: str, broker_config: dict[str, str]) -> tuple[Any, Any, Any]:
    """(broker, preexisting, still_serving) fixtures for a test module: one broker with
    ``broker_config``, the data and canary topics, the background producer, and the
    autouse liveness check around every test. Assign them to module globals."""

    @pytest.fixture(scope="module")
    def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
        c = LocalCluster.start(tmp_path_factory.mktemp(name), 1, broker_config=broker_config)
        try:
            yield c
        finally:
            c.down()

    @pytest.fixture(scope="module")
    def preexisting(broker: LocalCluster) -> Iterator[Canary]:
        """Topics, a few records written before any bad input, and the background
        producer. After the module: everything acknowledged is read back."""
        with RawClient.to(broker.bootstrap_servers) as rc:
            create_topic(rc, DATA_TOPIC, 2)
            create_topic(rc, CANARY_TOPIC, 2)
            written: list[tuple[int, int, bytes]] = []
            for i in range(10):
                value = f"before-{i}".encode()
                r = produce(
                    rc,
                    DATA_TOPIC,
                    i % 2,
                    encode_batch([(None, value)], compression=COMPRESSION_GZIP),
                )
                assert r.error_code == ErrorCode.none
                written.append((i % 2, r.base_offset, value))
        canary = Canary(broker.bootstrap_servers)
        canary.start()
        canary.wait_progress(5, timeout=30)
        yield canary
        canary.stop()
        assert broker.broker_state(1) == "running"
        with RawClient.to(broker.bootstrap_servers) as rc:
            for topic, expected in ((DATA_TOPIC, written), (CANARY_TOPIC, canary.acked)):
                stored = {p: dict(read_all(rc, topic, p)) for p in (0, 1)}
                for p, off, value in expected:
                    assert stored[p].get(off) == value, f"{topic}-{p}@{off}: lost or changed"
                for p in (0, 1):
                    values = [v for v in stored[p].values() if topic == CANARY_TOPIC]
                    assert len(values) == len(set(values)), f"duplicates in {topic}-{p}"

    @pytest.fixture(autouse=True)
    def still_serving(broker: LocalCluster, preexisting: Canary) -> Iterator[RawClient]:
        """The bystander: a connection opened before the bad input that must be
        unaffected."""
        bystander = RawClient.to(broker.bootstrap_servers)
        assert (
            bystander.request(
                request_cls(18, 3)(client_software_name="by", client_software_version="1")
            ).error_code
            == 0
        )
        try:
            yield bystander
            assert broker.broker_state(1) == "running", "the broker process died"
            r = bystander.request(metadata_request([DATA_TOPIC]))
            assert r.topics[0].error_code == ErrorCode.none
            with RawClient.to(broker.bootstrap_servers) as fresh:
                r = fresh.request(metadata_request([DATA_TOPIC]))
                assert r.topics[0].error_code == ErrorCode.none
            preexisting.wait_progress()
        finally:
            bystander.close()

    return broker, preexisting, still_serving


def expect_closed(c: RawClient, timeout: float = 10.0) -> None:
    assert c.wait_closed(timeout), "the broker left the connection open"
