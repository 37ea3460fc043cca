"""Process bookkeeping by pid, for processes we may or may not be the parent of.

``odradek cluster up`` exits after launching the nodes, so a later ``down`` or
``stop-broker`` only has the pids in cluster.json. A pid alone can be reused by an
unrelated process after ours died, so every pid is paired with its start time
(``/proc/<pid>/stat`` field 22): a pid whose start time differs is "dead".
When we *are* the parent we must also reap killed children or they stay zombies
(docs/platform-notes.md); ``terminate`` does that via the ``Popen`` when given, else ``waitpid``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

__all__ = ["proc_start_time", "proc_state", "alive", "is_stopped", "terminate", "wait_dead"]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may contain spaces and parentheses; it ends at the
    # last ')'. Fields after it start with field 3 (state).
    return raw[raw.rfind(")") + 2 :].split()


def proc_start_time(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[19]) if f and len(f) > 19 else None  # field 22 = index 19 after ')'


def proc_state(pid: int) -> str | None:
    """One-letter state (R running, S sleeping, T stopped, Z zombie...), None if gone."""
    f = _stat_fields(pid)
    return f[0] if f else None


def _reap(pid: int, popen: subprocess.Popen[bytes] | None) -> None:
    if popen is not None:
        popen.poll()
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: its parent (or init) reaps it


def alive(pid: int | None, start_time: int | None = None) -> bool:
    """True if ``pid`` exists, is not a zombie and (if given) started at ``start_time``."""
    if not pid:
        return False
    state = proc_state(pid)
    if state is None or state in ("Z", "X"):
        return False
    return start_time is None or proc_start_time(pid) == start_time


def is_stopped(pid: int | None, start_time: int | None = None) -> bool:
    """SIGSTOPped (state T)."""
    return alive(pid, start_time) and proc_state(pid or 0) in ("T", "t")


def wait_dead(
    pid: int,
    start_time: int | None,
    timeout: float,
    popen: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Poll (reaping) until the process is gone; False if still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        _reap(pid, popen)
        if not alive(pid, start_time):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def terminate(
    pid: int | None,
    start_time: int | None,
    timeout: float = 15.0,
    *,
    sig: int = signal.SIGTERM,
    popen: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Send ``sig`` (after SIGCONT, as a stopped process cannot act on TERM), wait up
    to ``timeout``, then SIGKILL. Returns True if it exited within ``timeout`` without
    needing the KILL (always True for ``sig=SIGKILL``)."""
    if not pid or not alive(pid, start_time):
        if pid:
            _reap(pid, popen)
        return True
    if sig != signal.SIGKILL:
        _send(pid, signal.SIGCONT)
    _send(pid, sig)
    if wait_dead(pid, start_time, timeout, popen):
        return True
    _send(pid, signal.SIGKILL)
    wait_dead(pid, start_time, 10.0, popen)
    return False
