"""Issue 11's findings, one test each, over TCP against a real broker.

Each test asserts Kafka's error code or the closed connection, and (the autouse fixture
of ``hostile_util.make_broker_fixtures``) that the broker still serves a real client
afterwards: a bystander connection, a fresh connection and a confluent-kafka producer
running all along, whose every acknowledged record is read back at the end.

Malformed bodies are valid kio-encoded requests with one field patched into a lie.
"""

from __future__ import annotations

import struct
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from hostile_util import (
    CANARY_TOPIC,
    create_topic,
    expect_closed,
    fetch,
    make_broker_fixtures,
    produce,
)
from rawclient import (
    RawClient,
    create_topics_request,
    encode_request,
    frame,
    metadata_request,
    request_cls,
)

from odradek.errors import ErrorCode
from odradek.fuzz.harness import process_rss_mb
from odradek.storage.batch import parse_batches
from odradek.storage.records import encode_batch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FETCH_MAX_BYTES = 65536
PER_REQUEST = 100
MAX_ELEMENTS = 1000

broker, preexisting, still_serving = make_broker_fixtures(
    "hostile",
    {
        "fetch.max.bytes": str(FETCH_MAX_BYTES),
        "odradek.max.partitions.per.request": str(PER_REQUEST),
        "odradek.request.max.elements": str(MAX_ELEMENTS),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "2",
    },
)


@pytest.fixture
def rc(broker: Any) -> Iterator[RawClient]:
    with RawClient.to(broker.bootstrap_servers) as c:
        yield c


def _patched(entity: Any, old_tail: bytes, new_tail: bytes) -> bytes:
    """The framed request with its body's last ``len(old_tail)`` bytes replaced."""
    payload = encode_request(entity, 9)
    assert payload.endswith(old_tail), payload[-16:].hex()
    return frame(payload[: len(payload) - len(old_tail)] + new_tail)


def _mod(api_key: int, version: int) -> Any:
    """The kio module of (api_key, version): its nested request classes."""
    return sys.modules[request_cls(api_key, version).__module__]


def _create_partitions(rc: RawClient, name: str, count: int, *, validate_only: bool) -> Any:
    """One CreatePartitions v3 for ``name``; its result entry."""
    m = _mod(37, 3)
    req = m.CreatePartitionsRequest(  # type: ignore[attr-defined]
        topics=(m.CreatePartitionsTopic(name=name, count=count, assignments=None),),  # type: ignore[attr-defined]
        timeout=timedelta(seconds=1),
        validate_only=validate_only,
    )
    return rc.request(req).results[0]


def _still_answers(c: RawClient) -> None:
    """The connection survived: the next request on it is answered."""
    assert c.request(metadata_request(["data"])).topics[0].error_code == ErrorCode.none


# =============================================================================== decoding
def test_sync_group_compact_array_of_2_pow_32_closes(rc: RawClient) -> None:
    # The 217-byte request that made kio ask for 34 GB and abort the broker: a compact
    # array length of ff ff ff ff 0f (2^32 - 2 elements) with nothing after it.
    req = request_cls(14, 5)(
        group_id="g",
        generation_id=1,
        member_id="m",
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )
    rc.send_raw(_patched(req, b"\x01\x00", b"\xff\xff\xff\xff\x0f\x00"))
    expect_closed(rc)


@pytest.mark.parametrize(
    "version, empty, lie",
    [
        # body: topics (compact count 0 -> 01), two bools, empty tagged fields
        (12, b"\x01\x00\x00\x00", b"\xff\xff\xff\xff\x0f\x00\x00\x00"),  # compact count
        (12, b"\x01\x00\x00\x00", b"\xff\xff\xff\xff\xff\x01\x00\x00\x00"),  # 6-byte varint
        (1, b"\x00\x00\x00\x00", b"\x7f\xff\xff\xff"),  # int32 count 2^31-1
        (12, b"\x01\x00\x00\x00", b"\x01\x00\x00\x01\x05\x7f\x00"),  # tagged field past the end
    ],
)
def test_metadata_count_and_varint_lies_close(
    rc: RawClient, version: int, empty: bytes, lie: bytes
) -> None:
    req = request_cls(3, 1)(topics=()) if version == 1 else metadata_request([], version=version)
    rc.send_raw(_patched(req, empty, lie))
    expect_closed(rc)


def test_string_length_past_the_frame_closes(rc: RawClient) -> None:
    req = request_cls(3, 1)(topics=(_mod(3, 1).MetadataRequestTopic(name="abc"),))
    rc.send_raw(_patched(req, b"\x00\x03abc", b"\x7f\xffabc"))
    expect_closed(rc)


