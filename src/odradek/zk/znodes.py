"""Kafka's ZooKeeper layout: one codec per znode, byte-for-byte Kafka's JSON.

Paths and JSON shapes follow Kafka's ZooKeeper-mode ``ZkData`` so that a Kafka
operator (or ``zookeeper-shell``) reads our ZooKeeper the way they read Kafka's
(SPEC R12: the consensus store holds topics, partition assignment, leader/ISR,
broker liveness and the controller).

Every ``encode_*`` returns ``bytes`` ready for ``zk.create``/``zk.set``; every
``decode_*`` takes the znode's bytes. Malformed data raises
``KafkaError(ErrorCode.unknown_server_error)`` -- it means someone wrote garbage into
our store, which a request cannot fix.

Znode *versions* (ZooKeeper's ``stat.version``, used for conditional updates of the
partition state, SPEC R13) are handled by callers; the ``"version"`` fields inside the
JSON below are Kafka's schema versions, not ZooKeeper's.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from odradek.errors import ErrorCode, KafkaError

# --------------------------------------------------------------------------- paths

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "/config/changes/config_change_"  # sequential znodes
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
# Odradek's own admin znodes (Kafka's controller gets these requests over RPC):
# the controller runs an unclean election for the leaderless partitions listed (same JSON
# as the preferred election znode), then deletes it (ElectLeaders with UNCLEAN).
UNCLEAN_LEADER_ELECTION_PATH = "/admin/unclean_leader_election"
# One persistent child per broker asking the controller to move its leadership away
# (odradek.controller.controlled_shutdown).
CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
CLUSTER_ID = "/cluster/id"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "/isr_change_notification/isr_change_"  # sequential znodes

# Kafka's ZkData.PersistentZkPaths (the subset we use), created at startup by every
# broker so watches can be set on them before any topic exists.
BASE_PATHS: tuple[str, ...] = (
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_TOPICS,
    CONFIG_CHANGES,
    "/config/brokers",
    "/config/clients",
    "/config/users",
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    "/cluster",
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


CONFIG_BROKERS = "/config/brokers"
DEFAULT_BROKER_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default


def broker_config_path(entity: str) -> str:
    """``/config/brokers/<id>`` or ``/config/brokers/<default>`` (dynamic broker configs,
    KIP-226; same JSON as ``/config/topics/T``)."""
    return f"{CONFIG_BROKERS}/{entity}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def ensure_base_paths(zk: KazooClient) -> None:
    """Create Kafka's persistent top-level znodes (idempotent, race-safe)."""
    for path in BASE_PATHS:
        zk.ensure_path(path)


# --------------------------------------------------------------------------- helpers


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _dumps(obj: dict[str, Any]) -> bytes:
    # Kafka writes compact JSON (no spaces); keep ours identical for diffability.
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes | None, what: str) -> dict[str, Any]:
    if not data:
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: empty znode")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: bad JSON: {e}") from e
    if not isinstance(obj, dict):
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: not a JSON object")
    return obj


