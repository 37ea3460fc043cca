"""Log lines that hostile clients can trigger, without letting them fill the disk.

A client that sends 100,000 malformed frames must not produce 100,000 log lines (the
broker's log directory is usually on the same disk as its data), yet an operator must
see that it happened and from where. ``LogLimiter`` lets the first lines of each kind
through, then at most one line per ``interval_s`` per kind, saying how many were
suppressed meanwhile. Kinds are caller-chosen keys (e.g. ``("malformed", ip)`` or the
site of an unexpected exception) and their number is bounded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from typing import Any, Final

logger = logging.getLogger(__name__)

__all__ = ["LogLimiter"]

_MAX_KINDS: Final = 4096


class LogLimiter:
    __slots__ = ("burst", "interval_s", "_kinds")

    def __init__(self, burst: int = 5, interval_s: float = 60.0) -> None:
        self.burst = burst
        self.interval_s = interval_s
        # kind -> [lines let through, suppressed since the last line, time of last line]
        self._kinds: dict[Hashable, list[Any]] = {}

    def allow(self, kind: Hashable, now: float | None = None) -> tuple[bool, int]:
        """(log this one?, how many of this kind were suppressed since the last line)."""
        t = time.monotonic() if now is None else now
        state = self._kinds.get(kind)
        if state is None:
            if len(self._kinds) >= _MAX_KINDS:
                self._forget_oldest(t)
            self._kinds[kind] = [1, 0, t]
            return True, 0
        if state[0] < self.burst:
            state[0] += 1
            state[2] = t
            return True, 0
        if t - state[2] >= self.interval_s:
            suppressed = state[1]
            state[1] = 0
            state[2] = t
            return True, suppressed
        state[1] += 1
        return False, 0

    def log(
        self,
        log: logging.Logger,
        level: int,
        kind: Hashable,
        msg: str,
        *args: Any,
        exc_info: Any = None,
    ) -> None:
        """``log.log(level, msg, *args)`` unless this kind is over its budget."""
        ok, suppressed = self.allow(kind)
        if not ok:
            return
        if suppressed:
            msg += " (%d similar lines suppressed)"
            args = (*args, suppressed)
        log.log(level, msg, *args, exc_info=exc_info)

    def _forget_oldest(self, now: float) -> None:
        # Kinds idle for a whole interval carry no suppressed count worth keeping.
        stale = [k for k, s in self._kinds.items() if now - s[2] >= self.interval_s]
        for k in stale or list(self._kinds)[: _MAX_KINDS // 4]:
            del self._kinds[k]
