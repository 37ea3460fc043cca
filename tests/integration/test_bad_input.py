"""Bad input gets a Kafka error code or a closed connection, never a crash or lost data.

Every test talks to the real broker process over real TCP, surrounded by the liveness
checks of ``hostile_util.make_broker_fixtures`` (a bystander connection, a fresh
connection, a confluent-kafka producer running all along whose every acknowledged record
is read back at the end).

Error codes are Kafka's (checked against Kafka's KafkaApis/ProduceRequest behaviour):
old-magic batches in Produce v3+ are INVALID_RECORD (ProduceRequest.validateRecords
throws InvalidRecordException), Produce never auto-creates topics, an unsupported
ApiVersions version gets error 35 with a v0 body (KIP-511), anything undecodable or an
unserved API/version closes the connection.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hostile_util import (
    DATA_TOPIC,
    api_versions_frame,
    create_topic,
    expect_closed,
    fetch,
    legacy_v1_message,
    make_broker_fixtures,
    produce,
    read_all,
)
from rawclient import (
    RawClient,
    create_topics_request,
    encode_request,
    frame,
    list_offsets_request,
    metadata_request,
    produce_request,
    request_cls,
)

from odradek.cluster.local import LocalCluster
from odradek.errors import ErrorCode
from odradek.storage.records import encode_batch
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import KafkaZkClient, StateWrite

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MESSAGE_MAX_BYTES = 100_000
REQUEST_MAX_BYTES = 1 << 20


# =============================================================================== fixtures
broker, preexisting, still_serving = make_broker_fixtures(
    "badinput",
    {
        "socket.request.max.bytes": str(REQUEST_MAX_BYTES),
        "message.max.bytes": str(MESSAGE_MAX_BYTES),
        "auto.create.topics.enable": "true",
    },
)


@pytest.fixture
def rc(broker: LocalCluster) -> Iterator[RawClient]:
    with RawClient.to(broker.bootstrap_servers) as c:
        yield c


# =============================================================================== framing
def test_negative_size_closes(rc: RawClient) -> None:
    rc.send_raw(struct.pack(">i", -1))
    expect_closed(rc)


def test_size_smaller_than_any_header_closes(rc: RawClient) -> None:
    rc.send_raw(struct.pack(">i", 4) + b"\x00\x03\x00\x0c")
    expect_closed(rc)


def test_size_smaller_than_client_id_header_closes(rc: RawClient) -> None:
    # 9 bytes: api key, version, correlation id, but only half of the client_id length.
    rc.send_raw(frame(struct.pack(">hhib", 3, 12, 1, 0)))
    expect_closed(rc)


def test_client_id_longer_than_frame_closes(rc: RawClient) -> None:
    rc.send_raw(frame(struct.pack(">hhih", 3, 12, 1, 500) + b"abc"))
    expect_closed(rc)


def test_garbage_body_closes(rc: RawClient) -> None:
    header = encode_request(metadata_request([DATA_TOPIC]), 7)[: 10 + len("rawclient") + 1]
    rc.send_raw(frame(header + b"\xff" * 40))
    expect_closed(rc)


def test_produce_with_garbage_body_closes(rc: RawClient) -> None:
    good = encode_request(produce_request(DATA_TOPIC, 0, encode_batch([(None, b"x")])), 7)
    header_len = 10 + len("rawclient") + 1
    rc.send_raw(frame(good[:header_len] + bytes(range(256)) * 2))
    expect_closed(rc)


def test_random_garbage_frames_close(broker: LocalCluster) -> None:
    import random

    rnd = random.Random(1234)
    for _ in range(20):
        with RawClient.to(broker.bootstrap_servers) as c:
            body = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(8, 200)))
            c.send_raw(frame(body))
            # Garbage may happen to be a valid tiny request (e.g. ApiVersions v0): then an
            # answer is fine too; what matters is that the broker survives.
            c.wait_closed(2.0)


def test_truncated_request_then_close(broker: LocalCluster) -> None:
    payload = encode_request(metadata_request([DATA_TOPIC]), 3)
    with RawClient.to(broker.bootstrap_servers) as c:
        c.send_raw(struct.pack(">i", 100) + (payload + b"\x00" * 100)[:50])
    # Closed by us mid-frame; the broker must simply forget the connection.


def test_truncated_request_gets_no_answer(rc: RawClient) -> None:
    payload = encode_request(metadata_request([DATA_TOPIC]), 3)
    rc.send_raw(struct.pack(">i", len(payload) + 50) + payload)
    # The frame is incomplete: nothing may be answered (no guessing at request ends).
    assert not rc.wait_closed(1.0)


def test_half_sent_produce_then_disconnect(broker: LocalCluster) -> None:
    batch = encode_batch([(None, b"half" * 1000)])
    payload = encode_request(produce_request(DATA_TOPIC, 0, batch), 11)
    with RawClient.to(broker.bootstrap_servers) as c:
        c.send_raw(frame(payload)[: len(payload) // 2])
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
    with RawClient.to(broker.bootstrap_servers) as c:
        hw_before = fetch(c, DATA_TOPIC, 0, 0).high_watermark
        records = read_all(c, DATA_TOPIC, 0)
        assert all(v != b"half" * 1000 for _, v in records), "half a request was appended"
        assert fetch(c, DATA_TOPIC, 0, 0).high_watermark == hw_before


def test_oversized_request_closes_before_body(rc: RawClient) -> None:
    # Only the size prefix is sent: the broker must refuse it without waiting for 2 MiB.
    rc.send_raw(struct.pack(">i", 2 * REQUEST_MAX_BYTES) + b"\x00\x00")
    expect_closed(rc)


def test_oversized_request_with_body_closes(rc: RawClient) -> None:
    batch = encode_batch([(None, b"z" * (REQUEST_MAX_BYTES + 1000))])
    try:
        rc.send_raw(frame(encode_request(produce_request(DATA_TOPIC, 0, batch), 5)))
    except (BrokenPipeError, ConnectionResetError):
        return  # closed while we were still sending: the expected outcome
    expect_closed(rc)


# =============================================================================== API/versions
@pytest.mark.parametrize("api_key", [999, 32767, -1, 38])
def test_unknown_or_unserved_api_key_closes(rc: RawClient, api_key: int) -> None:
    # 38 (CreateDelegationToken) is a real Kafka API this broker does not serve (no
    # delegation tokens, not advertised). It was 48 until client quotas were served.
    from odradek.protocol.versions import SERVED

    assert api_key not in SERVED
    rc.send_raw(frame(struct.pack(">hhih", api_key, 0, 1, -1) + b"\x00" * 16))
    expect_closed(rc)


def test_produce_v2_closes(rc: RawClient) -> None:
    # Advertised (for old librdkafka's version check) but not served: message format v0/v1.
    body = struct.pack(">hi", 1, 1000) + struct.pack(">i", 0)  # acks, timeout, no topics
    rc.send_raw(frame(struct.pack(">hhih", 0, 2, 5, -1) + body))
    expect_closed(rc)


def test_api_versions_v99_gets_error_35_with_v0_body(rc: RawClient) -> None:
    rc.send_raw(api_versions_frame(99, 77))
    data = rc.read_frame()
    correlation_id, error_code, n = struct.unpack_from(">ihi", data, 0)
    assert (correlation_id, error_code) == (77, ErrorCode.unsupported_version.value)
    entries = [struct.unpack_from(">hhh", data, 10 + 6 * i) for i in range(n)]
    assert len(data) == 10 + 6 * n, "not a v0 body"
    keys = {k: (lo, hi) for k, lo, hi in entries}
    assert keys[18][1] >= 3 and keys[0][1] >= 9
    # The connection stays usable: the client retries with a version both sides know.
    r = rc.request(request_cls(18, 3)(client_software_name="x", client_software_version="1"))
    assert r.error_code == ErrorCode.none


# =============================================================================== records
def test_batch_over_message_max_bytes(rc: RawClient) -> None:
    batch = encode_batch([(None, b"m" * (MESSAGE_MAX_BYTES + 10))])
    assert len(batch) < REQUEST_MAX_BYTES
    r = produce(rc, DATA_TOPIC, 0, batch)
    assert r.error_code == ErrorCode.message_too_large
    assert r.base_offset == -1


def test_bad_crc_is_corrupt_message(rc: RawClient) -> None:
    batch = bytearray(encode_batch([(b"k", b"v" * 100)] * 3))
    batch[-5] ^= 0xFF  # inside the CRC-covered range
    hw = fetch(rc, DATA_TOPIC, 1, 0).high_watermark
    r = produce(rc, DATA_TOPIC, 1, bytes(batch))
    assert r.error_code == ErrorCode.corrupt_message
    assert fetch(rc, DATA_TOPIC, 1, 0).high_watermark == hw, "a corrupt batch was stored"


def test_second_batch_corrupt_rejects_whole_request(rc: RawClient) -> None:
    good = encode_batch([(None, b"ok")])
    bad = bytearray(encode_batch([(None, b"bad")]))
    bad[30] ^= 1
    hw = fetch(rc, DATA_TOPIC, 1, 0).high_watermark
    r = produce(rc, DATA_TOPIC, 1, good + bytes(bad))
    assert r.error_code == ErrorCode.corrupt_message
    assert fetch(rc, DATA_TOPIC, 1, 0).high_watermark == hw, "part of a request was stored"


def test_truncated_batch_is_corrupt_message(rc: RawClient) -> None:
    batch = encode_batch([(None, b"t" * 200)])
    r = produce(rc, DATA_TOPIC, 1, batch[:-20])
    assert r.error_code == ErrorCode.corrupt_message


def test_magic_v1_batch_is_invalid_record(rc: RawClient) -> None:
    # Kafka: ProduceRequest.validateRecords -> InvalidRecordException -> INVALID_RECORD (87).
    r = produce(rc, DATA_TOPIC, 0, legacy_v1_message(b"old"))
    assert r.error_code == ErrorCode.invalid_record


def test_null_records_is_rejected(rc: RawClient) -> None:
    r = produce(rc, DATA_TOPIC, 0, None)
    assert r.error_code != ErrorCode.none


def test_invalid_acks(rc: RawClient) -> None:
    r = produce(rc, DATA_TOPIC, 0, encode_batch([(None, b"acks5")]), acks=5)
    assert r.error_code == ErrorCode.invalid_required_acks


# =============================================================================== topics
def test_produce_to_unknown_topic_does_not_auto_create(rc: RawClient, topic_name: str) -> None:
    # auto.create.topics.enable=true on this broker, but Kafka never creates on Produce.
    r = produce(rc, topic_name, 0, encode_batch([(None, b"x")]))
    assert r.error_code == ErrorCode.unknown_topic_or_partition
    m = rc.request(metadata_request([topic_name], allow_auto_topic_creation=False))
    assert m.topics[0].error_code == ErrorCode.unknown_topic_or_partition


def test_unknown_partition(rc: RawClient) -> None:
    r = produce(rc, DATA_TOPIC, 99, encode_batch([(None, b"x")]))
    assert r.error_code == ErrorCode.unknown_topic_or_partition
    r = produce(rc, DATA_TOPIC, -1, encode_batch([(None, b"x")]))
    assert r.error_code == ErrorCode.unknown_topic_or_partition
    assert fetch(rc, DATA_TOPIC, 99, 0).error_code == ErrorCode.unknown_topic_or_partition


def test_unknown_topic_with_auto_create_disabled(make_cluster: Any, topic_name: str) -> None:
    c = make_cluster(1, broker_config={"auto.create.topics.enable": "false"})
    with RawClient.to(c.bootstrap_servers) as rc2:
        m = rc2.request(metadata_request([topic_name], allow_auto_topic_creation=True))
        assert m.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        r = produce(rc2, topic_name, 0, encode_batch([(None, b"x")]))
        assert r.error_code == ErrorCode.unknown_topic_or_partition
        assert fetch(rc2, topic_name, 0, 0).error_code == ErrorCode.unknown_topic_or_partition
        m = rc2.request(metadata_request([topic_name]))
        assert m.topics[0].error_code == ErrorCode.unknown_topic_or_partition


BAD_NAMES = ["", ".", "..", "a/b", "has space", "x" * 250, "ünï"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_topic_name(rc: RawClient, name: str) -> None:
    r = rc.request(create_topics_request([(name, 1, 1, {})]))
    assert r.topics[0].error_code == ErrorCode.invalid_topic_exception
    if name:
        m = rc.request(metadata_request([name], allow_auto_topic_creation=True))
        assert m.topics[0].error_code == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize(
    "configs",
    [
        {"no.such.config": "1"},
        {"cleanup.policy": "bogus"},
        {"segment.bytes": "not-a-number"},
        {"min.insync.replicas": "0"},
    ],
)
def test_invalid_topic_config(rc: RawClient, topic_name: str, configs: dict[str, str]) -> None:
    r = rc.request(create_topics_request([(topic_name, 1, 1, configs)]))
    assert r.topics[0].error_code == ErrorCode.invalid_config, r.topics[0]
    m = rc.request(metadata_request([topic_name]))
    assert m.topics[0].error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("rf", [0, 2, -5])
def test_invalid_replication_factor(rc: RawClient, topic_name: str, rf: int) -> None:
    r = rc.request(create_topics_request([(topic_name, 1, rf, {})]))
    assert r.topics[0].error_code == ErrorCode.invalid_replication_factor, r.topics[0]


@pytest.mark.parametrize("n", [0, -5])
def test_invalid_partitions(rc: RawClient, topic_name: str, n: int) -> None:
    r = rc.request(create_topics_request([(topic_name, n, 1, {})]))
    assert r.topics[0].error_code == ErrorCode.invalid_partitions, r.topics[0]


# =============================================================================== fetch
def test_fetch_beyond_log_end(rc: RawClient) -> None:
    hw = fetch(rc, DATA_TOPIC, 0, 0).high_watermark
    assert fetch(rc, DATA_TOPIC, 0, hw + 100).error_code == ErrorCode.offset_out_of_range
    assert fetch(rc, DATA_TOPIC, 0, -7).error_code == ErrorCode.offset_out_of_range
    # At exactly the log end: an empty answer, not an error (the consumer waits there).
    assert fetch(rc, DATA_TOPIC, 0, hw).error_code == ErrorCode.none


def _leader_epoch(rc: RawClient, topic: str, partition: int) -> int:
    m = rc.request(metadata_request([topic]))
    return next(p.leader_epoch for p in m.topics[0].partitions if p.partition_index == partition)


def test_fetch_with_fenced_or_unknown_leader_epoch(
    broker: LocalCluster, rc: RawClient, topic_name: str
) -> None:
    create_topic(rc, topic_name, 1)
    assert produce(rc, topic_name, 0, encode_batch([(None, b"e")])).error_code == 0
    # What a controller does when it re-elects a leader: bump the epoch in the partition
    # state znode (Kafka's layout); the broker follows the znode.
    zk = broker.zk_client()
    path = znodes.partition_state_path(topic_name, 0)
    raw, stat = zk.get(path)
    state = znodes.decode_partition_state(raw)
    state = dataclasses.replace(state, leader_epoch=state.leader_epoch + 2)
    topic_id = znodes.decode_topic(topic_name, zk.get(znodes.topic_path(topic_name))[0]).topic_id
    # Brokers learn states from leader_and_isr notifications: write both, as it does.
    KafkaZkClient(zk).update_partition_states(
        [StateWrite(topic_name, 0, topic_id, state, stat.version)], fence=None, writer=-1
    )
    deadline = time.monotonic() + 15
    while _leader_epoch(rc, topic_name, 0) != state.leader_epoch:
        assert time.monotonic() < deadline, "the broker did not follow the new leader epoch"
        time.sleep(0.05)
    epoch = state.leader_epoch
    # Metadata may run ahead of the replica state: poll until the partition itself agrees.
    while fetch(rc, topic_name, 0, 0, current_leader_epoch=epoch).error_code != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (
        fetch(rc, topic_name, 0, 0, current_leader_epoch=epoch - 1).error_code
        == ErrorCode.fenced_leader_epoch
    )
    assert (
        fetch(rc, topic_name, 0, 0, current_leader_epoch=epoch + 1).error_code
        == ErrorCode.unknown_leader_epoch
    )
    lo = rc.request(list_offsets_request(topic_name, 0, -1, current_leader_epoch=epoch - 1))
    assert lo.topics[0].partitions[0].error_code == ErrorCode.fenced_leader_epoch
    lo = rc.request(list_offsets_request(topic_name, 0, -1, current_leader_epoch=epoch + 1))
    assert lo.topics[0].partitions[0].error_code == ErrorCode.unknown_leader_epoch
    p = fetch(rc, topic_name, 0, 0, current_leader_epoch=epoch)
    assert p.error_code == 0 and p.high_watermark == 1


# =============================================================================== connections
def test_thousand_connections_opened_and_dropped(broker: LocalCluster) -> None:
    b = broker.broker(1)
    for round_ in range(10):
        socks = [socket.create_connection((b.host, b.port), timeout=10) for _ in range(100)]
        for i, s in enumerate(socks):
            if (i + round_) % 2:
                # Half of them reset (RST) instead of closing politely (FIN).
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if i % 10 == 0:
                s.sendall(b"\x00\x00")  # and some leave half a size prefix behind
            s.close()
    with RawClient.to(broker.bootstrap_servers) as c:
        assert c.request(metadata_request([DATA_TOPIC])).topics[0].error_code == 0


def test_slowloris_byte_by_byte_request_is_answered(
    broker: LocalCluster, still_serving: RawClient
) -> None:
    batch = encode_batch([(b"slow", b"loris")])
    data = frame(encode_request(produce_request(DATA_TOPIC, 1, batch), 4242))
    with RawClient.to(broker.bootstrap_servers) as slow:
        for i, byte in enumerate(data):
            slow.send_raw(bytes([byte]))
            time.sleep(0.002)  # the input under test: one byte every 2 ms
            if i == len(data) // 2:
                # Meanwhile other connections are served normally (no head-of-line blocking).
                r = still_serving.request(metadata_request([DATA_TOPIC]))
                assert r.topics[0].error_code == 0
        resp = slow.receive(0, 9, 4242)
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.none
    with RawClient.to(broker.bootstrap_servers) as c:
        stored = dict(read_all(c, DATA_TOPIC, 1))
    assert stored[p.base_offset] == b"loris"


def test_pipelined_requests_answered_in_order(rc: RawClient) -> None:
    frames = b"".join(
        frame(encode_request(metadata_request([DATA_TOPIC]), cid)) for cid in range(100, 150)
    )
    rc.send_raw(frames)
    for cid in range(100, 150):
        assert rc.receive(3, 12, cid).topics[0].error_code == 0
