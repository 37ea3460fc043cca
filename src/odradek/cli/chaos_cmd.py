"""``odradek chaos list | run NAME|all|nemesis:SEED | nemesis --seeds A-B | report DIR``:
the documents' failure scenarios and the randomized nemesis (issue 6 items 4, 6, 7).

``run`` starts a fresh 3-broker cluster per scenario, injects the faults (needs root:
iptables, tc), records the histories as Parquet under ``--dir`` and checks them all in
one Spark session; it prints a table per scenario (acked, lost, duplicated, unavailable
seconds, then each expectation: expected vs observed), a summary table, writes
``RUN_DIR/results.json`` and, with ``--report DIR``, an HTML page with a timeline PNG per
scenario (``odradek.chaos.report``); it exits 1 if any expectation failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "add_parser",
    "cmd_list",
    "cmd_run",
    "cmd_nemesis",
    "cmd_report",
    "format_result",
    "run_cases",
]


def add_parser(subparsers: Any) -> None:
    chaos = subparsers.add_parser("chaos", help="fault-injection scenarios (needs root)")
    sub = chaos.add_subparsers(dest="chaos_command", metavar="{list,run,nemesis,report}")
    sub.required = True
    lst = sub.add_parser("list", help="list the scenarios and what the documents expect")
    lst.set_defaults(func=cmd_list)
    run = sub.add_parser("run", help="run scenarios (or nemesis:SEED) and check them on Spark")
    run.add_argument("names", nargs="+", metavar="NAME|all|nemesis:SEED")
    _common(run)
    run.set_defaults(func=cmd_run)
    nem = sub.add_parser("nemesis", help="randomized nemesis under the safe configuration")
    nem.add_argument("--seeds", default="1-20", help="e.g. 1-20 or 3,7,9 (default 1-20)")
    _common(nem)
    nem.set_defaults(func=cmd_nemesis)
    rep = sub.add_parser("report", help="(re)write the HTML/PNG report of a finished run")
    rep.add_argument("run_dir")
    rep.add_argument("--out", default=None, help="report directory (default RUN_DIR/report)")
    rep.set_defaults(func=cmd_report)


def _common(p: Any) -> None:
    p.add_argument("--dir", default=None, help="run directory (default: ./chaos-<time>)")
    p.add_argument(
        "--duration",
        type=float,
        default=30.0,
        help="seconds of faults per nemesis seed (default 30)",
    )
    p.add_argument(
        "--report",
        default=None,
        metavar="DIR|FILE",
        help="a directory: HTML page + timeline PNGs + summary.json/.md; a FILE "
        "ending in .json or .md: the results in that format",
    )
    p.add_argument("--no-plots", action="store_true", help="report without PNGs")
    p.add_argument(
        "--security",
        choices=("plaintext", "sasl_ssl"),
        default="plaintext",
        help="sasl_ssl: each case on a cluster with TLS + SCRAM listeners and "
        "ZooKeeper authentication, as `cluster up --security sasl_ssl`",
    )
    p.add_argument(
        "--hosts",
        choices=("loopback", "netns"),
        default="loopback",
        help="netns: each node in its own network namespace, as `cluster up "
        "--hosts netns`; faults cut links inside the namespaces (root)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="every step and each scenario's details on the terminal too "
        "(always in RUN_DIR/chaos.log)",
    )


def cmd_list(args: argparse.Namespace) -> int:
    from odradek.chaos.scenarios import SCENARIOS

    for s in SCENARIOS:
        tag = "" if s.slow else "  [fast]"
        print(
            f"{s.name}{tag}\n    {s.title}  ({s.spec}; acks={s.acks}, "
            f"min.insync.replicas={s.min_isr}, unclean={str(s.unclean).lower()}"
            f"{', idempotent' if s.idempotence else ''})\n    expected: {s.expected}"
        )
    return 0


def format_result(r: Any) -> str:
    m = r.metrics
    lines = [f"{r.name}  [{'PASS' if r.ok else 'FAIL'}]  {r.seconds:.0f} s"]
    if r.error:
        lines.append(f"  error: {r.error}")
    lines.append(
        f"  {'acked':>8} {'lost':>6} {'dup':>5} {'unacked-read':>12} "
        f"{'divergent':>9} {'unavail s':>9}  errors"
    )
    lines.append(
        f"  {m.get('acked', '-'):>8} {m.get('lost', '-'):>6} "
        f"{m.get('duplicated', '-'):>5} {m.get('unacked_read', '-'):>12} "
        f"{m.get('divergent', '-'):>9} {m.get('unavailable_s', '-'):>9}  "
        f"{json.dumps(m.get('error_kinds', {}))}"
    )
    w = max([len(c.what) for c in r.checks] + [10])
    lines.append(f"  {'expected':<{w}}  observed")
    for c in r.checks:
        lines.append(f"  {c.what:<{w}}  {c.observed}  {'ok' if c.ok else 'FAILED'}")
    return "\n".join(lines)


def _markdown(results: list[Any]) -> str:
    rows = [
        "| scenario | acked | lost | dup | split-brain acks | unavail. s | divergent | result |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        m = r.metrics
        rows.append(
            f"| {r.name} | {m.get('acked')} | {m.get('lost')} | {m.get('duplicated')} "
            f"| {m.get('split_brain_acks')} | {m.get('unavailable_s')} | "
            f"{m.get('divergent')} | {'pass' if r.ok else 'FAIL'} |"
        )
    return "\n".join(rows) + "\n"


def _as_dict(r: Any, titles: dict[str, str], schedules: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "name": r.name,
        "ok": r.ok,
        "error": r.error,
        "seconds": round(r.seconds, 1),
        "title": titles.get(r.name, ""),
        "schedule": schedules.get(r.name, []),
        "metrics": r.metrics,
        "checks": [c.__dict__ for c in r.checks],
    }


def run_cases(
    names: list[str],
    run_dir: Path,
    *,
    duration: float = 30.0,
    log: Any = print,
    spark: Any | None = None,
    on_case: Any = None,
    security: str = "plaintext",
    hosts: str = "loopback",
) -> list[Any]:
    """Run scenarios and ``nemesis:SEED`` cases one after another, then check them all
    in ONE Spark session; returns ``ScenarioResult`` s in the given order.
    ``on_case(i, name)`` is called before each case (and with ``i == len(names)``
    before the check). ``security``: ``sasl_ssl`` runs every case on a secured cluster;
    ``hosts``: ``netns`` runs it on hosts that are network namespaces."""
    from odradek.chaos.checker import check_run
    from odradek.chaos.nemesis import NemesisCase, evaluate_nemesis, parse_case, run_nemesis
    from odradek.chaos.scenarios import evaluate, get, run_scenario

    run_dir.mkdir(parents=True, exist_ok=True)
    results: list[Any] = []
    for i, n in enumerate(names):
        if on_case is not None:
            on_case(i, n)
        seed = parse_case(n)
        if seed is not None:
            results.append(
                run_nemesis(
                    NemesisCase(seed, duration), run_dir, log=log, security=security, hosts=hosts
                )
            )
        else:
            results.append(run_scenario(get(n), run_dir, log=log, security=security, hosts=hosts))
    if on_case is not None:
        on_case(len(names), "checking the histories on Spark")
    log("== checking the histories on Spark")
    metrics = check_run(run_dir, spark=spark)
    for n, r in zip(names, results):
        if parse_case(n) is not None:
            evaluate_nemesis(r, metrics.get(r.name, {}))
        else:
            evaluate(get(n), r, metrics.get(r.name, {}))
    return results


def _titles_and_schedules(
    run_dir: Path, names: list[str]
) -> tuple[dict[str, str], dict[str, list[str]]]:
    from odradek.chaos.nemesis import Op, case_name, describe, parse_case
    from odradek.chaos.scenarios import get

    titles: dict[str, str] = {}
    schedules: dict[str, list[str]] = {}
    for n in names:
        seed = parse_case(n)
        if seed is None:
            s = get(n)
            titles[n] = f"{s.title} ({s.spec}). Expected: {s.expected}"
            continue
        name = case_name(seed)
        titles[name] = (
            f"randomized nemesis, seed {seed}: acks=all, min.insync.replicas=2, "
            "unclean off, idempotent producer, RF 3, 3 partitions. Expected: "
            "zero loss, no duplicates, no reordering, no divergence"
        )
        f = run_dir / name / "schedule.json"
        if f.exists():
            ops = [
                Op(**{**o, "nodes": tuple(o["nodes"])}) for o in json.loads(f.read_text())["ops"]
            ]
            schedules[name] = [describe(o) for o in ops]
    return titles, schedules


def _finish(
    names: list[str],
    results: list[Any],
    run_dir: Path,
    args: argparse.Namespace,
    command: str,
    out: Any,
) -> int:
    from odradek.chaos.report import format_summary, gap_of, summarize, write_report

    for r in results:  # each scenario's details: the log (and --verbose)
        for line in format_result(r).splitlines():
            out.detail(line)
    titles, schedules = _titles_and_schedules(run_dir, names)
    dicts = [_as_dict(r, titles, schedules) for r in results]
    (run_dir / "results.json").write_text(
        json.dumps({"command": command, "results": dicts}, indent=1, default=str) + "\n"
    )
    rows = None
    if args.report:
        rep = Path(args.report)
        if rep.suffix == ".md":
            rep.write_text(_markdown(results))
        elif rep.suffix == ".json":
            rep.write_text(json.dumps(dicts, indent=2, default=str) + "\n")
        else:
            rows = write_report(run_dir, dicts, rep, command=command, plots=not args.no_plots)
    if rows is None:
        rows = [summarize(d, gap_of(run_dir / d["name"])) for d in dicts]
    out.console.print(format_summary(rows), markup=False, highlight=False)
    failed = [r.name for r in results if not r.ok]
    out.say(
        f"{len(results) - len(failed)} passed, {len(failed)} failed"
        + (f": {', '.join(failed)}" if failed else ""),
        style="red" if failed else "green",
    )
    if args.report:
        rep = Path(args.report)
        out.say(f"report: {rep / 'index.html' if rep.suffix not in ('.md', '.json') else rep}")
    out.say(
        f"results: {run_dir / 'results.json'}; full log: {out.log_path}; "
        f"Spark: {run_dir / 'spark.log'}"
    )
    return 1 if failed else 0


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so every ``with LocalCluster`` brings its cluster
    down (the faults' own handler heals the rules first, then calls this one)."""
    import signal

    def raise_exit(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, raise_exit)


