"""InitProducerId (API 22) (KIP-98) and DescribeProducers (API 61) (KIP-664).

InitProducerId with a null transactional id is what an idempotent producer sends: it
gets a fresh producer id at epoch 0 (as Kafka does; KIP-360's epoch bump applies to
transactional ids). With a transactional id the transaction coordinator answers
(``handlers.transactions``: epoch bump, fencing). Ids come from
``odradek.coordinator.producer_ids`` (blocks claimed in ZooKeeper).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import AclOperation, ResourceType
from odradek.server.context import RequestContext
from odradek.server.handlers.transactions import init_producer_id

logger = logging.getLogger(__name__)


async def handle_init_producer_id(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if req.transactional_id is not None:
        # Kafka's KafkaApis: WRITE on the TransactionalId resource.
        if not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
        ):
            return response(
                22,
                v,
                throttle_time=0,
                error_code=ErrorCode.transactional_id_authorization_failed,
                producer_id=-1,
                producer_epoch=-1,
            )
        return await init_producer_id(ctx, header, req)
    # KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on
    # some topic.
    if not (
        ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE)
        or ctx.authorize_any_topic(AclOperation.WRITE)
    ):
        return response(
            22,
            v,
            throttle_time=0,
            error_code=ErrorCode.cluster_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    ids = ctx.producer_ids
    try:
        if ids is None:  # the broker is still starting (no ZooKeeper session yet)
            raise RuntimeError("producer id manager not started")
        pid = await asyncio.to_thread(ids.next_id)
    except Exception:
        logger.exception("could not allocate a producer id")
        return response(
            22,
            v,
            throttle_time=0,
            error_code=ErrorCode.coordinator_not_available,
            producer_id=-1,
            producer_epoch=-1,
        )
    return response(
        22, v, throttle_time=0, error_code=ErrorCode.none, producer_id=pid, producer_epoch=0
    )


DESCRIBE_PRODUCERS = 61


def handle_describe_producers(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    """The producers a replica knows (KIP-664; ``odradek transactions describe-producers``
    and ``find-hanging``), as Kafka's ``ReplicaManager.activeProducerState``: each
    producer's epoch, last sequence, the max timestamp of its last batch or marker, the
    coordinator epoch of its last marker and the first offset of its open transaction
    (-1: none). Leaders and followers answer alike (followers keep the same producer
    state); a broker without a replica answers NOT_LEADER_OR_FOLLOWER, an unknown
    partition UNKNOWN_TOPIC_OR_PARTITION. READ on the topic (else
    TOPIC_AUTHORIZATION_FAILED)."""
    v = header.api_version
    image = ctx.image
    topics = []
    for t in req.topics:
        name = str(t.name)
        allowed = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name)
        partitions = []
        for index in t.partition_indexes:
            code, producers = ErrorCode.none, []
            try:
                if not allowed:
                    raise KafkaError(ErrorCode.topic_authorization_failed, name)
                p = ctx.replicas.partitions.get((name, int(index)))
                if p is None:
                    raise KafkaError(
                        ErrorCode.unknown_topic_or_partition
                        if image.partition(name, int(index)) is None
                        else ErrorCode.not_leader_or_follower,
                        name,
                    )
                ps = p.producers
                producers = [
                    part(
                        DESCRIBE_PRODUCERS,
                        v,
                        "ProducerState",
                        producer_id=pid,
                        producer_epoch=e.epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=ps.ongoing.get(pid, -1),
                    )
                    for pid, e in sorted(ps.producers.items())
                ]
            except KafkaError as e:
                code = e.code
            partitions.append(
                part(
                    DESCRIBE_PRODUCERS,
                    v,
                    "PartitionResponse",
                    partition_index=index,
                    error_code=code,
                    error_message=None,
                    active_producers=tuple(producers),
                )
            )
        topics.append(
            part(DESCRIBE_PRODUCERS, v, "TopicResponse", name=name, partitions=tuple(partitions))
        )
    return response(DESCRIBE_PRODUCERS, v, throttle_time=0, topics=tuple(topics))
