"""The local logs are an object the replica manager owns (``ReplicaManager.logs``), not a
base class reaching into the manager's attributes: built from a log dir, the hosted
partitions (read only) and two hooks, it opens, checkpoints, retains and deletes logs on
its own, and tells its owner through the hooks."""

from __future__ import annotations

from pathlib import Path

from odradek.replication.partition import Partition
from odradek.replication.replica_logs import (
    LOG_START_CHECKPOINT,
    ReplicaLogs,
    TopicPartition,
)
from odradek.storage.checkpoint import read_checkpoint
from odradek.storage.log import Log, LogConfig


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
