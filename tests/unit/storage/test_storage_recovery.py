"""Crash recovery of storage.log (REQ-R18, R23): nothing valid lost, nothing corrupt served."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _storage_helpers import batch, segment_files, small_config, verify_log

from odradek.runtime import disk
from odradek.storage.batch import parse_batches
from odradek.storage.log import Log, LogConfig

CFG = small_config(segment_bytes=2000, index_interval_bytes=128)


def crash(log: Log) -> None:
    """Drop the log like kill -9 would: no index writes, no fsync, just lose the fds."""
    for seg in log.segments:
        os.close(seg.fd)
        seg.closed = True


def fill(d: Path, n: int = 40, cfg: LogConfig = CFG) -> tuple[Log, list[tuple[int, bytes]]]:
    log = Log.open(d, cfg)
    for i in range(n):
        log.append_as_leader(batch(1 + i % 3, tag=i), 0, 1)
    return log, verify_log(log)


def test_torn_tail_is_truncated(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, values = fill(d)
    last = log.segments[-1]
    last_batch_pos = max(p for p in [0] + [h.position for h in last.iter_headers(0, last.size)])
    crash(log)
    path = segment_files(d)[-1]
    with open(path, "r+b") as f:
        f.truncate(last_batch_pos + 30)  # mid-batch
    log = Log.open(d, CFG, recovery_point=0)
    got = verify_log(log)
    assert got == values[: len(got)] and len(got) < len(values)
    assert log.active_segment.size == last_batch_pos
    assert log.recovery_point == log.log_end_offset
    # appending continues at the recovered LEO
    assert log.append_as_leader(batch(1), 0, 1).first_offset == len(got)
    log.close()


@pytest.mark.parametrize("garbage", [b"\x00" * 100, b"\xff" * 7, os.urandom(5000)])
def test_garbage_appended_is_removed(tmp_path: Path, garbage: bytes) -> None:
    d = tmp_path / "t-0"
    log, values = fill(d)
    crash(log)
    with open(segment_files(d)[-1], "ab") as f:
        f.write(garbage)
    log = Log.open(d, CFG, recovery_point=0)
    assert verify_log(log) == values
    log.close()


def test_bit_flip_in_last_batch(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, values = fill(d)
    crash(log)
    path = segment_files(d)[-1]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(data)
    log = Log.open(d, CFG, recovery_point=0)
    got = verify_log(log)
    assert got == values[: len(got)] and 0 < len(values) - len(got) <= 3
    log.close()


def test_base_offset_flip_outside_crc_detected(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, values = fill(d)
    seg = log.segments[-1]
    hs = list(seg.iter_headers(0, seg.size))
    crash(log)
    path = segment_files(d)[-1]
    data = bytearray(path.read_bytes())
    # baseOffset is not covered by the CRC. Flip its lowest set bit: the offset goes
    # backwards, which recovery must catch (upward gaps are legal since compaction).
    b = hs[1].base_offset
    assert b > 0
    low = b & -b
    data[hs[1].position : hs[1].position + 8] = (b ^ low).to_bytes(8, "big")
    path.write_bytes(data)
    log = Log.open(d, CFG, recovery_point=0)
    assert log.log_end_offset == hs[1].base_offset
    assert verify_log(log) == values[: hs[1].base_offset]
    log.close()


def test_offset_gap_inside_segment_is_accepted(tmp_path: Path) -> None:
    """A cleaned segment keeps original offsets with gaps (REQ-R25): recovery, the header
    walk of a trusted load and index rebuilds all accept increasing gaps."""
    d = tmp_path / "t-0"
    d.mkdir()
    from odradek.storage.records import encode_batch

    data = b"".join(
        encode_batch([(b"k%d" % i, b"v")], base_offset=o, timestamp_ms=1000 + i)
        for i, o in enumerate([3, 4, 10, 25, 26])
    )
    (d / f"{0:020d}.log").write_bytes(data)
    for rp in (0, 27):  # full recovery scan, then a trusted load with rebuilt indexes
        log = Log.open(d, CFG, recovery_point=rp)
        assert log.log_end_offset == 27
        assert [h.base_offset for h in parse_batches(log.read(0, 1 << 20).read_bytes())] == [
            3,
            4,
            10,
            25,
            26,
        ]
        assert parse_batches(log.read(11, 1 << 20).read_bytes())[0].base_offset == 25  # next batch
        log.close()
        for p in d.glob("*index"):
            p.unlink()


def test_corruption_in_middle_segment_drops_later_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, values = fill(d, 80)
    assert len(log.segments) >= 4
    seg1 = log.segments[1]
    crash(log)
    path = segment_files(d)[1]
    path.write_bytes(os.urandom(200) + path.read_bytes()[200:])  # no valid data at the start
    log = Log.open(d, CFG, recovery_point=0)
    assert len(log.segments) == 2 and log.log_end_offset == seg1.base_offset
    assert verify_log(log) == values[: seg1.base_offset]
    assert len(segment_files(d)) == 2 and len(segment_files(d, ".index")) <= 2
    log.close()


def test_indexes_deleted_or_corrupt_are_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, values = fill(d, 80)
    leo = log.log_end_offset
    log.close()
    idx = segment_files(d, ".index")
    tidx = segment_files(d, ".timeindex")
    assert len(idx) > 3 and any(p.stat().st_size for p in idx)
    idx[0].unlink()
    tidx[1].unlink()
    idx[2].write_bytes(b"\x00\x00\x00\x01\x7f\xff\xff\xff")  # position past the file end
    idx[3].write_bytes(b"\x01\x02\x03")  # not a multiple of 8
    (d / "00000000000000000099.log.deleted").write_bytes(b"x")
    (d / "00000000000000000000.log.cleaned").write_bytes(b"x")
    (d / "00000000000000000000.index.swap").write_bytes(b"x")
    (d / "00000000000000099999.index").write_bytes(b"orphan")
    log = Log.open(d, CFG, recovery_point=leo)  # trusted segments: indexes sanity-checked
    assert verify_log(log) == values
    for t in (0, 17, leo - 1):
        s = log.read(t, 1)
        (h,) = parse_batches(s.read_bytes())
        assert h.base_offset <= t <= h.last_offset
    assert log.offset_for_timestamp(0) == (0, 1000)
    names = {p.name for p in d.iterdir()}
    assert not any(n.endswith((".deleted", ".cleaned", ".swap")) for n in names)
    assert "00000000000000099999.index" not in names
    log.close()
    assert all(p.stat().st_size % 8 == 0 for p in segment_files(d, ".index"))


def test_stale_index_of_unflushed_tail_is_not_trusted(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log, values = fill(d, 10, small_config(segment_bytes=1 << 20, index_interval_bytes=64))
    log.close()  # index covers the whole file
    path = segment_files(d)[0]
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)  # data lost, index now points past the end
    log = Log.open(
        d, small_config(segment_bytes=1 << 20, index_interval_bytes=64), recovery_point=0
    )
    got = verify_log(log)
    assert got == values[: len(got)]
    for t in range(log.log_end_offset):
        assert log.read(t, 1) is not None
    log.close()


@pytest.mark.parametrize("seed", range(12))
def test_randomized_crash_at_any_byte(tmp_path: Path, seed: int) -> None:
    """Kill at a random byte of the write stream; recovery yields a valid prefix."""
    rng = random.Random(seed)
    cfg = small_config(
        segment_bytes=rng.choice([2400, 3000, 6000]),
        index_interval_bytes=rng.choice([1, 100, 4096]),
    )
    full = tmp_path / "full"
    log = Log.open(full, cfg)
    writes: list[tuple[int, int, int, int]] = []  # (segment base, start, end, leo after)
    for i in range(rng.randint(5, 60)):
        req = b"".join(
            batch(rng.randint(1, 4), value_size=rng.randint(0, 150), tag=i, ts=1000 + i)
            for _ in range(rng.randint(1, 3))
        )
        before = (
            log.active_segment.size
            if log.active_segment.size + len(req) <= cfg.segment_bytes
            else 0
        )
        log.append_as_leader(req, 0, 1)
        seg = log.active_segment
        assert seg.size - len(req) == before
        writes.append((seg.base_offset, before, seg.size, log.log_end_offset))
    values = verify_log(log)
    log.close()
    total = sum(e - s for _, s, e, _ in writes)
    cut = rng.randint(0, total)
    # A flushed prefix: recovery point at the end of some complete write before the cut.
    done, complete_leo, flushed = 0, 0, [0]
    crash_dir = tmp_path / "crash"
    crash_dir.mkdir()
    for base, s, e, leo_after in writes:
        name = f"{base:020d}"
        src = (full / f"{name}.log").read_bytes()
        dst = crash_dir / f"{name}.log"
        if done > cut:
            break
        n = min(e - s, cut - done)
        with open(dst, "ab") as f:
            f.write(src[s : s + n])
        # stale/oversized index files from the final run, as a crash can leave them
        for suf in (".index", ".timeindex"):
            if (full / f"{name}{suf}").exists():
                shutil.copy(full / f"{name}{suf}", crash_dir / f"{name}{suf}")
        done += e - s
        if n == e - s:
            complete_leo = leo_after
            flushed.append(leo_after)
    recovery_point = rng.choice(flushed)
    log = Log.open(crash_dir, cfg, recovery_point=recovery_point)
    got = verify_log(log)
    assert got == values[: len(got)]
    assert len(got) >= complete_leo and len(got) >= recovery_point
    for seg in log.segments:
        for h in seg.iter_headers(0, seg.size):
            assert h.position + h.size <= seg.size
    info = log.append_as_leader(batch(2, tag=999), 0, 1)
    assert info.first_offset == len(got)
    log.close()
    log = Log.open(crash_dir, cfg, recovery_point=0)
    assert verify_log(log)[-1][1].startswith(b"999:1:")
    log.close()


_WRITER = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from _storage_helpers import batch, small_config
from odradek.storage.log import Log
log = Log.open(Path(sys.argv[1]), small_config(segment_bytes=20000, index_interval_bytes=200))
i = 0
while True:
    log.append_as_leader(batch(1 + i % 3, tag=i), 0, 1)
    i += 1
    if i % 50 == 0:
        print(i, flush=True)
"""


