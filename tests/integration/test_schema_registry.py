"""``odradek schema-registry`` against confluent-kafka's own SchemaRegistryClient and its
Avro, JSON Schema and Protobuf serializers, records round-tripping through a real cluster;
Confluent's REST semantics (versions, deletes, config, mode, error codes); ids kept across
a restart (the ``_schemas`` topic is the only state); a secondary forwarding writes to the
ZooKeeper-elected primary and taking over when it dies; hostile bodies answered with 4xx."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from schema_registry_util import RegistryProcess, http, start_registry
from tests.support.polling import wait_until
from tests.support.topics import create_topic

from odradek.cluster.local import LocalCluster

pytestmark = pytest.mark.integration

USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "t",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_V2 = {
    **USER_V1,
    "fields": [*USER_V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}
USER_BAD = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "email", "type": "string"}]}


@pytest.fixture(scope="module")
def registry(cluster: LocalCluster) -> Iterator[RegistryProcess]:
    reg = start_registry(cluster, 8081, zookeeper=True)
    try:
        yield reg
    finally:
        reg.stop()


def _round_trip(
    cluster: LocalCluster, topic: str, serialize: Any, deserialize: Any, values: list[Any]
) -> list[Any]:
    create_topic(cluster.bootstrap_servers, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for v in values:
        producer.produce(topic, value=serialize(v, ctx))
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": topic,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    try:

        def all_read() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                assert msg.value()[0] == 0  # Confluent's framing: magic byte 0 + 4-byte id
                got.append(deserialize(msg.value(), ctx))
            return len(got) >= len(values)

        wait_until(all_read, f"{len(values)} records of {topic}", timeout=60)
    finally:
        consumer.close()
    return got


def test_avro_round_trip_and_a_refused_change(
    cluster: LocalCluster, registry: RegistryProcess, topic_name: str
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    ser_v1 = AvroSerializer(client, json.dumps(USER_V1))
    ser_v2 = AvroSerializer(client, json.dumps(USER_V2))
    de = AvroDeserializer(client)
    records = [{"name": "ann", "age": 31}, {"name": "bo", "age": 7}]

    def serialize(v: dict[str, Any], ctx: SerializationContext) -> bytes:
        return (ser_v2 if "email" in v else ser_v1)(v, ctx)

    got = _round_trip(
        cluster, topic_name, serialize, de, records + [{"name": "cy", "age": 3, "email": "c@y"}]
    )
    assert got == [{**r} for r in records] + [{"name": "cy", "age": 3, "email": "c@y"}]
    subject = f"{topic_name}-value"
    assert client.get_versions(subject) == [1, 2]
    latest = client.get_latest_version(subject)
    assert (
        latest.version == 2 and json.loads(latest.schema.schema_str)["fields"][2]["name"] == "email"
    )
    # A field without a default breaks BACKWARD: Confluent's 409.
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(subject, Schema(json.dumps(USER_BAD), "AVRO"))
    assert e.value.http_status_code == 409 and e.value.error_code == 409
    check = client.test_compatibility(subject, Schema(json.dumps(USER_BAD), "AVRO"))
    assert check is False
    # ... accepted once the subject's level is NONE.
    client.set_compatibility(subject, "NONE")
    assert client.get_compatibility(subject) == "NONE"
    assert client.register_schema(subject, Schema(json.dumps(USER_BAD), "AVRO")) > 0
    # The same schema under another subject keeps its id.
    v1_id = client.lookup_schema(subject, Schema(json.dumps(USER_V1), "AVRO")).schema_id
    assert client.register_schema("elsewhere-value", Schema(json.dumps(USER_V1), "AVRO")) == v1_id


def test_json_and_protobuf_serializers_round_trip(
    cluster: LocalCluster, registry: RegistryProcess, topic_name: str
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Point",
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x"],
    }
    ser = JSONSerializer(json.dumps(schema), client)
    de = JSONDeserializer(None, schema_registry_client=client)
    points = [{"x": 1, "y": 2}, {"x": -5}]
    assert _round_trip(cluster, topic_name + "-json", ser, de, points) == points
    latest = client.get_latest_version(f"{topic_name}-json-value")
    assert latest.schema.schema_type == "JSON"

    fd = descriptor_pb2.FileDescriptorProto(
        name=f"{topic_name}.proto", package="odr", syntax="proto3"
    )
    m = fd.message_type.add(name="Reading")
    m.field.add(name="sensor", number=1, type=9, label=1)
    m.field.add(name="value", number=2, type=1, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    reading = message_factory.GetMessageClass(pool.FindMessageTypeByName("odr.Reading"))
    pser = ProtobufSerializer(reading, client, {"use.deprecated.format": False})
    pde = ProtobufDeserializer(reading, {"use.deprecated.format": False})
    msgs = [reading(sensor="a", value=1.5), reading(sensor="b", value=-2.0)]
    got = _round_trip(cluster, topic_name + "-proto", pser, pde, msgs)
    assert [(g.sensor, g.value) for g in got] == [("a", 1.5), ("b", -2.0)]
    subject = f"{topic_name}-proto-value"
    assert client.get_latest_version(subject).schema.schema_type == "PROTOBUF"
    # Field 2 reused with another type: refused; a new field: accepted.
    text = 'syntax = "proto3";\npackage odr;\nmessage Reading {\n  string sensor = 1;\n  %s\n}\n'
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(subject, Schema(text % "string value = 2;", "PROTOBUF"))
    assert e.value.http_status_code == 409
    assert (
        client.register_schema(
            subject, Schema(text % "double value = 2;\n  int64 at = 3;", "PROTOBUF")
        )
        > 0
    )


def test_rest_api_versions_deletes_config_and_mode(registry: RegistryProcess) -> None:
    url, s = registry.url, "rest-subject"
    # Schemas of their own (ids are global: the other tests' subjects share USER_V1's).
    user_v1, user_v2 = ({**u, "namespace": "rest"} for u in (USER_V1, USER_V2))
    v1 = {"schema": json.dumps(user_v1)}
    assert http(url, "POST", f"/subjects/{s}/versions", v1)[0] == 200
    assert http(url, "POST", f"/subjects/{s}/versions", {"schema": json.dumps(user_v2)})[0] == 200
    assert http(url, "GET", f"/subjects/{s}/versions") == (200, [1, 2])
    st, got = http(url, "GET", f"/subjects/{s}/versions/1")
    assert st == 200 and got["version"] == 1 and "schemaType" not in got
    st, text = http(url, "GET", f"/subjects/{s}/versions/latest/schema")
    assert st == 200 and text == user_v2
    st, found = http(url, "POST", f"/subjects/{s}", v1)
    assert st == 200 and found["version"] == 1
    schema_id = found["id"]
    assert http(url, "GET", f"/schemas/ids/{schema_id}/versions")[1] == [
        {"subject": s, "version": 1}
    ]
    assert http(url, "GET", "/schemas/types")[1] == ["JSON", "PROTOBUF", "AVRO"]
    # Confluent's error codes.
    assert http(url, "GET", "/subjects/nope/versions")[1]["error_code"] == 40401
    assert http(url, "GET", f"/subjects/{s}/versions/9")[1]["error_code"] == 40402
    assert http(url, "GET", "/schemas/ids/987654")[1]["error_code"] == 40403
    assert http(url, "GET", f"/subjects/{s}/versions/zero")[1]["error_code"] == 42202
    st, err = http(url, "POST", f"/subjects/{s}/versions", {"schema": "{nope"})
    assert (st, err["error_code"]) == (422, 42201)
    st, verbose = http(
        url,
        "POST",
        f"/compatibility/subjects/{s}/versions/latest?verbose=true",
        {"schema": json.dumps({**USER_BAD, "namespace": "rest"})},
    )
    assert st == 200 and verbose["is_compatible"] is False and verbose["messages"]
    # Soft delete, then hard delete; the version sequence continues after a soft delete.
    assert http(url, "DELETE", f"/subjects/{s}/versions/2?permanent=true")[1]["error_code"] == 40407
    assert http(url, "DELETE", f"/subjects/{s}/versions/2") == (200, 2)
    assert http(url, "DELETE", f"/subjects/{s}/versions/2")[1]["error_code"] == 40406
    assert http(url, "GET", f"/subjects/{s}/versions") == (200, [1])
    assert http(url, "GET", f"/subjects/{s}/versions?deleted=true") == (200, [1, 2])
    assert http(url, "DELETE", f"/subjects/{s}/versions/2?permanent=true") == (200, 2)
    assert http(url, "GET", f"/subjects/{s}/versions?deleted=true") == (200, [1])
    assert http(url, "DELETE", f"/subjects/{s}?permanent=true")[1]["error_code"] == 40405
    assert http(url, "PUT", f"/config/{s}", {"compatibility": "NONE"})[0] == 200
    assert http(url, "DELETE", f"/subjects/{s}") == (200, [1])
    assert http(url, "GET", f"/config/{s}")[1]["error_code"] == 40408  # went with it
    assert s not in http(url, "GET", "/subjects")[1]
    assert s in http(url, "GET", "/subjects?deleted=true")[1]
    assert http(url, "POST", f"/subjects/{s}/versions", v1) == (200, {"id": schema_id})
    assert http(url, "GET", f"/subjects/{s}/versions") == (200, [2])
    # Config: global and per subject; a bad level is 42203.
    assert http(url, "GET", "/config")[1] == {"compatibilityLevel": "BACKWARD"}
    assert http(url, "GET", f"/config/{s}")[1]["error_code"] == 40408
    assert http(url, "PUT", f"/config/{s}", {"compatibility": "FULL_TRANSITIVE"})[0] == 200
    assert http(url, "GET", f"/config/{s}")[1] == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert http(url, "PUT", f"/config/{s}", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203
    assert http(url, "DELETE", f"/config/{s}")[1] == {"compatibilityLevel": "FULL_TRANSITIVE"}
    # Mode: READONLY refuses writes (42205); IMPORT needs force on a non-empty registry.
    assert http(url, "PUT", f"/mode/{s}", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    st, err = http(url, "POST", f"/subjects/{s}/versions", {"schema": json.dumps(user_v2)})
    assert (st, err["error_code"]) == (422, 42205)
    assert http(url, "DELETE", f"/mode/{s}")[1] == {"mode": "READONLY"}
    assert http(url, "GET", "/mode")[1] == {"mode": "READWRITE"}
    assert http(url, "PUT", "/mode", {"mode": "IMPORT"})[1]["error_code"] == 42205
    assert http(url, "PUT", "/mode", {"mode": "BOGUS"})[1]["error_code"] == 42204


def test_import_mode_keeps_given_ids_and_versions(registry: RegistryProcess) -> None:
    """IMPORT (migrating schemas from another registry): a registration keeps the id and
    version it carries; an id already holding another schema is refused (42205); ids
    handed out afterwards continue above the imported ones."""
    url, s = registry.url, "imported"
    assert http(url, "PUT", f"/mode/{s}", {"mode": "IMPORT"})[1] == {"mode": "IMPORT"}
    body = {"schema": '"float"', "id": 5000, "version": 7}
    assert http(url, "POST", f"/subjects/{s}/versions", body) == (200, {"id": 5000})
    got = http(url, "GET", f"/subjects/{s}/versions/7")[1]
    assert (got["id"], got["version"], got["schema"]) == (5000, 7, '"float"')
    st, err = http(url, "POST", f"/subjects/{s}/versions", {"schema": '"double"', "id": 5000})
    assert (st, err["error_code"]) == (422, 42205)
    # Outside IMPORT mode an id that is not the schema's own is refused too.
    st, err = http(url, "POST", "/subjects/not-imported/versions", {"schema": '"null"', "id": 4999})
    assert (st, err["error_code"]) == (422, 42205)
    assert http(url, "DELETE", f"/mode/{s}")[0] == 200
    st, fresh = http(url, "POST", "/subjects/after-import/versions", {"schema": '"boolean"'})
    assert st == 200 and fresh["id"] == 5001


def test_avro_references_are_stored_and_resolved(registry: RegistryProcess) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "ref",
        "fields": [{"name": "street", "type": "string"}],
    }
    client.register_schema("ref-address", Schema(json.dumps(address), "AVRO"))
    person = {
        "type": "record",
        "name": "Person",
        "namespace": "ref",
        "fields": [{"name": "home", "type": "ref.Address"}],
    }
    refs = [SchemaReference("ref.Address", "ref-address", 1)]
    pid = client.register_schema("ref-person", Schema(json.dumps(person), "AVRO", refs))
    got = client.get_schema(pid)
    assert [(r.name, r.subject, r.version) for r in got.references] == [
        ("ref.Address", "ref-address", 1)
    ]
    st, err = http(
        registry.url, "POST", "/subjects/ref-orphan/versions", {"schema": json.dumps(person)}
    )
    assert (st, err["error_code"]) == (422, 42201)  # ref.Address unknown without the reference
    # A referenced version cannot be deleted while something uses it.
    st, err = http(registry.url, "DELETE", "/subjects/ref-address/versions/1")
    assert (st, err["error_code"]) == (422, 42206)
    assert http(registry.url, "GET", "/subjects/ref-address/versions/1/referencedby")[1] == [pid]


def test_restart_keeps_ids(cluster: LocalCluster) -> None:
    topic = "_schemas_restart"
    reg = start_registry(cluster, 8082, topic=topic)
    try:
        ids = {}
        for i in range(3):
            schema = {"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": "int"}]}
            st, body = http(
                reg.url, "POST", f"/subjects/s{i}/versions", {"schema": json.dumps(schema)}
            )
            assert st == 200
            ids[f"s{i}"] = body["id"]
        http(reg.url, "PUT", "/config", {"compatibility": "FORWARD"})
    finally:
        reg.stop()
    reg = start_registry(cluster, 8082, topic=topic)
    try:
        for s, schema_id in ids.items():
            assert http(reg.url, "GET", f"/subjects/{s}/versions/1")[1]["id"] == schema_id
        assert http(reg.url, "GET", "/config")[1] == {"compatibilityLevel": "FORWARD"}
        st, body = http(reg.url, "POST", "/subjects/new/versions", {"schema": '"string"'})
        assert st == 200 and body["id"] == max(ids.values()) + 1
    finally:
        reg.stop()


def test_refuses_a_topic_that_is_not_compacted(cluster: LocalCluster) -> None:
    """As Confluent: a schemas topic that deletes old records (or has several partitions)
    would lose or reorder schemas, so the registry refuses to start on it."""
    bs = cluster.bootstrap_servers
    create_topic(bs, "_schemas_deleting", config={"cleanup.policy": "delete"})
    create_topic(bs, "_schemas_two", partitions=2, config={"cleanup.policy": "compact"})
    for topic, why in (
        ("_schemas_deleting", r"cleanup\.policy=delete"),
        ("_schemas_two", "2 partitions"),
    ):
        with pytest.raises(AssertionError, match=why):
            reg = start_registry(cluster, 8086, topic=topic)
            reg.stop()  # it should not have started


def test_secondary_forwards_writes_and_takes_over(cluster: LocalCluster) -> None:
    topic = "_schemas_ha"
    first = start_registry(cluster, 8083, zookeeper=True, topic=topic)
    second = start_registry(cluster, 8084, zookeeper=True, topic=topic)
    try:
        # Written through the secondary, readable on both at once (read-your-writes).
        st, body = http(second.url, "POST", "/subjects/ha/versions", {"schema": '"int"'})
        assert st == 200
        assert "is the primary" in first.log.read_text()
        assert http(second.url, "GET", "/subjects/ha/versions/1")[1]["id"] == body["id"]
        assert http(first.url, "GET", "/subjects/ha/versions/1")[1]["id"] == body["id"]
        first.kill()  # its ZooKeeper session expires; the secondary wins the election
        # Until then a write forwarded to the dead primary is Confluent's 50003, in JSON.
        st, err = http(second.url, "POST", "/subjects/ha2/versions", {"schema": '"long"'})
        assert st == 200 or (isinstance(err, dict) and err["error_code"] == 50003), (st, err)

        def registered() -> Any:
            st, b = http(
                second.url, "POST", "/subjects/ha2/versions", {"schema": '"long"'}, timeout=10
            )
            return b if st == 200 else None

        after = wait_until(
            registered, "the secondary taking over writes", timeout=60, retry_on=(OSError,)
        )
        assert after["id"] == body["id"] + 1
    finally:
        first.stop()
        second.stop()


def test_hostile_bodies_get_4xx(registry: RegistryProcess) -> None:
    url = registry.url
    st, err = http(url, "POST", "/subjects/h/versions", raw=b"{" * 10)
    assert st == 400 and err["error_code"] == 400
    st, _ = http(url, "POST", "/subjects/h/versions", raw=b"x" * (5 * 1024 * 1024))
    assert st == 413
    st, err = http(url, "POST", "/subjects/h/versions", {"schema": 12})
    assert st == 422
    deep = "[" * 100000 + "]" * 100000
    assert http(url, "POST", "/subjects/h/versions", {"schema": deep})[0] == 422
    assert http(url, "POST", "/subjects/h/versions", raw=b"\xff\xfe")[0] == 400
    # A body nested past the JSON decoder's recursion limit, and fields of the wrong type.
    assert http(url, "POST", "/subjects/h/versions", raw=b"[" * 200000)[0] == 400
    assert http(url, "POST", "/subjects/h", raw=b'{"a":' * 100000)[0] == 400
    bad_id = {"schema": '"int"', "id": [1]}
    assert http(url, "POST", "/subjects/h/versions", bad_id)[0] == 422
    bad_refs = {"schema": '"int"', "references": [{"name": 1}]}
    assert http(url, "POST", "/subjects/h/versions", bad_refs)[0] == 422
    assert http(url, "GET", "/schemas/ids/notanumber")[0] == 404
    assert http(url, "GET", "/subjects")[0] == 200  # still serving


def test_reference_fan_out_is_linear(registry: RegistryProcess) -> None:
    """Each level references the one below twice: resolving references naively is 2^depth
    parses (a hostile chain of 24 levels: 16 million); each distinct one is parsed once."""
    url = registry.url
    assert http(url, "POST", "/subjects/fan-0/versions", {"schema": '"string"'})[0] == 200
    for i in range(1, 25):
        refs = [{"name": f"r{i}{k}", "subject": f"fan-{i - 1}", "version": 1} for k in "ab"]
        body = {"schema": json.dumps({"type": "fixed", "name": f"F{i}", "size": i}),
                "references": refs}  # fmt: skip
        st, got = http(url, "POST", f"/subjects/fan-{i}/versions", body, timeout=20)
        assert st == 200, (i, got)


def test_cli_schemas(registry: RegistryProcess, tmp_path: Any) -> None:
    def odradek(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "odradek", "schemas", "--url", registry.url, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    f = tmp_path / "user.avsc"
    f.write_text(json.dumps(USER_V1))
    r = odradek("register", "cli-value", str(f))
    assert r.returncode == 0 and "id" in json.loads(r.stdout), r.stderr
    assert "cli-value" in json.loads(odradek("list").stdout)
    assert json.loads(odradek("get", "cli-value").stdout)["version"] == 1
    bad = tmp_path / "bad.avsc"
    bad.write_text(json.dumps(USER_BAD))
    r = odradek("check", "cli-value", str(bad))
    assert r.returncode == 1 and json.loads(r.stdout)["is_compatible"] is False
    r = odradek("register", "cli-value", str(bad))
    assert r.returncode == 1 and "409" in r.stderr
    assert json.loads(odradek("config", "cli-value", "--set", "NONE").stdout) == {
        "compatibility": "NONE"
    }
    assert json.loads(odradek("delete", "cli-value").stdout) == [1]
    r = odradek("get", "cli-value")
    assert r.returncode == 1 and "40401" in r.stderr


def test_cli_finds_the_registry_through_the_cluster(
    cluster: LocalCluster, registry: RegistryProcess
) -> None:
    """--bootstrap-server: the brokers' zookeeper.connect, then the elected primary's URL."""
    r = subprocess.run(
        [sys.executable, "-m", "odradek", "schemas", "--bootstrap-server",
         cluster.bootstrap_servers, "config"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"compatibilityLevel": "BACKWARD"}
    r = subprocess.run(
        [sys.executable, "-m", "odradek", "schemas", "--bootstrap-server",
         cluster.bootstrap_servers, "--topic", "_no_such_registry", "list"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0 and "no schema registry for _no_such_registry" in r.stderr


def test_protobuf_text_schema_is_served_serialized(registry: RegistryProcess) -> None:
    """A .proto registered as text (as Java producers and the CLI do) decodes with
    confluent-kafka's ProtobufDeserializer, which asks for ``?format=serialized``."""
    client = SchemaRegistryClient({"url": registry.url})
    text = (
        'syntax = "proto3";\npackage txt;\nmessage Event {\n  string name = 1;\n'
        "  map<string, int64> counts = 2;\n  Kind kind = 3;\n}\nenum Kind { A = 0; B = 1; }\n"
    )
    schema_id = client.register_schema("txt-value", Schema(text, "PROTOBUF"))
    assert client.get_schema(schema_id).schema_str == text  # as registered, by default
    # A client of its own: confluent-kafka caches schemas by id whatever the format.
    client = SchemaRegistryClient({"url": registry.url})
    fd = descriptor_pb2.FileDescriptorProto()
    serialized = client.get_schema(schema_id, fmt="serialized").schema_str
    fd.ParseFromString(base64.b64decode(serialized))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    event = message_factory.GetMessageClass(pool.FindMessageTypeByName("txt.Event"))
    msg = event(name="n", counts={"a": 3}, kind=1)
    # Confluent's framing: magic 0, the id, the message-index path ([0]: the first message).
    framed = b"\x00" + struct.pack(">I", schema_id) + b"\x00" + msg.SerializeToString()
    de = ProtobufDeserializer(event, {"use.deprecated.format": False}, client)
    got = de(framed, SerializationContext("txt", MessageField.VALUE))
    assert (got.name, dict(got.counts), got.kind) == ("n", {"a": 3}, 1)


