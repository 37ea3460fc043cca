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
simulator needs both gone, which is ~80 lines here. The rest (``call_at`` ..
``_run_once``) is asyncio's own scheduling made cheaper, in the same order.
"""

from __future__ import annotations

import asyncio
import random
from asyncio import base_events, events, format_helpers, futures
from collections.abc import Callable
from concurrent.futures import Executor
from contextvars import Context, copy_context
from heapq import heapify, heappop, heappush
from typing import Any, TypeVar, TypeVarTuple

__all__ = ["Deadlock", "SimLoop", "sleep"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_b: Any = base_events  # its constants are not in the stubs
_MIN_SCHEDULED_TIMER_HANDLES: int = _b._MIN_SCHEDULED_TIMER_HANDLES
_MIN_CANCELLED_TIMER_HANDLES_FRACTION: float = _b._MIN_CANCELLED_TIMER_HANDLES_FRACTION
_MAXIMUM_SELECT_TIMEOUT: float = _b.MAXIMUM_SELECT_TIMEOUT


_Handle = events.Handle
_TimerHandle = events.TimerHandle
_new_handle = object.__new__


def _init_handle(
    h: Any,
    callback: Callable[..., object],
    args: tuple[Any, ...],
    loop: SimLoop,
    context: Context | None,
) -> None:
    """``Handle.__init__`` without its ``loop.get_debug()`` call (the simulator never
    runs in asyncio's debug mode, which would record the caller's stack): two Python
    calls less for each of the ~32,000 callbacks of a schedule. ``call_soon`` and
    ``call_at`` share it (inlining it in both saved one call more, under 1 % of a run)."""
    h._context = context if context is not None else copy_context()
    h._loop = loop
    h._callback = callback
    h._args = args
    h._cancelled = False
    h._repr = None
    h._source_traceback = None


class Deadlock(RuntimeError):
    """Nothing runnable and no timer pending: the simulation cannot make progress."""


class _VirtualSelector:
    """What ``BaseEventLoop._run_once`` calls with the time to the next timer. SimLoop's
    own ``_run_once`` does the same inline; this serves asyncio's (the reference the
    tests compare SimLoop's scheduling with)."""

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

    # ---------------------------------------------------------------- timers
    # asyncio's loop heaps TimerHandles, whose ``__lt__`` is Python code run ~900,000
    # times a minute of simulation; this one heaps ``(when, handle)`` tuples, compared
    # in C. The order is the same: a tuple compares its ``when`` first, and on a tie
    # ``TimerHandle.__eq__``/``__lt__`` (both on ``_when``) leave it unordered exactly
    # as before, so heapq makes the same moves and a seed's runs are unchanged.
    # ``_run_once`` is BaseEventLoop's (Python 3.11-3.13) with the heap's items as
    # tuples and no debug branch (the simulator never runs in asyncio debug mode).
    def call_later(
        self,
        delay: float,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        return self.call_at(self._now + delay, callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: Context | None = None,
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        base: Any = self  # BaseEventLoop's private fields are not in its stubs
        if base._closed:
            raise RuntimeError("Event loop is closed")
        timer: Any = _new_handle(_TimerHandle)
        _init_handle(timer, callback, args, self, context)
        timer._when = when
        heappush(base._scheduled, (when, timer))
        timer._scheduled = True
        return timer

    def call_soon(
        self, callback: Callable[[*Ts], object], *args: *Ts, context: Context | None = None
    ) -> asyncio.Handle:
        base: Any = self
        if base._closed:
            raise RuntimeError("Event loop is closed")
        handle: Any = _new_handle(_Handle)
        _init_handle(handle, callback, args, self, context)
        base._ready.append(handle)
        return handle

    def _run_once(self) -> None:
        base: Any = self
        scheduled: list[tuple[float, Any]] = base._scheduled
        n = len(scheduled)
        if (
            n > _MIN_SCHEDULED_TIMER_HANDLES
            and base._timer_cancelled_count / n > _MIN_CANCELLED_TIMER_HANDLES_FRACTION
        ):
            kept = []
            for item in scheduled:
                if item[1]._cancelled:
                    item[1]._scheduled = False
                else:
                    kept.append(item)
            heapify(kept)
            base._scheduled = scheduled = kept
            base._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0][1]._cancelled:
                base._timer_cancelled_count -= 1
                heappop(scheduled)[1]._scheduled = False
        ready = base._ready
        # ``self._process_events(self._selector.select(timeout))``, inlined (three
        # Python calls less per turn, ~25,000 turns a schedule): nothing runnable -> end
        # the instant (``before_advance``) and jump to the next timer, in the same float
        # steps as ``advance(timeout)``; nothing at all -> deadlock.
        if not (ready or base._stopping):
            if not scheduled:
                raise Deadlock("no runnable callback and no timer")
            timeout = min(max(0.0, scheduled[0][0] - self._now), _MAXIMUM_SELECT_TIMEOUT)
            if timeout > 0:
                hook = self.before_advance
                if hook is not None:
                    hook()
                self._now += timeout
        self.steps += 1
        end_time = self._now + self._clock_resolution
        while scheduled and scheduled[0][0] < end_time:
            handle = heappop(scheduled)[1]
            handle._scheduled = False
            ready.append(handle)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            # Handle._run, inlined (one Python call less per callback).
            try:
                handle._context.run(handle._callback, *handle._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - reported as Handle._run does
                self._callback_failed(handle, exc)

    def _callback_failed(self, handle: Any, exc: BaseException) -> None:
        cb = format_helpers._format_callback_source(handle._callback, handle._args)
        context = {"message": f"Exception in callback {cb}", "exception": exc, "handle": handle}
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)

    # ---------------------------------------------------------------- BaseEventLoop hooks
    def _process_events(self, event_list: list[Any]) -> None:
        self.steps += 1  # asyncio's ``_run_once`` (SimLoop's counts inline)

    def _write_to_self(self) -> None:
        pass


_set_result_unless_cancelled: Any = futures._set_result_unless_cancelled  # type: ignore[attr-defined]


async def sleep(delay: float) -> None:
    """``asyncio.sleep(delay)`` for the simulator's own hot waits (a network hop, a
    producer's gap), with the same timer and the same wake-up, so a seed's run is
    unchanged: one timer at ``now + delay`` whose callback sets the future the task
    awaits. Only cheaper: no ``call_later`` frame, and the timer is cancelled only when
    the wait is (asyncio cancels the already-fired timer too, which changes nothing)."""
    if delay <= 0:
        await asyncio.sleep(delay)  # asyncio's bare yield, not a timer
        return
    loop: Any = events.get_running_loop()
    fut = loop.create_future()
    h = loop.call_at(loop.time() + delay, _set_result_unless_cancelled, fut, None)
    try:
        await fut
    except BaseException:
        h.cancel()
        raise
