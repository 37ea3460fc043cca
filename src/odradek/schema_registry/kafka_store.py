"""The ``_schemas`` topic: a reader thread applies every record to the RegistryView, and
writes produce with acks=all then wait until the reader has applied them (read your own
writes), as Confluent's KafkaStore does. confluent-kafka is the client: it is already a
dependency of every admin command."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from odradek.schema_registry import errors
from odradek.schema_registry.store import RegistryView, noop_key

__all__ = ["SchemasTopic", "SchemasTopicError"]

logger = logging.getLogger(__name__)


class SchemasTopicError(Exception):
    """The schemas topic cannot hold a registry's state (the registry does not start)."""


class SchemasTopic:
    def __init__(
        self,
        bootstrap: str,
        view: RegistryView,
        *,
        topic: str = "_schemas",
        client_conf: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.topic = topic
        self.view = view
        self.timeout_s = timeout_s
        self._conf: dict[str, Any] = {"bootstrap.servers": bootstrap, **(client_conf or {})}
        self._applied = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None
        self._error: str | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Create the topic if needed, start reading it, and return once every record
        written before now has been applied (a NOOP write read back)."""
        self._ensure_topic()
        self._producer = Producer({**self._conf, "acks": "all", "linger.ms": 0})
        self._thread = threading.Thread(target=self._read, name="schemas-reader", daemon=True)
        self._thread.start()
        self.write(noop_key(), None)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._producer is not None:
            self._producer.flush(5)

    def _ensure_topic(self) -> None:
        admin = AdminClient(dict(self._conf))
        deadline = time.monotonic() + self.timeout_s
        while True:
            md = admin.list_topics(timeout=10)
            if self.topic in md.topics and not md.topics[self.topic].error:
                self._check_topic(admin, len(md.topics[self.topic].partitions))
                return
            rf = max(1, min(3, len(md.brokers)))
            fut = admin.create_topics(
                [NewTopic(self.topic, 1, rf, config={"cleanup.policy": "compact"})],
                operation_timeout=10,
            )[self.topic]
            try:
                fut.result(timeout=15)
                logger.info("created topic %s (replication factor %d)", self.topic, rf)
                return
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" in str(e) or "already exists" in str(e):
                    return
                if time.monotonic() > deadline:
                    raise
                logger.warning("creating %s: %s; retrying", self.topic, e)
                time.sleep(0.5)

    def _check_topic(self, admin: AdminClient, partitions: int) -> None:
        """As Confluent's KafkaStore: one partition (one order for every write) and
        cleanup.policy=compact (deletion by time or size would lose schemas)."""
        if partitions != 1:
            raise SchemasTopicError(
                f"topic {self.topic} has {partitions} partitions; the schemas topic must "
                "have exactly 1"
            )
        resource = ConfigResource(ResourceType.TOPIC, self.topic)
        config = admin.describe_configs([resource])[resource].result(timeout=15)
        policy = config.get("cleanup.policy")
        if policy is None or policy.value != "compact":
            raise SchemasTopicError(
                f"topic {self.topic} has cleanup.policy="
                f"{policy.value if policy is not None else '?'}; the schemas topic must be "
                "compacted (cleanup.policy=compact)"
            )

    # ------------------------------------------------------------------ reading

    def _read(self) -> None:
        consumer = Consumer(
            {
                **self._conf,
                "group.id": f"odradek-schema-registry-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
        try:
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    logger.warning("reading %s: %s", self.topic, msg.error())
                    continue
                offset = msg.offset()
                if offset is None:
                    continue
                self.view.apply(offset, msg.key(), msg.value())
                with self._applied:
                    self._applied.notify_all()
        finally:
            consumer.close()

    # ------------------------------------------------------------------ writing

    def write(self, key: bytes, value: bytes | None) -> int:
        """Produce one record (acks=all) and wait until the reader has applied it; its
        offset. Raises 50001 if the write fails or is not read back in time."""
        assert self._producer is not None, "start() first"
        result: dict[str, Any] = {}

        def delivered(err: Any, msg: Any) -> None:
            result["err"], result["offset"] = err, msg.offset() if msg is not None else -1

        self._producer.produce(self.topic, key=key, value=value, on_delivery=delivered)
        deadline = time.monotonic() + self.timeout_s
        while "err" not in result and time.monotonic() < deadline:
            self._producer.poll(0.1)
        if "err" not in result:
            raise errors.store_error(f"write to {self.topic} timed out")
        if result["err"] is not None:
            raise errors.store_error(str(result["err"]))
        offset = int(result["offset"])
        with self._applied:
            while self.view.applied_offset < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.store_error(f"offset {offset} of {self.topic} not read back")
                self._applied.wait(min(left, 0.5))
        return offset

    def catch_up(self) -> None:
        """Wait until every record written before now is applied (a NOOP written and read
        back): a newly elected primary does this before it allocates ids."""
        self.write(noop_key(), None)
