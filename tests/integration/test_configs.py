"""Dynamic topic configs (issue 5): AlterConfigs / IncrementalAlterConfigs, ``odradek configs``.

A real 2-broker cluster (ZooKeeper + broker processes) shared by the module; each test
uses its own topic. Changes are made with real clients (confluent-kafka, kafka-python)
and the CLI, and must take effect on every replica without a restart.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from replication_util import create_topic, produce, wait_for

from odradek.cluster.local import LocalCluster
from odradek.zk import znodes

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.start(tmp_path_factory.mktemp("configs"), 2)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def topic(cluster2: LocalCluster, topic_name: str) -> str:
    create_topic(cluster2.bootstrap_servers, topic_name, 1, 2)
    return topic_name


def admin(c: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap_servers})


def incremental(
    c: LocalCluster, topic: str, ops: list[tuple[str, str | None, Any]], validate_only: bool = False
) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops]
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    a = admin(c)
    for fut in a.incremental_alter_configs(
        [res], validate_only=validate_only, request_timeout=30
    ).values():
        fut.result(60)


def describe(c: LocalCluster, topic: str) -> dict[str, Any]:
    a = admin(c)
    res = ConfigResource(ResourceType.TOPIC, topic)
    return dict(a.describe_configs([res], request_timeout=30)[res].result(60))


def error_of(fn: Any) -> tuple[str, str]:
    with pytest.raises(KafkaException) as ei:
        fn()
    err = ei.value.args[0]
    return err.name(), err.str()


def segment_count(c: LocalCluster, broker_id: int, topic: str) -> int:
    return len(list((Path(c.broker(broker_id).log_dir) / f"{topic}-0").glob("*.log")))


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=90
    )


# ---------------------------------------------------------------------------- effect
def test_segment_bytes_takes_effect_on_every_replica_and_delete_restores_default(
    cluster2: LocalCluster, topic: str
) -> None:
    bs = cluster2.bootstrap_servers
    acked, errors = produce(bs, topic, [b"a%03d" % i for i in range(5)])
    assert len(acked) == 5 and not errors
    assert segment_count(cluster2, 1, topic) == 1 and segment_count(cluster2, 2, topic) == 1

    incremental(cluster2, topic, [("segment.bytes", "1024", AlterConfigOpType.SET)])
    entry = describe(cluster2, topic)["segment.bytes"]
    assert entry.value == "1024" and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # Kafka's change notification, as zookeeper-shell users know it.
    zk = cluster2.zk_client()
    data, _ = zk.get(f"/config/topics/{topic}")
    assert json.loads(data) == {"version": 1, "config": {"segment.bytes": "1024"}}
    bodies = [
        json.loads(zk.get(f"/config/changes/{n}")[0]) for n in zk.get_children("/config/changes")
    ]
    assert {"version": 2, "entity_path": f"topics/{topic}"} in bodies

    # No restart: batches of one ~300-byte record (a batch may not exceed segment.bytes:
    # RECORD_LIST_TOO_LARGE, as in Kafka) -> new segments on the leader and the follower.
    values = [b"x" * 250 + b"%04d" % i for i in range(40)]
    small_batches = {"linger.ms": 0, "batch.size": 400}
    acked, errors = produce(bs, topic, values, extra=small_batches)
    assert len(acked) == 40 and not errors
    wait_for(
        lambda: segment_count(cluster2, 1, topic) >= 5 and segment_count(cluster2, 2, topic) >= 5,
        30,
        "small segments on both replicas",
    )

    incremental(cluster2, topic, [("segment.bytes", None, AlterConfigOpType.DELETE)])
    entry = describe(cluster2, topic)["segment.bytes"]
    assert entry.value == "1073741824" and entry.source == ConfigSource.DEFAULT_CONFIG.value
    before = {b: segment_count(cluster2, b, topic) for b in (1, 2)}
    acked, errors = produce(bs, topic, values, extra=small_batches)
    assert len(acked) == 40 and not errors
    # Back to 1 GiB: at most one more roll (the active segment may be full already).
    wait_for(
        lambda: all(segment_count(cluster2, b, topic) <= before[b] + 1 for b in (1, 2)),
        10,
        "no more rolls",
    )


def test_min_insync_replicas_applies_to_the_next_produce(
    cluster2: LocalCluster, topic: str
) -> None:
    """REQ-R8 at runtime: min.insync.replicas above the ISR size rejects acks=all."""
    bs = cluster2.bootstrap_servers
    incremental(cluster2, topic, [("min.insync.replicas", "3", AlterConfigOpType.SET)])
    # The change reaches the leader through ZooKeeper's change notification, after the
    # AlterConfigs answer (as in Kafka). Until it is applied a produce is accepted; one
    # appended just before it is applied fails its acks=all wait with ..._AFTER_APPEND.
    # Once applied, every produce is refused before the append.
    outcomes: list[tuple[int, list[str]]] = []

    def refused_before_append() -> bool:
        acked, errors = produce(
            bs, topic, [b"rejected"], timeout=15, extra={"retries": 0, "message.timeout.ms": 10000}
        )
        outcomes.append((len(acked), errors))
        assert (len(acked), errors) == (1, []) or (
            not acked and set(errors) <= {"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND"}
        ), outcomes
        return errors == ["NOT_ENOUGH_REPLICAS"]

    wait_for(refused_before_append, 30, "min.insync.replicas=3 applied on the leader")
    # acks=1 is not affected (REQ-R8 applies to acks=all only).
    acked, errors = produce(bs, topic, [b"acks1"], acks="1")
    assert len(acked) == 1 and not errors
    incremental(cluster2, topic, [("min.insync.replicas", None, AlterConfigOpType.DELETE)])
    acked, errors = produce(bs, topic, [b"accepted"])
    assert len(acked) == 1 and not errors, errors


# ---------------------------------------------------------------------------- semantics
def test_alter_configs_replaces_the_whole_override_set(cluster2: LocalCluster, topic: str) -> None:
    incremental(
        cluster2,
        topic,
        [
            ("retention.ms", "86400000", AlterConfigOpType.SET),
            ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
        ],
    )
    cfg = describe(cluster2, topic)
    assert cfg["cleanup.policy"].value == "delete,compact"  # APPEND starts from the default
    incremental(cluster2, topic, [("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)])
    assert describe(cluster2, topic)["cleanup.policy"].value == "compact"

    # Legacy AlterConfigs (confluent's alter_configs): omitted keys return to defaults.
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "3600000"})
    a = admin(cluster2)
    a.alter_configs([res], request_timeout=30)[res].result(60)
    cfg = describe(cluster2, topic)
    dynamic = {
        k: e.value for k, e in cfg.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }
    assert dynamic == {"segment.ms": "3600000"}
    assert cfg["cleanup.policy"].value == "delete" and cfg["retention.ms"].value == "604800000"


def test_kafka_python_alter_and_describe(cluster2: LocalCluster, topic: str) -> None:
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster2.bootstrap_servers, request_timeout_ms=30000)
    try:
        r = kp.alter_configs(
            [KPResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "123456"})],
            incremental=True,
        )
        assert r == {"topic": {topic: "OK"}}
        # Legacy AlterConfigs: kafka-python re-sends the other overrides itself.
        r = kp.alter_configs(
            [KPResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "65536"})],
            incremental=False,
        )
        assert r == {"topic": {topic: "OK"}}
        r = kp.alter_configs(
            [KPResource(ConfigResourceType.TOPIC, topic, configs={"segment.bytes": "1"})],
            incremental=True,
            raise_on_unknown=False,
        )
        assert "InvalidConfiguration" in r["topic"][topic] or "INVALID_CONFIG" in str(r)
    finally:
        kp.close()
    cfg = describe(cluster2, topic)
    assert cfg["retention.ms"].value == "123456"
    assert cfg["max.message.bytes"].value == "65536"
    assert cfg["segment.bytes"].value == "1073741824"


def test_errors_and_validate_only(cluster2: LocalCluster, topic: str) -> None:
    set_ = AlterConfigOpType.SET
    assert error_of(lambda: incremental(cluster2, topic, [("no.such.config", "1", set_)])) == (
        "INVALID_CONFIG",
        "Unknown topic config name: no.such.config",
    )
    name, msg = error_of(lambda: incremental(cluster2, topic, [("segment.bytes", "abc", set_)]))
    assert name == "INVALID_CONFIG"
    assert msg == "Invalid value abc for configuration segment.bytes: Not a number of type INT"
    name, msg = error_of(
        lambda: incremental(cluster2, topic, [("cleanup.policy", "sometimes", set_)])
    )
    assert name == "INVALID_CONFIG" and "String must be one of: compact, delete" in msg
    name, msg = error_of(
        lambda: incremental(cluster2, topic, [("retention.ms", "5", AlterConfigOpType.APPEND)])
    )
    assert name == "INVALID_CONFIG" and "retention.ms" in msg
    name, _ = error_of(
        lambda: incremental(cluster2, "no-such-topic-xyz", [("retention.ms", "5", set_)])
    )
    assert name == "UNKNOWN_TOPIC_OR_PART"  # librdkafka's name for error 3

    # validate_only: a valid change is accepted and not applied; an invalid one fails.
    incremental(cluster2, topic, [("retention.ms", "5000", set_)], validate_only=True)
    assert describe(cluster2, topic)["retention.ms"].value == "604800000"
    name, _ = error_of(
        lambda: incremental(cluster2, topic, [("retention.ms", "-7", set_)], validate_only=True)
    )
    assert name == "INVALID_CONFIG"

    # Only the dynamic broker configs may change at runtime: a static one is refused
    # with Kafka's message, nothing changes.
    res = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[ConfigEntry("log.retention.ms", "1000", incremental_operation=set_)],
    )
    a = admin(cluster2)
    with pytest.raises(KafkaException) as ei:
        a.incremental_alter_configs([res], request_timeout=30)[res].result(60)
    assert ei.value.args[0].name() == "INVALID_REQUEST"
    assert (
        "Cannot update these configs dynamically: Set(log.retention.ms)" in ei.value.args[0].str()
    )


def test_broker_resources_keep_custom_configs(cluster2: LocalCluster) -> None:
    """A KafkaJS finding: a name that is no broker property (the suite sets
    ``cleanup.policy`` on a broker) is kept as a custom config -- Kafka's
    DynamicBrokerConfig refuses only its own non-dynamic names -- by AlterConfigs and
    IncrementalAlterConfigs alike, per broker and at the cluster default; DescribeConfigs
    lists it as Kafka does (unknown type: sensitive, read-only, no value), with source
    DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG."""
    from rawclient import RawClient, request_cls

    broker = 4  # ConfigResource.Type.BROKER
    inc = sys.modules[request_cls(44, 1).__module__]
    legacy = sys.modules[request_cls(33, 1).__module__]
    desc = sys.modules[request_cls(32, 4).__module__]

    def incremental_set(rc: RawClient, name: str, op: int, value: str | None) -> int:
        r = rc.request(
            inc.IncrementalAlterConfigsRequest(
                validate_only=False,
                resources=(
                    inc.AlterConfigsResource(
                        resource_type=broker,
                        resource_name=name,
                        configs=(
                            inc.AlterableConfig(
                                name="cleanup.policy", config_operation=op, value=value
                            ),
                        ),
                    ),
                ),
            )
        )
        return int(r.responses[0].error_code)

    def replace_default(rc: RawClient, configs: dict[str, str]) -> int:
        r = rc.request(
            legacy.AlterConfigsRequest(
                validate_only=False,
                resources=(
                    legacy.AlterConfigsResource(
                        resource_type=broker,
                        resource_name="",
                        configs=tuple(
                            legacy.AlterableConfig(name=k, value=v) for k, v in configs.items()
                        ),
                    ),
                ),
            )
        )
        return int(r.responses[0].error_code)

    def described(rc: RawClient, name: str) -> Any:
        r = rc.request(
            desc.DescribeConfigsRequest(
                include_synonyms=True,
                include_documentation=False,
                resources=(
                    desc.DescribeConfigsResource(
                        resource_type=broker, resource_name=name, configuration_keys=None
                    ),
                ),
            )
        )
        assert int(r.results[0].error_code) == 0, r
        return {e.name: e for e in r.results[0].configs}.get("cleanup.policy")

    with RawClient.to(cluster2.broker(1).address) as rc:
        try:
            assert incremental_set(rc, "1", 0, "compact") == 0  # SET
            assert replace_default(rc, {"cleanup.policy": "delete"}) == 0

            def both_shown() -> Any:
                mine, default = described(rc, "1"), described(rc, "")
                return (mine, default) if mine is not None and default is not None else None

            mine, default = wait_for(both_shown, 10, "the custom configs in DescribeConfigs")
            assert int(mine.config_source) == ConfigSource.DYNAMIC_BROKER_CONFIG.value
            assert [(s.name, s.value, int(s.source)) for s in mine.synonyms] == [
                ("cleanup.policy", None, ConfigSource.DYNAMIC_BROKER_CONFIG.value),
                ("cleanup.policy", None, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            ]
            assert int(default.config_source) == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
            for e in (mine, default):
                assert (e.value, e.is_sensitive, e.read_only) == (None, True, True)
        finally:  # the module's other tests expect no dynamic broker configs
            assert incremental_set(rc, "1", 1, None) == 0  # DELETE
            assert replace_default(rc, {}) == 0
        wait_for(
            lambda: described(rc, "1") is None and described(rc, "") is None,
            10,
            "the custom configs removed",
        )


# ---------------------------------------------------------------------------- CLI
def test_cli_describe_alter_delete(cluster2: LocalCluster, topic: str) -> None:
    bs = cluster2.bootstrap_servers
    base = ("configs", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", topic)
    r = odradek(*base, "--describe")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"Dynamic configs for topic {topic} are:\n"

    r = odradek(
        *base, "--alter", "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"Completed updating config for topic {topic}.\n"
    r = odradek(*base, "--describe")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        # Kafka's configSynonyms drops log.retention.hours (it precedes the first
        # synonym named log.retention.ms, which is unset): only the topic override.
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "retention.ms=3600000}",
    ]
    r = odradek(*base, "--describe", "--all")
    assert r.stdout.startswith(f"All configs for topic {topic} are:\n")
    assert (
        "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:"
        "log.segment.bytes=1073741824}" in r.stdout.splitlines()
    )

    r = odradek(*base, "--alter", "--delete-config", "retention.ms")
    assert r.returncode == 0, r.stderr
    r = odradek(*base, "--describe")
    assert "retention.ms" not in r.stdout and "cleanup.policy=compact,delete" in r.stdout

    # Errors go to stderr with a non-zero exit.
    r = odradek(*base, "--alter", "--delete-config", "segment.bytes")
    assert r.returncode == 1 and r.stderr.strip() == "Invalid config(s): segment.bytes"
    r = odradek(*base, "--alter", "--add-config", "segment.bytes=abc")
    assert r.returncode == 1 and "INVALID_CONFIG" in r.stderr
    assert "Not a number of type INT" in r.stderr and r.stdout == ""
    r = odradek(
        "configs",
        "--bootstrap-server",
        bs,
        "--entity-type",
        "topics",
        "--entity-name",
        "no-such-topic-xyz",
        "--describe",
    )
    assert r.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr


def test_cli_describe_broker(cluster2: LocalCluster) -> None:
    bs = cluster2.bootstrap_servers
    r = odradek(
        "configs",
        "--bootstrap-server",
        bs,
        "--entity-type",
        "brokers",
        "--entity-name",
        "2",
        "--describe",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Dynamic configs for broker 2 are:\n"  # no dynamic broker configs
    r = odradek(
        "configs",
        "--bootstrap-server",
        bs,
        "--entity-type",
        "brokers",
        "--entity-name",
        "2",
        "--describe",
        "--all",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "All configs for broker 2 are:"
    assert (
        "  broker.id=2 sensitive=false synonyms={STATIC_BROKER_CONFIG:broker.id=2, "
        "DEFAULT_CONFIG:broker.id=-1}"
    ) in lines


# ---------------------------------------------------------------------------- controller
def _state(c: LocalCluster, topic: str) -> znodes.PartitionState:
    data, _ = c.zk_client().get(znodes.partition_state_path(topic, 0))
    return znodes.decode_partition_state(data)


def test_unclean_election_enabled_at_runtime_and_overrides_survive_restart(
    make_cluster: Any, topic_name: str
) -> None:
    """REQ-R10/R15 at runtime: an offline partition whose only live replica is out of
    sync is elected as soon as unclean.leader.election.enable=true is set (the controller
    reacts to the config change). The restarted broker opens its logs before it reads
    ZooKeeper: its log must still get the topic's overrides (small segments)."""
    session_ms = 4000
    # Broker 3 holds no replica: it keeps a controller (and a broker to talk to) alive.
    c = make_cluster(
        3,
        broker_config={
            "zookeeper.session.timeout.ms": str(session_ms),
            "auto.leader.rebalance.enable": "false",
        },
    )
    bs = c.bootstrap_servers
    create_topic(bs, topic_name, 1, 2, config={"segment.bytes": "1024"}, assignment=[[1, 2]])
    wait_for(lambda: _state(c, topic_name).leader == 1, 20, "leader 1")

    def kill(b: int) -> None:
        c.stop_broker(b, signal.SIGKILL)
        c.wait_broker_unregistered(b, timeout=session_ms / 1000 * 3 + 10)

    kill(2)
    wait_for(lambda: _state(c, topic_name).isr == [1], 20, "ISR [1]")
    kill(1)
    wait_for(lambda: _state(c, topic_name).leader == -1, 20, "offline")
    c.start_broker(2)  # out of sync, and unclean election is off: stays offline (R10)
    wait_for(lambda: c.is_registered(2), 20, "broker 2 registered")
    assert _state(c, topic_name).leader == -1

    r = odradek(
        "configs",
        "--bootstrap-server",
        bs,
        "--entity-type",
        "topics",
        "--entity-name",
        topic_name,
        "--alter",
        "--add-config",
        "unclean.leader.election.enable=true",
    )
    assert r.returncode == 0, r.stderr
    wait_for(lambda: _state(c, topic_name).leader == 2, 20, "unclean election of broker 2")
    assert _state(c, topic_name).isr == [2]

    values = [b"y" * 250 + b"%04d" % i for i in range(20)]
    acked, errors = produce(
        bs, topic_name, values, acks="1", extra={"linger.ms": 0, "batch.size": 400}
    )
    assert len(acked) == 20 and not errors, errors
    assert segment_count(c, 2, topic_name) >= 4  # segment.bytes=1024 after the restart


