"""``isr-unregistered``: what KIP-841 protects, as an invariant of every simulated run on
the real controller (odradek.sim.zk_cluster).

An ISR must not name a follower that is not registered (whose ZooKeeper session ended:
dead, or alive but fenced) for longer than it takes the controller to notice: Kafka's
controller refuses such an ISR change (KIP-841), Odradek's undoes the leader's write when
its notification arrives (``Controller._undo_ineligible``), a watch delay later. The
check allows ``UNREGISTERED_BOUND_S`` of time in which an active controller runs
(registered, reaching ZooKeeper, up, its thread not paused: ``odradek.sim.gate``); the
partition's leader and a leaderless partition's last ISR member are not counted (the
controller moves or keeps those on purpose).
"""

from __future__ import annotations

import asyncio

from odradek.sim.checkers import Violation
from odradek.sim.gate import GatedSimLoop
from odradek.sim.world import World
from odradek.sim.zk_cluster import ZkCluster

__all__ = ["UNREGISTERED_BOUND_S", "IsrRegisteredCheck"]

UNREGISTERED_BOUND_S = 1.0


class IsrRegisteredCheck:
    """Called at the end of each virtual instant (the runner's ``before_advance``)."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.seen: dict[tuple[int, int], float] = {}  # (partition, broker) -> since when
        self.reported: set[tuple[int, int]] = set()
        self._zxid = -1
        # Looked up once: the check runs at the end of every virtual instant (~7,000 a
        # schedule) and nearly always stops at the zxid.
        c = w.controller
        self._c = c if isinstance(c, ZkCluster) else None
        self._model = c.ensemble.model if isinstance(c, ZkCluster) else None

    def __call__(self) -> None:
        c, model = self._c, self._model
        if c is None or model is None:
            return
        zxid = model.zxid
        if zxid == self._zxid and not self.seen:
            return  # ISRs and registrations are znodes: unchanged, nothing pending
        self._zxid = zxid
        w = self.w
        now = w.now()
        registered = c.registered
        cid = c.controller_id
        loop = asyncio.get_running_loop()
        acting = (
            cid in registered
            and cid not in c.unreachable
            and cid not in w.h.down
            and not (isinstance(loop, GatedSimLoop) and loop.paused(-cid))
        )
        seen = self.seen
        for p, z in c.znodes.items():
            for b in w.cfg.brokers:
                key = (p, b)
                if z.leader < 0 or b == z.leader or b not in z.isr or b in registered:
                    seen.pop(key, None)
                    continue
                if not acting:
                    seen[key] = now  # the clock runs only while a controller could act
                    continue
                since = seen.setdefault(key, now)
                if now - since > UNREGISTERED_BOUND_S and key not in self.reported:
                    self.reported.add(key)
                    w.violations.append(
                        Violation(
                            "isr-unregistered",
                            f"p{p} ISR {list(z.isr)} (leader {z.leader}) names broker {b}, "
                            f"unregistered since {since:.3f} at least, at {now:.3f} "
                            f"(controller {cid} active)",
                        )
                    )
