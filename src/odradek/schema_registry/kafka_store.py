"""The ``_schemas`` topic: a reader thread applies every record to the RegistryView, and
writes produce with acks=all then wait until the reader has applied them (read your own
writes), as Confluent's KafkaStore does. confluent-kafka is the client: it is already a
dependency of every admin command.

Fencing (issue 27: no schema id reused when a primary dies or is cut off). The primary
writes each record in a transaction of its own, with one transactional id shared by
every instance of the registry (``odradek-schema-registry-<group>``). Becoming primary
starts with ``init_transactions``: the transaction coordinator bumps that id's producer
epoch, aborts whatever the previous primary had in flight, and from then on the brokers
refuse the previous primary's producer (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH), even
if it still believes it is primary because it has not yet heard that its ZooKeeper
session ended. The readers read committed records only, so an aborted write never
reaches any view. Only then does the new primary read the topic to its end and hand out
ids: every id it allocates follows every id any earlier primary could have committed.
This is what Kafka gives any single-writer application; an epoch written into each
record and checked by readers would need its own marker records to survive compaction
(a compacted topic keeps only the latest record of a key, which may be a fenced one).
NOOPs (written to learn the end of the topic) carry no state and go through a plain
idempotent producer, from any instance."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from odradek.schema_registry import errors
from odradek.schema_registry.store import RegistryView, noop_key

__all__ = ["SchemasTopic", "SchemasTopicError"]

logger = logging.getLogger(__name__)

# What a producer fenced by a newer one with the same transactional id gets.
_FENCED_CODES = (
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
)


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
        transactional_id: str | None = None,
    ) -> None:
        self.topic = topic
        self.transactional_id = transactional_id or f"odradek-schema-registry-{topic}"
        self.view = view
        self.timeout_s = timeout_s
        self._conf: dict[str, Any] = {"bootstrap.servers": bootstrap, **(client_conf or {})}
        self._applied = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Producer | None = None  # NOOPs
        self._txn: Producer | None = None  # schema writes, while this instance is primary
        self._txn_lock = threading.Lock()
        self._primary = False  # become_primary called: this instance may write
        self._fenced = False  # a newer primary fenced it: no write until elected again

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Create the topic if needed, start reading it, and return once every record
        written before now has been applied (a NOOP write read back)."""
        self._ensure_topic()
        self._producer = Producer({**self._conf, "acks": "all", "linger.ms": 0})
        self._thread = threading.Thread(target=self._read, name="schemas-reader", daemon=True)
        self._thread.start()
        self.catch_up()

    def stop(self) -> None:
        self._txn = None
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
                # An aborted write (a fenced primary's) is never applied.
                "isolation.level": "read_committed",
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

    def become_primary(self) -> None:
        """Fence every earlier writer (``init_transactions`` on the shared transactional
        id), then read the topic up to now. Called on election, before any write."""
        with self._txn_lock:
            self._primary = True
            self._fenced = False
            self._init_writer()

    def _init_writer(self) -> None:
        """Under ``_txn_lock``: a new transactional producer (fencing every other one),
        then the topic read up to now, so ids follow whatever the fenced ones committed."""
        self._txn = None
        producer = Producer(
            {
                **self._conf,
                "transactional.id": self.transactional_id,
                "acks": "all",
                "linger.ms": 0,
            }
        )
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as e:
            raise errors.store_error(f"cannot fence the previous primary: {e}") from e
        logger.info("%s: writing as %s (earlier writers fenced)", self.topic,
                    self.transactional_id)  # fmt: skip
        self.catch_up()
        self._txn = producer

    def write(self, key: bytes, value: bytes | None) -> int:
        """Produce one record in a transaction of its own (acks=all) and wait until the
        reader has applied it; its offset. Raises 50004 when this instance is not, or no
        longer, the writer (fenced by a newer primary), 50001 if the write fails or is
        not read back in time."""
        with self._txn_lock:
            if self._fenced or not self._primary:
                raise errors.RegistryError(
                    500, 50004, "This instance is not the primary: retry the request"
                )
            if self._txn is None:  # the last one broke (not fenced): a new one
                self._init_writer()
            assert self._txn is not None
            result = self._produce_committed(self._txn, key, value)
        return self._read_back(result)

    def _produce_committed(
        self, producer: Producer, key: bytes, value: bytes | None
    ) -> dict[str, Any]:
        """Under ``_txn_lock``: one record, one transaction."""
        result: dict[str, Any] = {}

        def delivered(err: Any, msg: Any) -> None:
            result["err"], result["offset"] = err, msg.offset() if msg is not None else -1

        try:
            producer.begin_transaction()
            producer.produce(self.topic, key=key, value=value, on_delivery=delivered)
            producer.commit_transaction(self.timeout_s)
        except KafkaException as e:
            err: KafkaError = e.args[0]
            self._txn = None
            if err.code() in _FENCED_CODES:
                # Another instance became primary: this one never writes again until it
                # is elected again (become_primary).
                self._fenced = True
                logger.error("%s: this registry was fenced by a newer primary: %s",
                             self.topic, err)  # fmt: skip
                raise errors.RegistryError(
                    500,
                    50004,
                    "This instance is no longer the primary (fenced by a newer "
                    "one); retry the request",
                ) from e
            # Anything else (a coordinator moving, a timeout): whether it committed is
            # unknown, so the producer is written off; the next write starts a new one
            # (which aborts or completes this transaction) and reads up to it first. A
            # client retrying gets the same id if this one did commit.
            logger.warning("%s: write failed (%s); the next write starts a new producer",
                           self.topic, err)  # fmt: skip
            raise errors.store_error(str(err)) from e
        return result

    def _produce_plain(self, key: bytes, value: bytes | None) -> dict[str, Any]:
        assert self._producer is not None, "start() first"
        result: dict[str, Any] = {}

        def delivered(err: Any, msg: Any) -> None:
            result["err"], result["offset"] = err, msg.offset() if msg is not None else -1

        self._producer.produce(self.topic, key=key, value=value, on_delivery=delivered)
        deadline = time.monotonic() + self.timeout_s
        while "err" not in result and time.monotonic() < deadline:
            self._producer.poll(0.1)
        return result

    def _read_back(self, result: dict[str, Any]) -> int:
        deadline = time.monotonic() + self.timeout_s
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
        self._read_back(self._produce_plain(noop_key(), None))
