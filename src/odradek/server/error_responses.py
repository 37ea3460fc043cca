"""One error code for every resource of a request: Kafka's ``getErrorResponse``.

When a handler fails in a way it did not anticipate (issue 11, item 3), the client must
still get an answer it can act on, not a closed connection: Kafka's request classes each
have ``getErrorResponse(throwable)``, which answers the request with the throwable's
error code for every topic / partition / group / resource it names (and the top-level
error field where the version has one). ``error_response`` does the same for every API
Odradek serves; the dispatcher uses it with UNKNOWN_SERVER_ERROR for unexpected
exceptions and with the error's own code for a ``KafkaError`` that escaped a handler.

Produce and Fetch answers are hand-encoded (bytes / parts), like their handlers';
everything else is a kio response entity built with ``responses.response/part``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from odradek.errors import ErrorCode
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.fetch_response import PartitionFetchResult, encode_fetch_response
from odradek.protocol.list_offsets_v0 import encode_response as encode_list_offsets_v0
from odradek.protocol.produce_response import PartitionProduceResult, encode_produce_response
from odradek.protocol.responses import part, response

logger = logging.getLogger(__name__)

__all__ = ["ERROR_RESPONSES", "error_response"]

_OPS_OMITTED = -2147483648  # KIP-430: authorized operations not computed

Builder = Callable[[RequestHeaderInfo, Any, int, str | None], Any]


def _seq(value: Any) -> tuple[Any, ...]:
    return tuple(value) if value is not None else ()


def _produce(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    topics = [
        (
            t.name,
            [
                PartitionProduceResult(
                    index=int(p.index), error_code=code, base_offset=-1, error_message=msg
                )
                for p in _seq(t.partition_data)
            ],
        )
        for t in _seq(req.topic_data)
    ]
    if int(req.acks) == 0:
        return None  # acks=0 gets no response at all
    return encode_produce_response(h.api_version, h.correlation_id, topics)


def _fetch(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    topics = [
        (
            t.topic,
            [
                PartitionFetchResult(
                    index=int(p.partition),
                    error_code=code,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    records=None,
                )
                for p in _seq(t.partitions)
            ],
        )
        for t in _seq(req.topics)
    ]
    return encode_fetch_response(h.api_version, h.correlation_id, topics, error_code=code)


def _list_offsets(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    if v == 0:  # hand-encoded (kio has no v0)
        return encode_list_offsets_v0(
            h.correlation_id,
            [
                (t.name, [(p.partition_index, int(code), []) for p in t.partitions])
                for t in req.topics
            ],
        )
    return response(
        2,
        v,
        topics=tuple(
            part(
                2,
                v,
                "ListOffsetsTopicResponse",
                name=t.name,
                partitions=tuple(
                    part(
                        2,
                        v,
                        "ListOffsetsPartitionResponse",
                        partition_index=p.partition_index,
                        error_code=code,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                    for p in _seq(t.partitions)
                ),
            )
            for t in _seq(req.topics)
        ),
    )


def _metadata(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    topics = tuple(
        part(
            3,
            v,
            "MetadataResponseTopic",
            error_code=code,
            name=t.name,
            topic_id=getattr(t, "topic_id", None),
            is_internal=False,
            partitions=(),
            topic_authorized_operations=_OPS_OMITTED,
        )
        for t in _seq(req.topics)
    )
    return response(
        3,
        v,
        brokers=(),
        cluster_id=None,
        controller_id=-1,
        topics=topics,
        cluster_authorized_operations=_OPS_OMITTED,
    )


def _offset_commit(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        8,
        v,
        topics=tuple(
            part(
                8,
                v,
                "OffsetCommitResponseTopic",
                name=t.name,
                partitions=tuple(
                    part(
                        8,
                        v,
                        "OffsetCommitResponsePartition",
                        partition_index=p.partition_index,
                        error_code=code,
                    )
                    for p in _seq(t.partitions)
                ),
            )
            for t in _seq(req.topics)
        ),
    )


def _offset_fetch(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    # v2+ carries the error at the top; v1 only per partition (Kafka does the same).
    per_partition = code if v < 2 else ErrorCode.none
    return response(
        9,
        v,
        error_code=code,
        topics=tuple(
            part(
                9,
                v,
                "OffsetFetchResponseTopic",
                name=t.name,
                partitions=tuple(
                    part(
                        9,
                        v,
                        "OffsetFetchResponsePartition",
                        partition_index=p,
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=per_partition,
                    )
                    for p in _seq(t.partition_indexes)
                ),
            )
            for t in _seq(req.topics)
        ),
    )


def _top_level(api_key: int, **fixed: Any) -> Builder:
    """APIs whose response has one top-level error code."""

    def build(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
        return response(api_key, h.api_version, error_code=code, error_message=msg, **fixed)

    return build


def _add_partitions_to_txn(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version

    def topics(ts: Any) -> tuple[Any, ...]:
        return tuple(
            part(
                24,
                v,
                "AddPartitionsToTxnTopicResult",
                name=t.name,
                results_by_partition=tuple(
                    part(
                        24,
                        v,
                        "AddPartitionsToTxnPartitionResult",
                        partition_index=p,
                        partition_error_code=code,
                    )
                    for p in _seq(t.partitions)
                ),
            )
            for t in _seq(ts)
        )

    if v <= 3:
        return response(24, v, results_by_topic_v3_and_below=topics(req.v3_and_below_topics))
    # v4+ (between brokers, KIP-890): the top-level code, and each partition's.
    return response(
        24,
        v,
        error_code=code,
        results_by_transaction=tuple(
            part(
                24,
                v,
                "AddPartitionsToTxnResult",
                transactional_id=txn.transactional_id,
                topic_results=topics(txn.topics),
            )
            for txn in _seq(req.transactions)
        ),
    )


def _write_txn_markers(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        27,
        v,
        markers=tuple(
            part(
                27,
                v,
                "WritableTxnMarkerResult",
                producer_id=m.producer_id,
                topics=tuple(
                    part(
                        27,
                        v,
                        "WritableTxnMarkerTopicResult",
                        name=t.name,
                        partitions=tuple(
                            part(
                                27,
                                v,
                                "WritableTxnMarkerPartitionResult",
                                partition_index=p,
                                error_code=code,
                            )
                            for p in _seq(t.partition_indexes)
                        ),
                    )
                    for t in _seq(m.topics)
                ),
            )
            for m in _seq(req.markers)
        ),
    )


def _txn_offset_commit(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        28,
        v,
        topics=tuple(
            part(
                28,
                v,
                "TxnOffsetCommitResponseTopic",
                name=t.name,
                partitions=tuple(
                    part(
                        28,
                        v,
                        "TxnOffsetCommitResponsePartition",
                        partition_index=p.partition_index,
                        error_code=code,
                    )
                    for p in _seq(t.partitions)
                ),
            )
            for t in _seq(req.topics)
        ),
    )


def _describe_producers(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        61,
        v,
        topics=tuple(
            part(
                61,
                v,
                "TopicResponse",
                name=t.name,
                partitions=tuple(
                    part(
                        61,
                        v,
                        "PartitionResponse",
                        partition_index=p,
                        error_code=code,
                        error_message=msg,
                        active_producers=(),
                    )
                    for p in _seq(t.partition_indexes)
                ),
            )
            for t in _seq(req.topics)
        ),
    )


def _describe_transactions(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    import datetime

    v = h.api_version
    epoch = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
    return response(
        65,
        v,
        transaction_states=tuple(
            part(
                65,
                v,
                "TransactionState",
                error_code=code,
                transactional_id=t,
                transaction_state="",
                transaction_timeout=0,
                transaction_start_time=epoch,
                producer_id=-1,
                producer_epoch=-1,
                topics=(),
            )
            for t in _seq(req.transactional_ids)
        ),
    )


def _join_group(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        11,
        v,
        error_code=code,
        generation_id=-1,
        protocol_type=None,
        protocol_name=None if v >= 7 else "",
        leader="",
        member_id=req.member_id or "",
        members=(),
    )


def _leave_group(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    return response(13, h.api_version, error_code=code, members=())


def _describe_groups(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        15,
        v,
        groups=tuple(
            part(
                15,
                v,
                "DescribedGroup",
                error_code=code,
                group_id=g,
                group_state="",
                protocol_type="",
                protocol_data="",
                members=(),
                authorized_operations=_OPS_OMITTED,
            )
            for g in _seq(req.groups)
        ),
    )


def _create_topics(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        19,
        v,
        topics=tuple(
            part(
                19,
                v,
                "CreatableTopicResult",
                name=t.name,
                error_code=code,
                error_message=msg,
                topic_config_error_code=0,
                num_partitions=-1,
                replication_factor=-1,
                configs=None,
            )
            for t in _seq(req.topics)
        ),
    )


def _delete_topics(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        20,
        v,
        responses=tuple(
            part(20, v, "DeletableTopicResult", name=n, error_code=code, error_message=msg)
            for n in _seq(req.topic_names)
        ),
    )


def _delete_records(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        21,
        v,
        topics=tuple(
            part(
                21,
                v,
                "DeleteRecordsTopicResult",
                name=t.name,
                partitions=tuple(
                    part(
                        21,
                        v,
                        "DeleteRecordsPartitionResult",
                        partition_index=p.partition_index,
                        low_watermark=-1,
                        error_code=code,
                    )
                    for p in _seq(t.partitions)
                ),
            )
            for t in _seq(req.topics)
        ),
    )


def _offset_for_leader_epoch(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        23,
        v,
        topics=tuple(
            part(
                23,
                v,
                "OffsetForLeaderTopicResult",
                topic=t.topic,
                partitions=tuple(
                    part(
                        23,
                        v,
                        "EpochEndOffset",
                        error_code=code,
                        partition=p.partition,
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                    for p in _seq(t.partitions)
                ),
            )
            for t in _seq(req.topics)
        ),
    )


def _describe_configs(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        32,
        v,
        results=tuple(
            part(
                32,
                v,
                "DescribeConfigsResult",
                error_code=code,
                error_message=msg,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=(),
            )
            for r in _seq(req.resources)
        ),
    )


def _alter_configs(api_key: int) -> Builder:
    def build(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
        v = h.api_version
        return response(
            api_key,
            v,
            responses=tuple(
                part(
                    api_key,
                    v,
                    "AlterConfigsResourceResponse",
                    error_code=code,
                    error_message=msg,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                for r in _seq(req.resources)
            ),
        )

    return build


def _create_partitions(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        37,
        v,
        results=tuple(
            part(
                37,
                v,
                "CreatePartitionsTopicResult",
                name=t.name,
                error_code=code,
                error_message=msg,
            )
            for t in _seq(req.topics)
        ),
    )


def _delete_groups(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        42,
        v,
        results=tuple(
            part(42, v, "DeletableGroupResult", group_id=g, error_code=code)
            for g in _seq(req.groups_names)
        ),
    )


def _offset_delete(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    return response(47, h.api_version, error_code=code, throttle_time=0, topics=())


def _elect_leaders(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        43,
        v,
        error_code=code,
        replica_election_results=tuple(
            part(
                43,
                v,
                "ReplicaElectionResult",
                topic=t.topic,
                partition_result=tuple(
                    part(
                        43, v, "PartitionResult", partition_id=p, error_code=code, error_message=msg
                    )
                    for p in _seq(t.partitions)
                ),
            )
            for t in _seq(req.topic_partitions)
        ),
    )


def _create_acls(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        30,
        v,
        results=tuple(
            part(30, v, "AclCreationResult", error_code=code, error_message=msg)
            for _ in _seq(req.creations)
        ),
    )


def _delete_acls(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        31,
        v,
        filter_results=tuple(
            part(
                31,
                v,
                "DeleteAclsFilterResult",
                error_code=code,
                error_message=msg,
                matching_acls=(),
            )
            for _ in _seq(req.filters)
        ),
    )


def _alter_scram(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    users = dict.fromkeys(
        [d.name for d in _seq(req.deletions)] + [u.name for u in _seq(req.upsertions)]
    )
    return response(
        51,
        h.api_version,
        results=tuple(
            part(
                51,
                h.api_version,
                "AlterUserScramCredentialsResult",
                user=u,
                error_code=code,
                error_message=msg,
            )
            for u in users
        ),
    )


def _alter_client_quotas(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        49,
        v,
        entries=tuple(
            part(
                49,
                v,
                "EntryData",
                error_code=code,
                error_message=msg,
                entity=tuple(
                    part(49, v, "EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in _seq(entry.entity)
                ),
            )
            for entry in _seq(req.entries)
        ),
    )


def _alter_reassignments(h: RequestHeaderInfo, req: Any, code: int, msg: str | None) -> Any:
    v = h.api_version
    return response(
        45,
        v,
        error_code=code,
        error_message=msg,
        responses=tuple(
            part(
                45,
                v,
                "ReassignableTopicResponse",
                name=t.name,
                partitions=tuple(
                    part(
                        45,
                        v,
                        "ReassignablePartitionResponse",
                        partition_index=p.partition_index,
                        error_code=code,
                        error_message=msg,
                    )
                    for p in _seq(t.partitions)
                ),
            )
            for t in _seq(req.topics)
        ),
    )


ERROR_RESPONSES: dict[int, Builder] = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    3: _metadata,
    8: _offset_commit,
    9: _offset_fetch,
    10: _top_level(10, node_id=-1, host="", port=-1),
    11: _join_group,
    12: _top_level(12),
    13: _leave_group,
    14: _top_level(14, protocol_type=None, protocol_name=None, assignment=b""),
    15: _describe_groups,
    16: _top_level(16, groups=()),
    17: _top_level(17, mechanisms=()),
    18: _top_level(
        18,
        api_keys=(),
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    ),
    19: _create_topics,
    20: _delete_topics,
    21: _delete_records,
    22: _top_level(22, producer_id=-1, producer_epoch=-1),
    23: _offset_for_leader_epoch,
    29: _top_level(29, resources=()),
    30: _create_acls,
    31: _delete_acls,
    32: _describe_configs,
    33: _alter_configs(33),
    36: _top_level(36, auth_bytes=b"", session_lifetime=0),
    37: _create_partitions,
    42: _delete_groups,
    47: _offset_delete,
    43: _elect_leaders,
    44: _alter_configs(44),
    48: _top_level(48, entries=None),
    49: _alter_client_quotas,
    50: _top_level(50, results=()),
    51: _alter_scram,
    24: _add_partitions_to_txn,
    25: _top_level(25),
    26: _top_level(26),
    27: _write_txn_markers,
    28: _txn_offset_commit,
    61: _describe_producers,
    65: _describe_transactions,
    66: _top_level(66, unknown_state_filters=(), transaction_states=()),
    45: _alter_reassignments,
    46: _top_level(46, topics=()),
    60: _top_level(
        60,
        endpoint_type=1,
        cluster_id="",
        controller_id=-1,
        brokers=(),
        cluster_authorized_operations=_OPS_OMITTED,
    ),
}


def error_response(
    header: RequestHeaderInfo, req: Any, code: int, message: str | None = None
) -> Any:
    """The answer to ``req`` with ``code`` for everything it names (see module doc):
    a kio response entity, encoded bytes / parts (Produce, Fetch) or None (acks=0)."""
    # kio's writers want the ErrorCode enum (an int subclass: the hand-written Produce
    # and Fetch encoders take it as it is).
    return ERROR_RESPONSES[header.api_key](header, req, ErrorCode(code), message)
