"""Broker-side schema id validation (issue 27, Confluent Server's
``confluent.value.schema.validation``): a real cluster whose broker has
``confluent.schema.registry.url`` (``LocalCluster.start(schema_registry=True)``, as
``odradek cluster up`` does), the real ``odradek schema-registry``, and confluent-kafka's
AvroSerializer. Valid records are accepted; raw bytes, unknown ids and ids of another
subject are refused with INVALID_RECORD and a message the client sees; tombstones pass;
AlterConfigs turns validation on and off; an unreachable registry is a retriable error."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from rawclient import RawClient, produce_request
from replication_util import broker_views
from tests.support.polling import wait_until
from tests.support.topics import create_topic

from odradek.cluster.local import LocalCluster
from odradek.errors import ErrorCode
from odradek.server.schema_validation import NEGATIVE_TTL_S
from odradek.storage.records import encode_batch

pytestmark = pytest.mark.integration

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}],
}
PAYMENT = {
    "type": "record",
    "name": "Payment",
    "namespace": "shop",
    "fields": [{"name": "cents", "type": "long"}],
}
VALIDATE = {"confluent.value.schema.validation": "true"}


@pytest.fixture(scope="module")
def vcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    one_broker = {  # transactions on one broker (test_transactional_produce)
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "3",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "3",
    }
    c = LocalCluster.start(
        tmp_path_factory.mktemp("validating"), 1, broker_config=one_broker, schema_registry=True
    )
    try:
        yield c
    finally:
        c.down()


def _produce(
    cluster: LocalCluster,
    topic: str,
    values: list[bytes | None],
    key: bytes | None = None,
    **conf: Any,
) -> list[CKafkaError | None]:
    """Each value's delivery error (None: delivered), in order."""
    p = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "linger.ms": 0,
            "message.timeout.ms": 15000,
            **conf,
        }
    )
    out: list[CKafkaError | None] = [None] * len(values)
    for i, v in enumerate(values):

        def report(err: CKafkaError | None, _msg: Any, i: int = i) -> None:
            out[i] = err

        p.produce(topic, value=v, key=key, on_delivery=report)
        p.flush(30)  # one batch per value: each is judged alone
    assert p.flush(30) == 0
    return out


def _raw_produce(cluster: LocalCluster, topic: str, values: list[bytes | None]) -> Any:
    """The partition's Produce v9 answer (error code, message, record_errors)."""
    b = cluster.brokers[0]
    with RawClient(b.host, b.port) as rc:
        resp = rc.request(produce_request(topic, 0, encode_batch([(None, v) for v in values])))
    return resp.responses[0].partition_responses[0]


def framed(sid: int, body: bytes = b"\x02\x04ab") -> bytes:
    return b"\x00" + sid.to_bytes(4, "big") + body


def test_avro_records_pass_and_bad_ids_are_refused(vcluster: LocalCluster, topic_name: str) -> None:
    assert vcluster.schema_registry is not None
    url = vcluster.schema_registry["url"]
    state = json.loads((vcluster.dir / "cluster.json").read_text())
    assert state["schema_registry"]["url"] == url  # recorded for the tools
    create_topic(vcluster.bootstrap_servers, topic_name, config=VALIDATE, wait_leaders=True)
    client = SchemaRegistryClient({"url": url})
    ser = AvroSerializer(client, json.dumps(ORDER))
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    good = [ser({"id": i, "item": "tea"}, ctx) for i in range(3)]
    assert _produce(vcluster, topic_name, [*good, None]) == [None] * 4  # + a tombstone

    # An id registered under another subject: payments' schema.
    other = AvroSerializer(client, json.dumps(PAYMENT))(
        {"cents": 5}, SerializationContext(f"{topic_name}-payments", MessageField.VALUE)
    )
    refused = _produce(vcluster, topic_name, [b"plain bytes", framed(987_654), other])
    assert all(e is not None and e.code() == CKafkaError.INVALID_RECORD for e in refused), refused

    # What the client is told (Produce v9: error message and record_errors, KIP-467).
    order_id = int.from_bytes(good[0][1:5], "big")
    other_id = int.from_bytes(other[1:5], "big")
    r = _raw_produce(vcluster, topic_name, [good[0], b"raw", framed(987_654), other, None])
    assert r.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in r.record_errors] == [1, 2, 3]
    msgs = [e.batch_index_error_message for e in r.record_errors]
    assert "value has no schema id" in msgs[0]
    assert "value schema id 987654 is not known to the schema registry" in msgs[1]
    assert (
        f"value schema id {other_id} is not registered under subject {topic_name}-value" in msgs[2]
    )
    assert r.error_message.startswith(msgs[0]) and "(and 2 more records)" in r.error_message
    assert order_id != other_id
    # Nothing of a refused batch was appended: the log holds the 4 good records only.
    ok = _raw_produce(vcluster, topic_name, [good[1]])
    assert ok.error_code == 0 and ok.base_offset == 4


