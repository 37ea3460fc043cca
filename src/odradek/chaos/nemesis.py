"""A randomized nemesis, Jepsen style (issue 6 item 6).

``schedule(seed, duration_s, nodes)`` is pure: the same seed, duration and nodes always
give the same list of ``Op`` (a fault with a start time and a duration; its end is the
heal: restart after a kill/SIGTERM, SIGCONT after a pause, rules removed after a
partition or slow link). ``run_nemesis`` applies a schedule to a fresh ``LocalCluster``
under the safe configuration -- acks=all, min.insync.replicas=2, unclean election off,
idempotent producer, RF 3, several partitions -- with the existing ``Faults`` API and
``History`` workload, then heals, waits for every ISR to be full, does the final read,
and leaves the histories for ``checker.check_run``. Expectations (REQ-R7, R8, R16, R19,
R20): zero acknowledged records lost, zero duplicates, no reordering within a partition,
no divergence, no dirty reads.

Constraints that keep the cluster able to make progress (and the run meaningful):

* at most ``MAX_ACTIVE`` faults at once;
* at most one broker down (SIGKILL / SIGTERM / SIGSTOP) at a time, so two replicas of
  every partition can still form a min-ISR-2 quorum once the network heals;
* ZooKeeper is never killed or paused unless it is an ensemble of 3 or more, and then at
  most one member at a time (a quorum survives); partitions to it are allowed (REQ-P3,
  REQ-P4, REQ-P8 -- sessions expire, which is what they are about);
* every fault ends before ``duration_s``; the final heal is unconditional anyway.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Op",
    "NemesisCase",
    "schedule",
    "parse_seeds",
    "describe",
    "actions",
    "supervise",
    "nemesis_checks",
    "run_nemesis",
    "case_name",
    "parse_case",
    "KINDS",
    "MAX_ACTIVE",
    "PROCESS_KINDS",
    "NEMESIS_PARTITIONS",
]

# kind -> weight. Process faults first, then network faults.
KINDS: dict[str, int] = {
    "kill": 3,  # SIGKILL, restart at the end of the window
    "term": 1,  # SIGTERM (controlled shutdown), restart at the end
    "pause": 2,  # SIGSTOP, SIGCONT at the end (a hung process, sockets open)
    "partition-bb": 3,  # broker <-> broker, one direction or both
    "partition-bzk": 2,  # broker <-> ZooKeeper
    "partition-bclient": 1,  # broker <-> the clients (127.0.0.1)
    "isolate": 2,  # one broker cut from every other node (clients still reach it)
    "slow": 1,  # tc htb rate limit on the link to a broker
}
PROCESS_KINDS = ("kill", "term", "pause")
MAX_ACTIVE = 2
NEMESIS_PARTITIONS = 3
DIRECTIONS = ("both", "a->b", "b->a")


@dataclass(frozen=True)
class Op:
    at: float  # seconds after the nemesis window opens
    kind: str  # one of KINDS
    nodes: tuple[str, ...]  # ("b2",) / ("b1", "b3") / ("b2", "zk") / ("b1", "client")
    duration: float  # the heal happens at at + duration
    direction: str = "both"  # partitions: both, a->b, b->a (a = nodes[0])
    rate: str = ""  # slow links

    @property
    def end(self) -> float:
        return round(self.at + self.duration, 1)

    @property
    def down(self) -> str | None:
        """The node this op takes down (process faults), else None."""
        return self.nodes[0] if self.kind in PROCESS_KINDS else None


def describe(op: Op) -> str:
    what = {
        "kill": "SIGKILL {0}, restart",
        "term": "SIGTERM {0}, restart",
        "pause": "SIGSTOP {0}, SIGCONT",
        "isolate": "isolate {0}",
        "slow": "slow link to {0}",
    }.get(op.kind)
    if what is None:
        arrow = {"both": "<->", "a->b": "->", "b->a": "<-"}[op.direction]
        text = f"partition {op.nodes[0]} {arrow} {op.nodes[1]}"
    else:
        text = what.format(*op.nodes)
    if op.rate:
        text += f" {op.rate}"
    return f"t={op.at:5.1f}s..{op.end:5.1f}s  {text}"


def _active(ops: Sequence[Op], t: float) -> list[Op]:
    return [o for o in ops if o.at <= t < o.end]


def _overlapping(ops: Sequence[Op], at: float, end: float) -> list[Op]:
    return [o for o in ops if o.at < end and at < o.end]


def schedule(seed: int, duration_s: float, nodes: Sequence[str]) -> list[Op]:
    """A deterministic random fault schedule for ``nodes`` (``b<id>``, ``zk``/``zk<n>``).

    Pure: only ``random.Random(seed)`` is used, so a seed reproduces its schedule."""
    rng = random.Random(seed)
    brokers = sorted(n for n in nodes if n.startswith("b"))
    zks = sorted(n for n in nodes if n.startswith("zk"))
    if len(brokers) < 2:
        raise ValueError("the nemesis needs at least 2 brokers")
    kinds = [k for k in KINDS if k != "partition-bzk" or zks]
    weights = [KINDS[k] for k in kinds]
    ops: list[Op] = []
    t = round(rng.uniform(0.5, 2.0), 1)
    while t < duration_s - 1.0:
        placed = False
        for _ in range(8):  # a few draws; if nothing fits now, try later
            kind = rng.choices(kinds, weights)[0]
            lo, hi = (1.0, 6.0) if kind in PROCESS_KINDS else (2.0, 8.0)
            dur = round(min(rng.uniform(lo, hi), duration_s - t), 1)
            if dur < 0.5:
                break
            end = t + dur
            over = _overlapping(ops, t, end)
            if len(over) >= MAX_ACTIVE:
                break
            op = _draw(rng, kind, t, dur, brokers, zks)
            if op is None:
                continue
            if op.down is not None and any(o.down is not None for o in over):
                continue  # one node down at a time
            if any(o.kind == op.kind and set(o.nodes) == set(op.nodes) for o in over):
                continue  # the same fault twice at once adds nothing
            if op.kind == "slow" and any(o.kind == "slow" for o in over):
                continue  # one htb class per run keeps the tc state simple
            ops.append(op)
            placed = True
            break
        t = round(t + rng.uniform(0.5, 3.0) + (0.0 if placed else 0.5), 1)
    return ops


def _draw(
    rng: random.Random, kind: str, t: float, dur: float, brokers: list[str], zks: list[str]
) -> Op | None:
    b = rng.choice(brokers)
    if kind in PROCESS_KINDS:
        # ZooKeeper ensembles of >= 3 may lose one member; a lone ZooKeeper never.
        if len(zks) >= 3 and rng.random() < 0.25:
            return Op(t, kind, (rng.choice(zks),), dur)
        return Op(t, kind, (b,), dur)
    if kind == "partition-bb":
        other = rng.choice([x for x in brokers if x != b])
        return Op(t, kind, (b, other), dur, rng.choice(DIRECTIONS))
    if kind == "partition-bzk":
        return Op(t, kind, (b, rng.choice(zks)), dur, rng.choice(DIRECTIONS))
    if kind == "partition-bclient":
        return Op(t, kind, (b, "client"), dur, rng.choice(DIRECTIONS))
    if kind == "isolate":
        return Op(t, kind, (b,), dur)
    if kind == "slow":
        return Op(t, kind, (b,), dur, rate=rng.choice(("256kbit", "1mbit")))
    return None


def actions(ops: Sequence[Op]) -> list[tuple[float, str, int]]:
    """The timeline of ``(t, "start"|"end", op index)``; at equal times heals go first."""
    acts = [(o.at, "start", i) for i, o in enumerate(ops)]
    acts += [(o.end, "end", i) for i, o in enumerate(ops)]
    return sorted(acts, key=lambda a: (a[0], 0 if a[1] == "end" else 1, a[2]))


def parse_seeds(text: str) -> list[int]:
    """``"1-20"``, ``"3,7,9"`` or ``"1-5,42"``."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            seeds.extend(range(int(a), int(b) + 1))
        else:
            seeds.append(int(part))
    return seeds


