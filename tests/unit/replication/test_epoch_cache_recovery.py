"""On load the leader-epoch cache is recovered from the log (Kafka's LogLoader and
LogSegment.recover): cut to the log end, then the epoch of every batch newer than the
cache's latest assigned -- from the recovery point when the checkpoint is intact, from the
log start when it is missing or torn. OffsetsForLeaderEpoch (the leader's answer to a
follower deciding where to truncate) reads that cache."""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path

from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.replication.replica_manager import ReplicaManager
from odradek.replication.settings import ReplicaManagerSettings
from odradek.sim.disk import SimDisk, recording
from odradek.storage.checkpoint import write_checkpoint
from odradek.storage.leader_epoch import CHECKPOINT_NAME, LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.records import encode_batch

LEADER_EPOCH = 9  # the epoch the image gives broker 1 as leader of t-0


def _image() -> MetadataImage:
    return MetadataImage(
        "c",
        1,
        {1: BrokerInfo(1, "127.0.0.1", 9001)},
        {
            "t": TopicInfo(
                "t", uuid.UUID(int=1), {0: PartitionInfo(0, (1,), 1, LEADER_EPOCH, (1,), 1, 0)}
            )
        },
        complete=True,
    )


def _write_log(log_dir: Path, recovery_point: int) -> None:
    """t-0: offsets 0-2 in epoch 1, 3-5 in epoch 2, 6-8 in epoch 4 (every batch fsynced),
    and the recovery-point checkpoint at ``recovery_point``."""
    log = Log.open(log_dir / "t-0", LogConfig())
    for epoch in (1, 2, 4):
        for i in range(3):
            log.append_as_leader(encode_batch([(None, f"e{epoch}-{i}".encode())]), epoch, 1)
    log.flush()
    log.close()
    write_checkpoint(log_dir / "recovery-point-offset-checkpoint", {("t", 0): recovery_point})


def _load(log_dir: Path) -> tuple[ReplicaManager, MetadataImage]:
    rm = ReplicaManager(1, log_dir, lambda _t: LogConfig(), ReplicaManagerSettings.defaults())
    rm.load_logs()
    image = _image()
    rm.apply_image(image)
    return rm, image


def _answers(rm: ReplicaManager, image: MetadataImage) -> list[tuple[int, int]]:
    """OffsetsForLeaderEpoch from follower 2 for epochs 0..5."""
    return [rm.last_offset_for_leader_epoch("t", 0, LEADER_EPOCH, e, 2, image) for e in range(6)]


EXPECTED_ENTRIES = [(1, 0), (2, 3), (4, 6)]  # the new leader epoch: at its first append
EXPECTED_ANSWERS = [(-1, -1), (1, 3), (2, 6), (2, 6), (4, 9), (4, 9)]


def test_missing_checkpoint_is_rebuilt_from_every_batch(tmp_path: Path) -> None:
    _write_log(tmp_path, recovery_point=9)  # a clean shutdown: no recovery scan
    (tmp_path / "t-0" / CHECKPOINT_NAME).unlink(missing_ok=True)
    rm, image = _load(tmp_path)
    try:
        assert rm.partitions[("t", 0)].epochs.entries == EXPECTED_ENTRIES
        assert _answers(rm, image) == EXPECTED_ANSWERS
    finally:
        rm.shutdown()


def test_torn_checkpoint_is_rebuilt_from_every_batch(tmp_path: Path) -> None:
    _write_log(tmp_path, recovery_point=9)
    # Says three entries, holds one (a cut inside an unsynced rewrite): not trusted.
    (tmp_path / "t-0" / CHECKPOINT_NAME).write_text("0\n3\n1 0\n")
    rm, image = _load(tmp_path)
    try:
        assert rm.partitions[("t", 0)].epochs.entries == EXPECTED_ENTRIES
        assert _answers(rm, image) == EXPECTED_ANSWERS
    finally:
        rm.shutdown()


