"""``odradek sim run | replay | bugs | scenarios | scenario``: the deterministic
simulator (odradek.sim).

``run --seeds 1-200`` runs one simulated schedule per seed (3 brokers, RF 3, Odradek's
real controller over a ZooKeeper model, or ``--model-controller`` the simulator's model
of it; a seeded network and nemesis, an acks=all workload -- ``--workload`` picks plain,
idempotent or transactional producers, odradek.sim.clients; every invariant checked at
the end), prints each failing seed with the invariant it broke, and exits non-zero if
any failed; ``--digests`` also prints every seed's timeline digest (what a change meant
to leave each run as it was is checked with: the same lines before and after).
``replay SEED`` prints one run's timeline, the same bytes on every replay: rerun a
failing seed with it (and the same ``--inject-bug``) to see what happened. ``--shrink``
(either command) replays a failing seed's fault schedule with faults left out until the
fewest that still break the same invariant remain, and prints them as the timeline does.
``scenarios`` lists the documents' partition scenarios the simulator plays
(odradek.sim.scenarios) and those it skips, with why; ``scenario NAME --seed N`` plays
one, prints its timeline and checks its documented outcome.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["add_parser", "parse_seeds"]

# odradek.sim.clients.WORKLOADS (not imported here: CLI start-up stays light).
WORKLOADS = ("plain", "idempotent", "transactional")


def parse_seeds(spec: str) -> list[int]:
    """``1-200``, ``7``, ``1-10,42``: seeds in the order given."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise argparse.ArgumentTypeError(f"empty seed range {part!r}")
        out.extend(range(first, last + 1))
    if not out:
        raise argparse.ArgumentTypeError("no seeds")
    return out