# ----------------------------------------------------------------- the case


@dataclass(frozen=True)
class NemesisCase:
    seed: int
    duration_s: float = 30.0
    partitions: int = NEMESIS_PARTITIONS
    rate: float = 150.0  # records/s over all partitions

    @property
    def name(self) -> str:
        return case_name(self.seed)


def case_name(seed: int) -> str:
    return f"nemesis-{seed}"


def parse_case(name: str) -> int | None:
    """``nemesis:7`` or ``nemesis-7`` -> 7; anything else -> None."""
    for prefix in ("nemesis:", "nemesis-"):
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            return int(name[len(prefix) :])
    return None


def nemesis_checks(m: dict[str, Any], partitions: int = NEMESIS_PARTITIONS) -> list[Any]:
    """The safe configuration's promises (REQ-R7, R8, R16, R19, R20)."""
    from odradek.chaos.expectations import Check, _cmp

    return [
        _cmp(m, "lost", "==", 0),
        _cmp(m, "duplicated", "==", 0),
        _cmp(m, "out_of_order", "==", 0),
        _cmp(m, "divergent", "==", 0),
        _cmp(m, "dirty_reads", "==", 0),
        _cmp(m, "never_sent_read", "==", 0),
        _cmp(m, "acked", ">", 0),
        Check(
            "every partition's ISR full after healing (R21)",
            m.get("final_isrs_full") is True,
            str(m.get("final_isrs")),
        ),
    ]