def test_cli_dynamic_broker_configs(cluster2: LocalCluster) -> None:
    """KIP-226 in ZooKeeper mode: /config/brokers/<id> and <default>, with Kafka's
    sources and synonyms; per-broker values win over the cluster default."""
    bs = cluster2.bootstrap_servers
    rate = "follower.replication.throttled.rate"
    base = ("configs", "--bootstrap-server", bs, "--entity-type", "brokers")
    r = odradek(*base, "--entity-default", "--alter", "--add-config", f"{rate}=5000")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Completed updating default config for brokers in the cluster.\n"
    r = odradek(*base, "--entity-name", "2", "--alter", "--add-config", f"{rate}=1000")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Completed updating config for broker 2.\n"
    data, _ = cluster2.zk_client().get(znodes.broker_config_path("2"))
    assert znodes.decode_topic_config(data) == {rate: "1000"}
    r = odradek(*base, "--entity-name", "2", "--describe")
    assert r.stdout == (
        "Dynamic configs for broker 2 are:\n"
        f"  {rate}=1000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{rate}=1000, "
        f"DYNAMIC_DEFAULT_BROKER_CONFIG:{rate}=5000, "
        f"DEFAULT_CONFIG:{rate}=9223372036854775807}}\n"
    ), r.stdout
    r = odradek(*base, "--entity-default", "--describe")
    assert r.stdout == (
        "Default configs for brokers in the cluster are:\n"
        f"  {rate}=5000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{rate}=5000, "
        f"DEFAULT_CONFIG:{rate}=9223372036854775807}}\n"
    ), r.stdout
    r = odradek(*base, "--entity-name", "1", "--describe", "--all")
    assert f"  {rate}=5000 sensitive=false" in r.stdout
    r = odradek(*base, "--entity-name", "2", "--alter", "--add-config", f"{rate}=-5")
    assert r.returncode == 1 and "INVALID_CONFIG" in r.stderr
    for args in (("--entity-name", "2"), ("--entity-default",)):
        r = odradek(*base, *args, "--alter", "--delete-config", rate)
        assert r.returncode == 0, r.stderr
    r = odradek(*base, "--entity-name", "2", "--describe")
    assert r.stdout == "Dynamic configs for broker 2 are:\n"


def test_describe_on_any_broker_reads_the_write(cluster2: LocalCluster, topic: str) -> None:
    """A DescribeConfigs answered by a broker other than the one that took the change
    shows the change at once: topic configs are read from ZooKeeper, as Kafka does,
    not from a metadata image that may still wait for the change notification."""
    per_broker = [AdminClient({"bootstrap.servers": cluster2.broker(b).address}) for b in (1, 2)]
    res = ConfigResource(ResourceType.TOPIC, topic)
    for i in range(8):
        writer, reader = per_broker[i % 2], per_broker[(i + 1) % 2]
        value = str(3_600_000 + i)
        change = ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for fut in writer.incremental_alter_configs([change], request_timeout=30).values():
            fut.result(60)
        got = reader.describe_configs([res], request_timeout=30)[res].result(60)
        assert got["retention.ms"].value == value, f"round {i}"
