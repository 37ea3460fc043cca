"""The simulator's event loop (odradek.sim.loop): virtual time jumps to the next timer,
executor work runs on the loop after a seeded latency, and nothing blocks."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.sim.loop import Deadlock, SimLoop


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
