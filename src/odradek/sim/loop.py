"""A deterministic asyncio event loop: one thread, virtual time, seeded executor latency.

Everything the simulated cluster does runs as callbacks of this loop, in asyncio's own
order (FIFO ready queue, timers by deadline, ties by insertion). What makes a run a pure
function of its seed:

* **Virtual time.** ``time()`` is a counter. When nothing is runnable the "selector" does
  not block: it advances the counter to the next timer (``BaseEventLoop._run_once`` asks
  it to wait exactly that long) -- a 10-second lag timeout costs no wall time.
* **No threads.** ``run_in_executor`` (hence ``asyncio.to_thread``: the ISR writes of
  replication/alter_partition.py) runs the function on the loop, as a timer after a
  latency drawn from the seeded RNG -- the worker thread's scheduling, made a seeded
  choice. ``call_soon_threadsafe`` is ``call_soon``: there is no other thread.
* **No I/O.** The selector has nothing registered; the simulated network is made of
  futures and timers (``odradek.sim.world``). A loop with nothing runnable and no timer
  is a deadlock, reported as such instead of blocking forever.

``looptime`` (PyPI) fast-forwards a loop's clock the same way, but keeps a real selector
and real executor threads, which can wake the loop in an order no seed decides; the
simulator needs both gone, which is ~80 lines here.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from concurrent.futures import Executor
from contextvars import Context
from typing import Any, TypeVar, TypeVarTuple

__all__ = ["Deadlock", "SimLoop"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Deadlock(RuntimeError):
    """Nothing runnable and no timer pending: the simulation cannot make progress."""


class _VirtualSelector:
    """What ``BaseEventLoop._run_once`` calls with the time to the next timer."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise Deadlock("no runnable callback and no timer")
        if timeout > 0:
            hook = self._loop.before_advance
            if hook is not None:
                hook()
            self._loop.advance(timeout)
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    def __init__(
        self,
        seed: int = 0,
        *,
        start: float = 0.0,
        executor_latency_s: tuple[float, float] = (0.0005, 0.02),
    ) -> None:
        super().__init__()
        self._now = start
        self._selector = _VirtualSelector(self)
        self._clock_resolution = 1e-9
        self._rng = random.Random(f"executor-{seed}")
        self._latency = executor_latency_s
        self.steps = 0  # callbacks run: a cheap progress measure
        # Called at the end of each virtual instant (nothing left runnable, time about
        # to jump): the simulator's monitors look at the world there, instead of waking
        # up on a timer of their own.
        self.before_advance: Callable[[], None] | None = None

    # ---------------------------------------------------------------- virtual time
    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    # ---------------------------------------------------------------- one thread
    def call_soon_threadsafe(
        self,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: Context | None = None,
    ) -> asyncio.Handle:
        return self.call_soon(callback, *args, context=context)

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        fut: asyncio.Future[T] = self.create_future()

        def run() -> None:
            if fut.cancelled():
                return
            try:
                fut.set_result(func(*args))
            except BaseException as e:  # noqa: BLE001 - delivered to the awaiting task
                fut.set_exception(e)

        lo, hi = self._latency
        self.call_later(self._rng.uniform(lo, hi), run)
        return fut

    # ---------------------------------------------------------------- BaseEventLoop hooks
    def _process_events(self, event_list: list[Any]) -> None:
        self.steps += 1

    def _write_to_self(self) -> None:
        pass
