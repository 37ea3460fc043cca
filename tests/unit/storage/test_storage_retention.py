"""Retention decision (REQ-R24): Kafka's deleteOldSegments predicates, pure."""

from __future__ import annotations

from odradek.storage.retention import (
    REASON_LOG_START,
    REASON_SIZE,
    REASON_TIME,
    SegmentSummary,
    segments_to_delete,
)


def segs(*specs: tuple[int, int, int]) -> list[SegmentSummary]:
    """(records, size, largest_ts) per segment, offsets contiguous from 0."""
    out, base = [], 0
    for n, size, ts in specs:
        out.append(SegmentSummary(base, base + n, size, ts))
        base += n
    return out


def decide(s: list[SegmentSummary], **kw: int) -> tuple[int, str | None]:
    args = dict(
        upper_bound=10**9, now_ms=1_000_000, retention_ms=-1, retention_bytes=-1, log_start_offset=0
    )
    args.update(kw)
    d = segments_to_delete(s, **args)
    return d.count, d.reason


def test_unlimited_deletes_nothing() -> None:
    assert decide(segs((10, 100, 0), (10, 100, 0), (10, 100, 0))) == (0, None)


def test_time_uses_largest_timestamp_and_stops_at_first_young_segment() -> None:
    s = segs((10, 100, 1000), (10, 100, 999_000), (10, 100, 2000), (10, 100, 3000))
    # Segment 1 is young, so segment 2 stays too even though it is old (prefix only).
    assert decide(s, retention_ms=10_000) == (1, REASON_TIME)
    assert decide(s, retention_ms=1_000_000) == (0, None)


def test_time_never_deletes_active_segment() -> None:
    s = segs((10, 100, 0), (10, 100, 0), (10, 100, 0))
    assert decide(s, retention_ms=0) == (2, REASON_TIME)


def test_size_keeps_at_least_retention_bytes() -> None:
    s = segs((10, 100, 0), (10, 100, 0), (10, 100, 0), (10, 50, 0))  # 350 B
    assert decide(s, retention_bytes=250) == (1, REASON_SIZE)  # 250 left
    assert decide(s, retention_bytes=249) == (1, REASON_SIZE)  # deleting 2 leaves 150
    assert decide(s, retention_bytes=150) == (2, REASON_SIZE)
    assert decide(s, retention_bytes=0) == (3, REASON_SIZE)  # never the active one
    assert decide(s, retention_bytes=350) == (0, None)


def test_upper_bound_protects_segments_with_unreplicated_data() -> None:
    s = segs((10, 100, 0), (10, 100, 0), (10, 100, 0))  # bases 0, 10, 20
    assert decide(s, retention_ms=0, upper_bound=9) == (0, None)
    assert decide(s, retention_ms=0, upper_bound=10) == (1, REASON_TIME)
    assert decide(s, retention_ms=0, upper_bound=19) == (1, REASON_TIME)
    assert decide(s, retention_ms=0, upper_bound=20) == (2, REASON_TIME)


def test_segments_below_log_start_offset_are_deleted() -> None:
    s = segs((10, 100, 0), (10, 100, 0), (10, 100, 0))
    assert decide(s, log_start_offset=5) == (0, None)  # still holds 5..9
    assert decide(s, log_start_offset=10) == (1, REASON_LOG_START)
    assert decide(s, log_start_offset=25) == (2, REASON_LOG_START)
    assert decide(s, log_start_offset=25, upper_bound=15) == (1, REASON_LOG_START)


def test_union_is_the_longest_prefix() -> None:
    s = segs((10, 100, 0), (10, 100, 999_999), (10, 100, 999_999), (10, 100, 999_999))
    count, reason = decide(s, retention_ms=10_000, retention_bytes=150)
    assert (count, reason) == (2, REASON_SIZE)
    d = segments_to_delete(
        s,
        upper_bound=100,
        now_ms=1_000_000,
        retention_ms=10_000,
        retention_bytes=150,
        log_start_offset=0,
    )
    assert d.bytes == 200 and "retention.bytes" in d.detail


