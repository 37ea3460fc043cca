"""Log cleaner throughput (issue #5 item 2, REQ-R25): MB/s of log compacted.

Builds a compacted-topic log of ``--mb`` MB of keyed records (``--unique`` fraction of
distinct keys, uniformly updated), rolls it so everything is cleanable, then in the same
run measures:

* ``copy``: the raw disk ceiling — read every segment file in 1 MiB chunks and write it to
  a new file, fsync (the minimum I/O any cleaner must do);
* ``clean``: one full cleaner pass (``odradek.storage.cleaner.clean_log``: key map over the
  dirty section, rewrite + fsync + swap), reported as input MB/s, with the map and rewrite
  phases split out.

Both read through the page cache (the log was just written), so the copy ceiling is a
memory-speed ceiling on a machine with enough RAM; the ratio is what matters.

    .venv/bin/python bench/cleaner_bench.py                       # 200 MB, none + lz4
    .venv/bin/python bench/cleaner_bench.py --mb 50 --codecs none,lz4,zstd --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from odradek.storage.cleaner import CleanStats, clean_log
from odradek.storage.log import Log, LogConfig
from odradek.storage.records import (
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    encode_batch,
)

MB = 1 << 20
CODECS = {"none": COMPRESSION_NONE, "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}


def build_log(
    d: Path,
    codec: int,
    total_bytes: int,
    record_bytes: int,
    unique: float,
    batch_records: int,
    segment_bytes: int,
    seed: int,
) -> tuple[Log, int]:
    cfg = LogConfig(
        segment_bytes=segment_bytes, cleanup_policy=("compact",), max_message_bytes=16 * MB
    )
    log = Log.open(d, cfg)
    rng = random.Random(seed)
    n_records = max(1, total_bytes // record_bytes)
    n_keys = max(1, int(n_records * unique))
    pool = os.urandom(16 * MB)  # incompressible values (random slices of a large pool)
    written = 0
    ts = int(time.time() * 1000)
    i = 0
    while i < n_records:
        recs = []
        for _ in range(min(batch_records, n_records - i)):
            k = rng.randrange(n_keys)
            key = b"key-%010d" % k
            start = rng.randrange(len(pool) - record_bytes)
            recs.append((key, b"%d:" % i + pool[start : start + record_bytes - 30]))
            i += 1
        b = encode_batch(recs, timestamp_ms=ts, compression=codec)
        log.append_as_leader(b, 0, ts)
        written += len(b)
    log.roll()
    log.flush()
    return log, n_records


def copy_ceiling(d: Path, out: Path) -> tuple[int, float]:
    """Read every segment and write it to one file, fsynced: bytes and seconds."""
    total = 0
    t0 = time.perf_counter()
    with open(out, "wb", buffering=0) as w:
        for f in sorted(d.glob("*.log")):
            with open(f, "rb", buffering=0) as r:
                while True:
                    chunk = r.read(MB)
                    if not chunk:
                        break
                    w.write(chunk)
                    total += len(chunk)
        os.fsync(w.fileno())
    return total, time.perf_counter() - t0


def run(codec_name: str, args: argparse.Namespace, root: Path) -> dict:
    d = root / f"bench-{codec_name}-0"
    shutil.rmtree(d, ignore_errors=True)
    t0 = time.perf_counter()
    log, n = build_log(
        d,
        CODECS[codec_name],
        args.mb * MB,
        args.record_bytes,
        args.unique,
        args.batch_records,
        args.segment_mb * MB,
        args.seed,
    )
    build_s = time.perf_counter() - t0
    size_before = log.size_bytes
    copy_bytes, copy_s = copy_ceiling(d, root / f"copy-{codec_name}.bin")
    os.unlink(root / f"copy-{codec_name}.bin")
    stats = CleanStats()
    t1 = time.perf_counter()
    c1 = time.process_time()
    clean_log(log, stats=stats, dedupe_buffer_bytes=args.dedupe_mb * MB)
    clean_s = time.perf_counter() - t1
    clean_cpu = time.process_time() - c1  # the machine is shared: CPU time is steadier
    size_after = log.size_bytes
    log.close()
    shutil.rmtree(d, ignore_errors=True)
    row = {
        "codec": codec_name,
        "records": n,
        "unique_keys": int(n * args.unique),
        "log_mb": round(size_before / MB, 1),
        "after_mb": round(size_after / MB, 1),
        "kept_records": stats.records_kept,
        "copy_mb_s": round(copy_bytes / MB / copy_s, 1),
        "clean_mb_s": round(stats.bytes_read / MB / clean_s, 1),
        "clean_s": round(clean_s, 2),
        "clean_cpu_s": round(clean_cpu, 2),
        "clean_mb_per_cpu_s": round(stats.bytes_read / MB / clean_cpu, 1),
        "us_per_record": round(clean_cpu / n * 1e6, 2),
        "map_s": round(stats.map_seconds, 2),
        "rewrite_s": round(stats.clean_seconds, 2),
        "ratio_to_copy": round((stats.bytes_read / clean_s) / (copy_bytes / copy_s), 3),
        "build_s": round(build_s, 1),
    }
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mb", type=int, default=200, help="log size to build (MB of batches)")
    ap.add_argument("--unique", type=float, default=0.1, help="distinct keys / records")
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--batch-records", type=int, default=200)
    ap.add_argument("--segment-mb", type=int, default=64)
    ap.add_argument("--dedupe-mb", type=int, default=128, help="log.cleaner.dedupe.buffer.size")
    ap.add_argument("--codecs", default="none,lz4")
    ap.add_argument("--dir", default=None, help="where to build the logs (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="cleaner-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    load0 = os.getloadavg()
    try:
        for name in args.codecs.split(","):
            row = run(name, args, root)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(f"load average before: {load0}, after: {os.getloadavg()}")
    print(
        "| codec | log MB | after MB | records | kept | copy MB/s | clean MB/s | clean/copy "
        "| clean MB per CPU-s | µs/record | map s | rewrite s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['codec']} | {r['log_mb']} | {r['after_mb']} | {r['records']} | {r['kept_records']} "
            f"| {r['copy_mb_s']} | {r['clean_mb_s']} | {r['ratio_to_copy']} "
            f"| {r['clean_mb_per_cpu_s']} | {r['us_per_record']} | {r['map_s']} "
            f"| {r['rewrite_s']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