# ----------------------------------------------------------------- running (effects)

# The idempotent producer deduplicates retries only within one producer epoch. A message
# that expires in flight (message.timeout.ms) makes librdkafka bump the epoch
# (InitProducerId, KIP-360) and re-send every unacknowledged message from sequence 0 --
# including ones the broker had already written: duplicates and reordering that no
# broker can detect (found by seeds 8 and 9 with the 10 s default of the scenarios; see
# docs/failure-scenarios.md). The safe configuration therefore gives sends longer than
# any fault window plus recovery, so retries stay in one epoch.
NEMESIS_PRODUCER = {"message.timeout.ms": 120000}
SAFE_TOPIC_CONFIG = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}


def _apply(op: Op, start: bool, faults: Any, handles: dict[int, Any], idx: int) -> None:
    if op.kind == "kill":
        if start:
            faults.kill(op.nodes[0], signal.SIGKILL)
        else:
            faults.restart(op.nodes[0], wait=False)
        return
    if op.kind == "term":
        # A controlled shutdown may take long under other faults (up to 30 s before
        # LocalCluster escalates to SIGKILL): in a thread, so the schedule keeps time.
        if start:
            t = threading.Thread(
                target=faults.kill,
                args=(op.nodes[0], signal.SIGTERM),
                name=f"nemesis-term-{op.nodes[0]}",
                daemon=True,
            )
            t.start()
            handles[idx] = t
        else:
            t = handles.pop(idx, None)
            if t is not None:
                t.join(40)
            faults.restart(op.nodes[0], wait=False)
        return
    if start:
        if op.kind == "pause":
            handles[idx] = faults.pause(op.nodes[0])
        elif op.kind == "isolate":
            handles[idx] = faults.isolate(op.nodes[0])
        elif op.kind == "slow":
            handles[idx] = faults.slow(op.nodes[0], rate=op.rate)
        else:
            handles[idx] = faults.partition(op.nodes[0], op.nodes[1], direction=op.direction)
    elif idx in handles:
        faults.heal(handles.pop(idx))


def supervise(faults: Any, history: Any, down: set[str] | None = None) -> None:
    """Restart brokers that exited on their own, as a process supervisor would: a broker
    restarted while cut from ZooKeeper gives up after its connection timeout and exits
    (like Kafka's), which is not a fault the schedule asked for. ``down``: brokers the
    schedule keeps down right now."""
    c = faults.cluster
    for b in c.brokers:
        node = f"b{b.id}"
        if node not in (down or set()) and c.broker_state(b.id) == "dead":
            history.event("note", f"supervisor: {node} exited on its own; restarting it")
            faults.restart(node, wait=False)


