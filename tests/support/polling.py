"""Polling with a deadline: the one implementation tests use to wait for a condition (no
fixed sleeps; the failure names what was awaited and the last value seen)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["wait_until", "wait_for"]


def wait_until(
    cond: Callable[[], Any],
    what: str,
    timeout: float = 30.0,
    *,
    interval: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Call ``cond`` until it returns a truthy value (returned) or ``timeout`` passes.

    ``retry_on``: exceptions that mean "not yet" (a ZooKeeper session or a broker going
    away during a fault); anything else propagates at once.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = cond()
        except retry_on as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:.1f} s waiting for {what} (last: {last!r})"
            )
        time.sleep(interval)


def wait_for(
    cond: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.1,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """``wait_until`` with the (condition, timeout, message) argument order of the
    replication and controller tests."""
    return wait_until(cond, what, timeout, interval=interval, retry_on=retry_on)
