"""The simulator's disk (odradek.sim.disk): a power cut keeps what was fsynced, a torn
prefix of unsynced appends, and the directory entries of the last directory fsync; a
log recovers from what it leaves."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.runtime import disk
from odradek.sim.disk import PowerLossReport, SimDisk, recording
from odradek.storage.checkpoint import fsync_dir, read_checkpoint, write_checkpoint
from odradek.storage.deleted_logs import delete_dir_name
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.log import Log, LogConfig
from odradek.storage.records import encode_batch


@pytest.fixture
def sim() -> Iterator[SimDisk]:
    with recording(SimDisk()) as s:
        yield s


def _fsync_path(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        disk.fsync(fd)
    finally:
        os.close(fd)


def test_unsynced_appends_keep_a_torn_prefix(tmp_path: Path, sim: SimDisk) -> None:
    f = tmp_path / "seg"
    f.write_bytes(b"A" * 100)
    _fsync_path(f)
    fsync_dir(tmp_path)
    with open(f, "ab") as fh:
        fh.write(b"B" * 100)
    kept = set()
    for seed in range(20):
        with open(f, "r+b") as fh:  # back to the state before the cut, same inode
            fh.write(b"A" * 100 + b"B" * 100)
        sim.fsync(os.open(tmp_path, os.O_RDONLY))  # (leaks one fd per round: a test)
        sim._content[os.stat(f).st_ino] = b"A" * 100
        sim.power_loss(tmp_path, random.Random(seed))
        data = f.read_bytes()
        assert data[:100] == b"A" * 100 and set(data[100:]) <= {ord("B")}
        kept.add(len(data))
    assert min(kept) >= 100 and len(kept) > 5  # torn anywhere in the unsynced tail


def test_unsynced_create_and_truncation_are_undone(tmp_path: Path, sim: SimDisk) -> None:
    (tmp_path / "old").write_bytes(b"0123456789")
    _fsync_path(tmp_path / "old")
    fsync_dir(tmp_path)
    (tmp_path / "new").write_bytes(b"x")
    _fsync_path(tmp_path / "new")  # its data is durable, its name is not
    os.truncate(tmp_path / "old", 3)
    rep = sim.power_loss(tmp_path, random.Random(1))
    assert not (tmp_path / "new").exists()
    assert (tmp_path / "old").read_bytes() == b"0123456789"
    assert rep.deleted == ["new"] and rep.torn == ["old 10/3"]


def test_never_synced_directory_keeps_no_file(tmp_path: Path, sim: SimDisk) -> None:
    d = tmp_path / "p"
    d.mkdir()
    (d / "f").write_bytes(b"x")
    _fsync_path(d / "f")
    sim.power_loss(tmp_path, random.Random(1))
    assert d.is_dir() and list(d.iterdir()) == []


def test_checkpoint_protocol_survives_whole(tmp_path: Path, sim: SimDisk) -> None:
    cp = tmp_path / "replication-offset-checkpoint"
    write_checkpoint(cp, {("t", 0): 5})
    write_checkpoint(cp, {("t", 0): 9})
    sim.power_loss(tmp_path, random.Random(1))
    assert read_checkpoint(cp) == {("t", 0): 9}


def _write_renamed(path: Path, body: bytes) -> None:
    """tmp, fsync, rename -- and no directory fsync after the rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(body)
    _fsync_path(tmp)
    os.replace(tmp, path)


def test_rename_without_a_directory_fsync_is_undone(tmp_path: Path, sim: SimDisk) -> None:
    # With no directory fsync after the rename, the model keeps the file the last
    # directory fsync saw (the checkpoints use disk.replace_durably, which fsyncs it).
    cp = tmp_path / "leader-epoch-checkpoint"
    _write_renamed(cp, b"0\n1\n1 0\n")
    fsync_dir(tmp_path)
    _write_renamed(cp, b"0\n2\n1 0\n2 10\n")
    # A second rewrite: its temporary file may get the first file's inode number back
    # (freed by the first rename) and pass for the durable file (seed 70 of the
    # power-loss profile, before the model pinned the inodes it remembers).
    _write_renamed(cp, b"0\n3\n1 0\n2 10\n3 20\n")
    rep = sim.power_loss(tmp_path, random.Random(1))
    assert LeaderEpochCache(tmp_path).entries == [(1, 0)]
    assert rep.restored == ["leader-epoch-checkpoint"]


def test_log_recovers_from_a_cut_at_any_point(tmp_path: Path, sim: SimDisk) -> None:
    """Flushed batches survive; of the rest, the log keeps a prefix of whole batches."""
    cfg = LogConfig()
    for seed in range(15):
        d = tmp_path / f"p{seed}"
        log = Log.open(d, cfg)
        for i in range(5):
            log.append_as_leader(encode_batch([(None, f"v{i}".encode())]), 0, 1)
        log.flush()
        for i in range(5, 12):
            log.append_as_leader(encode_batch([(None, f"v{i}".encode() * 30)]), 0, 1)
        for seg in log.segments:  # kill -9: the descriptors just go
            os.close(seg.fd)
            seg.closed = True
        sim.power_loss(d, random.Random(seed))
        again = Log.open(d, cfg)
        try:
            assert 5 <= again.log_end_offset <= 12
            sl = again.read(0, 1 << 20, max_offset=again.log_end_offset)
            assert sl is not None
            again.append_as_leader(encode_batch([(None, b"after")]), 0, 1)
        finally:
            again.close()


def test_a_deleted_logs_directory_is_left_as_it_is(tmp_path: Path, sim: SimDisk) -> None:
    """A replica's delete renames its directory to ``<tp>.<id>-delete`` (removed later;
    start-up removes it unread): the cut leaves it alone and reports nothing of it --
    the model, keying durable entries by path, would report its files lost -- so the
    simulator's timelines are those of the former immediate removal."""
    part = tmp_path / "t-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(b"x" * 10)
    fsync_dir(part)
    gone = tmp_path / delete_dir_name("t-0", 0)
    part.rename(gone)
    rep = sim.power_loss(tmp_path, random.Random(0))
    assert str(rep) == str(PowerLossReport())
    assert (gone / "00000000000000000000.log").read_bytes() == b"x" * 10
