"""The simulator's event loop (odradek.sim.loop): virtual time jumps to the next timer,
executor work runs on the loop after a seeded latency, and nothing blocks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from odradek.sim.loop import Deadlock, SimLoop, sleep


def test_virtual_time_jumps_to_the_next_timer() -> None:
    loop = SimLoop(1)
    try:
        t0 = time.monotonic()
        loop.run_until_complete(asyncio.sleep(3600))
        assert loop.time() == pytest.approx(3600)
        assert time.monotonic() - t0 < 5  # an hour of virtual time, no wall time
    finally:
        loop.close()


def test_executor_work_runs_on_the_loop_thread_after_a_seeded_latency() -> None:
    import threading

    def where() -> str:
        return threading.current_thread().name

    def run(seed: int) -> tuple[str, float]:
        loop = SimLoop(seed)
        try:
            name = loop.run_until_complete(asyncio.to_thread(where))
            return name, loop.time()
        finally:
            loop.close()

    name, t = run(5)
    assert name == threading.current_thread().name
    assert 0 < t < 0.05
    assert run(5) == (name, t)  # the same seed, the same latency


def test_waiting_on_nothing_is_a_deadlock_not_a_hang() -> None:
    loop = SimLoop(1)
    try:
        with pytest.raises(Deadlock):
            loop.run_until_complete(loop.create_future())
    finally:
        loop.close()


def test_the_hook_runs_once_at_the_end_of_each_virtual_instant() -> None:
    loop = SimLoop(1)
    seen: list[float] = []
    loop.before_advance = lambda: seen.append(loop.time())

    async def main() -> None:
        loop.call_later(1.0, lambda: None)
        loop.call_later(1.0, lambda: None)
        await asyncio.sleep(0.5)
        await asyncio.sleep(0)  # same instant: no jump, no call
        await asyncio.sleep(2.0)

    try:
        loop.run_until_complete(main())
        assert seen == [0.0, 0.5, 1.0]
    finally:
        loop.close()


class _AsyncioScheduling(SimLoop):
    """SimLoop with asyncio's own timer heap and loop step (what SimLoop replaced)."""

    call_at = asyncio.BaseEventLoop.call_at  # type: ignore[assignment]
    call_later = asyncio.BaseEventLoop.call_later  # type: ignore[assignment]
    call_soon = asyncio.BaseEventLoop.call_soon  # type: ignore[assignment]
    _run_once = asyncio.BaseEventLoop._run_once  # type: ignore[attr-defined]


def _timer_storm(loop: SimLoop) -> list[int]:
    """Timers due at the same instants (ties), cancelled ones (enough for asyncio to
    rebuild its heap), and timers that schedule more timers."""
    import random

    rng = random.Random(7)
    ran: list[int] = []
    handles: list[asyncio.TimerHandle] = []

    def fire(i: int) -> None:
        ran.append(i)
        if rng.random() < 0.3:
            handles.append(loop.call_later(rng.choice([0.0, 0.25, 0.5]), fire, 1000 + i))
        if handles and rng.random() < 0.3:
            handles[rng.randrange(len(handles))].cancel()

    async def main() -> None:
        for i in range(600):
            handles.append(loop.call_at(rng.choice([0.5, 1.0, 1.0, 1.5, 2.0]), fire, i))
            if rng.random() < 0.4:
                handles[-1].cancel()
        await asyncio.sleep(5.0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return ran


def test_timers_run_in_the_order_asyncio_s_own_heap_gives_them() -> None:
    """SimLoop heaps (when, handle) tuples instead of TimerHandles (cheaper compares):
    a seed's runs stay the same only if timers due at the same instant -- whose order
    asyncio leaves to its heap's moves -- run in the order asyncio's loop runs them."""
    ran = _timer_storm(SimLoop(1))
    assert ran == _timer_storm(_AsyncioScheduling(1))
    assert len(ran) > 400 and any(i >= 1000 for i in ran)


def test_an_exception_in_a_callback_goes_to_the_exception_handler() -> None:
    loop = SimLoop(1)
    got: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, ctx: got.append(ctx))

    def boom() -> None:
        raise ValueError("boom")

    try:
        loop.call_soon(boom)
        loop.call_later(1.0, boom)
        loop.run_until_complete(asyncio.sleep(2.0))
    finally:
        loop.close()
    assert [type(c["exception"]) for c in got] == [ValueError, ValueError]
    assert all(str(c["message"]).startswith("Exception in callback") for c in got)


def _sleeper_storm(nap: Callable[[float], Awaitable[None]]) -> list[tuple[float, int]]:
    """Tasks waking at the same instants (ties), tasks cancelled mid-sleep, and plain
    callbacks due at those instants too: who runs when, in order."""
    import random

    loop = SimLoop(1)
    rng = random.Random(3)
    ran: list[tuple[float, int]] = []

    async def task(i: int) -> None:
        for _ in range(4):
            await nap(rng.choice([0.25, 0.5, 0.5, 1.0]))
            ran.append((loop.time(), i))

    def tick(i: int) -> None:
        # And one loop turn later, the turn in which a task whose timer fired with this
        # one wakes up: a wake-up a turn early or late moves it past this line.
        ran.append((loop.time(), -i))
        loop.call_soon(ran.append, (loop.time(), -1000 - i))

    async def main() -> None:
        tasks = [loop.create_task(task(i)) for i in range(60)]
        for i in range(1, 41):
            loop.call_at(rng.choice([0.25, 0.5, 1.0, 1.5]), tick, i)
        await nap(0.5)
        for t in tasks[::7]:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return ran


def test_the_simulators_sleep_wakes_tasks_in_asyncio_sleep_s_order() -> None:
    """``odradek.sim.loop.sleep`` is asyncio.sleep made cheaper: a seed's runs stay the
    same only if every task wakes in the same turn and order as with asyncio's."""
    ran = _sleeper_storm(sleep)
    assert ran == _sleeper_storm(asyncio.sleep)
    assert len(ran) > 150 and any(i <= -1000 for _, i in ran)
