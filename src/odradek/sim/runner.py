"""One simulated run per seed: build the world on a fresh ``SimLoop``, run the nemesis and
the workload, heal, wait for liveness, check every invariant. Everything a run does is
a function of its seed (and the injected bug, if any): its timeline, hashed, is the
same on every replay.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from odradek.runtime import clock
from odradek.sim import bugs
from odradek.sim.checkers import Violation, lost_acks, prefix_divergence, unledgered_losses
from odradek.sim.clients import WORKLOAD_SEGMENT_BYTES, Workload
from odradek.sim.disk import SimDisk, recording
from odradek.sim.gate import GatedSimLoop
from odradek.sim.harness import TOPIC
from odradek.sim.isr_registered import IsrRegisteredCheck
from odradek.sim.loop import SimLoop
from odradek.sim.pause import (
    TIMEOUTS_PROFILE,
    GatedNetwork,
    PauseHarness,
    PauseWorld,
    check_profile,
)
from odradek.sim.power import PowerLossWorld
from odradek.sim.schedule import Step
from odradek.sim.world import SimHarness, SimNetwork, World, WorldConfig
from odradek.storage.batch import parse_batches
from odradek.storage.records import decode_batch_records
from odradek.storage.truncation_ledger import ledger_root, list_entries

__all__ = ["RunResult", "run_seed"]

# Virtual wall clock at the start of every run: a fixed instant, so record timestamps
# (and anything else derived from the wall clock) are the same on every replay.
EPOCH_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z


@dataclass
class RunResult:
    seed: int
    bug: str | None
    timeline: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    acked: int = 0
    virtual_s: float = 0.0
    schedule: list[Step] = field(default_factory=list)  # the faults, replayable
    profile: str = "default"  # the nemesis profile the run used (a replay uses it too)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.timeline).encode()).hexdigest()


class _LogToTimeline(logging.Handler):
    """The runtime's warnings (truncations) go to the timeline; an error it logs (an
    exception a fetcher caught, a failed quarantine) is also a violation: the simulator
    must not let the code under test swallow one. The run's temporary directory is
    elided so the timeline stays the same on every replay."""

    def __init__(self, root: str, trace: Callable[[str], None], result: RunResult) -> None:
        super().__init__(logging.WARNING)
        self.root, self.trace, self.result = root, trace, result

    def emit(self, record: logging.LogRecord) -> None:
        msg = f"{record.name}: {record.getMessage()}".replace(self.root, "<dir>")
        if record.exc_info and record.exc_info[1] is not None:
            msg += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        self.trace(f"log {record.levelname}: {msg}")
        if record.levelno >= logging.ERROR:
            self.result.violations.append(Violation("logged-error", msg))


@contextmanager
def _logs_to_timeline(handler: logging.Handler) -> Iterator[None]:
    """INFO logs (each retried fetch) would cost more than the run itself: warnings and
    up only, kept out of the process's own log handlers."""
    log = logging.getLogger("odradek")
    level, propagate = log.level, log.propagate
    log.setLevel(logging.WARNING)
    log.propagate = False
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate


@contextmanager
def _virtual_clock(loop: SimLoop) -> Iterator[None]:
    start = loop.time()
    # The wall clock reads the loop's counter itself (``loop.time()`` is ``_now``): one
    # call less for each of the ~7,000 reads a schedule makes.
    clock.install(loop.time, lambda: EPOCH_NS + round((loop._now - start) * 1e9))
    try:
        yield
    finally:
        clock.restore()


def run_seed(
    seed: int,
    *,
    bug: str | None = None,
    cfg: WorldConfig | None = None,
    profile: str = "default",
    plan: list[Step] | None = None,
    skip: frozenset[int] = frozenset(),
    timeline: bool = True,
) -> RunResult:
    """One run. ``profile``: ``default``, ``power-loss`` (odradek.sim.power: the
    fsyncs are recorded and the nemesis also cuts a broker's power), ``pause``
    (odradek.sim.pause: the nemesis also freezes a broker, as SIGSTOP, or stalls its
    event loop), or ``pause-timeouts`` (``pause`` with the clients' request and delivery
    timeouts shorter than the pauses, ``TIMEOUTS_PROFILE``, unless ``cfg`` sets them). ``plan``: replay this fault schedule (``RunResult.schedule`` of an
    earlier run of the seed) instead of drawing one, without the faults in ``skip``. ``timeline=False`` (``sim run``:
    only the violations are printed) keeps no timeline and skips building its most
    frequent lines; the run itself is the same."""
    cfg = cfg or WorldConfig()
    result = RunResult(seed, bug, profile=profile)
    gated = profile in ("pause", "pause-timeouts")
    if gated:
        check_profile(cfg.real_controller)
    if profile == "pause-timeouts" and cfg.request_timeout_s is None:
        request_s, delivery_s = TIMEOUTS_PROFILE
        cfg = replace(cfg, request_timeout_s=request_s, delivery_timeout_s=delivery_s)
    loop = GatedSimLoop(seed) if gated else SimLoop(seed)
    disk = SimDisk(scratch=_scratch_dir()) if profile == "power-loss" else None
    disk_ctx: AbstractContextManager[object] = recording(disk) if disk else nullcontext()

    def trace(line: str) -> None:
        if timeline:
            result.timeline.append(f"{loop.time():9.3f} {line}")

    def on_error(_loop: object, ctx: dict[str, object]) -> None:
        exc = ctx.get("exception")
        what = f"{type(exc).__name__}: {exc}" if exc is not None else str(ctx.get("message"))
        trace(f"unhandled: {what}")
        result.violations.append(Violation("exception", what))

    loop.set_exception_handler(on_error)
    with (
        tempfile.TemporaryDirectory(prefix=f"odradek-sim-{seed}-", dir=_scratch_dir()) as d,
        _logs_to_timeline(_LogToTimeline(d, trace, result)),
        _virtual_clock(loop),
        bugs.injected(bug),
        disk_ctx,
    ):
        try:
            loop.run_until_complete(
                _run(Path(d), seed, cfg, trace, result, disk, plan, skip, timeline)
            )
        finally:
            loop.before_advance = None
            if isinstance(loop, GatedSimLoop):
                loop.resume_all()  # a task held behind a gate could not be cancelled
            loop.run_until_complete(_cancel_all())
            loop.close()
    result.virtual_s = loop.time()
    return result


