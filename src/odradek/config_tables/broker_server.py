"""Broker properties (Kafka 3.9 KafkaConfig, ZooKeeper mode) of the server: its identity
and listeners, ZooKeeper, log directories, the defaults of new topics, sockets,
connections and the bounds of a request.

Part of ``odradek.configdefs`` (see there), which assembles ``BROKER_CONFIGS`` from the
broker_* modules, in the order of ``odradek.config_tables``, and applies the Support
column.
"""

from __future__ import annotations

from odradek.config_tables.definitions import (
    INT_MAX,
    ConfigDef,
    Range,
    T,
)
from odradek.config_tables.definitions import broker as _b

__all__ = ["SERVER_CONFIGS"]


SERVER_CONFIGS: list[ConfigDef] = [
    _b("broker.id", T.INT, "-1", "The broker id (required by Odradek)."),
    _b("broker.rack", T.STRING, None, "Rack of the broker."),
    _b("listeners", T.STRING, "PLAINTEXT://:9092", "Listener URIs: NAME://host:port,..."),
    _b(
        "advertised.listeners",
        T.STRING,
        None,
        "Listeners published to clients (default: listeners).",
    ),
    _b(
        "listener.security.protocol.map",
        T.STRING,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Listener name to security protocol.",
    ),
    _b("inter.broker.listener.name", T.STRING, None, "Listener used between brokers."),
    _b("security.inter.broker.protocol", T.STRING, "PLAINTEXT", "Protocol between brokers."),
    _b("zookeeper.connect", T.STRING, None, "ZooKeeper connection string (required)."),
    _b("zookeeper.session.timeout.ms", T.INT, "18000", "ZooKeeper session timeout."),
    _b(
        "zookeeper.connection.timeout.ms",
        T.INT,
        None,
        "Max wait to establish the ZooKeeper connection (default: session timeout).",
    ),
    _b(
        "zookeeper.max.in.flight.requests",
        T.INT,
        "10",
        "Unacknowledged ZooKeeper requests.",
        Range(1),
    ),
    _b(
        "odradek.zookeeper.multi.max.ops",
        T.INT,
        "500",
        "Beyond Kafka: operations per ZooKeeper transaction or multiRead of the controller "
        "and the metadata store (partition states are written and read in chunks of this "
        "size, zookeeper.max.in.flight.requests chunks at once).",
        Range(3, 5000),
    ),
    _b("log.dir", T.STRING, "/tmp/kafka-logs", "Log directory (used when log.dirs is unset)."),
    _b("log.dirs", T.LIST, None, "Comma-separated log directories."),
    _b("num.partitions", T.INT, "1", "Default partition count of new topics.", Range(1)),
    _b("default.replication.factor", T.INT, "1", "Default replication factor of new topics."),
    _b("auto.create.topics.enable", T.BOOLEAN, "true", "Create topics on first metadata use."),
    _b("delete.topic.enable", T.BOOLEAN, "true", "Allow topic deletion."),
    _b("message.max.bytes", T.INT, "1048588", "Largest record batch size allowed.", Range(0)),
    _b("socket.request.max.bytes", T.INT, "104857600", "Largest request size.", Range(1)),
    _b("socket.send.buffer.bytes", T.INT, "102400", "SO_SNDBUF (-1: OS default)."),
    _b("socket.receive.buffer.bytes", T.INT, "102400", "SO_RCVBUF (-1: OS default)."),
    _b("num.network.threads", T.INT, "3", "Network threads (ignored: asyncio).", Range(1)),
    _b("num.io.threads", T.INT, "8", "I/O threads (ignored: asyncio).", Range(1)),
    _b("background.threads", T.INT, "10", "Background threads (ignored).", Range(1)),
    _b(
        "queued.max.requests",
        T.INT,
        "500",
        "Requests read from sockets but not yet handled, across all connections, before "
        "connections stop reading.",
        Range(1),
    ),
    _b(
        "connections.max.idle.ms",
        T.LONG,
        "600000",
        "Close connections with no bytes read or written for this long (-1: never).",
    ),
    _b(
        "max.connections",
        T.INT,
        str(INT_MAX),
        "Connections the broker accepts at once; at the limit it stops accepting until one closes.",
        Range(0),
    ),
    _b(
        "max.connections.per.ip",
        T.INT,
        str(INT_MAX),
        "Connections allowed from one IP address; more are closed as they arrive.",
        Range(0),
    ),
    _b(
        "max.connections.per.ip.overrides",
        T.STRING,
        "",
        "Per-IP or hostname limits overriding max.connections.per.ip, e.g. "
        "'hostName:100,127.0.0.1:200'.",
    ),
    _b(
        "odradek.request.max.elements",
        T.INT,
        "200000",
        "Beyond Kafka: array elements one request may decode to (a decoded element costs "
        "~50-200 bytes of memory, so this bounds a request's memory beyond "
        "socket.request.max.bytes); a larger request closes the connection.",
        Range(1),
    ),
    _b(
        "odradek.max.partitions.per.request",
        T.INT,
        "10000",
        "Beyond Kafka's configs: new partitions one CreateTopics or CreatePartitions request "
        "may add (Kafka's controller hard-codes 10,000 records per request and answers "
        "POLICY_VIOLATION beyond).",
        Range(1),
    ),
    _b(
        "odradek.max.partitions",
        T.INT,
        "200000",
        "Beyond Kafka: partitions the whole cluster may have (Kafka's guidance is at most "
        "200,000); creations past it get POLICY_VIOLATION.",
        Range(1),
    ),
]