def run_schedule(
    ops: Sequence[Op], faults: Any, history: Any, log: Callable[[str], None] = print
) -> None:
    """Apply ``ops`` in real time (an action that blocks, e.g. iptables waiting for its
    lock, delays the next; SIGTERM runs in a thread). A failing action is recorded and
    skipped.
    Between actions, brokers that died on their own are restarted (``supervise``)."""
    t0 = time.monotonic()
    handles: dict[int, Any] = {}
    down: set[str] = set()
    for at, what, i in actions(ops):
        while True:
            delay = t0 + at - time.monotonic()
            if delay <= 0:
                break
            time.sleep(min(delay, 0.5))
            supervise(faults, history, down)
        op = ops[i]
        if op.kind in ("kill", "term"):
            (down.add if what == "start" else down.discard)(op.nodes[0])
        try:
            _apply(op, what == "start", faults, handles, i)
        except Exception as e:  # e.g. the node died meanwhile; the run goes on
            history.event("note", f"nemesis op {i} {what} failed: {e!r}")
            log(f"   op {i} {what} failed: {e!r}")


def _create_topic(
    bootstrap: str, topic: str, partitions: int, security: dict[str, str] | None = None
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from odradek.chaos.workload import client_logging

    admin = AdminClient({"bootstrap.servers": bootstrap, **client_logging(), **(security or {})})
    nt = NewTopic(topic, num_partitions=partitions, replication_factor=3, config=SAFE_TOPIC_CONFIG)
    admin.create_topics([nt], operation_timeout=30)[topic].result(30)


def _wait(cond: Callable[[], Any], timeout: float, what: str, history: Any) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            history.event("note", f"reached: {what}")
            return
        time.sleep(0.05)
    history.event("note", f"timed out: {what}")
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_nemesis(
    case: NemesisCase,
    run_dir: Path,
    *,
    log: Callable[[str], None] = print,
    security: str = "plaintext",
    hosts: str = "loopback",
) -> Any:
    """Run one seed on a fresh cluster; the histories go to ``run_dir/nemesis-<seed>/``
    with ``schedule.json``. Returns a ``ScenarioResult`` (checks are added by
    ``evaluate_nemesis`` once the checker ran). Faults are always healed and the cluster
    always brought down. ``security``: ``sasl_ssl`` for a secured cluster; ``hosts``:
    ``netns`` for nodes in their own network namespaces."""
    from odradek.chaos.faults import Faults
    from odradek.chaos.scenarios import FAST_BROKER_CONFIG, ZK_SESSION_MS, ScenarioResult
    from odradek.chaos.workload import (
        History,
        LiveConsumer,
        MetadataPoller,
        ProducerWorkload,
        dump_replicas,
        final_read,
    )
    from odradek.cluster.local import LocalCluster

    d = Path(run_dir) / case.name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    h = History(case.name)
    res = ScenarioResult(case.name, d, 0.0)
    t_start = time.monotonic()
    topic = f"chaos-{case.name}"
    n = case.partitions
    log(
        f"== {case.name}: randomized nemesis, seed {case.seed}, {case.duration_s:.0f} s, "
        f"{n} partitions, safe configuration"
    )
    try:
        with LocalCluster.start(
            d / "cluster",
            3,
            broker_config=FAST_BROKER_CONFIG,
            zk_session_timeout_ms=ZK_SESSION_MS,
            security=security,
            hosts=hosts,
        ) as c:
            nodes = [f"b{b.id}" for b in c.brokers] + [
                "zk" if z.id == 1 else f"zk{z.id}" for z in c.zookeeper_nodes
            ]
            ops = schedule(case.seed, case.duration_s, nodes)
            (d / "schedule.json").write_text(
                json.dumps(
                    {
                        "seed": case.seed,
                        "duration_s": case.duration_s,
                        "nodes": nodes,
                        "ops": [asdict(o) for o in ops],
                    },
                    indent=1,
                )
                + "\n"
            )
            for o in ops:
                log(f"   {describe(o)}")
            faults = Faults(
                c,
                on_event=lambda k, detail: h.event(k, detail),
                need_tc=any(o.kind == "slow" for o in ops),
            )
            _drive(
                case,
                c,
                faults,
                h,
                res,
                topic,
                ops,
                log,
                MetadataPoller,
                ProducerWorkload,
                LiveConsumer,
                final_read,
            )
            c.down()
            dump_replicas(h, c, topic, n)
            try:
                from odradek.chaos.scenarios import dump_ledger

                dump_ledger(d, c, topic, case.name)
            except Exception as e:  # the ledger is extra evidence, not an expectation here
                h.event("note", f"ledger dump failed: {e!r}")
    except Exception as e:  # the cluster did not start, faults unavailable...
        res.error = res.error or f"{type(e).__name__}: {e}"
        log(f"   error: {res.error}")
    h.write(d)
    res.seconds = time.monotonic() - t_start
    return res


def _drive(
    case: NemesisCase,
    c: Any,
    faults: Any,
    h: Any,
    res: Any,
    topic: str,
    ops: list[Op],
    log: Callable[[str], None],
    MetadataPoller: Any,
    ProducerWorkload: Any,
    LiveConsumer: Any,
    final_read: Any,
) -> None:
    from odradek.chaos.workload import restart_stopped_brokers, wind_down

    n = case.partitions
    poller = MetadataPoller(h, c, topic, partitions=n)
    producer = consumer = None

    def all_full() -> bool:
        st = poller.state
        return len(st) == n and all(s[0] >= 0 and len(s[2]) == 3 for s in st.values())

    try:
        deadline = time.monotonic() + 20
        while c.controller_id() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        sec = c.client_config()  # {} on a plaintext cluster
        _create_topic(c.bootstrap_servers, topic, n, sec)
        poller.start()
        _wait(all_full, 30, "every partition led with a full ISR", h)
        h.phase("steady")
        producer = ProducerWorkload(
            h,
            c.bootstrap_servers,
            topic,
            acks="all",
            idempotence=True,
            rate=case.rate,
            size=100,
            partitions=n,
            extra={**NEMESIS_PRODUCER, **sec},
        ).start()
        consumer = LiveConsumer(h, c.bootstrap_servers, topic, partitions=n, extra=sec).start()
        _wait(lambda: producer.acked >= 50, 30, "50 acknowledged records", h)
        h.phase("nemesis")
        run_schedule(ops, faults, h, log)
        faults.heal_all()
        h.phase("healed")
        for b in c.brokers:
            if c.broker_state(b.id) != "running":
                faults.restart(b.id, wait=False)
        last = [0.0]

        def healed() -> bool:
            if time.monotonic() - last[0] > 1.0:  # a restart may still fail: supervise
                last[0] = time.monotonic()
                supervise(faults, h)
            return all_full()

        _wait(healed, 60, "every ISR full after healing", h)
        a = producer.acked
        _wait(lambda: producer.acked >= a + 50, 30, "50 acks after healing", h)
    except Exception as e:  # a finding: recorded, the run goes on to the checker
        res.error = f"{type(e).__name__}: {e}"
        h.event("note", f"nemesis error: {res.error}")
        log(f"   error: {res.error}")
    finally:
        wind_down(faults, producer, consumer)
        try:
            restart_stopped_brokers(c)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all_full():
                poller.poll_once()
                time.sleep(0.1)
            poller.poll_once()
            final_read(h, c.bootstrap_servers, topic, n, extra=c.client_config())
        except Exception as e:
            h.event("note", f"final read failed: {e!r}")
            res.error = res.error or f"final read failed: {e!r}"
        res.metrics["final_isrs"] = {p: s[2] for p, s in sorted(poller.state.items())}
        res.metrics["final_isrs_full"] = all_full()
        poller.stop()


def evaluate_nemesis(
    res: Any, metrics: dict[str, Any], partitions: int = NEMESIS_PARTITIONS
) -> None:
    """Merge the checker's metrics into ``res`` and evaluate the expectations."""
    from odradek.chaos.expectations import Check

    extra = {k: v for k, v in res.metrics.items() if k.startswith("final_isrs")}
    res.metrics = {**metrics, **extra}
    res.checks = (
        nemesis_checks(res.metrics, partitions)
        if metrics
        else [Check("checker produced metrics", False, "none")]
    )
