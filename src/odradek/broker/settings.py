"""The broker properties the broker process itself reads (connections, listeners'
limits, ZooKeeper client, security start-up, background loops), typed from the table.

Names, types and defaults live once in ``odradek.configdefs``; ``Broker`` builds this
with ``config.settings(BrokerSettings)``. Each component below the broker (replication,
coordinators, controller, request handlers, log cleaner) has its own settings object.
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.configdefs import setting

__all__ = ["BrokerSettings"]


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """Read once at start; none of these is a dynamic broker config."""

    # ZooKeeper session (connection timeout: the session timeout unless set).
    zookeeper_session_timeout_ms: int = setting("zookeeper.session.timeout.ms")
    zookeeper_connection_timeout_ms: int | None = setting("zookeeper.connection.timeout.ms")
    controlled_shutdown_enable: bool = setting("controlled.shutdown.enable")
    # Connections and the socket servers (issue 11).
    socket_request_max_bytes: int = setting("socket.request.max.bytes")
    max_connections: int = setting("max.connections")
    max_connections_per_ip: int = setting("max.connections.per.ip")
    max_connections_per_ip_overrides: str = setting("max.connections.per.ip.overrides")
    queued_max_requests: int = setting("queued.max.requests")
    connections_max_idle_ms: int = setting("connections.max.idle.ms")
    connections_max_reauth_ms: int = setting("connections.max.reauth.ms")
    sasl_server_max_receive_size: int = setting("sasl.server.max.receive.size")
    authentication_timeout_ms: int = setting("odradek.authentication.timeout.ms")
    # Authorization (issue 12).
    authorizer_class_name: str = setting("authorizer.class.name")
    super_users: str = setting("super.users")
    allow_everyone_if_no_acl_found: bool = setting("allow.everyone.if.no.acl.found")
    # ZooKeeper client.
    zookeeper_auth: str | None = setting("odradek.zookeeper.auth")
    zookeeper_set_acl: bool = setting("zookeeper.set.acl")
    zookeeper_multi_max_ops: int = setting("odradek.zookeeper.multi.max.ops")
    zookeeper_max_in_flight_requests: int = setting("zookeeper.max.in.flight.requests")
    # Client quotas (KIP-13) and metrics (issue 15).
    quota_window_size_seconds: int = setting("quota.window.size.seconds")
    quota_window_num: int = setting("quota.window.num")
    metrics_listener: str | None = setting("metrics.listener")
    trace_records_every: int = setting("odradek.trace.records.every")
    heap_freeze_settle_ms: int = setting("odradek.heap.freeze.settle.ms")
    # Background loops: flushing, checkpoints, retention.
    log_flush_scheduler_interval_ms: int = setting("log.flush.scheduler.interval.ms")
    log_flush_offset_checkpoint_interval_ms: int = setting(
        "log.flush.offset.checkpoint.interval.ms"
    )
    replica_high_watermark_checkpoint_interval_ms: int = setting(
        "replica.high.watermark.checkpoint.interval.ms"
    )
    log_retention_check_interval_ms: int = setting("log.retention.check.interval.ms")
    # Broker-side schema id validation (issue 27): the registry it asks.
    schema_registry_urls: tuple[str, ...] = setting("confluent.schema.registry.url")
    schema_registry_user_info: str | None = setting("confluent.basic.auth.user.info")
    schema_registry_cafile: str | None = setting("confluent.ssl.truststore.location")

    def zookeeper_connection_timeout(self) -> int:
        """Kafka: zookeeper.connection.timeout.ms defaults to the session timeout."""
        if self.zookeeper_connection_timeout_ms is None:
            return self.zookeeper_session_timeout_ms
        return self.zookeeper_connection_timeout_ms
