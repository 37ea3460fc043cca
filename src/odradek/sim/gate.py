"""Per-node gates on the simulator's loop: what the ``pause`` profile's SIGSTOP is made of.

Every callback the loop runs belongs to one node: a broker's event loop (the broker's
id, ``b``), a broker's other threads (``-b``: its ZooKeeper client, metadata store and
controller, threads in the real broker), or 0 (the world: the nemesis, the clients, the
network, ZooKeeper itself). Ownership is a context
variable, ``NODE``, so it travels the way asyncio already carries contexts: a task
copies its creator's context, a timer or a future's callback the context it was
scheduled in. The few places where work crosses from one node to another set it
explicitly: a message crossing the simulated network belongs to its receiver from the
moment it is sent (``odradek.sim.pause.GatedNetwork``), a ZooKeeper watch event to the
client it is delivered to, a broker's ZooKeeper threads and image applications to that
broker (``odradek.sim.zk_cluster``, ``odradek.sim.zk_client``), a broker's start to the
broker.

``GatedSimLoop.pause(node)`` closes the node's gate: from then on each of its callbacks
that comes due (a task step, a timer, a message arriving) is held instead of run.
``resume(node)`` queues the held callbacks again in the order asyncio's ``_run_once``
would take them after a loop blocked that long: first what other threads handed the
loop (``call_soon_threadsafe``: ``RANK`` 0, the metadata images), then the messages
that reached its sockets (``RANK`` 1, in the order they arrived), then the rest (timers
that expired meanwhile, ready task steps) in the order they came due. A held callback
whose handle was cancelled meanwhile does not run. SIGSTOP is ``pause(b)`` and
``pause(-b)``; a blocked event loop (a long GC pause, a blocking call), ``pause(b)``
alone.

Only the ``pause`` profile runs on this loop: ``SimLoop`` itself (every other profile)
wraps nothing, so their schedules, and digests, are untouched; there ``owned_by``
returns None and every callback keeps the context it had before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import Context, ContextVar, copy_context
from typing import Any

from odradek.sim.loop import SimLoop

__all__ = ["ARRIVED", "NODE", "RANK", "THREADSAFE", "GatedSimLoop", "owned_by", "run_as"]

NODE: ContextVar[int] = ContextVar("odradek_sim_node", default=0)
RANK: ContextVar[int] = ContextVar("odradek_sim_rank", default=2)
THREADSAFE, ARRIVED = 0, 1  # RANK values (the module docstring)


def _context_of(node: int, rank: int = 2) -> Context:
    ctx = copy_context()
    ctx.run(NODE.set, node)
    if rank != 2:
        ctx.run(RANK.set, rank)
    return ctx


def owned_by(loop: asyncio.AbstractEventLoop, node: int, rank: int = 2) -> Context | None:
    """The context to schedule a callback of ``node`` in (0: the world's, never held);
    None (the caller's, as before) on a loop without gates."""
    if not isinstance(loop, GatedSimLoop):
        return None
    return _context_of(node, rank)


def run_as(node: int, fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn`` with ``node`` owning it and whatever it schedules (a broker starting)."""
    return _context_of(node).run(fn, *args)


class _Gated:
    """One scheduled callback behind its node's gate."""

    __slots__ = ("args", "callback", "ctx", "handle", "loop")

    def __init__(
        self,
        loop: GatedSimLoop,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        ctx: Context,
    ) -> None:
        self.loop, self.callback, self.args, self.ctx = loop, callback, args, ctx
        self.handle: asyncio.Handle | None = None

    def __call__(self) -> None:
        # Runs in ``ctx`` (the handle's context): NODE is the owner as of now -- a task
        # that moved to another node (a message that crossed the network) is gated there.
        held = self.loop._held.get(NODE.get())
        if held is not None:
            held.append(self)
            return
        self.callback(*self.args)

    def again(self) -> None:
        h = self.handle
        if h is not None and h.cancelled():
            return  # cancelled while held (a timeout whose task finished, ...)
        self()


class GatedSimLoop(SimLoop):
    """``SimLoop`` whose callbacks pass their node's gate (the module docstring)."""

    def __init__(self, seed: int = 0, **kw: Any) -> None:
        super().__init__(seed, **kw)
        self._held: dict[int, list[_Gated]] = {}

    def paused(self, node: int) -> bool:
        return node in self._held

    def pause(self, node: int) -> None:
        self._held.setdefault(node, [])

    def resume(self, node: int) -> int:
        """Open the gate; returns how many held callbacks were queued again."""
        held = self._held.pop(node, [])
        held.sort(key=lambda g: g.ctx.get(RANK, 2))  # stable: arrival order within a rank
        for g in held:
            super().call_soon(g.again, context=g.ctx)
        return len(held)

    def resume_all(self) -> None:
        for node in sorted(self._held):
            self.resume(node)

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: Context | None = None
    ) -> asyncio.Handle:
        ctx = copy_context() if context is None else context
        g = _Gated(self, callback, args, ctx)
        g.handle = super().call_soon(g, context=ctx)
        return g.handle

    def call_at(  # type: ignore[override]
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        ctx = copy_context() if context is None else context
        g = _Gated(self, callback, args, ctx)
        h = super().call_at(when, g, context=ctx)
        g.handle = h
        return h
