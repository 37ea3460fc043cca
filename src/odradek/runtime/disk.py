"""The disk's durability behind one seam: every fsync the storage layer asks for goes
through this module, so the deterministic simulator (``odradek.sim.disk``) can record what
each one made durable and later leave a broker's directory as a power cut would.

As with ``odradek.runtime.clock``, the names below *are* ``os.fsync`` / ``os.fdatasync``
(module-level aliases, not wrappers) and call sites spell them ``disk.fsync(fd)``: one
module attribute lookup more than ``os.fsync(fd)``, no wrapper call -- production pays
nothing. Call sites import the module, never the names, so ``install`` reaches them;
tests/unit/test_disk_seam.py checks both.

``replace_durably`` is Kafka's ``Utils.atomicMoveWithFallback(tmp, target, true)``: the
rename of a checkpoint (or any file written tmp-fsync-rename) over its target, then an
fsync of the directory -- without it a power cut can undo the rename and bring back the
old file (or no file), whatever the new one's own fsync made durable.

``install``/``restore`` are for the simulator only (one thread); a broker never calls them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["fsync", "fdatasync", "install", "restore", "replace_durably", "fsync_directory"]

fsync: Callable[[int], None] = os.fsync  # data and metadata of a file, or a directory's entries
fdatasync: Callable[[int], None] = os.fdatasync  # data and the size that finds it


def replace_durably(tmp: Path | str, target: Path | str) -> None:
    """Rename ``tmp`` over ``target`` and fsync their directory (``tmp`` is already
    fsynced by the caller): afterwards a power cut leaves the new file, before it the
    old one. Blocking (one directory fsync): worker threads, or rare writes on the loop."""
    os.replace(tmp, target)
    fsync_directory(Path(target).parent)


def fsync_directory(directory: Path | str) -> None:
    """Make the creations, renames and unlinks in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)  # the module global: the simulator's recording disk when installed
    finally:
        os.close(fd)


def install(fsync_fn: Callable[[int], None], fdatasync_fn: Callable[[int], None]) -> None:
    """Route the seam elsewhere (the simulator's recording disk)."""
    global fsync, fdatasync
    fsync, fdatasync = fsync_fn, fdatasync_fn


def restore() -> None:
    """Back to the real system calls."""
    install(os.fsync, os.fdatasync)
