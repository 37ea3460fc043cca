"""Keep a broker's settled heap out of full garbage collections (``gc.freeze``).

CPython's full (generation-2) collection scans every tracked object and stops every
thread -- the event loop all requests run on included -- for as long as that takes. A
broker's long-lived objects are mostly its partitions: about 70 tracked objects per
replica (logs, segments, indexes, epoch caches, replica state), so at 10,000 partitions
RF 3 a broker holds 500,000-700,000 and one full collection took 120-435 ms on a quiet
machine. Under load they come often: at 1,000 records/s a broker's long polls and
in-flight requests outlive the young generations fast enough that a full collection ran
about every 30 s per broker (docs/benchmarks.md, 2026-12-07 evening), each one a
latency spike every client saw.

Those objects do not become garbage while the partitions stay, so scanning them finds
nothing. Once the broker's partitions have settled (no partition added or removed for
``odradek.heap.freeze.settle.ms``), ``gc.freeze()`` moves every tracked object into the
interpreter's permanent generation, which collections skip; later full collections scan
only what was allocated since. The price is that a frozen object that becomes cyclic
garbage is not reclaimed while frozen. That is bounded three ways:

* removing partitions (deleted, moved away) unfreezes the heap at once once they are
  ``UNFREEZE_REMOVED_FRACTION`` of the partitions frozen, so their objects go with the
  next full collection; fewer wait for the next point below (unfreezing costs one
  full-heap collection: a topic of 3 partitions deleted beside 10,000 is not worth one);
* the heap is unfrozen at the latest ``MAX_FROZEN_S`` after it was first frozen, so any
  other frozen garbage (closed connections, finished requests caught by the freeze) is
  reclaimed within that time: one full-heap collection per ``MAX_FROZEN_S`` instead of
  one every half minute;
* after an unfreeze, nothing is frozen again until a full collection has run, so what the
  unfreeze released is actually scanned before it could be frozen again.

The decisions (``FreezePolicy``) are pure -- time, the partition count, the removals
and the count of full collections in, an action out -- and ``HeapFreezer`` applies them
with the ``gc`` module from the broker's loop every ``TICK_S``.
"""

from __future__ import annotations

import enum
import gc
import logging
import time
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "FreezePolicy",
    "HeapAction",
    "HeapFreezer",
    "MAX_FROZEN_S",
    "TICK_S",
    "UNFREEZE_REMOVED_FRACTION",
]

TICK_S = 5.0  # how often the broker asks the policy
MAX_FROZEN_S = 900.0  # the longest any object stays frozen (see the module docstring)
UNFREEZE_REMOVED_FRACTION = 0.1  # of the partitions hosted when last frozen


class HeapAction(enum.Enum):
    NONE = "none"
    FREEZE = "freeze"
    UNFREEZE = "unfreeze"


@dataclass
class FreezePolicy:
    """When to freeze and unfreeze the heap (see the module docstring). ``decide`` is
    called with the time, the partitions the broker hosts, how many it has removed in
    all, and how many full collections have run in all."""

    settle_s: float
    max_frozen_s: float = MAX_FROZEN_S
    _partitions: int = -1
    _removals: int = 0
    _changed_at: float = 0.0
    _frozen_since: float | None = None  # when the oldest object still frozen was frozen
    _settled_frozen: bool = False  # frozen since the last change: nothing new to freeze
    _collections_at_unfreeze: int | None = None  # a full collection must follow it
    _frozen_partitions: int = 0  # hosted at the last freeze
    _removals_at_freeze: int = 0

    def decide(self, now: float, partitions: int, removals: int, full_gcs: int) -> HeapAction:
        if partitions != self._partitions or removals != self._removals:
            self._partitions, self._removals = partitions, removals
            self._changed_at = now
            self._settled_frozen = False
            removed = removals - self._removals_at_freeze
            if (
                self._frozen_since is not None
                and removed > 0
                and removed >= UNFREEZE_REMOVED_FRACTION * self._frozen_partitions
            ):
                return self._unfreeze(full_gcs)
        if self._frozen_since is not None and now - self._frozen_since >= self.max_frozen_s:
            self._changed_at = now  # settle again before freezing what is left
            return self._unfreeze(full_gcs)
        if self._settled_frozen or now - self._changed_at < self.settle_s:
            return HeapAction.NONE
        if self._collections_at_unfreeze is not None:
            if full_gcs <= self._collections_at_unfreeze:
                return HeapAction.NONE  # what the unfreeze released is not scanned yet
            self._collections_at_unfreeze = None
        self._settled_frozen = True
        if self._frozen_since is None:
            self._frozen_since = now
            self._removals_at_freeze = removals
        self._frozen_partitions = max(self._frozen_partitions, partitions)
        return HeapAction.FREEZE

    def _unfreeze(self, full_gcs: int) -> HeapAction:
        self._frozen_since = None
        self._frozen_partitions = 0
        self._settled_frozen = False
        self._collections_at_unfreeze = full_gcs
        return HeapAction.UNFREEZE


class HeapFreezer:
    """Applies ``FreezePolicy`` to this process's ``gc`` (``gc_module``: a test's)."""

    def __init__(self, settle_s: float, gc_module: Any = gc) -> None:
        self.policy = FreezePolicy(settle_s)
        self._gc = gc_module
        # Whether anything is frozen. (Not how much: gc.get_freeze_count() walks the
        # frozen objects, 6 ms at 600,000, on the loop.)
        self.frozen = False
        self.freezes = 0
        self.unfreezes = 0

    def tick(self, partitions: int, removals: int, now: float | None = None) -> HeapAction:
        full_gcs = int(self._gc.get_stats()[2]["collections"])
        action = self.policy.decide(
            time.monotonic() if now is None else now, partitions, removals, full_gcs
        )
        if action is HeapAction.FREEZE:
            # The young generations first (cheap: recent objects only), so what is
            # frozen is what survived them.
            self._gc.collect(1)
            self._gc.freeze()
            self.frozen = True
            self.freezes += 1
            logger.info("heap settled (%d partitions): frozen out of full collections", partitions)
        elif action is HeapAction.UNFREEZE:
            self._gc.unfreeze()
            self.frozen = False
            self.unfreezes += 1
            logger.info(
                "heap unfrozen (%d partitions): the next full collection scans it", partitions
            )
        return action

    def stop(self) -> None:
        """Unfreeze (a broker stopped in a process that goes on: tests, the simulator)."""
        if self.frozen:
            self._gc.unfreeze()
            self.frozen = False
