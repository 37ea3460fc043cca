"""CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs.

Every broker answers admin requests (Kafka forwards them to the controller; with
ZooKeeper as the store any broker can write the znodes, and the controller reacts to the
watch). Writes go to ZooKeeper in a worker thread; with ``timeout_ms > 0`` the response
waits until this broker's metadata image reflects the change, so a client that creates a
topic and then produces finds a leader (Kafka does the same).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from odradek.config import describe_broker_config, describe_topic_config, validate_topic_configs
from odradek.errors import ErrorCode, KafkaError
from odradek.metadata.image import MetadataImage
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import AclOperation, ResourceType
from odradek.topics import topic_name_error
from odradek.zk.admin import plan_new_topic

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

logger = logging.getLogger(__name__)

# Kafka's controller refuses a CreateTopics / CreatePartitions whose records exceed
# QuorumController.MAX_RECORDS_PER_USER_OP with this error for every topic, before
# writing anything (odradek.max.partitions.per.request is that cap, configurable).
EXCESSIVE_BATCH = "Unable to perform excessively large batch operation."


def _require_topic(ctx: RequestContext, op: AclOperation, topic: str) -> None:
    if not ctx.authorize(op, ResourceType.TOPIC, topic):
        raise KafkaError(
            ErrorCode.topic_authorization_failed, f"Authorization failed for topic {topic}."
        )


def _partition_caps(ctx: RequestContext) -> tuple[int, int]:
    """(new partitions per request, partitions per cluster)."""
    return ctx.settings.max_partitions_per_request, ctx.settings.max_partitions


def _cluster_partitions(image: MetadataImage) -> int:
    return sum(len(t.partitions) for t in image.topics.values())


def _over_cluster_cap(ctx: RequestContext, total: int, adding: int) -> KafkaError | None:
    cap = _partition_caps(ctx)[1]
    if total + adding > cap:
        return KafkaError(
            ErrorCode.policy_violation,
            f"Adding {adding} partition(s) would bring the cluster to "
            f"{total + adding}, above odradek.max.partitions={cap}.",
        )
    return None


async def _wait_image(ctx: RequestContext, ready: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready(ctx.image) and time.monotonic() < deadline:
        await ctx.wait_for_image(deadline - time.monotonic())


def _leaders_ready(names: list[str]) -> Any:
    def ready(image: MetadataImage) -> bool:
        for n in names:
            t = image.topics.get(n)
            if t is None or any(p.leader < 0 for p in t.partitions.values()):
                return False
        return True

    return ready


# =============================================================================== CreateTopics
async def handle_create_topics(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    counts = Counter(t.name for t in req.topics)
    results = []
    created: list[str] = []
    # Partition caps first, before any assignment is computed (num_partitions=2^31-1 with
    # validate_only once grew a broker to 3.4 GB): the whole request fails if it adds
    # more than odradek.max.partitions.per.request, as Kafka's controller does.
    per_request, _ = _partition_caps(ctx)
    default = ctx.settings.num_partitions
    too_big = (
        sum(
            len(t.assignments)
            if t.assignments
            else default
            if t.num_partitions == -1
            else max(int(t.num_partitions), 0)
            for t in req.topics
        )
        > per_request
    )
    cluster_total = _cluster_partitions(ctx.image)
    # Kafka: CREATE on the cluster, or else CREATE on each topic.
    cluster_create = ctx.authorize_cluster(AclOperation.CREATE)
    for t in req.topics:
        kw: dict[str, Any] = dict(
            name=t.name,
            error_code=ErrorCode.none,
            error_message=None,
            topic_config_error_code=0,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )
        # Kafka: the configs, partition count and replication factor of a topic are
        # answered only with DESCRIBE_CONFIGS on it (ZkAdminManager's
        # includeConfigsAndMetadata); else topic_config_error_code tells why they are
        # missing -- unless the creation itself failed, which resets it.
        show_configs = ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name)
        config_denied = 0 if show_configs else int(ErrorCode.topic_authorization_failed)
        attempted = False
        try:
            if not cluster_create:
                _require_topic(ctx, AclOperation.CREATE, t.name)
            if counts[t.name] > 1:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"Create topics request from client `{header.client_id}` "
                    f"contains multiple entries for the following topics: {t.name}",
                )
            attempted = True
            if too_big:
                raise KafkaError(ErrorCode.policy_violation, EXCESSIVE_BATCH)
            configs = validate_topic_configs({c.name: c.value for c in t.configs})
            manual = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            plan = plan_new_topic(
                t.name,
                int(t.num_partitions),
                int(t.replication_factor),
                manual or None,
                configs,
                ctx.image.live_broker_ids(),
                ctx.settings.num_partitions,
                ctx.settings.default_replication_factor,
            )
            if t.name in ctx.image.topics:
                raise KafkaError(
                    ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists."
                )
            over = _over_cluster_cap(ctx, cluster_total, plan.num_partitions)
            if over is not None:
                raise over
            cluster_total += plan.num_partitions
            if not req.validate_only:
                await asyncio.to_thread(ctx.admin.create_topic, plan)
                created.append(t.name)
            kw["topic_config_error_code"] = config_denied
            if show_configs:
                kw.update(
                    num_partitions=plan.num_partitions, replication_factor=plan.replication_factor
                )
            if show_configs and v >= 5:
                entries = describe_topic_config(ctx.config, configs)
                kw["configs"] = tuple(
                    part(
                        19,
                        v,
                        "CreatableTopicConfigs",
                        name=e.name,
                        value=e.value,
                        read_only=e.read_only,
                        config_source=e.source,
                        is_sensitive=e.is_sensitive,
                    )
                    for e in entries
                )
        except KafkaError as e:
            kw.update(
                error_code=e.code,
                error_message=e.message or None,
                topic_config_error_code=0 if attempted else config_denied,
            )
        except Exception:
            logger.exception("creating topic %r failed", t.name)
            kw.update(
                error_code=ErrorCode.unknown_server_error,
                error_message="unexpected error; see broker log",
            )
        results.append(part(19, v, "CreatableTopicResult", **kw))
    timeout_s = req.timeout.total_seconds()
    if created and timeout_s > 0:
        await _wait_image(ctx, _leaders_ready(created), timeout_s)
    return response(19, v, throttle_time=0, topics=tuple(results))


# =============================================================================== DeleteTopics
async def handle_delete_topics(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    names = list(req.topic_names)
    results = []
    deleting: list[str] = []
    for name in names:
        code = ErrorCode.none
        try:
            _require_topic(ctx, AclOperation.DELETE, name)
            if not ctx.settings.delete_topic_enable:
                raise KafkaError(ErrorCode.topic_deletion_disabled, "delete.topic.enable=false")
            if topic_name_error(name) is not None:
                # Checked before any znode path is built from it ("..", "../x" used to
                # reach kazoo and raise ValueError). A name that is not legal cannot
                # exist: Kafka answers what it answers for any unknown topic.
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition, f"Topic `{name}` to delete does not exist"
                )
            await asyncio.to_thread(ctx.admin.mark_topic_for_deletion, name)
            deleting.append(name)
        except KafkaError as e:
            code = e.code
        except Exception:
            logger.exception("deleting topic %r failed", name)
            code = ErrorCode.unknown_server_error
        results.append(
            part(20, v, "DeletableTopicResult", name=name, error_code=code, error_message=None)
        )
    timeout_s = req.timeout.total_seconds()
    if deleting and timeout_s > 0:
        await _wait_image(ctx, lambda im: not any(n in im.topics for n in deleting), timeout_s)
        gone = ctx.image
        results = [
            part(
                20,
                v,
                "DeletableTopicResult",
                name=r.name,
                error_code=(
                    ErrorCode.request_timed_out
                    if r.name in deleting and r.name in gone.topics
                    else r.error_code
                ),
                error_message=None,
            )
            for r in results
        ]
    return response(20, v, throttle_time=0, responses=tuple(results))


# =============================================================================== CreatePartitions
async def handle_create_partitions(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    results = []
    changed: list[tuple[str, int]] = []
    counts = Counter(t.name for t in req.topics)
    image = ctx.image
    per_request, _ = _partition_caps(ctx)

    def added(t: Any) -> int:
        # Against this broker's image; a topic it does not know yet counts in full, so
        # the cap holds even if ZooKeeper is ahead of the image.
        info = image.topics.get(t.name)
        return max(int(t.count) - (len(info.partitions) if info else 0), 0)

    too_big = sum(added(t) for t in req.topics) > per_request
    cluster_total = _cluster_partitions(image)
    for t in req.topics:
        code, msg = ErrorCode.none, None
        try:
            _require_topic(ctx, AclOperation.ALTER, t.name)
            if too_big:
                raise KafkaError(ErrorCode.policy_violation, EXCESSIVE_BATCH)
            if counts[t.name] > 1:
                raise KafkaError(ErrorCode.invalid_request, "Duplicate topic in request.")
            if topic_name_error(t.name) is not None:  # before any znode path (see above)
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition, f"The topic '{t.name}' does not exist."
                )
            over = _over_cluster_cap(ctx, cluster_total, added(t))
            if over is not None:
                raise over
            cluster_total += added(t)
            manual = (
                [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None
            )
            await asyncio.to_thread(
                ctx.admin.add_partitions,
                t.name,
                int(t.count),
                manual,
                ctx.image.live_broker_ids(),
                bool(req.validate_only),
            )
            if not req.validate_only:
                changed.append((t.name, int(t.count)))
        except KafkaError as e:
            code, msg = e.code, e.message or None
        except Exception:
            logger.exception("adding partitions to %r failed", t.name)
            code, msg = ErrorCode.unknown_server_error, "unexpected error; see broker log"
        results.append(
            part(
                37,
                v,
                "CreatePartitionsTopicResult",
                name=t.name,
                error_code=code,
                error_message=msg,
            )
        )
    timeout_s = req.timeout.total_seconds()
    if changed and timeout_s > 0:

        def ready(im: MetadataImage) -> bool:
            return all(
                n in im.topics
                and len(im.topics[n].partitions) >= c
                and all(p.leader >= 0 for p in im.topics[n].partitions.values())
                for n, c in changed
            )

        await _wait_image(ctx, ready, timeout_s)
    return response(37, v, throttle_time=0, results=tuple(results))


# =============================================================================== DescribeConfigs
def _topic_overrides(ctx: RequestContext, names: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's overrides as ZooKeeper has them now. Blocking.

    Kafka (ZooKeeper mode) answers DescribeConfigs from ``/config/topics/T``, not from the
    metadata cache: the image of a broker other than the one that took an AlterConfigs
    may lag its change notification, and an admin client must read its own write
    (REQ-R27 tooling; a describe after an alter is how kafka-python's legacy
    alter_configs fills in the keys it did not name)."""
    if not ctx.admin_connected or not names:
        return {t: dict(ctx.image.topics[t].configs) for t in names if t in ctx.image.topics}
    return ctx.admin.get_topic_configs(names)


