"""Files written tmp-fsync-rename are renamed durably (``disk.replace_durably``: the
rename, then an fsync of the directory through the seam, Kafka's
``Utils.atomicMoveWithFallback(tmp, target, true)``): a power cut right after the write
keeps the new file. Before, the leader-epoch checkpoint, producer snapshots and
rewritten indexes were renamed without the directory fsync, and the simulator's disk
brought back the old file -- or none."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.sim.disk import SimDisk, recording
from odradek.storage.checkpoint import fsync_dir
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.producer_state import SNAPSHOT_SUFFIX, ProducerStateManager
from odradek.storage.records import encode_batch


@pytest.fixture
def sim() -> Iterator[SimDisk]:
    with recording(SimDisk()) as s:
        yield s


def test_leader_epoch_checkpoint_survives_a_cut(tmp_path: Path, sim: SimDisk) -> None:
    fsync_dir(tmp_path)  # the directory exists durably, empty
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    rep = sim.power_loss(tmp_path, random.Random(1))
    assert LeaderEpochCache(tmp_path).entries == [(1, 0)], rep
    cache.assign(2, 10)
    cache.assign(3, 20)
    rep = sim.power_loss(tmp_path, random.Random(2))
    assert LeaderEpochCache(tmp_path).entries == [(1, 0), (2, 10), (3, 20)], rep


def test_producer_snapshot_survives_a_cut(tmp_path: Path, sim: SimDisk) -> None:
    fsync_dir(tmp_path)
    producers = ProducerStateManager(tmp_path)
    producers.write_snapshot()
    written = sorted(p.name for p in tmp_path.glob(f"*{SNAPSHOT_SUFFIX}"))
    assert len(written) == 1
    rep = sim.power_loss(tmp_path, random.Random(1))
    assert sorted(p.name for p in tmp_path.glob(f"*{SNAPSHOT_SUFFIX}")) == written, rep


def test_rewritten_index_survives_a_cut_after_the_next_flush(tmp_path: Path, sim: SimDisk) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(index_interval_bytes=1))  # an index entry per batch
    for i in range(10):
        log.append_as_leader(encode_batch([(None, f"v{i}".encode() * 10)]), 0, 1)
    log.flush()
    seg = log.active_segment
    assert len(seg.index) >= 8
    log.truncate_to(4)  # the index is rewritten (tmp + rename) to its first entries
    log.flush()  # makes the truncation durable: the rename too
    want = seg.index.path.read_bytes()
    for s in log.segments:  # kill -9
        s.close()
    rep = sim.power_loss(d, random.Random(1))
    assert seg.index.path.read_bytes() == want, rep
