"""Files that hold a secret (a password, a private key): readable by their owner only,
from the moment they exist.

``write_private`` creates a new file with mode 0600 (``O_CREAT | O_EXCL``, then
``fchmod``, so neither the umask nor an existing file's mode can widen it) beside the
target, writes it, and renames it over the target: a reader sees the old file or the
whole new one, and the secret is never in a file anyone else may open, not even for a
moment. ``private_temp_file`` is the same for key material a library can only load from
a file (Python's ssl): the file is removed as soon as the block that loads it ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PRIVATE_MODE", "private_temp_file", "write_private"]

PRIVATE_MODE = 0o600


def _write_fd(fd: int, data: bytes) -> None:
    os.fchmod(fd, PRIVATE_MODE)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_private(path: str | Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data``, mode 0600."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # left by a crash: never reuse its mode
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_MODE)
    try:
        try:
            _write_fd(fd, raw)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def private_temp_file(data: str | bytes, prefix: str, suffix: str = "") -> Iterator[str]:
    """A temporary 0600 file holding ``data`` for the duration of the block."""
    raw = data.encode() if isinstance(data, str) else data
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix)  # O_EXCL, mode 0600
    try:
        try:
            _write_fd(fd, raw)
        finally:
            os.close(fd)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