def _field(obj: dict[str, Any], key: str, what: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: missing {key!r}") from None


# Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, no padding (22 chars).
def uuid_to_kafka(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def uuid_from_kafka(s: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError) as e:
        raise KafkaError(ErrorCode.unknown_server_error, f"bad Kafka uuid {s!r}") from e


def new_kafka_uuid() -> uuid.UUID:
    """A random topic/cluster id the way Kafka's ``Uuid.randomUuid`` makes one.

    Kafka rejects the all-zero id and the metadata topic id (1), and re-draws ids whose
    string form starts with '-' so they cannot be mistaken for command-line flags.
    """
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not uuid_to_kafka(u).startswith("-"):
            return u


# --------------------------------------------------------------------------- /brokers/ids/N


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """Ephemeral ``/brokers/ids/N``: a broker is alive while its session is (SPEC R12)."""

    broker_id: int
    host: str
    port: int
    endpoints: tuple[str, ...]  # e.g. ("PLAINTEXT://127.0.0.2:9092",)
    rack: str | None = None
    timestamp: int = 0  # ms; 0 = "now" at encode time
    jmx_port: int = -1
    listener_security_protocol_map: dict[str, str] = field(
        default_factory=lambda: {"PLAINTEXT": "PLAINTEXT"}
    )

    @staticmethod
    def plaintext(broker_id: int, host: str, port: int, rack: str | None = None) -> BrokerRegistration:
        return BrokerRegistration(broker_id, host, port, (f"PLAINTEXT://{host}:{port}",), rack)


def parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``"PLAINTEXT://127.0.0.2:9092"`` -> ``("PLAINTEXT", "127.0.0.2", 9092)``."""
    listener, sep, rest = endpoint.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise KafkaError(ErrorCode.unknown_server_error, f"bad endpoint {endpoint!r}")
    return listener, host.strip("[]"), int(port)


def encode_broker(reg: BrokerRegistration) -> bytes:
    # Kafka's BrokerIdZNode version 5 (features added by KIP-584).
    obj: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": dict(reg.listener_security_protocol_map),
        "endpoints": list(reg.endpoints),
        "jmx_port": reg.jmx_port,
        "port": reg.port,
        "host": reg.host,
        "version": 5,
        "timestamp": str(reg.timestamp or _now_ms()),
    }
    if reg.rack is not None:
        obj["rack"] = reg.rack
    return _dumps(obj)


def decode_broker(broker_id: int, data: bytes) -> BrokerRegistration:
    what = f"broker {broker_id}"
    obj = _loads(data, what)
    endpoints = tuple(obj.get("endpoints") or ())
    host = obj.get("host")
    port = obj.get("port", -1)
    # Since version 2, host/port may be null/-1 when the PLAINTEXT listener is absent;
    # the first endpoint is then the one clients know.
    if (not host or port in (None, -1)) and endpoints:
        _, host, port = parse_endpoint(endpoints[0])
    if not host:
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: no host or endpoints")
    return BrokerRegistration(
        broker_id=broker_id,
        host=str(host),
        port=int(port),
        endpoints=endpoints or (f"PLAINTEXT://{host}:{port}",),
        rack=obj.get("rack"),
        timestamp=int(obj.get("timestamp", 0)),
        jmx_port=int(obj.get("jmx_port", -1)),
        listener_security_protocol_map=dict(
            obj.get("listener_security_protocol_map") or {"PLAINTEXT": "PLAINTEXT"}
        ),
    )


# --------------------------------------------------------------------------- /brokers/topics/T


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/T``: replica assignment (first replica = preferred leader, R2)."""

    topic: str
    topic_id: uuid.UUID | None
    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)


def _int_keyed(obj: Any, what: str) -> dict[int, list[int]]:
    if not isinstance(obj, dict):
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: expected an object")
    try:
        return {int(k): [int(b) for b in v] for k, v in obj.items()}
    except (ValueError, TypeError) as e:
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: {e}") from e


def encode_topic(t: TopicAssignment) -> bytes:
    # Kafka's TopicZNode version 3 (KIP-455 adding/removing replicas, KIP-516 topic id).
    def by_str(m: dict[int, list[int]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(m.items())}

    obj: dict[str, Any] = {"partitions": by_str(t.partitions)}
    if t.topic_id is not None:
        obj["topic_id"] = uuid_to_kafka(t.topic_id)
    obj["adding_replicas"] = by_str(t.adding_replicas)
    obj["removing_replicas"] = by_str(t.removing_replicas)
    obj["version"] = 3
    return _dumps(obj)


def decode_topic(topic: str, data: bytes) -> TopicAssignment:
    what = f"topic {topic}"
    obj = _loads(data, what)
    tid = obj.get("topic_id")
    return TopicAssignment(
        topic=topic,
        topic_id=uuid_from_kafka(tid) if tid else None,
        partitions=_int_keyed(_field(obj, "partitions", what), what),
        adding_replicas=_int_keyed(obj.get("adding_replicas") or {}, what),
        removing_replicas=_int_keyed(obj.get("removing_replicas") or {}, what),
    )


# --------------------------------------------------------------------------- partition state


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``/brokers/topics/T/partitions/P/state`` -- leader and ISR (SPEC R6, R13)."""

    leader: int  # -1 = no leader
    leader_epoch: int
    isr: list[int]
    controller_epoch: int


def encode_partition_state(s: PartitionState) -> bytes:
    return _dumps(
        {
            "controller_epoch": s.controller_epoch,
            "leader": s.leader,
            "version": 1,
            "leader_epoch": s.leader_epoch,
            "isr": list(s.isr),
        }
    )


def decode_partition_state(data: bytes) -> PartitionState:
    what = "partition state"
    obj = _loads(data, what)
    return PartitionState(
        leader=int(_field(obj, "leader", what)),
        leader_epoch=int(_field(obj, "leader_epoch", what)),
        isr=[int(b) for b in _field(obj, "isr", what)],
        controller_epoch=int(_field(obj, "controller_epoch", what)),
    )


# --------------------------------------------------------------------------- configs


def encode_topic_config(config: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": {str(k): str(v) for k, v in config.items()}})


def decode_topic_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    obj = _loads(data, "topic config")
    return {str(k): str(v) for k, v in (obj.get("config") or {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    """Body of a sequential ``/config/changes/config_change_N`` (e.g. ``"topics/T"``)."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str:
    """-> entity path, e.g. ``"topics/T"``."""
    return str(_field(_loads(data, "config change"), "entity_path", "config change"))


# --------------------------------------------------------------------------- controller


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """Ephemeral ``/controller``: whoever created it is the controller (SPEC R13)."""

    broker_id: int
    timestamp: int = 0
    kraft_controller_epoch: int = -1  # -1: a ZooKeeper-mode controller


def encode_controller(c: ControllerRegistration) -> bytes:
    return _dumps(
        {
            "version": 2,
            "brokerid": c.broker_id,
            "timestamp": str(c.timestamp or _now_ms()),
            "kraftControllerEpoch": c.kraft_controller_epoch,
        }
    )


def decode_controller(data: bytes) -> ControllerRegistration:
    what = "controller"
    obj = _loads(data, what)
    return ControllerRegistration(
        broker_id=int(_field(obj, "brokerid", what)),
        timestamp=int(obj.get("timestamp", 0)),
        kraft_controller_epoch=int(obj.get("kraftControllerEpoch", -1)),
    )


def encode_controller_epoch(epoch: int) -> bytes:
    return str(int(epoch)).encode()


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode().strip())
    except (ValueError, UnicodeDecodeError, AttributeError) as e:
        raise KafkaError(ErrorCode.unknown_server_error, f"controller epoch: {data!r}") from e


# --------------------------------------------------------------------------- cluster id


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})  # Kafka writes the version as a string