def test_produce_records_length_lie_closes(rc: RawClient) -> None:
    batch = encode_batch([(None, b"r" * 100)])
    from rawclient import produce_request

    payload = encode_request(produce_request("data", 0, batch, version=9), 5)
    i = payload.index(batch)
    # The compact length just before the records says 2^31; only the batch follows.
    lie = payload[: i - 1] + b"\x80\x80\x80\x80\x08" + payload[i:]
    rc.send_raw(frame(lie))
    expect_closed(rc)


def test_batch_length_past_the_records_is_corrupt_message(rc: RawClient, topic_name: str) -> None:
    # The batch's own length field says 2^31-16 bytes; only its ~150 bytes were sent.
    # Kafka's batch reader finds no whole batch there (CORRUPT_MESSAGE); the size limit
    # (MESSAGE_TOO_LARGE) is for batches that are all there.
    create_topic(rc, topic_name, 1)
    b = bytearray(encode_batch([(None, b"r" * 100)]))
    struct.pack_into(">i", b, 8, 2**31 - 16)
    assert produce(rc, topic_name, 0, bytes(b)).error_code == ErrorCode.corrupt_message
    _still_answers(rc)


@pytest.mark.parametrize("version", [5, 7])
def test_join_group_with_null_protocols_closes(rc: RawClient, version: int) -> None:
    # Non-nullable in Kafka's schema: its generated reader refuses it as malformed. It
    # used to reach the handler and raise TypeError there.
    ten_s = timedelta(seconds=10)
    req = request_cls(11, version)(
        group_id="g",
        session_timeout=ten_s,
        rebalance_timeout=ten_s,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(),
    )
    if version == 5:
        data = _patched(req, b"\x00\x00\x00\x00", b"\xff\xff\xff\xff")
    else:
        data = _patched(req, b"\x01\x00", b"\x00\x00")
    rc.send_raw(data)
    expect_closed(rc)


def test_more_array_elements_than_the_limit_closes(rc: RawClient) -> None:
    topic_cls = _mod(3, 1).MetadataRequestTopic
    ok = request_cls(3, 1)(topics=tuple(topic_cls(name="data") for _ in range(MAX_ELEMENTS)))
    r = rc.request(ok)
    assert len(r.topics) == MAX_ELEMENTS
    too_many = request_cls(3, 1)(
        topics=tuple(topic_cls(name="data") for _ in range(MAX_ELEMENTS + 1))
    )
    rc.send(too_many)
    expect_closed(rc)


# =============================================================================== fetch
def test_fetch_is_capped_by_broker_fetch_max_bytes(rc: RawClient, topic_name: str) -> None:
    create_topic(rc, topic_name, 1)
    for _ in range(8):
        assert produce(rc, topic_name, 0, encode_batch([(None, b"f" * 20000)])).error_code == 0
    # max_bytes and partition_max_bytes of 2^31-1, as in the issue: the broker's
    # fetch.max.bytes caps the answer (Kafka's KafkaApis.handleFetchRequest).
    p = fetch(rc, topic_name, 0, 0, max_bytes=0x7FFFFFFF)
    data = bytes(p.records)
    assert 0 < len(data) <= FETCH_MAX_BYTES
    assert len(parse_batches(data)) == FETCH_MAX_BYTES // 20100
    # The first batch still comes whole when it alone exceeds the cap (KIP-74).
    big = encode_batch([(None, b"B" * 90000)])
    assert produce(rc, topic_name, 0, big).error_code == 0
    p = fetch(rc, topic_name, 0, 8, max_bytes=0x7FFFFFFF)
    assert len(bytes(p.records)) == len(big)


# =============================================================================== topics
def test_client_produce_to_internal_topic_is_refused(rc: RawClient) -> None:
    # Kafka: INVALID_TOPIC_EXCEPTION "Cannot append to internal topic".
    from rawclient import produce_request

    r = rc.request(request_cls(10, 3)(key="g", key_type=0))  # creates __consumer_offsets
    assert r.error_code in (ErrorCode.none, ErrorCode.coordinator_not_available)
    resp = rc.request(produce_request("__consumer_offsets", 0, encode_batch([(b"k", b"v")])))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_topic_exception
    m = _mod(21, 2)
    topic = m.DeleteRecordsTopic(
        name="__consumer_offsets",
        partitions=(m.DeleteRecordsPartition(partition_index=0, offset=-1),),
    )
    r = rc.request(m.DeleteRecordsRequest(topics=(topic,), timeout=timedelta(seconds=1)))
    assert r.topics[0].partitions[0].error_code == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize("name", ["abc\n", "a\nb", "\n", "..", "../x", "a/../b"])
