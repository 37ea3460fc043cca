"""ApiVersions, Metadata and DescribeCluster (REQ-R11: any broker answers metadata).

Metadata may auto-create topics (``auto.create.topics.enable``, ``num.partitions``,
``default.replication.factor``), answering LEADER_NOT_AVAILABLE for them in that response
as Kafka does; clients retry and find the leader on their next request.

Authorization (issue 14, Kafka's handleTopicMetadataRequest): a request for all topics
lists only those the principal may DESCRIBE; a named topic it may not describe is
answered TOPIC_AUTHORIZATION_FAILED whether it exists or not (so its existence is not
revealed); auto-creation needs CREATE on the cluster or the topic. When the client asks
(v8+), ``topic_authorized_operations`` / ``cluster_authorized_operations`` carry the
bit field of the operations allowed (KIP-430).

Each topic's encoded entry is kept while that topic and the live brokers are unchanged,
and without an authorizer the whole encoded answer while the image is
(``server/metadata_answers.py``: at 10,000 partitions building and encoding an answer
for every topic took ~90 ms of the event loop).
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from kio.serial import entity_writer

from odradek.errors import ErrorCode, KafkaError
from odradek.metadata.image import BrokerInfo, MetadataImage, TopicInfo
from odradek.protocol.codec import RequestHeaderInfo, encode_response_body, frame_response
from odradek.protocol.responses import nested, part, response
from odradek.protocol.versions import ADVERTISED
from odradek.protocol.wire import I32, uvarint
from odradek.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType
from odradek.topics import topic_name_error
from odradek.zk.admin import plan_new_topic

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

logger = logging.getLogger(__name__)

# Kafka's "authorized operations not requested" sentinel (KIP-430).
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def handle_api_versions(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    keys = tuple(
        part(18, v, "ApiVersion", api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in ADVERTISED.items()
    )
    return response(
        18,
        v,
        error_code=ErrorCode.none,
        api_keys=keys,
        throttle_time=0,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


def handle_describe_cluster(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    image = ctx.image
    if int(getattr(req, "endpoint_type", 1)) != 1:
        return response(
            60,
            v,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="only broker endpoints are served",
            cluster_id=image.cluster_id or "",
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    brokers = tuple(
        part(
            60,
            v,
            "DescribeClusterBroker",
            broker_id=b.broker_id,
            host=ep[0],
            port=ep[1],
            rack=b.rack,
        )
        for b, ep in _listener_endpoints(ctx, image)
    )
    return response(
        60,
        v,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=image.cluster_id or "",
        controller_id=image.controller_id,
        brokers=brokers,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _listener_endpoints(
    ctx: RequestContext, image: MetadataImage
) -> list[tuple[BrokerInfo, tuple[str, int]]]:
    """Kafka answers with each broker's endpoint on the listener the request came in on
    (a broker without that listener is left out)."""
    listener = ctx.session.listener
    out = []
    for b in image.brokers.values():
        ep = b.endpoint(listener)
        if ep is not None:
            out.append((b, ep))
    return out


def authorized_operations(ctx: RequestContext, rtype: ResourceType, name: str) -> int:
    """KIP-430's bit field: bit N set when operation N is allowed."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[rtype]:
        if ctx.authorize(op, rtype, name):
            bits |= 1 << int(op)
    return bits


def handle_metadata(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    image = ctx.image
    requested = req.topics
    denied: set[str] = set()
    if requested is None or (v == 0 and len(requested) == 0):
        names: list[str] = [
            n
            for n in sorted(image.topics)  # all topics it may describe
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, n)
        ]
        explicit = False
    else:
        names = [t.name for t in requested if t.name is not None]
        denied = {
            n for n in names if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, n)
        }
        explicit = True
    auto_create = (
        explicit
        and ctx.settings.auto_create_topics_enable
        and bool(getattr(req, "allow_auto_topic_creation", True))
    )
    missing = [
        n
        for n in names
        if n not in image.topics and topic_name_error(n) is None and n not in denied
    ]
    if missing and ctx.authorizer is not None and not ctx.authorize_cluster(AclOperation.CREATE):
        missing = [n for n in missing if ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, n)]
    if auto_create and missing:
        return _auto_create_then_answer(ctx, header, req, names, missing, denied)
    if ctx.authorizer is not None:  # the answer depends on the principal: not kept
        return frame_response(header, _metadata_body(ctx, header, image, names, set(), denied, req))
    # The same image and question give the same bytes (server/metadata_answers.py).
    question = (
        v,
        ctx.session.listener,
        tuple(names) if explicit else None,
        bool(getattr(req, "include_topic_authorized_operations", False)),
        bool(getattr(req, "include_cluster_authorized_operations", False)),
    )
    answers = ctx.metadata_answers
    body = answers.get(image, question)
    if body is None:
        body = _metadata_body(ctx, header, image, names, set(), denied, req)
        answers.put(image, question, body)
    return frame_response(header, body)


