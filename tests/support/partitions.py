"""Build ``Partition`` objects on real logs and drive them with the controller's states."""

from __future__ import annotations

from pathlib import Path

from odradek.replication.partition import Partition
from odradek.replication.partition_state import IsrEligibility, LeaderAndIsr, Transition
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.producer_state import ProducerStateManager
from odradek.storage.truncation_ledger import TruncationLedger


def new_partition(
    directory: Path,
    *,
    broker: int = 1,
    replicas: tuple[int, ...] = (1, 2, 3),
    config: LogConfig | None = None,
    ledger: TruncationLedger | None = None,
    high_watermark: int = 0,
    topic: str = "t",
    index: int = 0,
    log: Log | None = None,
    eligibility: IsrEligibility | None = None,
) -> Partition:
    lg = log if log is not None else Log.open(directory, config or LogConfig())
    return Partition(
        topic,
        index,
        lg,
        list(replicas),
        broker,
        LeaderEpochCache(directory),
        ProducerStateManager(directory),
        ledger=ledger,
        high_watermark=high_watermark,
        eligibility=eligibility,
    )


def lead(
    p: Partition,
    epoch: int,
    isr: list[int] | tuple[int, ...],
    *,
    zk_version: int = 0,
    controller_epoch: int = 1,
    now_ms: int = 0,
) -> Transition:
    """The controller makes ``p``'s broker the leader (a state znode write)."""
    return p.apply_leader_and_isr(
        LeaderAndIsr(
            leader=p.local_broker_id,
            leader_epoch=epoch,
            isr=tuple(isr),
            replicas=p.replicas,
            zk_version=zk_version,
            controller_epoch=controller_epoch,
        ),
        now_ms,
    )


def follow(
    p: Partition,
    leader: int,
    epoch: int,
    isr: list[int] | tuple[int, ...],
    *,
    zk_version: int = 0,
    controller_epoch: int = 1,
) -> Transition:
    return p.apply_leader_and_isr(
        LeaderAndIsr(
            leader=leader,
            leader_epoch=epoch,
            isr=tuple(isr),
            replicas=p.replicas,
            zk_version=zk_version,
            controller_epoch=controller_epoch,
        ),
        0,
    )