def add_parser(subparsers: Any) -> None:
    sim = subparsers.add_parser("sim", help="deterministic simulation of replication")
    sub = sim.add_subparsers(dest="sim_command", metavar="{run,replay,bugs,scenarios,scenario}")
    sub.required = True

    def controller_option(p: argparse.ArgumentParser, real: str) -> None:
        # The real controller became the default; --real-controller stays accepted (it
        # was needed to choose it) so that existing commands mean what they meant.
        who = p.add_mutually_exclusive_group()
        who.add_argument(
            "--real-controller",
            dest="controller",
            action="store_const",
            const="real",
            default=None,
            help=real,
        )
        who.add_argument(
            "--model-controller",
            dest="controller",
            action="store_const",
            const="model",
            help="the simulator's hand-written model of the controller (odradek.sim."
            "sim_controller) instead: the world the seeds docs/faults.md recorded before "
            "the real controller became the default were found in",
        )

    def bug_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--partitions",
            type=int,
            default=None,
            metavar="N",
            help="partitions of the topic, RF 3 each (default 1; 2 with --workload "
            "transactional, whose transactions span 2 or more)",
        )
        p.add_argument(
            "--workload",
            choices=WORKLOADS,
            default="plain",
            help="plain: non-idempotent acks=all producers (the seeds docs/faults.md "
            "names); idempotent: idempotent producers retrying unanswered batches, and "
            "read_committed/read_uncommitted consumers; transactional: transactional "
            "producers (commit or abort over 2+ partitions) and those consumers",
        )
        p.add_argument(
            "--acks",
            choices=("all", "1"),
            default="all",
            help="the idempotent workload's acks (default all; 1 may lose acknowledged "
            "records, which is then not a violation if a broker's lost-records ledger "
            "holds each one: acked-lost-unledgered otherwise)",
        )
        p.add_argument(
            "--in-flight",
            type=int,
            choices=range(1, 6),
            default=5,
            metavar="N",
            help="the idempotent workload's batches in flight per partition, 1-5 (default "
            "5, as max.in.flight.requests.per.connection; 1: one batch at a time per "
            "producer, the model of the seeds recorded before)",
        )
        p.add_argument(
            "--request-timeout-ms",
            type=int,
            default=None,
            metavar="MS",
            help="the client workloads' request.timeout.ms: a Produce unanswered this long "
            "fails, its connection is closed and the batch retried (default: none armed, "
            "as the clients' 30 s outlasts every wait of a run; 1000 with --profile "
            "pause-timeouts)",
        )
        p.add_argument(
            "--delivery-timeout-ms",
            type=int,
            default=None,
            metavar="MS",
            help="the client workloads' delivery.timeout.ms: a batch unacknowledged this "
            "long after it was produced expires (an idempotent producer then bumps its "
            "epoch, a transactional one aborts; default: none armed; 3000 with --profile "
            "pause-timeouts)",
        )
        p.add_argument(
            "--inject-bug",
            default=None,
            metavar="NAME",
            help="run with a known replication bug (see `odradek sim bugs`)",
        )
        p.add_argument(
            "--profile",
            choices=("default", "power-loss", "pause", "pause-timeouts"),
            default="default",
            help="power-loss: the nemesis also cuts one broker's power at a time (its "
            "files keep what was fsynced plus a torn tail) and restarts it; pause: it "
            "also freezes a broker (SIGSTOP: its session expires past the timeout) or "
            "stalls its event loop (docs/faults.md, 'Pause and stall'); pause-timeouts: "
            "pause, with client request and delivery timeouts shorter than the pauses",
        )
        p.add_argument(
            "--first-world",
            action="store_true",
            help="the world without reassignments, watch delays and quiet heals, with "
            "the modelled controller (unless --real-controller), where the seeds "
            "docs/faults.md names up to seed 308 were found",
        )
        controller_option(
            p,
            "Odradek's real Controller, metadata store and ISR store over the ZooKeeper "
            "model (every broker a controller candidate; controller failover among the "
            "faults): the default, except with --first-world",
        )
        p.add_argument(
            "--shrink",
            action="store_true",
            help="for a failing seed, find and print the fewest faults that still fail",
        )

    run = sub.add_parser("run", help="run a range of seeds, check every invariant")
    run.add_argument(
        "--seeds",
        type=parse_seeds,
        default=parse_seeds("1-100"),
        help="seeds, e.g. 1-200 or 1-10,42 (default 1-100)",
    )
    run.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="virtual seconds of faults per schedule (default 20)",
    )
    run.add_argument(
        "--stop-on-failure", action="store_true", help="stop at the first failing seed"
    )
    run.add_argument(
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="run the seeds in N processes at once (0: one per CPU); each seed's run is "
        "the same as alone, and the output is the same lines in seed order (default 1)",
    )
    run.add_argument(
        "--digests",
        action="store_true",
        help="also print each seed's outcome and timeline sha256, as `replay` does (the "
        "runs keep their timelines: slower): two trees meant to run every seed alike "
        "must print the same lines",
    )
    bug_option(run)
    run.set_defaults(func=cmd_run)

    replay = sub.add_parser("replay", help="print one seed's timeline")
    replay.add_argument("seed", type=int)
    replay.add_argument("--duration", type=float, default=None, metavar="S")
    bug_option(replay)
    replay.set_defaults(func=cmd_replay)

    bugs = sub.add_parser("bugs", help="list the bugs --inject-bug knows")
    bugs.set_defaults(func=cmd_bugs)

    scenarios = sub.add_parser("scenarios", help="list the partition scenarios (REQ-P1..P8)")
    scenarios.set_defaults(func=cmd_scenarios)

    scenario = sub.add_parser(
        "scenario", help="play one partition scenario, check its documented outcome"
    )
    scenario.add_argument("name", metavar="NAME", help="see `odradek sim scenarios`")
    scenario.add_argument("--seed", type=int, default=1, help="the run's seed (default 1)")
    controller_option(
        scenario,
        "play it on Odradek's real controller over the ZooKeeper model, the third replica "
        "its first controller (the default; p7 and p8 always are)",
    )
    scenario.set_defaults(func=cmd_scenario)