def _scratch_dir() -> str | None:
    """The brokers' log directories go to memory when the machine has a tmpfs: the
    simulator's logs are small and die with the run, and every fsync, rename and unlink
    the storage code does costs next to nothing there (None: the default temp dir)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


async def _cancel_all() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _run(
    root: Path,
    seed: int,
    cfg: WorldConfig,
    trace: Callable[[str], None],
    result: RunResult,
    disk: SimDisk | None,
    plan: list[Step] | None,
    skip: frozenset[int],
    timeline: bool,
) -> None:
    gated = isinstance(asyncio.get_running_loop(), GatedSimLoop)
    net = (GatedNetwork if gated else SimNetwork)(
        random.Random(f"network-{seed}"), cfg.hop_latency_s
    )
    h = (PauseHarness if gated else SimHarness)(
        root,
        brokers=cfg.brokers,
        partitions=cfg.partitions,
        lag_ms=cfg.lag_ms,
        min_insync_replicas=cfg.min_insync_replicas,
        fetch_wait_ms=cfg.fetch_wait_ms,
        backoff_ms=cfg.backoff_ms,
        net=net,
        seed=seed,
        trace=trace,
        watch_latency_s=cfg.watch_latency_s,
        real_controller=cfg.real_controller,
        session_timeout_s=cfg.session_timeout_s,
        first_controller=cfg.first_controller,
        restart_delay_s=cfg.restart_delay_s,
        tracing=timeline,
        # Small segments for the client workloads, except under power loss: the
        # simulated broker has no flusher, which in production fsyncs each rolled
        # segment (Kafka's flush at roll), so the disk model would tear rolled segments
        # no broker leaves torn (seed 137 of power-loss, docs/faults.md).
        segment_bytes=(
            cfg.segment_bytes
            if cfg.segment_bytes is not None or cfg.workload == "plain" or disk is not None
            else WORKLOAD_SEGMENT_BYTES
        ),
    )
    async with h:
        w: World
        if gated:
            w = PauseWorld(h, cfg, seed, trace, net, tracing=timeline)
        elif disk is None:
            w = World(h, cfg, seed, trace, net, tracing=timeline)
        else:
            w = PowerLossWorld(h, cfg, seed, trace, net, tracing=timeline, disk=disk)
        if cfg.real_controller:
            # The controller elects broker brokers[p % n] (the assignment's first replica).
            await h.wait_until(lambda: _started(w), "every partition led everywhere")
        else:
            for p in range(cfg.partitions):
                await h.elect(p, leader=cfg.brokers[p % len(cfg.brokers)])
        loop = asyncio.get_running_loop()
        assert isinstance(loop, SimLoop)
        watcher = None
        if cfg.sample_every_s > 0:
            watcher = loop.create_task(w.watch(cfg.sample_every_s))
        else:
            loop.before_advance = w.sample
        isr_check = IsrRegisteredCheck(w) if cfg.real_controller else None
        if isr_check is not None and watcher is None:

            def at_instant_end() -> None:
                w.sample()
                isr_check()

            loop.before_advance = at_instant_end
        wl = None
        if cfg.workload == "plain":
            producers = [loop.create_task(w.producer(k)) for k in range(cfg.producers)]
        else:
            wl = Workload(w, cfg.workload)
            producers = wl.start()
        w.workload = producers
        await w.nemesis(plan, skip)
        result.schedule = w.schedule if plan is None else plan
        w.stopping = True
        await asyncio.gather(*producers)
        converged = await _await_liveness(w, cfg.liveness_bound_s, wl)
        w.sample()
        if isr_check is not None:
            isr_check()
        loop.before_advance = None
        if watcher is not None:
            watcher.cancel()
        result.violations += w.violations + w.monitor.violations
        if not converged:
            more = f"; {wl.state()}" if wl is not None else ""
            result.violations.append(Violation("liveness", _state(w) + more))
        # acks=1 may lose acknowledged records (REQ-R8), but only what a truncation put
        # in the lost-records ledger. Not under power loss: a record the leader had not
        # fsynced goes with the power, in no ledger (Kafka's acks=1 loses it the same way).
        ledger = wl is not None and cfg.acks == 1
        final = _final_checks(
            w, _ledgered(h.root, cfg.brokers) if ledger and disk is None else None
        )
        if wl is not None:
            if ledger:
                final = [v for v in final if v.invariant != "acked-lost"]
            logs = {p: {b: _committed(w, b, p) for b in cfg.brokers} for p in w.controller.znodes}
            final += wl.final_checks(logs)
        result.violations += final
        result.acked = len(w.acks)
        trace(f"end: {len(w.acks)} acked; {_state(w)}")


def _started(w: World) -> bool:
    zs = w.controller.znodes
    return all(
        zs[p].leader >= 0
        and all(
            (part := w.h.replicas[b].partitions.get((TOPIC, p))) is not None
            and part.leader_epoch == zs[p].leader_epoch
            for b in w.cfg.brokers
        )
        for p in range(w.cfg.partitions)
    )


def _state(w: World) -> str:
    parts = []
    for p, z in sorted(w.controller.znodes.items()):
        reps = ", ".join(f"{b}: leo {w.leo(b, p)} hw {_hw(w, b, p)}" for b in w.cfg.brokers)
        a = w.controller.assignment[p]
        moved = f" replicas {list(a.replicas)}" if set(a.replicas) != set(w.cfg.brokers) else ""
        if a.in_progress:
            moved += f" adding {list(a.adding)} removing {list(a.removing)}"
        parts.append(
            f"p{p} leader {z.leader} epoch {z.leader_epoch} isr {list(z.isr)}{moved} ({reps})"
        )
    return "; ".join(parts)


def _hw(w: World, b: int, p: int) -> int:
    part = w.h.replicas[b].partitions.get((TOPIC, p))
    return part.high_watermark if part is not None else -1


def _converged(w: World) -> bool:
    for p, z in w.controller.znodes.items():
        if z.leader < 0 or set(z.isr) != set(w.cfg.brokers):
            return False
        moving = w.controller.assignment[p]
        if moving.in_progress or set(moving.replicas) != set(w.cfg.brokers):
            return False
        leo = w.leo(z.leader, p)
        if any(w.leo(b, p) != leo or _hw(w, b, p) != leo for b in w.cfg.brokers):
            return False
    return True


async def _await_liveness(w: World, bound_s: float, wl: Workload | None = None) -> bool:
    """Every partition led with its full ISR and caught up (and, for the workloads of
    odradek.sim.clients, every transaction ended and every consumer at the log end)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while not (_converged(w) and (wl is None or wl.settled())):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)
    w.trace(f"converged {loop.time() - deadline + bound_s:.3f} s after healing")
    return True