# Topics described per slice of the event loop's time (~0.3 ms each with the broker's
# defaults cached): a DescribeConfigs of every topic must not hold the loop (issue 29).
_DESCRIBE_SLICE = 4


async def handle_describe_configs(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    wanted = [
        r.resource_name
        for r in req.resources
        if r.resource_type == RESOURCE_TOPIC and r.resource_name in ctx.image.topics
    ]
    overrides = await asyncio.to_thread(_topic_overrides, ctx, wanted) if wanted else {}
    include_synonyms = bool(getattr(req, "include_synonyms", False))
    include_docs = bool(getattr(req, "include_documentation", False))
    results = []
    for i, res in enumerate(req.resources):
        if i and i % _DESCRIBE_SLICE == 0:
            await asyncio.sleep(0)  # many topics: let other requests run between slices
        kw: dict[str, Any] = dict(
            error_code=ErrorCode.none,
            error_message=None,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            configs=(),
        )
        try:
            if res.resource_type == RESOURCE_TOPIC:
                _require_topic(ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_name)
                topic = ctx.image.topics.get(res.resource_name)
                if topic is None:
                    raise KafkaError(
                        ErrorCode.unknown_topic_or_partition,
                        f"Topic '{res.resource_name}' does not exist.",
                    )
                names = res.configuration_keys
                entries = describe_topic_config(
                    ctx.config,
                    overrides.get(res.resource_name, topic.configs),
                    None if names is None else set(names),
                )
            elif res.resource_type == RESOURCE_BROKER:
                if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
                    raise KafkaError(
                        ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
                    )
                if res.resource_name not in ("", str(ctx.broker_id)):
                    raise KafkaError(
                        ErrorCode.invalid_request,
                        f"Unexpected broker id, expected {ctx.broker_id} or "
                        f"empty string, but received {res.resource_name}",
                    )
                image = ctx.image
                entries = describe_broker_config(
                    ctx.config,
                    image.broker_overrides,
                    image.default_broker_overrides,
                    per_broker=res.resource_name != "",
                )
            else:
                raise KafkaError(
                    ErrorCode.invalid_request, f"Unsupported resource type {res.resource_type}"
                )
            keys = set(res.configuration_keys) if res.configuration_keys is not None else None
            kw["configs"] = tuple(
                part(
                    32,
                    v,
                    "DescribeConfigsResourceResult",
                    name=e.name,
                    value=e.value,
                    read_only=e.read_only,
                    config_source=e.source,
                    is_default=e.is_default,
                    is_sensitive=e.is_sensitive,
                    synonyms=tuple(
                        part(32, v, "DescribeConfigsSynonym", name=n, value=val, source=s)
                        for n, val, s in e.synonyms
                    )
                    if include_synonyms
                    else (),
                    config_type=e.config_type,
                    documentation=e.documentation if include_docs else None,
                )
                for e in entries
                if keys is None or e.name in keys
            )
        except KafkaError as e:
            kw.update(error_code=e.code, error_message=e.message or None)
        results.append(part(32, v, "DescribeConfigsResult", **kw))
    return response(32, v, throttle_time=0, results=tuple(results))
