"""Topic creation for tests, through a real Kafka admin client (confluent-kafka)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.polling import wait_until

__all__ = ["create_topic", "wait_for_leaders"]


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    rf: int = 1,
    config: dict[str, str] | None = None,
    *,
    assignment: list[list[int]] | None = None,
    wait_leaders: bool = False,
    timeout: float = 30.0,
    security: dict[str, str] | None = None,
) -> None:
    """CreateTopics (partitions x rf, or an explicit replica ``assignment``) with topic
    ``config``; with ``wait_leaders`` also wait until Metadata names a leader for every
    partition. ``timeout`` bounds the request and the wait. ``security``: client
    properties of a secured listener (TLS, SASL)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(security or {})})
    if assignment is not None:
        topic = NewTopic(
            name, num_partitions=len(assignment), replica_assignment=assignment, config=config or {}
        )
    else:
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=rf, config=config or {}
        )
    admin.create_topics([topic], operation_timeout=timeout)[name].result(timeout)
    if wait_leaders:
        wait_for_leaders(admin, name, len(assignment) if assignment else partitions, timeout)


def wait_for_leaders(admin: AdminClient, name: str, partitions: int, timeout: float = 30.0) -> None:
    def ready() -> bool:
        t = admin.list_topics(name, timeout=10).topics.get(name)
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        )

    wait_until(ready, f"a leader for every partition of {name}", timeout, interval=0.1)