def test_alter_configs_turns_validation_on_and_off(vcluster: LocalCluster, topic_name: str) -> None:
    create_topic(vcluster.bootstrap_servers, topic_name, wait_leaders=True)
    admin = AdminClient({"bootstrap.servers": vcluster.bootstrap_servers})
    assert _raw_produce(vcluster, topic_name, [b"raw"]).error_code == 0

    def set_validation(value: str) -> None:
        res = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic_name,
            incremental_configs=[
                ConfigEntry(
                    "confluent.value.schema.validation",
                    value,
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        for f in admin.incremental_alter_configs([res]).values():
            f.result(timeout=30)

    set_validation("true")
    wait_until(
        lambda: _raw_produce(vcluster, topic_name, [b"raw"]).error_code == ErrorCode.invalid_record,
        "validation on",
        timeout=30,
    )
    desc = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic_name)])
    entries = next(iter(desc.values())).result(timeout=30)
    assert entries["confluent.value.schema.validation"].value == "true"
    assert (
        entries["confluent.value.subject.name.strategy"].value
        == "io.confluent.kafka.serializers.subject.TopicNameStrategy"
    )
    set_validation("false")
    wait_until(
        lambda: _raw_produce(vcluster, topic_name, [b"raw"]).error_code == 0,
        "validation off",
        timeout=30,
    )