def test_illegal_names_never_reach_zookeeper(broker: Any, rc: RawClient, name: str) -> None:
    r = rc.request(create_topics_request([(name, 1, 1, {})]))
    assert r.topics[0].error_code == ErrorCode.invalid_topic_exception
    m = rc.request(metadata_request([name], allow_auto_topic_creation=True))
    assert m.topics[0].error_code == ErrorCode.invalid_topic_exception
    # DeleteTopics / CreatePartitions of a name that cannot exist: Kafka's answer for an
    # unknown topic (they raised kazoo's ValueError and closed the connection).
    d = rc.request(request_cls(20, 4)(topic_names=(name,), timeout=timedelta(seconds=1)))
    assert d.responses[0].error_code == ErrorCode.unknown_topic_or_partition
    c = _create_partitions(rc, name, 3, validate_only=False)
    assert c.error_code == ErrorCode.unknown_topic_or_partition
    _still_answers(rc)
    assert name not in broker.zk_client().get_children("/brokers/topics")


def test_huge_partition_counts_are_refused_before_any_work(
    broker: Any, rc: RawClient, topic_name: str
) -> None:
    rss0 = process_rss_mb(broker.broker(1).pid)
    for n in (0x7FFFFFFF, 100_000, PER_REQUEST + 1):
        t0 = time.monotonic()
        r = rc.request(create_topics_request([(topic_name, n, 1, {})], validate_only=True))
        assert r.topics[0].error_code == ErrorCode.policy_violation, r.topics[0]
        assert r.topics[0].error_message == "Unable to perform excessively large batch operation."
        r = rc.request(create_topics_request([(topic_name, n, 1, {})]))
        assert r.topics[0].error_code == ErrorCode.policy_violation
        # Refused before any per-partition work (which for 2^31 partitions would take
        # hours); generous for a loaded machine.
        assert time.monotonic() - t0 < 30
    # The cap is per request, as Kafka's: two topics of 60 fail together, nothing created.
    r = rc.request(create_topics_request([(topic_name, 60, 1, {}), (topic_name + "b", 60, 1, {})]))
    assert [t.error_code for t in r.topics] == [ErrorCode.policy_violation] * 2
    m = rc.request(metadata_request([topic_name, topic_name + "b"]))
    assert {t.error_code for t in m.topics} == {ErrorCode.unknown_topic_or_partition}
    # CreatePartitions counts the partitions it adds.
    create_topic(rc, topic_name, 1)
    for count in (0x7FFFFFFF, PER_REQUEST + 2):
        c = _create_partitions(rc, topic_name, count, validate_only=True)
        assert c.error_code == ErrorCode.policy_violation
    assert (
        _create_partitions(rc, topic_name, PER_REQUEST + 1, validate_only=True).error_code
        == ErrorCode.none
    )
    assert process_rss_mb(broker.broker(1).pid) - rss0 < 30


# =============================================================================== SASL, ACLs
def test_sasl_apis_answer_illegal_sasl_state(rc: RawClient) -> None:
    for version in (0, 1):
        r = rc.request(request_cls(17, version)(mechanism="PLAIN"))
        assert r.error_code == ErrorCode.illegal_sasl_state
        assert tuple(r.mechanisms) == ()
    for version in (0, 1, 2):
        r = rc.request(request_cls(36, version)(auth_bytes=b"\x00user\x00pw"))
        assert r.error_code == ErrorCode.illegal_sasl_state


