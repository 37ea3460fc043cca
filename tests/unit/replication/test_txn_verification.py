"""KIP-890 on the append path (issue 25): the replica manager gives each transactional
append its verification guard, and with verification on its appends -- a client's
produce and the group coordinator's transactional offset commit alike -- refuse a
transactional batch that opens a transaction without a valid guard (INVALID_TXN_STATE),
whoever the caller is. A real ReplicaManager on real logs, as in a broker."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from odradek.coordinator.txn_markers import control_batch
from odradek.errors import ErrorCode
from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.protocol.produce_response import PartitionProduceResult
from odradek.replication.replica_manager import ProduceEntry, ReplicaManager
from odradek.replication.settings import ReplicaManagerSettings
from odradek.replication.txn_verification import VERIFICATION_CONFIG
from odradek.storage.log import LogConfig
from odradek.storage.records import encode_batch

TOPIC = "t"
TP = (TOPIC, 0)
PID = 7


def _image(verification: str | None = None) -> MetadataImage:
    """Broker 1 leads t-0 alone; ``verification``: the dynamic cluster-wide setting."""
    overrides = {} if verification is None else {VERIFICATION_CONFIG: verification}
    return MetadataImage(
        "c",
        1,
        {1: BrokerInfo(1, "127.0.0.1", 9001)},
        {TOPIC: TopicInfo(TOPIC, uuid.UUID(int=1), {0: PartitionInfo(0, (1,), 1, 0, (1,), 1, 0)})},
        complete=True,
        default_broker_overrides=overrides,
    )


def _manager(tmp_path: Path, image: MetadataImage) -> ReplicaManager:
    rm = ReplicaManager(1, tmp_path, lambda _t: LogConfig(), ReplicaManagerSettings.defaults())
    rm.load_logs()
    rm.apply_image(image)
    return rm


def _txn_batch(seq: int = 0) -> bytes:
    return encode_batch(
        [(b"k", b"v")], producer_id=PID, producer_epoch=0, base_sequence=seq, transactional=True
    )


def _produce(
    rm: ReplicaManager,
    image: MetadataImage,
    records: bytes,
    guards: dict[tuple[str, int], object] | None = None,
) -> PartitionProduceResult:
    res = PartitionProduceResult(index=0, error_code=0, base_offset=-1)
    rm.append_records(
        [ProduceEntry(TOPIC, records, res)], 1, 5.0, image, verification_guards=guards
    )
    return res


class Confirming:
    """A transaction coordinator that confirms every partition (or refuses them all)."""

    def __init__(self, refuse: ErrorCode | None = None) -> None:
        self.refuse = refuse
        self.asked: list[list[tuple[str, int]]] = []

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        timeout_s: float,
    ) -> dict[tuple[str, int], ErrorCode]:
        self.asked.append(partitions)
        return {} if self.refuse is None else dict.fromkeys(partitions, self.refuse)


def test_the_append_refuses_a_transaction_without_its_guard(tmp_path: Path) -> None:
    image = _image()
    rm = _manager(tmp_path, image)
    part = rm.partitions[TP]
    assert rm.txn_verification_enabled  # the default, as in Kafka
    # A produce whose caller verified nothing opens no transaction.
    res = _produce(rm, image, _txn_batch())
    assert res.error_code == ErrorCode.invalid_txn_state
    assert part.log_end_offset == 0 and PID not in part.producers.ongoing
    # Nor does the coordinator's transactional offset commit (the internal append).
    code, _ = asyncio.run(rm.append_and_wait(TP, _txn_batch(), 5.0))
    assert code is ErrorCode.invalid_txn_state
    # A guard another verification registered is not this one's.
    [stale] = rm.start_txn_verification([(TP, PID, 0)])
    res = _produce(rm, image, _txn_batch(), {TP: object()})
    assert res.error_code == ErrorCode.invalid_txn_state
    # A verification the coordinator refused leaves no guard behind.
    refused = asyncio.run(stale.verify(Confirming(ErrorCode.invalid_txn_state), "tx", 5.0))
    assert refused == {TP: ErrorCode.invalid_txn_state} and PID not in part.producers.verifying
    assert _produce(rm, image, _txn_batch(), stale.guards).error_code == ErrorCode.invalid_txn_state
    # Verified: the guard opens the transaction; later batches need no verification.
    [v] = rm.start_txn_verification([(TP, PID, 0)])
    coordinator = Confirming()
    assert asyncio.run(v.verify(coordinator, "tx", 5.0)) == {}
    assert coordinator.asked == [[TP]]
    assert _produce(rm, image, _txn_batch(), v.guards).error_code == 0
    assert part.producers.ongoing == {PID: 0}
    [ongoing] = rm.start_txn_verification([(TP, PID, 0)])
    assert ongoing.pending == []
    assert asyncio.run(ongoing.verify(coordinator, "tx", 5.0)) == {}
    assert coordinator.asked == [[TP]]  # not asked again
    assert _produce(rm, image, _txn_batch(1), ongoing.guards).error_code == 0
    # A marker between the verification and the append voids the guard.
    [late] = rm.start_txn_verification([(TP, PID, 0)])
    assert late.pending == []  # still ongoing: ONGOING_AT_REQUEST
    code, _ = asyncio.run(
        rm.append_and_wait(TP, control_batch(PID, 0, False, 0), 5.0, allow_control=True)
    )
    assert code is ErrorCode.none and PID not in part.producers.ongoing
    res = _produce(rm, image, _txn_batch(2), late.guards)
    assert res.error_code == ErrorCode.invalid_txn_state
    rm.shutdown()


def test_with_verification_off_no_guard_is_needed(tmp_path: Path) -> None:
    image = _image("false")  # the dynamic setting, followed from the image
    rm = _manager(tmp_path, image)
    assert not rm.txn_verification_enabled
    assert rm.start_txn_verification([(TP, PID, 0)]) == []
    assert _produce(rm, image, _txn_batch()).error_code == 0
    assert rm.partitions[TP].producers.ongoing == {PID: 0}
    rm.apply_image(_image("true"))
    assert rm.txn_verification_enabled
    rm.shutdown()
