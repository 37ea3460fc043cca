"""Lint, format and type checks run with the suite (scripts/test.sh, hence CI): ruff and
``ruff format --check`` on everything we ship or run (src/, tests/, bench/: a bug in a
test or a benchmark misleads as much as one in the broker), and mypy on src/ (recorded
exceptions per module in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("src", "tests", "bench")


def _tool(name: str) -> str:
    exe = shutil.which(name, path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail(f"{name} is missing: the test extra installs it")
    return exe


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint() -> None:
    proc = _run(_tool("ruff"), "check", "--no-cache", "--output-format", "concise", *CHECKED)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format() -> None:
    proc = _run(_tool("ruff"), "format", "--no-cache", "--check", *CHECKED)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy() -> None:
    # The cache lives in the venv so repeated runs take seconds, not a minute.
    cache = Path(sys.executable).parent.parent / ".mypy_cache"
    proc = _run(_tool("mypy"), "--cache-dir", str(cache))
    assert proc.returncode == 0, proc.stdout + proc.stderr
