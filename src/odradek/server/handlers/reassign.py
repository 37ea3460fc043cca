"""AlterPartitionReassignments (45, v0-1) and ListPartitionReassignments (46, v0): KIP-455.

Kafka's broker forwards AlterPartitionReassignments to the controller over RPC; Odradek's
brokers reach the controller through ZooKeeper, so any broker answers it:

1. Each partition is checked against this broker's image, with Kafka's errors: unknown
   → UNKNOWN_TOPIC_OR_PARTITION; an empty or duplicated replica list, or an added broker
   that is not registered → INVALID_REPLICA_ASSIGNMENT (a replica that stays may be
   down, as in Kafka); a changed replica count without
   ``allow_replication_factor_change`` (v1, KIP-860) → INVALID_REPLICATION_FACTOR;
   cancelling (null replicas) with nothing in progress → NO_REASSIGNMENT_IN_PROGRESS.
2. The rest are merged into ``/admin/reassign_partitions`` (Kafka's JSON; a conditional
   write, so concurrent requests on other brokers are not lost) for the controller.
3. The answer comes once the controller took the request (the znode no longer holds
   our entries), as Kafka answers once the move has *started*; ``timeout_ms`` bounds
   the wait (REQUEST_TIMED_OUT).

ListPartitionReassignments answers from the image: the partitions whose topic znode has
adding or removing replicas (``topics`` null: all of them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from odradek.errors import ErrorCode
from odradek.metadata.image import MetadataImage
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import AclOperation

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

logger = logging.getLogger(__name__)

ALTER = 45
LIST = 46
_OWN_IMAGE_WAIT_S = 5.0

TopicPartition = tuple[str, int]
Outcome = tuple[ErrorCode, str | None]
Target = list[int] | None


def check_request(
    image: MetadataImage, topic: str, p: int, target: Target, allow_rf_change: bool
) -> Outcome | None:
    """The error for one partition, or None when the controller should get it. Pure."""
    info = image.partition(topic, p)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {topic}-{p}."
    if target is None:
        if not (info.adding_replicas or info.removing_replicas):
            return (
                ErrorCode.no_reassignment_in_progress,
                f"Unable to find an ongoing reassignment for {topic}-{p}.",
            )
        return None
    if not target:
        return (ErrorCode.invalid_replica_assignment, "The partition assignment cannot be empty.")
    if len(set(target)) != len(target):
        return (
            ErrorCode.invalid_replica_assignment,
            f"The partition assignment {target} contains duplicate replicas.",
        )
    original = [r for r in info.replicas if r not in info.adding_replicas]
    # Kafka's validateReassignment: only the brokers being added must be alive; a replica
    # that stays may be down (the move completes once it is back in the ISR).
    missing = [b for b in target if b not in original and b not in image.brokers]
    if missing:
        return (
            ErrorCode.invalid_replica_assignment,
            f"Replica assignment has brokers that are not alive. Replica list: {missing}, "
            f"live broker list: {sorted(image.brokers)}",
        )
    if not allow_rf_change and len(target) != len(original):
        return (
            ErrorCode.invalid_replication_factor,
            f"The replication factor is changed from {len(original)} to {len(target)}.",
        )
    return None


def applied(image: MetadataImage, tp: TopicPartition, target: Target) -> bool:
    """The image shows the controller took the request for ``tp``. Pure."""
    info = image.partition(*tp)
    if info is None:
        return True
    moving = bool(info.adding_replicas or info.removing_replicas)
    if target is None:
        return not moving
    return [r for r in info.replicas if r not in info.removing_replicas] == target or (
        not moving and sorted(info.replicas) == sorted(target)
    )


async def handle_alter_partition_reassignments(
    ctx: RequestContext, header: RequestHeaderInfo, req: Any
) -> Any:
    v = header.api_version
    if not ctx.authorize_cluster(AclOperation.ALTER):  # Kafka: ALTER on the cluster
        return response(
            ALTER,
            v,
            throttle_time=0,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed.",
            responses=(),
        )
    allow_rf_change = bool(getattr(req, "allow_replication_factor_change", True))
    timeout_s = max(0.0, req.timeout.total_seconds())
    deadline = time.monotonic() + timeout_s
    image = ctx.image
    order: list[TopicPartition] = []
    outcomes: dict[TopicPartition, Outcome] = {}
    accepted: dict[TopicPartition, Target] = {}
    for topic in req.topics:
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            target = None if p.replicas is None else [int(b) for b in p.replicas]
            if tp in outcomes or tp in accepted:
                outcomes[tp] = (
                    ErrorCode.invalid_request,
                    f"Duplicate reassignment for {tp[0]}-{tp[1]}.",
                )
                accepted.pop(tp, None)
                continue
            order.append(tp)
            decided = check_request(image, tp[0], tp[1], target, allow_rf_change)
            if decided is None:
                accepted[tp] = target
            else:
                outcomes[tp] = decided
    if accepted:
        gateway = ctx.admin
        await asyncio.to_thread(gateway.merge_reassignment, accepted)
        logger.info(
            "reassignment requested: %s",
            ", ".join(
                f"{t}-{p} -> {'cancel' if r is None else r}" for (t, p), r in accepted.items()
            ),
        )
        while await asyncio.to_thread(gateway.reassignment_pending, accepted):
            if time.monotonic() >= deadline:
                for tp in accepted:
                    outcomes[tp] = (
                        ErrorCode.request_timed_out,
                        "The controller did not take the reassignment in time.",
                    )
                break
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        else:
            # Read-your-writes: a ListPartitionReassignments or Metadata sent to this
            # broker right after our answer must see the move (Kafka answers both from
            # the controller's state, which is already updated).
            grace = min(deadline, time.monotonic() + _OWN_IMAGE_WAIT_S)
            while not all(applied(ctx.image, tp, t) for tp, t in accepted.items()):
                if time.monotonic() >= grace:
                    # The controller skips what it finds invalid by then (e.g. a target
                    # broker whose session ended): answer with the check's error now.
                    for tp, t in accepted.items():
                        if not applied(ctx.image, tp, t):
                            again = check_request(ctx.image, tp[0], tp[1], t, True)
                            if again is not None:
                                outcomes[tp] = again
                    break
                await ctx.wait_for_image(max(0.0, grace - time.monotonic()))
    by_topic: dict[str, list[Any]] = {}
    for topic, p in order:
        code, msg = outcomes.get((topic, p), (ErrorCode.none, None))
        by_topic.setdefault(topic, []).append(
            part(
                ALTER,
                v,
                "ReassignablePartitionResponse",
                partition_index=p,
                error_code=code,
                error_message=msg,
            )
        )
    return response(
        ALTER,
        v,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        allow_replication_factor_change=allow_rf_change,
        responses=tuple(
            part(ALTER, v, "ReassignableTopicResponse", name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )


def ongoing(
    image: MetadataImage, wanted: list[tuple[str, list[int] | None]] | None
) -> dict[str, list[tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]:
    """topic -> [(partition, replicas, adding, removing)] for moving partitions. Pure."""
    out: dict[str, list[tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]]] = {}
    names = [(n, None) for n in sorted(image.topics)] if wanted is None else wanted
    for name, parts in names:
        t = image.topics.get(name)
        if t is None:
            continue
        for p in sorted(t.partitions) if parts is None else parts:
            info = t.partitions.get(p)
            if info is not None and (info.adding_replicas or info.removing_replicas):
                out.setdefault(name, []).append(
                    (p, info.replicas, info.adding_replicas, info.removing_replicas)
                )
    return out


def handle_list_partition_reassignments(
    ctx: RequestContext, header: RequestHeaderInfo, req: Any
) -> Any:
    v = header.api_version
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):  # Kafka: DESCRIBE on the cluster
        return response(
            LIST,
            v,
            throttle_time=0,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed.",
            topics=(),
        )
    wanted: list[tuple[str, list[int] | None]] | None = (
        None
        if req.topics is None
        else [(t.name, [int(p) for p in t.partition_indexes]) for t in req.topics]
    )
    topics = tuple(
        part(
            LIST,
            v,
            "OngoingTopicReassignment",
            name=name,
            partitions=tuple(
                part(
                    LIST,
                    v,
                    "OngoingPartitionReassignment",
                    partition_index=p,
                    replicas=tuple(r),
                    adding_replicas=tuple(a),
                    removing_replicas=tuple(rm),
                )
                for p, r, a, rm in parts
            ),
        )
        for name, parts in ongoing(ctx.image, wanted).items()
    )
    return response(
        LIST, v, throttle_time=0, error_code=ErrorCode.none, error_message=None, topics=topics
    )
