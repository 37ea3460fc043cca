"""Kafka's ZooKeeper layout: one codec per znode, byte-for-byte Kafka's JSON.

Paths and JSON shapes follow Kafka's ZooKeeper-mode ``ZkData`` so that a Kafka
operator (or ``zookeeper-shell``) reads our ZooKeeper the way they read Kafka's
(REQ-R12: the consensus store holds topics, partition assignment, leader/ISR,
broker liveness and the controller).

Every ``encode_*`` returns ``bytes`` ready for ``zk.create``/``zk.set``; every
``decode_*`` takes the znode's bytes. Malformed data raises
``KafkaError(ErrorCode.unknown_server_error)`` -- it means someone wrote garbage into
our store, which a request cannot fix.

Znode *versions* (ZooKeeper's ``stat.version``, used for conditional updates of the
partition state, REQ-R13) are handled by callers; the ``"version"`` fields inside the
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
# Odradek's stand-in for Kafka's LeaderAndIsr/UpdateMetadata requests (brokers learn
# leader and ISR changes from ZooKeeper, REQ-R12-R13): every write of partition state
# znodes creates, in the same ZooKeeper transaction, one sequential child here listing
# the new states. Brokers watch this one directory instead of every state znode, so a
# batch of N state writes costs them O(N / chunk) reads. The directory's own data says
# up to which sequence number notifications were purged (see ``LeaderAndIsrPurge``).
LEADER_AND_ISR_NOTIFICATION = "/leader_and_isr_notification"
LEADER_AND_ISR_PREFIX = "/leader_and_isr_notification/leader_and_isr_"  # sequential

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
    LEADER_AND_ISR_NOTIFICATION,
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
    """Ephemeral ``/brokers/ids/N``: a broker is alive while its session is (REQ-R12)."""

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
    def plaintext(
        broker_id: int, host: str, port: int, rack: str | None = None
    ) -> BrokerRegistration:
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
    """``/brokers/topics/T/partitions/P/state`` -- leader and ISR (REQ-R6, R13)."""

    leader: int  # -1 = no leader
    leader_epoch: int
    isr: list[int]
    controller_epoch: int


def encode_partition_state(s: PartitionState) -> bytes:
    # Kafka's compact JSON, key order included, formatted directly: a controller batch
    # encodes thousands of these, and json.dumps of a dict costs ~5x more.
    isr = ",".join(str(int(b)) for b in s.isr)
    return (
        f'{{"controller_epoch":{int(s.controller_epoch)},"leader":{int(s.leader)},'
        f'"version":1,"leader_epoch":{int(s.leader_epoch)},"isr":[{isr}]}}'
    ).encode()


def decode_partition_state(data: bytes) -> PartitionState:
    what = "partition state"
    obj = _loads(data, what)
    return PartitionState(
        leader=int(_field(obj, "leader", what)),
        leader_epoch=int(_field(obj, "leader_epoch", what)),
        isr=[int(b) for b in _field(obj, "isr", what)],
        controller_epoch=int(_field(obj, "controller_epoch", what)),
    )


# --------------------------------------------------------------------------- leader_and_isr


@dataclass(frozen=True, slots=True)
class PartitionStateChange:
    """One entry of a ``/leader_and_isr_notification`` child: the state a write left in
    ``/brokers/topics/T/partitions/P/state`` and that znode's version after it."""

    topic: str
    topic_id: uuid.UUID | None
    partition: int
    state: PartitionState
    zk_version: int


def encode_leader_and_isr(changes: list[PartitionStateChange], writer: int) -> bytes:
    """Body of a ``leader_and_isr_N`` notification; ``writer`` is the broker that wrote
    (the controller, or a leader changing its ISR). Grouped by topic, like Kafka's
    LeaderAndIsrRequest."""
    by_topic: dict[str, dict[str, Any]] = {}
    for ch in changes:
        entry = by_topic.get(ch.topic)
        if entry is None:
            entry = by_topic[ch.topic] = {
                "topic": ch.topic,
                "topic_id": uuid_to_kafka(ch.topic_id) if ch.topic_id else None,
                "partitions": [],
            }
        s = ch.state
        entry["partitions"].append(
            {
                "partition": ch.partition,
                "controller_epoch": s.controller_epoch,
                "leader": s.leader,
                "leader_epoch": s.leader_epoch,
                "isr": list(s.isr),
                "zk_version": ch.zk_version,
            }
        )
    return _dumps({"version": 1, "broker": writer, "topics": list(by_topic.values())})


def decode_leader_and_isr(data: bytes) -> list[PartitionStateChange]:
    what = "leader_and_isr notification"
    obj = _loads(data, what)
    out: list[PartitionStateChange] = []
    try:
        for t in _field(obj, "topics", what):
            topic = str(_field(t, "topic", what))
            tid = t.get("topic_id")
            topic_id = uuid_from_kafka(tid) if tid else None
            for p in _field(t, "partitions", what):
                state = PartitionState(
                    leader=int(_field(p, "leader", what)),
                    leader_epoch=int(_field(p, "leader_epoch", what)),
                    isr=[int(b) for b in _field(p, "isr", what)],
                    controller_epoch=int(_field(p, "controller_epoch", what)),
                )
                out.append(
                    PartitionStateChange(
                        topic,
                        topic_id,
                        int(_field(p, "partition", what)),
                        state,
                        int(_field(p, "zk_version", what)),
                    )
                )
    except (TypeError, ValueError, AttributeError) as e:
        raise KafkaError(ErrorCode.unknown_server_error, f"{what}: {e}") from e
    return out


def leader_and_isr_name(sequence: int) -> str:
    """42 -> ``leader_and_isr_0000000042`` (the child name ZooKeeper gives it)."""
    return f"{LEADER_AND_ISR_PREFIX.rsplit('/', 1)[1]}{sequence:010d}"


def leader_and_isr_sequence(name: str) -> int:
    """``leader_and_isr_0000000042`` -> 42 (ZooKeeper's 10-digit sequential suffix);
    -1 for a name that is not a notification."""
    prefix = LEADER_AND_ISR_PREFIX.rsplit("/", 1)[1]
    if not name.startswith(prefix) or not name[len(prefix) :].isdigit():
        return -1
    return int(name[len(prefix) :])


def encode_leader_and_isr_purge(purged_through: int) -> bytes:
    """Data of ``/leader_and_isr_notification``: every notification with a sequence
    number <= ``purged_through`` has been deleted (-1: none yet). A reader that has
    not processed that far may have missed some and must re-read every state znode."""
    return _dumps({"version": 1, "purged_through": purged_through})


def decode_leader_and_isr_purge(data: bytes | None) -> int:
    if not data:
        return -1
    try:
        return int(_loads(data, "leader_and_isr purge").get("purged_through", -1))
    except (TypeError, ValueError):
        raise KafkaError(
            ErrorCode.unknown_server_error, f"leader_and_isr purge: {data[:100]!r}"
        ) from None


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
    """Ephemeral ``/controller``: whoever created it is the controller (REQ-R13)."""

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
    ``/admin/preferred_replica_election`` (REQ-R5) and ``/isr_change_notification``."""
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
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": None if r is None else list(r)}
                for (t, p), r in sorted(entries.items())
            ],
        }
    )


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
