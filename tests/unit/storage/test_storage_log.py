"""storage.log: appends, reads, rolling, timestamps, truncation (REQ-R18, R23, R26, R27)."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest
from _storage_helpers import batch, read_all, segment_files, small_config, verify_log

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.batch import parse_batches
from odradek.storage.log import FileSlice, Log, LogConfig
from odradek.storage.records import decode_batch_records, encode_batch


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


def test_round_trip_and_contiguous_offsets(logdir: Path) -> None:
    log = Log.open(logdir, LogConfig())
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert (logdir / "00000000000000000000.log").exists()
    firsts = []
    for i in range(100):
        n = 1 + i % 4
        info = log.append_as_leader(
            batch(n, tag=i) + batch(2, tag=1000 + i), leader_epoch=3, now_ms=1
        )
        assert info.num_batches == 2 and info.last_offset == info.first_offset + n + 1
        firsts.append(info.first_offset)
    assert firsts[0] == 0 and all(b > a for a, b in itertools.pairwise(firsts))
    values = verify_log(log)
    assert len(values) == log.log_end_offset
    b0 = read_all(log)[0]
    (h,) = parse_batches(b0)
    assert h.partition_leader_epoch == 3 and h.base_offset == 0
    log.close()


def test_append_is_one_segment_and_rejects_bad_input(logdir: Path) -> None:
    log = Log.open(logdir, small_config(max_message_bytes=500))
    with pytest.raises(KafkaError) as ei:
        log.append_as_leader(batch(1, value_size=600), 0, 1)
    assert ei.value.code == ErrorCode.message_too_large
    bad = bytearray(batch(1))
    bad[-1] ^= 0xFF
    with pytest.raises(KafkaError) as ei:
        log.append_as_leader(bytes(bad), 0, 1)
    assert ei.value.code == ErrorCode.corrupt_message
    with pytest.raises(KafkaError) as ei:
        log.append_as_leader(b"", 0, 1)
    assert ei.value.code == ErrorCode.invalid_record
    with pytest.raises(KafkaError) as ei:  # whole request larger than a segment
        log.append_as_leader(batch(1, value_size=400) * 12, 0, 1)
    assert ei.value.code == ErrorCode.record_list_too_large
    assert log.log_end_offset == 0 and log.active_segment.size == 0  # nothing written
    log.close()


def test_roll_by_size_keeps_request_in_one_segment(logdir: Path) -> None:
    log = Log.open(logdir, small_config(segment_bytes=1000))
    for i in range(30):
        log.append_as_leader(batch(1, value_size=100, tag=i) * 2, 0, 1)
    assert len(log.segments) > 5
    for seg in log.segments:
        # each request has two offsets: requests are never split across segments
        assert seg.size <= 1000 and seg.base_offset % 2 == 0 and seg.next_offset % 2 == 0
        assert seg.base_offset == seg.header_at(0).base_offset
    assert [p.name for p in segment_files(logdir)] == [
        f"{s.base_offset:020d}.log" for s in log.segments
    ]
    assert len(verify_log(log)) == 60
    log.close()


def test_roll_by_time(logdir: Path) -> None:
    log = Log.open(logdir, small_config(segment_bytes=1 << 20, segment_ms=1000))
    log.append_as_leader(batch(1), 0, now_ms=10_000)
    log.append_as_leader(batch(1), 0, now_ms=10_900)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1), 0, now_ms=11_001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_read_across_segment_boundary_and_bounds(logdir: Path) -> None:
    log = Log.open(logdir, small_config(segment_bytes=1200))
    sizes = []
    for i in range(40):
        sizes.append(log.append_as_leader(batch(2, tag=i), 0, 1).size_bytes)
    assert len(log.segments) > 3
    seg0 = log.segments[0]
    # A read starting at the end of a segment continues in the next one.
    s = log.read(seg0.next_offset, 1 << 20)
    assert s is not None and s.fd == log.segments[1].fd and s.position == 0
    # A read never spans two segments.
    s = log.read(0, 1 << 20)
    assert s is not None and s.size == seg0.size
    # An offset inside a batch returns the whole batch containing it.
    s = log.read(5, 1)
    (h,) = parse_batches(s.read_bytes())
    assert h.base_offset == 4
    # max_bytes limits to whole batches; min_one_batch returns one oversized batch.
    s = log.read(0, sizes[0] * 3 + 10)
    assert s.size == sizes[0] * 3
    assert log.read(0, 10, min_one_batch=False) is None
    assert log.read(0, 10).size == sizes[0]
    # max_offset (the HW): only batches with last_offset < max_offset.
    s = log.read(0, 1 << 20, max_offset=6)
    assert [h.base_offset for h in parse_batches(s.read_bytes())] == [0, 2, 4]
    assert log.read(4, 1 << 20, max_offset=5) is None  # batch 4-5 straddles the HW
    assert log.read(6, 1 << 20, max_offset=6) is None
    assert log.read(log.log_end_offset, 100) is None
    for bad in (-1, log.log_end_offset + 1):
        with pytest.raises(KafkaError) as ei:
            log.read(bad, 100)
        assert ei.value.code == ErrorCode.offset_out_of_range
    log.close()


def test_reads_against_reference_every_offset_and_size(logdir: Path) -> None:
    """Sparse-index + dense-tail lookups agree with a brute-force model everywhere."""
    cfg = small_config(segment_bytes=3000, index_interval_bytes=100)
    log = Log.open(logdir, cfg)
    import random

    rng = random.Random(7)
    model: list[tuple[int, int, int]] = []  # (base, last, size) in append order
    for i in range(120):
        reqs = [
            batch(rng.randint(1, 4), value_size=rng.randint(1, 120), tag=i)
            for _ in range(rng.randint(1, 3))
        ]
        info = log.append_as_leader(b"".join(reqs), 0, 1)
        off = info.first_offset
        for r in reqs:
            (h,) = parse_batches(r)
            model.append((off, off + h.last_offset_delta, h.size))
            off += h.records_count
        if i == 60:  # reopen mid-way: active segment falls back to sparse lookups
            log.close()
            log = Log.open(logdir, cfg, recovery_point=log.log_end_offset)
    for target in range(0, log.log_end_offset):
        for max_bytes in (1, 150, 700):
            s = log.read(target, max_bytes)
            hs = parse_batches(s.read_bytes())
            assert hs[0].base_offset <= target <= hs[0].last_offset
            assert len(hs) == 1 or s.size <= max_bytes
            idx = next(k for k, m in enumerate(model) if m[1] >= target)
            # as many whole batches as fit, within the same segment
            seg = log.segments[log._segment_for(target)]
            expect, total = 0, 0
            for _base, last, size in model[idx:]:
                if last >= seg.next_offset or (expect and total + size > max_bytes):
                    break
                expect, total = expect + 1, total + size
            assert len(hs) == expect, (target, max_bytes)
    log.close()


def test_log_append_time(logdir: Path) -> None:
    log = Log.open(logdir, small_config(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(batch(3, ts=5), 0, now_ms=777)
    assert info.log_append_time == 777 and info.max_timestamp == 777
    (h,) = parse_batches(read_all(log)[0])  # CRC recomputed and valid
    assert h.timestamp_type == 1 and h.max_timestamp == 777
    assert [r.timestamp for r in decode_batch_records(read_all(log)[0])] == [777] * 3
    log.close()


def test_offset_for_timestamp(logdir: Path) -> None:
    log = Log.open(logdir, small_config(segment_bytes=1500, index_interval_bytes=64))
    for i in range(50):
        recs = [(b"k", b"v" * 20)] * 2
        log.append_as_leader(encode_batch(recs, timestamps=[1000 + 10 * i, 1005 + 10 * i]), 0, 1)
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1005) == (1, 1005)  # exact record inside the batch
    assert log.offset_for_timestamp(1006) == (2, 1010)
    assert log.offset_for_timestamp(1000 + 10 * 37 + 3) == (75, 1375)
    assert log.offset_for_timestamp(1495) == (99, 1495)
    assert log.offset_for_timestamp(1496) is None
    log.close()
    log = Log.open(
        logdir, small_config(segment_bytes=1500, index_interval_bytes=64), recovery_point=100
    )
    assert log.offset_for_timestamp(1006) == (2, 1010)
    log.close()


def test_truncate_within_and_across_segments(logdir: Path) -> None:
    cfg = small_config(segment_bytes=1000, index_interval_bytes=100)
    log = Log.open(logdir, cfg)
    for i in range(40):
        log.append_as_leader(batch(2, tag=i), 0, 1)
    nseg = len(log.segments)
    log.truncate_to(61)  # inside batch 60-61: that whole batch goes (Kafka semantics)
    assert log.log_end_offset == 60
    verify_log(log)
    log.truncate_to(log.segments[2].base_offset)  # exactly a segment start
    assert len(log.segments) == 2 and log.log_end_offset == log.segments[1].next_offset
    leo = log.log_end_offset
    info = log.append_as_leader(batch(2, tag=99), 0, 1)
    assert info.first_offset == leo
    vals = verify_log(log)
    assert vals[-1][1].startswith(b"99:1:")
    assert len(log.segments) < nseg
    log.close()
    log = Log.open(logdir, cfg, recovery_point=0)  # indexes rewritten consistently
    assert verify_log(log) == vals
    log.truncate_to(0)
    assert log.log_end_offset == 0 and len(log.segments) == 1
    log.close()


def test_reopen_after_clean_close(logdir: Path) -> None:
    cfg = small_config(segment_bytes=2000)
    log = Log.open(logdir, cfg)
    for i in range(50):
        log.append_as_leader(batch(3, tag=i), 0, 1)
    before = verify_log(log)
    leo = log.log_end_offset
    log.close()
    assert log.recovery_point == leo
    log = Log.open(logdir, cfg, recovery_point=leo)
    assert log.log_end_offset == leo and verify_log(log) == before
    info = log.append_as_leader(batch(1, tag=51), 0, 1)
    assert info.first_offset == leo
    log.close()
    assert all(p.stat().st_size % 8 == 0 for p in segment_files(logdir, ".index"))
    assert any(p.stat().st_size > 0 for p in segment_files(logdir, ".index"))


def test_log_start_offset_and_empty_dir(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-1", LogConfig(), log_start_offset=500)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert log.append_as_leader(batch(1), 0, 1).first_offset == 500
    with pytest.raises(KafkaError):
        log.read(499, 100)
    log.close()


def test_follower_append_keeps_offsets_and_gaps(logdir: Path) -> None:
    log = Log.open(logdir, small_config())
    b1 = encode_batch([(b"a", b"1")] * 2, base_offset=0, partition_leader_epoch=4)
    b2 = encode_batch([(b"b", b"2")], base_offset=2, partition_leader_epoch=4)
    b3 = encode_batch([(b"c", b"3")], base_offset=10, partition_leader_epoch=5)
    info = log.append_as_follower(b1 + b2 + b3)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (0, 10, 11)
    assert [s.base_offset for s in log.segments] == [0]  # gaps are legal in a segment (R25)
    with pytest.raises(KafkaError):
        log.append_as_follower(encode_batch([(b"x", b"y")], base_offset=3))
    assert parse_batches(log.read(10, 100).read_bytes())[0].partition_leader_epoch == 5
    assert parse_batches(log.read(3, 100).read_bytes())[0].base_offset == 10  # gap skipped
    log.close()
    log = Log.open(logdir, small_config())  # full recovery accepts the gap
    assert log.log_end_offset == 11
    log.close()


def test_flush_messages_and_flush_ms(logdir: Path) -> None:
    log = Log.open(logdir, small_config(flush_messages=5, flush_ms=100))
    log.append_as_leader(batch(3), 0, 1)
    assert log.recovery_point == 0
    log.append_as_leader(batch(3), 0, 2)
    assert log.recovery_point == 6
    log.append_as_leader(batch(1), 0, 50)
    assert not log.flush_due(100) and log.flush_due(200)
    log.flush(200)
    assert log.recovery_point == 7 and not log.flush_due(1000)
    log.close()


def test_file_slice_read_bytes(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    fd = os.open(p, os.O_RDONLY)
    try:
        assert FileSlice(fd, 2, 5).read_bytes() == b"23456"
    finally:
        os.close(fd)


def test_delete(logdir: Path) -> None:
    log = Log.open(logdir, small_config())
    log.append_as_leader(batch(1), 0, 1)
    log.delete()
    assert not logdir.exists()


def test_throughput_sanity(logdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not a timed assertion: prints append/read rates for the record."""
    log = Log.open(logdir, LogConfig(segment_bytes=64 << 20))
    payload = b"".join(batch(10, value_size=100, tag=i) for i in range(16))  # ~16 KB request
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        log.append_as_leader(payload, 0, 1)
    t1 = time.perf_counter()
    off, reads = 0, 0
    while (s := log.read(off, 1 << 20)) is not None:
        data = s.read_bytes()
        off = parse_batches(data, verify_crc=False)[-1].next_offset
        reads += 1
    t2 = time.perf_counter()
    mb = n * len(payload) / 1e6
    with capsys.disabled():
        print(
            f"\n[storage] append {mb / (t1 - t0):.0f} MB/s ({n / (t1 - t0):.0f} req/s, 16 batches each); "
            f"read {mb / (t2 - t1):.0f} MB/s in {reads} slices"
        )
    assert off == log.log_end_offset
    log.close()
