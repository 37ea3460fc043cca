"""Time behind one seam: every read of the clock by the replication runtime goes through
this module (and the storage log's and the lost-records ledger's wall-clock defaults, on
the simulator's path), so the deterministic simulator (``odradek.sim``) can swap in
virtual time.

In production the names below *are* ``time``'s C functions (module-level aliases, not
wrappers), and call sites spell them ``clock.monotonic()`` -- one module attribute lookup,
exactly what ``time.monotonic()`` costs. Importing the functions themselves
(``from odradek.runtime.clock import monotonic``) would bind them before a simulation
could replace them; call sites therefore import the module, and tests/unit/test_clock.py
checks both the aliases and that the replication package reads time nowhere else.

``install``/``restore`` are for the simulator only: it runs everything on one thread, so a
plain module attribute swap is safe there; a broker never calls them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["monotonic", "time_ns", "wall_ms", "install", "restore"]

monotonic: Callable[[], float] = time.monotonic  # seconds, for intervals and deadlines
time_ns: Callable[[], int] = time.time_ns  # wall clock, ns since the epoch


def wall_ms() -> int:
    """The wall clock in ms since the epoch, through the seam: it reads ``time_ns`` when
    called, so binding this function elsewhere still follows ``install``."""
    return time_ns() // 1_000_000


def install(monotonic_fn: Callable[[], float], time_ns_fn: Callable[[], int]) -> None:
    """Route the seam to other clocks (the simulator's virtual time)."""
    global monotonic, time_ns
    monotonic, time_ns = monotonic_fn, time_ns_fn


def restore() -> None:
    """Back to the real clocks."""
    install(time.monotonic, time.time_ns)
