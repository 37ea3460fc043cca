"""The replica manager always runs with explicit settings (issue 25 item 6): built from
the table's defaults it behaves as a broker does with an empty server.properties. It
used to take ``config=None`` and then silently skip the periodic ISR check (and start
no fetchers), so a test of it checked something no broker runs."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from pathlib import Path

from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.replication.replica_manager import ReplicaManager
from odradek.replication.settings import ReplicaManagerSettings
from odradek.runtime import clock
from odradek.storage.log import LogConfig


def test_defaults_are_the_tables_and_the_isr_check_runs(tmp_path: Path) -> None:
    settings = ReplicaManagerSettings.defaults()
    assert settings.replica_lag_time_max_ms == 30_000  # replica.lag.time.max.ms
    assert settings.min_insync_replicas == 1 and settings.txn_verification_enable
    rm = ReplicaManager(
        1, tmp_path, lambda _t: LogConfig(), replace(settings, min_insync_replicas=2)
    )
    rm.load_logs()
    # Broker 1 leads t-0 with broker 2 in its ISR; broker 2 never fetches.
    rm.apply_image(
        MetadataImage(
            "c",
            1,
            {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2)},
            {
                "t": TopicInfo(
                    "t", uuid.UUID(int=1), {0: PartitionInfo(0, (1, 2), 1, 0, (1, 2), 1, 0)}
                )
            },
            complete=True,
        )
    )
    part = rm.partitions[("t", 0)]
    assert part.min_insync_replicas == 2  # the settings' value, not the table's
    rm.check_isr()
    assert part.pending_isr is None  # not lagging yet
    start = time.time_ns()
    clock.install(clock.monotonic, lambda: start + 31 * 1_000_000_000)
    try:
        rm.check_isr()  # past replica.lag.time.max.ms: broker 2 leaves the ISR
    finally:
        clock.restore()
    assert part.pending_isr == (1,)
    rm.shutdown()


def test_the_image_s_controlled_shutdowns_make_brokers_ineligible_for_the_isr(
    tmp_path: Path,
) -> None:
    """KIP-841: a broker with a pending controlled shutdown is not added to an ISR by this
    broker's leaders (a loaded CI run saw a leader re-admit the stopping broker while the
    controller that would undo it was dead)."""
    rm = ReplicaManager(1, tmp_path, lambda _t: LogConfig(), ReplicaManagerSettings.defaults())
    rm.load_logs()
    brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)}
    topics = {
        "t": TopicInfo("t", uuid.UUID(int=1), {0: PartitionInfo(0, (1, 2, 3), 1, 0, (1, 3), 1, 0)})
    }
    rm.apply_image(
        MetadataImage("c", 1, brokers, topics, complete=True, shutting_down=frozenset({2}))
    )
    assert not rm.isr_eligibility.eligible(2) and rm.isr_eligibility.eligible(3)
    rm.apply_image(MetadataImage("c", 1, brokers, topics, complete=True))
    assert rm.isr_eligibility.eligible(2)  # the request was answered and deleted
    rm.shutdown()


def test_a_replica_moved_away_and_back_never_leads_its_old_epoch_again(tmp_path: Path) -> None:
    """Defence in depth for odradek sim seed 404: an image that names this broker leader
    at the epoch its replica was moved away in (a stale read of the state) does not
    re-create the replica, empty, as that epoch's leader; the controller's later state
    does."""
    brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)}
    tid = uuid.UUID(int=1)

    def apply(rm: ReplicaManager, replicas: tuple[int, ...], leader: int, epoch: int) -> None:
        p = PartitionInfo(0, replicas, leader, epoch, replicas, 1, epoch)
        rm.apply_image(
            MetadataImage("c", 1, brokers, {"t": TopicInfo("t", tid, {0: p})}, complete=True)
        )

    async def scenario(log_dir: Path, back_at: int) -> bool | None:
        """Led at epoch 6, moved away (leader 2 at 7), back with a state of ``back_at``
        naming this broker leader; whether it then leads (None: no replica)."""
        rm = ReplicaManager(1, log_dir, lambda _t: LogConfig(), ReplicaManagerSettings.defaults())
        rm.load_logs()
        try:
            apply(rm, (1, 2), leader=1, epoch=6)
            assert rm.partitions[("t", 0)].is_leader
            apply(rm, (2, 3), leader=2, epoch=7)
            assert ("t", 0) not in rm.partitions
            apply(rm, (1, 2, 3), leader=1, epoch=back_at)
            part = rm.partitions.get(("t", 0))
            if part is None:  # then the controller's own state arrives
                apply(rm, (1, 2, 3), leader=2, epoch=7)
                assert not rm.partitions[("t", 0)].is_leader
                return None
            return part.is_leader
        finally:
            await rm.stop_fetchers()
            rm.shutdown()

    assert asyncio.run(scenario(tmp_path / "stale", back_at=6)) is None
    assert asyncio.run(scenario(tmp_path / "elected", back_at=8)) is True
