"""KIP-890 on the append path: the verification guards of transactional appends.

Kafka's ``ReplicaManager.maybeStartTransactionVerificationForPartitions`` and
``appendRecords(..., verificationGuards)``: before a transactional batch may open a
transaction on a partition, the partition's leader registers a verification guard in its
producer state (``Partition.maybe_start_verification``) and asks the transaction
coordinator whether the partition is in the producer's transaction (AddPartitionsToTxn
v4, ``verify_only``; ``odradek.coordinator.txn_verifier``). The append then takes the
guard and checks it under the partition's producer state: a marker since voids it. The
produce handler and the group coordinator (TxnOffsetCommit) both go through here, and
the append requires a guard whenever verification is on, so neither can forget it.

``transaction.partition.verification.enable`` is a dynamic broker config; the replica
manager follows it from each metadata image (``verification_enabled``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from odradek.config import dynamic_broker_value
from odradek.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.metadata.image import MetadataImage
    from odradek.replication.partition import Partition

__all__ = [
    "VERIFICATION_CONFIG",
    "PartitionVerifier",
    "TxnVerification",
    "VerificationGuards",
    "verification_enabled",
]

VERIFICATION_CONFIG = "transaction.partition.verification.enable"

TopicPartition = tuple[str, int]
# The guard each transactional append of a request brings (Kafka's verificationGuards).
VerificationGuards = dict[TopicPartition, object]


def verification_enabled(static: bool, image: MetadataImage) -> bool:
    """``transaction.partition.verification.enable``: a dynamic broker config (cluster
    default or this broker's override), else the static one (``static``)."""
    value = dynamic_broker_value(
        VERIFICATION_CONFIG, image.dynamic_broker_config(VERIFICATION_CONFIG)
    )
    return static if value is None else bool(value)


class PartitionVerifier(Protocol):
    """Asks a transactional id's coordinator about partitions (``TxnVerifier``)."""

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
        timeout_s: float,
    ) -> dict[TopicPartition, ErrorCode]: ...


@dataclass(slots=True)
class TxnVerification:
    """One producer's (id, epoch) transactional appends to some partitions: each
    partition's guard, and the partitions whose transaction the coordinator must confirm
    first (no transaction of the producer ongoing there)."""

    producer_id: int
    epoch: int
    guards: VerificationGuards = field(default_factory=dict)
    pending: list[Partition] = field(default_factory=list)

    def add(self, part: Partition) -> None:
        guard, needed = part.maybe_start_verification(self.producer_id)
        self.guards[(part.topic, part.index)] = guard
        if needed:
            self.pending.append(part)

    async def verify(
        self, verifier: PartitionVerifier, transactional_id: str, timeout_s: float
    ) -> dict[TopicPartition, ErrorCode]:
        """Ask the coordinator about the pending partitions; those it does not confirm
        lose their guard (also in the producer state) and are returned with the error
        their append is answered with."""
        if not self.pending:
            return {}
        failed = await verifier.verify(
            transactional_id,
            self.producer_id,
            self.epoch,
            [(p.topic, p.index) for p in self.pending],
            timeout_s,
        )
        out: dict[TopicPartition, ErrorCode] = {}
        for p in self.pending:
            tp = (p.topic, p.index)
            code = failed.get(tp)
            if code is None:
                continue
            guard = self.guards.pop(tp)
            p.producers.end_verification(self.producer_id, guard)
            out[tp] = code
        return out


def start_verifications(entries: Sequence[tuple[Partition, int, int]]) -> list[TxnVerification]:
    """Group ``(partition, producer id, epoch)`` appends by producer and start each
    partition's verification."""
    by_producer: dict[tuple[int, int], TxnVerification] = {}
    for part, pid, epoch in entries:
        v = by_producer.get((pid, epoch))
        if v is None:
            v = by_producer[(pid, epoch)] = TxnVerification(pid, epoch)
        v.add(part)
    return list(by_producer.values())