def test_invalid_strategy_is_refused(vcluster: LocalCluster, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": vcluster.bootstrap_servers})
    from confluent_kafka.admin import NewTopic

    f = admin.create_topics(
        [NewTopic(topic_name, 1, 1, config={"confluent.value.subject.name.strategy": "MyStrategy"})]
    )[topic_name]
    with pytest.raises(Exception) as e:
        f.result(timeout=30)
    assert "INVALID_CONFIG" in str(e.value) or "Invalid value" in str(e.value)


def test_record_name_strategy(vcluster: LocalCluster, topic_name: str) -> None:
    strategy = "io.confluent.kafka.serializers.subject.RecordNameStrategy"
    create_topic(
        vcluster.bootstrap_servers,
        topic_name,
        wait_leaders=True,
        config={**VALIDATE, "confluent.value.subject.name.strategy": strategy},
    )
    assert vcluster.schema_registry is not None
    client = SchemaRegistryClient({"url": vcluster.schema_registry["url"]})
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    by_record = AvroSerializer(
        client, json.dumps(ORDER), conf={"subject.name.strategy": lambda _c, name: name}
    )
    by_topic = AvroSerializer(client, json.dumps(PAYMENT))  # subject <topic>-value
    v = by_record({"id": 1, "item": "x"}, ctx)  # registers Order under shop.Order
    # The id is Order's of the first test (same schema), whose subjects the broker may
    # have cached: a refusal asks the registry again once NEGATIVE_TTL_S has passed.
    wait_until(
        lambda: _raw_produce(vcluster, topic_name, [v]).error_code == 0,
        "the id seen under shop.Order",
        timeout=3 * NEGATIVE_TTL_S,
    )
    assert _produce(vcluster, topic_name, [v]) == [None]
    r = _raw_produce(vcluster, topic_name, [by_topic({"cents": 1}, ctx)])
    assert r.error_code == ErrorCode.invalid_record
    assert (
        "subject shop.Payment (RecordNameStrategy)" in r.record_errors[0].batch_index_error_message
    )


def test_unreachable_registry_is_retriable(tmp_path: Path, topic_name: str) -> None:
    # A registry URL nothing listens on: lookups fail at once, cached ids are not needed.
    with LocalCluster.start(
        tmp_path, 1, broker_config={"confluent.schema.registry.url": "http://127.0.0.1:9"}
    ) as c:
        pid = c.brokers[0].pid
        # numba (~100 MB) is loaded only once a validating topic is produced to.
        assert not _loaded(pid, "llvmlite"), "numba loaded by a broker with no validating topic"
        create_topic(c.bootstrap_servers, topic_name, config=VALIDATE, wait_leaders=True)
        r = _raw_produce(c, topic_name, [framed(1)])
        assert r.error_code == ErrorCode.request_timed_out
        assert "schema registry unreachable" in r.error_message
        # Records without an id need no registry: refused for good, not retriable.
        assert _raw_produce(c, topic_name, [b"raw"]).error_code == ErrorCode.invalid_record
        assert _raw_produce(c, topic_name, [None]).error_code == 0  # tombstones pass
        wait_until(lambda: _loaded(pid, "llvmlite"), "the compiled walk loaded", timeout=60)
        assert _raw_produce(c, topic_name, [b"raw"]).error_code == ErrorCode.invalid_record


def _loaded(pid: int | None, library: str) -> bool:
    """Whether the process has mapped a file of ``library`` (a shared object it loaded)."""
    return library in Path(f"/proc/{pid}/maps").read_text()


def test_the_cli_sets_the_validation_configs(vcluster: LocalCluster, topic_name: str) -> None:
    """``odradek topics --create --config`` and ``odradek configs --alter`` (the kafka-topics
    / kafka-configs way the docs show)."""
    odradek = [sys.executable, "-m", "odradek"]
    bs = ["--bootstrap-server", vcluster.bootstrap_servers]
    created = subprocess.run(
        [*odradek, "topics", *bs, "--create", "--topic", topic_name, "--partitions", "1",
         "--replication-factor", "1", "--config", "confluent.value.schema.validation=true"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    strategy = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
    altered = subprocess.run(
        [*odradek, "configs", *bs, "--entity-type", "topics", "--entity-name", topic_name,
         "--alter", "--add-config", f"confluent.value.subject.name.strategy={strategy}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    described = subprocess.run(
        [*odradek, "configs", *bs, "--entity-type", "topics", "--entity-name", topic_name,
         "--describe"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "confluent.value.schema.validation=true" in described.stdout, described.stdout
    assert f"confluent.value.subject.name.strategy={strategy}" in described.stdout
    wait_until(
        lambda: _raw_produce(vcluster, topic_name, [b"raw"]).error_code == ErrorCode.invalid_record,
        "validation on",
        timeout=30,
    )


def test_key_validation(vcluster: LocalCluster, topic_name: str) -> None:
    create_topic(
        vcluster.bootstrap_servers,
        topic_name,
        wait_leaders=True,
        config={"confluent.key.schema.validation": "true"},
    )
    assert vcluster.schema_registry is not None
    client = SchemaRegistryClient({"url": vcluster.schema_registry["url"]})
    key_ser = AvroSerializer(client, json.dumps(ORDER))
    key = key_ser({"id": 1, "item": "k"}, SerializationContext(topic_name, MessageField.KEY))
    assert _produce(vcluster, topic_name, [b"any value"], key=key) == [None]
    assert _produce(vcluster, topic_name, [b"any value"]) == [None]  # null keys pass
    refused = _produce(vcluster, topic_name, [b"any value"], key=b"plain key")
    assert refused[0] is not None and refused[0].code() == CKafkaError.INVALID_RECORD
    # The value's subject is not the key's: Order's id under <topic>-value only is refused.
    value_id = AvroSerializer(client, json.dumps(PAYMENT))(
        {"cents": 1}, SerializationContext(topic_name, MessageField.VALUE)
    )
    refused = _produce(vcluster, topic_name, [b"v"], key=value_id)
    assert refused[0] is not None and refused[0].code() == CKafkaError.INVALID_RECORD


def test_transactional_produce(vcluster: LocalCluster, topic_name: str) -> None:
    """A transaction's batches wait for their schema ids' lookup and then for the KIP-890
    verification, in order; a refused batch fails the transaction like any produce error."""
    from confluent_kafka import Consumer

    create_topic(vcluster.bootstrap_servers, topic_name, config=VALIDATE, wait_leaders=True)
    assert vcluster.schema_registry is not None
    client = SchemaRegistryClient({"url": vcluster.schema_registry["url"]})
    ser = AvroSerializer(client, json.dumps({**ORDER, "name": "TxnOrder"}))  # a fresh id
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    p = Producer({"bootstrap.servers": vcluster.bootstrap_servers, "transactional.id": topic_name})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic_name, ser({"id": i, "item": "t"}, ctx))
    p.commit_transaction(30)
    consumer = Consumer(
        {
            "bootstrap.servers": vcluster.bootstrap_servers,
            "group.id": topic_name,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic_name])
    got: list[bytes] = []
    try:

        def read_all() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
            return len(got) >= 5

        wait_until(read_all, "5 committed records", timeout=60)
    finally:
        consumer.close()
    p.begin_transaction()
    p.produce(topic_name, b"raw")
    with pytest.raises(Exception) as e:
        p.commit_transaction(30)
    assert "validate record" in str(e.value) or "INVALID_RECORD" in str(e.value), e.value


def test_a_follower_answers_not_leader_without_validating(
    make_cluster: Callable[..., LocalCluster], topic_name: str
) -> None:
    """The client must learn it asked the wrong broker (and refresh its metadata), not be
    refused for records the leader may accept; replication never validates again."""
    c = make_cluster(2, schema_registry=True)
    create_topic(c.bootstrap_servers, topic_name, rf=2, config=VALIDATE, wait_leaders=True)

    def agreed_leader() -> tuple[int] | None:
        # Each broker asked alone: a client's Metadata may come from a broker that has
        # not applied the new partition yet (leader -1), and "the other broker" is then
        # the leader itself, which validates (a loaded run's INVALID_RECORD).
        views = broker_views(c, topic_name, 0)
        leaders = {v.get("metadata", (-1,))[0] for v in views.values()}
        return (leaders.pop(),) if len(leaders) == 1 and min(leaders) >= 0 else None

    (leader,) = wait_until(agreed_leader, f"both brokers naming one leader of {topic_name}", 30)
    follower = next(b for b in c.brokers if b.id != leader)
    with RawClient(follower.host, follower.port) as rc:
        resp = rc.request(produce_request(topic_name, 0, encode_batch([(None, b"raw")])))
    r = resp.responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.not_leader_or_follower


def test_concurrent_misses_share_one_lookup(vcluster: LocalCluster, topic_name: str) -> None:
    """The broker's registry client against the real registry, in this process: ten
    produces missing one id cost one round of requests; an unknown id is cached as such."""
    import asyncio

    from odradek.server.schema_validation import IdInfo, SchemaIdValidator

    assert vcluster.schema_registry is not None
    url = vcluster.schema_registry["url"]
    client = SchemaRegistryClient({"url": url})
    sid = client.register_schema(
        f"{topic_name}-value", Schema(json.dumps({**ORDER, "name": "Shared"}), "AVRO")
    )

    async def run() -> tuple[list[dict[int, IdInfo | None]], int]:
        v = SchemaIdValidator([url])
        try:
            answers = await asyncio.gather(*(v.lookup({sid, 987_655}, 10.0) for _ in range(10)))
            return answers, v.lookups
        finally:
            await v.close()

    answers, lookups = asyncio.run(run())
    expected = IdInfo(frozenset({f"{topic_name}-value"}), "shop.Shared")
    assert all(a == {sid: expected, 987_655: None} for a in answers)
    assert lookups == 3  # versions + schema of the known id, versions of the unknown one


def test_no_registry_url_refuses_validating_topics(cluster: LocalCluster, topic_name: str) -> None:
    """A broker without confluent.schema.registry.url cannot validate: INVALID_RECORD
    saying so (a configuration error, not retriable); other topics are unaffected."""
    create_topic(cluster.bootstrap_servers, topic_name, config=VALIDATE, wait_leaders=True)
    r = _raw_produce(cluster, topic_name, [framed(1)])
    assert r.error_code == ErrorCode.invalid_record
    assert "no confluent.schema.registry.url" in r.error_message
    plain = f"{topic_name}-plain"
    create_topic(cluster.bootstrap_servers, plain, wait_leaders=True)
    assert _raw_produce(cluster, plain, [b"raw"]).error_code == 0


def test_a_silent_registry_times_out_retriably() -> None:
    """A registry that accepts connections but never answers: the produce's wait ends at
    its bound with REQUEST_TIMED_OUT, and the shared lookup, left running, is cleaned up."""
    import asyncio
    import socket

    from odradek.errors import KafkaError
    from odradek.server.schema_validation import SchemaIdValidator

    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]

        async def run() -> KafkaError:
            v = SchemaIdValidator([f"http://127.0.0.1:{port}"])
            try:
                with pytest.raises(KafkaError) as e:
                    await v.lookup({5}, 0.3)
                assert v._inflight  # still running for the next produce to share
                return e.value
            finally:
                await v.close()

        err = asyncio.run(run())
    assert err.code is ErrorCode.request_timed_out and err.retriable
    assert "did not answer within 0.3 s" in err.message


@pytest.mark.parametrize("codec", ["gzip", "lz4"])
def test_a_decompression_bomb_to_a_validating_topic(
    vcluster: LocalCluster, topic_name: str, codec: str
) -> None:
    """Validation decompresses: a small batch expanding past 64 MiB is CORRUPT_MESSAGE,
    and the broker's memory grows by a bounded amount; lz4/zstd batches of ordinary
    size are read through the reused per-thread buffer."""
    from odradek.fuzz.harness import process_rss_mb
    from odradek.storage.records import COMPRESSION_GZIP, COMPRESSION_LZ4

    compression = {"gzip": COMPRESSION_GZIP, "lz4": COMPRESSION_LZ4}[codec]
    create_topic(vcluster.bootstrap_servers, topic_name, config=VALIDATE, wait_leaders=True)
    bomb = encode_batch([(None, framed(1, bytes(100 << 20)))], compression=compression)
    assert len(bomb) < 1 << 20
    pid = vcluster.brokers[0].pid
    rss0 = process_rss_mb(pid)
    b = vcluster.brokers[0]
    with RawClient(b.host, b.port) as rc:
        resp = rc.request(produce_request(topic_name, 0, bomb))
    r = resp.responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.corrupt_message
    assert process_rss_mb(pid) - rss0 < 2 * 64 + 32  # the decode stops at 64 MiB
    ok = encode_batch([(None, b"raw")] * 1000, compression=compression)
    with RawClient(b.host, b.port) as rc:
        resp = rc.request(produce_request(topic_name, 0, ok))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record
