"""Making a log durable off the event loop, and simulating a power cut (REQ-R18, R22, R27).

A flush is split in two so the fsync itself never runs on the broker's event loop:

1. ``Log.begin_flush`` (event loop, microseconds): captures the LEO *before* the fsync
   (the target), the size of every segment file holding unflushed bytes, and a
   ``dup()`` of each file descriptor, so a segment closed or deleted meanwhile (roll,
   retention, truncation, topic deletion) never leaves the worker fsyncing a reused fd.
2. ``FlushJob.run`` (worker thread): ``fdatasync`` of the ``.log`` files (the data and the
   size that finds it — Kafka calls ``FileChannel.force``), optionally the index files,
   then the partition directory when segment files were created or removed.
3. ``Log.complete_flush`` (event loop): the recovery point — the *durable offset* —
   advances to the captured target, never to the LEO at completion time: batches that
   arrived during the fsync are covered by the next one (group commit).

Power-loss simulation (tests and chaos only). A SIGKILL keeps the page cache, so it
cannot show what an unflushed write loses. With ``ODRADEK_FSYNC_LEDGER=1`` in a broker's
environment every completed job appends to ``<partition dir>/odradek-fsync-ledger`` the
size of each file it made durable (``F name size``) and, after a directory fsync, the
segment files that now exist durably (``D name name ...``; ``P`` once the partition
directory's own entry was fsynced in the log dir). ``simulate_power_loss(log_dir)``, run
while the broker is down, leaves what a power cut would in the worst case: every segment
file cut to its last durable size, segment files created after the last directory fsync
deleted, partition directories never made durable removed. It ignores the kernel's own
write-back (dirty pages reach the disk within ~30 s anyway), so it is a worst case.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from odradek.runtime import disk
from odradek.storage.checkpoint import fsync_dir

__all__ = [
    "FlushJob",
    "LEDGER_ENV",
    "LEDGER_NAME",
    "ledger_enabled",
    "read_ledger",
    "DurableState",
    "simulate_power_loss",
    "PowerLossReport",
]

LEDGER_ENV = "ODRADEK_FSYNC_LEDGER"
LEDGER_NAME = "odradek-fsync-ledger"
_SEGMENT_FILE_RE = re.compile(r"^\d{20}\.(log|index|timeindex|txnindex)$")


def ledger_enabled() -> bool:
    """Read at each job: a test can switch it on for an in-process log."""
    return os.environ.get(LEDGER_ENV, "") not in ("", "0", "false")


@dataclass
class FlushJob:
    """Everything the worker thread needs; built on the event loop by ``Log.begin_flush``."""

    directory: Path
    target: int  # the LEO when the job was built: the recovery point after it completes
    generation: int  # Log truncation generation: a truncation meanwhile voids the result
    files: list[tuple[int, str, int]] = field(default_factory=list)  # (dup fd, name, size)
    index_paths: list[Path] = field(default_factory=list)
    fsync_dir: bool = False
    fsync_parent: bool = False
    covers_active: bool = False  # the active segment's file is synced (truncations stick)
    done: bool = False
    error: BaseException | None = None

    def run(self) -> None:
        """The blocking part: safe to call from any thread, exactly once."""
        ledger: list[str] = []
        try:
            for fd, name, size in self.files:
                disk.fdatasync(fd)
                ledger.append(f"F {name} {size}")
            for p in self.index_paths:
                index_size = _fsync_path(p)
                if index_size is not None:
                    ledger.append(f"F {p.name} {index_size}")
            if self.fsync_dir:
                # List first, then fsync: every name listed is durable afterwards.
                names = sorted(n for n in os.listdir(self.directory) if _SEGMENT_FILE_RE.match(n))
                fsync_dir(self.directory)
                ledger.append("D " + " ".join(names))
            if self.fsync_parent:
                fsync_dir(self.directory.parent)
                ledger.append("P")
            self.done = True
        except BaseException as e:  # noqa: BLE001 - reported by complete_flush
            self.error = e
        finally:
            self.close()
        if ledger and self.done and ledger_enabled():
            _append_ledger(self.directory, ledger)

    def close(self) -> None:
        for fd, _, _ in self.files:
            try:
                os.close(fd)
            except OSError:
                pass
        self.files = [(-1, n, s) for _, n, s in self.files]


def _fsync_path(p: Path) -> int | None:
    try:
        fd = os.open(p, os.O_RDONLY)
    except FileNotFoundError:
        return None  # rewritten (tmp + rename) or deleted meanwhile: nothing to sync
    try:
        size = os.fstat(fd).st_size
        disk.fsync(fd)
        return size
    finally:
        os.close(fd)


def _append_ledger(directory: Path, lines: list[str]) -> None:
    # O_APPEND, no fsync of its own: the simulation runs after a process kill, when the
    # page cache (and so this file) is intact. One write per job keeps it cheap.
    try:
        fd = os.open(directory / LEDGER_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except FileNotFoundError:
        return  # the partition was deleted meanwhile
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
    finally:
        os.close(fd)


# =============================================================================== simulation
@dataclass
class DurableState:
    """What the ledger of one partition directory says survived the last fsyncs."""

    sizes: dict[str, int] = field(default_factory=dict)  # file name -> durable size
    files: set[str] | None = None  # segment files durably in the directory (None: never)
    dir_durable: bool = False  # the partition directory's entry in the log dir


def read_ledger(directory: Path) -> DurableState:
    st = DurableState()
    try:
        text = (Path(directory) / LEDGER_NAME).read_text()
    except FileNotFoundError:
        return st
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind = parts[0]
        if kind == "F" and len(parts) == 3:
            # Sizes only grow between truncations; a later, smaller record comes from a
            # file truncated (and then fsynced) by replication: the latest record wins.
            st.sizes[parts[1]] = int(parts[2])
        elif kind == "D":
            st.files = set(parts[1:])
        elif kind == "P":
            st.dir_durable = True
    return st


@dataclass
class PowerLossReport:
    truncated_bytes: int = 0
    truncated_files: int = 0
    deleted_files: list[str] = field(default_factory=list)
    deleted_dirs: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"cut {self.truncated_bytes} bytes from {self.truncated_files} file(s), "
            f"deleted {len(self.deleted_files)} file(s) and {len(self.deleted_dirs)} "
            f"partition dir(s)"
        )


def simulate_power_loss(
    log_dir: Path | str, partitions: Iterable[str] | None = None
) -> PowerLossReport:
    """Leave ``log_dir`` as a power cut would have (worst case; broker must be down).

    Only partition directories holding segment files are touched (``partitions`` limits
    it to those names); checkpoint files are written with their own fsync protocol
    (tmp, fsync, rename) and are left alone.
    """
    root = Path(log_dir)
    rep = PowerLossReport()
    wanted = set(partitions) if partitions is not None else None
    for entry in sorted(os.listdir(root)):
        d = root / entry
        if not d.is_dir() or (wanted is not None and entry not in wanted):
            continue
        names = [n for n in os.listdir(d) if _SEGMENT_FILE_RE.match(n)]
        if not names:
            continue
        st = read_ledger(d)
        if not st.dir_durable or st.files is None:
            # Never fsynced into existence: the directory itself would be gone.
            shutil.rmtree(d, ignore_errors=True)
            rep.deleted_dirs.append(entry)
            continue
        for n in sorted(names):
            p = d / n
            if n not in st.files:
                p.unlink()
                rep.deleted_files.append(f"{entry}/{n}")
                continue
            size = p.stat().st_size
            keep = min(size, st.sizes.get(n, 0))
            if keep < size:
                os.truncate(p, keep)
                rep.truncated_bytes += size - keep
                rep.truncated_files += 1
    return rep