async def _auto_create_then_answer(
    ctx: RequestContext,
    header: RequestHeaderInfo,
    req: Any,
    names: list[str],
    missing: list[str],
    denied: set[str],
) -> Any:
    created: set[str] = set()
    for name in missing:
        try:
            plan = plan_new_topic(
                name,
                -1,
                -1,
                None,
                {},
                ctx.image.live_broker_ids(),
                ctx.settings.num_partitions,
                min(ctx.settings.default_replication_factor, max(1, len(ctx.image.brokers))),
            )
            await asyncio.to_thread(ctx.admin.create_topic, plan)
            logger.info("auto-created topic %s (%d partitions)", name, plan.num_partitions)
        except KafkaError as e:
            if e.code != ErrorCode.topic_already_exists:
                logger.info("auto-create of %s failed: %s", name, e)
        created.add(name)
    return frame_response(
        header, _metadata_body(ctx, header, ctx.image, names, created, denied, req)
    )


def _metadata_body(
    ctx: RequestContext,
    header: RequestHeaderInfo,
    image: MetadataImage,
    names: list[str],
    just_created: set[str],
    denied: set[str],
    req: Any,
) -> bytes:
    """The encoded answer: each existing topic's entry taken from ``ctx.topic_entries``
    when that topic is unchanged (server/metadata_answers.py), the rest of the answer
    (``_response_shell``) encoded with no topic and the topics spliced in: the topics
    array is the last field but the cluster's authorized operations (v8-v10) and the
    tagged fields (v9+). Byte for byte what kio encodes for the whole entity (tested)."""
    v = header.api_version
    want_topic_ops = bool(getattr(req, "include_topic_authorized_operations", False))
    entries = ctx.topic_entries
    write = _topic_writer(v)
    chunks = []
    for name in names:
        info = image.topics.get(name)
        if info is None or name in denied:
            chunks.append(_encoded(write, _topic_error_entry(v, name, just_created, denied)))
            continue
        ops = (
            authorized_operations(ctx, ResourceType.TOPIC, name)
            if want_topic_ops
            else AUTHORIZED_OPERATIONS_OMITTED
        )
        entry = entries.get(image, info, v, ops)
        if entry is None:
            entry = _encoded(write, _topic_entry(v, image, info, ops))
            entries.put(info, v, ops, entry)
        chunks.append(entry)
    shell = encode_response_body(header, _response_shell(ctx, v, image, req))
    flexible = v >= 9
    tail = (4 if 8 <= v <= 10 else 0) + (1 if flexible else 0)
    head = len(shell) - tail - (1 if flexible else 4)  # the empty topics array's length
    count = uvarint(len(chunks) + 1) if flexible else I32.pack(len(chunks))
    return b"".join([shell[:head], count, *chunks, shell[len(shell) - tail :]])


@cache
def _topic_writer(v: int) -> Callable[[Any, Any], None]:
    return entity_writer(nested(3, v, "MetadataResponseTopic"))


def _encoded(write: Callable[[Any, Any], None], entity: Any) -> bytes:
    buf = io.BytesIO()
    write(buf, entity)
    return buf.getvalue()


def _response_shell(ctx: RequestContext, v: int, image: MetadataImage, req: Any) -> Any:
    """The answer without its topics (``_metadata_body`` splices them in)."""
    brokers = tuple(
        part(
            3, v, "MetadataResponseBroker", node_id=b.broker_id, host=ep[0], port=ep[1], rack=b.rack
        )
        for b, ep in _listener_endpoints(ctx, image)
    )
    cluster_ops = (
        authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
        if getattr(req, "include_cluster_authorized_operations", False)
        else AUTHORIZED_OPERATIONS_OMITTED
    )
    return response(
        3,
        v,
        throttle_time=0,
        brokers=brokers,
        cluster_id=image.cluster_id,
        controller_id=image.controller_id,
        topics=(),
        cluster_authorized_operations=cluster_ops,
    )


def _topic_error_entry(v: int, name: str, just_created: set[str], denied: set[str]) -> Any:
    """A topic the principal may not describe, or that does not exist."""
    if name in denied:
        code = ErrorCode.topic_authorization_failed
    elif topic_name_error(name):
        code = ErrorCode.invalid_topic_exception
    elif name in just_created:
        code = ErrorCode.leader_not_available
    else:
        code = ErrorCode.unknown_topic_or_partition
    return part(
        3,
        v,
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=None,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _topic_entry(
    v: int,
    image: MetadataImage,
    info: TopicInfo,
    authorized_ops: int = AUTHORIZED_OPERATIONS_OMITTED,
) -> Any:
    parts = []
    for p in sorted(info.partitions.values(), key=lambda x: x.index):
        offline = tuple(r for r in p.replicas if r not in image.brokers)
        if p.leader >= 0 and p.leader in image.brokers:
            code = ErrorCode.none
            leader = p.leader
        else:
            # No live leader: "new" partition waiting for the controller, or offline
            # (REQ-R10: with unclean election off it stays offline until an ISR member
            # returns).
            code = ErrorCode.leader_not_available
            leader = -1
        parts.append(
            part(
                3,
                v,
                "MetadataResponsePartition",
                error_code=code,
                partition_index=p.index,
                leader_id=leader,
                leader_epoch=max(p.leader_epoch, 0) if leader >= 0 else -1,
                replica_nodes=p.replicas,
                isr_nodes=p.isr,
                offline_replicas=offline,
            )
        )
    return part(
        3,
        v,
        "MetadataResponseTopic",
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.is_internal,
        partitions=tuple(parts),
        topic_authorized_operations=authorized_ops,
    )