def _committed(w: World, b: int, p: int) -> bytes:
    part = w.h.replicas[b].partitions.get((TOPIC, p))
    if part is None:
        return b""
    lg = part.log
    hw = part.high_watermark
    out = b""
    offset = lg.log_start_offset
    while offset < hw:  # a read stops at its segment's end
        sl = lg.read(offset, 1 << 30, max_offset=hw)
        data = sl.read_bytes() if sl is not None else b""
        if not data:
            break
        out += data
        offset = parse_batches(data)[-1].next_offset
    return out


def _ledgered(root: Path, brokers: tuple[int, ...]) -> set[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record in the brokers' lost-records ledgers."""
    out = set()
    for b in brokers:
        for entry in list_entries(ledger_root(root / f"broker-{b}"), TOPIC):
            out |= {(r.partition, r.offset, r.value or b"") for r in entry.iter_records()}
    return out


def _final_checks(w: World, ledgered: set[tuple[int, int, bytes]] | None = None) -> list[Violation]:
    """``ledgered`` (acks=1): what the lost-records ledgers hold; an acknowledged record
    missing from the committed log is then a violation only if they do not hold it."""
    out: list[Violation] = []
    committed: dict[int, dict[int, bytes]] = {}
    for p, z in w.controller.znodes.items():
        prefixes = {b: _committed(w, b, p) for b in w.cfg.brokers}
        out += prefix_divergence(p, prefixes)
        source = z.leader if z.leader >= 0 else max(prefixes, key=lambda b: len(prefixes[b]))
        values: dict[int, bytes] = {}
        buf = prefixes[source]
        for hdr in parse_batches(buf):
            for rec in decode_batch_records(buf[hdr.position : hdr.position + hdr.size]):
                values[rec.offset] = rec.value or b""
        committed[p] = values
    if ledgered is None:
        out += lost_acks(w.acks, committed)
    else:
        out += unledgered_losses(w.acks, committed, ledgered)
    return out
