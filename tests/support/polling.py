"""Polling with a deadline: the one helper tests use to wait for a condition (no fixed
sleeps; the failure names what was awaited)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T], what: str, timeout: float = 30.0,
               interval: float = 0.05) -> T:
    """Call ``cond`` until it returns a truthy value (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)
