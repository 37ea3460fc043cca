"""Flushing off the event loop, group commit and simulated power loss (REQ-R18, R22, R27).

Real files, real fsyncs: ``Log.begin_flush`` / ``FlushJob.run`` / ``Log.complete_flush``,
the broker's ``Flusher`` driving them on an asyncio loop, and ``simulate_power_loss``
cutting a log back to what its fsync ledger says reached the disk.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from _storage_helpers import batch, segment_files, small_config, verify_log

from odradek.errors import KafkaError
from odradek.log_manager.flusher import LONG_MAX, Flusher, scheduler_interval_s
from odradek.storage.durability import (
    LEDGER_ENV,
    LEDGER_NAME,
    read_ledger,
    simulate_power_loss,
)
from odradek.storage.log import Log, LogConfig
from support.partitions import lead, new_partition


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, "1")


def _append(log: Log, n: int = 1, tag: int = 0) -> int:
    return log.append_as_leader(batch(n, tag=tag), leader_epoch=0, now_ms=1).last_offset


# ------------------------------------------------------------------ begin / complete
def test_recovery_point_moves_to_the_leo_captured_before_the_fsync(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    for i in range(5):
        _append(log, 2, tag=i)
    job = log.begin_flush(10)
    assert job is not None and job.target == 10
    _append(log, 3, tag=99)  # arrives while the worker fsyncs
    job.run()
    log.complete_flush(job)
    assert log.durable_offset == 10 and log.log_end_offset == 13
    assert all(fd == -1 for fd, _, _ in job.files)  # dup'ed fds closed by the job
    job2 = log.begin_flush(11, with_indexes=False)
    assert job2 is not None
    job2.run()
    log.complete_flush(job2)
    assert log.durable_offset == 13
    # Nothing new: a group commit has nothing to do.
    assert log.begin_flush(12, with_indexes=False) is None
    log.close()


def test_truncation_during_a_flush_voids_its_result(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    for i in range(10):
        _append(log, 1, tag=i)
    log.flush()
    for i in range(5):
        _append(log, 1, tag=50 + i)  # 10..14
    job = log.begin_flush(1, with_indexes=False)
    assert job is not None and job.target == 15
    log.truncate_to(12)  # replication truncates meanwhile, then new data comes
    _append(log, 5, tag=60)  # 12..16, not covered by the job
    job.run()
    log.complete_flush(job)
    assert log.durable_offset == 10
    log.flush()
    assert log.durable_offset == 17
    log.close()


def test_a_segment_deleted_during_the_fsync_is_harmless(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=600))
    for i in range(20):
        _append(log, 1, tag=i)
    assert len(log.segments) > 2
    job = log.begin_flush(1)
    assert job is not None and len(job.files) == len(log.segments)
    log.truncate_to(1)  # deletes every segment but the first: the job holds dups
    job.run()
    assert job.error is None
    log.complete_flush(job)
    assert log.durable_offset == 0  # generation changed: the voided target is ignored
    log.close()


def test_failed_fsync_raises_storage_error_and_keeps_the_directory_dirty(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    _append(log)
    job = log.begin_flush(1)
    assert job is not None and job.fsync_dir
    for fd, _, _ in job.files:
        os.close(fd)  # the fsync will fail with EBADF
    job.run()
    assert job.error is not None
    with pytest.raises(KafkaError):
        log.complete_flush(job)
    assert log.durable_offset == 0
    log.flush()  # retried in full, directory included
    assert log.durable_offset == 1
    log.close()


def test_group_commit_skips_only_the_active_segments_index_fsync(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=2000))
    for i in range(30):
        _append(log, 1, tag=i)
    job = log.begin_flush(1, with_indexes=False)
    assert job is not None
    active = log.active_segment
    assert active.index.path not in job.index_paths
    rolled = [s for s in log.segments if s is not active]
    assert rolled and all(s.index.path in job.index_paths for s in rolled)
    job.run()
    log.complete_flush(job)
    log.close()


# ------------------------------------------------------------------ listener (flush policy)
def test_flush_listener_replaces_the_inline_flush(tmp_path: Path) -> None:
    calls: list[Log] = []
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=2000, flush_messages=3))
    log.flush_listener = calls.append
    _append(log)
    _append(log)
    assert calls == [] and log.durable_offset == 0
    _append(log)  # flush.messages reached: the broker's flusher is asked, nothing inline
    assert calls == [log] and log.durable_offset == 0
    calls.clear()
    log.config = small_config(segment_bytes=2000)  # Kafka default: no flush policy
    log.flush()
    for i in range(30):
        _append(log, 1, tag=i)
    assert calls and len(calls) == len(log.segments) - 1  # one request per roll (Kafka)
    calls.clear()
    log.config = small_config(segment_bytes=2000, ack_fsync=True)
    _append(log)
    assert calls == [log]  # every append of a durable-ack topic
    log.close()


def test_without_a_listener_flush_messages_flushes_inline(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=2))
    _append(log)
    assert log.durable_offset == 0
    _append(log)
    assert log.durable_offset == 2
    log.close()


# ------------------------------------------------------------------ power loss
def test_power_loss_cuts_unflushed_data_and_files(tmp_path: Path, ledger: None) -> None:
    root = tmp_path / "data"
    d = root / "orders-0"
    log = Log.open(d, small_config(segment_bytes=1500))
    for i in range(5):
        _append(log, 1, tag=i)
    log.flush()
    durable_size = log.segments[0].size
    st = read_ledger(d)
    assert st.dir_durable and st.files is not None and "00000000000000000000.log" in st.files
    assert st.sizes["00000000000000000000.log"] == durable_size
    for i in range(5, 40):  # unflushed, spanning new segments
        _append(log, 1, tag=i)
    assert len(log.segments) > 2
    created_since = {n for n in os.listdir(d) if n[:20].isdigit() and n not in st.files}
    assert any(n.endswith(".log") for n in created_since)  # the rolled segments
    rep = simulate_power_loss(root)
    assert rep.truncated_files >= 1 and rep.truncated_bytes > 0  # the .log (+ its indexes)
    assert sorted(rep.deleted_files) == sorted(f"orders-0/{n}" for n in created_since)
    assert [p.name for p in segment_files(d)] == ["00000000000000000000.log"]
    assert (d / "00000000000000000000.log").stat().st_size == durable_size
    for s in log.segments:  # the "crashed" process's descriptors
        os.close(s.fd)
    again = Log.open(d, small_config(segment_bytes=1500), recovery_point=5)
    assert [v for _, v in verify_log(again)] == [
        f"{i}:0:".encode().ljust(20, b"x") for i in range(5)
    ]
    assert again.log_end_offset == 5
    again.close()


def test_power_loss_keeps_everything_fsynced(tmp_path: Path, ledger: None) -> None:
    root = tmp_path / "data"
    log = Log.open(root / "t-3", small_config(segment_bytes=1500))
    for i in range(40):
        _append(log, 1, tag=i)
        if i % 7 == 0:
            job = log.begin_flush(1, with_indexes=False)  # the group-commit path
            if job is not None:
                job.run()
                log.complete_flush(job)
    log.flush()
    rep = simulate_power_loss(root)
    assert rep.truncated_bytes == 0 and not rep.deleted_files and not rep.deleted_dirs
    log.close()
    again = Log.open(root / "t-3", small_config(segment_bytes=1500), recovery_point=40)
    assert again.log_end_offset == 40
    again.close()


def test_power_loss_removes_a_partition_never_fsynced(tmp_path: Path, ledger: None) -> None:
    root = tmp_path / "data"
    log = Log.open(root / "t-0", LogConfig())
    _append(log, 3)
    rep = simulate_power_loss(root)
    assert rep.deleted_dirs == ["t-0"] and not (root / "t-0").exists()
    for s in log.segments:
        os.close(s.fd)


def test_no_ledger_lines_without_the_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    log = Log.open(tmp_path / "t-0", LogConfig())
    _append(log)
    log.flush()
    assert not (tmp_path / "t-0" / LEDGER_NAME).exists()
    log.close()


# ------------------------------------------------------------------ the broker's flusher
def test_scheduler_interval() -> None:
    assert scheduler_interval_s(None) == 1.0
    assert scheduler_interval_s(2**63 - 1) == 1.0  # Kafka's default (Long.MAX_VALUE)
    assert scheduler_interval_s(250) == 0.25


def test_flusher_group_commit_and_flush_ms(tmp_path: Path) -> None:
    durable = Log.open(tmp_path / "d-0", LogConfig(ack_fsync=True))
    timed = Log.open(tmp_path / "f-0", LogConfig(flush_ms=0))
    plain = Log.open(tmp_path / "p-0", LogConfig())
    flushed: list[Log] = []

    async def main() -> None:
        fl = Flusher(
            logs=lambda: [durable, timed, plain],
            on_flushed=flushed.append,
            scheduler_interval_ms=20,
        )
        for lg in (durable, timed, plain):
            lg.flush_listener = fl.mark
        fl.start()
        try:
            ends = []
            for i in range(200):  # appends keep coming while fsyncs run
                ends.append(_append(durable, 1, tag=i) + 1)
                if i % 20 == 0:
                    await asyncio.sleep(0)
            await asyncio.wait_for(fl.wait_durable([(durable, ends[-1])]), 30)
            assert durable.durable_offset == 200
            # Group commit: far fewer fsync rounds than appends.
            assert 1 <= fl.rounds < 100, fl.rounds
            _append(timed, 2)
            _append(plain, 2)
            deadline = asyncio.get_running_loop().time() + 10
            while timed.durable_offset < 2:  # flush.ms=0: the scheduler's next tick
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            assert plain.durable_offset == 0  # Kafka's default: left to the OS
        finally:
            fl.stop()

    asyncio.run(main())
    assert durable in flushed and timed in flushed
    for lg in (durable, timed, plain):
        lg.close()


def test_a_topic_config_change_to_flush_ms_is_scheduled(tmp_path: Path) -> None:
    """The scheduler checks only logs whose config asks for it (flush.ms below Long.MAX,
    or odradek.ack.fsync); a log whose topic config changes to flush.ms=0 is watched
    again (the replica manager calls ``watch`` when it swaps the config) and flushed at
    the next tick."""
    lg = Log.open(tmp_path / "t-0", LogConfig(flush_ms=LONG_MAX))

    async def main() -> None:
        fl = Flusher(logs=lambda: [lg], on_flushed=lambda _lg: None, scheduler_interval_ms=10)
        lg.flush_listener = fl.mark
        fl.start()
        try:
            _append(lg, 2)
            loop = asyncio.get_running_loop()
            lg.config = LogConfig(flush_ms=0)
            fl.watch(lg)
            deadline = loop.time() + 10
            while lg.durable_offset < 2:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
        finally:
            fl.stop()

    asyncio.run(main())
    lg.close()


# ------------------------------------------------------------------ HW from the durable offset
def test_durable_leader_counts_its_fsynced_offset_in_the_hw(tmp_path: Path) -> None:
    """odradek.ack.fsync: HW = min over the ISR of *durable* LEOs (followers report durable
    fetch offsets; the leader uses its recovery point), so consumers see only fsynced data."""
    from odradek.storage.records import encode_batch

    d = tmp_path / "t-0"
    lg = Log.open(d, LogConfig(ack_fsync=True))
    marks: list[Log] = []
    lg.flush_listener = marks.append
    p = new_partition(d, broker=1, replicas=(1, 2), log=lg)
    lead(p, 1, [1, 2])
    info = p.append_as_leader(encode_batch([(None, b"a"), (None, b"b")]), -1, now_ms=1)
    assert marks == [lg]  # the append asked the flusher for an fsync
    p.update_follower_fetch_state(2, 2, now_ms=2)  # the follower has it durably
    assert p.high_watermark == 0 and not p.acks_all_satisfied(info.last_offset)
    job = lg.begin_flush(3, with_indexes=False)
    assert job is not None
    job.run()
    lg.complete_flush(job)
    assert p.on_log_flushed() and p.high_watermark == 2
    assert p.acks_all_satisfied(info.last_offset)
    lg.config = LogConfig()  # the topic config switched off at runtime: the LEO counts again
    p.append_as_leader(encode_batch([(None, b"c")]), -1, now_ms=4)
    p.update_follower_fetch_state(2, 3, now_ms=5)
    assert p.high_watermark == 3
    lg.close()


def test_flusher_writes_the_recovery_point_checkpoint_periodically(tmp_path: Path) -> None:
    """log.flush.offset.checkpoint.interval.ms: Kafka's recovery-point checkpoint."""
    from odradek.storage.checkpoint import read_checkpoint

    path = tmp_path / "recovery-point-offset-checkpoint"
    points = {("t", 0): 5}

    async def main() -> None:
        fl = Flusher(
            logs=lambda: [],
            on_flushed=lambda lg: None,
            recovery_points=lambda: dict(points),
            checkpoint_path=path,
            checkpoint_interval_ms=50,
        )
        fl.start()
        try:
            deadline = asyncio.get_running_loop().time() + 10
            while read_checkpoint(path) != {("t", 0): 5}:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
            points[("t", 0)] = 9
            while read_checkpoint(path) != {("t", 0): 9}:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
        finally:
            fl.stop()

    asyncio.run(main())
