"""``odradek demo``: the README's main job."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="run a local cluster with a verified demo workload")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--record-size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--dir", type=Path, default=None, help="working directory (default: temp)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from odradek.demo import run_demo  # noqa: PLC0415

    return run_demo(args.brokers, args.records, args.record_size, args.partitions, args.dir)
