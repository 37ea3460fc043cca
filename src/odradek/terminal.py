"""Terminal output for people: a rich progress line for long commands, full logs in
files, and where those files are.

* ``RunOutput`` -- a long command's screen: ``say()`` prints a timestamped line above a
  live progress bar (``progress()``), ``detail()`` goes to the run's log file only;
  ``--verbose`` sends details to the terminal too. When stdout is not a terminal (CI,
  a pipe), rich prints plain lines and no bar.
* ``librdkafka_logger(path)`` -- confluent-kafka clients log through Python logging
  (their ``logger`` setting) into a file instead of writing ``%3|...|FAIL|`` lines to
  stderr; a broker that is down on purpose should not flood the screen.
* ``quiet_spark(builder, log_path)`` -- Spark without console progress bars, at WARN,
  its JVM's own output (start-up banner, warnings) in a log file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

logger = logging.getLogger(__name__)

__all__ = ["RunOutput", "librdkafka_logger", "quiet_spark"]


class RunOutput:
    """One long command's terminal and log file."""

    def __init__(
        self, log_path: Path, *, verbose: bool = False, file: TextIO | None = None
    ) -> None:
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.verbose = verbose
        out = file or sys.stdout
        # soft_wrap: long lines (paths) are not broken; a file or pipe gets 120 columns
        # for tables rather than rich's default of 80.
        self.console = Console(
            file=out, highlight=False, soft_wrap=True, width=None if out.isatty() else 120
        )
        self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115
        self._progress: Progress | None = None
        self.t0 = time.monotonic()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._log.close()

    def __enter__(self) -> RunOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_log(self, msg: str) -> None:
        self._log.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
        self._log.flush()

    def say(self, msg: str, style: str | None = None) -> None:
        """A line people should see (and the log keeps)."""
        self._write_log(msg)
        self.console.print(
            f"[dim]{time.strftime('%H:%M:%S')}[/dim] {msg}", style=style, markup=True
        )

    def detail(self, msg: str) -> None:
        """A line for the log file (and the terminal with --verbose)."""
        self._write_log(msg)
        if self.verbose:
            self.console.print(
                f"[dim]{time.strftime('%H:%M:%S')} {msg}[/dim]", markup=True, highlight=False
            )

    def progress(self, description: str, total: float | None) -> TaskID:
        """Start (or add to) the live progress display; returns the task to update.
        Not on a terminal (a pipe, CI): no bar at all, the say() lines tell the story."""
        if not self.console.is_terminal:
            return TaskID(-1)
        if self._progress is None:
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
        return self._progress.add_task(description, total=total)

    def update(self, task: TaskID, **kw: Any) -> None:
        if self._progress is not None and task >= 0:
            self._progress.update(task, **kw)

    def done(self, task: TaskID) -> None:
        if self._progress is not None and task >= 0:
            self._progress.remove_task(task)
            if not self._progress.task_ids:
                self._progress.stop()
                self._progress = None

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def librdkafka_logger(
    path: Path, *, verbose: bool = False, name: str = "odradek.librdkafka"
) -> logging.Logger:
    """A logger for confluent-kafka's ``logger`` setting: librdkafka's lines go to
    ``path`` (and stderr with ``verbose``), never straight to the terminal."""
    lg = logging.getLogger(name)
    lg.setLevel(logging.DEBUG)
    lg.propagate = False
    target = str(Path(path).resolve())
    if not any(getattr(h, "baseFilename", None) == target for h in lg.handlers):
        h = logging.FileHandler(target)
        h.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s"))
        lg.addHandler(h)
    if verbose and not any(type(h) is logging.StreamHandler for h in lg.handlers):
        lg.addHandler(logging.StreamHandler(sys.stderr))
    return lg


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point fd 2 at ``path`` while the block runs: a child started meanwhile (Spark's
    JVM) keeps writing there for its whole life; ours is restored afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def quiet_spark(builder: Any, log_path: Path, *, verbose: bool = False) -> Any:
    """``builder.getOrCreate()`` with Spark's console progress off, log level WARN, and
    the JVM's stderr (log4j's console appender) in ``log_path`` unless ``verbose``."""
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if verbose:
        spark = builder.getOrCreate()
    else:
        with _stderr_to(Path(log_path)):
            spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
