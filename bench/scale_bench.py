#!/usr/bin/env python
"""Partition-count scale on a 3-broker cluster (issues 3 and 13: 3,000 and 10,000
partitions, RF 3).

A benchmark, not a timed test: run it by hand (bench/README.md). One run measures:

1. creation: topics of ``--per-topic`` partitions, RF 3, created ``--topics-per-request``
   at a time with confluent-kafka's AdminClient; time until every partition has a leader
   (and, separately, a full ISR) in metadata (issue 13 aim: ≤ 10 s for 3,000).
2. idle CPU: each broker's utime+stime (/proc/<pid>/stat) over ``--idle-seconds`` with no
   clients (issue 13 aim < 2 % of a core per broker at 3,000): replica fetchers
   long-polling thousands of partitions, ISR checks and ZooKeeper sessions are all that
   runs.
3. controlled shutdown: SIGTERM to the broker leading the most partitions (~1/3). Three
   times are taken: *decided* — every partition it led has another leader in its state
   znode (polled with ZooKeeper multiReads in a thread of its own, ~20 ms per poll at
   3,000); *re-led* — every surviving broker's own metadata shows it (a Metadata request
   to each on its own connection; the row's value; issue 13 aim ≤ 1 s at 1,000 leaders,
   ≤ 3 s at 3,333 of 10,000, Kafka 1.1's figure); *exit* — the process is gone (it
   flushes every log first).
4. failover after SIGKILL: the broker is restarted, the ISR allowed to fill again, then
   the broker leading the most partitions is SIGKILLed; time until every partition it
   led has a live leader. The controller learns of the death only when its ZooKeeper
   session expires, so this is ``zookeeper.session.timeout.ms`` (``--session-timeout-ms``)
   plus the elections; the row also shows the part after the session timeout (aim ≤ 1 s).
5. restart: after each of 3 and 4 the broker is started again; time until every ISR is
   full (aim ≤ 5 s with 3,000 logs).

Each run uses its own cluster in a temporary directory, removed at the end (the run's
topics go with it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_throughput import _f

from odradek.cluster.local import LocalCluster
from odradek.perf import proc_cpu_seconds
from odradek.zk.kafka_zk_client import KafkaZkClient

BROKERS = 3
RF = 3


@dataclass
class Row:
    test: str
    value: float
    unit: str
    target: str = ""
    note: str = ""


Leaders = dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> (leader, ISR size)


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    # socket.timeout.ms also bounds each admin request: CreateTopics of hundreds of
    # partitions waits for the controller, so keep librdkafka's default (60 s).
    return AdminClient({"bootstrap.servers": bootstrap})


def snapshot(a: Any, prefix: str) -> Leaders:
    """Leader and ISR size of every partition of our topics, from one Metadata request."""
    md = a.list_topics(timeout=10)
    out: Leaders = {}
    for name, t in md.topics.items():
        if not name.startswith(prefix) or t.error is not None:
            continue
        for p in t.partitions.values():
            out[(name, p.id)] = (p.leader, len(p.isrs))
    return out


def poll_until(what: str, cond: Callable[[], bool], timeout: float, interval: float = 0.1) -> float:
    """Seconds until ``cond()`` held (metadata errors mean "not yet")."""
    t0 = time.monotonic()
    while True:
        try:
            if cond():
                return time.monotonic() - t0
        except Exception as e:  # noqa: BLE001 - a broker going away mid-request: retry until the deadline
            last = e
        else:
            last = None
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(
                f"timed out after {timeout:.0f} s waiting for {what}"
                + (f" (last error: {last})" if last else "")
            )
        time.sleep(interval)


def create_partitions(
    c: LocalCluster, prefix: str, total: int, per_topic: int, per_request: int, rows: list[Row]
) -> list[str]:
    from confluent_kafka.admin import NewTopic

    a = admin(c.bootstrap_servers)
    names = [f"{prefix}{i:04d}" for i in range((total + per_topic - 1) // per_topic)]
    sizes = [min(per_topic, total - i * per_topic) for i in range(len(names))]
    cpu = CpuMeter(c)  # CPU seconds, not wall time, survive a shared or capped machine
    t0 = time.monotonic()
    chunk_s: list[float] = []
    for i in range(0, len(names), per_request):
        tc = time.monotonic()
        chunk = [
            NewTopic(n, s, RF)
            for n, s in zip(names[i : i + per_request], sizes[i : i + per_request])
        ]
        futs = a.create_topics(chunk, operation_timeout=60, request_timeout=120)
        for f in futs.values():
            f.result(timeout=180)
        chunk_s.append(time.monotonic() - tc)
        print(
            f"  created {min(i + per_request, len(names))}/{len(names)} topics "
            f"({time.monotonic() - t0:.1f} s, this request {chunk_s[-1]:.1f} s; "
            f"CPU s so far: {cpu.summary()})",
            flush=True,
        )
    t_req = time.monotonic() - t0

    def all_led() -> bool:
        s = snapshot(a, prefix)
        return len(s) == total and all(ld >= 0 for ld, _ in s.values())

    poll_until("every partition to have a leader", all_led, 600, 0.5)
    t_led = time.monotonic() - t0
    led_cpu = cpu.used()

    def all_isr() -> bool:
        s = snapshot(a, prefix)
        return len(s) == total and all(ld >= 0 and n == RF for ld, n in s.values())

    poll_until("every ISR to be full", all_isr, 600, 0.5)
    t_isr = time.monotonic() - t0
    note = (
        f"{len(names)} topics x {per_topic}, {per_request} topics per CreateTopics; "
        f"first request {chunk_s[0]:.1f} s, last {chunk_s[-1]:.1f} s"
    )
    rows.append(Row(f"create {total} partitions: CreateTopics done", t_req, "s", "", note))
    rows.append(Row(f"create {total} partitions: all leaders", t_led, "s", "≤ 10 s at 3,000"))
    rows.append(Row(f"create {total} partitions: all ISRs full", t_isr, "s"))
    for who, (user, system) in led_cpu.items():
        rows.append(
            Row(
                f"create {total} partitions: CPU of {who} until all leaders",
                user + system,
                "s",
                "",
                f"user {user:.2f} s, system {system:.2f} s",
            )
        )
    return names


class CpuMeter:
    """CPU seconds each broker and ZooKeeper used since it was made, user and system
    apart: the creation's cost, which a capped or shared machine stretches in wall time
    but not here. System time is the kernel creating directories and files (on ext4
    without a journal it grows with the inodes deleted in the last 30 s: docs/benchmarks.md)."""

    def __init__(self, c: LocalCluster) -> None:
        self.pids = {f"broker {b.id}": [b.pid] for b in c.brokers if b.pid}
        self.pids["ZooKeeper"] = [z.pid for z in c.zookeeper_nodes if z.pid]
        self.start = self._now()

    def _now(self) -> dict[str, tuple[float, float]]:
        out = {}
        for who, pids in self.pids.items():
            split = [_user_system(p) for p in pids]
            out[who] = (sum(u for u, _ in split), sum(s for _, s in split))
        return out

    def used(self) -> dict[str, tuple[float, float]]:
        """(user, system) seconds since the start, per process."""
        now = self._now()
        return {
            who: (u - self.start[who][0], s - self.start[who][1]) for who, (u, s) in now.items()
        }

    def summary(self) -> str:
        return ", ".join(f"{who} {u + s:.1f} ({s:.1f} sys)" for who, (u, s) in self.used().items())


def _user_system(pid: int) -> tuple[float, float]:
    """utime and stime of a live process, seconds (proc(5) fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read().decode()
    fields = data[data.rindex(")") + 2 :].split()  # the name may hold spaces and parens
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def idle_cpu(c: LocalCluster, seconds: float, rows: list[Row]) -> None:
    pids = {b.id: b.pid for b in c.brokers if b.pid}
    zk = [z.pid for z in c.zookeeper_nodes if z.pid]
    before = {i: proc_cpu_seconds(p) for i, p in pids.items()}
    zk0 = sum(proc_cpu_seconds(p) for p in zk)
    t0 = time.monotonic()
    time.sleep(seconds)  # the measurement itself: nothing else to wait for
    dt = time.monotonic() - t0
    for i, p in pids.items():
        pct = (proc_cpu_seconds(p) - before[i]) / dt * 100
        rows.append(Row(f"idle CPU broker {i}", pct, "% core", "< 2 %", f"over {dt:.0f} s"))
        print(f"  broker {i}: {pct:.1f}% of a core", flush=True)
    zk_pct = (sum(proc_cpu_seconds(p) for p in zk) - zk0) / dt * 100
    rows.append(Row("idle CPU ZooKeeper", zk_pct, "% core"))


def busiest(s: Leaders) -> tuple[int, set[tuple[str, int]]]:
    counts: dict[int, int] = {}
    for ld, _ in s.values():
        counts[ld] = counts.get(ld, 0) + 1
    victim = max((b for b in counts if b >= 0), key=lambda b: counts[b])
    return victim, {tp for tp, (ld, _) in s.items() if ld == victim}


def broker_leaders(address: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """Leader of every partition of ``topics`` in ONE broker's metadata (Metadata v12
    on one connection to that broker: no client library deciding which broker to ask)."""
    from odradek.client.connection import KafkaConnection, parse_address  # noqa: PLC0415
    from odradek.protocol.client_codec import nested_request, request_entity  # noqa: PLC0415

    req = request_entity(
        3,
        12,
        topics=tuple(
            nested_request(3, 12, "MetadataRequestTopic", topic_id=None, name=t) for t in topics
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    host, port = parse_address(address)
    with KafkaConnection(host, port, client_id="scale-bench", timeout_s=5.0) as conn:
        resp = conn.request(req)
    return {(t.name, p.partition_index): p.leader_id for t in resp.topics for p in t.partitions}


def zk_leaders(c: LocalCluster, tps: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Leader of each partition in its state znode (multiReads: cheap, unlike Metadata)."""
    got = KafkaZkClient(c.zk_client()).get_partition_states(sorted(tps))
    return {tp: st.leader for tp, (st, _) in got.items()}


def measure_shutdown(
    c: LocalCluster,
    prefix: str,
    sig: signal.Signals,
    session_ms: int,
    rows: list[Row],
    timeout: float,
    total: int,
) -> None:
    a = admin(c.bootstrap_servers)
    # A fresh client may first ask a broker whose metadata has not caught up yet.
    s: Leaders = {}

    def all_led() -> bool:
        nonlocal s
        s = snapshot(a, prefix)
        return len(s) == total and all(ld >= 0 for ld, _ in s.values())

    poll_until("metadata with every partition led", all_led, 60, 0.1)
    victim, led = busiest(s)
    topics = sorted({t for t, _ in led})
    zk_leaders(c, led)  # warm the ZooKeeper session before the clock starts
    pid = c.broker(victim).pid
    assert pid is not None
    print(f"[{sig.name}] broker {victim} (pid {pid}) leads {len(led)} partitions", flush=True)
    exited: list[float] = []
    decided: list[float] = []
    moved: list[float] = []
    remaining = set(led)
    stop = threading.Event()

    def watch_zookeeper() -> None:
        # Its own thread: a Metadata request of the loop below can block for seconds
        # while librdkafka gives up on the dead broker, which must not delay this clock.
        undecided = set(led)
        while undecided and not stop.is_set():
            try:
                for tp, ld in zk_leaders(c, undecided).items():
                    if ld >= 0 and ld != victim:
                        undecided.discard(tp)
            except Exception:  # noqa: BLE001 - a ZooKeeper hiccup: poll again
                pass
            if not undecided:
                decided.append(time.monotonic() - t0)
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch_zookeeper, daemon=True)
    t0 = time.monotonic()
    os.kill(pid, sig)
    watcher.start()

    def done() -> bool:
        now = time.monotonic() - t0
        if not exited and c.broker_state(victim) == "dead":  # reaps our child
            exited.append(now)
        if not moved:
            # Every surviving broker's own metadata, asked directly.
            views = [broker_leaders(b.address, topics) for b in c.brokers if b.id != victim]
            for tp in list(remaining):
                if all(v.get(tp, -1) not in (-1, victim) for v in views):
                    remaining.discard(tp)
            if not remaining:
                moved.append(time.monotonic() - t0)
        return bool(exited and moved and decided)

    try:
        poll_until(
            f"{sig.name}: broker {victim} gone and its partitions re-led", done, timeout, 0.02
        )
        watcher.join(timeout)
    except RuntimeError as e:
        stop.set()
        ex = f"process exited at {exited[0]:.1f} s" if exited else "process still running"
        rows.append(
            Row(
                f"{sig.name} broker leading {len(led)}: not finished",
                timeout,
                "s",
                "",
                f"{ex}; {len(remaining)}/{len(led)} partitions still without a new "
                f"leader at the deadline",
            )
        )
        print(f"  {e}", flush=True)
        return
    if sig == signal.SIGTERM:
        rows.append(
            Row(
                f"controlled shutdown (SIGTERM), broker leading {len(led)}: re-led",
                moved[0],
                "s",
                "≤ 1 s at 1,000; ≤ 3 s at 3,333",
                f"decided in ZooKeeper {decided[0]:.2f} s, process exit {exited[0]:.2f} s",
            )
        )
    else:
        rows.append(
            Row(
                f"failover after SIGKILL, broker leading {len(led)}",
                moved[0],
                "s",
                f"session timeout {session_ms / 1000:.0f} s + ≤ 1 s",
                f"{moved[0] - session_ms / 1000:.2f} s after the session timeout "
                f"(decided in ZooKeeper at {decided[0] - session_ms / 1000:.2f} s)",
            )
        )
    print(f"  {rows[-1].test}: {rows[-1].value:.2f} s ({rows[-1].note})", flush=True)


def restore(c: LocalCluster, prefix: str, total: int, timeout: float) -> float:
    """Restart every dead broker; seconds until every ISR is full again."""
    t0 = time.monotonic()
    for b in c.brokers:
        if c.broker_state(b.id) == "dead":
            c.start_broker(b.id, timeout=timeout)

    def full() -> bool:
        # a fresh client each time: one made while a broker was down was seen to keep
        # timing out on it for minutes
        s = snapshot(admin(c.bootstrap_servers), prefix)
        return len(s) == total and all(ld >= 0 and n == RF for ld, n in s.values())

    poll_until("every ISR to be full again", full, timeout, 0.2)
    return time.monotonic() - t0


def render(rows: list[Row]) -> str:
    header = ["test", "value", "unit", "target", "note"]
    lines = [header] + [[r.test, _f(r.value, ",.2f"), r.unit, r.target, r.note] for r in rows]
    widths = [max(len(x[i]) for x in lines) for i in range(len(header))]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--partitions", type=int, default=3000)
    ap.add_argument("--per-topic", type=int, default=100, help="partitions per topic")
    ap.add_argument("--topics-per-request", type=int, default=5)
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        help="seconds per shutdown/failover measurement (twice that per restart)",
    )
    ap.add_argument("--tests", default="idle,term,kill")
    ap.add_argument("--keep", metavar="DIR", help="cluster directory to use and keep (logs)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument(
        "--broker-src",
        metavar="DIR",
        help="run the brokers from another source tree's src/ (an A/B run "
        "against an older commit: git archive COMMIT | tar -x -C DIR)",
    )
    args = ap.parse_args(argv)
    tests = {t.strip() for t in args.tests.split(",")}
    rows: list[Row] = []
    prefix = "scale-"
    started = time.monotonic()
    load0 = os.getloadavg()[0]  # a shared machine: say how busy it was
    tmp = tempfile.TemporaryDirectory(prefix="odradek-scale-bench-")
    cdir = Path(args.keep) if args.keep else Path(tmp.name) / "cluster"
    try:
        print(
            f"== {BROKERS} brokers, {args.partitions} partitions RF {RF}, "
            f"zookeeper.session.timeout.ms={args.session_timeout_ms}",
            flush=True,
        )
        command = None
        if args.broker_src:
            src = Path(args.broker_src).resolve() / "src"
            command = [
                "env",
                f"PYTHONPATH={src}",
                sys.executable,
                "-m",
                "odradek",
                "broker",
                "--config",
            ]
            print(f"brokers run from {src}", flush=True)
        with LocalCluster.start(
            cdir,
            BROKERS,
            zk_session_timeout_ms=args.session_timeout_ms,
            timeout=90,
            broker_command=command,
        ) as c:
            create_partitions(
                c, prefix, args.partitions, args.per_topic, args.topics_per_request, rows
            )
            if "idle" in tests:
                print(f"[idle] {args.idle_seconds:.0f} s", flush=True)
                idle_cpu(c, args.idle_seconds, rows)
            for name, sig in (("term", signal.SIGTERM), ("kill", signal.SIGKILL)):
                if name not in tests:
                    continue
                measure_shutdown(
                    c, prefix, sig, args.session_timeout_ms, rows, args.timeout, args.partitions
                )
                try:
                    t = restore(c, prefix, args.partitions, 2 * args.timeout)
                except Exception as e:  # noqa: BLE001 - keep what was measured; later tests need a full ISR
                    rows.append(
                        Row(
                            f"restart after {sig.name}: not finished",
                            2 * args.timeout,
                            "s",
                            "",
                            f"{type(e).__name__}: {e}; remaining tests skipped",
                        )
                    )
                    print(f"  {rows[-1].note}", flush=True)
                    break
                rows.append(
                    Row(
                        f"restart after {sig.name} until every ISR is full",
                        t,
                        "s",
                        "≤ 5 s at 3,000",
                    )
                )
                print(f"  restarted, ISRs full after {t:.1f} s", flush=True)
    finally:
        print()
        print(
            f"cpu cores: {os.cpu_count()}, load average at end {os.getloadavg()[0]:.2f} "
            f"(at start {load0:.2f}), wall {time.monotonic() - started:.0f} s; "
            f"{BROKERS} brokers, {args.partitions} partitions, RF {RF}"
        )
        print(render(rows))
        if args.json:
            Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2))
        tmp.cleanup()
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
