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
    parse_partition_dir,
)
from odradek.runtime import clock
from odradek.storage.checkpoint import read_checkpoint
from odradek.storage.deleted_logs import delete_dir_name
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
    removal = logs.release_deleted(force=True)
    assert removal is not None and removal() == 1
    with pytest.raises(OSError):
        os.fstat(sl.fd)


def _delete_dirs(log_dir: Path) -> list[str]:
    return sorted(e for e in os.listdir(log_dir) if e.endswith("-delete"))


def test_a_deleted_replica_is_renamed_now_and_removed_when_due_off_the_loop(
    tmp_path: Path,
) -> None:
    """Kafka's LogManager.asyncDelete: the delete renames the directory to
    ``<topic>-<partition>.<id>-delete`` (one rename on the loop; the rmtree, 5-6 ms per
    replica, stalled every client for seconds when a large topic went); the name is free
    at once for a replica moved back; after file.delete.delay.ms the retention step's
    blocking half (the broker runs it in a worker thread) removes the directory."""
    logs = ReplicaLogs(
        log_dir=tmp_path,
        log_config_for=lambda _t: LogConfig(file_delete_delay_ms=60_000),
        recovery_threads=1,
        partitions={},
        on_open=lambda _lg: None,
        on_log_start_moved=lambda _tp: None,
    )
    lg = logs.open_log(("t", 0))
    lg.append_as_leader(encode_batch([(None, b"old")]), 0, 1)
    logs.delete(("t", 0))
    [renamed] = _delete_dirs(tmp_path)
    assert renamed.startswith("t-0.") and not (tmp_path / "t-0").exists()
    assert any(name.endswith(".log") for name in os.listdir(tmp_path / renamed))

    # Moved back before the old directory is gone: a new, empty log under the old name.
    again = logs.open_log(("t", 0))
    assert again.log_end_offset == 0 and (tmp_path / "t-0").is_dir()
    again.append_as_leader(encode_batch([(None, b"new")]), 0, 1)
    assert again.log_end_offset == 1

    now = clock.time_ns() // 1_000_000
    early = logs.release_deleted(now + 59_000)
    assert early is not None and early() == 0  # only the renames' directory fsync
    assert _delete_dirs(tmp_path) == [renamed]
    assert logs.release_deleted(now + 59_000) is None  # nothing to do: no thread hop
    due = logs.release_deleted(now + 61_000)
    assert due is not None and due() == 1
    assert _delete_dirs(tmp_path) == [] and (tmp_path / "t-0").is_dir()
    logs.shutdown()


def test_start_up_skips_and_removes_a_leftover_delete_directory(tmp_path: Path) -> None:
    """A crash or a shutdown before the removal leaves ``t-0.<id>-delete`` (a shutdown
    leaves the pending ones, as Kafka's does): start-up does not load it as a log (it
    never parsed as a partition directory: its "index" is ``delete``) and removes it when
    the first retention step runs, off the loop -- before, it stayed forever."""
    logs = _logs(tmp_path, [], [])
    logs.open_log(("t", 0)).append_as_leader(encode_batch([(None, b"v")]), 0, 1)
    logs.open_log(("u", 1))
    logs.shutdown()
    leftover = tmp_path / delete_dir_name("t-0", 0)
    (tmp_path / "t-0").rename(leftover)
    assert parse_partition_dir(leftover.name) is None

    opened: list[Log] = []
    logs2 = _logs(tmp_path, opened, [])
    logs2.load_logs()
    assert [lg.directory.name for lg in opened] == ["u-1"]
    assert not logs2.has_log(("t", 0)) and _delete_dirs(tmp_path) == [leftover.name]
    removal = logs2.release_deleted()
    assert removal is not None and removal() == 1
    assert _delete_dirs(tmp_path) == []
    logs2.shutdown()


def test_a_delete_dir_name_fits_a_file_name() -> None:
    """Kafka's logDirNameWithSuffixCappedLength: a 249-character topic is cut."""
    name = delete_dir_name("x" * 249 + "-12", 7)
    assert len(name) == 255 and name.endswith("-12." + name[-39:-7] + "-delete")
    assert parse_partition_dir(name) is None


def test_pending_deletions_are_run_for_the_logs_that_scheduled_them_only(tmp_path: Path) -> None:
    """The broker runs pending segment deletions every second; with thousands of logs it
    visits only those that scheduled some (issue 29: idle CPU), and each until its
    deletions are done."""
    logs = ReplicaLogs(
        log_dir=tmp_path,
        log_config_for=lambda _t: LogConfig(
            segment_bytes=1024, file_delete_delay_ms=50, retention_bytes=2048
        ),
        recovery_threads=1,
        partitions={},
        on_open=lambda _lg: None,
        on_log_start_moved=lambda _tp: None,
    )
    busy, idle = logs.open_log(("t", 0)), logs.open_log(("t", 1))
    for i in range(40):
        busy.append_as_leader(encode_batch([(None, b"x" * 100)], base_offset=0), 0, i)
    assert len(busy.segments) > 2
    visited: list[Log] = []
    real_run = Log.run_pending_deletions

    def counting(self: Log, now_ms: int | None = None, *, force: bool = False) -> int:
        visited.append(self)
        return real_run(self, now_ms, force=force)

    Log.run_pending_deletions = counting  # type: ignore[method-assign]
    try:
        assert logs.run_pending_deletions(0) == 0 and visited == []  # nothing scheduled
        removed = busy.delete_old_segments(busy.log_end_offset, now_ms=10_000)
        n = removed.count
        assert n > 0 and busy.pending_deletions == n
        assert logs.run_pending_deletions(10_000) == 0  # not due yet
        assert visited == [busy]  # the idle log is never visited
        assert logs.run_pending_deletions(10_050) == n and busy.pending_deletions == 0
        visited.clear()
        assert logs.run_pending_deletions(20_000) == 0 and visited == []  # done: dropped
    finally:
        Log.run_pending_deletions = real_run  # type: ignore[method-assign]
    assert idle.pending_deletions == 0
    logs.shutdown()