def test_kill_minus_9_during_appends(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(d), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        seen = 0
        while seen < 400 and time.monotonic() < deadline:
            line = proc.stdout.readline() if proc.stdout else ""
            if not line:
                break
            seen = int(line)
        assert seen >= 400, "writer made no progress"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()
    log = Log.open(d, small_config(segment_bytes=20000, index_interval_bytes=200), recovery_point=0)
    got = verify_log(log)
    assert len(log.segments) > 2
    # content is the deterministic writer sequence: batch i has 1 + i % 3 records
    expected: list[bytes] = []
    i = 0
    while len(expected) < len(got):
        expected += [f"{i}:{j}:".encode() for j in range(1 + i % 3)]
        i += 1
    assert [v[: len(e)] for (_, v), e in zip(got, expected)] == expected[: len(got)]
    assert len(got) == len(expected)  # page cache survives kill -9: whole batches only
    log.close()


@pytest.mark.parametrize(
    "garbage", [b"\x00" * 100, b"\xff" * 7, b"\x00" * 11 + b"\x31" + os.urandom(300)]
)
def test_garbage_after_clean_close_with_recovery_point_at_leo(
    tmp_path: Path, garbage: bytes
) -> None:
    """The clean-shutdown fast path must still notice bytes past the recovery point."""
    d = tmp_path / "t-0"
    log, values = fill(d)
    leo = log.log_end_offset
    log.close()
    with open(segment_files(d)[-1], "ab") as f:
        f.write(garbage)
    log = Log.open(d, CFG, recovery_point=leo)
    assert verify_log(log) == values
    assert log.append_as_leader(batch(1), 0, 1).first_offset == leo
    log.close()


def test_recovery_with_batches_straddling_read_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import odradek.storage.segment as segment_mod

    monkeypatch.setattr(segment_mod, "_RECOVER_CHUNK", 150)  # smaller than most batches
    cfg = small_config(segment_bytes=1 << 20, index_interval_bytes=64)
    d = tmp_path / "t-0"
    log = Log.open(d, cfg)
    rng = random.Random(3)
    for i in range(60):
        log.append_as_leader(batch(rng.randint(1, 3), value_size=rng.randint(0, 200), tag=i), 0, 1)
    values = verify_log(log)
    crash(log)
    path = segment_files(d)[0]
    with open(path, "ab") as f:
        f.write(batch(2, tag=1)[:-5])  # torn final batch
    log = Log.open(d, cfg, recovery_point=0)
    assert verify_log(log) == values
    log.close()


@pytest.mark.parametrize("how", ["clean", "crash"])
def test_reopening_an_empty_log_costs_no_fsync(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 (fast start): a log with nothing written past its recovery point has
    nothing to check or make durable; an fsync per empty log made a broker with 3,000
    partitions take a minute to start."""
    d = tmp_path / "t-0"
    log = Log.open(d, CFG)
    if how == "clean":
        log.close()
    else:
        crash(log)
    syncs: list[int] = []
    for name in ("fsync", "fdatasync"):  # the storage layer's seam (odradek.runtime.disk)
        real = getattr(disk, name)
        monkeypatch.setattr(disk, name, lambda fd, _real=real: (syncs.append(fd), _real(fd))[1])
    files = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    log = Log.open(d, CFG, recovery_point=0)
    assert syncs == []
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == files  # nothing rewritten
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 0, 0)
    monkeypatch.undo()
    assert log.append_as_leader(batch(2), 0, 1).first_offset == 0
    log.close()


def test_data_past_the_recovery_point_is_still_checked_and_flushed(tmp_path: Path) -> None:
    """The empty-log shortcut must not skip a segment that holds anything: a crash after
    appends (recovery point 0) still scans every batch and moves the recovery point."""
    d = tmp_path / "t-0"
    log, values = fill(d, n=5)
    crash(log)
    with open(segment_files(d)[-1], "ab") as f:
        f.write(b"\x00" * 40)  # a torn tail past the valid batches
    log = Log.open(d, CFG, recovery_point=0)
    assert verify_log(log) == values
    assert log.recovery_point == log.log_end_offset == values[-1][0] + 1
    log.close()
