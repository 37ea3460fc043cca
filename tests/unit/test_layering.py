"""The package layering stays as docs/architecture.md draws it (import-linter contracts in
pyproject.toml): foundations never import broker code, runtime code never imports the
tools (chaos, cluster, spark, cli), and the broker's packages only import downwards."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is missing: the test extra installs import-linter")
    proc = subprocess.run([exe, "--no-logo", "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BROKEN" not in proc.stdout
