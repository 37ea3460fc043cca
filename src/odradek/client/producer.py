"""An idempotent producer of ready-made record batches: pipelined Produce, retries.

The caller hands in a partition's encoded records (``append``); the producer stamps the
v2 batch header (producer id and epoch from InitProducerId, the partition's next
sequence number, CRC-32C) and sends it to the partition's leader. Like librdkafka with
``enable.idempotence=true``:

* up to ``max_in_flight`` (at most 5, KIP-98: the broker remembers the last five
  batches per producer) Produce requests per connection and batches per partition are
  in flight; each request carries at most one batch per partition;
* a retriable error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a
  lost connection, ...) refreshes metadata and, once every in-flight batch of that
  partition has been answered, resends the unacknowledged batches *with their original
  sequence numbers*, in order, to the (new) leader: a batch that had been appended
  before the failure answers DUPLICATE_SEQUENCE_NUMBER (success), so nothing is written
  twice and nothing is reordered. OUT_OF_ORDER_SEQUENCE_NUMBER right behind a failed
  batch is part of the same retry;
* any other error, or a batch not acknowledged within ``delivery_timeout_s``
  (librdkafka's ``message.timeout.ms``), fails ``flush`` with that error.
"""

from __future__ import annotations

import logging
import selectors
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from crc32c import crc32c

from odradek.client.cluster import STALE_METADATA, ClusterClient
from odradek.client.connection import ConnectionLost, KafkaConnection
from odradek.client.wire import (
    PRODUCE_KEY,
    PRODUCE_VERSION,
    MalformedResponse,
    decode_produce_response,
    encode_produce_request,
)
from odradek.errors import ErrorCode, KafkaError, error_name
from odradek.security.client_security import PLAINTEXT, ClientSecurity
from odradek.storage.batch import ATTRIBUTES_OFFSET, BATCH_HEADER_SIZE, HEADER_STRUCT

__all__ = ["ProduceConfig", "BatchProducer", "ProduceFailed"]

logger = logging.getLogger(__name__)

TP = tuple[str, int]
_RETRIABLE = STALE_METADATA | {
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out,
    ErrorCode.network_exception,
    ErrorCode.corrupt_message,  # Kafka: retriable (a bad copy on the wire)
    ErrorCode.concurrent_transactions,
    ErrorCode.coordinator_load_in_progress,
}


class ProduceFailed(KafkaError):
    """A batch could not be delivered (non-retriable error or delivery timeout)."""


@dataclass(frozen=True)
class ProduceConfig:
    acks: int = -1
    request_timeout_ms: int = 30_000
    delivery_timeout_s: float = 300.0
    max_in_flight: int = 5
    retry_backoff_s: float = 0.1
    max_request_bytes: int = 1_000_000  # message.max.bytes: one batch must fit
    buffer_bytes: int = 64 << 20  # queued, unacknowledged bytes before append blocks
    client_id: str = "odradek"
    socket_timeout_s: float = 60.0
    # TLS / SASL of the connections (security.protocol, sasl.*, ssl.*: issue 14).
    security: ClientSecurity = PLAINTEXT


@dataclass(slots=True)
class _Batch:
    tp: TP
    data: bytearray | memoryview
    records: int
    sequence: int
    deadline: float


@dataclass(slots=True)
class _PartitionState:
    queue: deque[_Batch] = field(default_factory=deque)  # not yet sent, in sequence order
    in_flight: deque[_Batch] = field(default_factory=deque)  # sent, oldest first
    next_sequence: int = 0
    retrying: bool = False  # a retriable failure: resend once in_flight drains
    retry_at: float = 0.0


@dataclass(slots=True)
class _Request:
    batches: list[_Batch]
    sent_at: float


