"""Loading a partition's log directory at open: Kafka's ``LogLoader`` (REQ-R18, R23).

What a crash may have left is settled here, before a ``Log`` exists:

* a cleaner swap interrupted after its commit point (a ``.log.swap`` file) is finished
  (``cleaner.complete_swaps``); then leftovers of interrupted rewrites (``.cleaned``,
  ``.deleted``, ``.swap``, ``.tmp``) and index files without a ``.log`` are deleted;
* every segment holding data at or past the recovery point is scanned batch by batch
  (``Segment.load(recover=True)``): the first torn, oversized, non-v2, CRC-invalid or
  discontinuous batch and everything after it go, with the index entries (``.index``,
  ``.timeindex``, ``.txnindex``) that pointed there; segments after such a cut, or
  overlapping the one before, are deleted;
* segments wholly below the recovery point are trusted: their indexes are loaded, or
  rebuilt from the batch headers if missing or malformed.

``Log.open`` turns the result into a ``Log`` and decides what must be made durable.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from odradek.storage.cleaner import complete_swaps
from odradek.storage.log_types import LogConfig
from odradek.storage.segment import Segment

__all__ = ["LoadedSegments", "load_segments"]

_SEGMENT_RE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
# Leftovers of interrupted cleaner/retention/index rewrites; Kafka deletes them on load.
_STRAY_SUFFIXES = (".cleaned", ".deleted", ".swap", ".tmp")


@dataclass
class LoadedSegments:
    """A directory's segments, oldest first (never empty), and what loading found."""

    segments: list[Segment]
    created: bool  # the directory did not exist: a new partition
    recovered: bool  # at least one segment was scanned batch by batch
    damaged: bool  # a scan cut data off (and every later segment was deleted)


def load_segments(
    directory: Path, config: LogConfig, recovery_point: int, log_start_offset: int | None
) -> LoadedSegments:
    created = not directory.is_dir()
    directory.mkdir(parents=True, exist_ok=True)
    ordered: list[int] = []
    # A new partition has nothing to scan: topic creation opens thousands of these on
    # the event loop, and the two directory listings were a tenth of Log.open (issue 29).
    if not created:
        # A crash in the middle of a cleaner swap: a .log.swap file is the commit point;
        # finish it before stray suffixes are deleted.
        complete_swaps(directory)
        ordered = sorted(_segment_bases(directory))
    max_batch = max(config.max_message_bytes, config.segment_bytes)
    segments: list[Segment] = []
    damaged = False
    recovered = False
    for i, base in enumerate(ordered):
        seg = Segment(directory, base, config.index_interval_bytes)
        if damaged or (segments and base < segments[-1].next_offset):
            seg.delete()  # after a truncation point, or overlapping: not trustworthy
            damaged = True
            continue
        next_base = ordered[i + 1] if i + 1 < len(ordered) else None
        if next_base is None and recovery_point > base:
            # Active segment after a clean shutdown: if a (header-checked) load shows no
            # data at or past the recovery point, skip the full CRC scan.
            seg.load(recover=False, max_batch_bytes=max_batch)
            if seg.next_offset > recovery_point or not seg.consistent:
                damaged = seg.load(recover=True, max_batch_bytes=max_batch)
                recovered = True
        elif seg.size == 0:
            # Nothing was written past the recovery point: nothing to check, and no flush
            # to pay for (an fsync per empty log made a broker with 3,000 mostly empty
            # partitions take a minute to start, issue 13). Index files that are absent
            # or empty are what a new segment has: nothing to load or rewrite either.
            if not _index_files_empty(seg):
                seg.load(recover=False, max_batch_bytes=max_batch)
        elif next_base is None or next_base > recovery_point:
            damaged = seg.load(recover=True, max_batch_bytes=max_batch)
            recovered = True
        else:
            seg.load(recover=False, max_batch_bytes=max_batch)
        segments.append(seg)
    if not segments:
        segments.append(Segment(directory, log_start_offset or 0, config.index_interval_bytes))
    return LoadedSegments(segments, created, recovered, damaged)


def _segment_bases(directory: Path) -> set[int]:
    """Base offsets of the directory's ``.log`` files, after deleting stray files and
    index files without a ``.log`` (orphans)."""
    bases: set[int] = set()
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(_STRAY_SUFFIXES):
            _unlink(directory / name)
            continue
        m = _SEGMENT_RE.match(name)
        if m and m.group(2) == "log":
            bases.add(int(m.group(1)))
    for entry in os.scandir(directory):
        m = _SEGMENT_RE.match(entry.name)
        if m and m.group(2) != "log" and int(m.group(1)) not in bases:
            _unlink(directory / entry.name)
    return bases


def _index_files_empty(seg: Segment) -> bool:
    """Both index files of ``seg`` absent or empty (what an empty segment's are)."""
    for path in (seg.index.path, seg.time_index.path):
        try:
            if os.stat(path).st_size:
                return False
        except FileNotFoundError:
            pass
    return True


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
