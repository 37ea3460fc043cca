"""The simulator's disk: what each fsync made durable, and what a power cut leaves.

Installed on the ``odradek.runtime.disk`` seam for one run (``recording``). The model (the
worst case POSIX allows, on a journalling file system; the OS's own write-back, which on
Linux reaches the disk within ~30 s, happens only when ``writeback`` says so):

* **Data.** A file's durable content is what it held at its last ``fsync``/``fdatasync``
  (the content of its inode: the seam hands us the descriptor). After a power cut a file
  whose unsynced change only appended keeps its durable content plus a seeded-random
  prefix of the appended bytes (a torn tail: a batch cut anywhere, headers included);
  any other unsynced change (an overwrite, a truncation) is lost whole -- a truncated
  log grows back to its durable length.
* **Names.** A directory's entries (create, rename, unlink) are durable as of its last
  ``fsync``; nothing after it survives: a file created since is gone, a name renamed
  over since points at its old file again (with that file's durable content), a name
  unlinked since comes back. Kafka's checkpoint protocol (write a temporary file, fsync
  it, rename it over the old one, fsync the directory) therefore survives whole or not
  at all; a rename not followed by a directory fsync is undone. A directory never
  fsynced keeps none of the files created in it.
* **Write-back.** ``writeback(root)`` stands for the kernel flushing dirty pages and
  committing its journal on its own (Linux: within ~30 s; ext4 commits metadata every
  5 s): everything under ``root`` becomes durable. The power-loss profile calls it for a
  seeded-random broker every 0.5-4 virtual seconds, so a cut finds files in every state
  -- a checkpoint older than the log, a segment durable up to some batch.
* **Directories themselves** are kept (their own creation is taken as durable): a broker
  restarts with its partition directories, possibly empty. A real power cut may lose a
  never-synced directory too; Kafka then starts the partition empty, which the model's
  "no files kept" already reaches.
* **Deleted logs' directories** (``<topic>-<partition>.<id>-delete``, renamed so by the
  replica's delete and removed later) are left as they are: start-up removes them
  unread, so what a cut does to them cannot matter. (The model keys what a directory
  fsync made durable by path, not following a directory's rename: it would report every
  file there as lost.)

Files are identified by inode. Every inode the model remembers is pinned by a hard link
in a directory of its own (``close`` removes it), so the file system cannot hand its
number to a new file: a checkpoint written tmp-fsync-rename twice would otherwise get the
first one's inode back and pass for it (seed 70 of the power-loss profile did, before).
Everything here runs on the simulator's one thread; the real ``fsync`` is skipped (the
temporary directory needs no durability).
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from odradek.runtime import disk
from odradek.storage.deleted_logs import is_delete_dir

__all__ = ["SimDisk", "PowerLossReport", "recording"]


@dataclass
class PowerLossReport:
    torn: list[str] = field(default_factory=list)  # "name: kept/had bytes"
    deleted: list[str] = field(default_factory=list)  # created since the last dir fsync
    restored: list[str] = field(default_factory=list)  # renamed over / unlinked since

    def __str__(self) -> str:
        parts = []
        if self.torn:
            parts.append("cut " + ", ".join(self.torn))
        if self.deleted:
            parts.append("lost " + ", ".join(self.deleted))
        if self.restored:
            parts.append("back " + ", ".join(self.restored))
        return "; ".join(parts) or "nothing unsynced"


@dataclass
class _Entry:
    ino: int
    content: bytes | None  # the inode's durable content when the directory was synced


class SimDisk:
    def __init__(self, scratch: str | None = None) -> None:
        # Where the pins go: it must be the log directories' file system (a hard link
        # cannot cross one); None: the default temporary directory.
        self.scratch = scratch
        self._content: dict[int, bytes] = {}  # inode -> durable content
        self._listings: dict[str, dict[str, _Entry]] = {}  # directory -> durable entries
        self.fsyncs = 0
        self._pins: str | None = None  # directory of hard links keeping inodes alive
        self._pinned: set[int] = set()

    def _pin(self, ino: int, path: str) -> None:
        if ino in self._pinned:
            return
        if self._pins is None:
            self._pins = tempfile.mkdtemp(prefix="odradek-simdisk-pins-", dir=self.scratch)
        try:
            os.link(path, os.path.join(self._pins, str(ino)))
        except FileNotFoundError:
            return  # unlinked meanwhile: the number may be reused, nothing can name it
        self._pinned.add(ino)

    def close(self) -> None:
        if self._pins is not None:
            shutil.rmtree(self._pins, ignore_errors=True)
            self._pins = None
        self._pinned.clear()

    # ------------------------------------------------------------------ the seam
    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            path = os.readlink(f"/proc/self/fd/{fd}")
            files = _files(path)
            for name, ino in files.items():
                self._pin(ino, os.path.join(path, name))
            self._listings[path] = {
                name: _Entry(ino, self._content.get(ino)) for name, ino in files.items()
            }
            return
        self._pin(st.st_ino, os.readlink(f"/proc/self/fd/{fd}"))
        # Through /proc: the descriptor may be write-only; this opens the same inode.
        with open(f"/proc/self/fd/{fd}", "rb") as f:
            self._content[st.st_ino] = f.read()

    def writeback(self, root: Path) -> None:
        """The kernel's own write-back: everything under ``root`` reaches the disk, data
        and directory entries, as if each file and directory had been fsynced."""
        for dirpath, _, _ in os.walk(os.path.realpath(root)):
            listing: dict[str, _Entry] = {}
            for name, ino in _files(dirpath).items():
                try:
                    with open(os.path.join(dirpath, name), "rb") as f:
                        self._content[ino] = f.read()
                    self._pin(ino, os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                listing[name] = _Entry(ino, self._content[ino])
            self._listings[dirpath] = listing

    # ------------------------------------------------------------------ the cut
    def power_loss(self, root: Path, rng: random.Random) -> PowerLossReport:
        """Leave every file under ``root`` as the model says a power cut would (the
        processes using them must be gone). Deterministic for a given ``rng`` state."""
        rep = PowerLossReport()
        root = Path(os.path.realpath(root))  # as /proc/self/fd names the directories
        for dirpath, dirnames, _ in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not is_delete_dir(d))
            durable = self._listings.get(dirpath, {})
            current = _files(dirpath)
            rel = os.path.relpath(dirpath, root)
            for name in sorted(set(current) | set(durable)):
                p = os.path.join(dirpath, name)
                label = name if rel == "." else f"{rel}/{name}"
                d = durable.get(name)
                if d is None:
                    os.unlink(p)
                    rep.deleted.append(label)
                elif current.get(name) != d.ino:
                    # Renamed over or unlinked since the directory's fsync: the old file.
                    if name in current:
                        os.unlink(p)
                    # Its latest fsync if its number is pinned (not recycled), else what
                    # it held when the directory was synced.
                    old = self._content.get(d.ino) if d.ino in self._pinned else None
                    _write(p, old if old is not None else d.content or b"")
                    rep.restored.append(label)
                else:
                    self._tear(p, d.ino, rng, label, rep)
        self.writeback(root)  # after the cut, what is on disk is durable by definition
        return rep

    def _tear(self, p: str, ino: int, rng: random.Random, label: str, rep: PowerLossReport) -> None:
        with open(p, "rb") as f:
            cur = f.read()
        dur = self._content.get(ino, b"")
        if cur == dur:
            return
        if cur.startswith(dur):
            keep = dur + cur[len(dur) : len(dur) + rng.randint(0, len(cur) - len(dur))]
        else:
            keep = dur
        if keep != cur:
            _write(p, keep)
            rep.torn.append(f"{label} {len(keep)}/{len(cur)}")


def _files(directory: str) -> dict[str, int]:
    """Regular files in ``directory``: name -> inode."""
    out: dict[str, int] = {}
    with os.scandir(directory) as it:
        for e in it:
            if e.is_file(follow_symlinks=False):
                out[e.name] = e.inode()
    return out


def _write(p: str, data: bytes) -> None:
    # In place (same inode when the file exists): open descriptors elsewhere see the cut,
    # as they would after a real one -- though every process using them is gone by now.
    with open(p, "r+b" if os.path.exists(p) else "wb") as f:
        f.write(data)
        f.truncate(len(data))


@contextmanager
def recording(sim: SimDisk) -> Iterator[SimDisk]:
    """Route the storage layer's fsyncs to ``sim`` for the duration."""
    disk.install(sim.fsync, sim.fsync)
    try:
        yield sim
    finally:
        disk.restore()
        sim.close()