def test_subject_names_with_reserved_characters(registry: RegistryProcess) -> None:
    """confluent-kafka percent-encodes subject names (``/`` as ``%2F``) in paths."""
    client = SchemaRegistryClient({"url": registry.url})
    for subject in ("odd subject:ü", "with/slash", "dots.and-dashes_1"):
        schema_id = client.register_schema(subject, Schema('"bytes"', "AVRO"))
        assert client.get_versions(subject) == [1], subject
        assert client.get_latest_version(subject).schema_id == schema_id
        assert subject in client.get_subjects()
        assert client.delete_subject(subject) == [1]


def test_registry_on_a_secured_cluster(make_cluster: Any) -> None:
    """``--command-config``: the client properties ``odradek cluster up --security`` writes
    (SASL_SSL, the admin user) reach the registry's producer, reader and admin client."""
    c = make_cluster(1, security="sasl_ssl")
    assert c.client_properties is not None
    # Authentication (on by default with a SASL --command-config) is
    # test_schema_registry_security's; off here, the clients' settings alone are tested.
    reg = start_registry(c, 8085, command_config=c.client_properties,
                         extra_args=("--authentication-method", "NONE"))  # fmt: skip
    try:
        st, body = http(reg.url, "POST", "/subjects/sec/versions", {"schema": '"string"'})
        assert st == 200, body
        assert http(reg.url, "GET", "/subjects/sec/versions/1")[1]["id"] == body["id"]
    finally:
        reg.stop()
