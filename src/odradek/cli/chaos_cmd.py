"""``odradek chaos list | run NAME|all``: the documents' failure scenarios (issue 6).

``run`` starts a fresh 3-broker cluster per scenario, injects the faults (needs root:
iptables, tc), records the histories as Parquet under ``--dir`` and checks them all in
one Spark session; it prints a table per scenario (acked, lost, duplicated, unavailable
seconds, then each expectation: expected vs observed) and exits 1 if any expectation
failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "cmd_list", "cmd_run", "format_result"]


def add_parser(subparsers: Any) -> None:
    chaos = subparsers.add_parser("chaos", help="fault-injection scenarios (needs root)")
    sub = chaos.add_subparsers(dest="chaos_command", metavar="{list,run}")
    sub.required = True
    lst = sub.add_parser("list", help="list the scenarios and what the documents expect")
    lst.set_defaults(func=cmd_list)
    run = sub.add_parser("run", help="run scenarios and check them on Spark")
    run.add_argument("names", nargs="+", metavar="NAME|all")
    run.add_argument("--dir", default=None, help="run directory (default: ./chaos-<time>)")
    run.add_argument("--report", default=None, metavar="FILE",
                     help="also write the results as JSON (or Markdown if FILE ends in .md)")
    run.set_defaults(func=cmd_run)


def cmd_list(args: argparse.Namespace) -> int:
    from odradek.chaos.scenarios import SCENARIOS

    for s in SCENARIOS:
        tag = "" if s.slow else "  [fast]"
        print(f"{s.name}{tag}\n    {s.title}  ({s.spec}; acks={s.acks}, "
              f"min.insync.replicas={s.min_isr}, unclean={str(s.unclean).lower()}"
              f"{', idempotent' if s.idempotence else ''})\n    expected: {s.expected}")
    return 0


def format_result(r: Any) -> str:
    m = r.metrics
    lines = [f"{r.name}  [{'PASS' if r.ok else 'FAIL'}]  {r.seconds:.0f} s"]
    if r.error:
        lines.append(f"  error: {r.error}")
    lines.append(f"  {'acked':>8} {'lost':>6} {'dup':>5} {'unacked-read':>12} "
                 f"{'divergent':>9} {'unavail s':>9}  errors")
    lines.append(f"  {m.get('acked', '-'):>8} {m.get('lost', '-'):>6} "
                 f"{m.get('duplicated', '-'):>5} {m.get('unacked_read', '-'):>12} "
                 f"{m.get('divergent', '-'):>9} {m.get('unavailable_s', '-'):>9}  "
                 f"{json.dumps(m.get('error_kinds', {}))}")
    w = max([len(c.what) for c in r.checks] + [10])
    lines.append(f"  {'expected':<{w}}  observed")
    for c in r.checks:
        lines.append(f"  {c.what:<{w}}  {c.observed}  {'ok' if c.ok else 'FAILED'}")
    return "\n".join(lines)


def _markdown(results: list[Any]) -> str:
    rows = ["| scenario | acked | lost | dup | split-brain acks | unavail. s | divergent | "
            "result |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        m = r.metrics
        rows.append(f"| {r.name} | {m.get('acked')} | {m.get('lost')} | {m.get('duplicated')} "
                    f"| {m.get('split_brain_acks')} | {m.get('unavailable_s')} | "
                    f"{m.get('divergent')} | {'pass' if r.ok else 'FAIL'} |")
    return "\n".join(rows) + "\n"


def cmd_run(args: argparse.Namespace) -> int:
    from odradek.chaos.faults import FaultsUnavailable, require_available
    from odradek.chaos.scenarios import SCENARIOS, get, run_scenarios

    names = [s.name for s in SCENARIOS] if args.names == ["all"] else args.names
    try:
        for n in names:
            get(n)
        require_available(need_tc=any(get(n).needs_tc for n in names))
    except (KeyError, FaultsUnavailable) as e:
        print(f"odradek chaos: {e}", file=sys.stderr)
        return 2
    run_dir = Path(args.dir or f"chaos-{time.strftime('%Y%m%d-%H%M%S')}")
    results = run_scenarios(names, run_dir, log=lambda s: print(s, flush=True))
    print()
    for r in results:
        print(format_result(r))
        print()
    failed = [r.name for r in results if not r.ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""))
    if args.report:
        rep = Path(args.report)
        if rep.suffix == ".md":
            rep.write_text(_markdown(results))
        else:
            rep.write_text(json.dumps([{"name": r.name, "ok": r.ok, "error": r.error,
                                        "seconds": r.seconds, "metrics": r.metrics,
                                        "checks": [c.__dict__ for c in r.checks]}
                                       for r in results], indent=2, default=str) + "\n")
    return 1 if failed else 0