def _cfg(args: argparse.Namespace) -> Any:
    from odradek.sim.world import FIRST_WORLD, WorldConfig  # noqa: PLC0415 - lazy: CLI start-up

    base = FIRST_WORLD if args.first_world else WorldConfig()
    partitions = args.partitions
    if partitions is None:
        partitions = 2 if args.workload == "transactional" else 1
    if args.workload == "transactional" and partitions < 2:
        raise SystemExit("odradek sim: --workload transactional needs --partitions 2 or more")
    if args.acks == "1" and args.workload != "idempotent":
        raise SystemExit("odradek sim: --acks 1 is for --workload idempotent")
    cfg = replace(
        base,
        partitions=partitions,
        workload=args.workload,
        acks=1 if args.acks == "1" else -1,
        in_flight=args.in_flight,
    )
    if args.controller is not None:
        cfg = replace(cfg, real_controller=args.controller == "real")
    if args.duration is not None:
        cfg = replace(cfg, duration_s=args.duration)
    if args.request_timeout_ms is not None or args.delivery_timeout_ms is not None:
        from odradek.sim.pause import TIMEOUTS_PROFILE  # noqa: PLC0415 - lazy: CLI start-up

        # One given: the other is the profile's (pause-timeouts) or none.
        request_s, delivery_s = (
            TIMEOUTS_PROFILE if args.profile == "pause-timeouts" else (None, None)
        )
        if args.request_timeout_ms is not None:
            request_s = args.request_timeout_ms / 1000
        if args.delivery_timeout_ms is not None:
            delivery_s = args.delivery_timeout_ms / 1000
        cfg = replace(cfg, request_timeout_s=request_s, delivery_timeout_s=delivery_s)
    return cfg


def _check_bug(name: str | None) -> None:
    from odradek.sim.bugs import BUGS  # noqa: PLC0415 - lazy: CLI start-up

    if name is not None and name not in BUGS:
        raise SystemExit(f"odradek sim: unknown bug {name!r}; known: {', '.join(BUGS)}")


