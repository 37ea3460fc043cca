#!/usr/bin/env python
"""Simulator throughput: schedules per minute of ``odradek sim`` (issue 26).

A benchmark, not a timed test: run it by hand (bench/README.md). Runs seeds
``--first``.. for ``--seconds`` of wall time (at least one schedule), sequentially in
this process as ``odradek sim run`` does, and reports schedules per minute, virtual
seconds simulated per wall second, and the wall time per schedule (median and max).
``--inject-bug NAME`` measures a run with a bug (failing schedules are counted too).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from odradek.sim.runner import run_seed
from odradek.sim.world import WorldConfig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="wall time to spend")
    ap.add_argument("--first", type=int, default=1, help="first seed")
    ap.add_argument(
        "--duration",
        type=float,
        default=None,
        help="virtual seconds of faults per schedule (default: the simulator's)",
    )
    ap.add_argument("--inject-bug", default=None, metavar="NAME")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the figures")
    args = ap.parse_args(argv)
    cfg = WorldConfig() if args.duration is None else WorldConfig(duration_s=args.duration)
    walls: list[float] = []
    virtual = 0.0
    failed = 0
    seed = args.first
    t0 = time.perf_counter()
    while not walls or time.perf_counter() - t0 < args.seconds:
        t = time.perf_counter()
        r = run_seed(seed, bug=args.inject_bug, cfg=cfg)
        walls.append(time.perf_counter() - t)
        virtual += r.virtual_s
        failed += not r.ok
        seed += 1
    elapsed = time.perf_counter() - t0
    row = {
        "schedules": len(walls),
        "failed": failed,
        "per_minute": round(len(walls) / elapsed * 60, 1),
        "virtual_per_wall_s": round(virtual / elapsed, 1),
        "wall_s_median": round(statistics.median(walls), 3),
        "wall_s_max": round(max(walls), 3),
        "bug": args.inject_bug,
    }
    print(
        f"sim: {row['schedules']} schedules ({failed} failed) in {elapsed:.1f} s: "
        f"{row['per_minute']} per minute, {row['virtual_per_wall_s']} virtual s per wall s, "
        f"{row['wall_s_median']} s median / {row['wall_s_max']} s max per schedule"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
