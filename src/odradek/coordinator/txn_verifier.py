"""Partition verification before a transaction starts on a partition (KIP-890 part 1).

Why: a transactional batch that reaches a leader after its transaction ended -- a retry
delayed past the abort, or a produce from a buggy client that never called
AddPartitionsToTxn -- opens a transaction that no coordinator knows about. No marker
ever closes it, so the partition's last stable offset stays below it forever and every
read_committed consumer of the partition stops there (a "hanging transaction").

What, as Kafka does it (``AddPartitionsToTxnManager``, ``transaction.partition.
verification.enable``, default true): when a Produce request carries a transactional id
and a partition's leader has no ongoing transaction for the batch's producer id, the
leader first asks the transaction coordinator whether the partition is in the producer's
transaction -- AddPartitionsToTxn v4 with ``verify_only`` (a direct call when this broker
is the coordinator). Only then is the batch appended. The leader registers a
verification guard in the partition's producer state before it asks; a marker for the
producer meanwhile removes it, and the append then fails (``storage.producer_state``).

The coordinator's answers become Produce error codes as in Kafka's ReplicaManager
(``produce_error``): clients of Produce v10 and older know INVALID_TXN_STATE, not
TRANSACTION_ABORTABLE; coordinator moves and in-flight completions become the
retriable NOT_ENOUGH_REPLICAS.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from kio.schema.add_partitions_to_txn.v4.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from odradek.errors import ErrorCode
from odradek.replication.broker_connection import BrokerConnectionError, BrokerConnectionPool

if TYPE_CHECKING:
    from odradek.metadata.image import BrokerInfo

__all__ = ["TxnVerifier", "produce_error"]

logger = logging.getLogger(__name__)

VERIFY_TIMEOUT_S = 30.0  # Kafka: request.timeout.ms of the inter-broker sender

TopicPartition = tuple[str, int]

_RETRIABLE_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


def produce_error(code: ErrorCode) -> ErrorCode:
    """A coordinator's verification answer as the Produce error the client gets (Kafka's
    AddPartitionsToTxnManager and ReplicaManager mappings, Produce v10 and older)."""
    if code is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch  # what producers expect here
    if code in (ErrorCode.transaction_abortable, ErrorCode.cluster_authorization_failed):
        return ErrorCode.invalid_txn_state  # not in the transaction / not verified
    if code in _RETRIABLE_AS_NOT_ENOUGH_REPLICAS:
        return ErrorCode.not_enough_replicas  # retriable: the producer tries again
    return code


class TxnPartitionOwner(Protocol):
    """What the verifier needs of this broker's transaction coordinator (a Protocol: the
    coordinator imports this module, and an import back made the coordinator modules a
    circle, issue 25)."""

    def coordinator_node(self, transactional_id: str) -> BrokerInfo | None: ...

    def verify_partitions(
        self, tid: str, producer_id: int, epoch: int, parts: set[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]: ...


class TxnVerifier:
    """Asks the transaction coordinator of a transactional id about partitions."""

    def __init__(
        self,
        broker_id: int,
        coordinator: TxnPartitionOwner,
        pool: BrokerConnectionPool,
    ) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self._pool = pool  # the coordinator's connections to other brokers

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
        timeout_s: float,
    ) -> dict[TopicPartition, ErrorCode]:
        """The partitions that failed verification, with their Produce error codes
        (empty: every partition is in the transaction)."""
        codes = await self._ask(transactional_id, producer_id, epoch, partitions, timeout_s)
        failed = {tp: produce_error(c) for tp, c in codes.items() if c is not ErrorCode.none}
        if failed:
            logger.info(
                "transactional id %r (producer %d epoch %d): verification failed for %s",
                transactional_id,
                producer_id,
                epoch,
                {f"{t}-{p}": c.name for (t, p), c in sorted(failed.items())},
            )
        return failed

    async def _ask(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
        timeout_s: float,
    ) -> dict[TopicPartition, ErrorCode]:
        node = self.coordinator.coordinator_node(tid)
        if node is None:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        leader = node.broker_id
        if leader == self.broker_id:
            return self.coordinator.verify_partitions(tid, producer_id, epoch, set(partitions))
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        req = AddPartitionsToTxnRequest(
            transactions=(
                AddPartitionsToTxnTransaction(
                    transactional_id=TransactionalId(tid),
                    producer_id=ProducerId(producer_id),
                    producer_epoch=i16(epoch),
                    verify_only=True,
                    topics=tuple(
                        AddPartitionsToTxnTopic(
                            name=TopicName(t), partitions=tuple(i32(p) for p in ps)
                        )
                        for t, ps in by_topic.items()
                    ),
                ),
            )
        )
        try:
            resp = await self._pool.request(leader, req, min(timeout_s, VERIFY_TIMEOUT_S))
        except (TimeoutError, BrokerConnectionError, OSError) as e:
            logger.info("verification with coordinator %d failed: %r", leader, e)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        top = ErrorCode(int(resp.error_code))
        if top is not ErrorCode.none:
            return dict.fromkeys(partitions, top)
        codes: dict[TopicPartition, ErrorCode] = {}
        for tr in resp.results_by_transaction:
            for t in tr.topic_results:
                for pr in t.results_by_partition:
                    codes[(str(t.name), int(pr.partition_index))] = ErrorCode(
                        int(pr.partition_error_code)
                    )
        # A partition the coordinator did not answer for is not verified.
        return {tp: codes.get(tp, ErrorCode.invalid_txn_state) for tp in partitions}