def decode_cluster_id(data: bytes) -> str:
    return str(_field(_loads(data, "cluster id"), "id", "cluster id"))


def get_or_create_cluster_id(zk: KazooClient) -> str:
    """Read ``/cluster/id``, creating it with a fresh Kafka uuid if absent (race-safe)."""
    data, _ = _get_or_none(zk, CLUSTER_ID)
    if data is None:
        zk.ensure_path("/cluster")
        try:
            zk.create(CLUSTER_ID, encode_cluster_id(uuid_to_kafka(new_kafka_uuid())))
        except NodeExistsError:
            pass  # another broker won the race; use its id
        data, _ = zk.get(CLUSTER_ID)
    return decode_cluster_id(data)


def _get_or_none(zk: KazooClient, path: str) -> tuple[bytes | None, Any]:
    try:
        return zk.get(path)
    except NoNodeError:
        return None, None


# --------------------------------------------------------------------------- partition lists


def encode_partition_list(partitions: list[tuple[str, int]]) -> bytes:
    """Kafka's ``{"version":1,"partitions":[{"topic":..,"partition":..}]}`` -- used by
    ``/admin/preferred_replica_election`` (SPEC R5) and ``/isr_change_notification``."""
    return _dumps(
        {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
    )


def decode_partition_list(data: bytes) -> list[tuple[str, int]]:
    what = "partition list"
    obj = _loads(data, what)
    out: list[tuple[str, int]] = []
    for item in _field(obj, "partitions", what):
        out.append((str(_field(item, "topic", what)), int(_field(item, "partition", what))))
    return out


# --------------------------------------------------------------------------- reassignments


def encode_reassignment(entries: dict[tuple[str, int], list[int] | None]) -> bytes:
    """``/admin/reassign_partitions`` (Kafka's ReassignPartitionsZNode, KIP-455):
    ``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}``.

    ``"replicas": null`` asks the controller to cancel the partition's reassignment: an
    Odradek extension of the same JSON (Kafka's brokers pass cancellations to their
    controller over RPC; ours talk to it through ZooKeeper)."""
    return _dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": None if r is None else list(r)}
        for (t, p), r in sorted(entries.items())]})


def decode_reassignment(data: bytes) -> dict[tuple[str, int], list[int] | None]:
    what = "reassign partitions"
    obj = _loads(data, what)
    out: dict[tuple[str, int], list[int] | None] = {}
    items = _field(obj, "partitions", what)
    if not isinstance(items, list):
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: partitions not a list")
    for item in items:
        if not isinstance(item, dict):
            raise KafkaError(ErrorCode.unknown_server_error, f"{what}: bad entry {item!r}")
        replicas = item.get("replicas")
        try:
            key = (str(_field(item, "topic", what)), int(_field(item, "partition", what)))
            out[key] = None if replicas is None else [int(b) for b in replicas]
        except (TypeError, ValueError) as e:
            raise KafkaError(ErrorCode.unknown_server_error, f"{what}: {e}") from e
    return out