def _jobs(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError("--jobs must be 0 (one per CPU) or more")
    return n or os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class _SeedRun:
    """What ``sim run`` prints of one seed (a worker process sends this, not the run)."""

    seed: int
    ok: bool
    lines: str  # the seed's lines of output, newline-terminated ("" for a quiet pass)


def _run_one(
    seed: int, bug: str | None, cfg: Any, profile: str, digests: bool, shrink: bool
) -> _SeedRun:
    from odradek.sim.runner import run_seed  # noqa: PLC0415 - lazy: CLI start-up

    r = run_seed(seed, bug=bug, cfg=cfg, profile=profile, timeline=digests)
    out = io.StringIO()
    if digests:
        out.write(f"seed {seed}: {'ok' if r.ok else 'FAILED'}; timeline sha256 {r.digest}\n")
    if not r.ok:
        first = r.violations[0]
        more = f" (+{len(r.violations) - 1} more)" if len(r.violations) > 1 else ""
        out.write(f"seed {seed}: {first.invariant}: {first.detail}{more}\n")
        if shrink:
            _print_shrunk(r, cfg, out)
    return _SeedRun(seed, r.ok, out.getvalue())


def cmd_run(args: argparse.Namespace) -> int:
    import odradek.sim.runner  # noqa: F401, PLC0415 - lazy: CLI start-up; before workers fork

    _check_bug(args.inject_bug)
    cfg = _cfg(args)
    run = functools.partial(
        _run_one,
        bug=args.inject_bug,
        cfg=cfg,
        profile=args.profile,
        digests=args.digests,
        shrink=args.shrink,
    )
    failed = 0
    ran = 0
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        results: Iterator[_SeedRun]
        if args.jobs > 1 and len(args.seeds) > 1:
            import multiprocessing  # noqa: PLC0415 - lazy: CLI start-up
            from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

            # Each seed is a whole run in one process, as in a serial run (a run depends
            # on its seed only: tests/unit/sim/test_sim_runs.py). fork: the workers
            # start with the modules already imported.
            pool = stack.enter_context(
                ProcessPoolExecutor(
                    min(args.jobs, len(args.seeds)), mp_context=multiprocessing.get_context("fork")
                )
            )
            stack.callback(pool.shutdown, wait=True, cancel_futures=True)
            results = pool.map(run, args.seeds)  # in seed order, whichever ends first
        else:
            results = map(run, args.seeds)
        for r in results:
            ran += 1
            if r.lines:
                sys.stdout.write(r.lines)
                sys.stdout.flush()
            if not r.ok:
                failed += 1
                if args.stop_on_failure:
                    break
    elapsed = time.monotonic() - t0
    rate = ran / elapsed * 60 if elapsed > 0 else 0.0
    jobs = f" ({args.jobs} jobs)" if args.jobs > 1 else ""
    print(f"sim: {ran} schedules, {failed} failed, {rate:.0f} per minute{jobs}")
    return 1 if failed else 0


def cmd_replay(args: argparse.Namespace) -> int:
    from odradek.sim.runner import run_seed  # noqa: PLC0415 - lazy: CLI start-up

    _check_bug(args.inject_bug)
    r = run_seed(args.seed, bug=args.inject_bug, cfg=_cfg(args), profile=args.profile)
    out = sys.stdout
    for line in r.timeline:
        out.write(line + "\n")
    for v in r.violations:
        out.write(f"VIOLATION {v}\n")
    out.write(f"seed {r.seed}: {'ok' if r.ok else 'FAILED'}; timeline sha256 {r.digest}\n")
    if args.shrink and not r.ok:
        _print_shrunk(r, _cfg(args), out)
    return 0 if r.ok else 1


def _print_shrunk(r: Any, cfg: Any, out: Any) -> None:
    from odradek.sim.shrink import fault_lines, shrink  # noqa: PLC0415 - lazy: CLI start-up

    s = shrink(r, cfg)
    out.write(
        f"seed {r.seed} shrunk: {s.invariant} with {len(s.kept)} of {s.faults_before} "
        f"faults ({s.runs} replays):\n"
    )
    for line in fault_lines(s.result):
        out.write(f"  {line}\n")
    first = next(v for v in s.result.violations if v.invariant == s.invariant)
    out.write(f"  VIOLATION {first}\n")
    out.flush()


def cmd_bugs(args: argparse.Namespace) -> int:
    from odradek.sim.bugs import BUGS  # noqa: PLC0415 - lazy: CLI start-up

    for name, what in BUGS.items():
        print(f"{name}: {what}")
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from odradek.sim.scenarios import SCENARIOS, SKIPPED  # noqa: PLC0415 - lazy: CLI start-up

    for sc in SCENARIOS.values():
        print(f"{sc.name} ({sc.requirement}, min ISR {sc.min_insync_replicas}): {sc.outcome}")
    for name, why in SKIPPED.items():
        print(f"{name}: not simulated: {why}")
    return 0


def cmd_scenario(args: argparse.Namespace) -> int:
    from odradek.sim.scenarios import (  # noqa: PLC0415 - lazy: CLI start-up
        SCENARIOS,
        SKIPPED,
        run_scenario,
    )

    if args.name in SKIPPED:
        raise SystemExit(f"odradek sim: {args.name} is not simulated: {SKIPPED[args.name]}")
    sc = SCENARIOS.get(args.name)
    if sc is None:
        raise SystemExit(
            f"odradek sim: unknown scenario {args.name!r}; known: {', '.join(SCENARIOS)}"
        )
    base = None
    if args.controller == "model":
        if sc.real_controller:
            raise SystemExit(f"odradek sim: {sc.name} needs the real controller")
        from odradek.sim.world import MODEL_WORLD  # noqa: PLC0415 - lazy: CLI start-up

        base = MODEL_WORLD
    run = run_scenario(sc, args.seed, base)
    out = sys.stdout
    for line in run.result.timeline:
        out.write(line + "\n")
    out.write(f"documented outcome ({sc.requirement}): {sc.outcome}\n")
    if sc.note:
        out.write(f"simulator note: {sc.note}\n")
    for f in run.failures:
        out.write(f"OUTCOME NOT MET: {f}\n")
    verdict = "holds" if run.ok else "FAILED"
    out.write(
        f"{sc.name} seed {args.seed}: {verdict}; {run.result.acked} acked; "
        f"timeline sha256 {run.result.digest}\n"
    )
    return 0 if run.ok else 1