def test_acl_apis_answer_security_disabled(broker: Any, rc: RawClient) -> None:
    d = request_cls(29, 2)(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    r = rc.request(d)
    assert r.error_code == ErrorCode.security_disabled
    assert r.error_message == "No Authorizer is configured on the broker"
    cm = _mod(30, 3)
    cc = cm.CreateAclsRequest
    creation = cm.AclCreation(
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:x",
        host="*",
        operation=2,
        permission_type=3,
    )
    r = rc.request(cc(creations=(creation, creation)))
    assert [x.error_code for x in r.results] == [ErrorCode.security_disabled] * 2
    dm = _mod(31, 3)
    dc = dm.DeleteAclsRequest
    flt = dm.DeleteAclsFilter(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    r = rc.request(dc(filters=(flt,)))
    assert [x.error_code for x in r.filter_results] == [ErrorCode.security_disabled]
    # A real client sees Kafka's answer too (it only sends what ApiVersions advertises).
    # librdkafka drops DescribeAcls' top-level error code (against Kafka as well): an
    # empty listing; CreateAcls propagates it.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    acl_filter = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(acl_filter, request_timeout=10).result(timeout=20) == []
    binding = AclBinding(
        ResourceType.TOPIC,
        "t",
        ResourcePatternType.LITERAL,
        "User:x",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for fut in admin.create_acls([binding], request_timeout=10).values():
        with pytest.raises(KafkaException) as e:
            fut.result(timeout=20)
        assert e.value.args[0].code() == ErrorCode.security_disabled.value


def test_canary_topic_untouched(rc: RawClient) -> None:
    m = rc.request(metadata_request([CANARY_TOPIC]))
    assert m.topics[0].error_code == ErrorCode.none


def test_unanswerable_frame_after_good_ones_keeps_order(rc: RawClient) -> None:
    # Pipelined: two good requests, then a lie. Both answers come, in order, then close.
    good = [frame(encode_request(metadata_request(["data"]), cid)) for cid in (31, 32)]
    req = request_cls(14, 5)(
        group_id="g",
        generation_id=1,
        member_id="m",
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )
    rc.send_raw(b"".join(good) + _patched(req, b"\x01\x00", b"\xff\xff\xff\xff\x0f\x00"))
    assert rc.receive(3, 12, 31).topics[0].error_code == 0
    assert rc.receive(3, 12, 32).topics[0].error_code == 0
    expect_closed(rc)


def test_int32_lie_in_fetch_partitions_closes(rc: RawClient) -> None:
    m = _mod(1, 11)
    req = m.FetchRequest(
        replica_id=-1,
        max_wait=timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        topics=(
            m.FetchTopic(
                topic="data",
                partitions=(
                    m.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    payload = encode_request(req, 3)
    # v11 (non-flexible): topics count, topic name, partitions count (int32 = 1).
    i = payload.index(struct.pack(">h", 4) + b"data") + 6
    assert payload[i : i + 4] == b"\x00\x00\x00\x01"
    rc.send_raw(frame(payload[:i] + b"\x7f\xff\xff\xff" + payload[i + 4 :]))
    expect_closed(rc)


# =============================================================================== decompression
@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """One valid, CRC-correct gzip batch of ~100 KB whose single record holds 200 MB."""
    from odradek.storage.records import COMPRESSION_GZIP

    return encode_batch([(b"k", bytes(200 << 20))], compression=COMPRESSION_GZIP)


def test_decompression_bomb_to_compacted_topic_is_refused(
    broker: Any, rc: RawClient, topic_name: str, gzip_bomb: bytes
) -> None:
    # Compacted topics decompress on produce (keys are required): the batch may not
    # expand past 64 MiB.
    create_topic(rc, topic_name, 1, {"cleanup.policy": "compact"})
    rss0 = process_rss_mb(broker.broker(1).pid)
    r = produce(rc, topic_name, 0, gzip_bomb)
    assert r.error_code == ErrorCode.corrupt_message
    assert process_rss_mb(broker.broker(1).pid) - rss0 < 100
    assert produce(rc, topic_name, 0, encode_batch([(b"k", b"v")])).error_code == 0


def test_list_offsets_by_time_over_a_stored_bomb(
    broker: Any, rc: RawClient, topic_name: str, gzip_bomb: bytes
) -> None:
    # Ordinary topics store batches without decompressing; ListOffsets by timestamp then
    # decodes the batch it lands in (to find the exact record) -- bounded too.
    from rawclient import list_offsets_request

    from odradek.storage.records import MAX_DECOMPRESSED_BATCH_BYTES

    create_topic(rc, topic_name, 1)
    assert produce(rc, topic_name, 0, gzip_bomb).error_code == 0
    rss0 = process_rss_mb(broker.broker(1).pid)
    r = rc.request(list_offsets_request(topic_name, 0, 1))
    p = r.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none and p.offset == 0
    # The decode stops at MAX_DECOMPRESSED_BATCH_BYTES (64 MiB); zlib's output buffer
    # holds its blocks and their joined copy at once, so the peak may reach twice that
    # (CI saw +127 MB once). Unbounded, the 200 MB record would cost at least 200 MB.
    limit_mb = MAX_DECOMPRESSED_BATCH_BYTES >> 20
    assert process_rss_mb(broker.broker(1).pid) - rss0 < 2 * limit_mb + 32
