"""Where a follower truncates after OffsetsForLeaderEpoch (REQ-R19, R20; KIP-101, KIP-279).

A pure decision: the leader's answer for our latest epoch, our own end offset for the
epoch the leader named, our LEO and HW in; the offset to truncate to, and why, out.

* The leader knows the epoch: truncate to ``min(leader's end offset for it, our own end
  offset for that epoch)``. Taking our own end too covers KIP-279: if the leader answers
  with an older epoch than we asked for (we have epochs it never saw), our log may
  continue that older epoch further than the leader's, and only the common prefix is
  safe.
* The leader knows no epoch this old (``leader_epoch < 0`` or ``end_offset < 0``): Kafka's
  fallback is the high watermark.
* We know nothing about the epoch the leader named (``own_end < 0``): the HW as well.

Nothing at or below the returned offset is removed; the caller truncates only if it is
below the LEO (and copies what it removes to the lost-records ledger first).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TruncationDecision", "decide_truncation"]


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    offset: int  # truncate to here (exclusive end of what is kept)
    reason: str

    def removes_from(self, log_end_offset: int) -> bool:
        return self.offset < log_end_offset


def decide_truncation(
    *,
    leader_id: int,
    current_leader_epoch: int,
    asked_epoch: int,
    leader_epoch: int,
    leader_end_offset: int,
    own_end_offset: int,
    log_end_offset: int,
    high_watermark: int,
) -> TruncationDecision:
    """``asked_epoch``: our latest epoch, as sent; ``leader_epoch``/``leader_end_offset``:
    the leader's answer; ``own_end_offset``: where ``leader_epoch`` ends in our own
    leader-epoch cache (-1 if we do not know it)."""
    if leader_epoch < 0 or leader_end_offset < 0:
        target = min(high_watermark, log_end_offset)
        return TruncationDecision(
            target,
            f"truncate to the high watermark {target}: leader {leader_id} (epoch "
            f"{current_leader_epoch}) knows no epoch <= {asked_epoch}",
        )
    own = own_end_offset if own_end_offset >= 0 else high_watermark
    target = min(leader_end_offset, own, log_end_offset)
    return TruncationDecision(
        target,
        f"truncate after OffsetsForLeaderEpoch to {target} (leader {leader_id} epoch "
        f"{current_leader_epoch}: epoch {leader_epoch} ends at {leader_end_offset} there)",
    )
