"""Transaction APIs (KIP-98): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions and
ListTransactions.

Thin: decode the request fields, ask ``ctx.txns`` (the ``TransactionCoordinator``), the
group coordinator (TxnOffsetCommit) or the partitions (WriteTxnMarkers, sent by
coordinators), and build the response with ``responses.part/response``.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import TYPE_CHECKING, Any

from odradek.coordinator.txn_markers import write_marker_locally
from odradek.coordinator.txn_state import TxnState
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

# ACL checks (issue 14): the operations Kafka's KafkaApis checks, at the top of each
# handler, before the coordinator is asked anything.
_TXN_DENIED = ErrorCode.transactional_id_authorization_failed


def _txn_write_allowed(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


logger = logging.getLogger(__name__)

INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 22, 24, 25, 26
WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT, DESCRIBE_TXNS, LIST_TXNS = 27, 28, 65, 66
MARKER_TIMEOUT_S = 30.0


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _fenced(code: ErrorCode, version: int, fenced_from: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) only for request versions that know it; older clients
    get INVALID_PRODUCER_EPOCH, as Kafka answers them."""
    if code is ErrorCode.producer_fenced and version < fenced_from:
        return ErrorCode.invalid_producer_epoch
    return code


# =============================================================================== InitProducerId
async def init_producer_id(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    try:
        code, pid, epoch = await ctx.txns.init_producer_id(
            req.transactional_id,
            _ms(req.transaction_timeout),
            int(getattr(req, "producer_id", -1)),
            int(getattr(req, "producer_epoch", -1)),
        )
    except KafkaError as e:
        code, pid, epoch = e.code, -1, -1
    return response(
        INIT_PRODUCER_ID,
        v,
        throttle_time=0,
        error_code=_fenced(code, v, 4),
        producer_id=pid,
        producer_epoch=epoch,
    )


# =============================================================================== AddPartitionsToTxn
async def handle_add_partitions_to_txn(
    ctx: RequestContext, header: RequestHeaderInfo, req: Any
) -> Any:
    """v0-3: a client adds partitions to its transaction. v4+ (KIP-890, brokers only,
    CLUSTER_ACTION): a batch of transactions, each either added or -- ``verify_only`` --
    checked by a partition leader before a transactional batch opens a transaction
    there (odradek.coordinator.txn_verifier)."""
    v = header.api_version
    if v <= 3:
        topics = [(str(t.name), [int(p) for p in t.partitions]) for t in req.v3_and_below_topics]
        codes = await _add_partitions(
            ctx,
            v,
            req.v3_and_below_transactional_id,
            int(req.v3_and_below_producer_id),
            int(req.v3_and_below_producer_epoch),
            topics,
        )
        return response(
            ADD_PARTITIONS,
            v,
            throttle_time=0,
            results_by_topic_v3_and_below=_topic_results(v, topics, codes),
        )
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return response(
            ADD_PARTITIONS,
            v,
            throttle_time=0,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    results = []
    for txn in req.transactions:
        tid = str(txn.transactional_id)
        topics = [(str(t.name), [int(p) for p in t.partitions]) for t in txn.topics]
        if txn.verify_only:
            codes = ctx.txns.verify_partitions(
                tid,
                int(txn.producer_id),
                int(txn.producer_epoch),
                {(t, p) for t, ps in topics for p in ps},
            )
            if v == 4:  # TRANSACTION_ABORTABLE came with v5
                codes = {
                    tp: ErrorCode.invalid_txn_state if c is ErrorCode.transaction_abortable else c
                    for tp, c in codes.items()
                }
        else:
            codes = await _add_partitions(
                ctx, v, tid, int(txn.producer_id), int(txn.producer_epoch), topics
            )
        results.append(
            part(
                ADD_PARTITIONS,
                v,
                "AddPartitionsToTxnResult",
                transactional_id=tid,
                topic_results=_topic_results(v, topics, codes),
            )
        )
    return response(
        ADD_PARTITIONS,
        v,
        throttle_time=0,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(results),
    )


async def _add_partitions(
    ctx: RequestContext,
    v: int,
    tid: str,
    producer_id: int,
    epoch: int,
    topics: list[tuple[str, list[int]]],
) -> dict[tuple[str, int], ErrorCode]:
    image = ctx.image
    wanted = {(t, p) for t, ps in topics for p in ps}
    # Kafka: WRITE on the TransactionalId, else every partition gets
    # TRANSACTIONAL_ID_AUTHORIZATION_FAILED; then WRITE on each topic.
    txn_allowed = _txn_write_allowed(ctx, tid)
    denied = {
        tp
        for tp in wanted
        if txn_allowed and not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, tp[0])
    }
    unknown = {tp for tp in wanted if tp not in denied and image.partition(*tp) is None}
    if not txn_allowed:
        return dict.fromkeys(wanted, _TXN_DENIED)
    if denied or unknown:
        # Kafka: nothing is added; unauthorized topics get TOPIC_AUTHORIZATION_FAILED,
        # unknown partitions UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED.
        return {
            tp: (
                ErrorCode.topic_authorization_failed
                if tp in denied
                else ErrorCode.unknown_topic_or_partition
                if tp in unknown
                else ErrorCode.operation_not_attempted
            )
            for tp in wanted
        }
    try:
        code = await ctx.txns.add_partitions(tid, producer_id, epoch, wanted)
    except KafkaError as e:
        code = e.code
    return dict.fromkeys(wanted, _fenced(code, v, 2))


def _topic_results(
    v: int, topics: list[tuple[str, list[int]]], codes: dict[tuple[str, int], ErrorCode]
) -> tuple[Any, ...]:
    return tuple(
        part(
            ADD_PARTITIONS,
            v,
            "AddPartitionsToTxnTopicResult",
            name=t,
            results_by_partition=tuple(
                part(
                    ADD_PARTITIONS,
                    v,
                    "AddPartitionsToTxnPartitionResult",
                    partition_index=p,
                    partition_error_code=codes[(t, p)],
                )
                for p in ps
            ),
        )
        for t, ps in topics
    )


# =============================================================================== AddOffsetsToTxn
async def handle_add_offsets_to_txn(
    ctx: RequestContext, header: RequestHeaderInfo, req: Any
) -> Any:
    v = header.api_version
    # Kafka: WRITE on the TransactionalId, then READ on the group.
    if not _txn_write_allowed(ctx, req.transactional_id):
        return response(ADD_OFFSETS, v, throttle_time=0, error_code=_TXN_DENIED)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return response(
            ADD_OFFSETS, v, throttle_time=0, error_code=ErrorCode.group_authorization_failed
        )
    try:
        tp = ctx.txns.offsets_partition(req.group_id)
        code = await ctx.txns.add_partitions(
            req.transactional_id, int(req.producer_id), int(req.producer_epoch), {tp}
        )
    except KafkaError as e:
        code = e.code
    return response(ADD_OFFSETS, v, throttle_time=0, error_code=_fenced(code, v, 2))


# =============================================================================== EndTxn
async def handle_end_txn(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if not _txn_write_allowed(ctx, req.transactional_id):  # Kafka: WRITE TransactionalId
        return response(END_TXN, v, throttle_time=0, error_code=_TXN_DENIED)
    try:
        code = await ctx.txns.end_txn(
            req.transactional_id, int(req.producer_id), int(req.producer_epoch), bool(req.committed)
        )
    except KafkaError as e:
        code = e.code
    return response(END_TXN, v, throttle_time=0, error_code=_fenced(code, v, 2))


# =============================================================================== TxnOffsetCommit
async def handle_txn_offset_commit(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    entries = [
        (
            str(t.name),
            int(p.partition_index),
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata,
        )
        for t in req.topics
        for p in t.partitions
    ]
    # Kafka: WRITE on the TransactionalId, then READ on the group (else every partition
    # fails), then READ on each topic and a known partition; only the partitions that
    # pass are committed. Without the first check, READ on a group and a topic was
    # enough to write transactional offsets for any producer id: a transaction opened
    # on a __consumer_offsets partition that no coordinator would ever close.
    results: dict[tuple[str, int], ErrorCode] = {}
    if not _txn_write_allowed(ctx, req.transactional_id):
        results = {(t, p): _TXN_DENIED for t, p, *_ in entries}
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        results = {(t, p): ErrorCode.group_authorization_failed for t, p, *_ in entries}
    else:
        image = ctx.image
        for t, p, *_ in entries:
            if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t):
                results[(t, p)] = ErrorCode.topic_authorization_failed
            elif image.partition(t, p) is None:
                results[(t, p)] = ErrorCode.unknown_topic_or_partition
    allowed = [e for e in entries if (e[0], e[1]) not in results]
    if allowed:
        try:
            # The replica manager decides whether KIP-890 verification applies.
            results.update(
                await ctx.groups.txn_commit(
                    req.group_id,
                    int(req.producer_id),
                    int(req.producer_epoch),
                    getattr(req, "member_id", ""),
                    getattr(req, "group_instance_id", None),
                    int(getattr(req, "generation_id", -1)),
                    allowed,
                    transactional_id=str(req.transactional_id),
                    verifier=ctx.txns.verifier,
                )
            )
        except KafkaError as e:
            results.update({(t, p): e.code for t, p, *_ in allowed})
    by_topic: dict[str, list[Any]] = {}
    for t, p, *_ in entries:
        by_topic.setdefault(t, []).append(
            part(
                TXN_OFFSET_COMMIT,
                v,
                "TxnOffsetCommitResponsePartition",
                partition_index=p,
                error_code=_fenced(results.get((t, p), ErrorCode.none), v, 3),
            )
        )
    return response(
        TXN_OFFSET_COMMIT,
        v,
        throttle_time=0,
        topics=tuple(
            part(TXN_OFFSET_COMMIT, v, "TxnOffsetCommitResponseTopic", name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )


# =============================================================================== WriteTxnMarkers
async def handle_write_txn_markers(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    """From a transaction coordinator: append a COMMIT/ABORT control batch to each
    partition we lead (acks=all), answering per partition."""
    v = header.api_version
    # Kafka: only brokers (CLUSTER_ACTION) may write markers; else every partition fails.
    cluster_action = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)

    async def one(m: Any, topic: str, p: int) -> ErrorCode:
        if not cluster_action:
            return ErrorCode.cluster_authorization_failed
        try:
            ctx.replicas.leader_partition(topic, p, ctx.image)
        except KafkaError as e:
            return e.code
        return await write_marker_locally(
            ctx.replicas,
            ctx.groups,
            (topic, p),
            int(m.producer_id),
            int(m.producer_epoch),
            bool(m.transaction_result),
            int(m.coordinator_epoch),
            MARKER_TIMEOUT_S,
        )

    results = []
    for m in req.markers:
        topics = [(str(t.name), [int(p) for p in t.partition_indexes]) for t in m.topics]
        codes = await asyncio.gather(*(one(m, t, p) for t, ps in topics for p in ps))
        it = iter(codes)
        results.append(
            part(
                WRITE_TXN_MARKERS,
                v,
                "WritableTxnMarkerResult",
                producer_id=m.producer_id,
                topics=tuple(
                    part(
                        WRITE_TXN_MARKERS,
                        v,
                        "WritableTxnMarkerTopicResult",
                        name=t,
                        partitions=tuple(
                            part(
                                WRITE_TXN_MARKERS,
                                v,
                                "WritableTxnMarkerPartitionResult",
                                partition_index=p,
                                error_code=next(it),
                            )
                            for p in ps
                        ),
                    )
                    for t, ps in topics
                ),
            )
        )
    return response(WRITE_TXN_MARKERS, v, markers=tuple(results))


# =============================================================================== Describe/List
def handle_describe_transactions(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    states = []
    for tid in req.transactional_ids:
        kw: dict[str, Any] = dict(
            error_code=ErrorCode.none,
            transactional_id=tid,
            transaction_state="",
            transaction_timeout=0,
            transaction_start_time=_when(-1),
            producer_id=-1,
            producer_epoch=-1,
            topics=(),
        )
        try:
            # Kafka: DESCRIBE on the TransactionalId; topics the client may not describe
            # are left out of the answer.
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
                raise KafkaError(_TXN_DENIED)
            m = ctx.txns.describe(tid)
            if m is None:
                kw["error_code"] = ErrorCode.transactional_id_not_found
            else:
                by_topic: dict[str, list[int]] = {}
                for t, p in sorted(m.partitions):
                    if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t):
                        by_topic.setdefault(t, []).append(p)
                kw.update(
                    transaction_state=m.state.kafka_name,
                    transaction_timeout=m.timeout_ms,
                    transaction_start_time=_when(m.start_ms),
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    topics=tuple(
                        part(DESCRIBE_TXNS, v, "TopicData", topic=t, partitions=tuple(ps))
                        for t, ps in by_topic.items()
                    ),
                )
        except KafkaError as e:
            kw["error_code"] = e.code
        states.append(part(DESCRIBE_TXNS, v, "TransactionState", **kw))
    return response(DESCRIBE_TXNS, v, throttle_time=0, transaction_states=tuple(states))


def _when(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(max(ms, -1) / 1000, tz=datetime.UTC)


def handle_list_transactions(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    known = {s.kafka_name for s in TxnState}
    filters = set(req.state_filters)
    pids = set(int(p) for p in req.producer_id_filters)
    duration = int(getattr(req, "duration_filter", -1))
    now = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
    out = []
    code, listed = ctx.txns.list()
    for m in listed:
        if filters and m.state.kafka_name not in filters:
            continue
        if pids and m.producer_id not in pids:
            continue
        if duration >= 0 and (m.state is not TxnState.ONGOING or now - m.start_ms < duration):
            continue
        # Kafka: only the transactional ids the client may DESCRIBE are listed.
        if not ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id
        ):
            continue
        out.append(
            part(
                LIST_TXNS,
                v,
                "TransactionState",
                transactional_id=m.transactional_id,
                producer_id=m.producer_id,
                transaction_state=m.state.kafka_name,
            )
        )
    return response(
        LIST_TXNS,
        v,
        throttle_time=0,
        error_code=code,
        unknown_state_filters=(tuple(sorted(filters - known)) if code is ErrorCode.none else ()),
        transaction_states=tuple(out),
    )
