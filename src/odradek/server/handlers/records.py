"""DeleteRecords (API 21, v0–v2): move a partition's log start offset forward (REQ-R24).

Kafka's ``ReplicaManager.deleteRecords`` + ``DelayedDeleteRecords``:

* Only the leader accepts it (NOT_LEADER_OR_FOLLOWER elsewhere; UNKNOWN_TOPIC_OR_PARTITION
  for a partition the cluster does not have). ``offset = -1`` means the high watermark;
  an offset past the HW is OFFSET_OUT_OF_RANGE; a topic whose cleanup.policy lacks
  ``delete`` gets POLICY_VIOLATION. Moving the log start never goes backwards.
* The leader's log start offset moves at once: consumers fetching below it get
  OFFSET_OUT_OF_RANGE and ListOffsets(earliest) returns it. Followers learn it from the
  ``log_start_offset`` of their fetch responses and report theirs in their next fetch.
* The answer waits (delayed operation, up to the request's timeout) until the *low
  watermark* — the smallest log start offset over the ISR — has reached the requested
  offset on every partition, then returns it; on timeout REQUEST_TIMED_OUT with -1.
* Whole segments below the new log start offset are deleted by the next retention check
  (``ReplicaLogs.run_retention``) on every replica; the log-start-offset checkpoint is
  written at once so a restart does not bring the records back.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from odradek.errors import ErrorCode
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.replication.delayed import DelayedDeleteRecords, PendingDelete
from odradek.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

API_KEY = 21


def handle_delete_records(
    ctx: RequestContext, header: RequestHeaderInfo, req: Any
) -> Any | Coroutine[Any, Any, Any]:
    results: list[tuple[str, list[PendingDelete]]] = []
    allowed: list[tuple[str, list[PendingDelete]]] = []
    offsets: dict[tuple[str, int], int] = {}
    for t in req.topics:
        plist: list[PendingDelete] = []
        results.append((t.name, plist))
        # Kafka: DELETE on the topic (issue 14).
        ok = ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, t.name)
        if ok:
            allowed.append((t.name, plist))
        for rp in t.partitions:
            plist.append(PendingDelete(int(rp.partition_index), None, -1))
            if ok:
                offsets[(t.name, int(rp.partition_index))] = int(rp.offset)
            else:
                plist[-1].error = ErrorCode.topic_authorization_failed
    op = ctx.replicas.delete_records(allowed, offsets, req.timeout.total_seconds(), ctx.image)
    if op is None:
        return _response(header.api_version, results)
    return _delayed(header.api_version, results, op)


async def _delayed(
    version: int, results: list[tuple[str, list[PendingDelete]]], op: DelayedDeleteRecords
) -> Any:
    """Kafka's DelayedDeleteRecords: completed when a follower reports a newer log start
    (the purgatory fills in each partition's answer), or REQUEST_TIMED_OUT."""
    await op.done
    return _response(version, results)


def _response(version: int, results: list[tuple[str, list[PendingDelete]]]) -> Any:
    topics = []
    for name, plist in results:
        parts = tuple(
            part(
                API_KEY,
                version,
                "DeleteRecordsPartitionResult",
                partition_index=st.index,
                low_watermark=st.low_watermark if st.error == ErrorCode.none else -1,
                error_code=st.error,
            )
            for st in plist
        )
        topics.append(
            part(API_KEY, version, "DeleteRecordsTopicResult", name=name, partitions=parts)
        )
    return response(API_KEY, version, throttle_time=0, topics=tuple(topics))