class BatchProducer:
    """Idempotent producer of whole batches to many partitions (one owner thread)."""

    def __init__(self, bootstrap_servers: str, config: ProduceConfig | None = None) -> None:
        self.config = config or ProduceConfig()
        if not 1 <= self.config.max_in_flight <= 5:
            raise ValueError("max_in_flight must be 1..5 for an idempotent producer (KIP-98)")
        self.cluster = ClusterClient(
            bootstrap_servers,
            client_id=self.config.client_id,
            timeout_s=self.config.socket_timeout_s,
            security=self.config.security,
        )
        self.producer_id, self.producer_epoch = self.cluster.init_producer_id()
        self._parts: dict[TP, _PartitionState] = {}
        self._requests: dict[int, deque[_Request]] = {}  # broker -> in flight, oldest first
        self._queued_bytes = 0
        self._error: ProduceFailed | None = None
        self._selector = selectors.DefaultSelector()
        self._registered: dict[int, tuple[KafkaConnection, int]] = {}  # broker -> (conn, fd)
        self.acked_records = 0
        self.requests_sent = 0

    def close(self) -> None:
        self._selector.close()
        self.cluster.close()

    # ------------------------------------------------------------------ public

    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic`` (metadata refreshed when unknown)."""
        n = self.cluster.metadata.partition_count(topic)
        if n == 0:
            self.cluster.refresh([topic])
            n = self.cluster.metadata.partition_count(topic)
        if n == 0:
            code = (
                self.cluster.metadata.topic_errors.get(topic)
                or ErrorCode.unknown_topic_or_partition
            )
            raise KafkaError(ErrorCode(code), f"topic {topic} has no partitions")
        return n

    def append(
        self,
        topic: str,
        partition: int,
        payload: bytes | memoryview,
        records: int,
        *,
        codec: int,
        first_timestamp: int,
        max_timestamp: int,
    ) -> None:
        """Queue one batch of ``records`` encoded records (``payload``: the records section,
        already compressed with ``codec``) for ``topic``-``partition``."""
        data = bytearray(BATCH_HEADER_SIZE + len(payload))
        data[BATCH_HEADER_SIZE:] = payload
        self.append_framed(
            topic,
            partition,
            data,
            records,
            codec=codec,
            first_timestamp=first_timestamp,
            max_timestamp=max_timestamp,
        )

    def append_framed(
        self,
        topic: str,
        partition: int,
        data: bytearray | memoryview,
        records: int,
        *,
        codec: int,
        first_timestamp: int,
        max_timestamp: int,
    ) -> None:
        """``append`` without a copy: ``data`` is the whole batch, its first
        ``BATCH_HEADER_SIZE`` bytes left free for the header, which is written in place.
        The producer keeps ``data`` until the batch is acknowledged (a retry resends it),
        so the caller must not reuse it. The Spark sink encodes its ~1 MB batches
        straight into such a buffer: a second buffer and a copy per batch were most of
        ``append``'s own time in a profile of a sink task."""
        self._raise_if_failed()
        tp = (topic, partition)
        st = self._parts.get(tp)
        if st is None:
            st = self._parts[tp] = _PartitionState()
        size = len(data)
        if size > self.config.max_request_bytes:
            raise ProduceFailed(
                ErrorCode.message_too_large, f"a batch of {size} bytes exceeds message.max.bytes"
            )
        HEADER_STRUCT.pack_into(
            data,
            0,
            0,
            size - 12,
            -1,
            2,
            0,
            codec,
            records - 1,
            first_timestamp,
            max_timestamp,
            self.producer_id,
            self.producer_epoch,
            st.next_sequence,
            records,
        )
        data[17:21] = crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
        st.queue.append(
            _Batch(
                tp,
                data,
                records,
                st.next_sequence,
                time.monotonic() + self.config.delivery_timeout_s,
            )
        )
        st.next_sequence = (st.next_sequence + records) & 0x7FFFFFFF  # wraps like Kafka's
        self._queued_bytes += size
        # Take in the acknowledgements that have arrived (without waiting) before sending:
        # a partition has at most max_in_flight batches out, and only an answered one
        # frees a slot. Without this, a caller that appends 64 MB or less and then
        # flushes sends the first max_in_flight batches per leader, and the rest only
        # once it flushes: the brokers idle while it encodes, it idles while they write.
        self._poll(0)
        self._pump()
        while self._queued_bytes > self.config.buffer_bytes:
            self._poll(1.0)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every appended batch is acknowledged; raise the first failure."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self._queued_bytes:
            self._raise_if_failed()
            if deadline is not None and time.monotonic() > deadline:
                raise ProduceFailed(
                    ErrorCode.request_timed_out,
                    f"{self._queued_bytes} bytes not acknowledged in {timeout_s} s",
                )
            self._pump()
            self._poll(0.2)
        self._raise_if_failed()

    # ------------------------------------------------------------------ sending

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _pump(self) -> None:
        """Send what the in-flight limits allow, one request per leader at a time."""
        now = time.monotonic()
        cfg = self.config
        by_leader: dict[int, list[_Batch]] = {}
        for tp, st in self._parts.items():
            if st.retrying:
                if st.in_flight or now < st.retry_at:
                    continue
                # Every earlier attempt is answered: resend the unacknowledged batches in
                # their original order with their original sequence numbers.
                st.retrying = False
            if not st.queue or len(st.in_flight) >= cfg.max_in_flight:
                continue
            if st.queue[0].deadline < now:
                self._fail(
                    ProduceFailed(
                        ErrorCode.request_timed_out,
                        f"{tp[0]}-{tp[1]}: not delivered within delivery.timeout.ms",
                    )
                )
                return
            try:
                leader = self.cluster.leader(*tp).leader
            except (KafkaError, ConnectionLost) as e:
                if isinstance(e, KafkaError) and e.code not in _RETRIABLE:
                    self._fail(ProduceFailed(e.code, str(e)))
                    return
                st.retrying, st.retry_at = True, now + cfg.retry_backoff_s
                continue
            by_leader.setdefault(leader, []).append(st.queue[0])
        for leader, batches in by_leader.items():
            if len(self._requests.get(leader, ())) >= cfg.max_in_flight:
                continue
            self._send(leader, batches)

    def _send(self, leader: int, batches: list[_Batch]) -> None:
        try:
            conn = self.cluster.connection(leader)
            body = encode_produce_request(
                [(b.tp[0], b.tp[1], memoryview(b.data)) for b in batches],
                acks=self.config.acks,
                timeout_ms=self.config.request_timeout_ms,
            )
            conn.send_body(PRODUCE_KEY, PRODUCE_VERSION, body)  # type: ignore[arg-type]
        except (ConnectionLost, KafkaError) as e:
            logger.info("produce to broker %d: %s; retrying", leader, e)
            self._lost(leader)
            for b in batches:
                self._retry(b.tp, f"send failed: {e}")
            return
        for b in batches:
            st = self._parts[b.tp]
            st.queue.popleft()
            st.in_flight.append(b)
        self._requests.setdefault(leader, deque()).append(_Request(batches, time.monotonic()))
        self.requests_sent += 1
        if leader not in self._registered or self._registered[leader][0] is not conn:
            self._unregister(leader)
            fd = conn.fileno()
            self._selector.register(fd, selectors.EVENT_READ, leader)
            self._registered[leader] = (conn, fd)

    # ------------------------------------------------------------------ receiving

    def _poll(self, timeout_s: float) -> None:
        if not any(self._requests.values()):
            if any(st.retrying for st in self._parts.values()):
                time.sleep(min(timeout_s, self.config.retry_backoff_s))
            return
        for key, _ in self._selector.select(timeout_s):
            leader = key.data
            try:
                conn = self.cluster.connection(leader)
                _k, _v, body = conn.receive_frame()
                results = decode_produce_response(body)
            except (ConnectionLost, KafkaError, MalformedResponse) as e:
                logger.info("produce response from broker %d: %s; retrying", leader, e)
                self._lost(leader)
                continue
            req = self._requests[leader].popleft()
            self._complete(req, {(r.topic, r.partition): r for r in results})
        self._expire()

    def _complete(self, req: _Request, results: dict[TP, object]) -> None:
        for b in req.batches:
            st = self._parts[b.tp]
            r = results.get(b.tp)
            code = ErrorCode.unknown_server_error if r is None else ErrorCode(r.error_code)  # type: ignore[attr-defined]
            if st.in_flight and st.in_flight[0] is b:
                st.in_flight.popleft()
            else:  # answered out of order: cannot happen on one connection
                self._fail(
                    ProduceFailed(ErrorCode.unknown_server_error, f"{b.tp}: response out of order")
                )
                return
            if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                self._queued_bytes -= len(b.data)
                self.acked_records += b.records
                continue
            msg = getattr(r, "error_message", None) or error_name(code)
            if code in _RETRIABLE or (
                code == ErrorCode.out_of_order_sequence_number and st.retrying
            ):
                st.queue.appendleft(b)  # resent unchanged: same producer id, epoch, sequence
                self._mark_retry(b.tp, msg)
                if code in STALE_METADATA:
                    self._refresh(b.tp[0])
                continue
            self._fail(ProduceFailed(code, f"produce {b.tp[0]}-{b.tp[1]}: {msg}"))
            return
        self._requeue_in_order()

    def _requeue_in_order(self) -> None:
        """Batches put back for a retry go before the queue, in sequence order."""
        for st in self._parts.values():
            if st.retrying and len(st.queue) > 1:
                st.queue = deque(sorted(st.queue, key=lambda b: b.sequence))

    def _mark_retry(self, tp: TP, why: str) -> None:
        st = self._parts[tp]
        if not st.retrying:
            logger.info(
                "%s-%d: %s; resending from sequence %d",
                tp[0],
                tp[1],
                why,
                min(b.sequence for b in [*st.queue, *st.in_flight]),
            )
        st.retrying = True
        st.retry_at = time.monotonic() + self.config.retry_backoff_s

    def _retry(self, tp: TP, why: str) -> None:
        self._mark_retry(tp, why)

    def _lost(self, leader: int) -> None:
        """A connection failed: every batch in flight on it is retried."""
        self._unregister(leader)
        self.cluster.drop(leader)
        for req in self._requests.pop(leader, deque()):
            for b in req.batches:
                st = self._parts[b.tp]
                if b in st.in_flight:
                    st.in_flight.remove(b)
                    st.queue.append(b)
                self._mark_retry(b.tp, f"connection to broker {leader} lost")
        self._requeue_in_order()
        self._refresh(None)

    def _unregister(self, leader: int) -> None:
        reg = self._registered.pop(leader, None)
        if reg is not None:
            try:
                self._selector.unregister(reg[1])
            except (KeyError, ValueError):
                pass

    def _refresh(self, topic: str | None) -> None:
        try:
            self.cluster.refresh(None if topic is None else [topic, *self._topics()])
        except (ConnectionLost, KafkaError) as e:
            logger.info("metadata refresh failed: %s", e)

    def _topics(self) -> Iterable[str]:
        return {tp[0] for tp in self._parts}

    def _expire(self) -> None:
        now = time.monotonic()
        # request.timeout.ms: a broker that does not answer (stopped, partitioned) is
        # treated as a lost connection, so its batches go to whoever leads next.
        limit = self.config.request_timeout_ms / 1000 + 1.0
        for leader, reqs in list(self._requests.items()):
            if reqs and now - reqs[0].sent_at > limit:
                logger.info("broker %d did not answer a produce within request.timeout.ms", leader)
                self._lost(leader)
        for tp, st in self._parts.items():
            if st.in_flight and st.in_flight[0].deadline < now:
                self._fail(
                    ProduceFailed(
                        ErrorCode.request_timed_out,
                        f"{tp[0]}-{tp[1]}: not acknowledged within delivery.timeout.ms",
                    )
                )
                return

    def _fail(self, error: ProduceFailed) -> None:
        if self._error is None:
            self._error = error
