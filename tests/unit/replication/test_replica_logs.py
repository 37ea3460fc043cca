"""The local logs are an object the replica manager owns (``ReplicaManager.logs``), not a
base class reaching into the manager's attributes: built from a log dir, the hosted
partitions (read only) and two hooks, it opens, checkpoints, retains and deletes logs on
its own, and tells its owner through the hooks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.replication.partition import Partition
from odradek.replication.replica_logs import (
    LOG_START_CHECKPOINT,
    ReplicaLogs,
    TopicPartition,
)
from odradek.storage.checkpoint import read_checkpoint
from odradek.storage.log import Log, LogConfig
from odradek.storage.records import encode_batch


def _logs(log_dir: Path, opened: list[Log], moved: list[TopicPartition]) -> ReplicaLogs:
    partitions: dict[TopicPartition, Partition] = {}
    return ReplicaLogs(
        log_dir=log_dir,
        log_config_for=lambda _t: LogConfig(),
        recovery_threads=1,
        partitions=partitions,
        on_open=opened.append,
        on_log_start_moved=moved.append,
    )


def test_replica_logs_stand_alone_with_their_hooks(tmp_path: Path) -> None:
    opened: list[Log] = []
    moved: list[TopicPartition] = []
    logs = _logs(tmp_path, opened, moved)
    lg = logs.open_log(("t", 0))
    assert opened == [lg] and logs.open_log(("t", 0)) is lg  # opened once
    assert logs.has_log(("t", 0)) and logs.partitions_with_logs() == [("t", 0)]
    logs.shutdown()

    # A restart: the log is found on disk, and the hook sees it again.
    opened2: list[Log] = []
    logs2 = _logs(tmp_path, opened2, moved)
    logs2.load_logs()
    assert [lg2.directory.name for lg2 in opened2] == ["t-0"]
    assert logs2.checkpointed_hw(("t", 0)) == 0  # no partition: no HW was checkpointed
    assert logs2.get(("t", 0)) is opened2[0]

    # Retention of a replica without a role is bounded by its checkpointed HW (0 here):
    # nothing moves, so the owner is not told.
    logs2.run_retention()
    assert moved == []
    logs2.checkpoint_log_start_offsets()
    assert read_checkpoint(tmp_path / LOG_START_CHECKPOINT) == {("t", 0): 0}
    logs2.delete(("t", 0))
    assert not logs2.has_log(("t", 0)) and not (tmp_path / "t-0").exists()


def test_a_slice_read_before_its_replica_is_deleted_stays_readable(tmp_path: Path) -> None:
    """A fetch's answer is built on the handler's next step, after the read: an image
    deleting the replica can run in between (sim --profile pause, a draft's seed 76: the
    answer's pread failed with EBADF; with the fd number reused it would read another
    file). As for segments retention removes, the deleted log's files go at once (the
    name is free for a replica moved back) and its fds stay open for
    file.delete.delay.ms."""
    logs = _logs(tmp_path, [], [])
    lg = logs.open_log(("t", 0))
    batch = encode_batch([(None, b"v")])
    lg.append_as_leader(batch, 0, 1)
    sl = lg.read(0, 1 << 20, max_offset=lg.log_end_offset)
    assert sl is not None
    logs.delete(("t", 0))
    assert not (tmp_path / "t-0").exists()
    assert len(sl.read_bytes()) == sl.size == len(batch)
    assert logs.release_deleted(force=True) == 1
    with pytest.raises(OSError):
        os.fstat(sl.fd)
