"""The disk's durability behind one seam: every fsync the storage layer asks for goes
through this module, so the deterministic simulator (``odradek.sim.disk``) can record what
each one made durable and later leave a broker's directory as a power cut would.

As with ``odradek.runtime.clock``, the names below *are* ``os.fsync`` / ``os.fdatasync``
(module-level aliases, not wrappers) and call sites spell them ``disk.fsync(fd)``: one
module attribute lookup more than ``os.fsync(fd)``, no wrapper call -- production pays
nothing. Call sites import the module, never the names, so ``install`` reaches them;
tests/unit/test_disk_seam.py checks both.

``install``/``restore`` are for the simulator only (one thread); a broker never calls them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["fsync", "fdatasync", "install", "restore"]

fsync: Callable[[int], None] = os.fsync  # data and metadata of a file, or a directory's entries
fdatasync: Callable[[int], None] = os.fdatasync  # data and the size that finds it


def install(fsync_fn: Callable[[int], None], fdatasync_fn: Callable[[int], None]) -> None:
    """Route the seam elsewhere (the simulator's recording disk)."""
    global fsync, fdatasync
    fsync, fdatasync = fsync_fn, fdatasync_fn


def restore() -> None:
    """Back to the real system calls."""
    install(os.fsync, os.fdatasync)
