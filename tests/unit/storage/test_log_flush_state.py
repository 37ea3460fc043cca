"""FlushState on its own: a log's recovery point and what its next flush must fsync
(REQ-R18), and PendingDeletions: segments waiting for file.delete.delay.ms (REQ-R24)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.durability import FlushJob
from odradek.storage.log_flush import FlushState
from odradek.storage.pending_deletions import PendingDeletions
from odradek.storage.segment import Segment


def test_flush_ms_is_due_only_with_unflushed_data() -> None:
    st = FlushState(recovery_point=0)
    assert not st.due(10_000, 1000)  # nothing appended
    st.appended(3, now_ms=100)
    st.appended(2, now_ms=900)  # the first unflushed append's time counts
    assert st.unflushed_messages == 5 and st.last_flush_ms == 100
    assert not st.due(1099, 1000) and st.due(1100, 1000)
    assert not st.due(10_000, None)  # flush.ms unset


def test_unchanged_means_durable_to_the_leo_with_no_file_or_truncation_since() -> None:
    st = FlushState(recovery_point=5)
    assert st.unchanged(5) and not st.unchanged(6)
    st.files_changed()
    assert st.dir_dirty and not st.unchanged(5)
    st = FlushState(recovery_point=5)
    st.truncated(3)
    assert st.recovery_point == 3 and not st.unchanged(3)  # a newer generation


def test_a_flush_begun_before_a_truncation_does_not_move_the_recovery_point(
    tmp_path: Path,
) -> None:
    st = FlushState(recovery_point=0)
    stale = FlushJob(tmp_path, target=10, generation=st.generation, covers_active=True)
    st.truncated(4)
    st.complete(stale, log_end_offset=10)
    assert st.recovery_point == 4
    job = FlushJob(tmp_path, target=10, generation=st.generation, covers_active=True)
    st.complete(job, log_end_offset=8)  # never past the LEO now
    assert st.recovery_point == 8 and st.durable_generation == st.generation
    assert st.unchanged(8)


def test_a_failed_flush_keeps_its_directory_fsyncs_for_the_next_one(tmp_path: Path) -> None:
    st = FlushState(recovery_point=0)
    job = FlushJob(tmp_path, target=3, generation=0, fsync_dir=True, fsync_parent=True)
    job.error = OSError("EIO")
    with pytest.raises(KafkaError) as e:
        st.complete(job, log_end_offset=3)
    assert e.value.code == ErrorCode.kafka_storage_error
    assert st.dir_dirty and st.dir_changed and st.parent_dirty and st.recovery_point == 0


def test_begin_captures_the_active_segment_and_the_directory_once(tmp_path: Path) -> None:
    seg = Segment(tmp_path, 0, 4096)
    try:
        st = FlushState(recovery_point=0)
        st.appended(1, now_ms=5)
        st.files_changed()
        st.parent_dirty = True
        job = st.begin(tmp_path, [seg], 0, now_ms=7, with_indexes=True)
        assert job is not None
        job.close()
        assert job.covers_active and job.fsync_dir and job.fsync_parent
        assert [name for _, name, _ in job.files] == [seg.log_path.name]
        assert (st.unflushed_messages, st.last_flush_ms) == (0, 7)
        assert not st.dir_dirty and not st.dir_changed and not st.parent_dirty
        # Group commit with nothing past the recovery point and no directory change.
        assert st.begin(tmp_path, [seg], 0, now_ms=8, with_indexes=False) is None
    finally:
        seg.close()


def test_pending_deletions_rename_now_and_unlink_after_the_delay(tmp_path: Path) -> None:
    a, b = Segment(tmp_path, 0, 4096), Segment(tmp_path, 10, 4096)
    pending = PendingDeletions()
    pending.schedule(a, delay_ms=100, now_ms=1000)
    pending.schedule(b, delay_ms=-5, now_ms=1050)  # a negative delay counts as 0
    assert len(pending) == 2
    assert a.log_path.name.endswith(".deleted") and a.log_path.exists()
    assert pending.run(now_ms=1049) == 0
    assert pending.run(now_ms=1050) == 1 and not b.log_path.exists() and a.log_path.exists()
    assert pending.run(now_ms=1099) == 0 and len(pending) == 1
    assert pending.run(now_ms=0, force=True) == 1 and not a.log_path.exists()
    assert len(pending) == 0 and pending.run(force=True) == 0
