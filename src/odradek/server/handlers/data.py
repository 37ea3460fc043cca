"""Produce, Fetch and ListOffsets: the hot path (SPEC R3, R7, R8, R16, R17, R26).

Produce and Fetch responses are encoded by the hand-written encoders in
``odradek.protocol`` (no kio on the hot path); record batches are never decompressed.
A handler returns the encoded response (``bytes`` or a list of parts for the writer),
``None`` for no response (acks=0), or a coroutine when it must wait (delayed operations).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from odradek.replication.partition import Partition
from odradek.replication.replica_manager import PendingAck, now_ms
from odradek.protocol.responses import part, response
from odradek.server.log_limiter import LogLimiter
from odradek.server.network import CloseConnection
from odradek.errors import ErrorCode, KafkaError
from odradek.topics import INTERNAL_TOPICS
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.fetch_response import PartitionFetchResult, encode_fetch_response
from odradek.protocol.produce_response import PartitionProduceResult, encode_produce_response

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

log = logging.getLogger(__name__)
REJECTED_LOG = LogLimiter(burst=5, interval_s=60.0)

Result = bytes | list[Any] | None | Coroutine[Any, Any, Any]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734 (ListOffsets v7)


# =============================================================================== Produce
def handle_produce(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Result:
    acks = int(req.acks)
    version = header.api_version
    results: list[tuple[str, list[PartitionProduceResult]]] = []
    pending: list[tuple[PendingAck, PartitionProduceResult]] = []
    appended: list[tuple[str, int]] = []
    any_error = False
    image = ctx.image
    t_now = now_ms()
    for topic in req.topic_data:
        presults: list[PartitionProduceResult] = []
        results.append((topic.name, presults))
        for pd in topic.partition_data:
            res = PartitionProduceResult(index=pd.index, error_code=0, base_offset=-1)
            presults.append(res)
            try:
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks}")
                if req.transactional_id is not None:
                    # Transactions are not implemented; say so instead of storing
                    # records whose commit markers would never come.
                    raise KafkaError(ErrorCode.transactional_id_authorization_failed,
                                     "transactions are not supported")
                if pd.records is None:
                    raise KafkaError(ErrorCode.invalid_record, "null records")
                if topic.name in INTERNAL_TOPICS:
                    # Kafka (ReplicaManager.appendToLocalLog): clients never write to
                    # internal topics; the coordinators append to them locally.
                    raise KafkaError(ErrorCode.invalid_topic_exception,
                                     f"Cannot append to internal topic {topic.name}")
                p: Partition = ctx.replicas.leader_partition(topic.name, pd.index, image)
                info = p.append_as_leader(pd.records, acks, t_now)
                appended.append((topic.name, pd.index))
                res.base_offset = info.first_offset
                res.log_append_time_ms = info.log_append_time
                res.log_start_offset = p.log.log_start_offset
                if acks == -1 and not p.acks_all_satisfied(info.last_offset):
                    pending.append((PendingAck(p, info.last_offset), res))
                elif (acks == 1 and p.log.config.ack_fsync
                      and p.log.durable_offset <= info.last_offset):
                    # odradek.ack.fsync: acks=1 answers after the leader's (group) fsync.
                    pending.append((PendingAck(p, info.last_offset, durable=True), res))
            except KafkaError as e:
                any_error = True
                res.error_code = int(e.code)
                res.error_message = e.message or None
                if e.code not in (ErrorCode.not_leader_or_follower,
                                  ErrorCode.unknown_topic_or_partition):
                    # Rate-limited per error code: a client repeating a bad produce
                    # must not be able to fill the log disk (issue 11).
                    REJECTED_LOG.log(log, logging.INFO, e.code,
                                     "produce to %s-%d rejected: %s", topic.name, pd.index, e)
            except Exception as e:  # never let one partition take the broker down
                any_error = True
                log.exception("produce to %s-%d failed", topic.name, pd.index)
                res.error_code = int(ErrorCode.unknown_server_error)
                res.error_message = str(e)[:200]
    if appended:
        ctx.replicas.notify_append(appended)
    if acks == 0:
        if any_error:
            # Kafka: with acks=0 the client gets no response, so the only way to tell it
            # something went wrong is to close the connection (it then refreshes metadata).
            raise CloseConnection("acks=0 produce failed")
        return None
    if not pending:
        return encode_produce_response(version, header.correlation_id, results)
    return _delayed_produce(ctx, header, results, pending, req.timeout.total_seconds())


async def _delayed_produce(ctx: RequestContext, header: RequestHeaderInfo,
                           results: list[tuple[str, list[PartitionProduceResult]]],
                           pending: list[tuple[PendingAck, PartitionProduceResult]],
                           timeout_s: float) -> bytes:
    errors = await ctx.replicas.wait_for_acks([p for p, _ in pending], timeout_s)
    for ack, res in pending:
        code = errors.get((ack.partition.topic, ack.partition.index))
        if code is not None:
            res.error_code = int(code)
            if code != ErrorCode.not_enough_replicas_after_append:
                res.base_offset = -1
    return encode_produce_response(header.api_version, header.correlation_id, results)


# =============================================================================== Fetch
def handle_fetch(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Result:
    version = header.api_version
    session_id = int(getattr(req, "session_id", 0))
    if session_id != 0:
        # We never create fetch sessions (KIP-227): answering session id 0 tells the
        # client to send full fetch requests, so an incremental one is a stale session.
        return encode_fetch_response(version, header.correlation_id, [],
                                     error_code=int(ErrorCode.fetch_session_id_not_found))
    replica_id = int(req.replica_id)
    if replica_id >= 0:
        # A follower's fetch (SPEC R3, R16): its fetch offsets are its LEOs.
        _record_follower_fetch(ctx, req, replica_id)
    max_wait_s = req.max_wait.total_seconds()
    min_bytes = min(int(req.min_bytes), ctx.config.fetch_max_bytes)  # Kafka caps it too
    topics, total, errored = _read_fetch(ctx, req)
    if total >= min_bytes or max_wait_s <= 0 or errored:
        return encode_fetch_response(version, header.correlation_id, topics)
    return _delayed_fetch(ctx, header, req, time.monotonic() + max_wait_s, min_bytes)


async def _delayed_fetch(ctx: RequestContext, header: RequestHeaderInfo, req: Any,
                         deadline: float, min_bytes: int) -> list[Any]:
    """SPEC R17: wait for data, woken at once by an append to any requested partition."""
    tps = [(t.topic, p.partition) for t in req.topics for p in t.partitions]
    while True:
        # Read *before* waiting, in the same step that registers the waiter: between the
        # handler's first read and this coroutine's first run, an append (or HW move) may
        # already have happened and woken nobody — waiting then would sleep the whole
        # max_wait (a follower's 500 ms: acks=all latency tails).
        topics, total, errored = _read_fetch(ctx, req)
        remaining = deadline - time.monotonic()
        if total >= min_bytes or errored or remaining <= 0:
            return encode_fetch_response(header.api_version, header.correlation_id, topics)
        await ctx.replicas.wait_for_change(tps, remaining)


def _record_follower_fetch(ctx: RequestContext, req: Any, replica_id: int) -> None:
    image = ctx.image
    for t in req.topics:
        for fp in t.partitions:
            try:
                p = ctx.replicas.leader_partition(
                    t.topic, fp.partition, image, int(getattr(fp, "current_leader_epoch", -1)))
            except KafkaError:
                continue  # the read below reports the error for this partition
            if replica_id in p.replicas:
                ctx.replicas.record_follower_fetch(
                    p, replica_id, int(fp.fetch_offset),
                    int(getattr(fp, "log_start_offset", -1)))  # DeleteRecords low watermark


def _read_fetch(ctx: RequestContext, req: Any) -> tuple[list[tuple[str, list[PartitionFetchResult]]],
                                                    int, bool]:
    image = ctx.image
    committed_only = int(req.replica_id) < 0  # followers read up to the LEO (SPEC R16)
    # Kafka (KafkaApis.handleFetchRequest): the broker's fetch.max.bytes caps the
    # request's max_bytes, for consumers and followers alike (issue 11: one fetch with
    # max_bytes=2^31-1 returned 125 MB).
    remaining = min(int(getattr(req, "max_bytes", 0x7FFFFFFF)), ctx.config.fetch_max_bytes)
    total = 0
    errored = False
    out: list[tuple[str, list[PartitionFetchResult]]] = []
    for t in req.topics:
        presults: list[PartitionFetchResult] = []
        out.append((t.topic, presults))
        for fp in t.partitions:
            res = PartitionFetchResult(index=fp.partition, error_code=0, high_watermark=-1,
                                       last_stable_offset=-1, log_start_offset=-1, records=None)
            presults.append(res)
            try:
                p = ctx.replicas.leader_partition(
                    t.topic, fp.partition, image, int(getattr(fp, "current_leader_epoch", -1)))
                res.high_watermark = res.last_stable_offset = p.high_watermark
                res.log_start_offset = p.log.log_start_offset
                limit = min(int(fp.partition_max_bytes), remaining)
                if limit <= 0 and total > 0:
                    continue
                # KIP-74: the first partition with data returns at least one whole batch
                # even when it exceeds max_bytes, so a consumer can always make progress.
                sl = p.read(int(fp.fetch_offset), max(limit, 0), min_one_batch=(total == 0),
                            committed_only=committed_only)
                if sl is not None and sl.size:
                    res.records = sl
                    total += sl.size
                    remaining -= sl.size
            except KafkaError as e:
                errored = True
                res.error_code = int(e.code)
            except Exception:
                errored = True
                log.exception("fetch from %s-%d failed", t.topic, fp.partition)
                res.error_code = int(ErrorCode.unknown_server_error)
    return out, total, errored


# =============================================================================== ListOffsets
def handle_list_offsets(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    image = ctx.image
    topics = []
    for t in req.topics:
        parts = []
        for lp in t.partitions:
            kw: dict[str, Any] = dict(partition_index=lp.partition_index, error_code=ErrorCode.none,
                                      timestamp=-1, offset=-1, leader_epoch=-1)
            try:
                p = ctx.replicas.leader_partition(
                    t.name, lp.partition_index, image,
                    int(getattr(lp, "current_leader_epoch", -1)))
                ts = int(lp.timestamp)
                kw["leader_epoch"] = p.leader_epoch
                if ts == LATEST_TIMESTAMP:
                    # Consumers see only committed records: "latest" is the HW (SPEC R16).
                    kw["offset"] = p.high_watermark
                elif ts == EARLIEST_TIMESTAMP:
                    kw["offset"] = p.log.log_start_offset
                elif ts == MAX_TIMESTAMP:
                    found = p.log.offset_of_max_timestamp()
                    if found is not None and found[0] < p.high_watermark:
                        kw["offset"], kw["timestamp"] = found
                elif ts < 0:
                    raise KafkaError(ErrorCode.invalid_request, f"timestamp {ts}")
                else:
                    found = p.log.offset_for_timestamp(ts)
                    if found is not None and found[0] < p.high_watermark:
                        kw["offset"], kw["timestamp"] = found
            except KafkaError as e:
                kw["error_code"] = e.code
            parts.append(part(2, v, "ListOffsetsPartitionResponse", **kw))
        topics.append(part(2, v, "ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return response(2, v, topics=tuple(topics))


# =============================================================================== OffsetsForLeaderEpoch
def handle_offset_for_leader_epoch(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    """SPEC R19: where does epoch E end on the leader? (KIP-101, KIP-279, KIP-320)."""
    v = header.api_version
    image = ctx.image
    topics = []
    for t in req.topics:
        parts = []
        for rp in t.partitions:
            kw: dict[str, Any] = dict(error_code=ErrorCode.none, partition=rp.partition,
                                      leader_epoch=-1, end_offset=-1)
            try:
                p = ctx.replicas.leader_partition(
                    t.topic, rp.partition, image, int(getattr(rp, "current_leader_epoch", -1)))
                epoch, end = p.epochs.end_offset_for(int(rp.leader_epoch), p.log_end_offset)
                if int(getattr(req, "replica_id", -1)) < 0 and end > p.high_watermark:
                    # Consumers (KIP-320) must not learn of uncommitted offsets.
                    end = p.high_watermark
                kw.update(leader_epoch=epoch, end_offset=end)
            except KafkaError as e:
                kw["error_code"] = e.code
            parts.append(part(23, v, "EpochEndOffset", **kw))
        topics.append(part(23, v, "OffsetForLeaderTopicResult", topic=t.topic,
                           partitions=tuple(parts)))
    return response(23, v, throttle_time=0, topics=tuple(topics))
