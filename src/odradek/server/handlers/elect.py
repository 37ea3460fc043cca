"""ElectLeaders (API key 43, v0-2; v2 flexible): preferred or unclean election on demand.

Kafka's broker forwards the request to the controller over RPC. Odradek's brokers talk to
the controller through ZooKeeper (REQ-R12, R13), so any broker answers it:

1. Each requested partition is checked against this broker's metadata image with the
   rules of ``elections.py``: unknown → UNKNOWN_TOPIC_OR_PARTITION; PREFERRED (0) whose
   preferred replica already leads → ELECTION_NOT_NEEDED, whose preferred replica is dead
   or out of the ISR → PREFERRED_LEADER_NOT_AVAILABLE; UNCLEAN (1, v1+) with a live
   leader → ELECTION_NOT_NEEDED, with no live replica → ELIGIBLE_LEADERS_NOT_AVAILABLE.
2. The rest are written to ZooKeeper for the controller, in Kafka's partition-list JSON:
   ``/admin/preferred_replica_election`` (Kafka's znode, REQ-R5) or
   ``/admin/unclean_leader_election`` (Odradek's, same JSON). If such a request is already
   pending we wait for the controller to finish it and then write ours.
3. We wait (up to the request's ``timeout_ms``) until the image shows the result: the
   preferred replica leads / some live replica leads. A partition the controller could
   not elect after processing the znode gets the step-1 error recomputed on the newest
   image; one still pending at the deadline gets REQUEST_TIMED_OUT (timeout 0: NONE,
   the request was accepted).

``topic_partitions`` null means every partition of every topic.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from odradek.controller import elections
from odradek.errors import ErrorCode
from odradek.metadata.image import MetadataImage
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import AclOperation
from odradek.zk import znodes

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

API_KEY = 43
PREFERRED = 0
UNCLEAN = 1
# After the controller deleted our znode, how long the image may take to show its writes.
_APPLY_GRACE_S = 2.0

TopicPartition = tuple[str, int]
Outcome = tuple[ErrorCode, str | None]

_STRATEGY = {
    PREFERRED: "PreferredReplicaPartitionLeaderElectionStrategy",
    UNCLEAN: "OfflinePartitionLeaderElectionStrategy(true)",
}


def check_partition(image: MetadataImage, topic: str, p: int, election_type: int) -> Outcome | None:
    """The answer decided without the controller, or None: an election is needed. Pure."""
    info = image.partition(topic, p)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
    live = set(image.brokers)
    tp = f"{topic}-{p}"
    if election_type == PREFERRED:
        if elections.is_preferred_leader(info.replicas, info.leader) and info.leader in live:
            return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
        if elections.preferred_election(info.replicas, info.isr, live) is None:
            return (
                ErrorCode.preferred_leader_not_available,
                f"Failed to elect leader for partition {tp} under strategy {_STRATEGY[PREFERRED]}",
            )
        return None
    if info.leader >= 0 and info.leader in live:
        return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
    if elections.offline_election(info.replicas, info.isr, live, unclean_enabled=True) is None:
        return (
            ErrorCode.eligible_leaders_not_available,
            f"Failed to elect leader for partition {tp} under strategy {_STRATEGY[UNCLEAN]}",
        )
    return None


def _elected(image: MetadataImage, topic: str, p: int, election_type: int) -> bool:
    info = image.partition(topic, p)
    if info is None or info.leader < 0 or info.leader not in image.brokers:
        return False
    return election_type == UNCLEAN or elections.is_preferred_leader(info.replicas, info.leader)


async def handle_elect_leaders(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    election_type = int(getattr(req, "election_type", PREFERRED)) if v >= 1 else PREFERRED
    timeout_s = max(0.0, req.timeout.total_seconds())
    deadline = time.monotonic() + timeout_s
    image = ctx.image
    allowed = ctx.authorize_cluster(AclOperation.ALTER)
    wanted: list[TopicPartition] = []
    if req.topic_partitions is None:
        # Every partition -- unless refused: Kafka's ElectLeadersRequestOps makes a null
        # list empty there, so the refusal names no topic (expanding it first answered
        # every topic's name to a principal that may not even describe them).
        if allowed:
            for name, t in sorted(image.topics.items()):
                wanted.extend((name, p) for p in sorted(t.partitions))
    else:
        for tps in req.topic_partitions:
            wanted.extend((tps.topic, int(p)) for p in tps.partitions)
    wanted = list(dict.fromkeys(wanted))  # duplicates answered once

    if not allowed:
        # Kafka: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for everything.
        return _response(
            v,
            wanted,
            {
                tp: (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
                for tp in wanted
            },
            top=ErrorCode.cluster_authorization_failed,
        )

    outcomes: dict[TopicPartition, Outcome] = {}
    if election_type not in (PREFERRED, UNCLEAN):
        outcomes = {
            tp: (ErrorCode.invalid_request, f"unknown election type {election_type}")
            for tp in wanted
        }
        return _response(v, wanted, outcomes)

    pending: list[TopicPartition] = []
    for tp in wanted:
        decided = check_partition(image, tp[0], tp[1], election_type)
        if decided is None:
            pending.append(tp)
        else:
            outcomes[tp] = decided

    if pending:
        path = (
            znodes.PREFERRED_REPLICA_ELECTION
            if election_type == PREFERRED
            else znodes.UNCLEAN_LEADER_ELECTION_PATH
        )
        gateway = ctx.admin
        written = await asyncio.to_thread(
            gateway.request_election, path, pending, max(deadline, time.monotonic() + 0.5)
        )
        if not written:
            for tp in pending:
                outcomes[tp] = (
                    ErrorCode.request_timed_out,
                    "another leader election is still in progress",
                )
            pending = []
        processed_at: float | None = None
        while pending and time.monotonic() < deadline:
            pending = [tp for tp in pending if not _elected(ctx.image, *tp, election_type)]
            if not pending:
                break
            if processed_at is None and not await asyncio.to_thread(gateway.election_pending, path):
                processed_at = time.monotonic()  # the controller is done with our request
            if processed_at is not None and time.monotonic() - processed_at > _APPLY_GRACE_S:
                break
            await ctx.wait_for_image(min(0.2, max(0.0, deadline - time.monotonic())))
        for tp in pending:
            if _elected(ctx.image, *tp, election_type):
                continue
            again = check_partition(ctx.image, tp[0], tp[1], election_type)
            if again is not None and again[0] != ErrorCode.election_not_needed:
                outcomes[tp] = again
            elif timeout_s > 0:
                outcomes[tp] = (
                    ErrorCode.request_timed_out,
                    f"leader election for {tp[0]}-{tp[1]} did not complete in {timeout_s:.0f} s",
                )
    return _response(v, wanted, outcomes)


def _response(
    v: int,
    wanted: list[TopicPartition],
    outcomes: dict[TopicPartition, Outcome],
    top: ErrorCode = ErrorCode.none,
) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for topic, p in wanted:
        code, msg = outcomes.get((topic, p), (ErrorCode.none, None))
        by_topic.setdefault(topic, []).append(
            part(API_KEY, v, "PartitionResult", partition_id=p, error_code=code, error_message=msg)
        )
    results = tuple(
        part(API_KEY, v, "ReplicaElectionResult", topic=t, partition_result=tuple(rs))
        for t, rs in by_topic.items()
    )
    return response(API_KEY, v, throttle_time=0, error_code=top, replica_election_results=results)