def test_single_or_no_segment() -> None:
    assert decide(segs((10, 100, 0)), retention_ms=0, retention_bytes=0) == (0, None)
    assert decide([], retention_ms=0) == (0, None)


# ------------------------------------------------------------------ applied to a Log
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from _storage_helpers import batch, segment_files, small_config, verify_log  # noqa: E402

from odradek.errors import ErrorCode, KafkaError  # noqa: E402
from odradek.storage.log import Log  # noqa: E402


def _filled(d: Path, n_batches: int = 12, **cfg: int) -> Log:
    lg = Log.open(d, small_config(segment_bytes=1024, **cfg))
    for i in range(n_batches):
        lg.append_as_leader(batch(5, value_size=40, ts=1_000 + i, tag=i), 0, 1_000 + i)
    assert len(lg.segments) >= 4
    return lg


def test_time_retention_deletes_asynchronously(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _filled(d, retention_ms=100, file_delete_delay_ms=50)
    nseg = len(lg.segments)
    old_fd = lg.segments[0].fd
    dec = lg.delete_old_segments(upper_bound=lg.log_end_offset, now_ms=10_000)
    assert dec.count == nseg - 1 and dec.reason == REASON_TIME
    assert len(lg.segments) == 1
    assert lg.log_start_offset == lg.segments[0].base_offset
    # Renamed, still open (a queued FileSlice may still send from it), then unlinked.
    assert len(list(d.glob("*.log.deleted"))) == nseg - 1
    os.fstat(old_fd)
    assert lg.run_pending_deletions(10_000) == 0
    assert lg.run_pending_deletions(10_050) == nseg - 1
    assert not list(d.glob("*.deleted"))
    with pytest.raises(OSError):
        os.fstat(old_fd)
    with pytest.raises(KafkaError) as e:
        lg.read(0, 1 << 20)
    assert e.value.code == ErrorCode.offset_out_of_range
    verify_log(lg)
    lg.close()


def test_upper_bound_and_reopen_after_crash(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _filled(d, retention_bytes=0)
    second_base = lg.segments[1].base_offset
    lg.delete_old_segments(upper_bound=second_base, now_ms=10_000)  # HW inside segment 2
    assert lg.log_start_offset == second_base and len(segment_files(d)) == len(lg.segments)
    # Crash before the delayed unlink: .deleted files are discarded on open.
    assert list(d.glob("*.deleted"))
    lso, leo = lg.log_start_offset, lg.log_end_offset
    lg2 = Log.open(d, small_config(segment_bytes=1024), log_start_offset=lso)
    assert not list(d.glob("*.deleted"))
    assert (lg2.log_start_offset, lg2.log_end_offset) == (lso, leo)
    verify_log(lg2)
    lg2.close()


def test_log_start_offset_inside_a_segment(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    lg = _filled(d)
    target = lg.segments[2].base_offset + 1
    assert lg.maybe_increment_log_start_offset(target, "test")
    assert not lg.maybe_increment_log_start_offset(target - 1, "test")  # never backwards
    with pytest.raises(KafkaError):
        lg.maybe_increment_log_start_offset(lg.log_end_offset + 1, "test")
    dec = lg.delete_old_segments(upper_bound=lg.log_end_offset, now_ms=10_000)
    assert dec.count == 2 and dec.reason == REASON_LOG_START
    assert lg.log_start_offset == target  # not moved back to the segment base
    assert lg.read(target, 100) is not None
    lg.close()  # close forces the pending unlinks
    assert not list(d.glob("*.deleted"))


def test_compact_policy_ignores_time_and_size(tmp_path: Path) -> None:
    lg = _filled(tmp_path / "t-0", retention_ms=0, retention_bytes=0)
    lg.config.cleanup_policy = ("compact",)
    assert lg.delete_old_segments(lg.log_end_offset, 10**12).count == 0
    lg.config.cleanup_policy = ("compact", "delete")
    assert lg.delete_old_segments(lg.log_end_offset, 10**12).count > 0
    lg.close()


# ------------------------------------------------------------------ replicated log start
from odradek.replication.partition import Partition  # noqa: E402
from odradek.storage.log import LogConfig  # noqa: E402
from odradek.storage.records import encode_batch  # noqa: E402
from support.partitions import follow, lead, new_partition  # noqa: E402


def _partition(tmp_path: Path, broker: int, **cfg: object) -> Partition:
    return new_partition(
        tmp_path / f"t-0-{broker}", broker=broker, replicas=(1, 2), config=LogConfig(**cfg)
    )  # type: ignore[arg-type]


def _records(n: int, base: int = 0) -> bytes:
    buf = bytearray(encode_batch([(None, b"v%d" % i) for i in range(n)]))
    buf[0:8] = base.to_bytes(8, "big")  # baseOffset is outside the CRC
    return bytes(buf)


def test_delete_records_low_watermark_and_follower(tmp_path: Path) -> None:
    leader, follower = _partition(tmp_path, 1), _partition(tmp_path, 2)
    lead(leader, 1, [1, 2])
    follow(follower, 1, 1, [1, 2])
    for _ in range(3):
        leader.append_as_leader(_records(10), 1, now_ms=1)
    follower.append_as_follower(leader.log.read(0, 1 << 20).read_bytes(), 0, 1)
    leader.update_follower_fetch_state(2, 30, now_ms=2, log_start_offset=0)
    assert leader.high_watermark == 30

    with pytest.raises(KafkaError) as e:
        leader.delete_records_to(31)  # past the HW
    assert e.value.code == ErrorCode.offset_out_of_range
    assert leader.delete_records_to(15) == 15
    assert leader.log.log_start_offset == 15 and leader.low_watermark() == 0
    # The follower follows the leader's log start (bounded by its own HW) ...
    follower.append_as_follower(b"", leader_hw=30, now_ms=3, leader_log_start=15)
    assert follower.log.log_start_offset == 15
    # ... and reports it in its next fetch: the low watermark reaches 15.
    leader.update_follower_fetch_state(2, 30, now_ms=4, log_start_offset=15)
    assert leader.low_watermark() == 15
    assert leader.delete_records_to(-1) == 30  # -1 = the HW
    assert leader.delete_records_to(5) == 30  # never backwards
    follow(follower, 1, 1, [1, 2])
    with pytest.raises(KafkaError) as e:
        follower.delete_records_to(5)
    assert e.value.code == ErrorCode.not_leader_or_follower


def test_delete_records_refused_on_compacted_topic(tmp_path: Path) -> None:
    p = _partition(tmp_path, 1, cleanup_policy=("compact",))
    lead(p, 1, [1])
    with pytest.raises(KafkaError) as e:
        p.delete_records_to(0)
    assert e.value.code == ErrorCode.policy_violation


def test_follower_restarts_inside_the_first_batch(tmp_path: Path) -> None:
    """The leader's log start (DeleteRecords) fell inside a batch: an empty follower log
    starting there accepts the batch by restarting at its base (Kafka's
    UnexpectedAppendOffsetException handling), then moves its log start up again."""
    f = _partition(tmp_path, 2)
    follow(f, 1, 1, [1, 2])
    f.truncate_fully_and_start_at(15)  # what an OFFSET_OUT_OF_RANGE fetch leads to
    assert (f.log.log_start_offset, f.log.log_end_offset) == (15, 15)
    f.append_as_follower(_records(10, base=10), leader_hw=20, now_ms=1, leader_log_start=15)
    assert (f.log.log_start_offset, f.log.log_end_offset, f.high_watermark) == (15, 20, 20)
