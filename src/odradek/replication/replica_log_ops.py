"""What a replica's appends and truncations do to its local log, leader-epoch cache and
producer state together (Kafka keeps these three in ``UnifiedLog``; here ``Partition``
holds them and calls these functions, keeping the high watermark and the lost-records
ledger to itself).

* **Epochs** (REQ-R19): a follower records ``(epoch, base offset)`` for each batch of a
  newer epoch than its cache's latest; a truncation drops the entries past the new LEO.
* **Producer state**: appended batches update it (leaders and followers alike, so a new
  leader still deduplicates), and the transactions their ABORT markers completed go to
  the log's .txnindex; a truncation rolls it back with the aborted entries above it.
"""

from __future__ import annotations

import logging

from odradek.storage.batch import BatchHeader
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import AppendInfo, Log
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.truncation_ledger import TruncationLedger
from odradek.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

__all__ = ["append_fetched", "quarantine", "record_appended", "truncate_suffix"]


def record_appended(
    log: Log,
    producers: ProducerStateManager,
    headers: list[BatchHeader],
    records: bytes | bytearray | memoryview,
) -> None:
    """Appended batches into the producer state; the transactions their ABORT markers
    completed into the log's .txnindex."""
    aborted = producers.update(headers, records)
    if aborted:
        log.record_aborted(aborted)


def append_fetched(
    log: Log,
    epochs: LeaderEpochCache,
    producers: ProducerStateManager,
    records: bytes | bytearray | memoryview,
    headers: list[BatchHeader],
    now_ms: int,
) -> AppendInfo:
    """Append a fetch response's batches with the leader's offsets and epochs."""
    info = log.append_as_follower(records, now_ms, headers=headers)
    latest = epochs.latest_epoch
    for h in headers:
        if h.partition_leader_epoch > latest:
            epochs.assign(h.partition_leader_epoch, h.base_offset)
            latest = h.partition_leader_epoch
    record_appended(log, producers, headers, records)
    return info


def truncate_suffix(
    log: Log, epochs: LeaderEpochCache, producers: ProducerStateManager, offset: int
) -> None:
    """Drop ``[offset, LEO)`` (never below the log start) from the log, the epoch cache
    and the producer state."""
    aborted_above: list[AbortedTxn] = []
    if offset < log.log_end_offset:
        offset = max(offset, log.log_start_offset)
        aborted_above = log.aborted_entries(offset)  # they go with the log
        log.truncate_to(offset)
    epochs.truncate_from_end(log.log_end_offset)
    producers.truncate_to(log.log_end_offset, aborted_above)


def quarantine(
    ledger: TruncationLedger,
    log: Log,
    topic: str,
    index: int,
    offset: int,
    *,
    reason: str,
    leader_id: int,
    leader_epoch: int,
    high_watermark: int,
) -> None:
    """Copy [offset, LEO) to the lost-records ledger, durably. A ledger that cannot be
    written (disk full) is logged, not fatal: a follower that can never truncate would
    never rejoin."""
    try:
        ledger.record(
            log,
            topic,
            index,
            offset,
            reason=reason,
            new_leader_id=leader_id,
            new_leader_epoch=leader_epoch,
            high_watermark=high_watermark,
        )
    except Exception:
        logger.exception(
            "%s-%d: could not quarantine [%d, %d) before truncating",
            topic,
            index,
            offset,
            log.log_end_offset,
        )