def test_stale_checkpoint_gets_the_recovered_batches_epochs(tmp_path: Path) -> None:
    # The checkpoint knows epoch 1 only and names an epoch past the log end; the log was
    # last flushed at offset 2 as far as the recovery point says: batches from there on
    # are recovered, and their epochs 2 and 4 assigned (epoch 7 at 20 is cut off).
    _write_log(tmp_path, recovery_point=2)
    cache = LeaderEpochCache(tmp_path / "t-0")
    cache.entries = [(1, 0), (7, 20)]
    cache._flush()
    rm, image = _load(tmp_path)
    try:
        assert rm.partitions[("t", 0)].epochs.entries == EXPECTED_ENTRIES
        assert _answers(rm, image) == EXPECTED_ANSWERS
    finally:
        rm.shutdown()


def test_consistent_checkpoint_is_taken_as_it_is(tmp_path: Path) -> None:
    # A clean shutdown: the recovery point at the log end, every entry naming a batch of
    # its epoch and the last batch of the latest epoch -- no scan, no rewrite.
    _write_log(tmp_path, recovery_point=9)
    cache = LeaderEpochCache(tmp_path / "t-0")
    cache.entries = list(EXPECTED_ENTRIES)
    cache._flush()
    ino = cache.path.stat().st_ino
    rm, _ = _load(tmp_path)
    try:
        assert rm.partitions[("t", 0)].epochs.entries == EXPECTED_ENTRIES
        assert cache.path.stat().st_ino == ino
    finally:
        rm.shutdown()


def test_checkpoint_missing_the_last_epoch_is_completed(tmp_path: Path) -> None:
    # Intact, recovery point at the log end, but the last batches are of epoch 4, which
    # the checkpoint does not know: the batches from its latest entry are scanned.
    _write_log(tmp_path, recovery_point=9)
    cache = LeaderEpochCache(tmp_path / "t-0")
    cache.entries = [(1, 0), (2, 3)]
    cache._flush()
    rm, _ = _load(tmp_path)
    try:
        assert rm.partitions[("t", 0)].epochs.entries == EXPECTED_ENTRIES
    finally:
        rm.shutdown()


def test_checkpoint_ahead_of_a_log_whose_truncation_a_cut_undid(tmp_path: Path) -> None:
    # Power-loss seed 54: a follower truncated its divergent epoch-1 suffix (offsets 3-5),
    # fetched epoch 2 there and fsynced only the epoch checkpoint; the cut undid the
    # (never fsynced) truncation. The checkpoint says epoch 2 from offset 3, the batches
    # there are of epoch 1: asked about epoch 2, the leader's answer would let this
    # replica keep them. The entry is checked against the batch and the cache rebuilt.
    d = tmp_path / "t-0"
    with recording(SimDisk()) as sim:
        log = Log.open(d, LogConfig())
        cache = LeaderEpochCache(d)
        for epoch, base in ((0, 0), (1, 3)):
            cache.assign(epoch, base)
            for i in range(3):
                log.append_as_leader(encode_batch([(None, f"e{epoch}-{i}".encode())]), epoch, 1)
        log.flush()  # offsets 0-5 and the directory durable
        log.truncate_to(3)
        cache.truncate_from_end(3)
        cache.assign(2, 3)
        for i in range(3):
            log.append_as_leader(encode_batch([(None, f"e2-{i}".encode())]), 2, 1)
        for seg in log.segments:  # kill -9: the descriptors just go
            os.close(seg.fd)
            seg.closed = True
        rep = sim.power_loss(d, random.Random(1))
    assert LeaderEpochCache(d).entries == [(0, 0), (2, 3)], rep  # the checkpoint survived
    write_checkpoint(tmp_path / "recovery-point-offset-checkpoint", {("t", 0): 6})
    rm, image = _load(tmp_path)
    try:
        part = rm.partitions[("t", 0)]
        assert part.log.log_end_offset == 6  # the truncation was undone
        assert part.epochs.entries == [(0, 0), (1, 3)]
        assert rm.last_offset_for_leader_epoch("t", 0, LEADER_EPOCH, 2, 2, image) == (1, 6)
    finally:
        rm.shutdown()
