"""DeleteRecords (API 21, v0–v2): move a partition's log start offset forward (SPEC R24).

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
  (``ReplicaManager.run_retention``) on every replica; the log-start-offset checkpoint is
  written at once so a restart does not bring the records back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.replication.partition import Partition, Role
from odradek.protocol.responses import part, response
from odradek.errors import ErrorCode, KafkaError
from odradek.topics import INTERNAL_TOPICS
from odradek.protocol.codec import RequestHeaderInfo

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

log = logging.getLogger(__name__)

API_KEY = 21


@dataclass(slots=True)
class _Pending:
    """One partition of a DeleteRecords request (Kafka's DeleteRecordsPartitionStatus)."""

    index: int
    partition: Partition | None
    target: int
    error: ErrorCode = ErrorCode.none
    low_watermark: int = -1

    def satisfied(self) -> bool:
        """Done: an error, or the low watermark reached the target (sets the answer)."""
        if self.error != ErrorCode.none or self.partition is None:
            return True
        p = self.partition
        if p.role is not Role.LEADER or p.fenced:
            self.error = ErrorCode.not_leader_or_follower
            return True
        low = p.low_watermark()
        if low >= self.target:
            self.low_watermark = low
            return True
        return False


def handle_delete_records(ctx: RequestContext, header: RequestHeaderInfo,
                          req: Any) -> Any | Coroutine[Any, Any, Any]:
    image = ctx.image
    results: list[tuple[str, list[_Pending]]] = []
    moved = False
    for t in req.topics:
        plist: list[_Pending] = []
        results.append((t.name, plist))
        for rp in t.partitions:
            st = _Pending(int(rp.partition_index), None, -1)
            plist.append(st)
            try:
                if t.name in INTERNAL_TOPICS:
                    # Kafka (ReplicaManager.deleteRecordsOnLocalLog): clients never move
                    # the log start of internal topics.
                    raise KafkaError(ErrorCode.invalid_topic_exception,
                                     f"Cannot delete records of internal topic {t.name}")
                p = ctx.replicas.leader_partition(t.name, st.index, image)
                before = p.log.log_start_offset
                st.target = p.delete_records_to(int(rp.offset))
                st.partition = p
                moved |= p.log.log_start_offset != before
                log.info("DeleteRecords %s-%d: log start offset %d -> %d", t.name, st.index,
                         before, p.log.log_start_offset)
            except KafkaError as e:
                st.error = e.code
            except Exception:  # noqa: BLE001 - one partition never takes the broker down
                log.exception("DeleteRecords on %s-%d failed", t.name, st.index)
                st.error = ErrorCode.unknown_server_error
    if moved:
        try:
            ctx.replicas.checkpoint_log_start_offsets()
        except Exception:  # noqa: BLE001 - the periodic checkpoint retries
            log.exception("log-start-offset checkpoint after DeleteRecords failed")
    pending = [st for _, plist in results for st in plist]
    if all(st.satisfied() for st in pending):
        return _response(header.api_version, results)
    return _delayed(ctx, header.api_version, results, pending,
                    req.timeout.total_seconds())


async def _delayed(ctx: RequestContext, version: int, results: list[tuple[str, list[_Pending]]],
                   pending: list[_Pending], timeout_s: float) -> Any:
    """Kafka's DelayedDeleteRecords: woken when a follower reports a newer log start."""
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = [st for st in pending if not st.satisfied()]
        remaining = deadline - time.monotonic()
        if not waiting or remaining <= 0:
            break
        await ctx.replicas.wait_for_change(
            [(st.partition.topic, st.partition.index) for st in waiting
             if st.partition is not None], remaining)
    for st in pending:
        if not st.satisfied():
            st.error = ErrorCode.request_timed_out
            st.low_watermark = -1
    return _response(version, results)


def _response(version: int, results: list[tuple[str, list[_Pending]]]) -> Any:
    topics = []
    for name, plist in results:
        parts = tuple(part(API_KEY, version, "DeleteRecordsPartitionResult",
                           partition_index=st.index,
                           low_watermark=st.low_watermark if st.error == ErrorCode.none else -1,
                           error_code=st.error) for st in plist)
        topics.append(part(API_KEY, version, "DeleteRecordsTopicResult", name=name,
                           partitions=parts))
    return response(API_KEY, version, throttle_time=0, topics=tuple(topics))
