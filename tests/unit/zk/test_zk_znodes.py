"""Znode codecs: round trips and decoding of literal samples in Kafka's format (REQ-R12)."""

from __future__ import annotations

import json
import uuid

import pytest

from odradek.errors import ErrorCode, KafkaError
from odradek.zk import znodes


def test_paths() -> None:
    assert znodes.broker_path(3) == "/brokers/ids/3"
    assert znodes.topic_path("t") == "/brokers/topics/t"
    assert znodes.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert znodes.topic_config_path("t") == "/config/topics/t"
    assert znodes.delete_topic_path("t") == "/admin/delete_topics/t"
    assert znodes.CLUSTER_ID == "/cluster/id"


def test_broker_registration_kafka_sample() -> None:
    sample = (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://127.0.0.2:9092"],"jmx_port":-1,"port":9092,'
        b'"host":"127.0.0.2","version":5,"timestamp":"1700000000000","rack":"r1"}'
    )
    reg = znodes.decode_broker(1, sample)
    assert reg == znodes.BrokerRegistration(
        1, "127.0.0.2", 9092, ("PLAINTEXT://127.0.0.2:9092",), "r1", 1700000000000
    )
    assert json.loads(znodes.encode_broker(reg)) == json.loads(sample)


def test_broker_registration_round_trip_and_defaults() -> None:
    reg = znodes.BrokerRegistration.plaintext(7, "127.0.3.8", 9092)
    obj = json.loads(znodes.encode_broker(reg))
    assert obj["version"] == 5 and obj["jmx_port"] == -1 and "rack" not in obj
    assert isinstance(obj["timestamp"], str) and int(obj["timestamp"]) > 0  # Kafka: string ms
    back = znodes.decode_broker(7, znodes.encode_broker(reg))
    assert (back.host, back.port, back.endpoints, back.rack) == (
        reg.host,
        9092,
        reg.endpoints,
        None,
    )


def test_broker_host_from_endpoints_when_host_null() -> None:
    sample = b'{"endpoints":["SSL://10.0.0.1:9093"],"host":null,"port":-1,"version":4}'
    reg = znodes.decode_broker(2, sample)
    assert (reg.host, reg.port) == ("10.0.0.1", 9093)


def test_kafka_uuid_encoding() -> None:
    u = uuid.UUID("a0c1b5d4-1a2b-4c3d-8e9f-0123456789ab")
    s = znodes.uuid_to_kafka(u)
    assert len(s) == 22 and "=" not in s
    assert znodes.uuid_from_kafka(s) == u
    # Kafka's toString is URL-safe base64: bytes 0xfb 0xff -> '-' and '_'
    assert znodes.uuid_to_kafka(uuid.UUID(bytes=b"\xfb\xff" + bytes(14))).startswith("-_8")
    for _ in range(200):
        assert not znodes.uuid_to_kafka(znodes.new_kafka_uuid()).startswith("-")


def test_topic_kafka_sample() -> None:
    sample = (
        b'{"partitions":{"0":[1,2,3],"1":[2,3,1]},"topic_id":"3HiROyk3SFe8_XtqbIeUTw",'
        b'"adding_replicas":{},"removing_replicas":{},"version":3}'
    )
    t = znodes.decode_topic("orders", sample)
    assert t.partitions == {0: [1, 2, 3], 1: [2, 3, 1]}
    assert t.topic_id is not None and znodes.uuid_to_kafka(t.topic_id) == "3HiROyk3SFe8_XtqbIeUTw"
    assert json.loads(znodes.encode_topic(t)) == json.loads(sample)


def test_topic_old_version_without_id() -> None:
    t = znodes.decode_topic("old", b'{"version":1,"partitions":{"0":[0,1,3]}}')
    assert t.topic_id is None and t.partitions == {0: [0, 1, 3]} and t.adding_replicas == {}


def test_partition_state_kafka_sample() -> None:
    sample = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2,3]}'
    s = znodes.decode_partition_state(sample)
    assert s == znodes.PartitionState(leader=1, leader_epoch=0, isr=[1, 2, 3], controller_epoch=1)
    assert znodes.encode_partition_state(s) == sample  # byte-identical to Kafka's


def test_topic_config_and_change_notification() -> None:
    sample = b'{"version":1,"config":{"retention.ms":"1000","cleanup.policy":"delete"}}'
    assert znodes.decode_topic_config(sample) == {
        "retention.ms": "1000",
        "cleanup.policy": "delete",
    }
    assert json.loads(znodes.encode_topic_config({"retention.ms": "1000"})) == {
        "version": 1,
        "config": {"retention.ms": "1000"},
    }
    assert znodes.decode_topic_config(b"") == {}
    assert znodes.encode_config_change("topics/t") == b'{"version":2,"entity_path":"topics/t"}'
    assert znodes.decode_config_change(b'{"version":2,"entity_path":"topics/t"}') == "topics/t"


def test_controller_and_epoch() -> None:
    sample = b'{"version":2,"brokerid":1,"timestamp":"1700000000000","kraftControllerEpoch":-1}'
    c = znodes.decode_controller(sample)
    assert c == znodes.ControllerRegistration(1, 1700000000000, -1)
    assert znodes.encode_controller(c) == sample
    assert znodes.decode_controller(b'{"version":1,"brokerid":3,"timestamp":"5"}').broker_id == 3
    assert znodes.encode_controller_epoch(7) == b"7"
    assert znodes.decode_controller_epoch(b"12") == 12


def test_cluster_id_and_partition_lists() -> None:
    assert (
        znodes.encode_cluster_id("3HiROyk3SFe8_XtqbIeUTw")
        == b'{"version":"1","id":"3HiROyk3SFe8_XtqbIeUTw"}'
    )
    assert znodes.decode_cluster_id(b'{"version":"1","id":"abc"}') == "abc"
    sample = b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"u","partition":2}]}'
    assert znodes.decode_partition_list(sample) == [("t", 0), ("u", 2)]
    assert znodes.encode_partition_list([("t", 0), ("u", 2)]) == sample


@pytest.mark.parametrize("data", [b"", b"not json", b"[1]", b'{"leader":1}'])
def test_garbage_is_a_kafka_error(data: bytes) -> None:
    with pytest.raises(KafkaError) as ei:
        znodes.decode_partition_state(data)
    assert ei.value.code == ErrorCode.unknown_server_error


def test_parse_endpoint() -> None:
    assert znodes.parse_endpoint("PLAINTEXT://127.0.0.2:9092") == ("PLAINTEXT", "127.0.0.2", 9092)
    assert znodes.parse_endpoint("PLAINTEXT://[::1]:9092") == ("PLAINTEXT", "::1", 9092)
    with pytest.raises(KafkaError):
        znodes.parse_endpoint("127.0.0.2:9092")


@pytest.mark.parametrize(
    "state",
    [
        znodes.PartitionState(-1, 0, [], 1),
        znodes.PartitionState(3, 12, [3], 7),
        znodes.PartitionState(1001, 2**31 - 1, [1001, 2, 30], 2**31 - 1),
    ],
)
def test_partition_state_encoding_is_kafkas_compact_json(state: znodes.PartitionState) -> None:
    """The hand-formatted encoder (issue 13: thousands per controller batch) writes what
    json.dumps of Kafka's layout writes, byte for byte."""
    expected = json.dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": state.isr,
        },
        separators=(",", ":"),
    ).encode()
    assert znodes.encode_partition_state(state) == expected
    assert znodes.decode_partition_state(expected) == state