def _prepare(names: list[str]) -> str | None:
    from odradek.chaos.faults import FaultsUnavailable, require_available
    from odradek.chaos.nemesis import parse_case
    from odradek.chaos.scenarios import get

    try:
        for n in names:
            if parse_case(n) is None:
                get(n)
        # A nemesis schedule may include a slow link (tc).
        require_available(need_tc=any(parse_case(n) is not None or get(n).needs_tc for n in names))
    except (KeyError, FaultsUnavailable) as e:
        return str(e)
    _exit_on_sigterm()
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from odradek.chaos.scenarios import SCENARIOS

    names: list[str] = []
    for n in args.names:
        names += [s.name for s in SCENARIOS] if n == "all" else [n]
    return _run_and_report(names, args, "odradek chaos run " + " ".join(args.names))


def cmd_nemesis(args: argparse.Namespace) -> int:
    from odradek.chaos.nemesis import parse_seeds

    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        print(f"odradek chaos: bad --seeds {args.seeds!r} (e.g. 1-20 or 3,7)", file=sys.stderr)
        return 2
    names = [f"nemesis:{s}" for s in seeds]
    return _run_and_report(names, args, f"odradek chaos nemesis --seeds {args.seeds}")


def _run_and_report(names: list[str], args: argparse.Namespace, command: str) -> int:
    """Run the cases in one directory (one Spark check), print and write the report."""
    err = _prepare(names)
    if err:
        print(f"odradek chaos: {err}", file=sys.stderr)
        return 2
    from odradek.chaos.workload import LIBRDKAFKA_LOGGER
    from odradek.terminal import RunOutput, librdkafka_logger

    run_dir = Path(args.dir or f"chaos-{time.strftime('%Y%m%d-%H%M%S')}")
    verbose = getattr(args, "verbose", False)
    with RunOutput(run_dir / "chaos.log", verbose=verbose) as out:
        librdkafka_logger(run_dir / "librdkafka.log", verbose=verbose, name=LIBRDKAFKA_LOGGER)
        out.say(f"[bold]{command}[/bold]: {len(names)} case(s); run directory {run_dir}")
        out.say(f"full log: {out.log_path}; librdkafka: {run_dir / 'librdkafka.log'}")
        task = out.progress("starting", total=len(names) + 1)

        def on_case(i: int, name: str) -> None:
            out.update(
                task,
                completed=i,
                description=name if i == len(names) else f"case {i + 1}/{len(names)}: {name}",
            )
            if i < len(names):
                out.detail(f"== case {i + 1}/{len(names)}: {name}")

        def log(line: str) -> None:
            # Headlines on the screen, every step in the log file.
            if line.startswith("=="):
                out.say(line.lstrip("= "))
            else:
                out.detail(line)

        results = run_cases(
            names,
            run_dir,
            duration=args.duration,
            log=log,
            on_case=on_case,
            security=args.security,
            hosts=args.hosts,
        )
        out.done(task)
        rc = _finish(names, results, run_dir, args, command + _flags(args), out)
        out.say(f"wall time {out.elapsed():.0f} s")
    return rc


def _flags(args: argparse.Namespace) -> str:
    out = ""
    if args.duration != 30.0:
        out += f" --duration {args.duration:g}"
    if args.dir:
        out += f" --dir {args.dir}"
    if getattr(args, "security", "plaintext") != "plaintext":
        out += f" --security {args.security}"
    if getattr(args, "hosts", "loopback") != "loopback":
        out += f" --hosts {args.hosts}"
    if args.report:
        out += f" --report {args.report}"
    return out


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a finished run from its ``results.json`` (no cluster, no Spark)."""
    from odradek.chaos.report import format_summary, write_report

    run_dir = Path(args.run_dir)
    f = run_dir / "results.json"
    if not f.exists():
        print(f"odradek chaos: {f} not found (written by `odradek chaos run`)", file=sys.stderr)
        return 2
    data = json.loads(f.read_text())
    out = Path(args.out or run_dir / "report")
    rows = write_report(run_dir, data["results"], out, command=data.get("command", ""))
    print(format_summary(rows))
    print(f"report: {out / 'index.html'}")
    return 0 if all(r["ok"] for r in data["results"]) else 1
