"""Read one partition's offset range ``[start, end)`` with Fetch, as column buffers.

One connection to the partition's leader, one Fetch in flight ahead of the decoder: as
soon as a response's batch headers are read (the next offset is known), the next Fetch
is sent, and the records of the current one are decoded while the broker prepares the
next. Only committed data is read: brokers answer consumers below the high watermark.

Faults, as a consumer handles them:

* NOT_LEADER_OR_FOLLOWER / LEADER_NOT_AVAILABLE / FENCED_LEADER_EPOCH / unknown
  partition / a lost connection: refresh metadata, reconnect to the (new) leader,
  continue at the same offset (no record is skipped or repeated: the position only
  moves past batches that were decoded).
* OFFSET_OUT_OF_RANGE: ListOffsets tells which side. Below the log start (retention or
  DeleteRecords removed unread records) or past the log end: data loss, reported through
  ``on_data_loss`` (which raises for failOnDataLoss=true; otherwise reading continues at
  the log start, or stops).
* The high watermark below the position although the range was planned below an
  earlier high watermark: a newly elected leader's HW can lag for a moment (it advances
  when the followers fetch from it), so this is data loss only when it lasts
  ``hw_grace_s`` (truncation by an unclean election).
* No progress at all for ``poll_timeout_s``: the read fails (kafkaConsumer.pollTimeoutMs).

A fetch at ``pos`` that returns no batch while ``pos`` is below the high watermark means
nothing is left in ``[pos, hw)`` (compaction removed it): the position moves to the HW.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from odradek.client.cluster import EARLIEST, LATEST, STALE_METADATA, ClusterClient
from odradek.client.connection import ConnectionLost
from odradek.client.record_columns import RecordColumns, scan_fetched
from odradek.client.wire import (
    FETCH_KEY,
    FETCH_VERSION,
    FetchedPartition,
    FetchPartitionRequest,
    MalformedResponse,
    decode_fetch_response,
    encode_fetch_request,
)
from odradek.errors import ErrorCode, KafkaError, error_name
from odradek.security.client_security import PLAINTEXT, ClientSecurity

__all__ = ["FetchConfig", "PartitionFetcher"]

logger = logging.getLogger(__name__)

_RESPONSE_SLACK = 1 << 20  # response framing around the records we asked for


@dataclass(frozen=True)
class FetchConfig:
    max_partition_bytes: int = 1 << 20  # max.partition.fetch.bytes
    max_bytes: int = 50 << 20  # fetch.max.bytes
    max_wait_ms: int = 500  # fetch.wait.max.ms
    read_committed: bool = True  # isolation.level (librdkafka's default)
    check_crcs: bool = False  # check.crcs (librdkafka's default)
    with_headers: bool = False
    poll_timeout_s: float = 120.0  # no progress for this long fails the read
    retry_backoff_s: float = 0.1
    hw_grace_s: float = 30.0
    socket_timeout_s: float = 60.0
    client_id: str = "odradek"
    # TLS / SASL of the connections (security.protocol, sasl.*, ssl.*: issue 14).
    security: ClientSecurity = PLAINTEXT


class PartitionFetcher:
    """Iterate ``RecordColumns`` of ``topic``-``partition`` offsets ``[start, end)``."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        partition: int,
        start: int,
        end: int,
        config: FetchConfig,
        on_data_loss: Callable[[str], None],
    ) -> None:
        self.topic, self.partition = topic, partition
        self.start, self.end = start, end
        self.config = config
        self.on_data_loss = on_data_loss
        self.where = f"{topic}-{partition}"
        fetch_bytes = min(config.max_partition_bytes, config.max_bytes)
        self.cluster = ClusterClient(
            bootstrap_servers,
            client_id=config.client_id,
            timeout_s=config.socket_timeout_s + config.max_wait_ms / 1000,
            max_response_bytes=fetch_bytes + _RESPONSE_SLACK,
            security=config.security,
        )
        self.fetch_bytes = fetch_bytes
        self.position = start
        self.fetches = 0

    def close(self) -> None:
        self.cluster.close()

    def __iter__(self) -> Iterator[RecordColumns]:
        try:
            yield from self._run()
        finally:
            self.close()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> Iterator[RecordColumns]:
        cfg = self.config
        progress_deadline = time.monotonic() + cfg.poll_timeout_s
        hw_below_since: float | None = None
        leader: int | None = None
        sent_at: int | None = None  # offset of the fetch in flight on ``leader``
        while self.position < self.end:
            if time.monotonic() > progress_deadline:
                raise KafkaError(
                    ErrorCode.request_timed_out,
                    f"no records from {self.where} at offset {self.position} "
                    f"within kafkaConsumer.pollTimeoutMs",
                )
            try:
                if leader is None:
                    leader = self.cluster.leader(self.topic, self.partition).leader
                    sent_at = None
                conn = self.cluster.connection(leader)
                if sent_at is None:
                    self._send(conn, self.position)
                    sent_at = self.position
                fetched = self._receive(conn)
            except (ConnectionLost, KafkaError) as e:
                if isinstance(e, KafkaError) and e.code not in STALE_METADATA:
                    raise
                logger.info("%s: %s; looking up the leader again", self.where, e)
                if leader is not None:
                    self.cluster.drop(leader)
                leader, sent_at = None, None
                self._backoff_and_refresh()
                continue
            sent_at = None
            if fetched.error_code != ErrorCode.none:
                if fetched.error_code == ErrorCode.offset_out_of_range:
                    self._out_of_range()
                elif fetched.error_code in STALE_METADATA:
                    logger.info(
                        "%s: fetch answered %s; looking up the leader again",
                        self.where,
                        error_name(fetched.error_code),
                    )
                    self.cluster.drop(leader)
                    leader = None
                    self._backoff_and_refresh()
                else:
                    raise KafkaError(
                        ErrorCode(fetched.error_code),
                        f"fetch {self.where} at offset {self.position}",
                    )
                continue
            scan = scan_fetched(fetched.records, self.where)
            nxt = scan.next_offset
            if nxt is None:
                if len(fetched.records):
                    raise KafkaError(
                        ErrorCode.message_too_large,
                        f"{self.where}: the batch at offset {self.position} is "
                        f"larger than max.partition.fetch.bytes={self.fetch_bytes}",
                    )
                hw = fetched.high_watermark
                lso = fetched.last_stable_offset
                visible = lso if cfg.read_committed and 0 <= lso <= hw else hw
                if self.position < visible:
                    # Nothing left in [position, visible): compacted away (module doc).
                    self.position = min(visible, self.end)
                    progress_deadline = time.monotonic() + cfg.poll_timeout_s
                    hw_below_since = None
                    continue
                if self.position < hw:
                    hw_below_since = None  # an open transaction holds read_committed back
                    continue
                now = time.monotonic()
                hw_below_since = hw_below_since if hw_below_since is not None else now
                if now - hw_below_since >= cfg.hw_grace_s:
                    self.on_data_loss(
                        f"{self.where}: offsets {self.position}..{self.end - 1} "
                        f"were planned but the log now ends at {hw}"
                    )
                    return  # lenient: what is gone is skipped
                continue
            hw_below_since = None
            # Pipelining: the next fetch is on its way while this one decodes.
            if nxt < self.end:
                self._send(conn, nxt)
                sent_at = nxt
            cols = scan.decode(
                self.position,
                self.end,
                read_committed=cfg.read_committed,
                aborted=fetched.aborted_transactions,
                with_headers=cfg.with_headers,
                check_crcs=cfg.check_crcs,
            )
            first = self.position
            self.position = nxt
            progress_deadline = time.monotonic() + cfg.poll_timeout_s
            if cols is not None:
                if cols.offsets[0] > first and first == self.start:
                    logger.info(
                        "%s: first record at %d, not %d (compacted or deleted)",
                        self.where,
                        int(cols.offsets[0]),
                        first,
                    )
                yield cols

    # ------------------------------------------------------------------ helpers

    def _send(self, conn: object, offset: int) -> None:
        cfg = self.config
        body = encode_fetch_request(
            [FetchPartitionRequest(self.topic, self.partition, offset, self.fetch_bytes)],
            max_wait_ms=cfg.max_wait_ms,
            min_bytes=1,
            max_bytes=self.fetch_bytes,
            isolation_level=1 if cfg.read_committed else 0,
        )
        conn.send_body(FETCH_KEY, FETCH_VERSION, body)  # type: ignore[attr-defined]
        self.fetches += 1

    def _receive(self, conn: object) -> FetchedPartition:
        _key, _version, body = conn.receive_frame()  # type: ignore[attr-defined]
        try:
            error, parts = decode_fetch_response(body)
        except MalformedResponse as e:
            conn.close()  # type: ignore[attr-defined]
            raise ConnectionLost(f"malformed fetch response for {self.where}: {e}") from e
        if error != ErrorCode.none:
            raise KafkaError(ErrorCode(error), f"fetch {self.where}")
        for p in parts:
            if p.topic == self.topic and p.partition == self.partition:
                return p
        conn.close()  # type: ignore[attr-defined]
        raise ConnectionLost(f"fetch response without {self.where}")

    def _backoff_and_refresh(self) -> None:
        time.sleep(self.config.retry_backoff_s)
        try:
            self.cluster.refresh([self.topic])
        except (ConnectionLost, KafkaError) as e:
            logger.info("%s: metadata refresh failed (%s)", self.where, e)

    def _out_of_range(self) -> None:
        offs = self.cluster.list_offsets({(self.topic, self.partition): EARLIEST})
        earliest = offs[(self.topic, self.partition)]
        latest = self.cluster.list_offsets({(self.topic, self.partition): LATEST})[
            (self.topic, self.partition)
        ]
        pos = self.position
        if pos < earliest:
            self.on_data_loss(
                f"Cannot fetch offset {pos} of {self.where}: it is out of "
                f"range (the log starts at {earliest})"
            )
            logger.warning(
                "%s: skipped offsets %d..%d (no longer available; failOnDataLoss=false)",
                self.where,
                pos,
                earliest - 1,
            )
            self.position = earliest
        elif pos >= latest:
            self.on_data_loss(
                f"{self.where}: offsets {pos}..{self.end - 1} were planned but "
                f"the log now ends at {latest}"
            )
            self.position = self.end
        # else: the leader moved between the fetch and ListOffsets; fetch again
