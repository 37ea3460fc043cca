"""Log compaction (REQ-R25): model-based tests of odradek.storage.cleaner + Log swap."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from _storage_helpers import read_all

from odradek.log_manager.log_cleaner import CleanerCandidate, choose_log, cleanable_range
from odradek.storage.batch import parse_batches
from odradek.storage.cleaner import (
    CleanParams,
    CleanStats,
    SegmentView,
    build_offset_map,
    clean_log,
    clean_segments,
    cleaned_paths,
    record_key_check,
)
from odradek.storage.log import Log, LogConfig
from odradek.storage.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    decode_batch_records,
    encode_batch,
)
from odradek.storage.txn_index import AbortedTxn

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD, COMPRESSION_SNAPPY]
NOW = 10_000_000


def cfg(**kw: object) -> LogConfig:
    base: dict = dict(
        segment_bytes=3000,
        index_interval_bytes=200,
        cleanup_policy=["compact"],
        delete_retention_ms=1_000_000,
    )
    base.update(kw)
    return LogConfig(**base)


class Workload:
    """Random keyed appends with updates and tombstones; the model is key -> last write."""

    def __init__(self, log: Log, seed: int, keys: int = 40) -> None:
        self.log = log
        self.rng = random.Random(seed)
        self.keys = [b"key-%03d" % i for i in range(keys)]
        self.version: dict[bytes, int] = {}
        self.model: dict[bytes, tuple[int, bytes | None]] = {}  # key -> (offset, value)

    def append(self, batches: int, tombstone_p: float = 0.15) -> None:
        rng = self.rng
        for _ in range(batches):
            recs: list[tuple[bytes, bytes | None]] = []
            for _ in range(rng.randint(1, 8)):
                k = rng.choice(self.keys)
                v = self.version.get(k, 0) + 1
                self.version[k] = v
                value = (
                    None
                    if rng.random() < tombstone_p
                    else b"%s=v%d;" % (k, v) + b"x" * rng.randint(0, 60)
                )
                recs.append((k, value))
            ts = NOW - 5_000_000 + rng.randint(0, 1000)
            info = self.log.append_as_leader(
                encode_batch(
                    recs,
                    timestamp_ms=ts,
                    compression=rng.choice(CODECS),
                    producer_id=7,
                    producer_epoch=3,
                    base_sequence=rng.randint(0, 1000),
                ),
                leader_epoch=2,
                now_ms=ts,
            )
            for i, (k, value) in enumerate(recs):
                self.model[k] = (info.first_offset + i, value)


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for b in read_all(log):
        out += [(r.offset, r.key, r.value) for r in decode_batch_records(b)]
    return out


def check_compacted(log: Log, w: Workload, *, tombstones: bool) -> None:
    got = contents(log)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    active_base = log.active_segment.base_offset
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for o, k, v in got:
        assert k is not None
        if o < active_base:  # cleaned section: one record per key, the newest
            assert k not in latest, f"duplicate key {k!r} at {o} in cleaned section"
        latest[k] = (o, v)
    expect = {k: ov for k, ov in w.model.items() if tombstones or ov[1] is not None}
    got_live = {k: ov for k, ov in latest.items() if tombstones or ov[1] is not None}
    assert got_live == expect


@pytest.mark.parametrize("seed", range(6))
def test_model_based_compaction(tmp_path: Path, seed: int) -> None:
    log = Log.open(tmp_path / "t-0", cfg())
    w = Workload(log, seed)
    w.append(60)
    log.roll()
    before = log.size_bytes
    stats = CleanStats()
    end = clean_log(log, now_ms=NOW, stats=stats)
    assert end == log.active_segment.base_offset
    assert log.size_bytes < before and stats.records_kept < stats.records_read
    check_compacted(log, w, tombstones=True)  # tombstones kept on their first pass
    # More updates, an incremental pass from the checkpoint, tombstones past retention.
    w.append(40)
    log.roll()
    end = clean_log(log, end, now_ms=NOW + 2_000_000 + 5_000_000)
    # Tombstones that were already clean before this pass are gone; newer ones remain.
    check_compacted(log, w, tombstones=False)
    # Kafka removes tombstones only while cleaning: the next pass (new dirty data, no new
    # tombstones) drops every remaining one, all past delete.retention.ms by now.
    w.append(10, tombstone_p=0.0)
    log.roll()
    clean_log(log, end, now_ms=NOW + 100_000_000)
    check_compacted(log, w, tombstones=False)
    assert all(v is not None for _, _, v in contents(log))
    # Gaps survive a full recovery scan and a trusted reopen.
    snapshot = contents(log)
    log.close()
    for rp in (0, 10**9):
        log = Log.open(tmp_path / "t-0", cfg(), recovery_point=rp)
        assert contents(log) == snapshot
        log.close()


def test_retained_batch_keeps_header_fields_and_codec(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg())
    recs = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1")]
    log.append_as_leader(
        encode_batch(
            recs,
            timestamps=[100, 101, 102, 103],
            compression=COMPRESSION_LZ4,
            producer_id=42,
            producer_epoch=5,
            base_sequence=17,
        ),
        9,
        0,
    )
    log.append_as_leader(encode_batch([(b"c", b"2")], timestamp_ms=200), 9, 0)
    log.roll()
    clean_log(log, now_ms=NOW)
    hs = parse_batches(b"".join(read_all(log)))
    assert [(h.base_offset, h.last_offset_delta, h.records_count) for h in hs] == [
        (0, 3, 2),
        (4, 0, 1),
    ]
    h = hs[0]
    assert (
        h.compression,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.partition_leader_epoch,
        h.base_timestamp,
        h.max_timestamp,
    ) == (COMPRESSION_LZ4, 42, 5, 17, 9, 100, 102)
    got = contents(log)
    assert got == [(1, b"b", b"1"), (2, b"a", b"2"), (4, b"c", b"2")]
    # A fetch inside a retained batch's range returns that batch (Kafka: the client skips
    # records below its fetch offset).
    assert parse_batches(log.read(3, 1 << 20).read_bytes())[0].base_offset == 0
    log.close()


def test_control_batches_are_kept_and_emptied_batches_dropped(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg())
    log.append_as_leader(encode_batch([(b"a", b"1")]), 0, 0)
    log.append_as_leader(
        encode_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], control=True),
        0,
        0,
        allow_control=True,
    )
    log.append_as_leader(encode_batch([(b"a", b"2")]), 0, 0)
    log.roll()
    clean_log(log, now_ms=NOW)
    hs = parse_batches(b"".join(read_all(log)))
    assert [(h.base_offset, h.is_control) for h in hs] == [(1, True), (2, False)]
    # A fetch at a compacted-away offset returns the batch holding the next offset.
    assert parse_batches(log.read(0, 1 << 20).read_bytes())[0].base_offset == 1
    log.close()


def test_bounded_map_cleans_in_several_passes(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(segment_bytes=2000))
    w = Workload(log, 99, keys=200)
    w.append(80, tombstone_p=0.0)
    log.roll()
    end = log.log_start_offset
    passes = 0
    while end < log.active_segment.base_offset:
        stats = CleanStats()
        new_end = clean_log(log, end, now_ms=NOW, dedupe_buffer_bytes=60 * 112, stats=stats)
        assert new_end > end
        end = new_end
        passes += 1
    assert passes > 1
    # Later passes only see later keys; one more full pass removes every old duplicate.
    clean_log(log, 0, now_ms=NOW)
    check_compacted(log, w, tombstones=True)
    log.close()


def test_min_compaction_lag_and_high_watermark_bound_the_dirty_section(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg(min_compaction_lag_ms=1000))
    for i in range(40):
        log.append_as_leader(encode_batch([(b"k", b"v" * 100)], timestamp_ms=1000 + i * 100), 0, 0)
    log.roll()
    segs = log.segments[:-1]
    assert len(segs) > 2
    # now = 5000: only segments whose max timestamp <= 4000 are cleanable.
    c = cleanable_range(("t", 0), log, None, log.log_end_offset, 5000)
    assert c is not None
    assert all(s.max_timestamp <= 4000 for s in segs if s.next_offset <= c.stop)
    assert c.stop < log.active_segment.base_offset
    # The high watermark bounds it too: never a segment reaching past the HW.
    c2 = cleanable_range(("t", 0), log, None, segs[1].next_offset, 10**9)
    assert c2 is not None and c2.stop == segs[1].next_offset
    assert cleanable_range(("t", 0), log, None, segs[0].next_offset - 1, 10**9) is None
    log.close()


def test_choose_log_prefers_forced_then_dirtiest() -> None:
    a = CleanerCandidate(("a", 0), 0, 10, clean_bytes=100, dirty_bytes=100, forced=False)
    b = CleanerCandidate(("b", 0), 0, 10, clean_bytes=0, dirty_bytes=100, forced=False)
    c = CleanerCandidate(("c", 0), 0, 10, clean_bytes=900, dirty_bytes=100, forced=True)
    assert choose_log([a, b], {}) is b
    assert choose_log([a, b, c], {}) is c
    assert choose_log([a], {("a", 0): 0.6}) is None


@pytest.mark.parametrize("stage", ["cleaned", "swap", "swap+deleted", "index-final"])
def test_crash_during_swap_recovers(tmp_path: Path, stage: str) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, cfg())
    w = Workload(log, 5)
    w.append(50, tombstone_p=0.0)
    log.roll()
    before = contents(log)
    segs = log.segments[:-1]
    views = [
        SegmentView(s.base_offset, s.next_offset, s.size, s.max_timestamp, os.dup(s.fd))
        for s in segs
    ]
    omap = build_offset_map(views, 0, segs[-1].next_offset, 10**6)
    groups = clean_segments(d, views, omap, CleanParams(log.config.segment_bytes, 200, 10**9, NOW))
    for v in views:
        v.close()
    log.close()
    g = groups[0]
    cleaned = cleaned_paths(d, g.base_offset)
    swaps = cleaned_paths(d, g.base_offset, ".swap")
    finals = cleaned_paths(d, g.base_offset, "")
    # No transactions here: the cleaned group has no .txnindex (it exists only with
    # entries), like the segments it replaces.
    assert not cleaned[3].exists()
    if stage != "cleaned":
        for a, b in zip(cleaned[:3], swaps):
            os.replace(a, b)
    if stage in ("swap+deleted", "index-final"):
        for s in g.sources:
            for p in cleaned_paths(d, s.base_offset, "")[:3]:
                os.replace(p, str(p) + ".deleted")
    if stage == "index-final":
        for a, b in list(zip(swaps, finals))[1:3]:
            os.replace(a, b)
    log = Log.open(d, cfg(), recovery_point=0)
    after = contents(log)
    assert (
        not list(d.glob("*.swap"))
        and not list(d.glob("*.cleaned"))
        and not list(d.glob("*.deleted"))
    )
    if stage == "cleaned":
        assert after == before
    else:
        # Group 0 is cleaned; later groups are not: every key's newest value is intact.
        latest = {k: (o, v) for o, k, v in after}
        assert latest == {k: ov for k, ov in w.model.items()}
        assert len(after) < len(before)
        offs = [o for o, _, _ in after]
        assert offs == sorted(set(offs))
    log.close()


def test_replace_segments_refuses_stale_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, cfg())
    Workload(log, 3).append(30)
    log.roll()
    segs = log.segments[:-1]
    views = [
        SegmentView(s.base_offset, s.next_offset, s.size, s.max_timestamp, os.dup(s.fd))
        for s in segs
    ]
    omap = build_offset_map(views, 0, segs[-1].next_offset, 10**6)
    groups = clean_segments(d, views, omap, CleanParams(log.config.segment_bytes, 200, 10**9, NOW))
    for v in views:
        v.close()
    # Retention removed the first segment meanwhile: the swap must not resurrect it.
    log.segments.pop(0).delete()
    log._bases.pop(0)
    assert not log.replace_segments(segs[: len(groups[0].sources)], groups[0].base_offset)
    assert not any(p.exists() for p in cleaned_paths(d, groups[0].base_offset))
    log.close()


def test_follower_replicates_a_compacted_log(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "l-0", cfg())
    w = Workload(leader, 11)
    w.append(80)
    leader.roll()
    clean_log(leader, now_ms=NOW + 10**9)
    w.append(5)
    follower = Log.open(tmp_path / "f-0", cfg())
    off = 0
    while off < leader.log_end_offset:
        s = leader.read(off, 700)
        assert s is not None
        data = s.read_bytes()
        follower.append_as_follower(data)
        off = parse_batches(data)[-1].next_offset
    assert follower.log_end_offset == leader.log_end_offset
    assert contents(follower) == contents(leader)
    follower.close()
    follower = Log.open(tmp_path / "f-0", cfg(), recovery_point=0)
    assert contents(follower) == contents(leader)
    follower.close()
    leader.close()


def test_record_key_check() -> None:
    assert record_key_check(encode_batch([(b"k", b"v")], compression=COMPRESSION_ZSTD))
    assert not record_key_check(
        encode_batch([(b"k", b"v"), (None, b"v")], compression=COMPRESSION_GZIP)
    )
    both = encode_batch([(b"k", b"v")]) + encode_batch([(None, b"v")])
    assert not record_key_check(both)


def test_slice_taken_before_a_swap_stays_readable(tmp_path: Path) -> None:
    """A fetch response may hold a FileSlice of a segment the cleaner replaces: its fd
    must stay open (and not be reused) until the response is written."""
    log = Log.open(tmp_path / "t-0", cfg())
    Workload(log, 8).append(40, tombstone_p=0.0)
    log.roll()
    sl = log.read(0, 1 << 20)
    assert sl is not None
    before = sl.read_bytes()
    clean_log(log, now_ms=NOW)
    assert sl.read_bytes() == before  # old data, old fd, files already unlinked
    assert contents(log) != [(r.offset, r.key, r.value) for r in decode_batch_records(before)]
    log.close()


def test_cleaner_manager_cleans_while_the_loop_appends(tmp_path: Path) -> None:
    """LogCleanerManager: picks run and swaps happen on the event loop while appends go
    on; progress lands in cleaner-offset-checkpoint (Kafka's file)."""
    import asyncio
    import time
    from types import SimpleNamespace

    from odradek.log_manager.log_cleaner import (
        CLEANER_CHECKPOINT,
        CleanerSettings,
        LogCleanerManager,
    )
    from odradek.storage.checkpoint import read_checkpoint

    log = Log.open(tmp_path / "t-0", cfg(min_cleanable_dirty_ratio=0.01))
    part = SimpleNamespace(log=log, high_watermark=0)
    replicas = SimpleNamespace(partitions={("t", 0): part}, has_log=lambda tp: True)
    w = Workload(log, 21)

    async def main() -> int:
        mgr = LogCleanerManager(replicas, tmp_path, CleanerSettings(backoff_ms=10))  # type: ignore[arg-type]
        mgr.start(asyncio.get_running_loop())
        try:
            deadline = time.monotonic() + 60
            while mgr.passes < 3 and time.monotonic() < deadline:
                w.append(3)
                part.high_watermark = log.log_end_offset
                await asyncio.sleep(0.005)
            return mgr.passes
        finally:
            await asyncio.to_thread(mgr.stop)

    assert asyncio.run(main()) >= 3
    ckpt = read_checkpoint(tmp_path / CLEANER_CHECKPOINT)[("t", 0)]
    assert 0 < ckpt <= log.active_segment.base_offset
    check_compacted_prefix = contents(log)
    offs = [o for o, _, _ in check_compacted_prefix]
    assert offs == sorted(set(offs))
    latest = {k: (o, v) for o, k, v in check_compacted_prefix}
    assert latest == w.model
    # Below the checkpoint each key appears once (it was cleaned at least once).
    below = [k for o, k, _ in check_compacted_prefix if o < ckpt]
    assert len(below) == len(set(below))
    log.close()


# ----------------------------------------------------------------- transaction markers
# KIP-98's cleaner rules: aborted records go at once; a COMMIT/ABORT marker goes only
# when no batch of its transaction is left and it has spent delete.retention.ms
# (cfg(): 1,000,000 ms) in the cleaned section, like a tombstone.

PID = 7


def _marker(kind: int, ts: int) -> bytes:
    # Control record: key = version i16 + type i16, value = version i16 + coordinator epoch i32.
    return encode_batch(
        [(kind.to_bytes(4, "big"), b"\x00\x00\x00\x00\x00\x00")],
        timestamp_ms=ts,
        producer_id=PID,
        producer_epoch=0,
        transactional=True,
        control=True,
    )


def _txn_batch(key: bytes, value: bytes, seq: int, ts: int) -> bytes:
    return encode_batch(
        [(key, value)],
        timestamp_ms=ts,
        producer_id=PID,
        producer_epoch=0,
        base_sequence=seq,
        transactional=True,
    )


def _layout(log: Log) -> list[tuple[int, bool, bool]]:
    return [
        (h.base_offset, h.is_control, h.is_transactional)
        for h in parse_batches(b"".join(read_all(log)))
    ]


def test_aborted_records_go_first_their_marker_after_the_delete_horizon(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg())
    t0 = 1_000
    log.append_as_leader(_txn_batch(b"a", b"aborted-1", 0, t0), 0, 0)  # offset 0
    log.append_as_leader(_txn_batch(b"b", b"aborted-2", 1, t0), 0, 0)  # 1
    log.append_as_leader(_marker(0, t0), 0, 0, allow_control=True)  # 2: ABORT
    log.append_as_leader(encode_batch([(b"c", b"plain")], timestamp_ms=t0), 0, 0)  # 3
    log.record_aborted([AbortedTxn(PID, 0, 2, 3)])
    log.roll()
    # First pass, inside the horizon: the aborted records go, the marker stays, and so
    # does its .txnindex entry, now in the cleaned segment's index.
    end = clean_log(log, now_ms=t0 + 10)
    assert _layout(log) == [(2, True, True), (3, False, False)]
    assert log.aborted_entries() == [AbortedTxn(PID, 0, 2, 3)]
    assert (log.directory / f"{0:020d}.txnindex").stat().st_size == 34
    # Past the horizon but the marker is not yet in the cleaned section of a pass that
    # starts below it: this pass starts at `end` (4), so it is, and it goes.
    stats = CleanStats()
    log.append_as_leader(encode_batch([(b"c", b"newer")], timestamp_ms=t0), 0, 0)  # 4
    log.roll()
    clean_log(log, end, now_ms=t0 + 2_000_000, stats=stats)
    assert _layout(log) == [(4, False, False)]
    assert stats.markers_dropped == 1
    # The entry went with its marker: a read_committed consumer waiting for a marker
    # that no longer exists would skip the producer's later batches.
    assert log.aborted_entries() == [] and log.collect_aborted(0, 5) == []
    assert not (log.directory / f"{0:020d}.txnindex").exists()
    log.close()


def test_a_marker_stays_while_its_transactions_records_do(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", cfg())
    t0 = 1_000
    log.append_as_leader(_txn_batch(b"k1", b"committed", 0, t0), 0, 0)  # 0: stays (latest k1)
    log.append_as_leader(_marker(1, t0), 0, 0, allow_control=True)  # 1: COMMIT
    log.append_as_leader(_txn_batch(b"k2", b"old", 1, t0), 0, 0)  # 2: superseded below
    log.append_as_leader(_marker(1, t0), 0, 0, allow_control=True)  # 3: COMMIT
    log.append_as_leader(encode_batch([(b"k2", b"new")], timestamp_ms=t0), 0, 0)  # 4
    log.roll()
    end = clean_log(log, now_ms=t0 + 10)
    # Inside the horizon: both markers stay; the superseded record is gone.
    assert _layout(log) == [(0, False, True), (1, True, True), (3, True, True), (4, False, False)]
    log.append_as_leader(encode_batch([(b"k3", b"x")], timestamp_ms=t0), 0, 0)  # 5
    log.roll()
    clean_log(log, end, now_ms=t0 + 2_000_000)
    # The first transaction still has a record: its COMMIT stays. The second has none.
    assert _layout(log) == [(0, False, True), (1, True, True), (4, False, False), (5, False, False)]
    log.close()


def test_markers_above_the_cleaned_section_stay_past_the_horizon(tmp_path: Path) -> None:
    """A marker first met in this pass's dirty section is kept: consumers get
    delete.retention.ms from its first cleaning to read it."""
    log = Log.open(tmp_path / "t-0", cfg())
    log.append_as_leader(_txn_batch(b"a", b"x", 0, 1_000), 0, 0)  # 0
    log.append_as_leader(encode_batch([(b"a", b"y")], timestamp_ms=1_000), 0, 0)  # 1
    log.append_as_leader(_marker(1, 1_000), 0, 0, allow_control=True)  # 2: COMMIT
    log.roll()
    clean_log(log, now_ms=10_000_000)
    assert _layout(log) == [(1, False, False), (2, True, True)]
    log.close()
