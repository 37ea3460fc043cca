#!/usr/bin/env python
"""Simulator throughput: schedules per minute of ``odradek sim`` (issue 26).

A benchmark, not a timed test: run it by hand (bench/README.md). Runs seeds
``--first``.. for ``--seconds`` of wall time (at least one schedule), or exactly
``--schedules N`` seeds (the same seeds on every run: what a comparison of two branches
needs), sequentially in this process as ``odradek sim run`` does, and reports schedules
per minute, virtual seconds simulated per wall second, and the wall time per schedule
(median and max), and the same per second of this process's CPU time (what a loaded
machine skews least). The default shape is issue 26's: 3 brokers, 3 partitions RF 3,
60 virtual seconds of faults, the real controller (``--partitions``, ``--duration``).
``--inject-bug NAME`` measures a run with a bug (failing schedules are counted too);
``--first-world`` the world before reassignments, watch delays and quiet heals (what
the figures before issue 26 items 4-5 measured); ``--workload`` the idempotent or
transactional workload (odradek.sim.clients; transactional on 2 partitions).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace

from odradek.sim.clients import WORKLOADS
from odradek.sim.runner import run_seed
from odradek.sim.world import FIRST_WORLD, WorldConfig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="wall time to spend")
    ap.add_argument("--first", type=int, default=1, help="first seed")
    ap.add_argument(
        "--schedules",
        type=int,
        default=None,
        metavar="N",
        help="run exactly N seeds (--first..), whatever the time (overrides --seconds)",
    )
    ap.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="virtual seconds of faults per schedule (default 60, issue 26's shape; "
        "`odradek sim run` defaults to 20)",
    )
    ap.add_argument(
        "--partitions",
        type=int,
        default=None,
        metavar="N",
        help="partitions, RF 3 each (default 3, issue 26's shape; 2 with --workload transactional)",
    )
    ap.add_argument("--inject-bug", default=None, metavar="NAME")
    ap.add_argument("--first-world", action="store_true")
    who = ap.add_mutually_exclusive_group()
    who.add_argument(
        "--real-controller",
        dest="controller",
        action="store_const",
        const="real",
        default=None,
        help="Odradek's real controller over the ZooKeeper model (odradek.sim.zk_cluster): "
        "the default, except with --first-world",
    )
    who.add_argument(
        "--model-controller",
        dest="controller",
        action="store_const",
        const="model",
        help="the simulator's model of the controller (odradek.sim.sim_controller)",
    )
    ap.add_argument("--profile", default="default", help="default or power-loss")
    ap.add_argument("--workload", choices=WORKLOADS, default="plain")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the figures")
    args = ap.parse_args(argv)
    cfg = FIRST_WORLD if args.first_world else WorldConfig()
    parts = args.partitions
    if parts is None:
        parts = 2 if args.workload == "transactional" else 3
    cfg = replace(cfg, duration_s=args.duration, partitions=parts, workload=args.workload)
    if args.controller is not None:
        cfg = replace(cfg, real_controller=args.controller == "real")
    walls: list[float] = []
    virtual = 0.0
    failed = 0
    seed = args.first
    t0 = time.perf_counter()
    c0 = time.process_time()

    def more() -> bool:
        if args.schedules is not None:
            return len(walls) < args.schedules
        return not walls or time.perf_counter() - t0 < args.seconds

    while more():
        t = time.perf_counter()
        r = run_seed(
            seed, bug=args.inject_bug, cfg=cfg, profile=args.profile, timeline=False
        )  # as `sim run`
        walls.append(time.perf_counter() - t)
        virtual += r.virtual_s
        failed += not r.ok
        seed += 1
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    row = {
        "schedules": len(walls),
        "failed": failed,
        "per_minute": round(len(walls) / elapsed * 60, 1),
        "virtual_per_wall_s": round(virtual / elapsed, 1),
        # On a machine shared with other work the wall figures drift with the load; one
        # core's worth is what this process got of the CPU.
        "per_cpu_minute": round(len(walls) / cpu * 60, 1),
        "virtual_per_cpu_s": round(virtual / cpu, 1),
        "virtual_s_per_schedule": round(virtual / len(walls), 1),
        "cpu_s_per_schedule": round(cpu / len(walls), 3),
        "partitions": cfg.partitions,
        "duration_s": cfg.duration_s,
        "real_controller": cfg.real_controller,
        "seeds": f"{args.first}-{seed - 1}",
        "load": round(os.getloadavg()[0], 2),
        "wall_s_median": round(statistics.median(walls), 3),
        "wall_s_max": round(max(walls), 3),
        "bug": args.inject_bug,
        "world": "first" if args.first_world else "current",
        "workload": args.workload,
    }
    print(
        f"sim: {row['schedules']} schedules ({failed} failed) in {elapsed:.1f} s: "
        f"{row['per_minute']} per minute, {row['virtual_per_wall_s']} virtual s per wall s, "
        f"{row['wall_s_median']} s median / {row['wall_s_max']} s max per schedule; "
        f"{row['per_cpu_minute']} per CPU minute, {row['virtual_per_cpu_s']} virtual s per "
        f"CPU s ({row['virtual_s_per_schedule']} virtual s, {row['cpu_s_per_schedule']} CPU s "
        f"each); seeds {row['seeds']}, {cfg.partitions} partitions, {cfg.duration_s:g} s of "
        f"faults, {'real' if cfg.real_controller else 'modelled'} controller, "
        f"load {row['load']}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
